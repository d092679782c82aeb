package task

import "fmt"

// State is where an active task is in its life.
//
//	Created ──► Restoring ──► Running
//	   │            │  ▲          │
//	   │            ▼  │          ▼
//	   │          Suspended ◄─────┘
//	   ▼            │
//	 Closed ◄───────┘   (every state but Closed may close)
//
// A task is Created with its stores open, Restoring while it reads its
// changelogs up to the end offsets taken when restoration began, Running
// while it processes input, and Suspended between a revocation and the
// assignment that follows it: a suspended task keeps its stores open so
// that, if it is assigned back, it resumes without restoring anything.
type State int

// The states of an active task.
const (
	Created State = iota
	Restoring
	Running
	Suspended
	Closed
)

var stateNames = [...]string{"created", "restoring", "running", "suspended", "closed"}

func (s State) String() string {
	if s < 0 || int(s) >= len(stateNames) {
		return fmt.Sprintf("State(%d)", int(s))
	}
	return stateNames[s]
}

// validTransitions lists, for each state, the states it may move to.
var validTransitions = map[State][]State{
	Created:   {Restoring, Closed},
	Restoring: {Running, Suspended, Closed},
	Running:   {Suspended, Closed},
	Suspended: {Restoring, Running, Closed},
	Closed:    nil,
}

// CanTransition reports whether a task may move from one state to another.
func CanTransition(from, to State) bool {
	for _, s := range validTransitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// TransitionError reports an illegal state change, which is always a bug in
// the caller.
type TransitionError struct {
	Task     ID
	From, To State
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("task %s: illegal transition %s -> %s", e.Task, e.From, e.To)
}

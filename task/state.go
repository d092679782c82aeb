package task

import "fmt"

// State is where an instance's replica of a task is in its life: the one
// lifecycle of a task's state on an instance, whether it runs there as
// the active, follows as a standby, or waits between the two.
//
//	from       to
//	Created    Restoring (an active opened here), Standby, Warmup (a standby opened here)
//	Restoring  Running (restored), Parked (revoked)
//	Running    Parked (revoked)
//	Parked     Restoring (claimed by a thread), Standby, Warmup (adopted)
//	Standby    Restoring (promoted), Warmup (retagged)
//	Warmup     Restoring (promoted), Standby (retagged)
//	any state but Closed may move to Closed, which is final.
//
// A replica is Created when its stores are opened (or being opened) and
// it has no role yet. An active replica is Restoring while it reads its
// changelogs up to the end offsets taken when restoration began and
// Running while it processes input. A revoked active is Parked: its stores
// stay open, nobody processes or follows them, until the next assignment
// says where the task goes — back to Restoring on whichever thread claims
// it, or to Standby or Warmup. A Standby follows its changelogs; a Warmup
// is a standby placed to catch up before its task moves here, and the
// assignor may turn one into the other without moving any state. A
// standby or warmup assigned as active is promoted: it restores the
// changelog tail and runs.
//
// App.Tasks reports the states of active tasks (Created, Restoring,
// Running); the roles the assignor and queries see are derived from the
// state by the runtime.
type State int

// The states of a replica. The first three keep the values they had when
// State described active tasks only.
const (
	Created State = iota
	Restoring
	Running
	Parked
	Standby
	Warmup
	Closed
)

var stateNames = [...]string{"created", "restoring", "running", "parked", "standby", "warmup", "closed"}

func (s State) String() string {
	if s < 0 || int(s) >= len(stateNames) {
		return fmt.Sprintf("State(%d)", int(s))
	}
	return stateNames[s]
}

// Active reports whether a replica in state s belongs to a stream thread
// as an active task.
func (s State) Active() bool { return s == Restoring || s == Running }

// Following reports whether a replica in state s follows its changelogs
// as a standby.
func (s State) Following() bool { return s == Standby || s == Warmup }

// transitions lists, for each state, the states it may move to.
var transitions = [...][]State{
	Created:   {Restoring, Standby, Warmup, Closed},
	Restoring: {Running, Parked, Closed},
	Running:   {Parked, Closed},
	Parked:    {Restoring, Standby, Warmup, Closed},
	Standby:   {Restoring, Warmup, Closed},
	Warmup:    {Restoring, Standby, Closed},
	Closed:    nil,
}

// CanTransition reports whether a replica may move from one state to
// another.
func CanTransition(from, to State) bool {
	if from < 0 || int(from) >= len(transitions) {
		return false
	}
	for _, s := range transitions[from] {
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

package taskrun

import (
	"github.com/eddystreams/eddy/task"
)

// Observer is told of every transition a Lifecycle is asked to make; err
// is set, and the state left as it was, when the table forbids it.
type Observer func(id task.ID, from, to task.State, err error)

// Lifecycle is an active task's state, changed only along the transitions
// task.CanTransition allows. Only active tasks keep one: every other
// replica's state is the instance core's (internal/instancecore). The zero
// value is a Created task 0_0 with no observer.
type Lifecycle struct {
	id      task.ID
	state   task.State
	observe Observer
}

// NewLifecycle starts an active task's lifecycle, Created: its thread has
// taken the replica's stores (or is about to open them) and it has no role
// yet.
func NewLifecycle(id task.ID, observe Observer) Lifecycle {
	return Lifecycle{id: id, state: task.Created, observe: observe}
}

// State returns the replica's state.
func (l *Lifecycle) State() task.State { return l.state }

// To moves the replica to another state, or returns a *task.TransitionError
// if the table forbids the move.
func (l *Lifecycle) To(to task.State) error {
	from := l.state
	var err error
	if !task.CanTransition(from, to) {
		err = &task.TransitionError{Task: l.id, From: from, To: to}
	} else {
		l.state = to
	}
	if l.observe != nil {
		l.observe(l.id, from, to, err)
	}
	return err
}

package runtime

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/eddystreams/eddy/internal/heldlog"
)

// State is the lifecycle state of an App, in the spirit of Kafka Streams'
// KafkaStreams.State:
//
//	Created ──Start──▶ Rebalancing ◀──▶ Running
//	   │                   │               │
//	   └──────Close/Kill───┴───────────────┴──▶ PendingShutdown ──▶ NotRunning
//	                       │               │
//	                       └─fatal error───┴──▶ PendingError ──▶ Failed
//
// Running means every stream thread has received its assignment and has
// none of its active tasks restoring or waiting to start; any thread
// losing or giving up its partitions (the start of a rebalance) moves the
// instance back to Rebalancing. Standbys and warmups catching up do not
// hold the instance in Rebalancing: they serve no input. Queries are served
// in both Rebalancing and Running. The transitions allowed are exactly
// those of validTransition.
type State int32

// The states of an App.
const (
	// StateCreated: New returned; Start has not been called.
	StateCreated State = iota
	// StateRebalancing: started, and some stream thread has no
	// assignment yet (its group is rebalancing) or has an active task
	// restoring or waiting for another thread to let it go.
	StateRebalancing
	// StateRunning: every stream thread has its assignment and all its
	// active tasks process input.
	StateRunning
	// StatePendingShutdown: Close or Kill is stopping the instance.
	StatePendingShutdown
	// StateNotRunning: stopped by Close or Kill. Terminal.
	StateNotRunning
	// StatePendingError: a fatal error (see Err) is stopping the
	// instance.
	StatePendingError
	// StateFailed: stopped by a fatal error, which Err returns.
	// Terminal.
	StateFailed
)

var stateNames = [...]string{
	StateCreated:         "created",
	StateRebalancing:     "rebalancing",
	StateRunning:         "running",
	StatePendingShutdown: "pending-shutdown",
	StateNotRunning:      "not-running",
	StatePendingError:    "pending-error",
	StateFailed:          "failed",
}

func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// IsRunningOrRebalancing reports whether the instance is started and not
// stopping: it processes, or will again once the rebalance is over.
func (s State) IsRunningOrRebalancing() bool {
	return s == StateRebalancing || s == StateRunning
}

// Terminal reports whether no transition leaves s.
func (s State) Terminal() bool { return s == StateNotRunning || s == StateFailed }

// transitions lists, for every state, the states it may move to. It is the
// one place the state machine is defined; setState refuses anything else.
var transitions = map[State][]State{
	StateCreated:         {StateRebalancing, StatePendingShutdown},
	StateRebalancing:     {StateRunning, StatePendingShutdown, StatePendingError},
	StateRunning:         {StateRebalancing, StatePendingShutdown, StatePendingError},
	StatePendingShutdown: {StateNotRunning},
	StatePendingError:    {StateFailed},
}

// validTransition reports whether an App may move from one state to
// another.
func validTransition(from, to State) bool {
	return slices.Contains(transitions[from], to)
}

// setState moves the App to state to, if it is in one of the states from
// (any state when from is empty), and reports whether it moved. A move the
// table does not allow is a bug: it is refused, logged and counted
// (badTransitions, which the tests check). The move is queued for the
// listener under stateMu, so the queue holds the moves in the order they
// happened, and delivered once stateMu is released (see notices); it is
// logged then too, since the logger is user code as well.
func (a *App) setState(to State, from ...State) bool {
	var logs heldlog.Lines
	a.stateMu.Lock()
	moved := a.setStateLocked(&logs, to, from...)
	a.stateMu.Unlock()
	logs.Write(a.log)
	if moved {
		a.notices.deliver(a.cfg.StateListener)
	}
	return moved
}

// setStateLocked is setState with stateMu held; the caller writes logs and
// delivers the notices once it has released it.
func (a *App) setStateLocked(logs *heldlog.Lines, to State, from ...State) bool {
	cur := State(a.state.Load())
	if len(from) > 0 && !slices.Contains(from, cur) {
		return false
	}
	if !validTransition(cur, to) {
		a.badTransitions.Add(1)
		logs.Add(slog.LevelError, "refusing an illegal application state transition (a bug)", "from", cur, "to", to)
		return false
	}
	a.state.Store(int32(to))
	logs.Add(slog.LevelInfo, "state", "from", cur, "to", to)
	if a.cfg.StateListener != nil {
		a.notices.add(cur, to)
	}
	return true
}

// stateNotice is one move of the App's State owed to the listener.
type stateNotice struct{ from, to State }

// stateNotices delivers the moves of the App's State to the listener
// exactly once each, in the order they happened, without any lock held
// while the listener runs: a listener may call State or Stats, start Close
// on another goroutine and block until the State moves on, and no change of
// State waits for it.
// Whichever goroutine finds nobody delivering becomes the deliverer and
// calls the listener until the queue is empty, so one call runs at a time;
// a goroutine that changes the State while another delivers (a listener
// calling Close among them) leaves its move queued for that one and
// returns at once.
type stateNotices struct {
	// mu guards queue and delivering. It is taken inside stateMu, by add,
	// and never held across the listener.
	mu         sync.Mutex
	queue      []stateNotice
	delivering bool
}

// add queues a move; stateMu is held, which orders the queue.
func (n *stateNotices) add(from, to State) {
	n.mu.Lock()
	n.queue = append(n.queue, stateNotice{from, to})
	n.mu.Unlock()
}

// deliver calls l for every queued move, unless another goroutine is
// delivering them already. Called with no lock held.
func (n *stateNotices) deliver(l func(old, new State)) {
	n.mu.Lock()
	if n.delivering {
		n.mu.Unlock()
		return
	}
	n.delivering = true
	emptied := false
	defer func() {
		// A listener that panicked: the next move delivers what is left.
		if !emptied {
			n.mu.Lock()
			n.delivering = false
			n.mu.Unlock()
		}
	}()
	for len(n.queue) > 0 {
		next := n.queue[0]
		n.queue = n.queue[1:]
		n.mu.Unlock()
		l(next.from, next.to)
		n.mu.Lock()
	}
	n.delivering, emptied = false, true
	n.mu.Unlock()
}

// rebalanceStarted moves a running instance to Rebalancing: one of its
// threads has just given up its partitions, or lost them, or left the
// group. Called after the thread published that it is not settled
// (ActPublish comes first in its batch), so that a concurrent settled check
// cannot see it still settled.
func (a *App) rebalanceStarted() {
	a.setState(StateRebalancing, StateRunning)
}

// maybeRunning moves a rebalancing instance to Running once every thread
// has settled. Threads call it after anything that may settle them: an
// assignment, a restoration finished, a waiting task started. The check
// and the move happen under stateMu, as does rebalanceStarted, so a thread
// unsettling itself meanwhile is never missed.
func (a *App) maybeRunning() {
	if a.State() != StateRebalancing || !a.threadsUp.Load() {
		return
	}
	var logs heldlog.Lines
	a.stateMu.Lock()
	moved := State(a.state.Load()) == StateRebalancing && a.settled() &&
		a.setStateLocked(&logs, StateRunning, StateRebalancing)
	a.stateMu.Unlock()
	logs.Write(a.log)
	if moved {
		a.notices.deliver(a.cfg.StateListener)
	}
}

// settled reports whether every stream thread has received its assignment,
// is not about to rejoin after a cooperative revocation (the group
// rebalances again at once to assign what it gave up), and has no active
// task restoring or waiting for another thread to let it go. Only call it
// once threadsUp is set: a.threads is complete then.
func (a *App) settled() bool {
	if len(a.threads) == 0 {
		return false
	}
	for _, th := range a.threads {
		if !th.settled.Load() || th.rest.active() {
			return false
		}
	}
	return true
}

package threadcore

// The core of a thread: its state and the queries on it, which events each
// mode accepts, and Step, which checks an event before it applies it.

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/eddystreams/eddy/task"
)

// ErrRefused wraps every event the core refuses: one its mode does not
// accept, or one that would break a transition table. The core's state is
// unchanged by a refused event.
var ErrRefused = errors.New("threadcore: event refused")

// Config is what the core needs to know of its thread.
type Config struct {
	Guarantee Guarantee
	// Cooperative is set when the thread's group member rebalances
	// cooperatively (KIP-429).
	Cooperative bool
	// CommitInterval is how long after a commit began the next one is
	// due.
	CommitInterval time.Duration
	// JoinGrace is how long past CommitInterval an interval commit
	// waits for a cooperative join's sync: long enough for the other
	// members to notice the rebalance and join (the thread sets two
	// heartbeat intervals).
	JoinGrace time.Duration
	// DrainedCommitDelay spaces a drained thread's early commits (see
	// drainedBurst); at or above CommitInterval there are none.
	DrainedCommitDelay time.Duration
}

type slot struct {
	state  Slot
	paused bool // Waiting: its input was paused once
	// handle is the driver's object for the task, given with EvClaimed;
	// the core only hands it back.
	handle any
	// work: the task consumed input since its last commit or discard;
	// unflushed: since the last flush.
	work, unflushed bool
}

// Core is the task manager of one stream thread. It is not safe for
// concurrent use: the thread steps it under its own lock, which it releases
// while it carries the answered batch out; the core marks the batch in
// flight until the driver lands it (flight.go).
type Core struct {
	cfg    Config
	mode   Mode
	phase  Phase
	halted bool // sticky: modes that end return to Halted, not Processing
	back   Mode // the mode a commit, abort or reconnection returns to
	// The commit in flight: what for, the tasks it covers and, for a
	// revocation, the tasks to release after it.
	purpose   purpose
	committed []task.ID
	releasing []task.ID
	slots     map[task.ID]*slot
	// heldIDs and runningIDs list the slots Restoring or Running, and Running,
	// sorted, and claiming and waiting count the slots Claiming and
	// Waiting: they are kept as slots move, so that an idle thread's
	// steps cost nothing per task it holds. worked lists the slots whose
	// work was set since the last commit (some may have lost it since).
	heldIDs, runningIDs []task.ID
	claiming, waiting   int
	worked              []task.ID
	// commitBuf holds committed's tasks from one commit to the next, so
	// that an idle thread's interval commit allocates nothing.
	commitBuf []task.ID
	// dirty: the open transaction holds work (records processed or
	// sent); consumed: a running task consumed input since the last
	// commit (for early commits of a drained thread).
	dirty, consumed bool
	// rebalance: commit before letting a waiting rebalance go on.
	rebalance bool
	// now is the latest At of an event. lastCommit is when the last
	// commit began (the first event's time before any); recent holds the
	// start times of the last drainedBurst commits, oldest at
	// recentNext.
	now, lastCommit time.Time
	recent          [drainedBurst]time.Time
	recentNext      int
	// active is the last sync's actives, nil before the first.
	active []task.ID
	// settled is the last Settled an ActPublish carried.
	settled bool
	// flight is what the driver is carrying out (flight.go).
	flight flight
	out    []Action
	// moved, when set, is told of every move of the mode, the phase or a
	// slot, by table name, so that tests can tell that each table's moves
	// are all made.
	moved func(table string, from, to uint8)
}

// New returns the core of a thread that just connected: no assignment, no
// task, processing.
func New(cfg Config) *Core {
	return &Core{cfg: cfg, slots: make(map[task.ID]*slot)}
}

// Mode is the thread's current mode.
func (c *Core) Mode() Mode { return c.mode }

// Phase is the thread's current group phase.
func (c *Core) Phase() Phase { return c.phase }

// Cooperative reports whether the thread's group member rebalances
// cooperatively.
func (c *Core) Cooperative() bool { return c.cfg.Cooperative }

// Halted reports whether the thread stopped processing for good.
func (c *Core) Halted() bool { return c.halted }

// Dirty reports whether the open transaction holds work.
func (c *Core) Dirty() bool { return c.dirty }

// Slot returns the state of a task the thread holds or waits for.
func (c *Core) Slot(id task.ID) (Slot, bool) {
	s, ok := c.slots[id]
	if !ok {
		return 0, false
	}
	return s.state, true
}

// Handle returns the driver's object for a task the thread holds stores
// for (restoring or running), the one its EvClaimed carried; nil for any
// other task.
func (c *Core) Handle(id task.ID) any {
	if s, ok := c.slots[id]; ok {
		return s.handle
	}
	return nil
}

// Running returns the driver's object for a task whose slot is Running,
// nil for any other task. It costs one lookup, as Handle does, so a
// driver may ask it where it would ask Handle.
func (c *Core) Running(id task.ID) any {
	if s, ok := c.slots[id]; ok && s.state == Running {
		return s.handle
	}
	return nil
}

// Held lists the tasks the thread holds stores for (restoring or
// running), sorted.
func (c *Core) Held() []task.ID { return c.held() }

// Tasks lists the tasks in a slot state, sorted.
func (c *Core) Tasks(st Slot) []task.ID {
	var out []task.ID
	for id, s := range c.slots {
		if s.state == st {
			out = append(out, id)
		}
	}
	slices.SortFunc(out, task.ID.Compare)
	return out
}

// Waiting reports whether a task assigned to the thread waits for another
// thread of the instance to let it go.
func (c *Core) Waiting() bool { return c.claiming+c.waiting > 0 }

// Settled reports whether the thread holds its assignment with nothing
// owed to the group (the instance may be Running as far as this thread's
// group standing and waiting tasks go).
func (c *Core) Settled() bool { return c.phase == Assigned && !c.Waiting() }

// Work reports, for tests, which held tasks consumed input since their last
// commit or discard.
func (c *Core) Work() map[task.ID]bool {
	out := make(map[task.ID]bool)
	for id, s := range c.slots {
		if s.work {
			out[id] = true
		}
	}
	return out
}

// accepts lists the events each mode takes; any other is refused.
var accepts = func() [numModes][numEventKinds]bool {
	var t [numModes][numEventKinds]bool
	set := func(m Mode, ks ...EventKind) {
		for _, k := range ks {
			t[m][k] = true
		}
	}
	callbacks := []EventKind{EvSynced, EvAssigned, EvClaimed, EvHeld, EvClaimFailed, EvSessionEnded, EvRevoked, EvRevokedAll, EvLost, EvSent, EvKill}
	set(Processing, callbacks...)
	set(Processing, EvPolled, EvProcessed, EvPollDone, EvRestored, EvRebalanceRequested, EvTick, EvFailed, EvRewire, EvStop)
	set(Committing, EvCommitted, EvCommitAborted, EvCommitFailed, EvSent, EvKill)
	set(AbortPending, callbacks...)
	set(AbortPending, EvPolled, EvRebalanceRequested, EvFailed, EvRewire, EvStop)
	set(Aborting, EvAborted, EvAbortFailed, EvKill)
	// The old client's callbacks run while it closes.
	set(Reconnecting, EvSynced, EvAssigned, EvSessionEnded, EvRevoked, EvRevokedAll, EvLost, EvSent, EvKill, EvReconnected, EvFailed)
	set(Failed, callbacks...)
	set(Failed, EvRebalanceRequested, EvReplace, EvHalt, EvStop)
	set(Halted, callbacks...)
	set(Halted, EvPolled, EvRebalanceRequested, EvFailed, EvRewire, EvStop)
	// A failed loop may be reported twice: by the commit or abort that
	// failed it and by the loop's end; the second changes nothing.
	set(Failed, EvFailed)
	// A stop cuts a reconnection short: the thread exits without a client
	// to commit through.
	set(Reconnecting, EvStop)
	// Records sent while an abort is carried out are part of the
	// transaction it ends.
	set(Aborting, EvSent)
	// The group client's callbacks still run while the exited thread's
	// client closes; they change nothing, and neither do sends of the
	// commits they would make.
	set(Exited, EvSynced, EvAssigned, EvSessionEnded, EvRevoked, EvRevokedAll, EvLost, EvSent)
	return t
}()

const numModes = int(Exited) + 1

// Step applies an event and returns the actions it calls for, in the order
// they must run. When an action has an outcome (Claim, Process, Commit,
// AbortTxn, Reconnect), it ends its batch unless it is a Claim, and the
// thread feeds the outcome back before anything else. A non-empty batch is
// in flight until the driver lands it (Land); meanwhile an event the
// flight does not admit is held back with ErrBusy. The returned slice is
// only valid until the next Step.
func (c *Core) Step(e Event) ([]Action, error) {
	if e.Kind == EvSent {
		// The hot path: every sink record. Every mode takes it; it calls
		// for no action and changes neither the phase nor a slot.
		if c.mode != Exited {
			c.dirty = true
		}
		return nil, nil
	}
	if e.Kind >= numEventKinds {
		return nil, fmt.Errorf("%w: %s", ErrRefused, e)
	}
	if !c.Admits(e) {
		// Whether the mode takes it is for the mode the flight lands in.
		return nil, fmt.Errorf("%w: %s", ErrBusy, e)
	}
	if !accepts[c.mode][e.Kind] {
		return nil, fmt.Errorf("%w: %s in mode %s", ErrRefused, e, c.mode)
	}
	if !e.At.IsZero() {
		if c.now.IsZero() {
			c.lastCommit = e.At
		}
		if e.At.After(c.now) {
			c.now = e.At
		}
	}
	c.out = c.out[:0]
	if err := c.check(e); err != nil {
		return nil, err
	}
	c.apply(e)
	c.publish()
	c.fly(e)
	return c.out, nil
}

// publish puts an ActPublish first in the batch when the step changed
// Settled: readers on other goroutines see the change before any of the
// batch's actions run (ActUnsettle, ActTakeShare).
func (c *Core) publish() {
	settled := c.Settled()
	if settled == c.settled {
		return
	}
	c.settled = settled
	c.out = slices.Insert(c.out, 0, Action{Kind: ActPublish, Settled: settled})
}

// check refuses, before anything changes, an event whose effect the
// transition tables forbid.
func (c *Core) check(e Event) error {
	if c.mode == Exited {
		// Only events without effect are accepted.
		return nil
	}
	switch e.Kind {
	case EvAssigned:
		if to := c.assignedPhase(); c.mode != Reconnecting && !allowed(phaseMoves, c.phase, to) {
			return fmt.Errorf("%w: %s in phase %s", ErrRefused, e, c.phase)
		}
	case EvClaimed, EvHeld, EvClaimFailed:
		if s := c.slots[e.Task]; s == nil || s.state != Claiming {
			return fmt.Errorf("%w: %s for a task not being claimed", ErrRefused, e)
		}
	case EvProcessed:
		if s := c.slots[e.Task]; s == nil || s.state != Running {
			return fmt.Errorf("%w: %s for a task not running here", ErrRefused, e)
		}
	case EvCommitAborted, EvAborted, EvAbortFailed:
		if c.cfg.Guarantee != ExactlyOnce {
			return fmt.Errorf("%w: %s under %s", ErrRefused, e, c.cfg.Guarantee)
		}
	case EvSessionEnded, EvRevoked:
		if !c.cfg.Cooperative {
			return fmt.Errorf("%w: %s for an eager member", ErrRefused, e)
		}
	case EvRevokedAll:
		if c.cfg.Cooperative {
			return fmt.Errorf("%w: %s for a cooperative member", ErrRefused, e)
		}
	}
	return nil
}

func (c *Core) emit(a Action) { c.out = append(c.out, a) }

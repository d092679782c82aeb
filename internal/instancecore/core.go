package instancecore

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/eddystreams/eddy/task"
)

// ErrRefused wraps every event the core refuses: one about a replica that
// is not in the state the event presumes (a bug in the driver). The core's
// state is unchanged by a refused event.
var ErrRefused = errors.New("instancecore: event refused")

// Work is the I/O in flight on a replica, which the driver carries out
// outside the core; a replica with work in flight is busy.
type Work uint8

const (
	// Idle: nothing in flight.
	Idle Work = iota
	// Opening: a standby's or warmup's stores are opening.
	Opening
	// Adopting: a standby or warmup takes parked stores; they stay open
	// and the replica stays Parked, readable, until it follows.
	Adopting
	// Closing: the replica is Closed and its stores are closing.
	Closing
	// Deleting: the task's directory is being deleted.
	Deleting
)

var workNames = [...]string{"idle", "opening", "adopting", "closing", "deleting"}

func (w Work) String() string {
	if int(w) < len(workNames) {
		return workNames[w]
	}
	return fmt.Sprintf("Work(%d)", w)
}

// Replica is what the core knows of one task's replica.
type Replica struct {
	State task.State
	// Owner is the thread whose active it is (Created by a claim,
	// Restoring, Running), -1 for none.
	Owner int
	Work  Work
	// As is the state an Opening or Adopting replica becomes.
	As task.State
}

// Core is the registry's decision maker. It is not safe for concurrent
// use: the driver steps it under its own lock, which it never holds
// across the actions' I/O.
type Core struct {
	cfg  Config
	reps map[task.ID]*Replica
	// onDisk holds the tasks whose directory is left on disk, open
	// nowhere, and when each expires.
	onDisk map[task.ID]time.Time
	// now is the latest time an event carried (Event.At).
	now    time.Time
	shares map[int]Share
	// current holds the threads whose share is an assignment received
	// since their last revocation: until every thread's is, a replica no
	// share names may be about to be claimed, so none is closed.
	current map[int]bool
	// failed holds the standbys that could not start since the last
	// share: opened again only once the assignment changes, not at once
	// and for ever.
	failed map[task.ID]bool
	// received holds, for each thread, the tasks named by the assignment
	// its latest SyncGroup answered with, before the thread takes it in
	// (its Share): what queries may read (Servable).
	received map[int]map[task.ID]bool
	// gone holds the threads that exited for good: no share of theirs
	// is waited for, and no event of theirs is taken.
	gone map[int]bool
	// incarnation holds each thread index's incarnation whose events are
	// taken (absent: 0); held holds, in order, the events of the next one
	// that wait for its predecessor's exit (Event.Incarnation).
	incarnation map[int]int
	held        map[int][]Event
	// want caches wanted's answer, nil once a share, a revocation or a
	// thread's exit changes it: every step reconciles, and an instance of
	// thousands of replicas must not rebuild it each time.
	want *wantSet
	// streak is the instance's run of the same thread failure, which
	// ReplaceThread's budget counts.
	streak streak
	mode   Mode
	out    []Action
	// OnMove, if set, is told of every state change of a replica, in
	// order, as the step makes it.
	OnMove func(id task.ID, from, to task.State)
}

// New returns the core of an instance as cfg describes it.
func New(cfg Config) *Core {
	c := &Core{cfg: cfg, reps: make(map[task.ID]*Replica), onDisk: make(map[task.ID]time.Time),
		shares: make(map[int]Share), current: make(map[int]bool), failed: make(map[task.ID]bool),
		received: make(map[int]map[task.ID]bool), gone: make(map[int]bool),
		incarnation: make(map[int]int), held: make(map[int][]Event)}
	for _, d := range cfg.OnDisk {
		c.onDisk[d.Task] = d.Left.Add(cfg.CleanupDelay)
	}
	return c
}

// Replica returns what the core knows of a task's replica.
func (c *Core) Replica(id task.ID) (Replica, bool) {
	r, ok := c.reps[id]
	if !ok {
		return Replica{}, false
	}
	return *r, true
}

// OnDisk reports whether a task's directory is left on disk, open nowhere.
func (c *Core) OnDisk(id task.ID) bool {
	_, ok := c.onDisk[id]
	return ok
}

// Tasks lists every task with a replica, sorted.
func (c *Core) Tasks() []task.ID { return slices.SortedFunc(maps.Keys(c.reps), task.ID.Compare) }

// Step applies an event and returns the actions it calls for, in order.
// The returned slice is only valid until the next Step.
func (c *Core) Step(e Event) ([]Action, error) {
	if err := c.check(e); err != nil {
		return nil, err
	}
	c.out = c.out[:0]
	c.advance(e.At)
	shared := false
	if c.early(e) {
		c.held[e.Thread] = append(c.held[e.Thread], e)
	} else {
		shared = c.apply(e)
	}
	if c.mode == ModeOpen {
		c.reconcile()
	} else {
		c.closeIdle()
	}
	if shared {
		c.releaseAhead()
	}
	return c.out, nil
}

// Refusal is the error of a refused event; it matches ErrRefused.
type Refusal struct {
	Event Event
	Why   string
	// Closing is set when the instance was closing: the threads' last
	// events may race the close, so the driver expects such refusals
	// rather than treating them as bugs.
	Closing bool
}

func (r *Refusal) Error() string { return fmt.Sprintf("%s: %s: %s", ErrRefused, r.Event, r.Why) }

// Is makes a Refusal match ErrRefused.
func (r *Refusal) Is(target error) bool { return target == ErrRefused }

func (c *Core) refuse(e Event, why string) error {
	return &Refusal{Event: e, Why: why, Closing: c.mode == ModeClosing}
}

// owned reports whether thread th owns an idle active replica r in one of
// states.
func owned(r *Replica, th int, states ...task.State) bool {
	return r != nil && r.Owner == th && r.Work == Idle && slices.Contains(states, r.State)
}

// check refuses, before anything changes, an event the core's state does
// not allow.
func (c *Core) check(e Event) error {
	r := c.reps[e.Task]
	if err := c.checkThread(e); err != nil {
		return err
	}
	switch e.Kind {
	case EvShare, EvRevoked, EvClaim, EvPause:
		if c.mode == ModeClosing {
			return c.refuse(e, "the instance is closing")
		}
	case EvResume:
		if c.mode != ModePaused {
			return c.refuse(e, "not paused")
		}
	case EvWipe:
		if c.mode != ModePaused {
			return c.refuse(e, "wipes wait for a pause")
		}
	case EvStarted:
		if !owned(r, e.Thread, task.Created, task.Restoring) {
			return c.refuse(e, "not claimed by the thread")
		}
	case EvClaimFailed:
		if !owned(r, e.Thread, task.Created, task.Restoring) {
			return c.refuse(e, "not claimed by the thread")
		}
	case EvRestored:
		if r == nil || r.State != task.Restoring {
			return c.refuse(e, "not restoring")
		}
	case EvRelease, EvCloseActive:
		if !owned(r, e.Thread, task.Restoring, task.Running) {
			return c.refuse(e, "not the thread's active")
		}
	case EvOpened:
		if r == nil || (r.Work != Opening && r.Work != Adopting) {
			return c.refuse(e, "no standby opening")
		}
	case EvClosed:
		if r == nil || r.Work != Closing {
			return c.refuse(e, "nothing closing")
		}
	case EvDeleted:
		if r == nil || r.Work != Deleting {
			return c.refuse(e, "nothing deleting")
		}
	case EvTick:
		if e.At.IsZero() {
			return c.refuse(e, "a tick without a time")
		}
	case EvThreadFailed:
		if e.At.IsZero() {
			// The budget counts failures in a window of the driver's
			// time.
			return c.refuse(e, "a failure without a time")
		}
	case EvThreadExit, EvClose, EvReceived, EvAheadClosed, EvAhead:
	default:
		return c.refuse(e, "unknown event")
	}
	return nil
}

func (c *Core) emit(a Action) { c.out = append(c.out, a) }

// move changes a replica's state along task's transition table; a move
// outside it is a bug in the core.
func (c *Core) move(id task.ID, r *Replica, to task.State) {
	if !task.CanTransition(r.State, to) {
		panic(fmt.Sprintf("instancecore: replica %s %s → %s is not in the table", id, r.State, to))
	}
	from := r.State
	r.State = to
	if c.OnMove != nil {
		c.OnMove(id, from, to)
	}
}

// apply applies an event the core takes, and reports whether it was a
// thread's share (after which the stores opened ahead are let go).
func (c *Core) apply(e Event) (shared bool) {
	switch e.Kind {
	case EvShare, EvReceived, EvRevoked, EvClaim, EvThreadExit, EvAhead, EvThreadFailed:
		return c.applyThread(e)
	case EvStarted, EvClaimFailed, EvRestored, EvRelease, EvCloseActive:
		c.applyActive(e)
	case EvAheadClosed, EvOpened, EvClosed, EvTick, EvWipe, EvDeleted:
		c.applyStores(e)
	case EvPause:
		c.mode = ModePaused
	case EvResume:
		c.mode = ModeOpen
	case EvClose:
		c.mode = ModeClosing
	}
	return false
}

// applyThread applies what a thread reports of the group and of itself,
// and reports whether it was a share (see apply).
func (c *Core) applyThread(e Event) (shared bool) {
	switch e.Kind {
	case EvShare:
		c.shares[e.Thread] = e.Share
		c.current[e.Thread] = true
		c.want = nil
		clear(c.failed)
		return true
	case EvReceived:
		c.received[e.Thread] = named(e.Share)
	case EvRevoked:
		delete(c.current, e.Thread)
		c.want = nil
	case EvClaim:
		if e.Incarnation != c.incarnation[e.Thread] {
			// Its predecessor's exit has not landed: the task may still
			// be the predecessor's.
			c.emit(Action{Kind: ActHeld, Task: e.Task, Thread: e.Thread})
			break
		}
		c.claim(e.Thread, e.Task, c.reps[e.Task])
	case EvThreadExit:
		return c.exit(e.Thread, e.Replaced)
	case EvAhead:
		c.ahead(e.Thread, e.Stores)
	case EvThreadFailed:
		c.threadFailed(e)
	}
	return false
}

// applyActive applies what a thread reports of an active it claimed.
func (c *Core) applyActive(e Event) {
	id, r := e.Task, c.reps[e.Task]
	switch e.Kind {
	case EvStarted:
		if r.State == task.Created {
			c.move(id, r, task.Restoring)
		}
	case EvClaimFailed:
		c.move(id, r, task.Closed)
		delete(c.reps, id)
	case EvRestored:
		c.move(id, r, task.Running)
	case EvRelease:
		if e.Committed && e.Demoted {
			// Its stores hold only committed state: kept open for
			// whoever the next assignment names.
			c.move(id, r, task.Parked)
			r.Owner = -1
			c.emit(Action{Kind: ActPark, Task: id, Thread: e.Thread})
			return
		}
		c.closeActive(e.Thread, id, r, false)
	case EvCloseActive:
		c.closeActive(e.Thread, id, r, e.Committed)
	}
}

// applyStores applies the outcomes of the stores' I/O and the clock's
// ticks.
func (c *Core) applyStores(e Event) {
	id, r := e.Task, c.reps[e.Task]
	switch e.Kind {
	case EvAheadClosed:
		if _, open := c.reps[id]; !open && !c.OnDisk(id) && c.mode != ModeClosing {
			// Opened ahead for an assignment that moved on before the
			// task started.
			c.leave(id)
		}
	case EvOpened:
		if e.OK {
			c.move(id, r, r.As)
			r.Work = Idle
			return
		}
		c.move(id, r, task.Closed)
		delete(c.reps, id)
		c.failed[id] = true
	case EvClosed:
		delete(c.reps, id)
		if e.LeftOnDisk {
			c.leave(id)
		}
	case EvTick:
		c.expire()
	case EvWipe:
		c.delete(id)
	case EvDeleted:
		delete(c.reps, id)
		if !e.OK {
			// Kept, to be tried again at the next tick.
			c.onDisk[id] = c.now
		}
	}
}

// delete deletes a task's directory if it is open nowhere.
func (c *Core) delete(id task.ID) {
	if _, ok := c.onDisk[id]; ok && c.reps[id] == nil {
		delete(c.onDisk, id)
		c.reps[id] = &Replica{State: task.Closed, Owner: -1, Work: Deleting}
		c.emit(Action{Kind: ActDelete, Task: id})
	}
}

// claim answers a thread's claim of an active. Stores open here are handed
// over (parked) or promoted (a standby or warmup); a task with nothing open
// is the thread's to open. Another thread's active, or stores in flight,
// make the claimant wait: that thread has not yet learnt it lost the task,
// or the stores are not in a state to hand over yet.
func (c *Core) claim(th int, id task.ID, r *Replica) {
	switch {
	case r == nil:
		delete(c.onDisk, id)
		c.reps[id] = &Replica{State: task.Created, Owner: th}
		c.emit(Action{Kind: ActOpenActive, Task: id, Thread: th})
	case r.Work != Idle:
		c.emit(Action{Kind: ActHeld, Task: id, Thread: th})
	case r.State == task.Parked:
		c.move(id, r, task.Restoring)
		r.Owner = th
		c.emit(Action{Kind: ActHandOver, Task: id, Thread: th})
	case r.State.Following():
		c.move(id, r, task.Restoring)
		r.Owner = th
		c.emit(Action{Kind: ActPromote, Task: id, Thread: th})
	default:
		c.emit(Action{Kind: ActHeld, Task: id, Thread: th})
	}
}

func (c *Core) closeActive(th int, id task.ID, r *Replica, clean bool) {
	c.move(id, r, task.Closed)
	r.Owner, r.Work = -1, Closing
	c.emit(Action{Kind: ActCloseActive, Task: id, Thread: th, Clean: clean})
}

// settled reports whether every live thread's share is current.
func (c *Core) settled() bool { return len(c.current) >= c.live() }

// wantSet is what the current shares want: the actives, Standby or Warmup
// for each task no current share wants as active (a task one thread wants
// as a standby and another as a warmup is a standby), and those standbys'
// tasks sorted.
type wantSet struct {
	active   map[task.ID]bool
	standby  map[task.ID]task.State
	standbys []task.ID
}

// wanted returns what the current shares want, computed once per change
// of the shares.
func (c *Core) wanted() *wantSet {
	if c.want != nil {
		return c.want
	}
	w := &wantSet{active: make(map[task.ID]bool), standby: make(map[task.ID]task.State)}
	threads := slices.Sorted(maps.Keys(c.current))
	for _, th := range threads {
		for _, id := range c.shares[th].Active {
			w.active[id] = true
		}
	}
	for _, th := range threads {
		for _, id := range c.shares[th].Standby {
			if !w.active[id] {
				w.standby[id] = task.Standby
			}
		}
	}
	for _, th := range threads {
		for _, id := range c.shares[th].Warmup {
			if _, dup := w.standby[id]; !w.active[id] && !dup {
				w.standby[id] = task.Warmup
			}
		}
	}
	w.standbys = slices.SortedFunc(maps.Keys(w.standby), task.ID.Compare)
	c.want = w
	return w
}

// idleFollowers lists, sorted, the idle replicas reconcile and closeIdle
// may act on: standbys, warmups and parked ones. Actives are most of an
// instance's replicas and are left out before sorting.
func (c *Core) idleFollowers() []task.ID {
	var ids []task.ID
	for id, r := range c.reps {
		if r.Work == Idle && (r.State.Following() || r.State == task.Parked) {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, task.ID.Compare)
	return ids
}

// reconcile brings the idle standbys and parked replicas in line with the
// current shares: a standby wanted as the other kind is retagged, a parked
// replica wanted as a standby is adopted, one wanted by no share is closed
// once every thread's share is current (until then a thread still to hear
// may be about to claim it), and a standby wanted but open nowhere is
// opened. A standby wanted as active stays for the thread that claims it.
func (c *Core) reconcile() {
	w := c.wanted()
	active, standby := w.active, w.standby
	settled := c.settled()
	for _, id := range c.idleFollowers() {
		r := c.reps[id]
		want, wantStandby := standby[id]
		switch {
		case r.State.Following() && wantStandby && r.State != want:
			c.move(id, r, want)
			c.emit(Action{Kind: ActRetag, Task: id, As: want})
		case r.State.Following() && !wantStandby && settled && !active[id]:
			c.move(id, r, task.Closed)
			r.Work = Closing
			c.emit(Action{Kind: ActCloseStandby, Task: id})
		case r.State == task.Parked && wantStandby:
			r.Work, r.As = Adopting, want
			c.emit(Action{Kind: ActAdopt, Task: id, As: want})
		case r.State == task.Parked && settled && !active[id]:
			c.move(id, r, task.Closed)
			r.Work = Closing
			c.emit(Action{Kind: ActCloseParked, Task: id})
		}
	}
	for _, id := range w.standbys {
		if _, open := c.reps[id]; !open && !c.failed[id] {
			delete(c.onDisk, id)
			c.reps[id] = &Replica{State: task.Created, Owner: -1, Work: Opening, As: standby[id]}
			c.emit(Action{Kind: ActOpenStandby, Task: id, As: standby[id]})
		}
	}
}

// closeIdle closes, once nothing is in flight, every replica no thread
// owns.
func (c *Core) closeIdle() {
	for _, r := range c.reps {
		if r.Work != Idle {
			return
		}
	}
	for _, id := range c.idleFollowers() {
		r := c.reps[id]
		switch {
		case r.State.Following():
			c.move(id, r, task.Closed)
			r.Work = Closing
			c.emit(Action{Kind: ActCloseStandby, Task: id})
		case r.State == task.Parked:
			c.move(id, r, task.Closed)
			r.Work = Closing
			c.emit(Action{Kind: ActCloseParked, Task: id})
		}
	}
}

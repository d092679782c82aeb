package threadcore

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

// drainedBurst is how many commits a thread may begin back to back before
// an early commit waits for DrainedCommitDelay. Results through repartition
// topics become final only after one drained commit per stage: the upstream
// sub-topology's commit sends its last records (with combining, its
// partial aggregates) to the repartition topic, and only the downstream
// commit that follows makes them state. Spacing those commits
// DrainedCommitDelay apart would add the delay per stage to every result;
// a burst lets a topology of up to drainedBurst stages settle at once,
// while the sliding window still bounds a trickle of input to drainedBurst
// commits per drainedBurst×DrainedCommitDelay.
const drainedBurst = 3

// purpose is what a commit in flight is for, which decides what follows
// its outcome.
type purpose uint8

const (
	forTick      purpose = iota // an interval, early, budget or rebalance commit
	forRevoke                   // at-least-once cooperative revocation
	forRevokeAll                // at-least-once eager revocation
	forStop                     // the final commit
)

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

func (c *Core) setMode(m Mode) {
	if !allowed(modeMoves, c.mode, m) {
		panic(fmt.Sprintf("threadcore: mode %s → %s is not in the table", c.mode, m))
	}
	if c.moved != nil && c.mode != m {
		c.moved("mode", uint8(c.mode), uint8(m))
	}
	c.mode = m
}

func (c *Core) setPhase(p Phase) {
	if !allowed(phaseMoves, c.phase, p) {
		panic(fmt.Sprintf("threadcore: phase %s → %s is not in the table", c.phase, p))
	}
	if c.moved != nil && c.phase != p {
		c.moved("phase", uint8(c.phase), uint8(p))
	}
	c.phase = p
}

func (c *Core) setSlot(id task.ID, s *slot, st Slot) {
	if !allowed(slotMoves, s.state, st) {
		panic(fmt.Sprintf("threadcore: task %s slot %s → %s is not in the table", id, s.state, st))
	}
	if c.moved != nil && s.state != st {
		c.moved("slot", uint8(s.state), uint8(st))
	}
	c.count(id, s.state, -1)
	s.state = st
	c.count(id, st, +1)
}

// addSlot makes a task's slot, Claiming.
func (c *Core) addSlot(id task.ID) {
	c.slots[id] = &slot{state: Claiming}
	c.count(id, Claiming, +1)
}

// dropSlot lets go of a task's slot, if the thread has one.
func (c *Core) dropSlot(id task.ID) {
	if s, ok := c.slots[id]; ok {
		c.count(id, s.state, -1)
		delete(c.slots, id)
	}
}

// count moves a task into (by +1) or out of (by -1) the lists and counts
// of a slot state.
func (c *Core) count(id task.ID, st Slot, by int) {
	switch st {
	case Claiming:
		c.claiming += by
	case Waiting:
		c.waiting += by
	case Restoring:
		c.heldIDs = listed(c.heldIDs, id, by)
	case Running:
		c.heldIDs = listed(c.heldIDs, id, by)
		c.runningIDs = listed(c.runningIDs, id, by)
	}
}

// listed adds id to (by +1) or removes it from (by -1) the sorted list ids.
func listed(ids []task.ID, id task.ID, by int) []task.ID {
	i, found := slices.BinarySearchFunc(ids, id, task.ID.Compare)
	switch {
	case by > 0 && !found:
		return slices.Insert(ids, i, id)
	case by < 0 && found:
		return slices.Delete(ids, i, i+1)
	}
	return ids
}

// rest is the mode the thread returns to once nothing is in flight.
func (c *Core) rest() Mode {
	if c.halted {
		return Halted
	}
	return Processing
}

// held lists the tasks the thread holds stores for (restoring or
// running), sorted: a copy, for the actions that carry it, as heldIDs
// changes while the slots it names are let go.
func (c *Core) held() []task.ID { return slices.Clone(c.heldIDs) }

// running lists the running tasks, sorted: a copy of runningIDs.
func (c *Core) running() []task.ID { return slices.Clone(c.runningIDs) }

// assigned takes an assignment: the stores of the tasks new to the thread
// are opened ahead, several at once, then each is claimed; the registry
// then takes the thread's share of standbys and warmups. While the thread
// reconnects, the assignment is the closing client's last: its tasks no
// longer concern the thread, but its share still concerns the registry.
func (c *Core) assigned(ids []task.ID) {
	if c.mode == Reconnecting {
		c.emit(Action{Kind: ActTakeShare})
		return
	}
	c.setPhase(c.assignedPhase())
	var fresh []task.ID
	for _, id := range ids {
		if _, ok := c.slots[id]; !ok && !slices.Contains(fresh, id) {
			fresh = append(fresh, id)
		}
	}
	if len(fresh) > 0 {
		c.emit(Action{Kind: ActOpenAhead, Tasks: fresh})
	}
	for _, id := range fresh {
		c.addSlot(id)
		c.emit(Action{Kind: ActClaim, Task: id})
	}
	c.emit(Action{Kind: ActTakeShare})
}

// synced is the balancer's sync: the join is over. A cooperative member
// losing tasks it ran is asked to commit before it lets the revocation
// run, so that the revocation usually finds nothing uncommitted (under
// exactly-once this spares the kept tasks an aborted transaction).
func (c *Core) synced(active []task.ID) {
	if c.phase == Rejoining {
		c.setPhase(Assigned)
	} else if c.phase != Assigned {
		c.setPhase(Unassigned)
	}
	if c.cfg.Cooperative && c.active != nil && slices.ContainsFunc(c.active, func(id task.ID) bool { return !slices.Contains(active, id) }) {
		c.rebalance = true
	}
	c.active = append(make([]task.ID, 0, len(active)), active...)
}

// rejoinOwed reports whether a cooperative revocation's rejoin is still
// owed: the phase is one of those after a revocation.
func (c *Core) rejoinOwed() bool {
	return c.phase == Revoked || c.phase == Rejoining || c.phase == RejoinJoining
}

// assignedPhase is the phase an assignment callback leads to.
func (c *Core) assignedPhase() Phase {
	switch c.phase {
	case Revoked, Rejoining:
		return Rejoining
	case Joining, RejoinJoining:
		// An assignment needs a sync first; the table refuses this.
		return Assigned
	}
	return Assigned
}

// revoked is a cooperative revocation of some tasks. At-least-once
// commits the thread's work first (a task's partitions go to their next
// owner only once its work is committed), then parks the revoked tasks.
// Exactly-once cannot end the transaction from the callback: if it holds
// work, it is discarded for every task (the kept ones process their share
// again); either way the group client aborts the next transaction to end,
// so the thread aborts it before processing more.
func (c *Core) revoked(ids []task.ID) {
	if c.phase == Joining || c.phase == RejoinJoining {
		c.setPhase(RejoinJoining)
	} else {
		c.setPhase(Revoked)
	}
	c.emit(Action{Kind: ActUnsettle})
	var release []task.ID
	for _, id := range ids {
		s := c.slots[id]
		switch {
		case s == nil:
		case s.state == Waiting || s.state == Claiming:
			c.dropSlot(id)
		default:
			if !slices.Contains(release, id) {
				release = append(release, id)
			}
		}
	}
	slices.SortFunc(release, task.ID.Compare)
	c.emit(Action{Kind: ActRegistryRevoked})
	switch {
	case c.halted:
		c.close(release, false)
	case c.cfg.Guarantee == ExactlyOnce:
		c.discardIfDirty()
		if c.mode == Processing {
			c.setMode(AbortPending)
		}
		c.park(release)
	case len(release) == 0 && len(c.runningIDs) == 0:
		// Nothing to commit and nothing to release.
	default:
		c.commit(forRevoke, release)
	}
}

// revokedAll is an eager revocation: everything goes, after a commit
// (at-least-once) or with the transaction's work discarded and its abort
// owed (exactly-once). The stores stay open in the registry.
func (c *Core) revokedAll() {
	c.setPhase(Unassigned)
	c.emit(Action{Kind: ActUnsettle})
	c.forgetWaiting()
	c.emit(Action{Kind: ActRegistryRevoked})
	switch {
	case c.halted:
		c.closeAll()
	case c.cfg.Guarantee == ExactlyOnce:
		if len(c.runningIDs) > 0 {
			c.discard(c.running())
		}
		if c.mode == Processing {
			c.setMode(AbortPending)
		}
		c.park(c.held())
	case len(c.runningIDs) == 0:
		c.park(c.held())
	default:
		c.commit(forRevokeAll, c.held())
	}
}

func (c *Core) discardIfDirty() {
	if c.dirty && len(c.runningIDs) > 0 {
		c.discard(c.running())
	}
}

func (c *Core) discard(ids []task.ID) {
	for _, id := range ids {
		s := c.slots[id]
		s.work, s.unflushed = false, false
	}
	c.emit(Action{Kind: ActDiscard, Tasks: ids})
}

// tick decides whether the iteration ends with a commit: the interval has
// passed (while joining, only once the other members had time to join), a
// drained thread may commit early, the cache budget is full, a produce
// failure dooms the transaction, or the group waits to rebalance. The
// rebalance request is only consumed when no other reason commits.
func (c *Core) tick(k CommitClock) {
	joining := c.phase == Joining || c.phase == RejoinJoining
	since := c.now.Sub(c.lastCommit)
	due := since >= c.cfg.CommitInterval && (!joining || since >= c.cfg.CommitInterval+c.cfg.JoinGrace) ||
		!joining && c.drained(k.InputAtEnd) && c.earlyWait(c.now) <= 0 ||
		k.BudgetFull ||
		k.ProduceFailed
	if !due && c.rebalance {
		c.rebalance, due = false, true
	}
	if !due {
		c.emit(Action{Kind: ActPunctuate})
		return
	}
	c.commit(forTick, nil)
}

// drained reports whether a drained thread's early commits are on and the
// thread is drained: it consumed input since its last commit and its input
// is at its end. An idle thread never commits early, and one consuming a
// trickle of input commits early at most drainedBurst times per
// drainedBurst×DrainedCommitDelay.
func (c *Core) drained(inputAtEnd bool) bool {
	return c.cfg.DrainedCommitDelay < c.cfg.CommitInterval && c.consumed && inputAtEnd
}

// earlyWait is how long from now a drained thread must still wait before an
// early commit: until the oldest of its last drainedBurst commits is
// drainedBurst×DrainedCommitDelay old. Zero or less means at once.
func (c *Core) earlyWait(now time.Time) time.Duration {
	return drainedBurst*c.cfg.DrainedCommitDelay - now.Sub(c.recent[c.recentNext])
}

// CommitWait is how long from now the thread may wait (in a poll) before a
// commit may be due: the interval's end or, for a drained thread (inputAtEnd:
// every input partition it fetched from is at its end), the early commit's.
// Zero or less means at once. It changes nothing.
func (c *Core) CommitWait(now time.Time, inputAtEnd bool) time.Duration {
	wait := c.cfg.CommitInterval - now.Sub(c.lastCommit)
	if c.drained(inputAtEnd) {
		wait = min(wait, c.earlyWait(now))
	}
	return wait
}

// commit flushes and commits every running task.
func (c *Core) commit(p purpose, release []task.ID) {
	c.lastCommit = c.now
	c.recent[c.recentNext] = c.now
	c.recentNext = (c.recentNext + 1) % drainedBurst
	c.back = c.mode
	if c.back == AbortPending {
		// A commit after a revocation ends the transaction the group
		// client aborts anyway: its outcome settles the abort owed.
		c.back = c.rest()
	}
	c.setMode(Committing)
	c.purpose, c.releasing = p, release
	c.consumed = false
	c.committed = append(c.commitBuf[:0], c.runningIDs...)
	c.commitBuf = c.committed
	for _, id := range c.worked {
		if s := c.slots[id]; s != nil {
			s.unflushed = false
		}
	}
	c.emit(Action{Kind: ActFlush, Tasks: c.committed})
	c.emit(Action{Kind: ActCommit, Tasks: c.committed})
}

func (c *Core) commitEnded(aborted bool) {
	// Only the tasks in worked may have work, and every one of them that
	// still runs here was running when the commit began, so it is
	// among those committed.
	kept := c.worked[:0]
	for _, id := range c.worked {
		if s := c.slots[id]; s != nil && s.work {
			if s.state == Running {
				s.work = false
			} else {
				kept = append(kept, id)
			}
		}
	}
	c.worked = kept
	switch {
	case c.cfg.Guarantee == AtLeastOnce:
		c.dirty = false
	case len(c.committed) > 0:
		// A commit without running tasks ends no transaction.
		if aborted {
			c.emit(Action{Kind: ActDiscard, Tasks: c.committed})
		}
		c.dirty = false
		c.emit(Action{Kind: ActBegin})
	}
	c.setMode(c.back)
	switch c.purpose {
	case forTick:
		c.emit(Action{Kind: ActPurge})
		c.emit(Action{Kind: ActPunctuate})
	case forRevoke, forRevokeAll:
		c.park(c.releasing)
	case forStop:
		c.exit(true, false)
	}
	c.committed, c.releasing = nil, nil
}

// commitFailed handles a commit that did not go through. An interval
// commit refused because the group moved on (at-least-once) or a fenced or
// stuck transaction (exactly-once) drops every task uncommitted and
// replaces the client; anything else stops the loop. A revocation's commit
// failing drops the revoked tasks' work (the kept tasks' next commit meets
// the same failure).
func (c *Core) commitFailed(cause Cause) {
	p, release := c.purpose, c.releasing
	c.committed, c.releasing = nil, nil
	c.setMode(c.back)
	switch p {
	case forTick:
		switch cause {
		case CauseRefused, CauseFenced:
			c.closeAll()
			c.reconnect(cause, c.rest())
		default:
			c.setMode(Failed)
		}
	case forRevoke:
		c.close(release, false)
	case forRevokeAll:
		c.closeAll()
	case forStop:
		c.closeAll()
		c.exit(false, false)
	}
}

// abort aborts the open transaction; its work is discarded first.
func (c *Core) abort() {
	c.back = c.rest()
	c.setMode(Aborting)
	c.consumed = false
	if len(c.runningIDs) > 0 {
		c.discard(c.running())
	}
	c.emit(Action{Kind: ActAbortTxn})
}

func (c *Core) reconnect(cause Cause, back Mode) {
	c.back = back
	c.setMode(Reconnecting)
	c.emit(Action{Kind: ActReconnect, Cause: cause})
}

func (c *Core) park(ids []task.ID) {
	if len(ids) == 0 {
		return
	}
	hs := c.handles(ids)
	for _, id := range ids {
		c.dropSlot(id)
	}
	c.emit(Action{Kind: ActPark, Tasks: ids, Handles: hs})
}

func (c *Core) close(ids []task.ID, clean bool) {
	if len(ids) == 0 {
		return
	}
	hs := c.handles(ids)
	for _, id := range ids {
		c.dropSlot(id)
	}
	c.emit(Action{Kind: ActClose, Tasks: ids, Handles: hs, Clean: clean})
}

func (c *Core) closeAll() { c.close(c.held(), false) }

// forgetWaiting drops the tasks waiting for another thread: the next
// assignment says again what the thread runs.
func (c *Core) forgetWaiting() {
	if c.claiming+c.waiting == 0 {
		return
	}
	for id, s := range c.slots {
		if s.state == Waiting || s.state == Claiming {
			c.dropSlot(id)
		}
	}
}

func (c *Core) exit(clean, killed bool) {
	held := c.held()
	hs := c.handles(held)
	clear(c.slots)
	c.heldIDs, c.runningIDs, c.worked = nil, nil, nil
	c.claiming, c.waiting = 0, 0
	c.committed, c.releasing = nil, nil
	c.setMode(Exited)
	c.emit(Action{Kind: ActExit, Tasks: held, Handles: hs, Clean: clean, Killed: killed})
}

// handles lists the handles of ids, which the core is about to let go of:
// the action that releases them carries them to the driver.
func (c *Core) handles(ids []task.ID) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		if s := c.slots[id]; s != nil {
			out[i] = s.handle
		}
	}
	return out
}

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

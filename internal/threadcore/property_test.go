package threadcore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eddystreams/eddy/task"
)

// The property test runs two cores as the two stream threads of one
// instance, sharing the instance's registry of task stores (owner), under a
// random schedule of group rebalances, polls, restorations, commit and
// abort outcomes, losses, failures and stops. After every action it checks:
//
//   - a task's offsets are committed only once its records are flushed;
//   - nothing is processed or committed after a fenced commit or abort
//     until the client is replaced, nor after a revocation or loss under
//     exactly-once until the owed abort;
//   - a task is held (restoring or running) by at most one thread, which
//     claimed it from the registry and has not released it;
//   - a task is parked or closed cleanly only with its work committed or
//     discarded;
//   - the action releasing a task hands back the handle its claim gave;
//   - what ActPublish last said, first in its batch, is Settled;
//   - modes, phases and slots move only as their tables allow (the core
//     panics otherwise);
//   - a batch is in flight from the step that answered it until the
//     harness lands it, and meanwhile the core holds back every other
//     goroutine's event (ErrBusy, nothing changed) but the closing
//     client's callbacks during a reconnection.
//
// EDDY_THREADCORE_SEEDS sets the number of sequences per configuration
// (default 2000), EDDY_THREADCORE_SEED replays one.

const propTasks = 4

type model struct {
	t     *testing.T
	seed  uint64
	rng   *rand.Rand
	cfg   Config
	owner map[task.ID]int // the registry: which thread holds a task's stores
	ths   [2]*mthread
	trace []string
	// elapsed is the model's clock since base, which ticks advance.
	elapsed time.Duration
}

type mthread struct {
	idx  int
	c    *Core
	done bool
	// What the harness saw the thread do.
	unflushed, uncommitted map[task.ID]bool
	fenced                 bool // a fenced outcome was fed; no processing until a reconnect
	abortOwed              bool // exactly-once revocation or loss fed; no processing until an abort
	assigned               []task.ID
	processing             bool // the last poll was processed
	published              bool // what the last ActPublish said
	flights                int  // batches the harness is carrying out
}

// closingEvent marks a callback of the client a reconnection closes.
func closingEvent(e Event) Event {
	e.Closing = true
	return e
}

// mhandle is the handle a claim gives the core: whose claim, of what.
type mhandle struct {
	thread int
	id     task.ID
}

func (m *model) fail(format string, args ...any) {
	m.t.Helper()
	tail := m.trace
	if len(tail) > 40 {
		tail = tail[len(tail)-40:]
	}
	m.t.Fatalf("%s %s seed %d (replay with EDDY_THREADCORE_SEED=%d): %s\nlast steps:\n  %s",
		m.cfg.Guarantee, map[bool]string{true: "cooperative", false: "eager"}[m.cfg.Cooperative], m.seed, m.seed,
		fmt.Sprintf(format, args...), strings.Join(tail, "\n  "))
}

func propID(i int) task.ID { return task.ID{SubTopology: 0, Partition: int32(i)} }

// feed steps a thread's core with e and, when it answers with a batch,
// carries the batch out as the driver does: the batch is in flight, the
// outcomes of its actions are stepped back in it, and it lands at the end.
// While it is in flight, other goroutines' events are tried now and then
// (intrude), and a closing client's callbacks come in as flights of their
// own.
func (m *model) feed(th *mthread, e Event) {
	as := m.step(th, e)
	if len(as) == 0 {
		if th.c.Busy() && th.flights == 0 {
			m.fail("thread %d busy after %s answered nothing", th.idx, e)
		}
		return
	}
	if !th.c.Busy() {
		m.fail("thread %d: the batch of %s is not in flight", th.idx, e)
	}
	th.flights++
	var queue []Event
	for {
		for _, a := range as {
			if next, ok := m.do(th, a); ok {
				queue = append(queue, next...)
				if next != nil && (a.Kind == ActCommit || a.Kind == ActAbortTxn || a.Kind == ActReconnect) {
					break
				}
			}
		}
		if len(queue) == 0 {
			break
		}
		m.intrude(th)
		e, queue = queue[0], queue[1:]
		if e.Closing {
			m.feed(th, e)
			as = nil
			continue
		}
		as = m.step(th, e)
	}
	th.flights--
	if err := th.c.Land(); err != nil {
		m.fail("thread %d: %v", th.idx, err)
	}
	if th.c.Busy() != (th.flights > 0) {
		m.fail("thread %d busy %t with %d flights open", th.idx, th.c.Busy(), th.flights)
	}
}

// step feeds one event to a thread's core and checks what it published.
func (m *model) step(th *mthread, e Event) []Action {
	m.note(th, e)
	m.trace = append(m.trace, fmt.Sprintf("t%d %s/%s <- %s", th.idx, th.c.Mode(), th.c.Phase(), e))
	out, err := th.c.Step(e)
	if err != nil {
		m.fail("thread %d refused %s: %v", th.idx, e, err)
	}
	as := slices.Clone(out)
	m.trace = append(m.trace, fmt.Sprintf("t%d -> %s", th.idx, acts(as)))
	for i, a := range as {
		if a.Kind == ActPublish {
			if i != 0 {
				m.fail("thread %d: %s not first in %v", th.idx, a, as)
			}
			th.published = a.Settled
		}
	}
	if th.published != th.c.Settled() {
		m.fail("thread %d settled %t, published %t", th.idx, th.c.Settled(), th.published)
	}
	m.check(th)
	return as
}

// intruders are events other goroutines bring while a batch is in flight:
// the group client's callbacks (let through by AllowRebalance, or the new
// client's during a reconnection), and the loop's own events after a stop
// request, a failure or a kill.
var intruders = []Event{
	ev(EvPolled), ev(EvPollDone), evTask(EvRestored, propID(0)), ev(EvRebalanceRequested), {Kind: EvTick},
	ev(EvFailed), ev(EvReplace), ev(EvHalt), ev(EvRewire), {Kind: EvStop, Clean: true}, ev(EvKill),
	ev(EvSessionEnded), evTasks(EvSynced, propID(0)), evTasks(EvAssigned, propID(0)), evTasks(EvRevoked, propID(0)),
	ev(EvRevokedAll), ev(EvLost),
}

// intrude tries, now and then, an event from another goroutine while a
// batch is in flight: the core holds it back with ErrBusy and changes
// nothing.
func (m *model) intrude(th *mthread) {
	if m.rng.IntN(4) != 0 {
		return
	}
	e := intruders[m.rng.IntN(len(intruders))]
	before := th.c.clone().key()
	if _, err := th.c.Step(e); !errors.Is(err, ErrBusy) {
		m.fail("thread %d took %s in flight (%s/%s): %v", th.idx, e, th.c.Mode(), th.c.Phase(), err)
	}
	if k := th.c.key(); k != before {
		m.fail("thread %d: held %s changed %s to %s", th.idx, e, before, k)
	}
}

// note updates the harness's view before the core sees an event.
func (m *model) note(th *mthread, e Event) {
	switch e.Kind {
	case EvProcessed:
		th.unflushed[e.Task], th.uncommitted[e.Task] = true, true
	case EvCommitFailed, EvAbortFailed:
		if e.Cause == CauseFenced {
			th.fenced = true
		}
	case EvRevoked, EvRevokedAll, EvLost:
		if m.cfg.Guarantee == ExactlyOnce && th.c.Mode() == Processing && !th.c.Halted() {
			th.abortOwed = true
		}
	}
}

func (m *model) do(th *mthread, a Action) ([]Event, bool) {
	switch a.Kind {
	case ActClaim:
		if o, ok := m.owner[a.Task]; ok && o != th.idx {
			return []Event{evTask(EvHeld, a.Task)}, true
		}
		if m.rng.IntN(50) == 0 {
			return []Event{evTask(EvClaimFailed, a.Task)}, true
		}
		m.owner[a.Task] = th.idx
		return []Event{{Kind: EvClaimed, Task: a.Task, Handle: &mhandle{th.idx, a.Task}}}, true
	case ActPark, ActClose:
		for _, id := range a.Tasks {
			m.release(th, id, a.Kind == ActPark || a.Clean, a)
		}
	case ActExit:
		for _, id := range a.Tasks {
			m.release(th, id, a.Clean, a)
		}
		for id, o := range m.owner {
			if o == th.idx {
				m.fail("thread %d exited still owning %s", th.idx, id)
			}
		}
		th.done = true
	case ActDiscard:
		for _, id := range a.Tasks {
			delete(th.unflushed, id)
			delete(th.uncommitted, id)
		}
	case ActProcess:
		if th.fenced || th.abortOwed {
			m.fail("thread %d processes with fenced=%t abortOwed=%t", th.idx, th.fenced, th.abortOwed)
		}
		th.processing = true
		var evs []Event
		for _, id := range th.c.Tasks(Running) {
			if m.owner[id] != th.idx {
				m.fail("thread %d runs %s owned by %d", th.idx, id, m.owner[id])
			}
			if m.rng.IntN(2) == 0 {
				evs = append(evs, Event{Kind: EvProcessed, Task: id, N: 1 + m.rng.IntN(3)})
			}
		}
		return evs, true
	case ActFlush:
		for _, id := range a.Tasks {
			delete(th.unflushed, id)
		}
	case ActCommit:
		if th.fenced {
			m.fail("thread %d commits after being fenced", th.idx)
		}
		for id := range th.unflushed {
			if slices.Contains(a.Tasks, id) {
				m.fail("thread %d commits %s with unflushed records", th.idx, id)
			}
		}
		for _, id := range a.Tasks {
			if m.owner[id] != th.idx {
				m.fail("thread %d commits %s owned by %d", th.idx, id, m.owner[id])
			}
		}
		if th.abortOwed {
			// Only the final commit may end a transaction whose abort is
			// owed, and the group client aborts it: no store is written.
			th.abortOwed = false
			return []Event{ev(EvCommitAborted)}, true
		}
		switch r := m.rng.IntN(20); {
		case r == 0:
			return []Event{failed(EvCommitFailed, CauseFatal)}, true
		case r == 1 && m.cfg.Guarantee == AtLeastOnce:
			return []Event{failed(EvCommitFailed, CauseRefused)}, true
		case r == 1:
			return []Event{failed(EvCommitFailed, CauseFenced)}, true
		case r == 2 && m.cfg.Guarantee == ExactlyOnce:
			return []Event{ev(EvCommitAborted)}, true
		}
		for _, id := range a.Tasks {
			delete(th.uncommitted, id)
		}
		return []Event{ev(EvCommitted)}, true
	case ActAbortTxn:
		th.abortOwed = false
		switch r := m.rng.IntN(20); {
		case r == 0:
			return []Event{failed(EvAbortFailed, CauseFenced)}, true
		case r == 1:
			return []Event{failed(EvAbortFailed, CauseFatal)}, true
		}
		for id := range th.uncommitted {
			if st, ok := th.c.Slot(id); ok && st == Running {
				m.fail("thread %d aborts without discarding running %s", th.idx, id)
			}
		}
		return []Event{ev(EvAborted)}, true
	case ActReconnect:
		if len(th.c.held()) > 0 {
			m.fail("thread %d reconnects holding %v", th.idx, th.c.held())
		}
		th.fenced, th.abortOwed = false, false
		// The old client may complete a session as it closes, then
		// leaves the group; its revocation callback runs.
		var evs []Event
		if m.rng.IntN(4) == 0 {
			evs = append(evs, closingEvent(evTasks(EvAssigned, th.assigned...)))
		}
		if m.cfg.Cooperative {
			if len(th.assigned) > 0 {
				evs = append(evs, closingEvent(evTasks(EvRevoked, th.assigned...)))
			}
		} else {
			evs = append(evs, closingEvent(ev(EvRevokedAll)))
		}
		th.assigned = nil
		return append(evs, ev(EvReconnected)), true
	}
	return nil, false
}

// release is a task leaving a thread: parked or closed.
func (m *model) release(th *mthread, id task.ID, committed bool, a Action) {
	i := slices.Index(a.Tasks, id)
	if len(a.Handles) != len(a.Tasks) {
		m.fail("thread %d: %s carries %d handles", th.idx, a, len(a.Handles))
	}
	if h, ok := a.Handles[i].(*mhandle); !ok || *h != (mhandle{th.idx, id}) {
		m.fail("thread %d releases %s (%s) with handle %v", th.idx, id, a, a.Handles[i])
	}
	if o, ok := m.owner[id]; !ok || o != th.idx {
		m.fail("thread %d releases %s (%s) owned by %d (owned: %t)", th.idx, id, a, o, ok)
	}
	if committed && th.uncommitted[id] {
		m.fail("thread %d releases %s (%s) with uncommitted work", th.idx, id, a)
	}
	delete(m.owner, id)
	delete(th.unflushed, id)
	delete(th.uncommitted, id)
}

func (m *model) check(th *mthread) {
	for _, o := range m.ths {
		for _, id := range o.c.held() {
			if m.owner[id] != o.idx {
				m.fail("thread %d holds %s, registry says %d", o.idx, id, m.owner[id])
			}
		}
	}
	if th.c.Mode() == Exited && len(th.c.slots) > 0 {
		m.fail("thread %d exited with slots", th.idx)
	}
	if th.c.Settled() && th.c.Phase() != Assigned {
		m.fail("settled in phase %s", th.c.Phase())
	}
}

// rebalance gives each thread a random share of the tasks (shares may
// overlap for a while, as an instance's threads do while one lets a task
// go) and plays the group protocol's callbacks.
func (m *model) rebalance() {
	for _, th := range m.ths {
		if th.done {
			continue
		}
		var share []task.ID
		for i := range propTasks {
			if m.rng.IntN(2) == 0 {
				share = append(share, propID(i))
			}
		}
		if m.cfg.Cooperative {
			m.feed(th, ev(EvSessionEnded))
			m.feed(th, evTasks(EvSynced, share...))
			if m.rng.IntN(2) == 0 {
				m.iterate(th) // the thread processes between sync and callbacks
			}
			var lost []task.ID
			for _, id := range th.assigned {
				if !slices.Contains(share, id) {
					lost = append(lost, id)
				}
			}
			if len(lost) > 0 {
				m.feed(th, evTasks(EvRevoked, lost...))
			}
		} else {
			m.feed(th, ev(EvRevokedAll))
			m.feed(th, evTasks(EvSynced, share...))
		}
		m.feed(th, evTasks(EvAssigned, share...))
		th.assigned = share
	}
}

// iterate is one pass of the thread's loop.
func (m *model) iterate(th *mthread) {
	if th.done {
		return
	}
	switch th.c.Mode() {
	case Processing, AbortPending, Halted:
	default:
		return
	}
	th.processing = false
	m.feed(th, ev(EvPolled))
	if !th.processing {
		return
	}
	m.feed(th, ev(EvPollDone))
	for _, id := range th.c.Tasks(Restoring) {
		if m.rng.IntN(2) == 0 {
			m.feed(th, evTask(EvRestored, id))
		}
	}
	if m.rng.IntN(8) == 0 {
		m.feed(th, ev(EvRebalanceRequested))
	}
	m.elapsed += []time.Duration{0, drainedDelay / 2, commitInterval / 2, commitInterval + joinGrace}[m.rng.IntN(4)]
	k := CommitClock{InputAtEnd: m.rng.IntN(2) == 0, BudgetFull: m.rng.IntN(10) == 0}
	m.feed(th, tick(m.elapsed, k))
}

// failure plays an error stopping the loop and OnStreamThreadError.
func (m *model) failure(th *mthread) {
	if th.c.Mode() != Processing && th.c.Mode() != AbortPending {
		return
	}
	m.feed(th, ev(EvFailed))
	switch m.rng.IntN(3) {
	case 0:
		m.feed(th, ev(EvReplace))
	case 1:
		m.feed(th, ev(EvHalt))
	default:
		m.feed(th, Event{Kind: EvStop})
	}
}

func runSequence(t *testing.T, cfg Config, seed uint64, steps int) {
	m := &model{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), cfg: cfg, owner: make(map[task.ID]int)}
	for i := range m.ths {
		m.ths[i] = &mthread{idx: i, c: New(cfg), unflushed: make(map[task.ID]bool), uncommitted: make(map[task.ID]bool)}
	}
	defer func() {
		if r := recover(); r != nil {
			m.fail("panic: %v", r)
		}
	}()
	m.rebalance()
	for range steps {
		th := m.ths[m.rng.IntN(2)]
		if th.done {
			continue
		}
		switch r := m.rng.IntN(100); {
		case r < 70:
			m.iterate(th)
		case r < 82:
			m.rebalance()
		case r < 85:
			if m.cfg.Cooperative && len(th.assigned) > 0 && th.c.Mode() != Exited {
				// A cooperative revocation on its own, as the old client's leave does.
				lost := th.assigned[:1+m.rng.IntN(len(th.assigned))]
				th.assigned = slices.Clone(th.assigned[len(lost):])
				m.feed(th, evTasks(EvRevoked, lost...))
			}
		case r < 88:
			m.feed(th, ev(EvLost))
			th.assigned = nil
		case r < 91:
			m.failure(th)
		case r < 93:
			if md := th.c.Mode(); md == Processing || md == AbortPending || md == Halted {
				m.feed(th, ev(EvRewire))
				th.assigned = nil
			}
		case r < 95:
			if md := th.c.Mode(); md == Processing || md == AbortPending || md == Halted || md == Failed {
				m.feed(th, Event{Kind: EvStop, Clean: true})
			}
		case r < 96:
			m.feed(th, ev(EvKill))
		default:
			m.feed(th, ev(EvSent))
		}
	}
	for _, th := range m.ths {
		if !th.done && th.c.Mode() != Exited {
			switch th.c.Mode() {
			case Processing, AbortPending, Halted, Failed:
				m.feed(th, Event{Kind: EvStop, Clean: th.c.Mode() != Failed})
			}
		}
	}
}

func TestRandomEventSequences(t *testing.T) {
	seeds := 2000
	if s := os.Getenv("EDDY_THREADCORE_SEEDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		seeds = n
	}
	var only *uint64
	if s := os.Getenv("EDDY_THREADCORE_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		only = &n
	}
	for _, cfg := range []Config{aloCoop, eosCoop, aloEager, eosEager} {
		name := cfg.Guarantee.String()
		if !cfg.Cooperative {
			name += " eager"
		}
		t.Run(name, func(t *testing.T) {
			for i := range seeds {
				seed := uint64(i) + 1
				if only != nil {
					if i > 0 {
						break
					}
					seed = *only
				}
				runSequence(t, cfg, seed, 200)
			}
		})
	}
}

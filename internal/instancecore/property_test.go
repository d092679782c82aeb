package instancecore

import (
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

// The property test drives one core as the registry of an instance of
// three threads, under a random schedule of assignments, revocations,
// claims, processing, commits, crashes, threads exiting and replaced at
// any point (a replacement's assignment and claims coming before its
// predecessor's exit is reported included), threads failing under
// ReplaceThread (replaced while the budget lasts; a stop ends the
// schedule and the instance closes), store outcomes (opens and
// deletions that fail included) and the clock's ticks, then closes the
// instance, some threads exiting with their actives held. After every
// step it checks:
//
//   - a task is held (claimed, restoring or running) by one thread at
//     most, and the core names that thread its owner;
//   - a replica has exactly one state: it is either open (a replica) or
//     left on disk, never both; an active state has an owner, no other
//     state has one;
//   - a replica is busy exactly while one outcome of its I/O is owed;
//   - a task is parked, or closed cleanly, only with its work committed
//     or discarded;
//   - a thread that exited owns no replica;
//   - stores are opened ahead only for tasks the instance holds nothing
//     of, and never window stores;
//   - replicas move only as task's transition table allows (the core
//     panics otherwise);
//   - a directory is deleted by a tick only once its cleanup delay has
//     passed since it was left on disk (or its deletion failed), and an
//     open instance's tick leaves no such directory behind;
//   - the core records as a thread's share the last one the thread's
//     current incarnation took, and a replacement claims nothing before
//     its predecessor's exit;
//   - a failed thread is answered by one decision, the one the model's
//     own count of the same failure in a row within the window gives;
//   - once the instance is closed and every outcome delivered, nothing is
//     open.
//
// EDDY_INSTANCECORE_SEEDS sets the number of sequences (default 2000),
// EDDY_INSTANCECORE_SEED replays one.

const (
	propThreads = 3
	propTasks   = 5
	propDelay   = 10 * time.Minute
	// propReplacements is the budget of replacements in a row, within
	// a window of propDelay.
	propReplacements = 2
)

type mthread struct {
	// incarnation is the thread's current one; exitOwed is set while the
	// exit of the one before it is not reported yet.
	incarnation int
	exitOwed    bool
	// share is the last share the incarnation took, if any.
	share  *Share
	held   map[task.ID]bool // claimed and not yet let go
	dirty  map[task.ID]bool // processed since the last commit
	claims []task.ID        // to claim (again)
	active []task.ID        // the share's actives
	built  map[task.ID]bool // started: EvStarted delivered
}

type model struct {
	t     *testing.T
	seed  uint64
	rng   *rand.Rand
	c     *Core
	ths   [propThreads]*mthread
	owed  map[task.ID]Event // the outcome each busy replica owes
	trace []string
	// now is the driver's clock; left holds when each directory on disk
	// became one the core may delete at a tick.
	now  time.Time
	left map[task.ID]time.Time
	// cur is the event being stepped.
	cur Event
	// failure is the last thread failure, failures how many times in a
	// row it happened, the last at lastFailure; decided collects the
	// core's answers to a failure.
	failure     string
	failures    int
	lastFailure time.Time
	decided     []Action
}

func (m *model) fail(format string, args ...any) {
	m.t.Helper()
	tail := m.trace
	if len(tail) > 40 {
		tail = tail[len(tail)-40:]
	}
	m.t.Fatalf("seed %d (replay with EDDY_INSTANCECORE_SEED=%d): %s\nlast steps:\n  %s",
		m.seed, m.seed, fmt.Sprintf(format, args...), strings.Join(tail, "\n  "))
}

func pid(i int) task.ID { return task.ID{SubTopology: 0, Partition: int32(i)} }

// feed steps the core with e, stamped with the model's clock and, but an
// exit (which names its incarnation), the thread's current incarnation.
func (m *model) feed(e Event) {
	m.t.Helper()
	e.At = m.now
	if threadEvent(e.Kind) && e.Kind != EvThreadExit {
		e.Incarnation = m.ths[e.Thread].incarnation
	}
	m.trace = append(m.trace, "<- "+e.String())
	var before [propTasks]bool
	for i := range propTasks {
		before[i] = m.c.OnDisk(pid(i))
	}
	out, err := m.c.Step(e)
	if err != nil {
		m.fail("refused %s: %v", e, err)
	}
	as := slices.Clone(out)
	m.trace = append(m.trace, "-> "+acts(as))
	for i := range propTasks {
		if id := pid(i); m.c.OnDisk(id) && !before[i] {
			m.left[id] = m.now
			if e.Kind == EvDeleted {
				m.left[id] = m.now.Add(-propDelay)
			}
		}
	}
	outer := m.cur
	m.cur = e
	for _, a := range as {
		m.do(a)
	}
	m.cur = outer
	m.check()
	if e.Kind == EvTick && m.c.Mode() == ModeOpen {
		for i := range propTasks {
			if id := pid(i); m.c.OnDisk(id) && !m.now.Before(m.left[id].Add(propDelay)) {
				m.fail("%s left on disk at %v, past its delay at %v", id, m.left[id], m.now)
			}
		}
	}
}

func (m *model) owe(id task.ID, e Event) {
	if _, ok := m.owed[id]; ok {
		m.fail("a second outcome owed for %s", id)
	}
	m.owed[id] = e
}

func (m *model) do(a Action) {
	switch a.Kind {
	case ActOpenActive, ActHandOver, ActPromote:
		th := m.ths[a.Thread]
		if th.exitOwed {
			m.fail("%s for a replacement before its predecessor's exit", a)
		}
		for i, o := range m.ths {
			if i != a.Thread && o.held[a.Task] {
				m.fail("%s while thread %d holds it", a, i)
			}
		}
		th.held[a.Task] = true
	case ActHeld:
		th := m.ths[a.Thread]
		th.claims = append(th.claims, a.Task)
	case ActPark, ActCloseActive:
		th := m.ths[a.Thread]
		if (a.Kind == ActPark || a.Clean) && th.dirty[a.Task] {
			m.fail("%s with uncommitted work", a)
		}
		delete(th.held, a.Task)
		delete(th.dirty, a.Task)
		delete(th.built, a.Task)
		if a.Kind == ActCloseActive {
			m.owe(a.Task, Event{Kind: EvClosed, Task: a.Task, LeftOnDisk: true})
		}
	case ActOpenStandby, ActAdopt:
		m.owe(a.Task, Event{Kind: EvOpened, Task: a.Task})
	case ActCloseStandby, ActCloseParked:
		m.owe(a.Task, Event{Kind: EvClosed, Task: a.Task, LeftOnDisk: m.rng.IntN(2) == 0})
	case ActDelete:
		if m.cur.Kind == EvTick && m.now.Before(m.left[a.Task].Add(propDelay)) {
			m.fail("%s at %v, left on disk at %v", a, m.now, m.left[a.Task])
		}
		m.owe(a.Task, Event{Kind: EvDeleted, Task: a.Task})
	case ActRetag:
	case ActReplaceThread, ActShutdownApplication, ActStopThread:
		m.decided = append(m.decided, a)
	case ActOpenAhead:
		for _, s := range a.Stores {
			if s.Windowed || m.c.Holds(s.Task) {
				m.fail("%s opens %s, windowed or held here", a, s)
			}
		}
	case ActReleaseAhead:
		// Stores opened ahead are not modelled: one closed for a task no
		// share keeps, now and then.
		if id := pid(m.rng.IntN(propTasks)); !slices.Contains(a.Keep, id) && m.rng.IntN(4) == 0 {
			m.feed(Event{Kind: EvAheadClosed, Task: id})
		}
	default:
		m.fail("unknown action %s", a)
	}
}

func (m *model) check() {
	for id := range propTasks {
		id := pid(id)
		var holders []int
		for i, th := range m.ths {
			if th.held[id] {
				holders = append(holders, i)
			}
		}
		r, open := m.c.Replica(id)
		if len(holders) > 1 {
			m.fail("%s held by threads %v", id, holders)
		}
		if len(holders) == 1 && (!open || r.Owner != holders[0]) {
			m.fail("%s held by thread %d, core says %+v (open %t)", id, holders[0], r, open)
		}
		if open && m.c.OnDisk(id) {
			m.fail("%s both open (%+v) and on disk", id, r)
		}
		if open && r.State.Active() != (r.Owner >= 0) && !(r.State == task.Created && r.Owner >= 0) {
			m.fail("%s %+v: owner does not match state", id, r)
		}
		if _, owed := m.owed[id]; owed != (open && r.Work != Idle) {
			m.fail("%s %+v: outcome owed %t", id, r, owed)
		}
		if m.c.Visible(id) != (open && (r.Work == Idle || r.Work == Adopting)) || (m.c.Servable(id) && !m.c.Visible(id)) {
			m.fail("%s %+v: visible %t, servable %t", id, r, m.c.Visible(id), m.c.Servable(id))
		}
		if open && r.State == task.Running && r.Work == Idle && !m.c.Servable(id) {
			m.fail("%s running but not servable", id)
		}
	}
	for i, th := range m.ths {
		got, ok := m.c.Share(i)
		if th.exitOwed {
			continue // the core still records the predecessor's
		}
		if ok != (th.share != nil) || ok && !slices.Equal(got.Active, th.share.Active) {
			m.fail("thread %d: the core records the share %+v (%t), the thread took %+v", i, got, ok, th.share)
		}
	}
}

// rebalance hands every thread a random share: each is revoked first (its
// actives not kept are committed or not, then released), then given its
// share, then claims its new actives.
func (m *model) rebalance() {
	owner := make(map[task.ID]int)
	shares := make([]Share, propThreads)
	for id := range propTasks {
		id := pid(id)
		switch m.rng.IntN(4) {
		case 0, 1:
			th := m.rng.IntN(propThreads)
			owner[id] = th
			shares[th].Active = append(shares[th].Active, id)
		case 2:
			th := m.rng.IntN(propThreads)
			if m.rng.IntN(2) == 0 {
				shares[th].Standby = append(shares[th].Standby, id)
			} else {
				shares[th].Warmup = append(shares[th].Warmup, id)
			}
		}
	}
	order := m.rng.Perm(propThreads)
	for _, i := range order {
		// The SyncGroup answers before the thread lets its tasks go.
		m.feed(Event{Kind: EvReceived, Thread: i, Share: shares[i]})
		m.revoke(i, func(id task.ID) bool { o, ok := owner[id]; return ok && o == i })
	}
	for _, i := range order {
		// The thread opens stores ahead before it takes the share in.
		var stores []AheadStore
		for _, id := range shares[i].Active {
			stores = append(stores, AheadStore{Task: id, Name: "s"}, AheadStore{Task: id, Name: "w", Windowed: true})
		}
		m.feed(Event{Kind: EvAhead, Thread: i, Stores: stores})
		th := m.ths[i]
		th.share = &shares[i]
		m.feed(Event{Kind: EvShare, Thread: i, Share: shares[i]})
		th.active = shares[i].Active
		for _, id := range th.active {
			if !th.held[id] && !slices.Contains(th.claims, id) {
				th.claims = append(th.claims, id)
			}
		}
		// Interleave: some claims now, the rest later.
		m.claims(i)
	}
}

// revoke is a thread's revocation: the actives it does not keep are
// committed (most of the time) and released.
func (m *model) revoke(i int, keep func(task.ID) bool) {
	th := m.ths[i]
	m.feed(Event{Kind: EvRevoked, Thread: i})
	th.claims = slices.DeleteFunc(th.claims, func(id task.ID) bool { return !keep(id) })
	for _, id := range slices.SortedFunc(mapKeys(th.held), task.ID.Compare) {
		if keep(id) || !th.built[id] {
			continue
		}
		if m.rng.IntN(4) != 0 {
			delete(th.dirty, id) // committed
		}
		m.feed(Event{Kind: EvRelease, Thread: i, Task: id, Committed: !th.dirty[id], Demoted: m.rng.IntN(10) != 0})
	}
}

func mapKeys(m map[task.ID]bool) func(func(task.ID) bool) {
	return func(yield func(task.ID) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// claims feeds some of a thread's pending claims, and builds what they got.
func (m *model) claims(i int) {
	th := m.ths[i]
	pending := th.claims
	th.claims = nil
	for _, id := range pending {
		if th.held[id] {
			continue
		}
		m.feed(Event{Kind: EvClaim, Thread: i, Task: id})
		if th.held[id] {
			m.build(i, id)
		}
	}
}

func (m *model) build(i int, id task.ID) {
	th := m.ths[i]
	if m.rng.IntN(30) == 0 {
		delete(th.held, id)
		m.feed(Event{Kind: EvClaimFailed, Thread: i, Task: id})
		return
	}
	m.feed(Event{Kind: EvStarted, Thread: i, Task: id})
	th.built[id] = true
}

// crash is a thread losing everything: its actives close without
// committing.
func (m *model) crash(i int) {
	th := m.ths[i]
	for _, id := range slices.SortedFunc(mapKeys(th.held), task.ID.Compare) {
		if th.built[id] {
			m.feed(Event{Kind: EvCloseActive, Thread: i, Task: id, Committed: !th.dirty[id]})
		}
	}
	m.feed(Event{Kind: EvRevoked, Thread: i})
	th.claims = nil
}

// exit is a thread exiting at any point, with whatever it holds, and
// maybe replaced by a new thread of the same index: afterwards the core
// names it the owner of nothing.
func (m *model) exit(i int, replaced bool) {
	th := m.ths[i]
	for id := range th.held {
		if !th.built[id] {
			// Its stores were the thread's own.
			delete(th.held, id)
		}
	}
	th.share = nil
	m.feed(Event{Kind: EvThreadExit, Thread: i, Incarnation: th.incarnation, Replaced: replaced})
	if replaced {
		th.incarnation++
	}
	for _, id := range m.c.Tasks() {
		if r, _ := m.c.Replica(id); r.Owner == i {
			m.fail("thread %d exited, still owns %s: %+v", i, id, r)
		}
	}
	if len(th.held) > 0 {
		m.fail("thread %d exited, its actives %v not let go", i, th.held)
	}
	th.claims, th.active = nil, nil
	clear(th.dirty)
	clear(th.built)
}

// threadFails is a thread stopping on an error, mostly the same one (a
// poison record): the core's answer must be the one the model's own count
// gives. Replaced, the thread exits and its index is its next
// incarnation's; stopped, the instance is to close, which it reports.
func (m *model) threadFails(i int) (stopped bool) {
	failure := "poison"
	if m.rng.IntN(4) == 0 {
		failure = "other"
	}
	if failure != m.failure || m.now.Sub(m.lastFailure) > propDelay {
		m.failure, m.failures = failure, 0
	}
	m.failures++
	m.lastFailure = m.now
	want := Action{Kind: ActReplaceThread, Thread: i, Failures: m.failures}
	if m.failures > propReplacements {
		want.Kind = ActStopThread
	}
	m.decided = nil
	m.feed(Event{Kind: EvThreadFailed, Thread: i, Failure: failure})
	if len(m.decided) != 1 || m.decided[0].String() != want.String() {
		m.fail("thread %d failed on %s: the core decided %v, want %s", i, failure, m.decided, want)
	}
	if want.Kind == ActStopThread {
		return true
	}
	m.exit(i, true)
	return false
}

// replaceLate is a thread replaced whose replacement hears from the group
// before the exit of the thread it replaces is reported: the replacement
// receives and takes a share, and claims its actives (which wait), then
// the exit lands, and the replacement's share is the one the core keeps.
func (m *model) replaceLate(i int) {
	th := m.ths[i]
	for id := range th.held {
		if !th.built[id] {
			delete(th.held, id)
		}
	}
	th.incarnation++
	th.exitOwed = true
	var s Share
	for id := range propTasks {
		id := pid(id)
		taken := false
		for j, o := range m.ths {
			taken = taken || j != i && slices.Contains(o.active, id)
		}
		switch n := m.rng.IntN(4); {
		case n == 0 && !taken:
			s.Active = append(s.Active, id)
		case n == 1:
			s.Standby = append(s.Standby, id)
		}
	}
	m.feed(Event{Kind: EvReceived, Thread: i, Share: s})
	if m.rng.IntN(3) == 0 {
		m.feed(Event{Kind: EvRevoked, Thread: i})
	}
	m.feed(Event{Kind: EvShare, Thread: i, Share: s})
	th.claims = slices.Clone(s.Active)
	m.claims(i)
	for range m.rng.IntN(3) {
		m.deliver()
	}
	th.exitOwed = false
	th.share, th.active = &s, s.Active
	m.feed(Event{Kind: EvThreadExit, Thread: i, Incarnation: th.incarnation - 1, Replaced: true})
	for _, id := range m.c.Tasks() {
		if r, _ := m.c.Replica(id); r.Owner == i {
			m.fail("thread %d's predecessor exited, it still owns %s: %+v", i, id, r)
		}
	}
	if len(th.held) > 0 {
		m.fail("thread %d's predecessor exited, its actives %v not let go", i, th.held)
	}
	clear(th.dirty)
	clear(th.built)
}

// deliver feeds one owed outcome.
func (m *model) deliver() {
	if len(m.owed) == 0 {
		return
	}
	keys := slices.SortedFunc(func(yield func(task.ID) bool) {
		for k := range m.owed {
			if !yield(k) {
				return
			}
		}
	}, task.ID.Compare)
	id := keys[m.rng.IntN(len(keys))]
	e := m.owed[id]
	delete(m.owed, id)
	if e.Kind == EvOpened || e.Kind == EvDeleted {
		e.OK = m.rng.IntN(8) != 0
	}
	m.feed(e)
}

func runSequence(t *testing.T, seed uint64, steps int) {
	m := &model{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 33)), owed: make(map[task.ID]Event),
		now: time.Unix(1e9, 0), left: make(map[task.ID]time.Time)}
	cfg := Config{Threads: propThreads, CleanupDelay: propDelay,
		OnThreadFailure: ReplaceThread, MaxReplacements: propReplacements, ReplacementWindow: propDelay}
	for id := range propTasks {
		if m.rng.IntN(2) == 0 {
			// Found on disk, last written up to twice the delay ago.
			left := m.now.Add(-time.Duration(m.rng.Int64N(int64(2 * propDelay))))
			cfg.OnDisk = append(cfg.OnDisk, Dir{Task: pid(id), Left: left})
			m.left[pid(id)] = left
		}
	}
	m.c = New(cfg)
	for i := range m.ths {
		m.ths[i] = &mthread{held: map[task.ID]bool{}, dirty: map[task.ID]bool{}, built: map[task.ID]bool{}}
	}
steps:
	for range steps {
		i := m.rng.IntN(propThreads)
		th := m.ths[i]
		switch n := m.rng.IntN(20); {
		case n < 2:
			m.rebalance()
		case n < 6:
			m.claims(i)
		case n < 9:
			m.deliver()
		case n < 11:
			for _, id := range slices.SortedFunc(mapKeys(th.built), task.ID.Compare) {
				if r, _ := m.c.Replica(id); r.State == task.Restoring {
					m.feed(Event{Kind: EvRestored, Task: id})
					break
				}
			}
		case n < 14:
			for id := range th.built {
				if r, _ := m.c.Replica(id); r.State == task.Running {
					th.dirty[id] = true
				}
			}
		case n < 16:
			clear(th.dirty) // a commit
		case n < 17 && m.rng.IntN(2) == 0:
			m.crash(i)
		case n < 17 && m.rng.IntN(2) == 0:
			if m.rng.IntN(2) == 0 {
				m.exit(i, true)
			} else if m.threadFails(i) {
				break steps
			}
		case n < 17:
			m.replaceLate(i)
		case n < 18:
			m.now = m.now.Add(time.Duration(m.rng.Int64N(int64(propDelay / 2))))
			m.feed(Event{Kind: EvTick})
		case n < 19 && m.rng.IntN(4) == 0:
			m.pause()
		default:
			m.revoke(i, func(id task.ID) bool { return slices.Contains(th.active, id) && m.rng.IntN(3) != 0 })
		}
	}
	// The instance closes: threads close their actives and exit, or some
	// exit holding them.
	for i, th := range m.ths {
		if m.rng.IntN(3) == 0 {
			continue
		}
		for _, id := range slices.SortedFunc(mapKeys(th.held), task.ID.Compare) {
			if !th.built[id] {
				m.build(i, id)
			}
			if th.held[id] {
				m.feed(Event{Kind: EvCloseActive, Thread: i, Task: id, Committed: !th.dirty[id]})
			}
		}
	}
	for len(m.owed) > 0 {
		m.deliver()
	}
	for i := range m.ths {
		m.exit(i, false)
	}
	m.feed(Event{Kind: EvClose})
	for len(m.owed) > 0 {
		m.deliver()
	}
	if left := m.c.Tasks(); len(left) > 0 {
		m.fail("closed instance still holds %v", left)
	}
}

// pause replaces the instance's clients: once what is in flight is done,
// nothing but the threads' actives is left open; some directories are
// wiped, and the replicas follow the shares again.
func (m *model) pause() {
	m.feed(Event{Kind: EvPause})
	for len(m.owed) > 0 {
		m.deliver()
	}
	if !m.c.Quiet() {
		m.fail("paused with nothing owed, but not quiet: %v", m.c.Tasks())
	}
	for _, id := range m.c.Tasks() {
		if r, _ := m.c.Replica(id); r.Owner < 0 {
			m.fail("paused, %s still open: %+v", id, r)
		}
	}
	for id := range propTasks {
		if m.rng.IntN(3) == 0 {
			m.feed(Event{Kind: EvWipe, Task: pid(id)})
		}
	}
	for len(m.owed) > 0 {
		m.deliver()
	}
	m.feed(Event{Kind: EvResume})
}

func TestRandomInterleavings(t *testing.T) {
	if s := os.Getenv("EDDY_INSTANCECORE_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		runSequence(t, seed, 300)
		return
	}
	n := 2000
	if s := os.Getenv("EDDY_INSTANCECORE_SEEDS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	for seed := range uint64(n) {
		runSequence(t, seed, 300)
	}
}

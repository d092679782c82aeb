package instancecore

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eddystreams/eddy/task"
)

var (
	t0 = task.ID{SubTopology: 0, Partition: 0}
	t1 = task.ID{SubTopology: 0, Partition: 1}
	t2 = task.ID{SubTopology: 1, Partition: 0}
)

func acts(as []Action) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, " ")
}

// step is an event and the actions it must emit, as their String forms
// joined by spaces ("" for none).
type step struct {
	ev   Event
	want string
}

func script(t *testing.T, c *Core, steps ...step) {
	t.Helper()
	for i, s := range steps {
		got, err := c.Step(s.ev)
		if err != nil {
			t.Fatalf("step %d %s: %v", i, s.ev, err)
		}
		if g := acts(got); g != s.want {
			t.Fatalf("step %d %s:\n got  %q\n want %q", i, s.ev, g, s.want)
		}
	}
}

func share(th int, active, standby, warmup []task.ID) Event {
	return Event{Kind: EvShare, Thread: th, Share: Share{Active: active, Standby: standby, Warmup: warmup}}
}
func claim(th int, id task.ID) Event   { return Event{Kind: EvClaim, Thread: th, Task: id} }
func started(th int, id task.ID) Event { return Event{Kind: EvStarted, Thread: th, Task: id} }
func restored(id task.ID) Event        { return Event{Kind: EvRestored, Task: id} }
func release(th int, id task.ID, committed, demoted bool) Event {
	return Event{Kind: EvRelease, Thread: th, Task: id, Committed: committed, Demoted: demoted}
}
func revoked(th int) Event             { return Event{Kind: EvRevoked, Thread: th} }
func opened(id task.ID, ok bool) Event { return Event{Kind: EvOpened, Task: id, OK: ok} }
func closed(id task.ID, disk bool) Event {
	return Event{Kind: EvClosed, Task: id, LeftOnDisk: disk}
}

func ids(xs ...task.ID) []task.ID { return xs }

// testDelay is the cleanup delay of the tests' cores, whose clock starts
// at the zero time.
const testDelay = 10 * time.Minute

// newCore is the core of an instance of threads, with the directories of
// disk on disk, left at the zero time.
func newCore(threads int, disk ...task.ID) *Core {
	cfg := Config{Threads: threads, CleanupDelay: testDelay}
	for _, id := range disk {
		cfg.OnDisk = append(cfg.OnDisk, Dir{Task: id})
	}
	return New(cfg)
}

// clock is the time d past the zero time.
func clock(d time.Duration) time.Time { return time.Time{}.Add(d) }

// tick is the driver's clock at d past the zero time.
func tick(d time.Duration) Event { return Event{Kind: EvTick, At: clock(d)} }

func wantReplica(t *testing.T, c *Core, id task.ID, st task.State, owner int, w Work) {
	t.Helper()
	r, ok := c.Replica(id)
	if !ok || r.State != st || r.Owner != owner || r.Work != w {
		t.Fatalf("replica %s: %+v (present %t), want %s owned by %d, %s", id, r, ok, st, owner, w)
	}
}

// running brings a two-thread instance to thread 0 running t0, t1.
func running(t *testing.T) *Core {
	t.Helper()
	c := newCore(2)
	script(t, c,
		step{ev: claim(0, t0), want: "OpenActive(t0,0_0)"},
		step{ev: claim(0, t1), want: "OpenActive(t0,0_1)"},
		step{ev: started(0, t0)},
		step{ev: started(0, t1)},
		step{ev: restored(t0)},
		step{ev: restored(t1)},
		step{ev: share(0, ids(t0, t1), nil, nil)},
		step{ev: share(1, nil, nil, nil), want: "ReleaseAhead(keep[0_0 0_1])"},
	)
	wantReplica(t, c, t0, task.Running, 0, Idle)
	return c
}

// A claim is answered from what is open here: nothing (the thread opens
// the stores), a parked replica (handed over), a standby (promoted), or
// another thread's active or stores in flight (the claimant waits).
func TestClaim(t *testing.T) {
	c := running(t)
	script(t, c,
		step{ev: claim(1, t0), want: "Held(t1,0_0)"},
		step{ev: revoked(0)},
		step{ev: release(0, t0, true, true), want: "Park(t0,0_0)"},
	)
	wantReplica(t, c, t0, task.Parked, -1, Idle)
	script(t, c,
		step{ev: claim(1, t0), want: "HandOver(t1,0_0)"},
		step{ev: started(1, t0)},
	)
	wantReplica(t, c, t0, task.Restoring, 1, Idle)

	c = newCore(1)
	script(t, c,
		step{ev: share(0, nil, ids(t2), nil), want: "OpenStandby(1_0,standby) ReleaseAhead(keep[1_0])"},
		step{ev: claim(0, t2), want: "Held(t0,1_0)"},
		step{ev: opened(t2, true)},
		step{ev: revoked(0)},
		step{ev: claim(0, t2), want: "Promote(t0,1_0)"},
		step{ev: share(0, ids(t2), nil, nil), want: "ReleaseAhead(keep[1_0])"},
	)
	wantReplica(t, c, t2, task.Restoring, 0, Idle)
}

// A revoked active is parked only with its work committed or discarded and
// its stores kept; otherwise it is closed, its work dropped.
func TestRelease(t *testing.T) {
	for _, tc := range []struct {
		committed, demoted bool
		want               string
	}{
		{true, true, "Park(t0,0_0)"},
		{false, true, "CloseActive(t0,0_0,clean=false)"},
		{true, false, "CloseActive(t0,0_0,clean=false)"},
	} {
		c := running(t)
		script(t, c, step{ev: revoked(0)}, step{ev: release(0, t0, tc.committed, tc.demoted), want: tc.want})
	}
	c := running(t)
	script(t, c,
		step{ev: Event{Kind: EvCloseActive, Thread: 0, Task: t0, Committed: true}, want: "CloseActive(t0,0_0,clean=true)"},
		step{ev: claim(1, t0), want: "Held(t1,0_0)"},
		step{ev: closed(t0, true)},
	)
	if _, ok := c.Replica(t0); ok || !c.OnDisk(t0) {
		t.Fatal("closed active not left on disk")
	}
	script(t, c, step{ev: claim(1, t0), want: "OpenActive(t1,0_0)"})
	if c.OnDisk(t0) {
		t.Fatal("claimed directory still listed on disk")
	}
}

// Parked replicas are adopted by a standby or warmup assignment, kept
// while a thread may still claim them, and closed once every thread's
// share is current and none wants them.
func TestParked(t *testing.T) {
	c := running(t)
	script(t, c,
		step{ev: revoked(0)},
		step{ev: release(0, t0, true, true), want: "Park(t0,0_0)"},
		step{ev: release(0, t1, true, true), want: "Park(t0,0_1)"},
		// Thread 0 has not heard yet: nothing closes.
		step{ev: share(1, nil, ids(t0), nil), want: "Adopt(0_0,standby)"},
		step{ev: claim(1, t0), want: "Held(t1,0_0)"},
		step{ev: opened(t0, true)},
		step{ev: share(0, ids(t2), nil, nil), want: "CloseParked(0_1) ReleaseAhead(keep[0_0 1_0])"},
		step{ev: closed(t1, true)},
	)
	wantReplica(t, c, t0, task.Standby, -1, Idle)
	if !c.OnDisk(t1) {
		t.Fatal("closed parked replica not on disk")
	}
}

// Standbys are opened where wanted, retagged between standby and warmup
// without moving state, kept while wanted as active, and closed once no
// current share wants them.
func TestStandbys(t *testing.T) {
	c := newCore(2, t1)
	script(t, c,
		step{ev: share(0, nil, ids(t0), ids(t1)), want: "OpenStandby(0_0,standby) OpenStandby(0_1,warmup)"},
		step{ev: opened(t0, true)},
		step{ev: opened(t1, false)},
		step{ev: share(1, nil, ids(t1), nil), want: "OpenStandby(0_1,standby) ReleaseAhead(keep[0_0 0_1])"},
		step{ev: opened(t1, true)},
		step{ev: share(0, nil, nil, ids(t0)), want: "Retag(0_0,warmup) ReleaseAhead(keep[0_0 0_1])"},
		// Wanted as active by thread 1: kept for its claim.
		step{ev: share(1, ids(t0), nil, nil), want: "CloseStandby(0_1) ReleaseAhead(keep[0_0])"},
		step{ev: closed(t1, true)},
		step{ev: share(0, nil, nil, nil), want: "ReleaseAhead(keep[0_0])"},
	)
	wantReplica(t, c, t0, task.Warmup, -1, Idle)
	if c.OnDisk(t1) != true {
		t.Fatal("closed standby not on disk")
	}
	script(t, c, step{ev: share(1, nil, nil, nil), want: "CloseStandby(0_0) ReleaseAhead(keep[])"})
}

// Directories left on disk are deleted at the first tick a cleanup delay
// after they were left, unless opened meanwhile; a failed deletion is
// tried again at the next tick; a tick without a time is refused.
func TestExpiry(t *testing.T) {
	c := newCore(1, t0, t1)
	script(t, c,
		step{ev: claim(0, t1), want: "OpenActive(t0,0_1)"},
		step{ev: tick(testDelay - time.Second)},
		step{ev: tick(testDelay), want: "Delete(0_0)"},
		step{ev: claim(0, t0), want: "Held(t0,0_0)"},
		step{ev: Event{Kind: EvDeleted, Task: t0}},
		step{ev: tick(testDelay + time.Second), want: "Delete(0_0)"},
		step{ev: Event{Kind: EvDeleted, Task: t0, OK: true}},
	)
	if c.OnDisk(t0) {
		t.Fatal("deleted directory still on disk")
	}
	if _, err := c.Step(Event{Kind: EvTick}); !errors.Is(err, ErrRefused) {
		t.Fatalf("tick without a time: %v", err)
	}
}

// A directory's delay runs from the time of the event that left it on
// disk, and the clock never goes back: an event stamped earlier than the
// latest does not make a directory younger or older.
func TestExpiryDatesDirectoriesByTheirEvents(t *testing.T) {
	at := func(e Event, d time.Duration) Event { e.At = clock(d); return e }
	cases := []struct {
		name   string
		disk   bool // the directory was found on disk
		steps  []Event
		expiry time.Duration
	}{
		{"closed", false, []Event{at(claim(0, t0), time.Minute), started(0, t0), Event{Kind: EvCloseActive, Thread: 0, Task: t0},
			at(closed(t0, true), 3*time.Minute)}, 3*time.Minute + testDelay},
		{"closed with an older stamp", false, []Event{at(claim(0, t0), 5*time.Minute), started(0, t0), Event{Kind: EvCloseActive, Thread: 0, Task: t0},
			at(closed(t0, true), 2*time.Minute)}, 5*time.Minute + testDelay},
		{"ahead closed", false, []Event{at(Event{Kind: EvAheadClosed, Task: t0}, 7*time.Minute)}, 7*time.Minute + testDelay},
		{"found on disk", true, nil, testDelay},
		{"deletion failed", true, []Event{tick(testDelay), at(Event{Kind: EvDeleted, Task: t0}, testDelay+time.Minute)}, testDelay + time.Minute},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCore(1)
			if tc.disk {
				c = newCore(1, t0)
			}
			for _, e := range tc.steps {
				if _, err := c.Step(e); err != nil {
					t.Fatal(err)
				}
			}
			got, ok := c.Expiry(t0)
			if !ok || !got.Equal(clock(tc.expiry)) {
				t.Fatalf("expiry %v (on disk %t), want %v", got.Sub(clock(0)), ok, tc.expiry)
			}
		})
	}
}

// An expired directory waits while the instance is paused or closing; the
// first tick once it is open again deletes it.
func TestExpiryWaitsWhilePaused(t *testing.T) {
	c := newCore(1, t0)
	script(t, c,
		step{ev: Event{Kind: EvPause}},
		step{ev: tick(2 * testDelay)},
		step{ev: Event{Kind: EvResume}},
		step{ev: tick(2*testDelay + time.Second), want: "Delete(0_0)"},
	)
	c = newCore(1, t0)
	script(t, c,
		step{ev: Event{Kind: EvClose}},
		step{ev: tick(2 * testDelay)},
	)
	if !c.OnDisk(t0) {
		t.Fatal("a closing instance deleted a directory")
	}
}

// Closing the instance waits for what is in flight, then closes every
// replica no thread owns.
func TestClose(t *testing.T) {
	c := newCore(1)
	script(t, c,
		step{ev: claim(0, t2), want: "OpenActive(t0,1_0)"},
		step{ev: share(0, ids(t2), ids(t0), ids(t1)), want: "OpenStandby(0_0,standby) OpenStandby(0_1,warmup) ReleaseAhead(keep[0_0 0_1 1_0])"},
		step{ev: opened(t0, true)},
		step{ev: Event{Kind: EvClose}},
		step{ev: opened(t1, true), want: "CloseStandby(0_0) CloseStandby(0_1)"},
	)
	if _, err := c.Step(claim(0, t0)); !errors.Is(err, ErrRefused) {
		t.Fatalf("claim while closing: %v", err)
	}
}

func exit(th int, replaced bool) Event {
	return Event{Kind: EvThreadExit, Thread: th, Replaced: replaced}
}

// A thread that exits lets go what it still owns: a claim it had not
// started is dropped, a started active closed uncleanly. A replaced
// thread's share no longer counts as current; a thread gone for good is
// no longer waited for.
func TestThreadExit(t *testing.T) {
	next := func(e Event) Event { e.Incarnation = 1; return e }
	c := running(t)
	script(t, c,
		step{ev: claim(0, t2), want: "OpenActive(t0,1_0)"},
		step{ev: exit(0, true), want: "CloseActive(t0,0_0,clean=false) CloseActive(t0,0_1,clean=false)"},
	)
	if _, ok := c.Replica(t2); ok {
		t.Fatal("the exited thread's unstarted claim is still recorded")
	}
	for _, id := range c.Tasks() {
		if r, _ := c.Replica(id); r.Owner == 0 {
			t.Fatalf("%s still owned by the exited thread: %+v", id, r)
		}
	}
	script(t, c,
		step{ev: closed(t0, true)},
		step{ev: closed(t1, true)},
		// The replaced thread's next incarnation hears its assignment
		// again.
		step{ev: next(share(0, ids(t2), nil, nil)), want: "ReleaseAhead(keep[1_0])"},
		step{ev: next(claim(0, t2)), want: "OpenActive(t0,1_0)"},
		step{ev: next(started(0, t2))},
	)

	// Thread 1 holds a standby; thread 0 exits for good: the standby
	// no share wants any more is closed once thread 1 alone is current.
	c = newCore(2)
	script(t, c,
		step{ev: share(0, nil, ids(t0), nil), want: "OpenStandby(0_0,standby)"},
		step{ev: opened(t0, true)},
		step{ev: share(1, nil, nil, nil), want: "ReleaseAhead(keep[0_0])"},
		step{ev: revoked(1)},
		step{ev: exit(0, false)},
		step{ev: share(1, nil, nil, nil), want: "CloseStandby(0_0) ReleaseAhead(keep[])"},
	)
	for _, e := range []Event{share(0, nil, nil, nil), claim(0, t1), revoked(0), exit(0, false)} {
		if _, err := c.Step(e); !errors.Is(err, ErrRefused) {
			t.Errorf("%s from a thread gone for good: %v", e, err)
		}
	}
}

// Events about a replica in another state are refused, changing nothing.
func TestRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		e    Event
	}{
		{"started by another thread", started(1, t0)},
		{"released by another thread", release(1, t0, true, true)},
		{"restored while running", restored(t0)},
		{"opened without an opening", opened(t0, true)},
		{"closed without a closing", closed(t0, false)},
		{"deleted without a deletion", Event{Kind: EvDeleted, Task: t0}},
		{"claim failed for another thread's", Event{Kind: EvClaimFailed, Thread: 1, Task: t0}},
	} {
		c := running(t)
		before, _ := c.Replica(t0)
		if _, err := c.Step(tc.e); !errors.Is(err, ErrRefused) {
			t.Errorf("%s: %v", tc.name, err)
		}
		if after, _ := c.Replica(t0); after != before {
			t.Errorf("%s: changed %+v to %+v", tc.name, before, after)
		}
	}
}

// A refusal says whether the instance was closing, so that the driver
// can tell an event that raced the close from a bug.
func TestRefusalSaysWhetherClosing(t *testing.T) {
	c := running(t)
	_, err := c.Step(restored(t0))
	ref, ok := errors.AsType[*Refusal](err)
	if !ok || ref.Closing {
		t.Fatalf("refused while open: %v, want a Refusal not closing", err)
	}
	if _, err := c.Step(Event{Kind: EvClose}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Step(Event{Kind: EvClaim, Thread: 1, Task: t1})
	ref, ok = errors.AsType[*Refusal](err)
	if !ok || !ref.Closing || !errors.Is(err, ErrRefused) {
		t.Fatalf("refused while closing: %v, want a Refusal that is closing", err)
	}
}

// Stores are opened ahead of their claims only for tasks the instance
// holds no state of, and never window stores; nothing is opened ahead
// while paused or closing.
func TestOpenAhead(t *testing.T) {
	s := func(id task.ID, name string, windowed bool) AheadStore {
		return AheadStore{Task: id, Name: name, Windowed: windowed}
	}
	ahead := func(th int, stores ...AheadStore) Event { return Event{Kind: EvAhead, Thread: th, Stores: stores} }
	c := newCore(2, t1)
	script(t, c,
		step{ev: claim(0, t0), want: "OpenActive(t0,0_0)"},
		// t0 is thread 0's, t1 left on disk: only t2's plain store.
		step{ev: ahead(1, s(t0, "counts", false), s(t1, "counts", false), s(t2, "joined", false), s(t2, "windows", true)),
			want: "OpenAhead(t1,[1_0/joined])"},
		step{ev: ahead(1, s(t0, "counts", false), s(t2, "windows", true))},
		step{ev: Event{Kind: EvPause}},
		step{ev: ahead(1, s(t2, "joined", false))},
		step{ev: Event{Kind: EvResume}},
		step{ev: ahead(1, s(t2, "joined", false)), want: "OpenAhead(t1,[1_0/joined])"},
		step{ev: exit(1, false)},
	)
	if _, err := c.Step(ahead(1, s(t2, "joined", false))); !errors.Is(err, ErrRefused) {
		t.Fatalf("ahead for a thread gone for good: %v", err)
	}
}

// A replaced thread's next incarnation is heard before its predecessor's
// exit only in what does not presume a claim: its share, received
// assignment and revocation are held for the exit, its claims wait; an
// incarnation that exited, or one two ahead, is not heard at all.
func TestIncarnations(t *testing.T) {
	as := func(inc int, e Event) Event { e.Incarnation = inc; return e }
	c := newCore(2)
	script(t, c,
		step{ev: share(0, ids(t0), nil, nil)},
		step{ev: share(1, nil, nil, nil), want: "ReleaseAhead(keep[0_0])"},
		step{ev: claim(0, t0), want: "OpenActive(t0,0_0)"},
		step{ev: started(0, t0)},
		step{ev: as(1, share(0, ids(t0, t1), ids(t2), nil))},
		step{ev: as(1, claim(0, t1)), want: "Held(t0,0_1)"},
	)
	for _, e := range []Event{
		as(1, started(0, t0)),
		as(1, release(0, t0, true, true)),
		as(1, Event{Kind: EvCloseActive, Thread: 0, Task: t0}),
		as(1, Event{Kind: EvThreadExit, Thread: 0, Replaced: true}),
		as(2, share(0, nil, nil, nil)),
	} {
		if _, err := c.Step(e); !errors.Is(err, ErrRefused) {
			t.Fatalf("%s (incarnation %d): %v, want refused", e, e.Incarnation, err)
		}
	}
	if s, _ := c.Share(0); !slices.Equal(s.Active, ids(t0)) {
		t.Fatalf("before the exit, thread 0's share is %+v, want the predecessor's", s)
	}
	script(t, c,
		step{ev: Event{Kind: EvThreadExit, Thread: 0, Replaced: true},
			want: "CloseActive(t0,0_0,clean=false) OpenStandby(1_0,standby) ReleaseAhead(keep[0_0 0_1 1_0])"},
		step{ev: closed(t0, true)},
		step{ev: as(1, claim(0, t1)), want: "OpenActive(t0,0_1)"},
	)
	if s, _ := c.Share(0); !slices.Equal(s.Active, ids(t0, t1)) {
		t.Fatalf("after the exit, thread 0's share is %+v, want the replacement's", s)
	}
	if _, err := c.Step(claim(0, t0)); !errors.Is(err, ErrRefused) {
		t.Fatalf("a claim of the exited incarnation: %v, want refused", err)
	}
}

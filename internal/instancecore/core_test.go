package instancecore

import (
	"errors"
	"strings"
	"testing"

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
	c := New(2, nil)
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

	c = New(1, nil)
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
	c := New(2, ids(t1))
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

// Directories left on disk are deleted when they expire, unless opened
// meanwhile; a failed deletion is tried again.
func TestExpiry(t *testing.T) {
	c := New(1, ids(t0, t1))
	script(t, c,
		step{ev: claim(0, t1), want: "OpenActive(t0,0_1)"},
		step{ev: Event{Kind: EvExpired, Task: t1}},
		step{ev: Event{Kind: EvExpired, Task: t0}, want: "Delete(0_0)"},
		step{ev: claim(0, t0), want: "Held(t0,0_0)"},
		step{ev: Event{Kind: EvDeleted, Task: t0}},
		step{ev: Event{Kind: EvExpired, Task: t0}, want: "Delete(0_0)"},
		step{ev: Event{Kind: EvDeleted, Task: t0, OK: true}},
	)
	if c.OnDisk(t0) {
		t.Fatal("deleted directory still on disk")
	}
}

// Closing the instance waits for what is in flight, then closes every
// replica no thread owns.
func TestClose(t *testing.T) {
	c := New(1, nil)
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
	if _, err := c.Step(Event{Kind: EvThreadExit, Thread: 0}); !errors.Is(err, ErrRefused) {
		t.Fatalf("exit of a thread owning a replica: %v", err)
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

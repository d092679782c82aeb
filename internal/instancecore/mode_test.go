package instancecore

import (
	"errors"
	"slices"
	"testing"

	"github.com/eddystreams/eddy/task"
)

// A pause closes every replica no thread owns once nothing is in flight,
// opens nothing, lets recreated directories be wiped, and ends with the
// replicas following the shares again.
func TestPause(t *testing.T) {
	c := newCore(1, t2)
	script(t, c,
		step{ev: share(0, nil, ids(t0), nil), want: "OpenStandby(0_0,standby) ReleaseAhead(keep[0_0])"},
		step{ev: Event{Kind: EvPause}},
		step{ev: share(0, nil, ids(t0, t1), nil)},
		step{ev: opened(t0, true), want: "CloseStandby(0_0)"},
	)
	if c.Quiet() {
		t.Fatal("quiet with a close in flight")
	}
	script(t, c,
		step{ev: closed(t0, true)},
		step{ev: tick(2 * testDelay)},
		step{ev: Event{Kind: EvWipe, Task: t0}, want: "Delete(0_0)"},
		step{ev: Event{Kind: EvDeleted, Task: t0, OK: true}},
	)
	if !c.Quiet() || c.OnDisk(t0) || !c.OnDisk(t2) {
		t.Fatalf("after the wipe: quiet %t, 0_0 on disk %t, 1_0 on disk %t", c.Quiet(), c.OnDisk(t0), c.OnDisk(t2))
	}
	script(t, c, step{ev: Event{Kind: EvResume}, want: "OpenStandby(0_0,standby) OpenStandby(0_1,standby)"})
	if _, err := c.Step(Event{Kind: EvWipe, Task: t2}); !errors.Is(err, ErrRefused) {
		t.Fatalf("wipe while open: %v", err)
	}
	if _, err := c.Step(Event{Kind: EvResume}); !errors.Is(err, ErrRefused) {
		t.Fatalf("resume while open: %v", err)
	}
}

// Stores opened ahead are let go once every thread's share is current,
// but those a share names; a task they leave behind is on disk unless
// open.
func TestAhead(t *testing.T) {
	c := newCore(2)
	script(t, c,
		step{ev: share(0, ids(t0), nil, nil)},
		step{ev: claim(0, t0), want: "OpenActive(t0,0_0)"},
		step{ev: share(1, nil, nil, ids(t1)), want: "OpenStandby(0_1,warmup) ReleaseAhead(keep[0_0 0_1])"},
		step{ev: Event{Kind: EvAheadClosed, Task: t2}},
		step{ev: Event{Kind: EvAheadClosed, Task: t0}},
	)
	if !c.OnDisk(t2) || c.OnDisk(t0) || !c.Holds(t0) || !c.Holds(t2) || c.Holds(task.ID{SubTopology: 3}) {
		t.Fatalf("on disk: 1_0 %t, 0_0 %t", c.OnDisk(t2), c.OnDisk(t0))
	}
}

// Queries read a replica only while its stores are open and some thread's
// latest received assignment names it, but a running active, which
// answers until its thread revokes it.
func TestServable(t *testing.T) {
	c := running(t)
	received := func(th int, s Share) Event { return Event{Kind: EvReceived, Thread: th, Share: s} }
	script(t, c,
		step{ev: revoked(0)},
		step{ev: release(0, t1, true, true), want: "Park(t0,0_1)"},
		step{ev: received(0, Share{Standby: ids(t1)})},
	)
	if !c.Servable(t0) || !c.Servable(t1) {
		t.Fatal("not servable before every thread received its assignment")
	}
	script(t, c, step{ev: received(1, Share{Active: ids(t2)})})
	if !c.Servable(t0) || !c.Servable(t1) {
		t.Fatal("a running active or a replica named by an assignment not servable")
	}
	script(t, c,
		step{ev: received(0, Share{})},
		step{ev: share(0, nil, ids(t1), nil), want: "Adopt(0_1,standby) ReleaseAhead(keep[0_1])"},
	)
	if !c.Servable(t0) || c.Servable(t1) {
		t.Fatalf("servable: running %t, parked given away %t", c.Servable(t0), c.Servable(t1))
	}
	script(t, c, step{ev: received(0, Share{Standby: ids(t1)})})
	if !c.Servable(t1) || !c.Visible(t1) {
		t.Fatal("a parked replica being adopted stops answering")
	}
	script(t, c,
		step{ev: Event{Kind: EvCloseActive, Thread: 0, Task: t0}, want: "CloseActive(t0,0_0,clean=false)"},
	)
	if c.Visible(t0) || c.Servable(t0) {
		t.Fatal("a closing replica is readable")
	}
}

// Every state change is reported, in order.
func TestOnMove(t *testing.T) {
	c := newCore(1)
	var moves []string
	c.OnMove = func(id task.ID, from, to task.State) {
		moves = append(moves, id.String()+" "+from.String()+">"+to.String())
	}
	script(t, c,
		step{ev: share(0, nil, ids(t0), nil), want: "OpenStandby(0_0,standby) ReleaseAhead(keep[0_0])"},
		step{ev: opened(t0, true)},
		step{ev: claim(0, t0), want: "Promote(t0,0_0)"},
		step{ev: restored(t0)},
		step{ev: Event{Kind: EvCloseActive, Thread: 0, Task: t0, Committed: true}, want: "CloseActive(t0,0_0,clean=true)"},
	)
	want := []string{"0_0 created>standby", "0_0 standby>restoring", "0_0 restoring>running", "0_0 running>closed"}
	if !slices.Equal(moves, want) {
		t.Fatalf("moves %q, want %q", moves, want)
	}
}

package instancecore

import (
	"fmt"
	"testing"

	"github.com/eddystreams/eddy/task"
)

// A core of threads taken through evs, every event accepted, makes the move
// from → to of task 0_0.
type moveCase struct {
	from, to task.State
	threads  int
	evs      []Event
}

// parkedT0 takes a two-thread instance to 0_0 parked: run by thread 0,
// revoked with its work committed and its stores kept.
func parkedT0(restore bool) []Event {
	evs := []Event{claim(0, t0), started(0, t0)}
	if restore {
		evs = append(evs, restored(t0))
	}
	return append(evs, share(0, ids(t0), nil, nil), share(1, nil, nil, nil), revoked(0), release(0, t0, true, true))
}

// followingT0 takes a one-thread instance to 0_0 open as a standby or
// warmup (as).
func followingT0(as task.State) []Event {
	sh := share(0, nil, ids(t0), nil)
	if as == task.Warmup {
		sh = share(0, nil, nil, ids(t0))
	}
	return []Event{sh, opened(t0, true)}
}

func then(evs []Event, more ...Event) []Event {
	return append(append([]Event(nil), evs...), more...)
}

// Each move task's table allows is one the core makes, from events a
// driver sends: the table has no row the core never takes.
func TestEveryMoveOfTheTable(t *testing.T) {
	closeActive := Event{Kind: EvCloseActive, Thread: 0, Task: t0, Committed: true}
	cases := []moveCase{
		{task.Created, task.Restoring, 1, []Event{claim(0, t0), started(0, t0)}},
		{task.Created, task.Standby, 1, followingT0(task.Standby)},
		{task.Created, task.Warmup, 1, followingT0(task.Warmup)},
		{task.Created, task.Closed, 1, []Event{share(0, nil, ids(t0), nil), opened(t0, false)}},
		{task.Restoring, task.Running, 1, []Event{claim(0, t0), started(0, t0), restored(t0)}},
		{task.Restoring, task.Parked, 2, parkedT0(false)},
		{task.Restoring, task.Closed, 1, []Event{claim(0, t0), started(0, t0), closeActive, closed(t0, true)}},
		{task.Running, task.Parked, 2, parkedT0(true)},
		{task.Running, task.Closed, 1, []Event{claim(0, t0), started(0, t0), restored(t0), closeActive, closed(t0, true)}},
		{task.Parked, task.Restoring, 2, then(parkedT0(true), claim(1, t0), started(1, t0))},
		{task.Parked, task.Standby, 2, then(parkedT0(true), share(1, nil, ids(t0), nil), opened(t0, true))},
		{task.Parked, task.Warmup, 2, then(parkedT0(true), share(1, nil, nil, ids(t0)), opened(t0, true))},
		{task.Parked, task.Closed, 2, then(parkedT0(true), share(0, nil, nil, nil), closed(t0, true))},
		{task.Standby, task.Restoring, 1, then(followingT0(task.Standby), revoked(0), claim(0, t0), started(0, t0))},
		{task.Standby, task.Warmup, 1, then(followingT0(task.Standby), share(0, nil, nil, ids(t0)))},
		{task.Standby, task.Closed, 1, then(followingT0(task.Standby), share(0, nil, nil, nil), closed(t0, true))},
		{task.Warmup, task.Restoring, 1, then(followingT0(task.Warmup), revoked(0), claim(0, t0), started(0, t0))},
		{task.Warmup, task.Standby, 1, then(followingT0(task.Warmup), share(0, nil, ids(t0), nil))},
		{task.Warmup, task.Closed, 1, then(followingT0(task.Warmup), share(0, nil, nil, nil), closed(t0, true))},
	}
	covered := map[[2]task.State]bool{}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s>%s", tc.from, tc.to), func(t *testing.T) {
			if !task.CanTransition(tc.from, tc.to) {
				t.Fatalf("%s → %s is not in task's table", tc.from, tc.to)
			}
			c := newCore(tc.threads)
			made := false
			c.OnMove = func(id task.ID, from, to task.State) {
				made = made || id == t0 && from == tc.from && to == tc.to
			}
			for i, e := range tc.evs {
				if _, err := c.Step(e); err != nil {
					t.Fatalf("event %d %s: %v", i, e, err)
				}
			}
			if !made {
				r, ok := c.Replica(t0)
				t.Fatalf("no move %s → %s; 0_0 left %+v (present %t)", tc.from, tc.to, r, ok)
			}
		})
		covered[[2]task.State{tc.from, tc.to}] = true
	}
	for from := task.Created; from <= task.Closed; from++ {
		for to := task.Created; to <= task.Closed; to++ {
			if from != to && task.CanTransition(from, to) && !covered[[2]task.State{from, to}] {
				t.Errorf("no case for %s → %s", from, to)
			}
		}
	}
}

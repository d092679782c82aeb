package instancecore

import (
	"testing"

	"github.com/eddystreams/eddy/task"
)

// The reconciliation of idle standbys and parked replicas with the
// threads' current shares, from states set directly, one case each.
func TestReconcile(t *testing.T) {
	p := func(n int32) task.ID { return task.ID{SubTopology: 0, Partition: n} }
	ps := func(ns ...int32) []task.ID {
		var out []task.ID
		for _, n := range ns {
			out = append(out, p(n))
		}
		return out
	}
	all := map[int]bool{0: true, 1: true}
	for _, tc := range []struct {
		name    string
		held    map[task.ID]task.State
		busy    []task.ID
		shares  map[int]Share
		current map[int]bool
		want    string
	}{
		{name: "nothing held, nothing wanted", current: all},
		{
			name:    "standbys and warmups not open are opened, in task order",
			shares:  map[int]Share{0: {Standby: ps(2)}, 1: {Warmup: ps(1)}},
			current: all,
			want:    "OpenStandby(0_1,warmup) OpenStandby(0_2,standby)",
		},
		{
			name:    "a thread still to hear does not stop a standby opening",
			shares:  map[int]Share{0: {Standby: ps(1)}},
			current: map[int]bool{0: true},
			want:    "OpenStandby(0_1,standby)",
		},
		{
			name:    "the share of a thread still to hear is ignored",
			shares:  map[int]Share{0: {}, 1: {Standby: ps(1)}},
			current: map[int]bool{0: true},
		},
		{
			name:    "a task active on one thread is no standby of another",
			shares:  map[int]Share{0: {Active: ps(1)}, 1: {Standby: ps(1), Warmup: ps(1)}},
			current: all,
		},
		{
			name:    "standby wins over warmup",
			shares:  map[int]Share{0: {Warmup: ps(1)}, 1: {Standby: ps(1)}},
			current: all,
			want:    "OpenStandby(0_1,standby)",
		},
		{
			name:    "a standby that becomes a warmup and a warmup that becomes a standby are retagged, one that stays is left",
			held:    map[task.ID]task.State{p(0): task.Standby, p(1): task.Standby, p(2): task.Warmup},
			shares:  map[int]Share{0: {Standby: ps(0, 2)}, 1: {Warmup: ps(1)}},
			current: all,
			want:    "Retag(0_1,warmup) Retag(0_2,standby)",
		},
		{
			name:    "parked stores wanted as a standby or warmup are adopted",
			held:    map[task.ID]task.State{p(0): task.Parked, p(1): task.Parked},
			shares:  map[int]Share{1: {Warmup: ps(0), Standby: ps(1)}},
			current: map[int]bool{1: true},
			want:    "Adopt(0_0,warmup) Adopt(0_1,standby)",
		},
		{
			name:    "nothing closes until every thread has its assignment",
			held:    map[task.ID]task.State{p(0): task.Parked, p(1): task.Standby, p(2): task.Warmup},
			shares:  map[int]Share{0: {}, 1: {Standby: ps(1)}},
			current: map[int]bool{0: true},
		},
		{
			name:    "once every thread has its assignment, what none wants closes",
			held:    map[task.ID]task.State{p(0): task.Parked, p(1): task.Standby, p(2): task.Warmup, p(3): task.Parked},
			shares:  map[int]Share{0: {}, 1: {Active: ps(3)}},
			current: all,
			want:    "CloseParked(0_0) CloseStandby(0_1) CloseStandby(0_2)",
		},
		{
			name:    "actives, restoring tasks and claimed tasks are the threads' business",
			held:    map[task.ID]task.State{p(0): task.Running, p(1): task.Restoring, p(2): task.Created},
			shares:  map[int]Share{0: {Standby: ps(0)}, 1: {Warmup: ps(1, 2)}},
			current: all,
		},
		{
			name:    "a standby or parked task wanted as active is kept for the thread that claims it",
			held:    map[task.ID]task.State{p(0): task.Standby, p(1): task.Parked, p(2): task.Warmup},
			shares:  map[int]Share{0: {Active: ps(0)}, 1: {Active: ps(1, 2)}},
			current: all,
		},
		{
			name:    "a task whose stores are in flight is neither opened nor closed",
			held:    map[task.ID]task.State{p(1): task.Standby},
			busy:    ps(0, 1),
			shares:  map[int]Share{0: {Standby: ps(0)}, 1: {}},
			current: all,
		},
		{
			name: "everything at once: adopt, retag, close and open in one plan",
			held: map[task.ID]task.State{p(0): task.Running, p(1): task.Parked, p(2): task.Standby, p(3): task.Warmup, p(4): task.Parked},
			shares: map[int]Share{
				0: {Active: ps(0), Standby: ps(1)},
				1: {Warmup: ps(2, 5), Active: ps(3)},
			},
			current: all,
			want:    "Adopt(0_1,standby) Retag(0_2,warmup) CloseParked(0_4) OpenStandby(0_5,warmup)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCore(2)
			for id, st := range tc.held {
				owner := -1
				if st.Active() || st == task.Created {
					owner = 0
				}
				c.reps[id] = &Replica{State: st, Owner: owner}
			}
			for _, id := range tc.busy {
				if r := c.reps[id]; r != nil {
					r.Work = Closing
				} else {
					c.reps[id] = &Replica{State: task.Created, Owner: -1, Work: Opening, As: task.Standby}
				}
			}
			c.shares, c.current = tc.shares, tc.current
			if c.shares == nil {
				c.shares = map[int]Share{}
			}
			c.reconcile()
			if got := acts(c.out); got != tc.want {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

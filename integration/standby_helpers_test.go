package integration

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// Helpers of the standby tests (standby_test.go, standby_join_test.go):
// groups of instances with standbys, the placement of their replicas as
// observed, and waits on it.

const (
	haApp = "wc"
	// haPartitions gives every instance of a three-instance group two
	// counts partitions to own.
	haPartitions = 6
	// standbyCatchUp bounds how long standbys may trail their actives once
	// input stops. A healthy run needs well under a second.
	standbyCatchUp = 10 * time.Second
)

// countsTask is the task that owns partition p of the counts store.
func countsTask(p int32) task.ID { return task.ID{SubTopology: 1, Partition: p} }

// startGroup starts n instances, one after the other, each with its own
// state directory and a distinct endpoint (the assignor's host maps list only
// processes that advertise one).
func (c *cluster) startGroup(t *testing.T, n int, cfg func(i int) instanceConfig) []*instance {
	t.Helper()
	insts := make([]*instance, n)
	for i := range insts {
		insts[i] = c.startMember(t, i, cfg(i))
	}
	return insts
}

// startMember starts instance number i of a group.
func (c *cluster) startMember(t *testing.T, i int, cfg instanceConfig) *instance {
	t.Helper()
	if cfg.stateDir == "" {
		cfg.stateDir = t.TempDir()
	}
	cfg.endpoint = memberEndpoint(i)
	return c.start(t, fmt.Sprintf("i%d", i), cfg)
}

func memberEndpoint(i int) string { return fmt.Sprintf("127.0.0.1:%d", 10001+i) }

// holder is one instance's replica of one counts partition.
type holder struct {
	in   *instance
	info runtime.ReplicaInfo
}

func (h holder) String() string {
	return fmt.Sprintf("%s:%s@%d/%d", h.in.name, h.info.State, h.info.Position, h.info.End)
}

// partView is every replica of one counts partition across a group.
type partView struct {
	active  []holder // running actives
	standby []holder // standbys proper, not warmups
	other   []holder // restoring, warmup, idle
}

func (v *partView) instances() []*instance {
	var out []*instance
	for _, hs := range [][]holder{v.active, v.standby, v.other} {
		for _, h := range hs {
			out = append(out, h.in)
		}
	}
	return out
}

func (v *partView) String() string {
	return fmt.Sprintf("active %v standby %v other %v", v.active, v.standby, v.other)
}

// live returns the instances that are running.
func live(insts []*instance) []*instance {
	var out []*instance
	for _, in := range insts {
		if in.State().IsRunningOrRebalancing() {
			out = append(out, in)
		}
	}
	return out
}

// observe gathers the counts replicas of the running instances by
// partition.
func (c *cluster) observe(insts []*instance) map[int32]*partView {
	view := make(map[int32]*partView, c.partitions)
	for p := range c.partitions {
		view[p] = &partView{}
	}
	for _, in := range live(insts) {
		for _, ri := range in.Replicas() {
			if ri.Store != countsStore {
				continue
			}
			v := view[ri.Partition]
			h := holder{in: in, info: ri}
			switch ri.State {
			case task.Running:
				v.active = append(v.active, h)
			case task.Standby:
				v.standby = append(v.standby, h)
			default:
				v.other = append(v.other, h)
			}
		}
	}
	return view
}

// activeProblems says what keeps the running instances from serving every
// task: each task held once, running, and every counts partition readable
// from exactly one active.
func (c *cluster) activeProblems(insts []*instance, view map[int32]*partView) []string {
	var probs []string
	held := make(map[task.ID]string)
	for _, in := range live(insts) {
		if err := in.Err(); err != nil {
			probs = append(probs, fmt.Sprintf("%s failed: %v", in.name, err))
		}
		for _, ti := range in.Tasks() {
			if ti.State != task.Running {
				probs = append(probs, fmt.Sprintf("%s: task %s %s", in.name, ti.ID, ti.State))
			}
			if other, dup := held[ti.ID]; dup {
				probs = append(probs, fmt.Sprintf("task %s on %s and %s", ti.ID, other, in.name))
			}
			held[ti.ID] = in.name
		}
	}
	if len(held) != c.allTasks() {
		probs = append(probs, fmt.Sprintf("%d of %d tasks held", len(held), c.allTasks()))
	}
	for p := range c.partitions {
		if n := len(view[p].active); n != 1 {
			probs = append(probs, fmt.Sprintf("partition %d has %d running actives: %v", p, n, view[p]))
		}
	}
	return probs
}

// placementProblems says what keeps the group from the settled layout with
// k standbys per counts partition: one running active and k standbys on
// distinct instances, no other replicas, every instance holding the same
// latest assignment without warmups or a pending probing rebalance, actives
// balanced, and the assignment's host maps naming the replicas the
// instances actually hold.
func (c *cluster) placementProblems(insts []*instance, k int, view map[int32]*partView) []string {
	probs := c.activeProblems(insts, view)
	running := live(insts)
	for p := range c.partitions {
		v := view[p]
		if len(v.standby) != k || len(v.other) != 0 {
			probs = append(probs, fmt.Sprintf("partition %d: want 1 active and %d standbys, have %v", p, k, v))
		}
		ins := v.instances()
		if len(slices.Compact(sortedNames(ins))) != len(ins) {
			probs = append(probs, fmt.Sprintf("partition %d: replicas share an instance: %v", p, v))
		}
	}
	var first *runtime.Assignment
	for _, in := range running {
		a, ok := in.Assignment()
		if !ok {
			probs = append(probs, in.name+" has no assignment")
			continue
		}
		if len(a.Warmup) > 0 {
			probs = append(probs, fmt.Sprintf("%s has warmups %v", in.name, a.Warmup))
		}
		if a.NextProbingRebalanceMs != 0 {
			probs = append(probs, in.name+" awaits a probing rebalance")
		}
		if first == nil {
			first = &a
			continue
		}
		if !sameHostMaps(*first, a) {
			probs = append(probs, in.name+" holds a different assignment")
		}
	}
	if first == nil || len(probs) > 0 {
		return probs
	}
	if len(first.PartitionsByHost) != len(running) {
		probs = append(probs, fmt.Sprintf("assignment names %d active hosts for %d instances", len(first.PartitionsByHost), len(running)))
	}
	probs = append(probs, c.balanceProblems(*first)...)
	for p := range c.partitions {
		id := countsTask(p)
		v := view[p]
		if hs := hostsOf(first.PartitionsByHost, id); !slices.Equal(hs, []string{v.active[0].in.endpoint}) {
			probs = append(probs, fmt.Sprintf("assignment names %v as active hosts of %s, %s runs it", hs, id, v.active[0].in.name))
		}
		var sb []string
		for _, h := range v.standby {
			sb = append(sb, h.in.endpoint)
		}
		slices.Sort(sb)
		if hs := hostsOf(first.StandbyPartitionsByHost, id); !slices.Equal(hs, sb) {
			probs = append(probs, fmt.Sprintf("assignment names %v as standby hosts of %s, replicas are on %v", hs, id, sb))
		}
	}
	return probs
}

func sortedNames(ins []*instance) []string {
	var out []string
	for _, in := range ins {
		out = append(out, in.name)
	}
	slices.Sort(out)
	return out
}

func sameHostMaps(a, b runtime.Assignment) bool {
	return maps.EqualFunc(a.PartitionsByHost, b.PartitionsByHost, slices.Equal[[]task.ID]) &&
		maps.EqualFunc(a.StandbyPartitionsByHost, b.StandbyPartitionsByHost, slices.Equal[[]task.ID])
}

// hostsOf lists, sorted, the hosts a host map gives a task.
func hostsOf(m map[string][]task.ID, id task.ID) []string {
	var out []string
	for h, ids := range m {
		if slices.Contains(ids, id) {
			out = append(out, h)
		}
	}
	slices.Sort(out)
	return out
}

// waitPlacement waits for the settled layout with k standbys and returns it.
func (c *cluster) waitPlacement(t *testing.T, insts []*instance, k int) map[int32]*partView {
	t.Helper()
	var view map[int32]*partView
	waitFor(t, settleTimeout, fmt.Sprintf("one active and %d standbys per partition", k), func() (bool, string) {
		view = c.observe(insts)
		probs := c.placementProblems(insts, k, view)
		return len(probs) == 0, strings.Join(probs, "; ")
	})
	return view
}

// waitStandbysCurrent waits, in the settled layout, until every standby's
// position is its active's and both are at the end of the changelog: the
// standby has applied everything the active wrote.
func (c *cluster) waitStandbysCurrent(t *testing.T, insts []*instance, k int, timeout time.Duration) map[int32]*partView {
	t.Helper()
	var view map[int32]*partView
	waitFor(t, timeout, "standbys to reach their actives' positions", func() (bool, string) {
		view = c.observe(insts)
		if probs := c.placementProblems(insts, k, view); len(probs) > 0 {
			return false, strings.Join(probs, "; ")
		}
		ends := c.endOffsets(t, changelogTopic(haApp))[changelogTopic(haApp)]
		for p, v := range view {
			if pos := v.active[0].info.Position; pos != ends[p] {
				return false, fmt.Sprintf("partition %d: active at %d of %d", p, pos, ends[p])
			}
			for _, h := range v.standby {
				if h.info.Position != ends[p] {
					return false, fmt.Sprintf("partition %d: %v, changelog end %d", p, v, ends[p])
				}
			}
		}
		return true, ""
	})
	return view
}

// requireStandbyContents reads every word of want from the standbys of its
// partition: a current standby holds exactly what its active holds.
func requireStandbyContents(t *testing.T, partitions int32, view map[int32]*partView, want map[string]int64) {
	t.Helper()
	for p, v := range view {
		for _, h := range v.standby {
			got := make(map[string]int64)
			sub := make(map[string]int64)
			for w, n := range want {
				key, err := serde.String.Encode(w)
				require.NoError(t, err)
				if topology.Partition(key, partitions) != p {
					continue
				}
				sub[w] = n
				val, found, err := h.info.Backing.Get(key)
				require.NoError(t, err, "standby %s of partition %d", h.in.name, p)
				if found {
					val, _ = statestore.SplitTimestamped(val) // a count with its time
					got[w], err = serde.Int64.Decode(val)
					require.NoError(t, err)
				}
			}
			requireCounts(t, sub, got, fmt.Sprintf("standby of partition %d on %s", p, h.in.name))
		}
	}
}

// balanceProblems says how an assignment's actives are not spread evenly
// over the stream threads of its hosts, each of which runs c.threads: the
// assignor balances per thread of capacity, so once each host's tasks are
// split as evenly as they can be over its threads, every thread's counts
// tasks and all its tasks must be within one of every other thread's. With
// one thread per host that is every host within one of every other.
func (c *cluster) balanceProblems(a runtime.Assignment) []string {
	if len(a.PartitionsByHost) == 0 {
		return []string{"no active hosts"}
	}
	threads := max(c.threads, 1)
	stateful := make(map[string]int)
	for host, ids := range a.PartitionsByHost {
		for _, id := range ids {
			if id.SubTopology == 1 {
				stateful[host]++
			}
		}
	}
	// spread is the fewest and the most tasks of a kind that any thread
	// runs.
	spread := func(count func(host string) int) (lo, hi int) {
		lo = -1
		for host := range a.PartitionsByHost {
			n := count(host)
			if lo < 0 || n/threads < lo {
				lo = n / threads
			}
			hi = max(hi, (n+threads-1)/threads)
		}
		return lo, hi
	}
	sfLo, sfHi := spread(func(h string) int { return stateful[h] })
	allLo, allHi := spread(func(h string) int { return len(a.PartitionsByHost[h]) })
	if sfHi-sfLo <= 1 && allHi-allLo <= 1 {
		return nil
	}
	var probs []string
	for _, host := range slices.Sorted(maps.Keys(a.PartitionsByHost)) {
		probs = append(probs, fmt.Sprintf("%s runs %d counts tasks of %d tasks", host, stateful[host], len(a.PartitionsByHost[host])))
	}
	return append(probs, fmt.Sprintf("per thread of %d on each host: counts tasks %d to %d, all tasks %d to %d", threads, sfLo, sfHi, allLo, allHi))
}

// wholeAssignment returns the instance's assignment once every one of its
// threads has received the latest: Assignment joins the threads' shares,
// which arrive one by one, so until then the instance's tasks differ from
// what the group-wide host maps say it holds.
func wholeAssignment(in *instance) (runtime.Assignment, bool) {
	a, ok := in.Assignment()
	if !ok {
		return a, false
	}
	same := func(mine []task.ID, byHost map[string][]task.ID) bool {
		theirs := slices.SortedFunc(slices.Values(byHost[in.endpoint]), task.ID.Compare)
		return slices.Equal(slices.SortedFunc(slices.Values(mine), task.ID.Compare), theirs)
	}
	return a, same(a.Active, a.PartitionsByHost) && same(a.Standby, a.StandbyPartitionsByHost) &&
		same(a.Warmup, a.WarmupPartitionsByHost)
}

func assignmentsEqual(a, b runtime.Assignment) bool {
	return slices.Equal(a.Active, b.Active) && slices.Equal(a.Standby, b.Standby) && slices.Equal(a.Warmup, b.Warmup) &&
		a.NextProbingRebalanceMs == b.NextProbingRebalanceMs && sameHostMaps(a, b)
}

package integration

// Instances joining a group with standbys, or coming back to it: warmups,
// joins that need none, and restarts that keep caught-up state.

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/assignor"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/task"
)

// TestNewInstanceWarmsUp adds an instance to a group with large state. It
// receives warmups, never an active it has not warmed up to within
// AcceptableRecoveryLag, and probing rebalances move actives to it until
// the group is balanced.
//
// The group leader's plans are recorded through AssignFunc rather than
// sampled from the new instance: a round can last less than one poll (a
// warmup that catches up is promoted by the next probing rebalance, and a
// cooperative hold-back adds a round within milliseconds), so sampling can
// miss the assignment that carried a task's warmup and see only its
// promotion.
func TestNewInstanceWarmsUp(t *testing.T) {
	const acceptableLag = 100
	type plan struct {
		in  assignor.Input
		out assignor.Output
	}
	var (
		mu    sync.Mutex
		plans []plan
	)
	cfg := instanceConfig{acceptableLag: acceptableLag, maxWarmups: 1, probing: time.Second,
		assign: func(ac assignor.Config, in assignor.Input) assignor.Output {
			out := assignor.Assign(ac, in)
			mu.Lock()
			plans = append(plans, plan{in, out})
			mu.Unlock()
			return out
		}}
	c := newCluster(t, haPartitions)
	insts := c.startGroup(t, 2, func(int) instanceConfig { return cfg })
	c.waitPlacement(t, insts, 0)

	gen := newCorpus(14, 3000)
	want := make(map[string]int64)
	// Several batches, each committed before the next, so the changelogs
	// hold several updates per word however fast processing is.
	for range 5 {
		c.produceLines(t, gen.Lines(12_000, want))
		c.waitCaughtUp(t, haApp)
	}
	ends := c.endOffsets(t, changelogTopic(haApp))[changelogTopic(haApp)]
	for p, end := range ends {
		require.Greater(t, end, int64(5*acceptableLag), "changelog partition %d is too small for a fresh instance to be behind", p)
	}

	joiner := c.startMember(t, 2, cfg)
	insts = append(insts, joiner)
	var assignments []runtime.Assignment // distinct, in order, as sampled
	began := time.Now()
	waitFor(t, settleTimeout, "the group to converge with the new instance", func() (bool, string) {
		if a, ok := wholeAssignment(joiner); ok && (len(assignments) == 0 || !assignmentsEqual(assignments[len(assignments)-1], a)) {
			assignments = append(assignments, a)
		}
		view := c.observe(insts)
		if probs := c.placementProblems(insts, 0, view); len(probs) > 0 {
			return false, strings.Join(probs, "; ")
		}
		a, _ := joiner.Assignment()
		if a.NextProbingRebalanceMs != 0 {
			return false, "another probing rebalance is scheduled"
		}
		probs := c.balanceProblems(a)
		return len(probs) == 0, strings.Join(probs, "; ")
	})
	t.Logf("converged %s after the join through %d sampled assignments of the new instance", time.Since(began).Round(time.Millisecond), len(assignments))

	mu.Lock()
	recorded := slices.Clone(plans)
	mu.Unlock()
	pid := joiner.ProcessID()
	var (
		warmedUp     = make(map[task.ID]bool)
		earlyActives []string
		probing      int
		rounds       int
	)
	for _, p := range recorded {
		cs, ok := p.in.Clients[pid]
		if !ok {
			continue
		}
		rounds++
		a := p.out.Clients[pid]
		t.Logf("plan %d for the new instance: active %v, standby %v, warmup %v, follow-up %v", rounds, a.Active, a.Standby, a.Warmup, p.out.FollowupRebalance)
		require.LessOrEqual(t, len(a.Warmup), cfg.maxWarmups, "plan %d: %v", rounds, a.Warmup)
		for _, id := range a.Active {
			if !p.in.Tasks[id].Stateful || slices.Contains(cs.PrevActive, id) {
				continue
			}
			if lag, has := cs.Lags[id]; !has || (lag != assignor.LagRunning && lag > acceptableLag) {
				earlyActives = append(earlyActives, fmt.Sprintf("%s in plan %d (lag %d, has state %v)", id, rounds, lag, has))
			}
		}
		for _, id := range a.Warmup {
			warmedUp[id] = true
		}
		if p.out.FollowupRebalance {
			probing++
		}
	}

	require.NotEmpty(t, warmedUp, "the new instance received no warmups")
	require.Empty(t, earlyActives, "counts actives planned on the new instance before it was caught up")
	require.GreaterOrEqual(t, probing, 2,
		"with one warmup at a time, two actives need at least two probing rebalances to move")
	// Input is stopped, so what an active restored on the new instance is
	// the lag its warmup had when the active moved; Restored counts every
	// restoration since the instance started.
	stateful := 0
	for _, ti := range joiner.Tasks() {
		if ti.ID.SubTopology != 1 {
			continue
		}
		stateful++
		t.Logf("task %s: restored %d of %d changelog records on the new instance", ti.ID, ti.Restored, ends[ti.ID.Partition])
		require.LessOrEqual(t, ti.Restored, int64(acceptableLag), "task %s restored more than AcceptableRecoveryLag", ti.ID)
	}
	require.Equal(t, haPartitions/3, stateful, "counts tasks on the new instance")

	c.produceLines(t, gen.Lines(10_000, want))
	c.waitCaughtUp(t, haApp)
	requireStore(t, want, insts...)
	c.requireOutput(t, want)
}

// TestJoinOnEmptyChangelogsNeedsNoWarmup starts a second instance after the
// first already runs every task but before any input: every changelog is
// empty, so the newcomer's lag on every task is zero and it is caught up.
// The group must balance at once, without warmups or a probing rebalance
// (whose default interval is ten minutes).
func TestJoinOnEmptyChangelogsNeedsNoWarmup(t *testing.T) {
	c := newCluster(t, haPartitions)
	first := c.startMember(t, 0, instanceConfig{})
	first.waitAllTasksRunning(t, c.allTasks(), settleTimeout)
	insts := []*instance{first, c.startMember(t, 1, instanceConfig{})}
	waitFor(t, 20*time.Second, "two instances to split the tasks without warmups", func() (bool, string) {
		probs := c.placementProblems(insts, 0, c.observe(insts))
		if len(probs) == 0 {
			a, _ := first.Assignment()
			probs = c.balanceProblems(a)
		}
		return len(probs) == 0, strings.Join(probs, "; ")
	})
}

// TestRestartKeepsCaughtUpState closes an instance, lets the others run its
// tasks for a while, and starts it again on its state directory: it comes
// back as the same process, counts as caught up, and gets its counts
// partitions back at once, restoring only what was written while it was
// away.
func TestRestartKeepsCaughtUpState(t *testing.T) {
	// restartLag is above what the instance misses while away and below
	// every whole changelog. With the default AcceptableRecoveryLag every
	// instance would count as caught up on every task of these short
	// changelogs, so the instances that must give up a task for balance
	// could give up any, not necessarily the returner's old ones.
	const restartLag = 200
	c := newCluster(t, haPartitions)
	// A short probing interval lets the group settle as it forms (see
	// TestJoinOnEmptyChangelogsNeedsNoWarmup); the restart itself must not
	// need a probing rebalance.
	cfg := instanceConfig{probing: time.Second, acceptableLag: restartLag}
	insts := c.startGroup(t, 3, func(int) instanceConfig { return cfg })
	c.waitPlacement(t, insts, 0)

	gen := newCorpus(15, 2000)
	want := make(map[string]int64)
	c.produceLines(t, gen.Lines(40_000, want))
	c.waitCaughtUp(t, haApp)

	back := insts[1]
	view := c.observe(insts)
	var old []task.ID
	for p, v := range view {
		if v.active[0].in == back {
			old = append(old, countsTask(p))
		}
	}
	slices.SortFunc(old, task.ID.Compare)
	require.NotEmpty(t, old)
	pid := back.ProcessID()
	back.close(t)
	rest := []*instance{insts[0], insts[2]}
	waitFor(t, settleTimeout, "the others to take over", func() (bool, string) {
		probs := c.activeProblems(rest, c.observe(rest))
		return len(probs) == 0, strings.Join(probs, "; ")
	})
	c.produceLines(t, gen.Lines(2_000, want))
	c.waitCaughtUp(t, haApp)

	ends := c.endOffsets(t, changelogTopic(haApp))[changelogTopic(haApp)]
	pos := storePositions(t, back.stateDir, haApp, c.partitions)
	tail := make(map[task.ID]int64)
	for _, id := range old {
		p := id.Partition
		require.Contains(t, pos, p, "store of %s left on disk", id)
		tail[id] = ends[p] - pos[p]
		require.Positive(t, tail[id], "the changelog of %s grew while the instance was away", id)
		require.LessOrEqual(t, tail[id], int64(restartLag),
			"precondition: the tail of %s is within AcceptableRecoveryLag", id)
	}
	for p := range c.partitions {
		if slices.Contains(old, countsTask(p)) {
			continue
		}
		lag := ends[p]
		if at, ok := pos[p]; ok && at > 0 {
			lag -= at
		}
		require.Greater(t, lag, int64(restartLag),
			"precondition: the returner is not caught up on partition %d, which it did not run", p)
	}
	t.Logf("tails %v; changelog ends %v", tail, ends)

	cfg.stateDir = back.stateDir
	again := c.startMember(t, 1, cfg)
	require.Equal(t, pid, again.ProcessID(), "process ID kept in the state directory")
	insts[1] = again
	var seen []runtime.Assignment
	waitFor(t, settleTimeout, "the restarted instance to run its old partitions", func() (bool, string) {
		if a, ok := wholeAssignment(again); ok && (len(seen) == 0 || !assignmentsEqual(seen[len(seen)-1], a)) {
			seen = append(seen, a)
		}
		probs := c.placementProblems(insts, 0, c.observe(insts))
		return len(probs) == 0, strings.Join(probs, "; ")
	})
	require.NotEmpty(t, seen)
	for i, a := range seen {
		require.Empty(t, a.Warmup, "assignment %d of the restarted instance has warmups", i)
	}
	// Under cooperative rebalancing an assignment holds back every task
	// another instance still runs, and a probing rebalance may be under way
	// when the returner joins, so its old tasks may come over more than one
	// round. Whatever the rounds, the returner is given back only its own
	// stateful tasks, and all of them.
	var stateful []task.ID
	for i, a := range seen {
		for _, id := range a.Active {
			if id.SubTopology != 1 {
				continue
			}
			require.Contains(t, old, id, "assignment %d of the restarted instance gives it %s, which it did not run", i, id)
			if !slices.Contains(stateful, id) {
				stateful = append(stateful, id)
			}
		}
	}
	slices.SortFunc(stateful, task.ID.Compare)
	require.Equal(t, old, stateful, "counts partitions given to the restarted instance")

	byTask := make(map[task.ID]runtime.TaskInfo)
	for _, ti := range again.Tasks() {
		byTask[ti.ID] = ti
	}
	for _, id := range old {
		require.Equal(t, tail[id], byTask[id].Restored, "task %s restores exactly the tail written while away", id)
		require.Less(t, byTask[id].Restored, ends[id.Partition], "task %s restored its whole changelog", id)
		t.Logf("task %s: restored %d of %d changelog records", id, byTask[id].Restored, ends[id.Partition])
	}

	c.produceLines(t, gen.Lines(10_000, want))
	c.waitCaughtUp(t, haApp)
	requireStore(t, want, insts...)
	c.requireOutput(t, want)
}

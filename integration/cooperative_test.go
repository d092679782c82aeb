package integration

import (
	"fmt"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/task"
)

// TestCooperativeJoinKeepsTasksProcessing is issue 13's test 1: while a
// second instance joins a loaded group, the tasks that stay on the first
// keep processing through the rebalance — their per-task counters climb
// between the moment the first instance starts rebalancing and the moment
// the split has settled, and never restart — and the counts are exact at
// the end. Eager rebalancing, the control, restarts every task.
func TestCooperativeJoinKeepsTasksProcessing(t *testing.T) {
	for _, tc := range []struct {
		name      string
		guarantee runtime.ProcessingGuarantee
		eager     bool
	}{
		{"at-least-once", runtime.AtLeastOnce, false},
		{"exactly-once", runtime.ExactlyOnce, false},
		{"eager control", runtime.AtLeastOnce, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 4)
			gen := newCorpus(13, 2000)
			want := make(map[string]int64)
			var armed atomic.Bool
			rebalancing := make(chan struct{})
			a := c.start(t, "a", instanceConfig{stateDir: t.TempDir(), guarantee: tc.guarantee, eagerRebalancing: tc.eager,
				stateListener: func(old, new runtime.State) {
					if armed.Load() && old == runtime.StateRunning && new == runtime.StateRebalancing && armed.CompareAndSwap(true, false) {
						close(rebalancing)
					}
				}})
			a.waitAllTasksRunning(t, c.allTasks(), settleTimeout)
			c.produceLines(t, gen.Lines(5000, want))

			processed := func() map[task.ID]int64 {
				out := map[task.ID]int64{}
				for _, ti := range a.Tasks() {
					out[ti.ID] = ti.Processed
				}
				return out
			}
			// Input keeps coming, a batch every 20 ms, for as long as the
			// test watches the rebalance.
			pace := time.NewTicker(20 * time.Millisecond)
			defer pace.Stop()
			feed := func() {
				<-pace.C
				c.produceLines(t, gen.Lines(100, want))
			}

			// The counters before the rebalance: a task restarted by it
			// (eager) counts from 0 again, below these, however quickly
			// the rebalance ends.
			var start map[task.ID]int64
			waitFor(t, settleTimeout, "every task of a processing input", func() (bool, string) {
				feed()
				start = processed()
				for _, n := range start {
					if n == 0 {
						return false, fmt.Sprint(start)
					}
				}
				return len(start) == c.allTasks(), fmt.Sprint(start)
			})
			armed.Store(true)
			b := c.start(t, "b", instanceConfig{stateDir: t.TempDir(), guarantee: tc.guarantee, eagerRebalancing: tc.eager})
			deadline := time.Now().Add(settleTimeout)
		waitRebalance:
			for {
				select {
				case <-rebalancing:
					break waitRebalance
				default:
				}
				require.True(t, time.Now().Before(deadline), "instance a never started rebalancing")
				feed()
			}
			last := maps.Clone(start)
			// A task a gave up, even for a moment (to another of its
			// threads), or whose counter restarted, did not run through.
			reset := map[task.ID]bool{}
			waitFor(t, settleTimeout, "instances to split the tasks", func() (bool, string) {
				feed()
				now := processed()
				for id := range start {
					n, ok := now[id]
					if !ok || n < last[id] {
						reset[id] = true
					}
					if ok {
						last[id] = n
					}
				}
				ra, allA := a.runningTasks()
				rb, allB := b.runningTasks()
				msg := fmt.Sprintf("a: %v, b: %v", a.Tasks(), b.Tasks())
				return allA && allB && len(ra) > 0 && len(rb) > 0 && len(ra)+len(rb) == c.allTasks(), msg
			})
			final := processed()
			var kept []task.ID
			var during int64
			for id, n := range final {
				if _, ok := start[id]; ok && !reset[id] && n >= last[id] {
					kept = append(kept, id)
					during += n - start[id]
				}
			}
			t.Logf("tasks on a after the split: %d; ran through the rebalance: %d, processing %d records while it went on", len(final), len(kept), during)
			if tc.eager {
				require.Empty(t, kept, "eager rebalancing restarts every task")
			} else {
				require.NotEmpty(t, kept, "no task of a ran through the rebalance")
				if streamThreads(t) == 1 {
					require.Len(t, kept, len(final), "every task a keeps runs through the rebalance")
				}
				require.Positive(t, during, "the tasks a kept processed nothing while the group rebalanced")
			}

			c.waitCaughtUp(t, "wc")
			requireStore(t, want, a, b)
			if tc.guarantee == runtime.ExactlyOnce {
				requireCounts(t, want, readCommittedLatest(t, c.b.Addrs()[0], outputTopic, c.partitions), "topic "+outputTopic)
			} else {
				c.requireOutput(t, want)
			}
			b.close(t)
			a.close(t)
		})
	}
}

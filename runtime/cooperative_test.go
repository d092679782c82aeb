package runtime

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// issue 13, test 3: a probing rebalance that moves no task revokes nothing
// under cooperative rebalancing: the tasks keep running, with their
// counters, through it. Eager rebalancing, the control, revokes them all.
func TestProbingRebalanceWithoutMovesRevokesNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		eager bool
		eos   bool
	}{{"cooperative", false, false}, {"cooperative exactly-once", false, true}, {"eager", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := startBroker(t, "in")
			cfg := Config{ApplicationID: "probe", Brokers: b.Addrs(), StateDir: t.TempDir(), NumStreamThreads: 2,
				EagerRebalancing: tc.eager, CommitInterval: 50 * time.Millisecond}
			if tc.eos {
				cfg.ProcessingGuarantee = ExactlyOnce
			}
			app, err := New(countTopology(t), cfg)
			require.NoError(t, err)
			require.NoError(t, app.Start(context.Background()))
			t.Cleanup(func() { app.Close(context.Background()) })

			cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			require.NoError(t, err)
			defer cl.Close()
			produce := func(n int) {
				for i := range n {
					for p := range int32(2) {
						require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Topic: "in", Partition: p, Key: fmt.Appendf(nil, "k%d", i%5), Value: []byte("v")}).FirstErr())
					}
				}
			}
			processed := func() (n int64) {
				for _, ti := range app.Tasks() {
					n += ti.Processed
				}
				return n
			}
			waitFor(t, 30*time.Second, "one task running on each thread", func() bool {
				for _, th := range app.threads {
					th.lockIdle()
					n := len(th.runningTasks())
					th.mu.Unlock()
					if n != 1 {
						return false
					}
				}
				return app.State() == StateRunning
			})
			base := processed()
			produce(20)
			waitFor(t, 30*time.Second, "all processed", func() bool { return processed() == base+40 })
			var assignments, revoked int64
			for _, th := range app.threads {
				assignments += th.assignments.Load()
				revoked += th.revokedTasks.Load()
			}
			revokedBefore := revoked

			// What the probing rebalance timer does.
			app.threads[0].forceRebalance()
			waitFor(t, 30*time.Second, "a rebalance to complete on both threads", func() bool {
				var n int64
				for _, th := range app.threads {
					n += th.assignments.Load()
				}
				return n >= assignments+2 && app.State() == StateRunning
			})
			produce(10)
			want := base + 60
			if tc.eager {
				want = 20 // counters restart with the tasks
			}
			waitFor(t, 30*time.Second, "the new records processed", func() bool { return processed() == want })
			revoked = -revokedBefore
			for _, th := range app.threads {
				revoked += th.revokedTasks.Load()
			}
			if tc.eager {
				require.Equal(t, int64(2), revoked, "eager rebalancing revokes every task")
				return
			}
			require.Zero(t, revoked, "a rebalance that moves nothing revokes nothing")
		})
	}
}

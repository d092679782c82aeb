package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// TestExactlyOnceAbortRewindsWindowTime: a transaction aborted in place
// whose input jumped stream time past a window is processed again from the
// time of the last commit, so a record it put in that window before the
// jump still counts, and nothing is dropped as late.
func TestExactlyOnceAbortRewindsWindowTime(t *testing.T) {
	t.Parallel()
	b, _ := startBroker(t, "in", "out")
	bld := topology.NewBuilder()
	w := topology.TumblingWindows(10 * time.Second).Grace(2 * time.Second)
	topology.WindowedBy(topology.Stream(bld, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String), w).
		Count("counts").ToStream().To("out", topology.TimeWindowedSerde(serde.String, w.Size()), serde.Int64)
	topo, err := bld.Build()
	require.NoError(t, err)

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic("in"))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	produce := func(times ...int64) {
		for _, ts := range times {
			cl.Produce(context.Background(), &kgo.Record{Key: []byte("a"), Value: []byte("v"), Timestamp: time.UnixMilli(ts)}, nil)
		}
		require.NoError(t, cl.Flush(context.Background()))
	}
	produce(1_000)

	app, err := New(topo, Config{ApplicationID: "eosrewind", Brokers: b.Addrs(), StateDir: t.TempDir(),
		NumStreamThreads: 1, ProcessingGuarantee: ExactlyOnce, CommitInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	t.Cleanup(func() { app.Close(context.Background()) })
	q := iq.NewQuerier(app.Queries())
	count := func(start int64) int64 {
		r, err := iq.WindowFetch[string, int64](context.Background(), q, "counts", "a", time.UnixMilli(start), time.UnixMilli(start), serde.String, serde.Int64)
		if err != nil || len(r.Windows) != 1 {
			return 0
		}
		return r.Windows[0].Value
	}
	waitFor(t, 60*time.Second, "the first record counted", func() bool { return count(0) == 1 })

	// The next transaction that writes fails; its input, a record in the
	// first window and one past its close (not yet expired), is processed again.
	fault := b.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "out", Err: kerr.InvalidTxnState})
	t.Cleanup(fault.Remove)
	produce(1_500, 13_000)
	waitFor(t, 60*time.Second, "the input after the abort counted", func() bool {
		return fault.Hits() >= 1 && count(10_000) == 1 && app.State() == StateRunning
	})
	require.NoError(t, app.Err())
	require.Equal(t, int64(2), count(0), "the record before the jump counts in its window")
	require.Zero(t, droppedLate(app), "nothing is late")
}

package runtime

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// A thread commits only between polls, so under exactly-once the transaction
// a poll's first output record opens stays open until the whole poll is
// processed. A thread starting on a backlog gets a whole fetch in its first
// poll; when processing that outlasts TransactionTimeout, the broker aborts
// the transaction and fences the producer, the thread rejoins with a new one,
// fetches the same records from the same committed offsets and is fenced
// again, for ever (the audit's run eos-11a: one thread fenced 42 times in 8
// minutes, each time about 10.6 s after its assignment). Here every record
// takes at least a millisecond (the Peek sleeps: a cost of processing, not a
// wait for a condition), so one poll of the 4,000 records of the backlog
// takes at least 4 s against a 3 s transaction timeout: the thread must take
// polls it can process in time and commit between them.
func TestExactlyOnceSlowBacklogCommitsWithinTransactionTimeout(t *testing.T) {
	t.Parallel()
	b, _ := startBroker(t, "in", "out")
	bld := topology.NewBuilder()
	topology.Stream(bld, "in", serde.String, serde.String).
		Peek(func(string, string) { time.Sleep(time.Millisecond) }).
		To("out", serde.String, serde.String)
	topo, err := bld.Build()
	require.NoError(t, err)

	const n = 4000
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic("in"))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	for i := range n {
		cl.Produce(context.Background(), &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%10), Value: fmt.Appendf(nil, "%d", i)}, nil)
	}
	require.NoError(t, cl.Flush(context.Background()))

	app, err := New(topo, Config{ApplicationID: "slowpoll", Brokers: b.Addrs(), StateDir: t.TempDir(),
		NumStreamThreads: 1, ProcessingGuarantee: ExactlyOnce, TransactionTimeout: 3 * time.Second})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	t.Cleanup(func() { app.Close(context.Background()) })

	rd, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumeTopics("out"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	t.Cleanup(rd.Close)
	seen := make(map[string]int)
	total := 0
	waitFor(t, 45*time.Second, "every input record in the committed output", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		rd.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			seen[string(r.Value)]++
			total++
		})
		return total >= n
	})
	require.Len(t, seen, n)
	require.Equal(t, n, total, "exactly once: no input record twice in the committed output")
	require.NoError(t, app.Err())
}

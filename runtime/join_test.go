package runtime

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestJoinDropsCounted checks that stream records a join drops for a null
// key or value reach TaskInfo.DroppedJoin and
// eddy_task_dropped_join_records_total, and that joinable records are not
// counted.
func TestJoinDropsCounted(t *testing.T) {
	b, _ := startBroker(t, "orders", "customers", "out")
	tb := topology.NewBuilder()
	customers := topology.Table(tb, "customers", serde.String, serde.String, "customers", topology.InMemory())
	orders := topology.Stream(tb, "orders", serde.String, serde.String)
	topology.Join(orders, customers, func(o, c string) string { return o + ":" + c }).To("out", serde.String, serde.String)
	topo, err := tb.Build()
	require.NoError(t, err)
	app, err := New(topo, Config{ApplicationID: "joindrops", Brokers: b.Addrs(), StateDir: t.TempDir(), CommitInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	defer app.Close(context.Background())
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(app.Metrics()))

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumeTopics("out"), kgo.FetchMaxWait(100*time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	ctx := context.Background()
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "customers", Key: []byte("c1"), Value: []byte("alice")}).FirstErr())
	// The order must find the customer: wait until the table holds it
	// (its update produces no output) by retrying the order.
	var out []string
	waitFor(t, 30*time.Second, "a joined order", func() bool {
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Key: []byte("c1"), Value: []byte("o1")}).FirstErr())
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) { out = append(out, string(r.Value)) })
		return len(out) > 0
	})
	require.Equal(t, "o1:alice", out[0])
	require.Zero(t, droppedJoin(app), "joined records are not drops")

	require.NoError(t, cl.ProduceSync(ctx,
		&kgo.Record{Topic: "orders", Key: []byte("c1")},             // null value
		&kgo.Record{Topic: "orders", Value: []byte("o2")},           // null key
		&kgo.Record{Topic: "orders", Key: []byte("c1"), Value: nil}, // null value
	).FirstErr())
	waitFor(t, 30*time.Second, "three dropped records", func() bool { return droppedJoin(app) == 3 })
	var perTask int64
	for _, ti := range app.Tasks() {
		perTask += ti.DroppedJoin
	}
	require.Equal(t, int64(3), perTask)
	require.Equal(t, 3.0, gather(t, reg).sum("eddy_task_dropped_join_records_total"))
}

// A stream–table join started over input already in its topics joins each
// order with the customer record stamped before it, whichever topic the
// fetch returned first: a task merges its partitions' records by
// timestamp.
func TestJoinTakesEarlierTableRecordsFirst(t *testing.T) {
	b, _ := startBroker(t, "orders", "customers", "out")
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumeTopics("out"), kgo.FetchMaxWait(100*time.Millisecond),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	require.NoError(t, err)
	defer cl.Close()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const customers, orders = 20, 400
	var recs []*kgo.Record
	// The orders go to the broker first, so their partitions are no later
	// in its log than the customers'.
	for i := range orders {
		c := fmt.Sprintf("c%02d", i%customers)
		recs = append(recs, &kgo.Record{Topic: "orders", Key: []byte(c), Value: fmt.Appendf(nil, "o%d", i), Timestamp: t0.Add(time.Duration(i+1) * time.Second)})
	}
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
	recs = recs[:0]
	for i := range customers {
		c := fmt.Sprintf("c%02d", i)
		recs = append(recs, &kgo.Record{Topic: "customers", Key: []byte(c), Value: []byte("name-" + c), Timestamp: t0})
	}
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())

	tb := topology.NewBuilder()
	table := topology.Table(tb, "customers", serde.String, serde.String, "customers", topology.InMemory())
	stream := topology.Stream(tb, "orders", serde.String, serde.String)
	topology.LeftJoin(stream, table, func(o, c string, found bool) string {
		if !found {
			return o + ":?"
		}
		return o + ":" + c
	}).To("out", serde.String, serde.String)
	topo, err := tb.Build()
	require.NoError(t, err)
	app, err := New(topo, Config{ApplicationID: "joinorder", Brokers: b.Addrs(), StateDir: t.TempDir(), CommitInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, app.Start(ctx))
	defer app.Close(ctx)

	joined := map[string]string{} // order → its output
	waitFor(t, 30*time.Second, "an output for every order", func() bool {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			o, _, _ := strings.Cut(string(r.Value), ":")
			joined[string(r.Key)+"/"+o] = string(r.Value)
		})
		return len(joined) >= orders
	})
	require.Len(t, joined, orders)
	missed := 0
	for k, v := range joined {
		c, _, _ := strings.Cut(k, "/")
		if !strings.HasSuffix(v, ":name-"+c) {
			missed++
		}
	}
	require.Zero(t, missed, "orders that missed the customer stamped before them, of %d", orders)
}

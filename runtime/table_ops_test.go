package runtime

import (
	"context"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// TestMaterializedDerivedTableQueryable runs a filter and a materialized
// MapTableValues under the runtime, record cache on, and queries the
// result: keys whose value passes are there with the mapped value, a key
// whose new value fails and a deleted key are gone, and the store has its
// changelog topic.
func TestMaterializedDerivedTableQueryable(t *testing.T) {
	t.Parallel()
	b, adm := startBroker(t, "prices")
	tb := topology.NewBuilder()
	prices := topology.Table(tb, "prices", serde.String, serde.String, "prices-store", topology.InMemory())
	even := prices.Filter(func(_, v string) bool { n, _ := strconv.Atoi(v); return n%2 == 0 })
	topology.MapTableValues(even, func(_, v string) int64 { return int64(len(v)) },
		topology.Materialized("lens"), topology.TableValueSerde(serde.Int64))
	topo, err := tb.Build()
	require.NoError(t, err)
	app, err := New(topo, Config{ApplicationID: "tableops", Brokers: b.Addrs(), StateDir: t.TempDir(), CommitInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	defer app.Close(context.Background())

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic("prices"))
	require.NoError(t, err)
	defer cl.Close()
	produce := func(k string, v []byte) {
		require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Key: []byte(k), Value: v}).FirstErr())
	}
	q := iq.NewQuerier(app.Queries())
	lens := func() map[string]int64 {
		out := map[string]int64{}
		for _, k := range []string{"a", "b", "c", "d"} {
			r, err := iq.Get[string, int64](context.Background(), q, "lens", k, serde.String, serde.Int64)
			if err != nil {
				return nil
			}
			if r.Found {
				out[k] = r.Value
			}
		}
		return out
	}
	produce("a", []byte("12"))
	produce("b", []byte("7"))
	produce("c", []byte("1000"))
	produce("d", []byte("4"))
	want := map[string]int64{"a": 2, "c": 4, "d": 1}
	waitFor(t, 30*time.Second, "the first values queryable", func() bool { return maps.Equal(lens(), want) })

	produce("a", []byte("3")) // now fails the filter
	produce("c", nil)         // deleted
	produce("b", []byte("70"))
	want = map[string]int64{"b": 2, "d": 1}
	waitFor(t, 30*time.Second, "the updates and deletes queryable", func() bool { return maps.Equal(lens(), want) })

	topics, err := adm.ListTopics(context.Background())
	require.NoError(t, err)
	require.True(t, topics.Has("tableops-lens-changelog"), "the materialized table is logged")
}

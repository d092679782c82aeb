package topologytest_test

import (
	"testing"
	"time"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
	"github.com/eddystreams/eddy/topology/topologytest"
	"github.com/stretchr/testify/require"
)

// countsByCount is a tumbling windowed count (size 10, grace 100) of "in"
// regrouped by the count itself: the initial 0 a new window's update
// carries as its old value is retracted from group "0", which never had
// anything added, so the table aggregation meets a retraction from a group
// it holds no aggregate for.
func countsByCount(b *topology.Builder) topology.KGroupedTable[string, string] {
	g := topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	counts := topology.WindowedBy(g, topology.TumblingWindows(ms(10)).Grace(ms(100))).Count("counts")
	return topology.GroupTableBy(counts, func(k topology.Windowed[string], n int64) (string, string) { return countText(n), k.Key },
		"regroup", serde.String, serde.String)
}

var ksUnheldRetractions = []ksScenario{
	{
		// Kafka Streams' KGroupedTable.count is a KTableAggregate with
		// the initializer 0.
		name:  "KTableAggregate(count) retracting from a group with no aggregate",
		value: longValue,
		build: func(b *topology.Builder) {
			countsByCount(b).Count("regrouped").ToStream().To("out", serde.String, serde.Int64)
		},
		steps: []ksStep{
			// Group "0" gets a null aggregate, forwarded as a tombstone
			// stamped with the record's time.
			step(out("0 null @0", "1 1 @0"), in("A", "x", 0)),
			step(out("1 0 @4", "2 1 @4"), in("A", "y", 4)),
			step(out("0 null @12", "1 1 @12"), in("A", "z", 12)),
		},
	},
	{
		name: "KTableReduce retracting from a group with no aggregate",
		build: func(b *topology.Builder) {
			countsByCount(b).Reduce(
				func(agg, v string) string { return agg + "+" + v },
				func(agg, v string) string { return agg + "-" + v },
				"regrouped").ToStream().To("out", serde.String, serde.String)
		},
		steps: []ksStep{
			step(out("0 null @0", "1 A @0"), in("A", "x", 0)),
			step(out("1 A-A @4", "2 A @4"), in("A", "y", 4)),
			step(out("0 null @12", "1 A-A+A @12"), in("A", "z", 12)),
		},
	},
	{
		name: "KTableAggregate retracting from a group with no aggregate",
		build: func(b *topology.Builder) {
			topology.TableAggregate(countsByCount(b), emptyInit,
				func(_, v, agg string) string { return agg + "+" + v },
				func(_, v, agg string) string { return agg + "-" + v },
				"regrouped", serde.String).ToStream().To("out", serde.String, serde.String)
		},
		steps: []ksStep{
			step(out("0 null @0", "1 +A @0"), in("A", "x", 0)),
			step(out("1 +A-A @4", "2 +A @4"), in("A", "y", 4)),
			step(out("0 null @12", "1 +A-A+A @12"), in("A", "z", 12)),
		},
	},
}

func TestKafkaStreamsUnheldRetractions(t *testing.T) {
	for _, sc := range ksUnheldRetractions {
		t.Run(sc.name, func(t *testing.T) { runKS(t, sc) })
	}
}

// TestKafkaStreamsLostGroup takes a group out of a table count's store, as
// an unlogged in-memory store loses it in a restart, and moves the group's
// one entry elsewhere: Kafka Streams' KTableAggregate puts and forwards a
// null aggregate for the group at the record's time; under the record cache
// its caching store, which never held the group, forwards nothing.
func TestKafkaStreamsLostGroup(t *testing.T) {
	for _, tc := range []struct {
		name    string
		commits bool
		want    []string
	}{
		{"uncached", false, []string{"x null @5", "y 1 @5", "traced all +x:1+y:1 @5"}},
		{"cached", true, []string{"y 1 @5", "traced all +x:1+y:1 @5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := topology.NewBuilder()
			tbl := topology.Table(b, "in", serde.String, serde.String, "in-store")
			counts := topology.GroupTableBy(tbl, func(k, v string) (string, string) { return v, k }, "regroup", serde.String, serde.String).
				Count("counts")
			counts.ToStream().To("out", serde.String, serde.Int64)
			// Regrouped again, the counts send their old values: the
			// lost group's tombstone carries none, so retracts nothing.
			topology.TableAggregate(
				topology.GroupTableBy(counts, func(g string, n int64) (string, string) { return "all", g + ":" + countText(n) },
					"all", serde.String, serde.String),
				emptyInit,
				func(_, v, agg string) string { return agg + "+" + v },
				func(_, v, agg string) string { return agg + "-" + v },
				"traced", serde.String).ToStream().To("traced", serde.String, serde.String)
			topo, err := b.Build()
			require.NoError(t, err)
			d, err := topologytest.New(topo, topologytest.Config{Commits: tc.commits})
			require.NoError(t, err)
			defer d.Close()
			pipe := func(k, v string, ts int64) []string {
				require.NoError(t, d.Pipe("in", []byte(k), []byte(v), time.UnixMilli(ts)))
				require.NoError(t, d.Commit())
				var got []string
				for _, r := range d.ReadOutput("out") {
					v := "null"
					if r.Value != nil {
						v = longValue(r.Value)
					}
					got = append(got, string(r.Key)+" "+v+" @"+countText(r.Timestamp.UnixMilli()))
				}
				for _, r := range d.ReadOutput("traced") {
					got = append(got, "traced "+string(r.Key)+" "+string(r.Value)+" @"+countText(r.Timestamp.UnixMilli()))
				}
				return got
			}
			require.Equal(t, []string{"x 1 @1", "traced all +x:1 @1"}, pipe("a", "x", 1))
			store, err := d.Store("counts")
			require.NoError(t, err)
			require.NoError(t, store.Delete([]byte("x")))
			require.NoError(t, d.Commit())
			require.Equal(t, tc.want, pipe("a", "y", 5))
			_, found, err := store.Get([]byte("x"))
			require.NoError(t, err)
			require.False(t, found, "the lost group stays absent")
		})
	}
}

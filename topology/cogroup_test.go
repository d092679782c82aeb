package topology_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
	"github.com/eddystreams/eddy/topology/topologytest"
)

// TestCogroupRekeyedStreams co-groups three streams of different value
// types into one aggregate per page: clicks (user -> page) grouped by page,
// purchases (user -> "<page>:<cents>") re-keyed by Map and grouped by key,
// and views (page -> seconds) grouped as they are. The two re-keyed ones
// cross repartition topics of their own; every update carries the latest
// time folded into the key's aggregate, which the store keeps too.
func TestCogroupRekeyedStreams(t *testing.T) {
	type stats struct{ clicks, cents, seconds int64 }
	statsSerde := serde.Funcs[stats]{
		EncodeFn: func(s stats) ([]byte, error) {
			return []byte(strconv.FormatInt(s.clicks, 10) + "/" + strconv.FormatInt(s.cents, 10) + "/" + strconv.FormatInt(s.seconds, 10)), nil
		},
		DecodeFn: func(b []byte) (stats, error) {
			var n [3]int64
			for i, f := range strings.SplitN(string(b), "/", 3) {
				n[i], _ = strconv.ParseInt(f, 10, 64)
			}
			return stats{n[0], n[1], n[2]}, nil
		},
	}
	b := topology.NewBuilder()
	clicks := topology.GroupBy(topology.Stream(b, "clicks", serde.String, serde.String),
		func(_, page string) string { return page }, "", serde.String, serde.String)
	purchases := topology.Map(topology.Stream(b, "purchases", serde.String, serde.String),
		func(_, v string) (string, int64) {
			page, cents, _ := strings.Cut(v, ":")
			n, _ := strconv.ParseInt(cents, 10, 64)
			return page, n
		}).GroupByKey(serde.String, serde.Int64)
	views := topology.Stream(b, "views", serde.String, serde.Int64).GroupByKey(serde.String, serde.Int64)
	c := topology.Cogroup(clicks, func(_ string, _ string, s stats) stats { s.clicks++; return s })
	c = topology.CogroupWith(c, purchases, func(_ string, cents int64, s stats) stats { s.cents += cents; return s })
	c = topology.CogroupWith(c, views, func(_ string, secs int64, s stats) stats { s.seconds += secs; return s })
	table := c.Aggregate(func() stats { return stats{} }, "page-stats", statsSerde)
	table.ToStream().To("out", serde.String, statsSerde)

	d, topo := start(t, b)
	var repartitions []string
	for _, st := range topo.Describe().SubTopologies {
		for _, n := range st.Nodes {
			if n.Kind == topology.SinkNode && n.Topic.Internal {
				repartitions = append(repartitions, n.Topic.Name)
			}
		}
	}
	require.ElementsMatch(t, []string{"page-stats-repartition", "page-stats-1-repartition"}, repartitions)

	at := func(ms int64) time.Time { return time.UnixMilli(ms) }
	require.NoError(t, strIn(d, "clicks").PipeAt("ann", "home", at(10)))
	require.NoError(t, strIn(d, "purchases").PipeAt("bob", "home:250", at(5)))
	require.NoError(t, topologytest.NewInputTopic(d, "views", serde.String, serde.Int64).PipeAt("home", 30, at(20)))
	require.NoError(t, strIn(d, "clicks").PipeAt("bob", "shop", at(7)))
	require.NoError(t, strIn(d, "clicks").PipeAt("cid", "home", at(15)))

	recs, err := topologytest.NewOutputTopic(d, "out", serde.String, statsSerde).ReadRecords()
	require.NoError(t, err)
	type upd struct {
		key string
		val stats
		ts  int64
	}
	var got []upd
	for _, r := range recs {
		got = append(got, upd{r.Key, r.Value, r.Timestamp.UnixMilli()})
	}
	require.Equal(t, []upd{
		{"home", stats{clicks: 1}, 10},
		{"home", stats{clicks: 1, cents: 250}, 10},
		{"home", stats{clicks: 1, cents: 250, seconds: 30}, 20},
		{"shop", stats{clicks: 1}, 7},
		{"home", stats{clicks: 2, cents: 250, seconds: 30}, 20},
	}, got)

	rw, err := d.Store("page-stats")
	require.NoError(t, err)
	v, found, err := table.TypedStore(rw).Get("home")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, stats{clicks: 2, cents: 250, seconds: 30}, v)
}

// TestCogroupSameGroupingTwice: cogrouping a grouped stream again replaces
// its adder, as in Kafka Streams, rather than folding each record twice.
func TestCogroupSameGroupingTwice(t *testing.T) {
	b := topology.NewBuilder()
	g := topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	c := topology.Cogroup(g, func(_ string, v, agg string) string { return agg + "a" + v })
	c = topology.CogroupWith(c, g, func(_ string, v, agg string) string { return agg + "b" + v })
	c.Aggregate(func() string { return "" }, "agg", serde.String).ToStream().To("out", serde.String, serde.String)
	d, _ := start(t, b)
	require.NoError(t, strIn(d, "in").Pipe("k", "1"))
	require.NoError(t, strIn(d, "in").Pipe("k", "2"))
	require.Equal(t, kvs[string, string]("k", "b1", "k", "b1b2"), readKVs(t, d, "out", serde.String, serde.String))
}

// TestCogroupBuildErrors: a nil initializer or adder fails Build, naming
// what is missing.
func TestCogroupBuildErrors(t *testing.T) {
	b := topology.NewBuilder()
	g1 := topology.Stream(b, "one", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	g2 := topology.Stream(b, "two", serde.String, serde.Int64).GroupByKey(serde.String, serde.Int64)
	c := topology.CogroupWith(topology.Cogroup(g1, func(_ string, v, agg string) string { return agg + v }), g2, nil)
	c.Aggregate(nil, "agg", serde.String)
	_, err := b.Build()
	require.ErrorContains(t, err, "initializer is nil")
	require.ErrorContains(t, err, "adder 1 is nil")

	b = topology.NewBuilder()
	g1 = topology.Stream(b, "one", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	g2 = topology.Stream(b, "two", serde.String, serde.Int64).GroupByKey(serde.String, serde.Int64)
	c = topology.CogroupWith(topology.Cogroup(g1, func(_ string, v, agg string) string { return agg + v }), g2, nil)
	c.WindowedBy(topology.TumblingWindows(time.Second)).Aggregate(nil, "agg", serde.String)
	_, err = b.Build()
	require.ErrorContains(t, err, "initializer is nil")
	require.ErrorContains(t, err, "adder 1 is nil")
}

// TestCogroupWindowedStreamTimePerInput: in a time-windowed co-grouping
// each grouped stream closes windows by its own stream time, as Kafka
// Streams' window processor per co-grouped stream does: a record of "two"
// is late only once "two"'s own records have passed its window's close,
// whatever "one" has read.
func TestCogroupWindowedStreamTimePerInput(t *testing.T) {
	b := topology.NewBuilder()
	g1 := topology.Stream(b, "one", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	g2 := topology.Stream(b, "two", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	c := topology.Cogroup(g1, func(_ string, v, agg string) string { return agg + "+" + v })
	c = topology.CogroupWith(c, g2, func(_ string, v, agg string) string { return agg + "-" + v })
	ws := topology.TimeWindowedSerde(serde.String, 10)
	// With grace the store keeps [0,10) (for size plus grace past the
	// latest window start) after "one" has closed it, so that "two"'s
	// record finds it there.
	c.WindowedBy(topology.TumblingWindows(10*time.Millisecond).Grace(5*time.Millisecond)).
		Aggregate(func() string { return "0" }, "agg", serde.String).
		ToStream().To("out", ws, serde.String)
	d, _ := start(t, b)

	at := func(ms int64) time.Time { return time.UnixMilli(ms) }
	require.NoError(t, strIn(d, "one").PipeAt("k", "A", at(0)))
	require.NoError(t, strIn(d, "one").PipeAt("k", "B", at(17))) // one's stream time closes [0,10)
	require.NoError(t, strIn(d, "two").PipeAt("k", "C", at(5)))  // two's does not
	require.NoError(t, strIn(d, "one").PipeAt("k", "D", at(6)))  // late for one
	require.NoError(t, strIn(d, "two").PipeAt("k", "E", at(25)))
	require.NoError(t, strIn(d, "two").PipeAt("k", "F", at(7))) // late for two now

	recs, err := topologytest.NewOutputTopic(d, "out", ws, serde.String).ReadRecords()
	require.NoError(t, err)
	var got []string
	for _, r := range recs {
		got = append(got, r.Key.Window.String()+" "+r.Value+" @"+strconv.FormatInt(r.Timestamp.UnixMilli(), 10))
	}
	require.Equal(t, []string{"[0,10] 0+A @0", "[10,20] 0+B @17", "[0,10] 0+A-C @5", "[20,30] 0-E @25"}, got)
	require.EqualValues(t, 2, d.DroppedLate())
}

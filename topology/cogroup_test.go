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

// TestCogroupWindowedRekeyed: a windowed co-grouping reads a re-keyed
// grouped stream through its repartition topic, named as for an aggregate
// without windows, and folds it into the same windows as the others.
func TestCogroupWindowedRekeyed(t *testing.T) {
	b := topology.NewBuilder()
	clicks := topology.GroupBy(topology.Stream(b, "clicks", serde.String, serde.String),
		func(_, page string) string { return page }, "", serde.String, serde.String)
	views := topology.Stream(b, "views", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	c := topology.Cogroup(clicks, func(_, page, agg string) string { return agg + "c:" + page + " " })
	c = topology.CogroupWith(c, views, func(_, user, agg string) string { return agg + "v:" + user + " " })
	ws := topology.TimeWindowedSerde(serde.String, 10)
	c.WindowedBy(topology.TumblingWindows(10*time.Millisecond)).Aggregate(func() string { return "" }, "page-windows", serde.String).
		ToStream().To("out", ws, serde.String)

	d, topo := start(t, b)
	var repartitions []string
	for _, st := range topo.Describe().SubTopologies {
		for _, n := range st.Nodes {
			if n.Kind == topology.SinkNode && n.Topic.Internal {
				repartitions = append(repartitions, n.Topic.Name)
			}
		}
	}
	require.Equal(t, []string{"page-windows-repartition"}, repartitions)

	at := func(ms int64) time.Time { return time.UnixMilli(ms) }
	require.NoError(t, strIn(d, "clicks").PipeAt("ann", "home", at(1)))
	require.NoError(t, strIn(d, "views").PipeAt("home", "bob", at(3)))
	require.NoError(t, strIn(d, "clicks").PipeAt("cid", "home", at(12)))
	recs, err := topologytest.NewOutputTopic(d, "out", ws, serde.String).ReadRecords()
	require.NoError(t, err)
	var got []string
	for _, r := range recs {
		got = append(got, r.Key.Key+r.Key.Window.String()+" "+r.Value+"@"+strconv.FormatInt(r.Timestamp.UnixMilli(), 10))
	}
	require.Equal(t, []string{"home[0,10] c:home @1", "home[0,10] c:home v:bob @3", "home[10,20] c:home @12"}, got)
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
	c.SlidingWindowedBy(topology.NewSlidingWindows(time.Second)).Aggregate(nil, "sliding", serde.String)
	c.SessionWindowedBy(topology.NewSessionWindows(time.Second)).Aggregate(func() string { return "" }, nil, "sessions", serde.String)
	_, err = b.Build()
	for _, n := range []string{"cogroup-windowed-aggregate", "cogroup-sliding-aggregate"} {
		require.Regexp(t, n+`-\d+": initializer is nil`, err.Error())
	}
	require.Regexp(t, `cogroup-session-aggregate-\d+": merger is nil`, err.Error())
	require.ErrorContains(t, err, "adder 1 is nil")
}

// TestCogroupWindowedStreamTimePerInput: in a windowed co-grouping each
// grouped stream closes windows by its own stream time, as Kafka Streams'
// window processor per co-grouped stream does: a record of "two" is late
// only once "two"'s own records have passed its window's close, whatever
// "one" has read. A window "one" closed may be gone from the shared store
// by then (its retention counts from the latest window written), so that
// "two"'s record starts it afresh, as in Kafka Streams.
func TestCogroupWindowedStreamTimePerInput(t *testing.T) {
	type in struct {
		topic, value string
		ts           int64
	}
	for _, tc := range []struct {
		name  string
		agg   func(topology.CogroupedKStream[string, string]) topology.KTable[topology.Windowed[string], string]
		keys  serde.Serde[topology.Windowed[string]]
		input []in
		want  []string
	}{{
		// With grace the store keeps [0,10) (size plus grace past the
		// latest window start) after "one" has closed it.
		name: "time",
		agg: func(c topology.CogroupedKStream[string, string]) topology.KTable[topology.Windowed[string], string] {
			return c.WindowedBy(topology.TumblingWindows(10*time.Millisecond).Grace(5*time.Millisecond)).
				Aggregate(func() string { return "0" }, "agg", serde.String)
		},
		keys: topology.TimeWindowedSerde(serde.String, 10),
		input: []in{
			{"one", "A", 0}, {"one", "B", 17}, // one's stream time closes [0,10)
			{"two", "C", 5},                   // two's does not
			{"one", "D", 6},                   // late for one
			{"two", "E", 25}, {"two", "F", 7}, // late for two now
		},
		want: []string{"[0,10] 0+A @0", "[10,20] 0+B @17", "[0,10] 0+A-C @5", "[20,30] 0-E @25"},
	}, {
		// The store keeps [90,100] (twice the difference plus grace past
		// the latest window start) after "one" has closed what C creates.
		name: "sliding",
		agg: func(c topology.CogroupedKStream[string, string]) topology.KTable[topology.Windowed[string], string] {
			return c.SlidingWindowedBy(topology.NewSlidingWindows(10*time.Millisecond).Grace(20*time.Millisecond)).
				Aggregate(func() string { return "0" }, "agg", serde.String)
		},
		keys: topology.TimeWindowedSerde(serde.String, 10),
		input: []in{
			{"one", "A", 100}, {"one", "B", 137}, // one's stream time closes C's windows
			{"two", "C", 105},                    // two's does not: C joins A's left window and creates A's right one
			{"one", "D", 104},                    // late for one
			{"two", "E", 150}, {"two", "F", 104}, // late for two now
		},
		want: []string{"[90,100] 0+A @100", "[127,137] 0+B @137", "[101,111] 0-C @105", "[95,105] 0+A-C @105", "[140,150] 0-E @150"},
	}, {
		// A's session is gone from the store (gap plus grace past the
		// latest session end) once "one" has closed it: C starts anew.
		name: "session",
		agg: func(c topology.CogroupedKStream[string, string]) topology.KTable[topology.Windowed[string], string] {
			return c.SessionWindowedBy(topology.NewSessionWindows(10*time.Millisecond)).
				Aggregate(func() string { return "0" }, func(_, a, b string) string { return a + "+" + b }, "agg", serde.String)
		},
		keys: topology.SessionWindowedSerde(serde.String),
		input: []in{
			{"one", "A", 100}, {"one", "B", 200}, // one's stream time closes C's session
			{"two", "C", 105},                    // two's does not
			{"one", "D", 103},                    // late for one
			{"two", "E", 300}, {"two", "F", 106}, // late for two now
		},
		want: []string{"[100,100] 0+A @100", "[200,200] 0+B @200", "[105,105] 0-C @105", "[300,300] 0-E @300"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			b := topology.NewBuilder()
			g1 := topology.Stream(b, "one", serde.String, serde.String).GroupByKey(serde.String, serde.String)
			g2 := topology.Stream(b, "two", serde.String, serde.String).GroupByKey(serde.String, serde.String)
			c := topology.Cogroup(g1, func(_ string, v, agg string) string { return agg + "+" + v })
			c = topology.CogroupWith(c, g2, func(_ string, v, agg string) string { return agg + "-" + v })
			tc.agg(c).ToStream().To("out", tc.keys, serde.String)
			d, _ := start(t, b)
			for _, r := range tc.input {
				require.NoError(t, strIn(d, r.topic).PipeAt("k", r.value, time.UnixMilli(r.ts)))
			}
			recs, err := topologytest.NewOutputTopic(d, "out", tc.keys, serde.String).ReadRecords()
			require.NoError(t, err)
			var got []string
			for _, r := range recs {
				got = append(got, r.Key.Window.String()+" "+r.Value+" @"+strconv.FormatInt(r.Timestamp.UnixMilli(), 10))
			}
			require.Equal(t, tc.want, got)
			require.EqualValues(t, 2, d.DroppedLate())
		})
	}
}

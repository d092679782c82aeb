package topology_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
	"github.com/eddystreams/eddy/topology/topologytest"
)

const app = "test-app"

// start builds b and runs it in a test driver closed at cleanup.
func start(t *testing.T, b *topology.Builder) (*topologytest.Driver, *topology.Topology) {
	t.Helper()
	topo, err := b.Build()
	require.NoError(t, err)
	d, err := topologytest.New(topo, topologytest.Config{AppID: app})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	return d, topo
}

func strIn(d *topologytest.Driver, topic string) *topologytest.InputTopic[string, string] {
	return topologytest.NewInputTopic(d, topic, serde.String, serde.String)
}

func readKVs[K, V any](t *testing.T, d *topologytest.Driver, topic string, ks serde.Serde[K], vs serde.Serde[V]) []topology.KeyValue[K, V] {
	t.Helper()
	kvs, err := topologytest.NewOutputTopic(d, topic, ks, vs).ReadKeyValues()
	require.NoError(t, err)
	return kvs
}

func kvs[K, V any](pairs ...any) []topology.KeyValue[K, V] {
	var out []topology.KeyValue[K, V]
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, topology.KV(pairs[i].(K), pairs[i+1].(V)))
	}
	return out
}

func TestStatelessOperators(t *testing.T) {
	cases := []struct {
		name  string
		build func(s topology.KStream[string, string])
		want  []topology.KeyValue[string, string]
	}{
		{"Filter", func(s topology.KStream[string, string]) {
			s.Filter(func(_, v string) bool { return len(v) > 1 }).To("out", serde.String, serde.String)
		}, kvs[string, string]("k1", "bb", "k3", "ccc")},
		{"FilterNot", func(s topology.KStream[string, string]) {
			s.FilterNot(func(_, v string) bool { return len(v) > 1 }).To("out", serde.String, serde.String)
		}, kvs[string, string]("k0", "a")},
		{"Map", func(s topology.KStream[string, string]) {
			m := topology.Map(s, func(k, v string) (int64, string) { return int64(len(v)), k })
			topology.Map(m, func(k int64, v string) (string, string) { return v, strconv.FormatInt(k, 10) }).
				To("out", serde.String, serde.String)
		}, kvs[string, string]("k0", "1", "k1", "2", "k3", "3")},
		{"MapValues", func(s topology.KStream[string, string]) {
			n := topology.MapValues(s, func(k, v string) int64 { return int64(len(k + v)) })
			topology.MapValues(n, func(_ string, n int64) string { return strconv.FormatInt(n, 10) }).
				To("out", serde.String, serde.String)
		}, kvs[string, string]("k0", "3", "k1", "4", "k3", "5")},
		{"SelectKey", func(s topology.KStream[string, string]) {
			topology.SelectKey(s, func(_, v string) string { return v }).To("out", serde.String, serde.String)
		}, kvs[string, string]("a", "a", "bb", "bb", "ccc", "ccc")},
		{"FlatMap", func(s topology.KStream[string, string]) {
			topology.FlatMap(s, func(k, v string) []topology.KeyValue[string, string] {
				var out []topology.KeyValue[string, string]
				for _, c := range v {
					out = append(out, topology.KV(string(c), k))
				}
				return out
			}).To("out", serde.String, serde.String)
		}, kvs[string, string]("a", "k0", "b", "k1", "b", "k1", "c", "k3", "c", "k3", "c", "k3")},
		{"FlatMapValues", func(s topology.KStream[string, string]) {
			topology.FlatMapValues(s, func(_, v string) []string {
				if len(v) == 1 {
					return nil
				}
				return []string{v, strings.ToUpper(v)}
			}).To("out", serde.String, serde.String)
		}, kvs[string, string]("k1", "bb", "k1", "BB", "k3", "ccc", "k3", "CCC")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := topology.NewBuilder()
			c.build(topology.Stream(b, "in", serde.String, serde.String))
			d, _ := start(t, b)
			in := strIn(d, "in")
			require.NoError(t, in.Pipe("k0", "a"))
			require.NoError(t, in.Pipe("k1", "bb"))
			require.NoError(t, in.Pipe("k3", "ccc"))
			require.Equal(t, c.want, readKVs(t, d, "out", serde.String, serde.String))
		})
	}
}

func TestPeekSeesEveryRecordAndPassesItOn(t *testing.T) {
	b := topology.NewBuilder()
	var seen []string
	topology.Stream(b, "in", serde.String, serde.String).
		Peek(func(k, v string) { seen = append(seen, k+"="+v) }).
		To("out", serde.String, serde.String)
	d, _ := start(t, b)
	require.NoError(t, strIn(d, "in").Pipe("a", "1"))
	require.NoError(t, strIn(d, "in").Pipe("b", "2"))
	require.Equal(t, []string{"a=1", "b=2"}, seen)
	require.Equal(t, kvs[string, string]("a", "1", "b", "2"), readKVs(t, d, "out", serde.String, serde.String))
}

func TestMergeInterleavesStreamsInOneSubTopology(t *testing.T) {
	b := topology.NewBuilder()
	x := topology.Stream(b, "x", serde.String, serde.String)
	y := topology.Stream(b, "y", serde.String, serde.String)
	z := topology.Stream(b, "z", serde.String, serde.String)
	x.Merge(y, z).To("out", serde.String, serde.String)
	d, topo := start(t, b)
	require.Len(t, graph.Of(topo).SubTopologies(), 1)
	require.Equal(t, []topology.TopicRef{{Name: "x"}, {Name: "y"}, {Name: "z"}}, graph.Of(topo).SubTopologies()[0].CoPartitioned)
	require.NoError(t, strIn(d, "y").Pipe("1", "y"))
	require.NoError(t, strIn(d, "x").Pipe("2", "x"))
	require.NoError(t, strIn(d, "z").Pipe("3", "z"))
	require.Equal(t, kvs[string, string]("1", "y", "2", "x", "3", "z"), readKVs(t, d, "out", serde.String, serde.String))
}

func TestSinkKeepsTimestampHeadersAndNulls(t *testing.T) {
	b := topology.NewBuilder()
	s := topology.Stream(b, "in", serde.String, serde.String)
	topology.MapValues(s, func(_, v string) string { return v + "!" }).To("out", serde.String, serde.String)
	s.Filter(func(string, string) bool { return true }).To("raw", serde.String, serde.String)
	d, _ := start(t, b)

	ts := time.UnixMilli(1_700_000_000_123)
	hdrs := []topology.Header{{Key: "h", Value: []byte("v")}}
	require.NoError(t, d.Pipe("in", nil, []byte("x"), ts, hdrs...))
	require.NoError(t, d.Pipe("in", []byte("k"), nil, ts))

	out := d.ReadOutput("out")
	require.Len(t, out, 2)
	require.Equal(t, topology.Record[[]byte, []byte]{Key: nil, Value: []byte("x!"), Timestamp: ts, Headers: hdrs}, out[0])
	// MapValues computes a new (non-null) value from the null one.
	require.Equal(t, []byte("k"), out[1].Key)
	require.Equal(t, []byte("!"), out[1].Value)

	raw := d.ReadOutput("raw")
	require.Len(t, raw, 2)
	require.Nil(t, raw[0].Key, "a null key passes a Filter as a null")
	require.Nil(t, raw[1].Value, "a null value passes a Filter as a null")
	require.Empty(t, d.ReadOutput("raw"), "ReadOutput drains")
}

func TestGroupByKeyAggregationsWithoutRepartition(t *testing.T) {
	b := topology.NewBuilder()
	g := topology.Stream(b, "in", serde.String, serde.Int64).GroupByKey(serde.String, serde.Int64)
	g.Count("count").ToStream().To("count-out", serde.String, serde.Int64)
	g.Reduce(func(agg, v int64) int64 { return max(agg, v) }, "max").ToStream().To("max-out", serde.String, serde.Int64)
	topology.Aggregate(g, func() string { return "" },
		func(_ string, v int64, agg string) string { return agg + strconv.FormatInt(v, 10) },
		"concat", serde.String).ToStream().To("concat-out", serde.String, serde.String)
	d, topo := start(t, b)
	require.Len(t, graph.Of(topo).SubTopologies(), 1, "grouping by an unchanged key needs no repartition")
	require.Empty(t, graph.Of(topo).RepartitionTopics())

	in := topologytest.NewInputTopic(d, "in", serde.String, serde.Int64)
	for _, kv := range kvs[string, int64]("a", int64(3), "b", int64(1), "a", int64(7), "a", int64(5)) {
		require.NoError(t, in.Pipe(kv.Key, kv.Value))
	}
	require.Equal(t, kvs[string, int64]("a", int64(1), "b", int64(1), "a", int64(2), "a", int64(3)),
		readKVs(t, d, "count-out", serde.String, serde.Int64))
	require.Equal(t, kvs[string, int64]("a", int64(3), "b", int64(1), "a", int64(7), "a", int64(7)),
		readKVs(t, d, "max-out", serde.String, serde.Int64))
	require.Equal(t, kvs[string, string]("a", "3", "b", "1", "a", "37", "a", "375"),
		readKVs(t, d, "concat-out", serde.String, serde.String))

	counts, err := topology.GetKeyValueStore(d, "count", serde.String, serde.Int64)
	require.NoError(t, err)
	all, err := counts.All()
	require.NoError(t, err)
	got, err := all.Collect()
	require.NoError(t, err)
	require.Equal(t, kvs[string, int64]("a", int64(3), "b", int64(1)), got)
}

func TestGroupByKeyAfterKeyChangeRepartitionsByStoreName(t *testing.T) {
	b := topology.NewBuilder()
	s := topology.Stream(b, "in", serde.String, serde.String)
	rekeyed := topology.SelectKey(s, func(_, v string) string { return v })
	rekeyed.GroupByKey(serde.String, serde.String, topology.NumPartitions(6)).Count("by-value").
		ToStream().To("out", serde.String, serde.Int64)
	d, topo := start(t, b)
	require.Len(t, graph.Of(topo).SubTopologies(), 2)
	require.Equal(t, []graph.Repartition{{
		Topic: topology.TopicRef{Name: "by-value-repartition", Internal: true}, Partitions: 6, WriterSubTopology: 0,
	}}, graph.Of(topo).RepartitionTopics())
	require.NoError(t, strIn(d, "in").Pipe("k1", "x"))
	require.NoError(t, strIn(d, "in").Pipe("k2", "x"))
	require.Equal(t, kvs[string, int64]("x", int64(1), "x", int64(2)), readKVs(t, d, "out", serde.String, serde.Int64))
}

func TestAggregationsOfOneGroupingShareARepartitionTopic(t *testing.T) {
	b := topology.NewBuilder()
	s := topology.Stream(b, "in", serde.String, serde.String)
	g := topology.GroupBy(s, func(_, v string) string { return v[:1] }, "", serde.String, serde.String)
	g.Count("first-letter-count")
	g.Reduce(func(agg, v string) string { return agg + "," + v }, "first-letter-list").
		ToStream().To("out", serde.String, serde.String)
	d, topo := start(t, b)
	require.Len(t, graph.Of(topo).SubTopologies(), 2)
	reps := graph.Of(topo).RepartitionTopics()
	require.Len(t, reps, 1)
	require.Equal(t, "first-letter-count-repartition", reps[0].Topic.Name, "unnamed GroupBy takes the first store's name")
	require.Equal(t, []topology.StoreInfo{
		{Name: "first-letter-count", Persistent: true, Logged: true, Timestamped: true},
		{Name: "first-letter-list", Persistent: true, Logged: true, Timestamped: true},
	}, graph.Of(topo).SubTopologies()[1].Stores)
	require.NoError(t, strIn(d, "in").Pipe("", "apple"))
	require.NoError(t, strIn(d, "in").Pipe("", "avocado"))
	require.Equal(t, kvs[string, string]("a", "apple", "a", "apple,avocado"), readKVs(t, d, "out", serde.String, serde.String))
}

func TestAggregationsDropNullKeysAndValues(t *testing.T) {
	b := topology.NewBuilder()
	topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String).
		Count("c").ToStream().To("out", serde.String, serde.Int64)
	d, _ := start(t, b)
	require.NoError(t, d.Pipe("in", nil, []byte("v"), time.Now()))
	require.NoError(t, d.Pipe("in", []byte("k"), nil, time.Now()))
	require.NoError(t, d.Pipe("in", []byte(""), []byte(""), time.Now()))
	// Only the record with an empty (not null) key and value counts.
	require.Equal(t, kvs[string, int64]("", int64(1)), readKVs(t, d, "out", serde.String, serde.Int64))
}

func TestStoreOptions(t *testing.T) {
	b := topology.NewBuilder()
	s := topology.Stream(b, "in", serde.String, serde.String)
	g := s.GroupByKey(serde.String, serde.String)
	g.Count("mem", topology.InMemory())
	g.Count("unlogged", topology.WithoutLogging(), topology.Named("my-count"))
	topology.Table(b, "t", serde.String, serde.String, "tbl", topology.InMemory(), topology.WithoutLogging())
	_, topo := start(t, b)
	var stores []topology.StoreInfo
	for _, st := range graph.Of(topo).SubTopologies() {
		stores = append(stores, st.Stores...)
	}
	require.Equal(t, []topology.StoreInfo{
		{Name: "mem", Persistent: false, Logged: true, Timestamped: true},
		{Name: "unlogged", Persistent: true, Logged: false, Timestamped: true},
		{Name: "tbl", Persistent: false, Logged: false, Timestamped: true},
	}, stores)
	require.Contains(t, topo.Describe().String(), "Processor: my-count (stores: unlogged)")
}

func TestTableMaterializesAndForwardsEveryUpdate(t *testing.T) {
	b := topology.NewBuilder()
	tbl := topology.Table(b, "users", serde.String, serde.Int64, "users-store")
	require.Equal(t, "users-store", tbl.StoreName())
	tbl.ToStream().To("user-updates", serde.String, serde.Int64)
	d, _ := start(t, b)

	in := topologytest.NewInputTopic(d, "users", serde.String, serde.Int64)
	require.NoError(t, in.Pipe("ann", 1))
	require.NoError(t, in.Pipe("bob", 2))
	require.NoError(t, in.Pipe("ann", 3))
	require.NoError(t, in.PipeTombstone("bob"))
	require.NoError(t, d.Pipe("users", nil, []byte{0, 0, 0, 0, 0, 0, 0, 9}, time.Now()))

	updates := d.ReadOutput("user-updates")
	require.Len(t, updates, 4, "the null-key record is dropped")
	require.Equal(t, "bob", string(updates[3].Key))
	require.Nil(t, updates[3].Value, "a delete is forwarded as a tombstone")

	rw, err := d.Store("users-store")
	require.NoError(t, err)
	store := tbl.TypedStore(rw)
	v, found, err := store.Get("ann")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, int64(3), v)
	_, found, err = store.Get("bob")
	require.NoError(t, err)
	require.False(t, found)
}

func TestKeyValueStore(t *testing.T) {
	b := topology.NewBuilder()
	topology.Table(b, "t", serde.String, serde.String, "s")
	d, _ := start(t, b)
	s, err := topology.GetKeyValueStore(d, "s", serde.String, serde.String)
	require.NoError(t, err)
	for _, k := range []string{"d", "a", "c", "b"} {
		require.NoError(t, s.Put(k, k+k))
	}
	require.NoError(t, s.Delete("c"))
	require.NoError(t, s.Delete("absent"))
	n, err := s.ApproximateCount()
	require.NoError(t, err)
	require.Equal(t, int64(3), n)
	it, err := s.Range("a", "d")
	require.NoError(t, err)
	var got []topology.KeyValue[string, string]
	for it.Next() {
		got = append(got, topology.KV(it.Key(), it.Value()))
	}
	require.NoError(t, it.Err())
	require.NoError(t, it.Close())
	require.Equal(t, kvs[string, string]("a", "aa", "b", "bb"), got)

	bad := topology.NewKeyValueStore(s.ReadWriter(), serde.String, serde.Int64)
	_, _, err = bad.Get("a")
	require.ErrorContains(t, err, "decode store value")
	it2, err := bad.All()
	require.NoError(t, err)
	require.False(t, it2.Next())
	require.ErrorContains(t, it2.Err(), "decode store value")
	require.NoError(t, it2.Close())
	require.ErrorContains(t, topology.NewKeyValueStore(s.ReadWriter(), serde.String, serde.Bytes).Put("x", nil), "Delete")

	_, err = topology.GetKeyValueStore(d, "nope", serde.String, serde.String)
	require.Error(t, err)
	_, err = topology.GetKeyValueStore[string, string](d, "s", nil, serde.String)
	require.Error(t, err)
}

// TestWordCount runs the canonical application through the driver: lines
// are split in sub-topology 0, re-keyed by word through the repartition
// topic and counted in sub-topology 1.
func TestWordCount(t *testing.T) {
	topo := wordCount(t)
	d, err := topologytest.New(topo, topologytest.Config{AppID: app})
	require.NoError(t, err)
	defer d.Close()
	in := strIn(d, "lines")
	for _, line := range []string{"the quick brown fox", "The lazy dog", "", "the END"} {
		require.NoError(t, in.PipeValue(line))
	}
	latest := map[string]int64{}
	for _, kv := range readKVs(t, d, "word-counts", serde.String, serde.Int64) {
		latest[kv.Key] = kv.Value
	}
	require.Equal(t, map[string]int64{"the": 3, "quick": 1, "brown": 1, "fox": 1, "lazy": 1, "dog": 1, "end": 1}, latest)
	require.Len(t, d.ReadOutput(app+"-words-repartition"), 9, "the repartition topic carries one record per word")
}

func wordCount(t *testing.T) *topology.Topology {
	t.Helper()
	b := topology.NewBuilder()
	lines := topology.Stream(b, "lines", serde.String, serde.String)
	words := topology.FlatMapValues(lines, func(_, line string) []string { return strings.Fields(strings.ToLower(line)) })
	topology.GroupBy(words, func(_, w string) string { return w }, "words", serde.String, serde.String).
		Count("counts").ToStream().To("word-counts", serde.String, serde.Int64)
	topo, err := b.Build()
	require.NoError(t, err)
	return topo
}

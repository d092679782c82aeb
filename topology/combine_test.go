package topology_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/topology"
	"github.com/eddystreams/eddy/topology/topologytest"
)

// combinable builds three aggregations of re-keyed streams, each with its
// own grouping: a count, an order-sensitive (but associative) reduce, and
// an aggregate with a merger. opts go to each aggregation.
func combinable(opts ...topology.Option) *topology.Builder {
	b := topology.NewBuilder()
	s := topology.Stream(b, "in", serde.String, serde.String)
	first := func(_, v string) string {
		if v == "" {
			return ""
		}
		return v[:1]
	}
	topology.GroupBy(s, first, "by-first", serde.String, serde.String).
		Count("count", opts...).ToStream().To("count-out", serde.String, serde.Int64)
	topology.GroupBy(s, func(k, _ string) string { return k }, "by-key", serde.String, serde.String).
		Reduce(func(agg, v string) string { return agg + "," + v }, "list", opts...).
		ToStream().To("list-out", serde.String, serde.String)
	topology.Aggregate(topology.GroupBy(s, first, "by-first-len", serde.String, serde.String),
		func() int64 { return 0 }, func(_ string, v string, n int64) int64 { return n + int64(len(v)) },
		"lengths", serde.Int64, append([]topology.Option{topology.WithMerger(func(_ string, a, b int64) int64 { return a + b })}, opts...)...).
		ToStream().To("lengths-out", serde.String, serde.Int64)
	return b
}

// outcome is what a run leaves: every store's contents and, per output
// topic, the latest value and timestamp of each key.
type outcome struct {
	stores map[string]map[string]string
	latest map[string]map[string]string
}

func runCombinable(t *testing.T, b *topology.Builder, commits bool, seed uint64, n int) outcome {
	t.Helper()
	topo, err := b.Build()
	require.NoError(t, err)
	d, err := topologytest.New(topo, topologytest.Config{AppID: app, Commits: commits})
	require.NoError(t, err)
	defer d.Close()
	rng := rand.New(rand.NewPCG(seed, 0))
	ts := time.UnixMilli(1_000_000)
	latest := map[string]map[string]string{}
	read := func() {
		for _, topic := range []string{"count-out", "list-out", "lengths-out"} {
			if latest[topic] == nil {
				latest[topic] = map[string]string{}
			}
			for _, r := range d.ReadOutput(topic) {
				v := string(r.Value)
				if topic != "list-out" {
					v = fmt.Sprint(must(serde.Int64.Decode(r.Value)))
				}
				latest[topic][string(r.Key)] = fmt.Sprintf("%s@%d", v, r.Timestamp.UnixMilli())
			}
		}
	}
	for i := range n {
		var key, value []byte
		switch rng.IntN(20) {
		case 0:
			key = nil
			value = []byte("x")
		case 1:
			key = []byte("k0")
			value = nil
		default:
			key = []byte(fmt.Sprintf("k%d", rng.IntN(4)))
			var sb strings.Builder
			for range 1 + rng.IntN(3) {
				sb.WriteByte("abcde"[rng.IntN(5)])
			}
			value = []byte(sb.String())
		}
		ts = ts.Add(time.Duration(rng.IntN(2000)-500) * time.Millisecond)
		require.NoError(t, d.Pipe("in", key, value, ts), "record %d", i)
		if commit := rng.IntN(8) == 0; commits && commit {
			require.NoError(t, d.Commit())
		}
	}
	require.NoError(t, d.Commit())
	read()
	stores := map[string]map[string]string{}
	for _, name := range []string{"count", "list", "lengths"} {
		rw, err := d.Store(name)
		require.NoError(t, err)
		it, err := rw.All()
		require.NoError(t, err)
		m := map[string]string{}
		for it.Next() {
			m[string(it.Key())] = string(it.Value())
		}
		require.NoError(t, it.Err())
		it.Close()
		stores[name] = m
	}
	return outcome{stores: stores, latest: latest}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestCombiningMatchesUncombined is the property combining must keep: on
// random input (null keys and values included) with random commit points,
// the stores and the latest output of every key, timestamp included, are
// those of the same topology without combining, with or without commits.
func TestCombiningMatchesUncombined(t *testing.T) {
	for seed := range uint64(60) {
		n := 50 + int(seed)*7
		combined := runCombinable(t, combinable(topology.WithCombining()), true, seed, n)
		plain := runCombinable(t, combinable(), true, seed, n)
		eager := runCombinable(t, combinable(), false, seed, n)
		require.Equal(t, plain, combined, "seed %d: combined vs uncombined, same commits", seed)
		require.Equal(t, eager, combined, "seed %d: combined vs uncombined without commits", seed)
		require.NotEmpty(t, combined.stores["count"])
	}
}

// TestCombinerSendsPartialsAtCommit checks what the repartition topic
// carries: nothing before the commit, then one marked partial per key.
func TestCombinerSendsPartialsAtCommit(t *testing.T) {
	b := topology.NewBuilder()
	topology.GroupBy(topology.Stream(b, "in", serde.String, serde.String),
		func(_, v string) string { return v }, "words", serde.String, serde.String).
		Count("counts", topology.WithCombining()).ToStream().To("out", serde.String, serde.Int64)
	topo, err := b.Build()
	require.NoError(t, err)
	d, err := topologytest.New(topo, topologytest.Config{AppID: app, Commits: true})
	require.NoError(t, err)
	defer d.Close()
	for _, w := range []string{"a", "b", "a", "a"} {
		require.NoError(t, strIn(d, "in").PipeValue(w))
	}
	rep := app + "-words-repartition"
	require.Empty(t, d.ReadOutput(rep), "partials wait for the commit")
	require.NoError(t, d.Commit())
	got := d.ReadOutput(rep)
	require.Len(t, got, 2)
	marker := topology.Header{Key: topology.CombinedHeader, Value: []byte(topology.CombinedVersion)}
	for i, want := range []struct {
		key string
		n   int64
	}{{"a", 3}, {"b", 1}} {
		require.Equal(t, want.key, string(got[i].Key))
		require.Equal(t, want.n, must(serde.Int64.Decode(got[i].Value)))
		require.Equal(t, []topology.Header{marker}, got[i].Headers)
	}
	require.Equal(t, kvs[string, int64]("a", int64(3), "b", int64(1)), readKVs(t, d, "out", serde.String, serde.Int64))
}

// TestCombinerFlushesAtItsLimit checks that a combiner holding
// CombineLimit keys sends them before taking another, commit or not.
func TestCombinerFlushesAtItsLimit(t *testing.T) {
	b := topology.NewBuilder()
	topology.GroupBy(topology.Stream(b, "in", serde.String, serde.String),
		func(_, v string) string { return v }, "words", serde.String, serde.String).Count("counts", topology.WithCombining())
	topo, err := b.Build()
	require.NoError(t, err)
	d, err := topologytest.New(topo, topologytest.Config{AppID: app, Commits: true})
	require.NoError(t, err)
	defer d.Close()
	for i := range topology.CombineLimit {
		require.NoError(t, strIn(d, "in").PipeValue(fmt.Sprint(i)))
	}
	require.NoError(t, strIn(d, "in").PipeValue("0"))
	rep := app + "-words-repartition"
	require.Empty(t, d.ReadOutput(rep))
	require.NoError(t, strIn(d, "in").PipeValue("one too many"))
	require.Len(t, d.ReadOutput(rep), topology.CombineLimit, "the full combiner is sent before it takes a new key")
	require.NoError(t, d.Commit())
	require.Len(t, d.ReadOutput(rep), 1)
	counts, err := topology.GetKeyValueStore(d, "counts", serde.String, serde.Int64)
	require.NoError(t, err)
	n, found, err := counts.Get("0")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, int64(2), n)
}

func describe(t *testing.T, b *topology.Builder) string {
	t.Helper()
	topo, err := b.Build()
	require.NoError(t, err)
	return topo.Describe().String()
}

// TestDescribeShowsTheCombiner covers when a combiner is added: after
// GroupBy given WithCombining, not by default, not without a repartition;
// and when WithCombining fails Build: an Aggregate without a merger, a
// versioned result, a grouping aggregated more than once.
func TestDescribeShowsTheCombiner(t *testing.T) {
	words := func(b *topology.Builder) topology.KGroupedStream[string, string] {
		return topology.GroupBy(topology.Stream(b, "in", serde.String, serde.String),
			func(_, v string) string { return v }, "words", serde.String, serde.String)
	}
	b := topology.NewBuilder()
	words(b).Count("c", topology.WithCombining()).ToStream().To("out", serde.String, serde.Int64)
	combined := describe(t, b)
	require.Contains(t, combined, "Processor: groupby-1\n    --> words-repartition-combine")
	require.Contains(t, combined, "Processor: words-repartition-combine\n    --> words-repartition-sink\n    <-- groupby-1")
	require.Contains(t, combined, "Sink: words-repartition-sink (topic: words-repartition, internal)\n    <-- words-repartition-combine")

	b = topology.NewBuilder()
	words(b).Count("c").ToStream().To("out", serde.String, serde.Int64)
	plain := describe(t, b)
	require.NotContains(t, plain, "combine")
	require.Contains(t, plain, "Processor: groupby-1\n    --> words-repartition-sink")
	require.Equal(t, plain, strings.NewReplacer(
		"    --> words-repartition-combine\n", "    --> words-repartition-sink\n",
		"  Processor: words-repartition-combine\n    --> words-repartition-sink\n    <-- groupby-1\n", "",
		"    <-- words-repartition-combine\n", "    <-- groupby-1\n",
	).Replace(combined), "the combiner is the only difference; generated names do not count it")

	b = topology.NewBuilder()
	topology.Aggregate(words(b), func() int64 { return 0 }, func(string, string, int64) int64 { return 1 }, "a", serde.Int64,
		topology.WithMerger(func(_ string, a, b int64) int64 { return a + b }), topology.WithCombining())
	require.Contains(t, describe(t, b), "Processor: words-repartition-combine")

	b = topology.NewBuilder()
	topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String).Count("c", topology.WithCombining())
	require.NotContains(t, describe(t, b), "combine", "no repartition, nothing to combine")

	buildErr := func(b *topology.Builder) error {
		_, err := b.Build()
		return err
	}
	b = topology.NewBuilder()
	topology.Aggregate(words(b), func() int64 { return 0 }, func(string, string, int64) int64 { return 1 }, "a", serde.Int64, topology.WithCombining())
	require.ErrorContains(t, buildErr(b), "WithCombining needs WithMerger")

	b = topology.NewBuilder()
	words(b).Count("c", topology.WithCombining(), topology.Versioned(time.Hour))
	require.ErrorContains(t, buildErr(b), "WithCombining does not apply to a versioned result")

	for _, second := range []func(g topology.KGroupedStream[string, string]){
		func(g topology.KGroupedStream[string, string]) { g.Count("c2") },
		func(g topology.KGroupedStream[string, string]) {
			topology.WindowedBy(g, topology.TumblingWindows(time.Minute)).Count("w")
		},
	} {
		b = topology.NewBuilder()
		g := words(b)
		g.Count("c1", topology.WithCombining())
		second(g)
		require.ErrorContains(t, buildErr(b), "WithCombining: the grouping is aggregated more than once")
	}
	b = topology.NewBuilder()
	g := words(b)
	g.Count("c1")
	g.Count("c2", topology.WithCombining())
	require.ErrorContains(t, buildErr(b), `processor "count-5": WithCombining: the grouping is aggregated more than once`)

	// Two plain aggregations of one grouping share its topic and both
	// count right.
	b = topology.NewBuilder()
	g = words(b)
	g.Count("c1").ToStream().To("out1", serde.String, serde.Int64)
	g.Count("c2").ToStream().To("out2", serde.String, serde.Int64)
	d, _ := start(t, b)
	for _, w := range []string{"a", "b", "a"} {
		require.NoError(t, strIn(d, "in").PipeValue(w))
	}
	for _, out := range []string{"out1", "out2"} {
		require.Equal(t, kvs[string, int64]("a", int64(1), "b", int64(1), "a", int64(2)), readKVs(t, d, out, serde.String, serde.Int64))
	}
}

// TestRepartitionRecordsOfTheOtherKind covers records of the other format
// on a repartition topic, as an application finds them after turning
// combining on or off: raw records reach a combining count and are
// counted one each; partials reach a count that does not combine (the
// topic a combining build wrote) and are merged. A partial of an unknown
// format, or any partial reaching aggregations that cannot merge it, is
// refused with an error naming the header.
func TestRepartitionRecordsOfTheOtherKind(t *testing.T) {
	build := func(opts ...topology.Option) *topologytest.Driver {
		b := topology.NewBuilder()
		topology.GroupBy(topology.Stream(b, "in", serde.String, serde.String),
			func(_, v string) string { return v }, "words", serde.String, serde.String).
			Count("counts", opts...).ToStream().To("out", serde.String, serde.Int64)
		d, _ := start(t, b)
		return d
	}
	rep := app + "-words-repartition"
	partial := func(version string) []topology.Header {
		return []topology.Header{{Key: "trace", Value: []byte("t")}, {Key: topology.CombinedHeader, Value: []byte(version)}}
	}
	ts := time.UnixMilli(5)

	for _, opts := range [][]topology.Option{{topology.WithCombining()}, nil} {
		d := build(opts...)
		require.NoError(t, d.Pipe(rep, []byte("a"), []byte("raw value"), ts))
		require.NoError(t, d.Pipe(rep, []byte("a"), must(serde.Int64.Encode(5)), ts, partial(topology.CombinedVersion)...))
		require.NoError(t, d.Pipe(rep, []byte("a"), []byte("raw value"), ts))
		out, err := topologytest.NewOutputTopic(d, "out", serde.String, serde.Int64).ReadRecords()
		require.NoError(t, err)
		require.Len(t, out, 3)
		require.Equal(t, int64(1), out[0].Value, "a raw record counts one")
		require.Equal(t, int64(6), out[1].Value, "a partial is merged")
		require.Equal(t, []topology.Header{{Key: "trace", Value: []byte("t")}}, out[1].Headers, "the marker stays on the repartition topic")
		require.Equal(t, int64(7), out[2].Value)

		err = d.Pipe(rep, []byte("a"), must(serde.Int64.Encode(5)), ts, partial("2")...)
		require.ErrorContains(t, err, `eddy.combined="2"; this build reads format "1" only`)
		var de *topology.DeserializationError
		require.ErrorAs(t, err, &de)
	}

	b := topology.NewBuilder()
	g := topology.GroupBy(topology.Stream(b, "in", serde.String, serde.String),
		func(_, v string) string { return v }, "words", serde.String, serde.String)
	g.Count("counts")
	g.Count("counts2")
	d, _ := start(t, b)
	err := d.Pipe(rep, []byte("a"), must(serde.Int64.Encode(5)), ts, partial(topology.CombinedVersion)...)
	require.ErrorContains(t, err, "carries a partial aggregate")
	var de *topology.DeserializationError
	require.ErrorAs(t, err, &de)
}

// TestDiscardDropsPartials checks the abort path: partials of input that
// will be processed again are dropped, not sent at the next flush.
func TestDiscardDropsPartials(t *testing.T) {
	b := topology.NewBuilder()
	topology.GroupBy(topology.Stream(b, "in", serde.String, serde.String),
		func(_, v string) string { return v }, "words", serde.String, serde.String).Count("counts", topology.WithCombining())
	topo, err := b.Build()
	require.NoError(t, err)
	env := &captureEnv{}
	g, err := graph.Of(topo).NewTaskGraph(0, env)
	require.NoError(t, err)
	defer g.Close()
	require.NoError(t, g.Process(graph.InputRecord{Topic: "in", Value: []byte("a")}))
	g.(graph.Discarder).Discard()
	require.NoError(t, g.Process(graph.InputRecord{Topic: "in", Value: []byte("a")}))
	require.NoError(t, g.Flush())
	require.Len(t, env.sent, 1)
	require.Equal(t, int64(1), must(serde.Int64.Decode(env.sent[0].Value)), "the discarded record is not counted")
}

// captureEnv is a buffering TaskEnv of a task with no stores that keeps
// what it sends.
type captureEnv struct{ sent []graph.OutputRecord }

func (e *captureEnv) AppID() string            { return app }
func (e *captureEnv) TaskID() string           { return "0_0" }
func (e *captureEnv) Partition() int32         { return 0 }
func (e *captureEnv) Now() time.Time           { return time.Unix(0, 0) }
func (e *captureEnv) BufferTableUpdates() bool { return true }
func (e *captureEnv) Store(name string) (statestore.ReadWriter, error) {
	return nil, fmt.Errorf("no store %q", name)
}
func (e *captureEnv) Send(rec graph.OutputRecord) error {
	e.sent = append(e.sent, rec)
	return nil
}

// TestWithMergerOfTheWrongTypeFailsBuild checks that a merger whose types
// are not the aggregation's is reported by Build, not ignored.
func TestWithMergerOfTheWrongTypeFailsBuild(t *testing.T) {
	b := topology.NewBuilder()
	g := topology.GroupBy(topology.Stream(b, "in", serde.String, serde.String),
		func(_, v string) string { return v }, "words", serde.String, serde.String)
	topology.Aggregate(g, func() int64 { return 0 }, func(string, string, int64) int64 { return 1 }, "a", serde.Int64,
		topology.WithMerger(func(_ int, a, b int64) int64 { return a + b }))
	_, err := b.Build()
	require.ErrorContains(t, err, `Aggregate into store "a": merger is func(int, int64, int64) int64, want a non-nil func(string, int64, int64) int64`)
}

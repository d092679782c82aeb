package topology_test

import (
	"bytes"
	"errors"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/cache"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/topology"
)

// fakeEnv is a TaskEnv with map-backed stores that records what is sent.
type fakeEnv struct {
	partition int32
	sub       int
	stores    map[string]*mapStore
	sent      []graph.OutputRecord
	sendErr   error
	storeErr  error
}

func newFakeEnv(partition int32) *fakeEnv {
	return &fakeEnv{partition: partition, stores: make(map[string]*mapStore)}
}

func (e *fakeEnv) AppID() string    { return app }
func (e *fakeEnv) TaskID() string   { return strconv.Itoa(e.sub) + "_" + strconv.Itoa(int(e.partition)) }
func (e *fakeEnv) Partition() int32 { return e.partition }
func (e *fakeEnv) Now() time.Time   { return time.Unix(1000, 0) }

func (e *fakeEnv) Store(name string) (statestore.ReadWriter, error) {
	if e.storeErr != nil {
		return nil, e.storeErr
	}
	s, ok := e.stores[name]
	if !ok {
		s = &mapStore{m: make(map[string][]byte)}
		e.stores[name] = s
	}
	return s, nil
}

func (e *fakeEnv) Send(rec graph.OutputRecord) error {
	if e.sendErr != nil {
		return e.sendErr
	}
	e.sent = append(e.sent, rec)
	return nil
}

type mapStore struct{ m map[string][]byte }

func (s *mapStore) Get(k []byte) ([]byte, bool, error) { v, ok := s.m[string(k)]; return v, ok, nil }
func (s *mapStore) Put(k, v []byte) error              { s.m[string(k)] = bytes.Clone(v); return nil }
func (s *mapStore) Delete(k []byte) error              { delete(s.m, string(k)); return nil }
func (s *mapStore) All() (statestore.Iterator, error)  { return s.Range(nil, nil) }
func (s *mapStore) ApproximateCount() (int64, error)   { return int64(len(s.m)), nil }
func (s *mapStore) Range(from, to []byte) (statestore.Iterator, error) {
	it := &sliceIter{i: -1}
	for k, v := range s.m {
		if (from == nil || k >= string(from)) && (to == nil || k < string(to)) {
			it.kv = append(it.kv, [2][]byte{[]byte(k), v})
		}
	}
	sort.Slice(it.kv, func(a, b int) bool { return bytes.Compare(it.kv[a][0], it.kv[b][0]) < 0 })
	return it, nil
}

type sliceIter struct {
	kv [][2][]byte
	i  int
}

func (it *sliceIter) Next() bool    { it.i++; return it.i < len(it.kv) }
func (it *sliceIter) Key() []byte   { return it.kv[it.i][0] }
func (it *sliceIter) Value() []byte { return it.kv[it.i][1] }
func (it *sliceIter) Err() error    { return nil }
func (it *sliceIter) Close() error  { return nil }

// TestWordCountThroughTaskGraphs drives the two sub-topologies of word
// count by hand, as the runtime does: sub-topology 0's records for the
// repartition topic are partitioned by key and fed to the tasks of
// sub-topology 1.
func TestWordCountThroughTaskGraphs(t *testing.T) {
	topo := wordCount(t)
	subs := graph.Of(topo).SubTopologies()
	require.Len(t, subs, 2)
	rep := topology.TopicRef{Name: "words-repartition", Internal: true}
	require.Equal(t, []topology.TopicRef{{Name: "lines"}}, subs[0].Sources)
	require.Equal(t, []topology.TopicRef{rep}, subs[0].Sinks)
	require.Empty(t, subs[0].Stores)
	require.Equal(t, []topology.TopicRef{rep}, subs[1].Sources)
	require.Equal(t, []topology.TopicRef{{Name: "word-counts"}}, subs[1].Sinks)
	require.Equal(t, []topology.StoreInfo{{Name: "counts", Persistent: true, Logged: true, Timestamped: true}}, subs[1].Stores)
	require.Equal(t, []graph.Repartition{{Topic: rep, WriterSubTopology: 0}}, graph.Of(topo).RepartitionTopics())
	require.Equal(t, []string{"lines", "test-app-words-repartition"}, graph.Of(topo).SourceTopics(app))
	id, ok := graph.Of(topo).StoreSubTopology("counts")
	require.True(t, ok)
	require.Equal(t, 1, id)

	const parts = 3
	splitEnv := newFakeEnv(0)
	split, err := graph.Of(topo).NewTaskGraph(0, splitEnv)
	require.NoError(t, err)
	var countEnvs []*fakeEnv
	var counters []graph.TaskGraph
	for p := range int32(parts) {
		e := newFakeEnv(p)
		e.sub = 1
		g, err := graph.Of(topo).NewTaskGraph(1, e)
		require.NoError(t, err)
		countEnvs, counters = append(countEnvs, e), append(counters, g)
	}

	text := "to be or not to be that is the question"
	ts := time.Unix(100, 0)
	require.NoError(t, split.Process(graph.InputRecord{Topic: "lines", Value: []byte(text), Timestamp: ts}))
	offsets := make([]int64, parts)
	for _, rec := range splitEnv.sent {
		require.Equal(t, "test-app-words-repartition", rec.Topic)
		require.Equal(t, ts, rec.Timestamp)
		p := topology.Partition(rec.Key, parts)
		require.NoError(t, counters[p].Process(graph.InputRecord{
			Topic: rec.Topic, Partition: p, Offset: offsets[p], Timestamp: rec.Timestamp, Key: rec.Key, Value: rec.Value,
		}))
		offsets[p]++
	}
	require.Len(t, splitEnv.sent, 10)

	counts := map[string]int64{}
	for p, e := range countEnvs {
		for _, rec := range e.sent {
			require.Equal(t, "word-counts", rec.Topic)
			n, err := serde.Int64.Decode(rec.Value)
			require.NoError(t, err)
			counts[string(rec.Key)] = n
			require.Equal(t, int32(p), topology.Partition(rec.Key, parts), "each word is counted by the task owning its partition")
		}
	}
	want := map[string]int64{}
	for _, w := range strings.Fields(text) {
		want[w]++
	}
	require.Equal(t, want, counts)

	// The store of each task holds exactly that task's words.
	total := int64(0)
	for _, e := range countEnvs {
		n, err := e.stores["counts"].ApproximateCount()
		require.NoError(t, err)
		total += n
	}
	require.Equal(t, int64(len(want)), total)
	for _, g := range append(counters, split) {
		require.NoError(t, g.Close())
	}
}

func TestTaskGraphErrors(t *testing.T) {
	b := topology.NewBuilder()
	topology.Stream(b, "in", serde.Int64, serde.String).GroupByKey(serde.Int64, serde.String).Count("c").
		ToStream().To("out", serde.Int64, serde.Int64)
	topo, err := b.Build()
	require.NoError(t, err)

	_, err = graph.Of(topo).NewTaskGraph(1, newFakeEnv(0))
	require.ErrorContains(t, err, "no sub-topology 1")

	storeErr := errors.New("disk on fire")
	e := newFakeEnv(0)
	e.storeErr = storeErr
	_, err = graph.Of(topo).NewTaskGraph(0, e)
	require.ErrorIs(t, err, storeErr)
	require.ErrorContains(t, err, `store "c"`)

	e = newFakeEnv(2)
	g, err := graph.Of(topo).NewTaskGraph(0, e)
	require.NoError(t, err)

	err = g.Process(graph.InputRecord{Topic: "in", Partition: 2, Offset: 17, Key: []byte{1, 2, 3}, Value: []byte("v")})
	var de *topology.DeserializationError
	require.ErrorAs(t, err, &de)
	require.Equal(t, "in", de.Topic)
	require.Equal(t, int32(2), de.Partition)
	require.Equal(t, int64(17), de.Offset)
	require.ErrorContains(t, err, "key: serde: int64 needs 8 bytes")

	require.ErrorContains(t, g.Process(graph.InputRecord{Topic: "elsewhere"}), `does not read topic "elsewhere"`)

	key, _ := serde.Int64.Encode(7)
	require.NoError(t, g.Process(graph.InputRecord{Topic: "in", Key: key, Value: []byte("v"), Timestamp: time.Unix(5, 0)}))
	require.Equal(t, []graph.OutputRecord{{Topic: "out", Key: key, Value: []byte{0, 0, 0, 0, 0, 0, 0, 1}, Timestamp: time.Unix(5, 0)}}, e.sent)

	sendErr := errors.New("producer fenced")
	e.sendErr = sendErr
	err = g.Process(graph.InputRecord{Topic: "in", Key: key, Value: []byte("v")})
	require.ErrorIs(t, err, sendErr)
	require.ErrorContains(t, err, `node "sink-2"`)

	require.NoError(t, g.Close())
	require.Error(t, g.Process(graph.InputRecord{Topic: "in", Key: key, Value: []byte("v")}))
	require.Error(t, g.Punctuate(time.Now()))
}

func TestSinkEncodeErrorNamesTheSink(t *testing.T) {
	bad := serde.Funcs[string]{
		EncodeFn: func(string) ([]byte, error) { return nil, errors.New("unencodable") },
		DecodeFn: serde.String.Decode,
	}
	b := topology.NewBuilder()
	topology.Stream(b, "in", serde.String, serde.String).To("out", serde.String, bad, topology.Named("bad-sink"))
	topo, err := b.Build()
	require.NoError(t, err)
	g, err := graph.Of(topo).NewTaskGraph(0, newFakeEnv(0))
	require.NoError(t, err)
	err = g.Process(graph.InputRecord{Topic: "in", Key: []byte("k"), Value: []byte("v")})
	require.ErrorContains(t, err, `node "bad-sink": encode for topic "out": value: unencodable`)
}

// BenchmarkCountTask measures one task of a count: decode, store
// read-modify-write, encode and send, per record.
func BenchmarkCountTask(b *testing.B) {
	bld := topology.NewBuilder()
	topology.Stream(bld, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String).
		Count("c").ToStream().To("out", serde.String, serde.Int64)
	topo, err := bld.Build()
	if err != nil {
		b.Fatal(err)
	}
	e := newFakeEnv(0)
	g, err := graph.Of(topo).NewTaskGraph(0, e)
	if err != nil {
		b.Fatal(err)
	}
	keys := make([][]byte, 1000)
	for i := range keys {
		keys[i] = []byte("word-" + strconv.Itoa(i))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		e.sent = e.sent[:0]
		if err := g.Process(graph.InputRecord{Topic: "in", Key: keys[i%len(keys)], Value: []byte("v"), Timestamp: time.Unix(1, 0)}); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkCountNewBytesKeysTask is BenchmarkCountTask over serde.Bytes
// keys and values, every record a key the task has not seen, as eddybench
// (m) counts them.
func BenchmarkCountNewBytesKeysTask(b *testing.B) {
	bld := topology.NewBuilder()
	topology.Stream(bld, "in", serde.Bytes, serde.Bytes).GroupByKey(serde.Bytes, serde.Bytes).
		Count("c").ToStream().To("out", serde.Bytes, serde.Int64)
	topo, err := bld.Build()
	if err != nil {
		b.Fatal(err)
	}
	e := newFakeEnv(0)
	g, err := graph.Of(topo).NewTaskGraph(0, e)
	if err != nil {
		b.Fatal(err)
	}
	key := make([]byte, 0, 20)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		e.sent = e.sent[:0]
		key = strconv.AppendInt(append(key[:0], "key-"...), int64(i), 10)
		if err := g.Process(graph.InputRecord{Topic: "in", Key: key, Value: []byte("x"), Timestamp: time.Unix(1, 0)}); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// bufferingEnv buffers table updates until Flush, as the runtime does with
// its record cache on.
type bufferingEnv struct{ *fakeEnv }

func (bufferingEnv) BufferTableUpdates() bool { return true }

func TestTableUpdatesBufferedUntilFlush(t *testing.T) {
	b := topology.NewBuilder()
	s := topology.Stream(b, "in", serde.String, serde.String)
	s.GroupByKey(serde.String, serde.String).Count("counts").ToStream().To("out", serde.String, serde.Int64)
	tb := topology.Table(b, "tin", serde.String, serde.String, "table")
	tb.ToStream().To("tout", serde.String, serde.String)
	topo, err := b.Build()
	require.NoError(t, err)

	env := bufferingEnv{newFakeEnv(0)}
	g, err := graph.Of(topo).NewTaskGraph(0, env)
	require.NoError(t, err)
	for _, k := range []string{"a", "b", "a", "a"} {
		require.NoError(t, g.Process(graph.InputRecord{Topic: "in", Key: []byte(k), Value: []byte("x"), Timestamp: time.Unix(5, 0)}))
	}
	require.Empty(t, env.sent, "nothing is forwarded before Flush")
	require.NoError(t, g.Flush())
	require.Len(t, env.sent, 2, "one record per updated key")
	require.Equal(t, "a", string(env.sent[0].Key), "keys flush in the order they were first updated")
	n, _ := serde.Int64.Decode(env.sent[0].Value)
	require.Equal(t, int64(3), n, "the latest value of a")
	require.Equal(t, "b", string(env.sent[1].Key))
	require.NoError(t, g.Flush())
	require.Len(t, env.sent, 2, "a second Flush with no updates forwards nothing")

	tenv := bufferingEnv{newFakeEnv(0)}
	tenv.sub = 1
	tg, err := graph.Of(topo).NewTaskGraph(1, tenv)
	require.NoError(t, err)
	require.NoError(t, tg.Process(graph.InputRecord{Topic: "tin", Key: []byte("k"), Value: []byte("v1")}))
	require.NoError(t, tg.Process(graph.InputRecord{Topic: "tin", Key: []byte("k")}))
	require.NoError(t, tg.Flush())
	require.Len(t, tenv.sent, 1)
	require.Nil(t, tenv.sent[0].Value, "a delete after a put forwards the tombstone")

	plain := newFakeEnv(0)
	pg, err := graph.Of(topo).NewTaskGraph(0, plain)
	require.NoError(t, err)
	require.NoError(t, pg.Process(graph.InputRecord{Topic: "in", Key: []byte("a"), Value: []byte("x")}))
	require.Len(t, plain.sent, 1, "without buffering every update is forwarded at once")
}

func TestWindowedUpdatesBufferedUntilFlush(t *testing.T) {
	b := topology.NewBuilder()
	w := topology.TumblingWindows(10 * time.Second).Grace(10 * time.Second)
	topology.WindowedBy(topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String), w).
		Count("counts").ToStream().To("out", topology.TimeWindowedSerde(serde.String, w.Size()), serde.Int64)
	topo, err := b.Build()
	require.NoError(t, err)
	env := cachedEnv{bufferingEnv{newFakeEnv(0)}.fakeEnv, map[string]*cache.Store{}}
	g, err := graph.Of(topo).NewTaskGraph(0, bufferingCachedEnv{env})
	require.NoError(t, err)
	for i, r := range []struct {
		k  string
		ts int64
	}{{"a", 1}, {"b", 2}, {"a", 3}, {"a", 12}, {"a", 4}} {
		require.NoError(t, g.Process(graph.InputRecord{Topic: "in", Offset: int64(i), Key: []byte(r.k), Value: []byte("x"), Timestamp: time.Unix(r.ts, 0)}))
	}
	require.Empty(t, env.sent, "nothing is forwarded before Flush")
	require.NoError(t, g.Flush())
	ks := topology.TimeWindowedSerde(serde.String, w.Size())
	type out struct {
		k     string
		start int64
		n     int64
		ts    int64
	}
	var got []out
	for _, r := range env.sent {
		k, err := ks.Decode(r.Key)
		require.NoError(t, err)
		n, err := serde.Int64.Decode(r.Value)
		require.NoError(t, err)
		got = append(got, out{k.Key, k.Window.Start, n, r.Timestamp.Unix()})
	}
	// One record per key and window, in the order of their first update,
	// each with the latest count and the time of the record that made it.
	require.Equal(t, []out{{"a", 0, 3, 4}, {"b", 0, 1, 2}, {"a", 10_000, 1, 12}}, got)
}

// bufferingCachedEnv is cachedEnv buffering table updates.
type bufferingCachedEnv struct{ cachedEnv }

func (bufferingCachedEnv) BufferTableUpdates() bool { return true }

// cachedEnv gives the task record caches, as the runtime does, so that
// aggregations take the cache's read-modify-write path.
type cachedEnv struct {
	*fakeEnv
	caches map[string]*cache.Store
}

func (e cachedEnv) Store(name string) (statestore.ReadWriter, error) {
	c, ok := e.caches[name]
	if !ok {
		c = cache.New(statestore.NewMemory(), nil)
		e.caches[name] = c
	}
	return c, nil
}

func TestAggregateThroughCacheNeverScribblesOnStoredBytes(t *testing.T) {
	// A serde that hands out the store's own bytes, and an aggregator that
	// increments its aggregate in place: the cache's values, and what a
	// commit already took for the changelog, must not change under it.
	aliasing := serde.Funcs[[]byte]{
		EncodeFn: func(b []byte) ([]byte, error) { return b, nil },
		DecodeFn: func(b []byte) ([]byte, error) { return b, nil },
	}
	b := topology.NewBuilder()
	s := topology.Stream(b, "in", serde.String, serde.String)
	topology.Aggregate(topology.GroupBy(s, func(_, v string) string { return v }, "g", serde.String, serde.String),
		func() []byte { return []byte{0} },
		func(_ string, _ string, agg []byte) []byte { agg[0]++; return agg },
		"agg", aliasing)
	topology.GroupBy(s, func(_, v string) string { return v }, "c", serde.String, serde.String).Count("counts")
	topo, err := b.Build()
	require.NoError(t, err)
	env := cachedEnv{fakeEnv: newFakeEnv(0), caches: map[string]*cache.Store{}}
	env.sub = 1
	g, err := graph.Of(topo).NewTaskGraph(1, env)
	require.NoError(t, err)
	in := func(k string) graph.InputRecord {
		return graph.InputRecord{Topic: app + "-g-repartition", Key: []byte(k), Value: []byte(k)}
	}
	require.NoError(t, g.Process(in("a")))
	require.NoError(t, g.Process(in("a")))
	snapshot := env.caches["agg"].Dirty()
	agg := func(b []byte) []byte { v, _ := statestore.SplitTimestamped(b); return v }
	require.Equal(t, []byte{2}, agg(snapshot[0].Value))
	require.NoError(t, g.Process(in("a")))
	require.Equal(t, []byte{2}, agg(snapshot[0].Value), "bytes taken for the changelog stay as they were")
	v, found, err := env.caches["agg"].Get([]byte("a"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, []byte{3}, agg(v))

	// Count, with serde.Int64, takes the copy-free path.
	cg, err := graph.Of(topo).NewTaskGraph(2, cachedEnv{fakeEnv: &fakeEnv{sub: 2, stores: map[string]*mapStore{}}, caches: env.caches})
	require.NoError(t, err)
	for range 3 {
		require.NoError(t, cg.Process(graph.InputRecord{Topic: app + "-c-repartition", Key: []byte("w"), Value: []byte("w")}))
	}
	v, _, err = env.caches["counts"].Get([]byte("w"))
	require.NoError(t, err)
	n, _ := serde.Int64.Decode(agg(v))
	require.Equal(t, int64(3), n)
}

package topology_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/topology"
)

// tableJoinKinds are the three table-table joins, each with the result it
// should hold for a key given what each side holds, computed here
// independently of the implementation.
var tableJoinKinds = []struct {
	name string
	join func(l, r topology.KTable[string, string], store string, opts ...topology.Option) topology.KTable[string, string]
	want func(lv string, lok bool, rv string, rok bool) (string, bool)
}{
	{"inner", func(l, r topology.KTable[string, string], store string, opts ...topology.Option) topology.KTable[string, string] {
		return topology.JoinTables(l, r, func(lv, rv string) string { return lv + "+" + rv }, store, serde.String, opts...)
	}, func(lv string, lok bool, rv string, rok bool) (string, bool) {
		return lv + "+" + rv, lok && rok
	}},
	{"left", func(l, r topology.KTable[string, string], store string, opts ...topology.Option) topology.KTable[string, string] {
		return topology.LeftJoinTables(l, r, func(lv, rv string, found bool) string {
			if !found {
				rv = "-"
			}
			return lv + "+" + rv
		}, store, serde.String, opts...)
	}, func(lv string, lok bool, rv string, rok bool) (string, bool) {
		if !rok {
			rv = "-"
		}
		return lv + "+" + rv, lok
	}},
	{"outer", func(l, r topology.KTable[string, string], store string, opts ...topology.Option) topology.KTable[string, string] {
		return topology.OuterJoinTables(l, r, func(lv string, lok bool, rv string, rok bool) string {
			if !lok {
				lv = "-"
			}
			if !rok {
				rv = "-"
			}
			return lv + "+" + rv
		}, store, serde.String, opts...)
	}, func(lv string, lok bool, rv string, rok bool) (string, bool) {
		if !lok {
			lv = "-"
		}
		if !rok {
			rv = "-"
		}
		return lv + "+" + rv, lok || rok
	}},
}

// ksTableJoinForwards is what Kafka Streams 3.9 forwards from a table-table
// join of kind (uncached, so every update goes through at once) for one
// update of a side: sOld and sNew are the side's value before and after
// (after a filter), other the other side's. The side's KTableKTable*Join
// processor sends nothing when the other side holds no value and the join
// needs one (inner joins, a left join's right side), or when neither side
// holds one (a left join's left side, outer joins, whose tables send old
// values); otherwise it sends the new result, a tombstone when there is
// none, which KTableKTableJoinMerger forwards whether or not the result
// held the key. The right side's Filter, when its table sends old values
// (an outer join's), sends nothing for an update that neither passed
// before nor passes now.
func ksTableJoinForwards(kind string, leftSide bool, sOld, sNew, other bool) (forward bool) {
	keepsOwn := kind == "outer" || kind == "left" && leftSide
	if !leftSide && kind == "outer" && !sOld && !sNew {
		return false // KTableFilter with sendOldValues
	}
	if !other {
		if !keepsOwn {
			return false
		}
		return sOld || sNew
	}
	return true
}

// TestTableJoinsMatchReference feeds random updates and tombstones to both
// sides of each table-table join (the right side through an unmaterialized
// Filter, so a value that stops passing is a delete) and compares every
// update the result forwards with what Kafka Streams forwards
// (ksTableJoinForwards), and the result store at the end with a reference
// recomputed from both sides.
func TestTableJoinsMatchReference(t *testing.T) {
	for _, kind := range tableJoinKinds {
		for seed := range uint64(5) {
			t.Run(kind.name+"/"+strconv.FormatUint(seed, 10), func(t *testing.T) {
				b := topology.NewBuilder()
				l := topology.Table(b, "left", serde.String, serde.String, "left-store")
				r := topology.Table(b, "right", serde.String, serde.String, "right-store").Filter(even)
				kind.join(l, r, "joined-store", topology.Named("j")).ToStream().To("joined", serde.String, serde.String)
				d, _ := start(t, b)
				lin, rin := strIn(d, "left"), strIn(d, "right")

				rng := rand.New(rand.NewPCG(seed, 3))
				left, right := map[string]string{}, map[string]string{}
				result := func(k string) (string, bool) {
					lv, lok := left[k]
					rv, rok := right[k]
					if rok && !even(k, rv) {
						rv, rok = "", false
					}
					return kind.want(lv, lok, rv, rok)
				}
				var want []update
				base := time.Unix(1000, 0)
				// holds reports whether a side holds k, the right side's
				// value counting only when it passes the filter.
				holds := func(leftSide bool, k string) bool {
					if leftSide {
						_, ok := left[k]
						return ok
					}
					v, ok := right[k]
					return ok && even(k, v)
				}
				for i := range 400 {
					k := "k" + strconv.Itoa(rng.IntN(5))
					side, in, leftSide := left, lin, true
					if rng.IntN(2) == 0 {
						side, in, leftSide = right, rin, false
					}
					sOld := holds(leftSide, k)
					if rng.IntN(4) == 0 {
						require.NoError(t, in.PipeTombstone(k))
						delete(side, k)
					} else {
						v := strconv.Itoa(rng.IntN(100))
						require.NoError(t, in.PipeAt(k, v, base.Add(time.Duration(i)*time.Millisecond)))
						side[k] = v
					}
					if !ksTableJoinForwards(kind.name, leftSide, sOld, holds(leftSide, k), holds(!leftSide, k)) {
						continue
					}
					if v, ok := result(k); ok {
						want = append(want, update{k, ptr(v)})
					} else {
						want = append(want, update{key: k})
					}
				}
				require.Equal(t, want, readUpdates(d, "joined"))

				wantStore := map[string]string{}
				for i := range 5 {
					k := "k" + strconv.Itoa(i)
					if v, ok := result(k); ok {
						wantStore[k] = v
					}
				}
				rw, err := d.Store("joined-store")
				require.NoError(t, err)
				got, err := mustAll(t, topology.NewKeyValueStore(rw, serde.String, serde.String))
				require.NoError(t, err)
				require.Equal(t, wantStore, got)
			})
		}
	}
}

func mustAll[K comparable, V any](t *testing.T, s *topology.KeyValueStore[K, V]) (map[K]V, error) {
	t.Helper()
	it, err := s.All()
	require.NoError(t, err)
	kvs, err := it.Collect()
	out := map[K]V{}
	for _, kv := range kvs {
		out[kv.Key] = kv.Value
	}
	return out, err
}

// TestTableJoinDescribeAndCoPartitioning: both tables and the join's three
// nodes share one sub-topology, so the two source topics are checked for
// equal partition counts.
func TestTableJoinDescribeAndCoPartitioning(t *testing.T) {
	b := topology.NewBuilder()
	l := topology.Table(b, "left", serde.String, serde.String, "ls", topology.Named("lt"))
	r := topology.Table(b, "right", serde.String, serde.String, "rs", topology.Named("rt"))
	topology.JoinTables(l, r, func(a, b string) string { return a + b }, "js", serde.String, topology.Named("both"))
	topo, err := b.Build()
	require.NoError(t, err)
	require.Equal(t, `Sub-topology 0
  Source: lt-source (topic: left)
    --> lt
  Processor: lt (stores: ls)
    --> both-left
    <-- lt-source
  Source: rt-source (topic: right)
    --> rt
  Processor: rt (stores: rs)
    --> both-right
    <-- rt-source
  Processor: both (stores: js)
    <-- both-left, both-right
  Processor: both-left (stores: rs)
    --> both
    <-- lt
  Processor: both-right (stores: ls)
    --> both
    <-- rt
  Store: ls (persistent, logged)
  Store: rs (persistent, logged)
  Store: js (persistent, logged)
`, topo.Describe().String())
	rt := graph.Of(topo)
	require.ErrorContains(t, rt.CheckCoPartitioning(map[string]int32{"left": 3, "right": 4}, app),
		"left (3), right (4)")
}

// benchTask builds b, fills its table topic "t" (if any) with keys, and
// measures one task processing a record of "in" per iteration, as
// BenchmarkCountTask does for a count.
func benchTask(b *testing.B, bld *topology.Builder, keys [][]byte, tableTopic string) {
	topo, err := bld.Build()
	if err != nil {
		b.Fatal(err)
	}
	e := newFakeEnv(0)
	g, err := graph.Of(topo).NewTaskGraph(0, e)
	if err != nil {
		b.Fatal(err)
	}
	if tableTopic != "" {
		for _, k := range keys {
			if err := g.Process(graph.InputRecord{Topic: tableTopic, Key: k, Value: []byte("region"), Timestamp: time.Unix(1, 0)}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportAllocs()
	i := 0
	// CPU time says more than wall time on a machine shared with other
	// work.
	cpu0 := benchCPU()
	for b.Loop() {
		e.sent = e.sent[:0]
		if err := g.Process(graph.InputRecord{Topic: "in", Key: keys[i%len(keys)], Value: []byte("v"), Timestamp: time.Unix(1, 0)}); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(benchCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

func benchKeys() [][]byte {
	keys := make([][]byte, 1000)
	for i := range keys {
		keys[i] = []byte("word-" + strconv.Itoa(i))
	}
	return keys
}

// BenchmarkStreamTableJoinTask is BenchmarkCountTask's input through a
// stream-table join with every key in the table: decode, store read, join,
// encode and send per record.
func BenchmarkStreamTableJoinTask(b *testing.B) {
	bld := topology.NewBuilder()
	t := topology.Table(bld, "t", serde.String, serde.String, "t-store")
	topology.Join(topology.Stream(bld, "in", serde.String, serde.String), t, func(v, tv string) string { return v + tv }).
		To("out", serde.String, serde.String)
	benchTask(b, bld, benchKeys(), "t")
}

// BenchmarkTableGroupCountTask measures a table update regrouped and
// counted with retraction: the table's old-value read and write, the
// change sent to the repartition topic (the task of the count reads it
// back; this measures the writing side).
func BenchmarkTableGroupCountTask(b *testing.B) {
	bld := topology.NewBuilder()
	t := topology.Table(bld, "in", serde.String, serde.String, "t-store")
	topology.GroupTableBy(t, func(k, v string) (string, string) { return v, k }, "g", serde.String, serde.String).Count("c")
	benchTask(b, bld, benchKeys(), "")
}

// Table stores written before values carried their timestamps hold bare
// values: a join reads them as having no time, so its result takes the
// updating record's, and an aggregation's next result likewise; values
// written from then on carry their time.
func TestTableStoresReadBareValues(t *testing.T) {
	b := topology.NewBuilder()
	l := topology.Table(b, "l", serde.String, serde.String, "l-store")
	r := topology.Table(b, "r", serde.String, serde.String, "r-store")
	topology.JoinTables(l, r, func(lv, rv string) string { return lv + "+" + rv }, "joined", serde.String).
		ToStream().To("out", serde.String, serde.String)
	topology.Stream(b, "words", serde.String, serde.String).GroupByKey(serde.String, serde.String).Count("counts").
		ToStream().To("counts-out", serde.String, serde.Int64)
	topo, err := b.Build()
	require.NoError(t, err)
	env := newFakeEnv(0)
	for store, v := range map[string][]byte{"r-store": []byte("old"), "counts": binary64(5)} {
		rw, err := env.Store(store)
		require.NoError(t, err)
		require.NoError(t, rw.Put([]byte("k"), v))
	}
	graphs := map[string]graph.TaskGraph{}
	for _, st := range graph.Of(topo).SubTopologies() {
		g, err := graph.Of(topo).NewTaskGraph(st.ID, env)
		require.NoError(t, err)
		for _, src := range st.Sources {
			graphs[src.Name] = g
		}
	}
	for _, in := range []struct {
		topic, value string
		ts           int64
	}{{"l", "a", 5}, {"r", "new", 9}, {"l", "b", 7}, {"words", "w", 4}, {"words", "w", 2}} {
		require.NoError(t, graphs[in.topic].Process(graph.InputRecord{Topic: in.topic, Key: []byte("k"), Value: []byte(in.value), Timestamp: time.UnixMilli(in.ts)}))
	}
	var got []string
	for _, rec := range env.sent {
		v := string(rec.Value)
		if rec.Topic == "counts-out" {
			n, err := serde.Int64.Decode(rec.Value)
			require.NoError(t, err)
			v = strconv.FormatInt(n, 10)
		}
		got = append(got, fmt.Sprintf("%s %s@%d", rec.Topic, v, rec.Timestamp.UnixMilli()))
	}
	require.Equal(t, []string{"out a+old@5", "out a+new@9", "out b+new@9", "counts-out 6@4", "counts-out 7@4"}, got)

	rw, err := env.Store("joined")
	require.NoError(t, err)
	vb, _, err := rw.Get([]byte("k"))
	require.NoError(t, err)
	v, ts := statestore.SplitTimestamped(vb)
	require.Equal(t, "b+new@9", fmt.Sprintf("%s@%d", v, ts))
}

func binary64(n int64) []byte {
	b, _ := serde.Int64.Encode(n)
	return b
}

// With BareStoreValues the stores hold what builds before timestamped
// stores held, bare values, which such builds can read, and results are
// stamped as those builds stamped them.
func TestBareStoreValues(t *testing.T) {
	b := topology.NewBuilder()
	b.BareStoreValues()
	l := topology.Table(b, "l", serde.String, serde.String, "l-store")
	r := topology.Table(b, "r", serde.String, serde.String, "r-store")
	topology.JoinTables(l, r, func(lv, rv string) string { return lv + "+" + rv }, "joined", serde.String).
		ToStream().To("out", serde.String, serde.String)
	g := topology.Stream(b, "words", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	g.Count("counts").ToStream().To("counts-out", serde.String, serde.Int64)
	topology.WindowedBy(g, topology.TumblingWindows(time.Second)).Count("windowed")
	topo, err := b.Build()
	require.NoError(t, err)
	env := newFakeEnv(0)
	graphs := map[string]graph.TaskGraph{}
	for _, st := range graph.Of(topo).SubTopologies() {
		for _, s := range st.Stores {
			require.False(t, s.Timestamped, "store %q", s.Name)
		}
		g, err := graph.Of(topo).NewTaskGraph(st.ID, env)
		require.NoError(t, err)
		for _, src := range st.Sources {
			graphs[src.Name] = g
		}
	}
	for _, in := range []struct {
		topic, value string
		ts           int64
	}{{"l", "a", 5}, {"r", "x", 9}, {"l", "b", 7}, {"words", "w", 4}, {"words", "w", 2}} {
		require.NoError(t, graphs[in.topic].Process(graph.InputRecord{Topic: in.topic, Key: []byte("k"), Value: []byte(in.value), Timestamp: time.UnixMilli(in.ts)}))
	}
	var got []string
	for _, rec := range env.sent {
		v := string(rec.Value)
		if rec.Topic == "counts-out" {
			n, err := serde.Int64.Decode(rec.Value)
			require.NoError(t, err)
			v = strconv.FormatInt(n, 10)
		}
		got = append(got, fmt.Sprintf("%s %s@%d", rec.Topic, v, rec.Timestamp.UnixMilli()))
	}
	require.Equal(t, []string{"out a+x@9", "out b+x@7", "counts-out 1@4", "counts-out 2@2"}, got)

	for store, want := range map[string]string{"l-store": "b", "r-store": "x", "joined": "b+x", "counts": string(binary64(2))} {
		v, found, err := env.stores[store].Get([]byte("k"))
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, want, string(v), "store %q", store)
	}
	require.Len(t, env.stores["windowed"].m, 1)
	for _, v := range env.stores["windowed"].m {
		require.Equal(t, binary64(2), v)
	}
}

// BenchmarkTableJoinTask is BenchmarkCountTask's input as updates of the
// left table of each table-table join, every key held by the right table:
// the left table's write (and, for left and outer joins, its old-value
// read), the right lookup, the result's read and write, per record; the
// "/nostore" runs join without a result store, which leaves out the last
// two.
func BenchmarkTableJoinTask(b *testing.B) {
	for _, kind := range tableJoinKinds {
		for _, store := range []string{"joined", ""} {
			name := kind.name
			if store == "" {
				name += "/nostore"
			}
			b.Run(name, func(b *testing.B) {
				bld := topology.NewBuilder()
				l := topology.Table(bld, "in", serde.String, serde.String, "l-store")
				r := topology.Table(bld, "t", serde.String, serde.String, "r-store")
				kind.join(l, r, store).ToStream().To("out", serde.String, serde.String)
				benchTask(b, bld, benchKeys(), "t")
			})
		}
	}
}

// A left join of a session-windowed count: the count's old values tell
// its side that the count held the session a record merges away, so the
// result it holds for the session is deleted.
func TestLeftJoinOfTableWithoutOldValues(t *testing.T) {
	b := topology.NewBuilder()
	ks := topology.SessionWindowedSerde(serde.String)
	counts := topology.SessionWindowedBy(topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String),
		topology.NewSessionWindows(10*time.Millisecond)).Count("counts")
	r := topology.Table(b, "right", ks, serde.String, "right-store")
	topology.LeftJoinTables(counts, r, func(n int64, rv string, ok bool) string {
		return strconv.FormatInt(n, 10) + "+" + rv
	}, "joined", serde.String).ToStream().To("out", ks, serde.String)
	d, _ := start(t, b)
	in := strIn(d, "in")
	require.NoError(t, in.PipeAt("a", "x", time.UnixMilli(0)))
	require.NoError(t, in.PipeAt("a", "x", time.UnixMilli(5)))
	kvs := readKVs(t, d, "out", ks, serde.String)
	var got []string
	for _, kv := range kvs {
		got = append(got, fmt.Sprintf("%s@[%d,%d]=%s", kv.Key.Key, kv.Key.Window.Start, kv.Key.Window.End, kv.Value))
	}
	require.Equal(t, []string{"a@[0,0]=1+", "a@[0,0]=", "a@[0,5]=2+"}, got)
}

// A table that is a left join's left side and is also grouped sends its
// old values in full, whichever was built first: the grouping retracts
// them, and the join's side still learns whether the table held a key.
func TestLeftJoinedTableAlsoGrouped(t *testing.T) {
	for _, joinFirst := range []bool{true, false} {
		t.Run(strconv.FormatBool(joinFirst), func(t *testing.T) {
			b := topology.NewBuilder()
			l := topology.Table(b, "left", serde.String, serde.String, "left-store")
			r := topology.Table(b, "right", serde.String, serde.String, "right-store")
			join := func() {
				tableJoinKinds[1].join(l, r, "joined-store").ToStream().To("joined", serde.String, serde.String)
			}
			group := func() {
				topology.GroupTableBy(l, func(k, v string) (string, string) { return v, k }, "by-value", serde.String, serde.String).
					Count("counts").ToStream().To("counts", serde.String, serde.Int64)
			}
			if joinFirst {
				join()
				group()
			} else {
				group()
				join()
			}
			d, _ := start(t, b)
			in := strIn(d, "left")
			require.NoError(t, in.Pipe("a", "x"))
			require.NoError(t, in.Pipe("b", "x"))
			require.NoError(t, in.Pipe("a", "y"))
			require.NoError(t, in.PipeTombstone("a"))
			require.NoError(t, in.PipeTombstone("a"))
			require.NoError(t, in.Pipe("c", "y"))
			require.Equal(t, []update{
				{"a", ptr("x+-")}, {"b", ptr("x+-")}, {"a", ptr("y+-")}, {key: "a"}, {"c", ptr("y+-")},
			}, readUpdates(d, "joined"))
			last := map[string]int64{}
			for _, kv := range readKVs(t, d, "counts", serde.String, serde.Int64) {
				last[kv.Key] = kv.Value
			}
			require.Equal(t, map[string]int64{"x": 1, "y": 1}, last)
		})
	}
}

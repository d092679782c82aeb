package topology_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/cache"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/topology"
	"github.com/eddystreams/eddy/topology/topologytest"
)

type winKey struct {
	key   string
	start int64
}

type timedRec struct {
	key string
	ts  int64
}

// outOfOrder generates n records over keys, their timestamps advancing by
// up to step ms and arriving up to jitter ms out of order.
func outOfOrder(seed uint64, n int, keys []string, step, jitter int64) []timedRec {
	rng := rand.New(rand.NewPCG(seed, 7))
	var now int64 = 1_000
	out := make([]timedRec, n)
	for i := range out {
		now += rng.Int64N(step + 1)
		out[i] = timedRec{key: keys[rng.IntN(len(keys))], ts: max(0, now-rng.Int64N(jitter+1))}
	}
	return out
}

// referenceCounts computes, independently of package topology's window
// arithmetic, each window's count and which records were dropped late:
// windows [s, s+size) for s every advance, closed once stream time reaches
// s+size+grace. It also returns the final stream time.
func referenceCounts(recs []timedRec, size, advance, grace int64) (counts map[winKey]int64, late int64, streamTime int64) {
	counts = make(map[winKey]int64)
	streamTime = -1
	for _, r := range recs {
		streamTime = max(streamTime, r.ts)
		dropped := false
		for s := r.ts - r.ts%advance; s >= 0 && s > r.ts-size; s -= advance {
			if streamTime >= s+size+grace {
				dropped = true
				continue
			}
			counts[winKey{r.key, s}]++
		}
		if dropped {
			late++
		}
	}
	return counts, late, streamTime
}

func windowedCountTopology(t *testing.T, w topology.TimeWindows, final bool) (*topologytest.Driver, *topologytest.InputTopic[string, string], *topologytest.OutputTopic[topology.Windowed[string], int64]) {
	t.Helper()
	b := topology.NewBuilder()
	ws := topology.WindowedBy(topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String), w)
	if final {
		ws = ws.EmitFinal()
	}
	ws.Count("counts").ToStream().To("out", topology.TimeWindowedSerde(serde.String, w.Size()), serde.Int64)
	d, _ := start(t, b)
	return d, topologytest.NewInputTopic(d, "in", serde.String, serde.String),
		topologytest.NewOutputTopic(d, "out", topology.TimeWindowedSerde(serde.String, w.Size()), serde.Int64)
}

func TestWindowedCountMatchesReference(t *testing.T) {
	keys := []string{"a", "b", "c", "d", "e"}
	for _, tc := range []struct {
		name                 string
		size, advance, grace int64
	}{
		{"tumbling", 10_000, 10_000, 3_000},
		{"hopping", 10_000, 2_500, 1_000},
		{"tumbling-no-grace", 5_000, 5_000, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := topology.HoppingWindows(time.Duration(tc.size)*time.Millisecond, time.Duration(tc.advance)*time.Millisecond).
				Grace(time.Duration(tc.grace) * time.Millisecond)
			recs := outOfOrder(uint64(tc.size+tc.advance), 3000, keys, 200, 6_000)
			want, late, _ := referenceCounts(recs, tc.size, tc.advance, tc.grace)
			require.Positive(t, late, "the input must contain late records for the test to mean anything")

			d, in, out := windowedCountTopology(t, w, false)
			for i, r := range recs {
				require.NoError(t, in.PipeAt(r.key, "v"+strconv.Itoa(i), time.UnixMilli(r.ts)))
			}
			got := make(map[winKey]int64)
			recsOut, err := out.ReadRecords()
			require.NoError(t, err)
			for _, r := range recsOut {
				require.Equal(t, tc.size, r.Key.Window.End-r.Key.Window.Start)
				got[winKey{r.Key.Key, r.Key.Window.Start}] = r.Value
			}
			require.Equal(t, want, got)
			require.Equal(t, late, d.DroppedLate())
		})
	}
}

func TestWindowedLateRecordDroppedAndCounted(t *testing.T) {
	w := topology.TumblingWindows(10 * time.Second).Grace(2 * time.Second)
	d, in, out := windowedCountTopology(t, w, false)
	at := func(ms int64) time.Time { return time.UnixMilli(ms) }
	require.NoError(t, in.PipeAt("k", "1", at(5_000)))
	require.NoError(t, in.PipeAt("k", "2", at(11_000))) // stream time 11 s: [0,10) open until 12 s
	require.NoError(t, in.PipeAt("k", "3", at(9_000)))  // in grace: counted
	require.NoError(t, in.PipeAt("k", "4", at(12_000))) // stream time 12 s closes [0,10)
	require.NoError(t, in.PipeAt("k", "5", at(9_999)))  // late
	require.Equal(t, int64(1), d.DroppedLate())
	kvs, err := out.ReadKeyValues()
	require.NoError(t, err)
	require.Equal(t, []topology.KeyValue[topology.Windowed[string], int64]{
		{Key: topology.Windowed[string]{Key: "k", Window: topology.Window{Start: 0, End: 10_000}}, Value: 1},
		{Key: topology.Windowed[string]{Key: "k", Window: topology.Window{Start: 10_000, End: 20_000}}, Value: 1},
		{Key: topology.Windowed[string]{Key: "k", Window: topology.Window{Start: 0, End: 10_000}}, Value: 2},
		{Key: topology.Windowed[string]{Key: "k", Window: topology.Window{Start: 10_000, End: 20_000}}, Value: 2},
	}, kvs)
}

func TestWindowedEmitFinalOnePerClosedWindow(t *testing.T) {
	keys := []string{"a", "b", "c"}
	for _, tc := range []struct {
		name                 string
		size, advance, grace int64
	}{
		{"tumbling", 10_000, 10_000, 3_000},
		{"hopping", 10_000, 5_000, 2_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := topology.HoppingWindows(time.Duration(tc.size)*time.Millisecond, time.Duration(tc.advance)*time.Millisecond).
				Grace(time.Duration(tc.grace) * time.Millisecond)
			recs := outOfOrder(42, 2000, keys, 150, 5_000)
			want, late, st := referenceCounts(recs, tc.size, tc.advance, tc.grace)
			d, in, out := windowedCountTopology(t, w, true)
			maxTs := make(map[winKey]int64)
			for _, r := range recs {
				require.NoError(t, in.PipeAt(r.key, "v", time.UnixMilli(r.ts)))
			}
			stAt := int64(-1)
			for _, r := range recs {
				stAt = max(stAt, r.ts)
				for s := r.ts - r.ts%tc.advance; s >= 0 && s > r.ts-tc.size; s -= tc.advance {
					if stAt < s+tc.size+tc.grace {
						maxTs[winKey{r.key, s}] = max(maxTs[winKey{r.key, s}], r.ts)
					}
				}
			}
			got, err := out.ReadRecords()
			require.NoError(t, err)
			seen := make(map[winKey]bool)
			for _, r := range got {
				k := winKey{r.Key.Key, r.Key.Window.Start}
				require.False(t, seen[k], "window %v emitted twice", k)
				seen[k] = true
				require.GreaterOrEqual(t, st, k.start+tc.size+tc.grace, "window %v emitted before it closed", k)
				require.Equal(t, want[k], r.Value, "window %v", k)
				require.Equal(t, maxTs[k], r.Timestamp.UnixMilli(), "timestamp of window %v", k)
			}
			closed := 0
			for k := range want {
				if st >= k.start+tc.size+tc.grace {
					closed++
					require.True(t, seen[k], "closed window %v not emitted", k)
				}
			}
			require.Equal(t, closed, len(got))
			require.Less(t, closed, len(want), "some windows must still be open")
			require.Equal(t, late, d.DroppedLate())

			// A record far ahead closes every window: each open one is
			// emitted once, none again.
			require.NoError(t, in.PipeAt("z", "v", time.UnixMilli(st+10*tc.size)))
			rest, err := out.ReadRecords()
			require.NoError(t, err)
			for _, r := range rest {
				k := winKey{r.Key.Key, r.Key.Window.Start}
				require.False(t, seen[k], "window %v emitted twice", k)
				seen[k] = true
				require.Equal(t, want[k], r.Value)
			}
			require.Len(t, seen, len(want))
		})
	}
}

func TestTimestampExtractor(t *testing.T) {
	b := topology.NewBuilder()
	extract := func(r topology.Record[string, string]) (time.Time, error) {
		ms, err := strconv.ParseInt(r.Value, 10, 64)
		if err != nil {
			return time.Time{}, err
		}
		return time.UnixMilli(ms), nil
	}
	src := topology.Stream(b, "in", serde.String, serde.String, topology.WithTimestampExtractor(topology.TimestampExtractor[string, string](extract)))
	src.To("echo", serde.String, serde.String)
	topology.WindowedBy(src.GroupByKey(serde.String, serde.String), topology.TumblingWindows(time.Second)).
		Count("c").ToStream().To("out", topology.TimeWindowedSerde(serde.String, 1000), serde.Int64)
	d, _ := start(t, b)
	in := topologytest.NewInputTopic(d, "in", serde.String, serde.String)
	out := topologytest.NewOutputTopic(d, "out", topology.TimeWindowedSerde(serde.String, 1000), serde.Int64)
	require.NoError(t, in.PipeAt("k", "2500", time.UnixMilli(99_000)))
	recs, err := out.ReadRecords()
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, topology.Window{Start: 2000, End: 3000}, recs[0].Key.Window)
	require.Equal(t, int64(2500), recs[0].Timestamp.UnixMilli())
	echo := d.ReadOutput("echo")
	require.Equal(t, int64(2500), echo[0].Timestamp.UnixMilli(), "output records carry the extracted time")

	var te *topology.TimestampError
	err = in.PipeAt("k", "not a number", time.UnixMilli(99_000))
	require.ErrorAs(t, err, &te)
	require.Equal(t, int64(1), te.Offset)
	err = in.PipeAt("k", "-5", time.UnixMilli(99_000))
	require.ErrorAs(t, err, &te)
	require.Equal(t, int64(-5), te.Time.UnixMilli())

	// Kafka's -1 ("no timestamp") fails without an extractor too.
	b2 := topology.NewBuilder()
	topology.Stream(b2, "in", serde.String, serde.String).To("out", serde.String, serde.String)
	d2, _ := start(t, b2)
	err = d2.Pipe("in", []byte("k"), []byte("v"), time.UnixMilli(-1))
	require.True(t, errors.As(err, &te), fmt.Sprint(err))
}

func TestTimestampExtractorTypeMismatch(t *testing.T) {
	b := topology.NewBuilder()
	topology.Stream(b, "in", serde.String, serde.String,
		topology.WithTimestampExtractor(topology.TimestampExtractor[string, int64](func(topology.Record[string, int64]) (time.Time, error) { return time.Time{}, nil }))).
		To("out", serde.String, serde.String)
	_, err := b.Build()
	require.ErrorContains(t, err, "timestamp extractor")
}

func TestWindowedStoresDeclared(t *testing.T) {
	b := topology.NewBuilder()
	g := topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	topology.WindowedBy(g, topology.HoppingWindows(10*time.Second, 5*time.Second).Grace(2*time.Second)).EmitFinal().Count("counts")
	topology.SessionWindowedBy(g, topology.NewSessionWindows(time.Second)).Count("sessions", topology.InMemory())
	topo, err := b.Build()
	require.NoError(t, err)
	require.Equal(t, []graph.StoreInfo{
		{Name: "counts", Persistent: true, Logged: true, Kind: graph.Window, Retention: 12_000, WindowSize: 10_000, Timestamped: true},
		{Name: "counts-pending", Persistent: true, Logged: true},
		{Name: "sessions", Logged: true, Kind: graph.Session, Retention: 1_001},
	}, graph.Of(topo).SubTopologies()[0].Stores)
	require.Contains(t, topo.Describe().String(), "Store: counts (persistent, logged, window, retention 12000 ms)")
}

// A Processor reaches a window store it declared through GetWindowStore.
func TestProcessorWindowStore(t *testing.T) {
	info := topology.StoreInfo{Name: "recent", Persistent: true, Logged: true, Kind: topology.WindowKind, Retention: 60_000, WindowSize: 1_000}
	b := topology.NewBuilder()
	b.AddStore(info)
	s := topology.Stream(b, "in", serde.String, serde.String)
	out := topology.Process(s, "last-per-second", func() topology.Processor[string, string, string, string] {
		var ws *topology.WindowStore[string, string]
		return &funcProc[string, string, string, string]{
			init: func(ctx strCtx) (err error) {
				ws, err = topology.GetWindowStore(ctx, info, serde.String, serde.String)
				return err
			},
			process: func(ctx strCtx, r strRec) error {
				start := r.Timestamp.UnixMilli() / 1000 * 1000
				if err := ws.Put(r.Key, start, r.Value); err != nil {
					return err
				}
				it, err := ws.Fetch(r.Key, 0, start)
				if err != nil {
					return err
				}
				all, err := it.Collect()
				if err != nil {
					return err
				}
				return ctx.Forward(topology.Record[string, string]{Key: r.Key, Value: strconv.Itoa(len(all))})
			},
		}
	}, "recent")
	out.To("out", serde.String, serde.String)
	d, _ := start(t, b)
	in := topologytest.NewInputTopic(d, "in", serde.String, serde.String)
	for _, ms := range []int64{1_500, 1_700, 3_000, 9_999} {
		require.NoError(t, in.PipeAt("k", strconv.FormatInt(ms, 10), time.UnixMilli(ms)))
	}
	kvs, err := topologytest.NewOutputTopic(d, "out", serde.String, serde.String).ReadKeyValues()
	require.NoError(t, err)
	require.Equal(t, []topology.KeyValue[string, string]{{Key: "k", Value: "1"}, {Key: "k", Value: "1"}, {Key: "k", Value: "2"}, {Key: "k", Value: "3"}}, kvs)

	_, err = topology.GetSessionStore(d, info, serde.String, serde.String)
	require.ErrorContains(t, err, "not a session store")
}

// TestWindowedUpdatesDiscarded checks that an abort (graph.Discarder)
// drops the pending window updates: the input that made them is processed
// again.
func TestWindowedUpdatesDiscarded(t *testing.T) {
	b := topology.NewBuilder()
	w := topology.TumblingWindows(10 * time.Second)
	topology.WindowedBy(topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String), w).
		Count("counts").ToStream().To("out", topology.TimeWindowedSerde(serde.String, w.Size()), serde.Int64)
	topo, err := b.Build()
	require.NoError(t, err)
	env := cachedEnv{newFakeEnv(0), map[string]*cache.Store{}}
	g, err := graph.Of(topo).NewTaskGraph(0, bufferingCachedEnv{env})
	require.NoError(t, err)
	for _, ts := range []int64{1_000, 2_000} {
		require.NoError(t, g.Process(graph.InputRecord{Topic: "in", Key: []byte("a"), Value: []byte("x"), Timestamp: time.UnixMilli(ts)}))
	}
	g.(graph.Discarder).Discard()
	env.caches["counts"].Discard()
	require.NoError(t, g.Flush())
	require.Empty(t, env.sent, "nothing pending survives the abort")
	require.NoError(t, g.Process(graph.InputRecord{Topic: "in", Key: []byte("a"), Value: []byte("x"), Timestamp: time.UnixMilli(3_000)}))
	require.NoError(t, g.Flush())
	require.Len(t, env.sent, 1)
	n, err := serde.Int64.Decode(env.sent[0].Value)
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "the count starts again from the committed state")
}

// TestWindowedBufferedUpdatesMatchModel runs out-of-order input through a
// buffering task graph, flushing every so many records, and checks the
// records sent against the record cache's contract, computed
// independently: per flush interval, one record per window updated in it,
// with the window's count at the interval's end, in the order the windows
// were first updated in it.
func TestWindowedBufferedUpdatesMatchModel(t *testing.T) {
	keys := []string{"a", "b", "c", "d"}
	for _, tc := range []struct {
		name                 string
		size, advance, grace int64
		every                int
	}{
		{"tumbling-no-grace", 5_000, 5_000, 0, 50},
		{"tumbling-grace", 10_000, 10_000, 3_000, 200},
		{"hopping", 10_000, 2_500, 1_000, 120},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := topology.HoppingWindows(time.Duration(tc.size)*time.Millisecond, time.Duration(tc.advance)*time.Millisecond).
				Grace(time.Duration(tc.grace) * time.Millisecond)
			b := topology.NewBuilder()
			topology.WindowedBy(topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String), w).
				Count("counts").ToStream().To("out", topology.TimeWindowedSerde(serde.String, w.Size()), serde.Int64)
			topo, err := b.Build()
			require.NoError(t, err)
			env := cachedEnv{newFakeEnv(0), map[string]*cache.Store{}}
			g, err := graph.Of(topo).NewTaskGraph(0, bufferingCachedEnv{env})
			require.NoError(t, err)

			recs := outOfOrder(uint64(tc.size)+uint64(tc.every), 2000, keys, 200, 6_000)
			counts := make(map[winKey]int64)
			var want []winCount
			var order []winKey // this interval's windows, first update first
			seen := make(map[winKey]bool)
			flush := func() {
				require.Len(t, env.sent, len(want), "nothing goes out before the flush")
				for _, k := range order {
					want = append(want, winCount{k, counts[k]})
				}
				order, seen = order[:0], make(map[winKey]bool)
				require.NoError(t, g.Flush())
			}
			streamTime := int64(-1)
			for i, r := range recs {
				require.NoError(t, g.Process(graph.InputRecord{Topic: "in", Offset: int64(i), Key: []byte(r.key), Value: []byte("x"), Timestamp: time.UnixMilli(r.ts)}))
				streamTime = max(streamTime, r.ts)
				// The record's windows, earliest first, as the processor
				// updates them.
				first := r.ts - r.ts%tc.advance
				for first-tc.advance >= 0 && first-tc.advance > r.ts-tc.size {
					first -= tc.advance
				}
				for s := first; s <= r.ts; s += tc.advance {
					if streamTime >= s+tc.size+tc.grace {
						continue // closed: dropped
					}
					k := winKey{r.key, s}
					counts[k]++
					if !seen[k] {
						seen[k] = true
						order = append(order, k)
					}
				}
				if (i+1)%tc.every == 0 {
					flush()
				}
			}
			flush()

			ks := topology.TimeWindowedSerde(serde.String, w.Size())
			var got []winCount
			for _, r := range env.sent {
				k, err := ks.Decode(r.Key)
				require.NoError(t, err)
				n, err := serde.Int64.Decode(r.Value)
				require.NoError(t, err)
				got = append(got, winCount{winKey{k.Key, k.Window.Start}, n})
			}
			require.Equal(t, want, got)
		})
	}
}

type winCount struct {
	w winKey
	n int64
}

// A windowed aggregation in the task of a table (a joined stream, not
// re-keyed) keeps its own stream time: a table record stamped far ahead, as
// with the wall clock, closes none of its windows.
func TestWindowedStreamTimeIsTheProcessors(t *testing.T) {
	for _, final := range []bool{false, true} {
		t.Run(fmt.Sprintf("final=%v", final), func(t *testing.T) {
			b := topology.NewBuilder()
			users := topology.Table(b, "users", serde.String, serde.String, "users", topology.InMemory())
			clicks := topology.Stream(b, "clicks", serde.String, serde.String)
			joined := topology.Join(clicks, users, func(c, u string) string { return u }, topology.JoinValueSerde(serde.String))
			w := topology.TumblingWindows(10 * time.Second).Grace(2 * time.Second)
			ws := topology.WindowedBy(joined.GroupByKey(serde.String, serde.String), w)
			if final {
				ws = ws.EmitFinal()
			}
			ws.Count("per-user").ToStream().To("out", topology.TimeWindowedSerde(serde.String, w.Size()), serde.Int64)
			d, _ := start(t, b)
			u := topologytest.NewInputTopic(d, "users", serde.String, serde.String)
			c := topologytest.NewInputTopic(d, "clicks", serde.String, serde.String)
			out := topologytest.NewOutputTopic(d, "out", topology.TimeWindowedSerde(serde.String, w.Size()), serde.Int64)

			require.NoError(t, u.PipeAt("u1", "DE", time.UnixMilli(1_000)))
			require.NoError(t, c.PipeAt("u1", "p", time.UnixMilli(5_000)))
			require.NoError(t, u.PipeAt("u1", "FR", time.UnixMilli(1_000_000_000))) // the wall clock
			require.NoError(t, c.PipeAt("u1", "p", time.UnixMilli(6_000)))          // window [0,10) still open
			require.Zero(t, d.DroppedLate(), "a table record closed the window")
			require.NoError(t, c.PipeAt("u1", "p", time.UnixMilli(12_000))) // closes [0,10)
			require.NoError(t, c.PipeAt("u1", "p", time.UnixMilli(7_000)))
			require.Equal(t, int64(1), d.DroppedLate())
			require.NoError(t, d.Commit())
			kvs, err := out.ReadKeyValues()
			require.NoError(t, err)
			first := topology.Windowed[string]{Key: "u1", Window: topology.Window{Start: 0, End: 10_000}}
			var last int64 = -1
			for _, kv := range kvs {
				if kv.Key == first {
					last = kv.Value
				}
			}
			require.Equal(t, int64(2), last, "window [0,10) counts both clicks before it closed")
		})
	}
}

// A window aggregate stored bare, as stores held it before aggregates
// carried their window's latest record time, is read and extended: its
// first update is stamped with the updating record's time, and the value
// written back carries the window's time from then on.
func TestWindowedCountReadsBareAggregates(t *testing.T) {
	b := topology.NewBuilder()
	topology.WindowedBy(topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String), topology.TumblingWindows(10*time.Second)).
		Count("counts").ToStream().To("out", topology.TimeWindowedSerde(serde.String, 10_000), serde.Int64)
	topo, err := b.Build()
	require.NoError(t, err)
	env := newFakeEnv(0)
	rw, err := env.Store("counts")
	require.NoError(t, err)
	ws, err := statestore.NewWindowStore(rw, statestore.WindowOptions{Retention: 10_000, WindowSize: 10_000})
	require.NoError(t, err)
	bare, err := serde.Int64.Encode(5)
	require.NoError(t, err)
	require.NoError(t, ws.Put([]byte("k"), 0, bare))

	g, err := graph.Of(topo).NewTaskGraph(0, env)
	require.NoError(t, err)
	for _, ms := range []int64{3000, 2000} {
		require.NoError(t, g.Process(graph.InputRecord{Topic: "in", Key: []byte("k"), Value: []byte("v"), Timestamp: time.UnixMilli(ms)}))
	}
	require.Len(t, env.sent, 2)
	var got []string
	for _, rec := range env.sent {
		n, err := serde.Int64.Decode(rec.Value)
		require.NoError(t, err)
		got = append(got, fmt.Sprintf("%d@%d", n, rec.Timestamp.UnixMilli()))
	}
	require.Equal(t, []string{"6@3000", "7@3000"}, got)

	vb, found, err := ws.Get([]byte("k"), 0)
	require.NoError(t, err)
	require.True(t, found)
	agg, ts := statestore.SplitTimestamped(vb)
	require.Equal(t, int64(3000), ts)
	n, err := serde.Int64.Decode(agg)
	require.NoError(t, err)
	require.Equal(t, int64(7), n)
}

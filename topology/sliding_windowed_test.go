package topology_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
	"github.com/eddystreams/eddy/topology/topologytest"
)

// slidingRef is the expected state of a sliding-window aggregation,
// computed by brute force without package topology's window arithmetic.
type slidingRef struct {
	counts     map[winKey]int64
	sums       map[winKey]int64 // sum of the values i+1 of record i
	maxTs      map[winKey]int64
	late       int64
	streamTime int64
}

// slidingReference replays recs: a record is late when stream time is
// past t+d+grace; a window is open while stream time is at most its end
// plus grace; a key's windows are the
// left window [max(0,t-d), ...] of every accepted record and the right
// window starting at t+1 of every accepted record followed by another
// within d; a window exists if it was open when the records first defined
// it, and holds the accepted records in it that arrived while it was open.
func slidingReference(recs []timedRec, d, grace int64) slidingRef {
	ref := slidingRef{counts: map[winKey]int64{}, sums: map[winKey]int64{}, maxTs: map[winKey]int64{}, streamTime: -1}
	type arrival struct{ ts, st, val int64 }
	times := map[string][]int64{}
	arrivals := map[string][]arrival{}
	exists := map[winKey]bool{}
	open := func(start, st int64) bool { return start+d+grace >= st }
	for i, r := range recs {
		ref.streamTime = max(ref.streamTime, r.ts)
		st := ref.streamTime
		if r.ts+1+d+grace <= st {
			ref.late++
			continue
		}
		arrivals[r.key] = append(arrivals[r.key], arrival{r.ts, st, int64(i + 1)})
		ts := append(times[r.key], r.ts)
		slices.Sort(ts)
		times[r.key] = ts
		for j, t := range ts {
			starts := []int64{max(0, t-d)}
			if j+1 < len(ts) && ts[j+1] > t && ts[j+1]-t <= d {
				starts = append(starts, t+1)
			}
			for _, s := range starts {
				k := winKey{r.key, s}
				if _, seen := exists[k]; !seen {
					exists[k] = open(s, st)
				}
			}
		}
	}
	for k, ok := range exists {
		if !ok {
			continue
		}
		for _, a := range arrivals[k.key] {
			if k.start <= a.ts && a.ts <= k.start+d && open(k.start, a.st) {
				ref.counts[k]++
				ref.sums[k] += a.val
				ref.maxTs[k] = max(ref.maxTs[k], a.ts)
			}
		}
	}
	return ref
}

type slidingOutputs struct {
	counts *topologytest.OutputTopic[topology.Windowed[string], int64]
	sums   *topologytest.OutputTopic[topology.Windowed[string], int64]
	squash *topologytest.OutputTopic[topology.Windowed[string], int64]
}

// slidingTopology counts, sums (Reduce) and sums again (SlidingAggregate)
// the int64 values of "in" in sliding windows of d ms, folding kept
// records (FoldKeptRecords) unless derived.
func slidingTopology(t *testing.T, w topology.SlidingWindows, final bool, derived ...bool) (*topologytest.Driver, *topologytest.InputTopic[string, int64], slidingOutputs) {
	t.Helper()
	b := topology.NewBuilder()
	g := topology.Stream(b, "in", serde.String, serde.Int64).GroupByKey(serde.String, serde.Int64)
	ws := topology.SlidingWindowedBy(g, w)
	if len(derived) == 0 || !derived[0] {
		ws = ws.FoldKeptRecords()
	}
	if final {
		ws = ws.EmitFinal()
	}
	wk := topology.TimeWindowedSerde(serde.String, w.MaxDiff())
	ws.Count("counts").ToStream().To("counts-out", wk, serde.Int64)
	ws.Reduce(func(a, v int64) int64 { return a + v }, "sums").ToStream().To("sums-out", wk, serde.Int64)
	topology.SlidingAggregate(ws, func() int64 { return 0 }, func(_ string, v, a int64) int64 { return a + v }, "agg", serde.Int64).
		ToStream().To("agg-out", wk, serde.Int64)
	d, _ := start(t, b)
	return d, topologytest.NewInputTopic(d, "in", serde.String, serde.Int64), slidingOutputs{
		counts: topologytest.NewOutputTopic(d, "counts-out", wk, serde.Int64),
		sums:   topologytest.NewOutputTopic(d, "sums-out", wk, serde.Int64),
		squash: topologytest.NewOutputTopic(d, "agg-out", wk, serde.Int64),
	}
}

func latest(t *testing.T, out *topologytest.OutputTopic[topology.Windowed[string], int64], d int64) map[winKey]int64 {
	t.Helper()
	recs, err := out.ReadRecords()
	require.NoError(t, err)
	got := make(map[winKey]int64)
	for _, r := range recs {
		require.Equal(t, d, r.Key.Window.End-r.Key.Window.Start)
		got[winKey{r.Key.Key, r.Key.Window.Start}] = r.Value
	}
	return got
}

func TestSlidingWindowedMatchesReference(t *testing.T) {
	keys := []string{"a", "b", "c", "d"}
	for _, tc := range []struct {
		name         string
		diff, grace  int64
		step, jitter int64
		n            int
		seed         uint64
	}{
		{"grace", 5_000, 2_000, 300, 9_000, 2000, 1},
		{"no-grace", 2_000, 0, 200, 3_000, 2000, 2},
		{"dense", 3_000, 1_000, 50, 5_000, 1500, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := topology.NewSlidingWindows(time.Duration(tc.diff) * time.Millisecond).Grace(time.Duration(tc.grace) * time.Millisecond)
			recs := outOfOrder(tc.seed, tc.n, keys, tc.step, tc.jitter)
			ref := slidingReference(recs, tc.diff, tc.grace)
			require.Positive(t, ref.late, "the input must contain late records")
			d, in, out := slidingTopology(t, w, false)
			for i, r := range recs {
				require.NoError(t, in.PipeAt(r.key, int64(i+1), time.UnixMilli(r.ts)))
			}
			require.Equal(t, ref.counts, latest(t, out.counts, tc.diff))
			require.Equal(t, ref.sums, latest(t, out.sums, tc.diff))
			require.Equal(t, ref.sums, latest(t, out.squash, tc.diff))
			// Three aggregations, each dropping the same records.
			require.Equal(t, 3*ref.late, d.DroppedLate())
		})
	}
}

// TestSlidingWindowsOfAgreesWithReference checks the package's reference
// model against the test's: with no record late or partly late, the
// windows are exactly WindowsOf of each key's record times.
func TestSlidingWindowsOfAgreesWithReference(t *testing.T) {
	const diff = 4_000
	w := topology.NewSlidingWindows(diff * time.Millisecond).Grace(time.Hour)
	recs := outOfOrder(9, 1000, []string{"a", "b"}, 400, 5_000)
	ref := slidingReference(recs, diff, time.Hour.Milliseconds())
	require.Zero(t, ref.late)
	times := map[string][]int64{}
	for _, r := range recs {
		times[r.key] = append(times[r.key], r.ts)
	}
	want := map[winKey]int64{}
	for k, ts := range times {
		for _, win := range w.WindowsOf(ts) {
			for _, t := range ts {
				if w.Contains(win, t) {
					want[winKey{k, win.Start}]++
				}
			}
		}
	}
	require.Equal(t, want, ref.counts)

	_, in, out := slidingTopology(t, w, false)
	for i, r := range recs {
		require.NoError(t, in.PipeAt(r.key, int64(i+1), time.UnixMilli(r.ts)))
	}
	require.Equal(t, want, latest(t, out.counts, diff))
}

func TestSlidingWindowedKIP450Example(t *testing.T) {
	// Records at 10, 13 and, out of order, 11 with d=5: windows
	// [5,10], [11,16] (right of 10), [8,13], [6,11], [12,17] (right of 11).
	w := topology.NewSlidingWindows(5 * time.Millisecond).Grace(time.Second)
	_, in, out := slidingTopology(t, w, false)
	require.NoError(t, in.PipeAt("k", 1, time.UnixMilli(10)))
	require.NoError(t, in.PipeAt("k", 2, time.UnixMilli(13)))
	require.NoError(t, in.PipeAt("k", 4, time.UnixMilli(11)))
	kvs, err := out.sums.ReadKeyValues()
	require.NoError(t, err)
	win := func(s int64) topology.Windowed[string] {
		return topology.Windowed[string]{Key: "k", Window: topology.Window{Start: s, End: s + 5}}
	}
	require.Equal(t, []topology.KeyValue[topology.Windowed[string], int64]{
		{Key: win(5), Value: 1},  // left window of 10
		{Key: win(8), Value: 3},  // left window of 13: 10 and 13
		{Key: win(11), Value: 2}, // right window of 10: 13
		{Key: win(8), Value: 7},  // 11 updates the windows holding it
		{Key: win(11), Value: 6},
		{Key: win(6), Value: 5},  // left window of 11: 10 and 11
		{Key: win(12), Value: 2}, // right window of 11: 13
	}, kvs)
}

func TestSlidingWindowedLateRecordDroppedAndCounted(t *testing.T) {
	w := topology.NewSlidingWindows(10 * time.Second).Grace(2 * time.Second)
	d, in, out := slidingTopology(t, w, false)
	require.NoError(t, in.PipeAt("k", 1, time.UnixMilli(5_000)))
	require.NoError(t, in.PipeAt("k", 1, time.UnixMilli(20_000)))
	// Stream time 20 s: [9000,19000], the last window 9 s can lie in,
	// closes at 21 001, so 9 s is accepted, though no window holding it is
	// open.
	require.NoError(t, in.PipeAt("k", 1, time.UnixMilli(9_000)))
	require.Zero(t, d.DroppedLate())
	require.NoError(t, in.PipeAt("k", 1, time.UnixMilli(22_000)))
	// [7000,17000] closed at 19 001.
	require.NoError(t, in.PipeAt("k", 1, time.UnixMilli(7_000)))
	require.Equal(t, int64(3), d.DroppedLate()) // once per aggregation
	require.Equal(t, map[winKey]int64{
		{"k", 0}: 1, {"k", 10_000}: 1, {"k", 12_000}: 2, {"k", 20_001}: 1,
	}, latest(t, out.counts, 10_000))
}

func TestSlidingWindowedEmitFinalOnePerClosedWindow(t *testing.T) {
	const diff, grace = 4_000, 1_500
	w := topology.NewSlidingWindows(diff * time.Millisecond).Grace(grace * time.Millisecond)
	recs := outOfOrder(5, 1500, []string{"a", "b", "c"}, 200, 7_000)
	ref := slidingReference(recs, diff, grace)
	require.Positive(t, ref.late)
	d, in, out := slidingTopology(t, w, true)
	for i, r := range recs {
		require.NoError(t, in.PipeAt(r.key, int64(i+1), time.UnixMilli(r.ts)))
	}
	check := func(seen map[winKey]bool, outTopic *topologytest.OutputTopic[topology.Windowed[string], int64], want map[winKey]int64, st int64) {
		t.Helper()
		got, err := outTopic.ReadRecords()
		require.NoError(t, err)
		for _, r := range got {
			k := winKey{r.Key.Key, r.Key.Window.Start}
			require.False(t, seen[k], "window %v emitted twice", k)
			seen[k] = true
			require.Greater(t, st, k.start+diff+grace, "window %v emitted before it closed", k)
			require.Equal(t, want[k], r.Value, "window %v", k)
			require.Equal(t, ref.maxTs[k], r.Timestamp.UnixMilli(), "timestamp of window %v", k)
		}
	}
	seenCounts, seenSums := map[winKey]bool{}, map[winKey]bool{}
	check(seenCounts, out.counts, ref.counts, ref.streamTime)
	check(seenSums, out.sums, ref.sums, ref.streamTime)
	closed := 0
	for k := range ref.counts {
		if ref.streamTime > k.start+diff+grace {
			closed++
			require.True(t, seenCounts[k], "closed window %v not emitted", k)
		}
	}
	require.Len(t, seenCounts, closed)
	require.Len(t, seenSums, closed)
	require.Less(t, closed, len(ref.counts), "some windows must still be open")
	require.Equal(t, 3*ref.late, d.DroppedLate())

	// A record far ahead closes every window: each is emitted once.
	far := ref.streamTime + 10*diff
	require.NoError(t, in.PipeAt("z", 0, time.UnixMilli(far)))
	check(seenCounts, out.counts, ref.counts, far)
	require.Len(t, seenCounts, len(ref.counts))
}

// TestSlidingDerivedMatchesReference: without FoldKeptRecords, windows
// derived from their neighbours, as Kafka Streams derives them, hold the
// same records as the reference's, so counts and sums agree, when records
// arrive in order or no window closes before its records arrive. (When a
// record's window has closed, its neighbours may lack what a later record
// derives from: with MaxDiff 10 and grace 2, records at 26, 17, 14 never
// create 14's right window [15,25], as 17's left window [7,17] had closed.
// FoldKeptRecords creates it.) Besides the late records, the aggregation
// counts those left out of a closed window they lie in.
func TestSlidingDerivedMatchesReference(t *testing.T) {
	keys := []string{"a", "b", "c", "d"}
	for _, tc := range []struct {
		name         string
		diff, grace  int64
		step, jitter int64
		n            int
		seed         uint64
	}{
		{"in-order", 5_000, 0, 300, 0, 2000, 1},
		{"open", 5_000, 3_600_000, 300, 9_000, 2000, 1},
		{"early", 50_000, 3_600_000, 30, 20_000, 1500, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := topology.NewSlidingWindows(time.Duration(tc.diff) * time.Millisecond).Grace(time.Duration(tc.grace) * time.Millisecond)
			recs := outOfOrder(tc.seed, tc.n, keys, tc.step, tc.jitter)
			ref := slidingReference(recs, tc.diff, tc.grace)
			d, in, out := slidingTopology(t, w, false, true)
			for i, r := range recs {
				require.NoError(t, in.PipeAt(r.key, int64(i+1), time.UnixMilli(r.ts)))
			}
			require.Equal(t, ref.counts, latest(t, out.counts, tc.diff))
			require.Equal(t, ref.sums, latest(t, out.sums, tc.diff))
			require.Equal(t, ref.sums, latest(t, out.squash, tc.diff))
			require.GreaterOrEqual(t, d.DroppedLate(), 3*ref.late)
		})
	}
}

// TestSlidingDerivedMissesWhatFoldingFinds pins the case above: Kafka
// Streams' derivation never creates [15,25]; FoldKeptRecords does.
func TestSlidingDerivedMissesWhatFoldingFinds(t *testing.T) {
	w := topology.NewSlidingWindows(10 * time.Millisecond).Grace(2 * time.Millisecond)
	for _, derived := range []bool{true, false} {
		_, in, out := slidingTopology(t, w, false, derived)
		for i, ts := range []int64{26, 17, 14} {
			require.NoError(t, in.PipeAt("k", int64(i+1), time.UnixMilli(ts)))
		}
		want := map[winKey]int64{{"k", 16}: 2, {"k", 18}: 1}
		if !derived {
			want[winKey{"k", 15}] = 1
		}
		require.Equal(t, want, latest(t, out.counts, 10), "derived %v", derived)
	}
}

// A sliding aggregation whose adder changes its aggregate in place sends
// each update's old value as it was before the record, for derived and
// folded windows alike, and a record's right window copies the window
// after it as it was before the record. A grouping subtracts every old
// value's size and adds every new one's: [0,10] +1, [11,21] +1, [5,15]
// 2-1 (derived from {x}), then [11,21] 2-1, [5,15] 3-2, [2,12] 2-1
// (derived from {x}) and [13,23] +1, the copy {y} with a null old value.
func TestSlidingOldValuesSurviveInPlaceAdders(t *testing.T) {
	for _, fold := range []bool{false, true} {
		t.Run(map[bool]string{false: "derived", true: "fold"}[fold], func(t *testing.T) {
			b := topology.NewBuilder()
			g := topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
			sw := topology.SlidingWindowedBy(g, topology.NewSlidingWindows(10*time.Millisecond).Grace(time.Second))
			if fold {
				sw = sw.FoldKeptRecords()
			}
			seen := topology.SlidingAggregate(sw, func() map[string]int { return map[string]int{} },
				func(_ string, v string, agg map[string]int) map[string]int { agg[v]++; return agg },
				"seen", serde.JSON[map[string]int]())
			size := func(m map[string]int) int64 {
				n := 0
				for _, c := range m {
					n += c
				}
				return int64(n)
			}
			grouped := topology.GroupTableBy(seen, func(k topology.Windowed[string], m map[string]int) (string, int64) { return k.Key, size(m) },
				"by-key", serde.String, serde.Int64)
			topology.TableAggregate(grouped, func() int64 { return 0 },
				func(_ string, n, sum int64) int64 { return sum + n },
				func(_ string, n, sum int64) int64 { return sum - n },
				"sizes", serde.Int64).ToStream().To("out", serde.String, serde.Int64)
			d, _ := start(t, b)
			in := strIn(d, "in")
			for _, r := range []struct {
				v  string
				ts int64
			}{{"x", 10}, {"y", 15}, {"z", 12}} {
				require.NoError(t, in.PipeAt("A", r.v, time.UnixMilli(r.ts)))
			}
			kvs := readKVs(t, d, "out", serde.String, serde.Int64)
			require.NotEmpty(t, kvs)
			require.Equal(t, int64(7), kvs[len(kvs)-1].Value)
		})
	}
}

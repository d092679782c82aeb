package topology

import (
	"encoding/hex"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eddystreams/eddy/serde"
	"github.com/stretchr/testify/require"
)

const ms = time.Millisecond

func TestTimeWindowsFor(t *testing.T) {
	tumbling := TumblingWindows(10 * ms)
	hopping := HoppingWindows(10*ms, 3*ms)
	cases := []struct {
		name string
		w    TimeWindows
		t    int64
		want []Window
	}{
		{"tumbling at 0", tumbling, 0, []Window{{0, 10}}},
		{"tumbling last ms of a window", tumbling, 9, []Window{{0, 10}}},
		{"tumbling end is exclusive", tumbling, 10, []Window{{10, 20}}},
		{"tumbling far", tumbling, 12345, []Window{{12340, 12350}}},
		{"negative time", tumbling, -1, nil},
		{"hopping near 0 starts at 0", hopping, 5, []Window{{0, 10}, {3, 13}}},
		{"hopping at 0", hopping, 0, []Window{{0, 10}}},
		{"hopping end exclusive", hopping, 10, []Window{{3, 13}, {6, 16}, {9, 19}}},
		{"hopping on a start", hopping, 12, []Window{{3, 13}, {6, 16}, {9, 19}, {12, 22}}},
		{"hopping off a start", hopping, 14, []Window{{6, 16}, {9, 19}, {12, 22}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.w.WindowsFor(tc.t))
		})
	}
}

// TestTimeWindowsForOracle checks assignment against the definition: every
// window starting at a non-negative multiple of advance that contains t.
func TestTimeWindowsForOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		size := 1 + r.Int64N(50)
		adv := 1 + r.Int64N(size)
		w := HoppingWindows(time.Duration(size)*ms, time.Duration(adv)*ms)
		ts := r.Int64N(500)
		var want []Window
		for s := int64(0); s <= ts; s += adv {
			if ts < s+size {
				want = append(want, Window{s, s + size})
			}
		}
		require.Equal(t, want, w.WindowsFor(ts), "size %d advance %d t %d", size, adv, ts)
	}
}

func TestTimeWindowsCloseAndLateness(t *testing.T) {
	w := TumblingWindows(10 * ms).Grace(5 * ms)
	win := Window{0, 10}
	require.Equal(t, int64(15), w.CloseTime(win))
	require.False(t, w.IsClosed(win, 14))
	require.True(t, w.IsClosed(win, 15))
	require.False(t, w.IsLate(9, 14), "out of order within grace")
	require.True(t, w.IsLate(9, 15), "late beyond grace")
	require.False(t, w.IsLate(10, 15), "the next window is open")
	require.True(t, w.IsLate(-1, 0), "a negative time has no window")
	require.Equal(t, int64(15), w.MinRetention())

	// Hopping: late only once the last window holding t closes.
	h := HoppingWindows(10*ms, 5*ms).Grace(2 * ms)
	// 7 is in [0,10) and [5,15); the latter closes at 17.
	require.False(t, h.IsLate(7, 16))
	require.True(t, h.IsLate(7, 17))
	require.True(t, h.IsClosed(Window{0, 10}, 12))

	// A window at the end of time never closes by overflow.
	require.False(t, w.IsClosed(Window{math.MaxInt64 - 3, math.MaxInt64}, math.MaxInt64-1))
}

func TestWindowConstructorsRefuseNonsense(t *testing.T) {
	require.Panics(t, func() { TumblingWindows(0) })
	require.Panics(t, func() { HoppingWindows(10*ms, 11*ms) })
	require.Panics(t, func() { HoppingWindows(10*ms, 0) })
	require.Panics(t, func() { NewSlidingWindows(0) })
	require.Panics(t, func() { NewSessionWindows(0) })
	require.Panics(t, func() { TumblingWindows(ms).Grace(-ms) })
}

func TestSlidingWindowEdges(t *testing.T) {
	w := NewSlidingWindows(10 * ms).Grace(5 * ms)
	require.Equal(t, Window{15, 25}, w.LeftWindow(25))
	require.Equal(t, Window{0, 10}, w.LeftWindow(10), "the first regular left window")
	require.Equal(t, Window{0, 10}, w.LeftWindow(3), "early records share [0, diff]")
	require.Equal(t, Window{26, 36}, w.RightWindow(25))
	require.True(t, w.Contains(Window{15, 25}, 15), "both ends are inside")
	require.True(t, w.Contains(Window{15, 25}, 25))
	require.False(t, w.Contains(Window{15, 25}, 26))
	from, to := w.SearchRange(25)
	require.Equal(t, [2]int64{5, 26}, [2]int64{from, to})
	from, _ = w.SearchRange(4)
	require.Equal(t, int64(0), from)

	// A window [s, e] accepts records while stream time <= e + grace.
	require.False(t, w.IsClosed(Window{15, 25}, 30))
	require.True(t, w.IsClosed(Window{15, 25}, 31))
	// A record at 25 is dropped once [25,35], the last window holding it,
	// has closed.
	require.False(t, w.IsLate(25, 40), "out of order within grace")
	require.True(t, w.IsLate(25, 41), "late beyond grace")
	require.Equal(t, int64(16), w.MinRetention())
}

func TestSlidingWindowsOf(t *testing.T) {
	w := NewSlidingWindows(10 * ms)
	require.Equal(t, []Window{{0, 10}, {2, 12}, {6, 16}, {20, 30}}, w.WindowsOf([]int64{12, 5, 30}))
	require.Equal(t, []Window{{0, 10}, {4, 14}}, w.WindowsOf([]int64{8, 3, 3}), "duplicates and early records")
	require.Empty(t, w.WindowsOf(nil))
}

// TestSlidingWindowsOfOracle checks the defining property of sliding
// windows: the windows of a set of records hold exactly the distinct
// non-empty record sets that any window [s, s+diff] with s >= 0 holds, each
// once.
func TestSlidingWindowsOfOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 500 {
		diff := 1 + r.Int64N(20)
		w := NewSlidingWindows(time.Duration(diff) * ms)
		ts := make([]int64, 1+r.IntN(8))
		for i := range ts {
			ts[i] = r.Int64N(80)
		}
		contents := func(win Window) string {
			var b strings.Builder
			for _, x := range slices.Compact(slices.Sorted(slices.Values(ts))) {
				if w.Contains(win, x) {
					b.WriteString(string(rune('A' + x)))
				}
			}
			return b.String()
		}
		want := map[string]bool{}
		for s := int64(0); s <= 80; s++ {
			if c := contents(Window{s, s + diff}); c != "" {
				want[c] = true
			}
		}
		got := map[string]bool{}
		for _, win := range w.WindowsOf(ts) {
			require.Equal(t, diff, win.End-win.Start)
			c := contents(win)
			require.NotEmpty(t, c, "window %v of %v is empty", win, ts)
			require.False(t, got[c], "two windows hold %q (diff %d, times %v)", c, diff, ts)
			got[c] = true
		}
		require.Equal(t, want, got, "diff %d times %v", diff, ts)
	}
}

func TestSessionWindowEdges(t *testing.T) {
	w := NewSessionWindows(10 * ms).Grace(5 * ms)
	e, l := w.SearchBounds(50)
	require.Equal(t, [2]int64{40, 60}, [2]int64{e, l})
	require.True(t, w.Joins(Window{30, 40}, 50), "a gap of exactly the inactivity gap joins")
	require.False(t, w.Joins(Window{30, 39}, 50))
	require.True(t, w.Joins(Window{60, 70}, 50))
	require.False(t, w.Joins(Window{61, 70}, 50))
	require.True(t, w.Joins(Window{45, 55}, 50), "inside a session")
	require.Equal(t, Window{50, 50}, w.Merge(50, nil))
	require.Equal(t, Window{30, 70}, w.Merge(50, []Window{{30, 40}, {60, 70}}), "a bridging record merges two sessions")
	require.Equal(t, Window{45, 55}, w.Merge(50, []Window{{45, 55}}))

	// A session [30,40] accepts records while stream time <= end + gap +
	// grace.
	require.Equal(t, int64(56), w.CloseTime(Window{30, 40}))
	require.False(t, w.IsClosed(Window{30, 40}, 55))
	require.True(t, w.IsClosed(Window{30, 40}, 56))
	require.Equal(t, int64(15), w.MinRetention())
}

// TestSessionMergingOracle feeds records in random order through
// SearchBounds/Joins/Merge over a list standing in for the session store,
// and compares the sessions with those of the sorted records split at gaps
// wider than the inactivity gap.
func TestSessionMergingOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 500 {
		gap := 1 + r.Int64N(10)
		w := NewSessionWindows(time.Duration(gap) * ms)
		ts := make([]int64, 1+r.IntN(15))
		for i := range ts {
			ts[i] = r.Int64N(100)
		}
		var store []Window
		for _, x := range ts {
			var joined, rest []Window
			for _, s := range store {
				if w.Joins(s, x) {
					joined = append(joined, s)
				} else {
					rest = append(rest, s)
				}
			}
			store = append(rest, w.Merge(x, joined))
		}
		slices.SortFunc(store, func(a, b Window) int { return cmpInt64(a.Start, b.Start) })

		sorted := slices.Sorted(slices.Values(ts))
		var want []Window
		for _, x := range sorted {
			if n := len(want); n > 0 && x-want[n-1].End <= gap {
				want[n-1].End = x
				continue
			}
			want = append(want, Window{x, x})
		}
		require.Equal(t, want, store, "gap %d times %v", gap, ts)
	}
}

func TestTimeWindowedSerdeBytes(t *testing.T) {
	s := TimeWindowedSerde(serde.String, 500)
	b, err := s.Encode(Windowed[string]{Key: "ab", Window: Window{1000, 1500}})
	require.NoError(t, err)
	require.Equal(t, "616200000000000003e8", hex.EncodeToString(b))
	got, err := s.Decode(b)
	require.NoError(t, err)
	require.Equal(t, Windowed[string]{Key: "ab", Window: Window{1000, 1500}}, got)

	_, err = s.Decode([]byte{1, 2, 3})
	require.Error(t, err)
	// An empty inner key is allowed.
	got, err = s.Decode(make([]byte, 8))
	require.NoError(t, err)
	require.Equal(t, Windowed[string]{Window: Window{0, 500}}, got)
	// The end saturates rather than wrapping.
	got, err = TimeWindowedSerde(serde.String, 10).Decode([]byte{0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	require.NoError(t, err)
	require.Equal(t, int64(math.MaxInt64), got.Window.End)
}

func TestSessionWindowedSerdeBytes(t *testing.T) {
	s := SessionWindowedSerde(serde.String)
	b, err := s.Encode(Windowed[string]{Key: "ab", Window: Window{1000, 1500}})
	require.NoError(t, err)
	require.Equal(t, "6162"+"00000000000005dc"+"00000000000003e8", hex.EncodeToString(b))
	got, err := s.Decode(b)
	require.NoError(t, err)
	require.Equal(t, Windowed[string]{Key: "ab", Window: Window{1000, 1500}}, got)
	_, err = s.Decode(make([]byte, 15))
	require.Error(t, err)

	// Inner serde errors come through.
	_, err = SessionWindowedSerde(serde.Int64).Decode(make([]byte, 17))
	require.Error(t, err)
}

func FuzzTimeWindowedSerde(f *testing.F) {
	f.Add([]byte("ab"), int64(1000), int64(500))
	f.Add([]byte{}, int64(0), int64(1))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0}, int64(math.MaxInt64), int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, key []byte, start, size int64) {
		if size < 0 {
			size = -(size + 1)
		}
		s := TimeWindowedSerde(serde.Bytes, size)
		in := Windowed[[]byte]{Key: key, Window: Window{start, addSat(start, size)}}
		b, err := s.Encode(in)
		require.NoError(t, err)
		require.Len(t, b, len(key)+8)
		out, err := s.Decode(b)
		require.NoError(t, err)
		require.Equal(t, string(key), string(out.Key))
		require.Equal(t, in.Window, out.Window)
		// Decoding arbitrary bytes never panics and re-encodes to them.
		if back, err := s.Decode(key); err == nil {
			again, err := s.Encode(back)
			require.NoError(t, err)
			require.Equal(t, key, again)
		}
	})
}

func FuzzSessionWindowedSerde(f *testing.F) {
	f.Add([]byte("ab"), int64(1000), int64(1500))
	f.Add([]byte{}, int64(-1), int64(0))
	f.Fuzz(func(t *testing.T, key []byte, start, end int64) {
		s := SessionWindowedSerde(serde.Bytes)
		in := Windowed[[]byte]{Key: key, Window: Window{start, end}}
		b, err := s.Encode(in)
		require.NoError(t, err)
		require.Len(t, b, len(key)+16)
		out, err := s.Decode(b)
		require.NoError(t, err)
		require.Equal(t, string(key), string(out.Key))
		require.Equal(t, in.Window, out.Window)
		if back, err := s.Decode(key); err == nil {
			again, err := s.Encode(back)
			require.NoError(t, err)
			require.Equal(t, key, again)
		}
	})
}

// A window's pending update is found by the cache slot of its entry; a
// slot whose entry is not the one the update was made for (the cache and
// the buffer fell out of step) adds an update rather than overwrite
// another window's; windows without a slot are found by key and start;
// a flush forwards every update in first-update order, across chunks.
func TestWindowUpdatesBySlot(t *testing.T) {
	var got []string
	task := &taskGraph{buffered: true}
	sink := &nodeInstance{node: &node{kind: kindProcessor}, task: task, fn: func(_ *nodeInstance, r record) error {
		w := r.key.(Windowed[string])
		got = append(got, w.Key+"@"+strconv.FormatInt(w.Window.Start, 10)+"="+strconv.FormatInt(r.value.(int64), 10))
		return nil
	}}
	c := &nodeInstance{node: &node{kind: kindProcessor}, task: task, children: []*nodeInstance{sink}}
	u := windowUpdates[string, int64]{held: chunked[windowUpdate[string, int64]]{pool: new(sync.Pool)}}
	// entries are the cache's copies of window keys: distinct allocations.
	entry := func(k string, start int64) []byte { return []byte(k + "/" + strconv.FormatInt(start, 10)) }
	a0, b0, a1 := entry("a", 0), entry("b", 0), entry("a", 10)
	add := func(slot int, stored []byte, k string, start, v int64) {
		u.add(slot, stored, []byte(k), k, Window{Start: start, End: start + 10}, v, nil, time.UnixMilli(start), nil)
	}
	add(0, a0, "a", 0, 1)
	add(1, b0, "b", 0, 1)
	add(0, a0, "a", 0, 2)
	add(2, a1, "a", 10, 1)
	// Slot 1 now names another entry: a new update, b's stays.
	other := entry("c", 0)
	add(1, other, "c", 0, 1)
	add(1, other, "c", 0, 2)
	// No slot: by key and start.
	add(-1, nil, "d", 0, 1)
	add(-1, nil, "d", 10, 1)
	add(-1, nil, "d", 0, 2)
	require.NoError(t, u.flush(c))
	require.Equal(t, []string{"a@0=2", "b@0=1", "a@10=1", "c@0=2", "d@0=2", "d@10=1"}, got)

	// After a flush the slots start over; an update made before it is
	// never found again.
	got = nil
	add(0, b0, "b", 0, 5)
	require.NoError(t, u.flush(c))
	require.Equal(t, []string{"b@0=5"}, got)

	// Many windows fill several chunks; each keeps its latest value.
	got = nil
	n := 3*chunkLen + 7
	stored := make([][]byte, n)
	for i := range n {
		stored[i] = entry("k", int64(i))
		add(i, stored[i], "k", int64(i), 1)
	}
	for i := n - 1; i >= 0; i -= 2 {
		add(i, stored[i], "k", int64(i), 2)
	}
	require.NoError(t, u.flush(c))
	require.Len(t, got, n)
	for i, s := range got {
		want := int64(1)
		if (n-1-i)%2 == 0 {
			want = 2
		}
		require.Equal(t, "k@"+strconv.Itoa(i)+"="+strconv.FormatInt(want, 10), s)
	}

	// Discard drops everything pending.
	got = nil
	add(0, a0, "a", 0, 9)
	add(-1, nil, "d", 0, 9)
	u.discard()
	add(0, a0, "a", 0, 1)
	require.NoError(t, u.flush(c))
	require.Equal(t, []string{"a@0=1"}, got)
}

package statestore

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The window and session store conformance suite, run on every backend.
func TestWindowConformance(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			t.Run("WindowBasics", func(t *testing.T) { testWindowBasics(t, b) })
			t.Run("WindowRandomAgainstModel", func(t *testing.T) { testWindowRandomModel(t, b) })
			t.Run("WindowRetention", func(t *testing.T) { testWindowRetention(t, b) })
			t.Run("RestoreSkipsExpired", func(t *testing.T) { testRestoreSkipsExpired(t, b) })
			t.Run("SegmentIntervalChanged", func(t *testing.T) { testIntervalChanged(t, b) })
			t.Run("SegmentedReset", func(t *testing.T) { testSegmentedReset(t, b) })
			t.Run("SessionBasics", func(t *testing.T) { testSessionBasics(t, b) })
			t.Run("SessionMerging", func(t *testing.T) { testSessionMerging(t, b) })
			t.Run("SessionRetention", func(t *testing.T) { testSessionRetention(t, b) })
			t.Run("WindowUpdate", func(t *testing.T) { testWindowUpdate(t, b) })
			t.Run("GetNewerThanWritten", func(t *testing.T) { testGetNewerThanWritten(t, b) })
			if b.reopen != nil {
				t.Run("WindowReopen", func(t *testing.T) { testWindowReopen(t, b) })
				t.Run("ReopenedGetsLatestSegment", func(t *testing.T) { testReopenedGetsLatestSegment(t, b) })
			}
		})
	}
}

type wrow struct {
	k          string
	start, end int64
	v          string
}

func (r wrow) String() string { return fmt.Sprintf("%q[%d,%d]=%s", r.k, r.start, r.end, r.v) }

// collectW returns a function that drains a window iterator, so a call can
// take a fetch's two results directly.
func collectW(t *testing.T) func(*WindowIterator, error) []wrow {
	return func(it *WindowIterator, err error) []wrow { return drainW(t, it, err) }
}

func drainW(t *testing.T, it *WindowIterator, err error) []wrow {
	t.Helper()
	require.NoError(t, err)
	var out []wrow
	for it.Next() {
		out = append(out, wrow{string(it.Key()), it.Start(), it.End(), string(it.Value())})
	}
	require.NoError(t, it.Err())
	require.NoError(t, it.Close())
	return out
}

func reversed[T any](s []T) []T {
	out := slices.Clone(s)
	slices.Reverse(out)
	return out
}

// openSegmented opens a SegmentedStore on a fresh store of b.
func openSegmented(t *testing.T, b backend, opts WindowOptions) *SegmentedStore {
	t.Helper()
	s, err := NewSegmentedStore(b.open(t), opts)
	require.NoError(t, err)
	return s
}

func openWindows(t *testing.T, rw ReadWriter, opts WindowOptions) *WindowStore {
	t.Helper()
	w, err := NewWindowStore(rw, opts)
	require.NoError(t, err)
	return w
}

func wput(t *testing.T, w *WindowStore, k string, start int64, v string) {
	t.Helper()
	require.NoError(t, w.Put([]byte(k), start, []byte(v)))
}

func testWindowBasics(t *testing.T, b backend) {
	opts := WindowOptions{Retention: 1000, SegmentInterval: 10, WindowSize: 5}
	w := openWindows(t, openSegmented(t, b, opts), opts)
	wput(t, w, "a", 0, "a0")
	wput(t, w, "a", 7, "a7")
	wput(t, w, "a", 10, "a10")
	wput(t, w, "a", 25, "a25")
	// Keys that share a's bytes, with zero bytes, 0xff and empty: none may
	// leak into a's windows, and they sort in byte order.
	for _, k := range []string{"b", "a\x00", "", "a\x00\x01", "a\xff", "a\x01"} {
		wput(t, w, k, 10, "v"+k)
	}

	v, found, err := w.Get([]byte("a"), 10)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "a10", string(v))
	_, found, err = w.Get([]byte("a"), 11)
	require.NoError(t, err)
	require.False(t, found)

	all := []wrow{{"a", 0, 5, "a0"}, {"a", 7, 12, "a7"}, {"a", 10, 15, "a10"}, {"a", 25, 30, "a25"}}
	require.Equal(t, all, collectW(t)(w.Fetch([]byte("a"), 0, 100)))
	require.Equal(t, all, collectW(t)(w.Fetch([]byte("a"), 0, math.MaxInt64)))
	require.Equal(t, all[1:3], collectW(t)(w.Fetch([]byte("a"), 7, 10)), "both bounds included")
	require.Empty(t, collectW(t)(w.Fetch([]byte("a"), 8, 9)))
	require.Empty(t, collectW(t)(w.Fetch([]byte("a"), 10, 7)))
	require.Equal(t, reversed(all), collectW(t)(w.FetchBackward([]byte("a"), 0, 100)))
	require.Equal(t, []wrow{{"a\x00", 10, 15, "va\x00"}}, collectW(t)(w.Fetch([]byte("a\x00"), 0, 100)))
	require.Equal(t, []wrow{{"", 10, 15, "v"}}, collectW(t)(w.Fetch([]byte{}, 0, 100)))

	seg1 := []wrow{{"", 10, 15, "v"}, {"a", 10, 15, "a10"}, {"a\x00", 10, 15, "va\x00"}, {"a\x00\x01", 10, 15, "va\x00\x01"},
		{"a\x01", 10, 15, "va\x01"}, {"a\xff", 10, 15, "va\xff"}, {"b", 10, 15, "vb"}}
	require.Equal(t, seg1, collectW(t)(w.FetchAll(10, 10)))
	everything := append(append([]wrow{seg1[0]}, all...), seg1[2:]...)
	require.Equal(t, everything, collectW(t)(w.FetchAll(0, 100)), "by key, then start")
	require.Equal(t, reversed(everything), collectW(t)(w.FetchAllBackward(0, 100)))
	require.Equal(t, []wrow{all[0], all[1], all[2], all[3], seg1[2], seg1[3]},
		collectW(t)(w.FetchRange([]byte("a"), []byte("a\x00\x01"), 0, 100)), "key bounds included, ordered by key")
	require.Equal(t, seg1[4:], collectW(t)(w.FetchRange([]byte("a\x01"), nil, 10, 19)))

	require.NoError(t, w.Remove([]byte("a"), 7))
	require.Equal(t, []wrow{all[0], all[2], all[3]}, collectW(t)(w.Fetch([]byte("a"), 0, 100)))
	require.ErrorIs(t, w.Put([]byte("a"), -1, []byte("x")), ErrNegativeTime)

	obs, err := w.ObservedTime()
	require.NoError(t, err)
	require.Equal(t, int64(25), obs)

	// A second store over the same data finds it, and its time.
	w2 := openWindows(t, w.t.rw, opts)
	require.Equal(t, all[:1], collectW(t)(w2.Fetch([]byte("a"), 0, 0)))
	obs, err = w2.ObservedTime()
	require.NoError(t, err)
	require.Equal(t, int64(25), obs, "the segmented store's observed time")
}

// testWindowRandomModel runs random puts and removes on a SegmentedStore,
// recording a position now and then, and compares every kind of fetch with
// a model. (internal/cache runs the same store under the record cache.)
func testWindowRandomModel(t *testing.T, b backend) {
	opts := WindowOptions{Retention: 1 << 40, SegmentInterval: 17, WindowSize: 3}
	seg := openSegmented(t, b, opts)
	w := openWindows(t, seg, opts)
	r := rand.New(rand.NewPCG(11, 12))
	keys := []string{"", "a", "a\x00", "a\x00\x00", "ab", "b", "\xff", "\x00"}
	type mk struct {
		k string
		t int64
	}
	model := map[mk]string{}
	pos := int64(0)
	for i := range 3000 {
		k, ts := keys[r.IntN(len(keys))], r.Int64N(200)
		if r.IntN(4) == 0 {
			require.NoError(t, w.Remove([]byte(k), ts))
			delete(model, mk{k, ts})
		} else {
			v := fmt.Sprint(i)
			wput(t, w, k, ts, v)
			model[mk{k, ts}] = v
		}
		if r.IntN(100) == 0 {
			pos++
			require.NoError(t, seg.Write(nil, pos))
		}
	}
	p, err := seg.Position()
	require.NoError(t, err)
	require.Equal(t, pos, p)

	// expect lists the model's windows in [from, to] for keys in
	// [kf, kt], in the store's order: key, start.
	expect := func(kf, kt *string, from, to int64) []wrow {
		var out []wrow
		for m, v := range model {
			if m.t < from || m.t > to || (kf != nil && m.k < *kf) || (kt != nil && m.k > *kt) {
				continue
			}
			out = append(out, wrow{m.k, m.t, m.t + 3, v})
		}
		slices.SortFunc(out, func(a, b wrow) int {
			if c := strings.Compare(a.k, b.k); c != 0 {
				return c
			}
			return int(a.start - b.start)
		})
		return out
	}
	for range 200 {
		from := r.Int64N(220) - 10
		to := from + r.Int64N(120)
		k := keys[r.IntN(len(keys))]
		k2 := keys[r.IntN(len(keys))]
		require.Equal(t, expect(&k, &k, from, to), collectW(t)(w.Fetch([]byte(k), from, to)), "fetch %q [%d,%d]", k, from, to)
		require.Equal(t, reversed(expect(&k, &k, from, to)), collectW(t)(w.FetchBackward([]byte(k), from, to)))
		require.Equal(t, expect(nil, nil, from, to), collectW(t)(w.FetchAll(from, to)))
		require.Equal(t, reversed(expect(nil, nil, from, to)), collectW(t)(w.FetchAllBackward(from, to)))
		require.Equal(t, expect(&k, &k2, from, to), collectW(t)(w.FetchRange([]byte(k), []byte(k2), from, to)), "range %q..%q", k, k2)
	}
}

// rawTimes lists the times of every key in the store, by segment (the
// inner store's order).
func rawTimes(t *testing.T, s *SegmentedStore) []int64 {
	t.Helper()
	it, err := s.Inner().All()
	require.NoError(t, err)
	var out []int64
	for it.Next() {
		require.Greater(t, len(it.Key()), 8)
		ts, err := keyTime(it.Key()[8:])
		require.NoError(t, err)
		out = append(out, ts)
	}
	require.NoError(t, it.Err())
	require.NoError(t, it.Close())
	return out
}

func testWindowRetention(t *testing.T, b backend) {
	opts := WindowOptions{Retention: 50, SegmentInterval: 10, WindowSize: 10}
	seg := openSegmented(t, b, opts)
	require.NoError(t, seg.Write(nil, 42))
	w := openWindows(t, seg, opts)
	for ts := int64(0); ts <= 500; ts += 5 {
		wput(t, w, "k", ts, fmt.Sprint(ts))
		wput(t, w, "j", ts, fmt.Sprint(ts))
		// Reads show exactly the live windows: time > observed - 50.
		var want []int64
		for x := max(0, ts-45); x <= ts; x += 5 {
			want = append(want, x)
		}
		got := collectW(t)(w.Fetch([]byte("k"), 0, math.MaxInt64))
		var starts []int64
		for _, r := range got {
			starts = append(starts, r.start)
		}
		require.Equal(t, want, starts, "at %d", ts)
		// Storage holds only live segments: at most 50/10 + 1 of them.
		raw := rawTimes(t, seg)
		require.NotEmpty(t, raw)
		require.GreaterOrEqual(t, raw[0]/10, (ts-49)/10, "at %d an expired segment is still stored", ts)
		require.LessOrEqual(t, len(raw), 2*(50/5+10/5), "at %d", ts)
	}
	// Expiry never moves the position.
	p, err := seg.Position()
	require.NoError(t, err)
	require.Equal(t, int64(42), p)

	// A window already expired is not written; nor is its removal.
	require.NoError(t, w.Put([]byte("k"), 400, []byte("late")))
	_, found, err := seg.Get(w.key([]byte("k"), 400))
	require.NoError(t, err)
	require.False(t, found)
	_, found, err = w.Get([]byte("k"), 455)
	require.NoError(t, err)
	require.True(t, found)
	_, found, err = w.Get([]byte("k"), 450)
	require.NoError(t, err)
	require.False(t, found, "the window at observed - retention has expired")

	// Expire moves time on without writes.
	require.NoError(t, seg.Expire(10_000))
	require.Empty(t, rawTimes(t, seg))
	require.Equal(t, int64(10_000), seg.ObservedTime())
	p, err = seg.Position()
	require.NoError(t, err)
	require.Equal(t, int64(42), p)
}

// testRestoreSkipsExpired writes a changelog-like batch of old and new
// windows as a restoration would: the expired ones never land, the
// position does.
func testRestoreSkipsExpired(t *testing.T, b backend) {
	opts := WindowOptions{Retention: 100, SegmentInterval: 50}
	seg := openSegmented(t, b, opts)
	var batch []Entry
	for ts := int64(0); ts < 1000; ts += 10 {
		batch = append(batch, Entry{Key: appendTime(prefix([]byte("k")), ts), Value: []byte("v")})
	}
	require.NoError(t, seg.Write(batch[:60], 60))
	require.NoError(t, seg.Write(batch[60:], 100))
	raw := rawTimes(t, seg)
	require.Equal(t, int64(900), raw[0], "only the live segment's windows, from 900")
	require.Equal(t, int64(990), raw[len(raw)-1])
	p, err := seg.Position()
	require.NoError(t, err)
	require.Equal(t, int64(100), p)

	// A later batch with only old records still records its position.
	require.NoError(t, seg.Write(batch[:3], 103))
	p, err = seg.Position()
	require.NoError(t, err)
	require.Equal(t, int64(103), p)
	require.Len(t, rawTimes(t, seg), len(raw))
}

// testIntervalChanged: keys carry no segment, so the same key writes into
// stores of any interval, and a changelog key written with a segment (the
// layout before segments left the changelog) lands in the store's own
// segment whatever interval wrote it; a store reopened with another
// interval than its data was written with fails rather than misreads.
func testIntervalChanged(t *testing.T, b backend) {
	inner := b.open(t)
	a, err := NewSegmentedStore(inner, WindowOptions{Retention: 100, SegmentInterval: 10})
	require.NoError(t, err)
	wa := openWindows(t, a, WindowOptions{Retention: 100, SegmentInterval: 10})
	wput(t, wa, "k", 15, "v")
	key := wa.key([]byte("k"), 15)

	c, err := NewSegmentedStore(inner, WindowOptions{Retention: 100, SegmentInterval: 20})
	require.NoError(t, err)
	err = c.Write([]Entry{{Key: key, Value: []byte("v")}}, 1)
	require.ErrorContains(t, err, "another segment interval")
	_, _, err = c.Get(key)
	require.ErrorContains(t, err, "another segment interval")

	fresh := openSegmented(t, b, WindowOptions{Retention: 100, SegmentInterval: 20})
	legacy := append(appendTime(nil, 15/7), wa.key([]byte("j\x00"), 15)...) // written with interval 7
	require.NoError(t, fresh.Write([]Entry{{Key: key, Value: []byte("v")}, {Key: legacy, Value: []byte("old")}}, 2))
	wf := openWindows(t, fresh, WindowOptions{Retention: 100})
	require.Equal(t, []wrow{{"j\x00", 15, 15, "old"}, {"k", 15, 15, "v"}}, collectW(t)(wf.FetchAll(0, 100)))
	require.Equal(t, []int64{15, 15}, rawTimes(t, fresh))
	it, err := fresh.Inner().All()
	require.NoError(t, err)
	for it.Next() {
		require.Equal(t, appendTime(nil, 0), it.Key()[:8], "segment 15/20, not the changelog's 15/7")
	}
	require.NoError(t, errors.Join(it.Err(), it.Close()))

	err = fresh.Write([]Entry{{Key: []byte("not a window key"), Value: []byte("v")}}, 3)
	var ee *EntryError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 0, ee.Index)
	require.ErrorIs(t, err, errCorruptKey)
}

func testSegmentedReset(t *testing.T, b backend) {
	opts := WindowOptions{Retention: 100}
	seg := openSegmented(t, b, opts)
	w := openWindows(t, seg, opts)
	wput(t, w, "k", 500, "v")
	require.NoError(t, seg.Write(nil, 9))
	require.NoError(t, seg.Reset())
	require.Equal(t, int64(math.MinInt64), seg.ObservedTime())
	p, err := seg.Position()
	require.NoError(t, err)
	require.Equal(t, NoPosition, p)
	// After a reset old times are live again.
	w = openWindows(t, seg, opts)
	wput(t, w, "k", 5, "v")
	require.Len(t, collectW(t)(w.Fetch([]byte("k"), 0, 10)), 1)
}

func testWindowReopen(t *testing.T, b backend) {
	opts := WindowOptions{Retention: 30, SegmentInterval: 10}
	seg := openSegmented(t, b, opts)
	w := openWindows(t, seg, opts)
	for ts := int64(0); ts <= 100; ts += 5 {
		wput(t, w, "k", ts, "v")
	}
	require.NoError(t, seg.Write(nil, 5))
	inner := b.reopen(t, seg.Inner())
	seg, err := NewSegmentedStore(inner, opts)
	require.NoError(t, err)
	w = openWindows(t, seg, opts)
	require.Len(t, collectW(t)(w.Fetch([]byte("k"), 0, 1000)), 6, "75..100")
	wput(t, w, "k", 200, "v")
	require.Equal(t, []int64{200}, rawTimes(t, seg))
	p, err := seg.Position()
	require.NoError(t, err)
	require.Equal(t, int64(5), p)
}

// countingGets counts the Gets that reach a store.
type countingGets struct {
	Store
	gets int
}

func (c *countingGets) Get(k []byte) ([]byte, bool, error) {
	c.gets++
	return c.Store.Get(k)
}

// updaterRW gives a ReadWriter the Update of the record cache, so that
// WindowStore.Update takes its one-lookup path.
type updaterRW struct {
	ReadWriter
	updates int
}

func (u *updaterRW) Update(k []byte, fn func([]byte, bool) ([]byte, error)) error {
	u.updates++
	old, found, err := u.Get(k)
	if err != nil {
		return err
	}
	v, err := fn(old, found)
	if err != nil {
		return err
	}
	return u.Put(k, v)
}

// slotRW is updaterRW that also reports slots, as the record cache's
// UpdateAt does: one per key, in first-write order.
type slotRW struct {
	updaterRW
	slots map[string]int
}

func (u *slotRW) UpdateAt(k []byte, fn func([]byte, bool) ([]byte, error)) (int, []byte, error) {
	if err := u.Update(k, fn); err != nil {
		return 0, nil, err
	}
	if u.slots == nil {
		u.slots = make(map[string]int)
	}
	s, ok := u.slots[string(k)]
	if !ok {
		s = len(u.slots)
		u.slots[string(k)] = s
	}
	return s, slices.Clone(k), nil
}

func testWindowUpdate(t *testing.T, b backend) {
	opts := WindowOptions{Retention: 100, SegmentInterval: 10, WindowSize: 10}
	seg := openSegmented(t, b, opts)
	incr := func(old []byte, found bool) ([]byte, error) {
		if !found {
			return []byte{1}, nil
		}
		return []byte{old[0] + 1}, nil
	}
	for _, rw := range []ReadWriter{seg, &updaterRW{ReadWriter: seg}, &slotRW{updaterRW: updaterRW{ReadWriter: seg}}} {
		require.NoError(t, seg.Reset())
		w := openWindows(t, rw, opts)
		for range 3 {
			require.NoError(t, w.Update([]byte("k\x00"), 500, incr))
		}
		require.NoError(t, w.Update([]byte("k\x00"), 510, incr))
		require.Equal(t, []wrow{{"k\x00", 500, 510, "\x03"}, {"k\x00", 510, 520, "\x01"}},
			collectW(t)(w.Fetch([]byte("k\x00"), 0, 1000)))
		// An expired window reaches fn as absent and is not written.
		var sawFound bool
		require.NoError(t, w.Update([]byte("k\x00"), 300, func(old []byte, found bool) ([]byte, error) {
			sawFound = found
			return []byte{9}, nil
		}))
		require.False(t, sawFound)
		_, found, err := w.Get([]byte("k\x00"), 300)
		require.NoError(t, err)
		require.False(t, found)
		require.ErrorIs(t, w.Update([]byte("k"), -1, incr), ErrNegativeTime)
		boom := errors.New("boom")
		require.ErrorIs(t, w.Update([]byte("k\x00"), 500, func([]byte, bool) ([]byte, error) { return nil, boom }), boom)
		v, _, err := w.Get([]byte("k\x00"), 500)
		require.NoError(t, err)
		require.Equal(t, []byte{3}, v, "a failed update writes nothing")
		if u, ok := rw.(*updaterRW); ok {
			require.Equal(t, 5, u.updates, "every live update is one Update of the ReadWriter")
		}
		// UpdateAt reports the slot and stored key of a SlotUpdater's
		// entry, and -1 where there is none.
		_, isSlot := rw.(*slotRW)
		slot, stored, err := w.UpdateAt([]byte("k\x00"), 510, incr)
		require.NoError(t, err)
		if isSlot {
			require.Equal(t, 1, slot)
			require.Equal(t, []byte("k\x00\xff\x00\x01\x00\x00\x00\x00\x00\x00\x01\xfe"), stored)
		} else {
			require.Equal(t, -1, slot)
			require.Nil(t, stored)
		}
		slot, stored, err = w.UpdateAt([]byte("k"), 300, incr)
		require.NoError(t, err)
		require.Equal(t, -1, slot, "an expired window is not written")
		require.Nil(t, stored)
	}
}

// testGetNewerThanWritten: a window later than every window written is
// answered without a lookup, and found once it is written.
func testGetNewerThanWritten(t *testing.T, b backend) {
	opts := WindowOptions{Retention: 100, SegmentInterval: 10, WindowSize: 10}
	inner := &countingGets{Store: b.open(t)}
	seg, err := NewSegmentedStore(inner, opts)
	require.NoError(t, err)
	w := openWindows(t, seg, opts)
	_, found, err := w.Get([]byte("a"), 50)
	require.NoError(t, err)
	require.False(t, found)
	require.Zero(t, inner.gets, "an empty store needs no lookup, written to or not")
	wput(t, w, "a", 50, "v")
	require.NoError(t, seg.Write(nil, 1))
	inner.gets = 0
	for _, k := range []string{"a", "b", "c\x00"} {
		_, found, err := w.Get([]byte(k), 60)
		require.NoError(t, err)
		require.False(t, found)
	}
	require.Zero(t, inner.gets, "windows after the latest written need no lookup")
	v, found, err := w.Get([]byte("a"), 50)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "v", string(v))
	require.Equal(t, 1, inner.gets)
	require.NoError(t, seg.Write([]Entry{{Key: w.key([]byte("b"), 60), Value: []byte("w")}}, 2))
	v, found, err = w.Get([]byte("b"), 60)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "w", string(v))
	// A session key's time is its end.
	sopts := WindowOptions{Retention: 100, SegmentInterval: 10}
	sseg := openSegmented(t, b, sopts)
	ss := openSessions(t, sseg, sopts)
	sput(t, ss, "s", 40, 70, "x")
	got := collectW(t)(ss.FindSessions([]byte("s"), 0, 100))
	require.Equal(t, []wrow{{"s", 40, 70, "x"}}, got)
}

// testReopenedGetsLatestSegment: a reopened store knows only its latest
// segment, not its latest time, so a window late in that segment is still
// looked up and found.
func testReopenedGetsLatestSegment(t *testing.T, b backend) {
	opts := WindowOptions{Retention: 100, SegmentInterval: 10, WindowSize: 1}
	seg := openSegmented(t, b, opts)
	w := openWindows(t, seg, opts)
	wput(t, w, "k", 59, "late")
	require.NoError(t, seg.Write(nil, 1))
	seg, err := NewSegmentedStore(b.reopen(t, seg.Inner()), opts)
	require.NoError(t, err)
	// Read before any write, then after one of an earlier window.
	v, found, err := seg.Get(w.key([]byte("k"), 59))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "late", string(v))
	require.NoError(t, seg.Write([]Entry{{Key: w.key([]byte("j"), 51), Value: []byte("early")}}, 2))
	v, found, err = seg.Get(w.key([]byte("k"), 59))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "late", string(v))
}

package statestore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// backend opens stores of one implementation for the conformance suite.
type backend struct {
	name string
	open func(t *testing.T) Store
	// reopen closes s and opens the same store again; nil for backends
	// that keep nothing across Close.
	reopen func(t *testing.T, s Store) Store
}

func testBadgerOptions() BadgerOptions {
	o := DefaultBadgerOptions()
	o.Logger = discardLogger()
	return o
}

func backends() []backend {
	return []backend{
		{
			name: "memory",
			open: func(t *testing.T) Store {
				s := NewMemory()
				t.Cleanup(func() { _ = s.Close() })
				return s
			},
		},
		{
			name: "badger",
			open: func(t *testing.T) Store {
				return openTestBadger(t, t.TempDir(), testBadgerOptions())
			},
			reopen: func(t *testing.T, s Store) Store {
				dir := s.(*badgerStore).dir
				require.NoError(t, s.Close())
				return openTestBadger(t, dir, testBadgerOptions())
			},
		},
		{
			name: "shared",
			open: func(t *testing.T) Store {
				return openTestShared(t, openTestSharedDB(t, t.TempDir()), "s")
			},
			reopen: func(t *testing.T, s Store) Store {
				home, name := s.(*badgerStore).home, s.(*badgerStore).name
				require.NoError(t, home.Close())
				return openTestShared(t, openTestSharedDB(t, home.dir), name)
			},
		},
	}
}

// openTestSharedDB opens a shared DB in dir holding, besides the stores a
// test opens, a neighbour store whose keys sort on both sides of theirs.
func openTestSharedDB(t *testing.T, dir string) *SharedBadger {
	t.Helper()
	d, err := OpenSharedBadger(dir, testBadgerOptions())
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	n, err := d.Open("neighbour")
	require.NoError(t, err)
	require.NoError(t, n.Write([]Entry{{Key: []byte{}, Value: []byte("n")}, {Key: []byte{0xff, 0xff}, Value: []byte("n")}}, 1))
	require.NoError(t, n.Close())
	return d
}

func openTestShared(t *testing.T, d *SharedBadger, name string) Store {
	t.Helper()
	s, err := d.Open(name)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func openTestBadger(t *testing.T, dir string, o BadgerOptions) Store {
	t.Helper()
	s, err := OpenBadger(dir, o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

type kv struct{ k, v string }

// collect drains an iterator, copying every pair.
func collect(t *testing.T, it Iterator, err error) []kv {
	t.Helper()
	require.NoError(t, err)
	var out []kv
	for it.Next() {
		out = append(out, kv{string(it.Key()), string(it.Value())})
	}
	require.NoError(t, it.Err())
	require.NoError(t, it.Close())
	return out
}

func put(t *testing.T, s ReadWriter, pairs ...string) {
	t.Helper()
	for i := 0; i < len(pairs); i += 2 {
		require.NoError(t, s.Put([]byte(pairs[i]), []byte(pairs[i+1])))
	}
}

func TestConformance(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			t.Run("GetPutDelete", func(t *testing.T) { testGetPutDelete(t, b) })
			t.Run("RangeBounds", func(t *testing.T) { testRangeBounds(t, b) })
			t.Run("AllOrdering", func(t *testing.T) { testAllOrdering(t, b) })
			t.Run("Write", func(t *testing.T) { testWrite(t, b) })
			t.Run("ApproximateCount", func(t *testing.T) { testApproximateCount(t, b) })
			t.Run("MetadataInvisible", func(t *testing.T) { testMetadataInvisible(t, b) })
			t.Run("IteratorSnapshot", func(t *testing.T) { testIteratorSnapshot(t, b) })
			t.Run("WriteAtomicForReaders", func(t *testing.T) { testWriteAtomic(t, b) })
			t.Run("Closed", func(t *testing.T) { testClosed(t, b) })
			t.Run("RandomAgainstModel", func(t *testing.T) { testRandomModel(t, b) })
			t.Run("Reset", func(t *testing.T) { testReset(t, b) })
			t.Run("ResetAtomicForReaders", func(t *testing.T) { testResetAtomic(t, b) })
			t.Run("BigKeysAndValues", func(t *testing.T) { testBigKeysAndValues(t, b) })
			t.Run("BigBatchAtomic", func(t *testing.T) { testBigBatchAtomic(t, b, 30, true) })
			t.Run("BigBatchAtomicShortKeys", func(t *testing.T) { testBigBatchAtomic(t, b, 0, true) })
			// Without positions, as an unlogged store writes: badger
			// stages these instead of tearing them.
			t.Run("BigBatchAtomicUnlogged", func(t *testing.T) { testBigBatchAtomic(t, b, 0, false) })
			if b.reopen != nil {
				t.Run("Persistence", func(t *testing.T) { testPersistence(t, b) })
			}
		})
	}
}

func testGetPutDelete(t *testing.T, b backend) {
	s := b.open(t)
	_, found, err := s.Get([]byte("k"))
	require.NoError(t, err)
	require.False(t, found)

	put(t, s, "k", "v1")
	v, found, err := s.Get([]byte("k"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "v1", string(v))

	put(t, s, "k", "v2")
	v, _, err = s.Get([]byte("k"))
	require.NoError(t, err)
	require.Equal(t, "v2", string(v))

	require.NoError(t, s.Delete([]byte("k")))
	_, found, err = s.Get([]byte("k"))
	require.NoError(t, err)
	require.False(t, found)
	require.NoError(t, s.Delete([]byte("absent")), "deleting an absent key is not an error")

	// An empty value is a value, distinct from a delete.
	require.NoError(t, s.Put([]byte("empty"), []byte{}))
	v, found, err = s.Get([]byte("empty"))
	require.NoError(t, err)
	require.True(t, found)
	require.NotNil(t, v)
	require.Empty(t, v)
	it, err := s.All()
	require.NoError(t, err)
	require.True(t, it.Next())
	require.NotNil(t, it.Value())
	require.NoError(t, it.Close())

	require.Error(t, s.Put([]byte("k"), nil), "nil value must be rejected")

	// The store copies what it is given.
	key, val := []byte("copy"), []byte("orig")
	require.NoError(t, s.Put(key, val))
	copy(key, "xxxx")
	copy(val, "XXXX")
	v, found, err = s.Get([]byte("copy"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "orig", string(v))
}

func testRangeBounds(t *testing.T, b backend) {
	s := b.open(t)
	put(t, s, "a", "1", "b", "2", "b\x00", "3", "c", "4", "d", "5", "\xff", "6")
	cases := []struct {
		name     string
		from, to []byte
		want     []string
	}{
		{"unbounded", nil, nil, []string{"a", "b", "b\x00", "c", "d", "\xff"}},
		{"from inclusive to exclusive", []byte("b"), []byte("d"), []string{"b", "b\x00", "c"}},
		{"open end", []byte("c"), nil, []string{"c", "d", "\xff"}},
		{"open start", nil, []byte("b\x00"), []string{"a", "b"}},
		{"from between keys", []byte("bb"), []byte("z"), []string{"c", "d"}},
		{"empty interval", []byte("b"), []byte("b"), nil},
		{"inverted interval", []byte("d"), []byte("b"), nil},
		{"past the end", []byte("\xff\x00"), nil, nil},
		{"before the start", nil, []byte("a"), nil},
		{"empty from is unbounded below", []byte{}, []byte("b"), []string{"a"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			it, err := s.Range(tc.from, tc.to)
			var keys []string
			for _, p := range collect(t, it, err) {
				keys = append(keys, p.k)
			}
			require.Equal(t, tc.want, keys)
		})
	}
}

func testAllOrdering(t *testing.T, b backend) {
	s := b.open(t)
	r := rand.New(rand.NewPCG(1, 2))
	want := map[string]string{}
	for i := 0; i < 500; i++ {
		k := make([]byte, r.IntN(6))
		for j := range k {
			// A small alphabet with the extremes makes shared prefixes
			// and 0x00/0xff bytes common.
			k[j] = []byte{0x00, 0x01, 'a', 'b', 0x7f, 0x80, 0xff}[r.IntN(7)]
		}
		v := fmt.Sprint(i)
		want[string(k)] = v
		require.NoError(t, s.Put(k, []byte(v)))
	}
	got := collectAll(t, s)
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return bytes.Compare([]byte(a), []byte(b)) })
	require.Len(t, got, len(keys))
	for i, p := range got {
		require.Equal(t, keys[i], p.k)
		require.Equal(t, want[p.k], p.v)
	}
}

func collectAll(t *testing.T, s ReadWriter) []kv {
	t.Helper()
	it, err := s.All()
	return collect(t, it, err)
}

func testWrite(t *testing.T, b backend) {
	s := b.open(t)
	pos, err := s.Position()
	require.NoError(t, err)
	require.Equal(t, NoPosition, pos)

	put(t, s, "gone", "x", "stays", "y")
	require.NoError(t, s.Write([]Entry{
		{Key: []byte("a"), Value: []byte("1")},
		{Key: []byte("gone")},
		{Key: []byte("dup"), Value: []byte("first")},
		{Key: []byte("dup"), Value: []byte("second")},
		{Key: []byte("put-then-delete"), Value: []byte("v")},
		{Key: []byte("put-then-delete")},
		{Key: []byte("absent")},
	}, 42))
	pos, err = s.Position()
	require.NoError(t, err)
	require.Equal(t, int64(42), pos)
	require.Equal(t, []kv{{"a", "1"}, {"dup", "second"}, {"stays", "y"}}, collectAll(t, s))

	// Plain Put/Delete leave the position alone; an empty Write moves it.
	put(t, s, "b", "2")
	pos, err = s.Position()
	require.NoError(t, err)
	require.Equal(t, int64(42), pos)
	require.NoError(t, s.Write(nil, 43))
	pos, err = s.Position()
	require.NoError(t, err)
	require.Equal(t, int64(43), pos)
}

func testApproximateCount(t *testing.T, b backend) {
	s := b.open(t)
	n, err := s.ApproximateCount()
	require.NoError(t, err)
	require.Zero(t, n)
	var batch []Entry
	for i := 0; i < 300; i++ {
		batch = append(batch, Entry{Key: fmt.Appendf(nil, "k%03d", i), Value: []byte("v")})
	}
	require.NoError(t, s.Write(batch, 1))
	put(t, s, "k000", "overwrite")
	require.NoError(t, s.Delete([]byte("k001")))
	require.NoError(t, s.Delete([]byte("never-there")))
	n, err = s.ApproximateCount()
	require.NoError(t, err)
	require.Equal(t, int64(299), n)
}

func testMetadataInvisible(t *testing.T, b backend) {
	s := b.open(t)
	require.NoError(t, s.Write([]Entry{{Key: []byte("user"), Value: []byte("v")}}, 7))
	// A user key that spells the badger position key must neither clash
	// with it nor hide it.
	require.NoError(t, s.Put([]byte{0x00, 'p', 'o', 's'}, []byte("mine")))
	require.NoError(t, s.Put([]byte{}, []byte("empty key")))
	require.Equal(t, []kv{{"", "empty key"}, {"\x00pos", "mine"}, {"user", "v"}}, collectAll(t, s))
	it, err := s.Range(nil, []byte{0x01})
	require.Equal(t, []kv{{"", "empty key"}, {"\x00pos", "mine"}}, collect(t, it, err))
	n, err := s.ApproximateCount()
	require.NoError(t, err)
	require.Equal(t, int64(3), n)
	pos, err := s.Position()
	require.NoError(t, err)
	require.Equal(t, int64(7), pos)
}

func testIteratorSnapshot(t *testing.T, b backend) {
	s := b.open(t)
	put(t, s, "a", "1", "c", "3")
	it, err := s.All()
	require.NoError(t, err)
	require.True(t, it.Next())
	require.Equal(t, "a", string(it.Key()))
	require.NoError(t, s.Write([]Entry{{Key: []byte("b"), Value: []byte("2")}, {Key: []byte("c")}}, 1))
	require.True(t, it.Next(), "the iterator must not see the later write")
	require.Equal(t, "c", string(it.Key()))
	require.Equal(t, "3", string(it.Value()))
	require.False(t, it.Next())
	require.False(t, it.Next(), "Next after the end stays false")
	require.NoError(t, it.Err())
	require.NoError(t, it.Close())
	require.Equal(t, []kv{{"a", "1"}, {"b", "2"}}, collectAll(t, s))
}

// testWriteAtomic checks that readers never see part of a Write: every
// Write sets all keys to the same generation number.
func testWriteAtomic(t *testing.T, b backend) {
	s := b.open(t)
	const keys, writes = 50, 200
	batch := func(gen uint64) []Entry {
		es := make([]Entry, keys)
		for i := range es {
			v := binary.BigEndian.AppendUint64(nil, gen)
			es[i] = Entry{Key: fmt.Appendf(nil, "key-%02d", i), Value: v}
		}
		return es
	}
	require.NoError(t, s.Write(batch(0), 0))

	done := make(chan error, 1)
	go func() {
		for g := uint64(1); g <= writes; g++ {
			if err := s.Write(batch(g), int64(g)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()

	check := func() {
		it, err := s.All()
		require.NoError(t, err)
		n, first := 0, []byte(nil)
		for it.Next() {
			if first == nil {
				first = append([]byte{}, it.Value()...)
			}
			require.Equal(t, first, it.Value(), "a reader saw part of a Write")
			n++
		}
		require.NoError(t, it.Err())
		require.NoError(t, it.Close())
		require.Equal(t, keys, n)
	}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case err := <-done:
			require.NoError(t, err)
			check()
			pos, err := s.Position()
			require.NoError(t, err)
			require.Equal(t, int64(writes), pos)
			return
		case <-deadline:
			t.Fatal("writer did not finish")
		default:
			check()
		}
	}
}

func testClosed(t *testing.T, b backend) {
	s := b.open(t)
	put(t, s, "a", "1")
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "closing twice is a no-op")

	_, _, err := s.Get([]byte("a"))
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, s.Put([]byte("a"), []byte("1")), ErrClosed)
	require.ErrorIs(t, s.Delete([]byte("a")), ErrClosed)
	require.ErrorIs(t, s.Write([]Entry{{Key: []byte("a"), Value: []byte("1")}}, 1), ErrClosed)
	_, err = s.Range(nil, nil)
	require.ErrorIs(t, err, ErrClosed)
	_, err = s.All()
	require.ErrorIs(t, err, ErrClosed)
	_, err = s.ApproximateCount()
	require.ErrorIs(t, err, ErrClosed)
	_, err = s.Position()
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, s.Reset(), ErrClosed)
}

// testRandomModel runs random writes against a map and compares reads.
func testRandomModel(t *testing.T, b backend) {
	s := b.open(t)
	r := rand.New(rand.NewPCG(3, 4))
	model := map[string]string{}
	key := func() []byte { return fmt.Appendf(nil, "%02d", r.IntN(60)) }
	for round := 0; round < 40; round++ {
		var batch []Entry
		for i := r.IntN(30); i > 0; i-- {
			k := key()
			if r.IntN(3) == 0 {
				batch = append(batch, Entry{Key: k})
				delete(model, string(k))
			} else {
				v := fmt.Sprint(round, i)
				batch = append(batch, Entry{Key: k, Value: []byte(v)})
				model[string(k)] = v
			}
		}
		require.NoError(t, s.Write(batch, int64(round)))
		for i := 0; i < 5; i++ {
			k := key()
			v, found, err := s.Get(k)
			require.NoError(t, err)
			mv, ok := model[string(k)]
			require.Equal(t, ok, found)
			require.Equal(t, mv, string(v))
		}
		from, to := key(), key()
		it, err := s.Range(from, to)
		got := collect(t, it, err)
		var want []kv
		for k, v := range model {
			if k >= string(from) && k < string(to) {
				want = append(want, kv{k, v})
			}
		}
		slices.SortFunc(want, func(a, b kv) int { return bytes.Compare([]byte(a.k), []byte(b.k)) })
		require.Equal(t, want, got)
		n, err := s.ApproximateCount()
		require.NoError(t, err)
		require.Equal(t, int64(len(model)), n)
	}
}

func testPersistence(t *testing.T, b backend) {
	s := b.open(t)
	require.NoError(t, s.Write([]Entry{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Value: []byte("2")}}, 10))
	require.NoError(t, s.Write([]Entry{{Key: []byte("a")}}, 11))
	put(t, s, "c", "3")
	s = b.reopen(t, s)
	pos, err := s.Position()
	require.NoError(t, err)
	require.Equal(t, int64(11), pos)
	require.Equal(t, []kv{{"b", "2"}, {"c", "3"}}, collectAll(t, s))
}

// testReset checks that Reset empties the store and forgets its position,
// and that the store works on afterwards (and, if persistent, stays reset
// across a reopen).
func testReset(t *testing.T, b backend) {
	s := b.open(t)
	require.NoError(t, s.Write([]Entry{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Value: []byte("2")}}, 42))
	require.NoError(t, s.Reset())
	pos, err := s.Position()
	require.NoError(t, err)
	require.Equal(t, NoPosition, pos)
	require.Empty(t, collectAll(t, s))
	n, err := s.ApproximateCount()
	require.NoError(t, err)
	require.Zero(t, n)
	_, found, err := s.Get([]byte("a"))
	require.NoError(t, err)
	require.False(t, found)

	require.NoError(t, s.Reset(), "resetting an empty store")
	require.NoError(t, s.Write([]Entry{{Key: []byte("c"), Value: []byte("3")}}, 5))
	if b.reopen != nil {
		s = b.reopen(t, s)
	}
	pos, err = s.Position()
	require.NoError(t, err)
	require.Equal(t, int64(5), pos)
	require.Equal(t, []kv{{"c", "3"}}, collectAll(t, s))
}

// testResetAtomicForReaders resets a store under concurrent readers: a
// read sees the whole old contents or none of them, and an iteration cut
// short says so with ErrReset.
func testResetAtomic(t *testing.T, b backend) {
	s := b.open(t)
	const keys = 200
	es := make([]Entry, keys)
	for i := range es {
		es[i] = Entry{Key: fmt.Appendf(nil, "key-%03d", i), Value: []byte("v")}
	}
	require.NoError(t, s.Write(es, 9))

	stop := make(chan struct{})
	errs := make(chan error, 1)
	var reads atomic.Int64
	go func() {
		defer close(errs)
		for {
			select {
			case <-stop:
				return
			default:
			}
			it, err := s.All()
			if err != nil {
				errs <- err
				return
			}
			n := 0
			for it.Next() {
				n++
			}
			ierr := it.Err()
			it.Close()
			switch {
			case ierr != nil && !errors.Is(ierr, ErrReset):
				errs <- ierr
				return
			case ierr == nil && n != 0 && n != keys:
				errs <- fmt.Errorf("a reader saw %d of %d keys", n, keys)
				return
			}
			reads.Add(1)
		}
	}()
	// Reads before, during and after the reset.
	waitReads := func(n int64) {
		deadline := time.Now().Add(10 * time.Second)
		for reads.Load() < n {
			select {
			case err := <-errs:
				require.NoError(t, err)
				t.Fatal("reader stopped")
			default:
			}
			require.True(t, time.Now().Before(deadline), "reader stalled")
			runtime.Gosched()
		}
	}
	waitReads(1)
	require.NoError(t, s.Reset())
	waitReads(reads.Load() + 2)
	close(stop)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Empty(t, collectAll(t, s))
}

// bigKeys returns keys around and far beyond badger's 65,000-byte key
// limit, many sharing long prefixes (so that the badger backend's slots
// must be put in order by real key), with short neighbours on both sides.
func bigKeys() [][]byte {
	m := func(n int, tail string) []byte { return append(bytes.Repeat([]byte("m"), n), tail...) }
	r := rand.New(rand.NewPCG(5, 6))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return b
	}
	keys := [][]byte{
		[]byte("a"),
		[]byte("z"),
		m(1, ""),
		m(64_966, ""),
		m(64_967, ""),
		m(64_967, "z"),
		m(64_998, ""),
		m(64_999, ""),
		m(65_000, ""),
		m(65_001, ""),
		m(69_999, "a"),
		m(70_000, ""),
		m(70_000, "\x00"),
		m(69_999, "\xff"),
		m(900_000, ""),
		m(64_999, "\x00"),
		// The same limits for a store in a shared DB, whose keys are
		// prefixed.
		m(64_962, ""),
		m(64_963, ""),
		m(64_963, "z"),
		m(64_993, ""),
		m(64_994, ""),
		append(bytes.Repeat([]byte("l"), 70_000), "m"...),
		append([]byte("n"), bytes.Repeat([]byte{0xff}, 69_999)...),
		append(m(65_500, ""), random(10)...),
		append(m(65_500, ""), random(10)...),
		random(70_000),
		random(64_999),
		random(900_000),
	}
	return keys
}

func sortedKeys(model map[string][]byte) []string {
	keys := make([]string, 0, len(model))
	for k := range model {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return bytes.Compare([]byte(a), []byte(b)) })
	return keys
}

// checkModel compares every read of s with model: Get, All, Range over
// many bounds (every key, and just past and just before some), and count.
func checkModel(t *testing.T, s ReadWriter, model map[string][]byte, probes [][]byte) {
	t.Helper()
	for _, k := range probes {
		v, found, err := s.Get(k)
		require.NoError(t, err)
		want, ok := model[string(k)]
		require.Equal(t, ok, found, "Get of a key of %d bytes", len(k))
		if ok {
			require.True(t, bytes.Equal(want, v), "Get of a key of %d bytes: value of %d bytes, want %d", len(k), len(v), len(want))
		}
	}
	sorted := sortedKeys(model)
	rangeKeys := func(from, to []byte) []string {
		it, err := s.Range(from, to)
		require.NoError(t, err)
		var got []string
		for it.Next() {
			got = append(got, string(it.Key()))
			require.True(t, bytes.Equal(model[string(it.Key())], it.Value()), "value of a key of %d bytes", len(it.Key()))
		}
		require.NoError(t, it.Err())
		require.NoError(t, it.Close())
		return got
	}
	wantRange := func(from, to []byte) []string {
		var want []string
		for _, k := range sorted {
			if (from == nil || k >= string(from)) && (to == nil || k < string(to)) {
				want = append(want, k)
			}
		}
		return want
	}
	lens := func(ks []string) []int {
		out := make([]int, len(ks))
		for i, k := range ks {
			out[i] = len(k)
		}
		return out
	}
	requireRange := func(from, to []byte) {
		t.Helper()
		got, want := rangeKeys(from, to), wantRange(from, to)
		require.True(t, slices.Equal(want, got), "Range [%d bytes, %d bytes): got key lengths %v, want %v", len(from), len(to), lens(got), lens(want))
	}
	requireRange(nil, nil)
	bounds := [][]byte{nil}
	for _, k := range probes {
		bounds = append(bounds, k, append(bytes.Clone(k), 0), k[:len(k)/2])
	}
	for i, from := range bounds {
		// Every bound as from and as to, paired with a few others.
		requireRange(from, nil)
		requireRange(nil, from)
		requireRange(from, bounds[(i*7+3)%len(bounds)])
	}
	n, err := s.ApproximateCount()
	require.NoError(t, err)
	require.Equal(t, int64(len(model)), n)
}

// testBigKeysAndValues stores keys of up to 900,000 bytes and values near a
// megabyte, the sizes Kafka accepts, and checks every read against a model
// through puts, overwrites, deletes, a reopen and a reset.
func testBigKeysAndValues(t *testing.T, b backend) {
	s := b.open(t)
	keys := bigKeys()
	bigValue := func(i int) []byte {
		v := bytes.Repeat([]byte{byte(i)}, 1_000_000-i)
		return binary.BigEndian.AppendUint32(v, uint32(i))
	}
	model := map[string][]byte{}
	for i, k := range keys {
		v := fmt.Appendf(nil, "v%d", i)
		if i%3 == 0 {
			v = bigValue(i)
		}
		require.NoError(t, s.Put(k, v), "Put of a key of %d bytes", len(k))
		model[string(k)] = v
	}
	probes := append(keys, bytes.Repeat([]byte("m"), 80_000), bytes.Repeat([]byte("m"), 64_968))
	checkModel(t, s, model, probes)

	// Overwrite and delete, through Put/Delete and through Write.
	for i, k := range keys {
		switch i % 4 {
		case 0:
			require.NoError(t, s.Delete(k))
			delete(model, string(k))
		case 1:
			v := bigValue(i + 1)
			require.NoError(t, s.Put(k, v))
			model[string(k)] = v
		}
	}
	var batch []Entry
	for i, k := range keys {
		switch i % 4 {
		case 2:
			batch = append(batch, Entry{Key: k})
			delete(model, string(k))
		case 3:
			v := []byte{}
			batch = append(batch, Entry{Key: k, Value: v})
			model[string(k)] = v
		}
	}
	require.NoError(t, s.Delete(bytes.Repeat([]byte("m"), 80_000)), "deleting an absent long key")
	require.NoError(t, s.Write(batch, 77))
	checkModel(t, s, model, probes)

	if b.reopen != nil {
		s = b.reopen(t, s)
		pos, err := s.Position()
		require.NoError(t, err)
		require.Equal(t, int64(77), pos)
		checkModel(t, s, model, probes)
	}

	require.NoError(t, s.Reset())
	checkModel(t, s, map[string][]byte{}, probes)
	require.NoError(t, s.Write([]Entry{{Key: keys[len(keys)-1], Value: bigValue(1)}}, 3))
	if b.reopen != nil {
		s = b.reopen(t, s)
	}
	checkModel(t, s, map[string][]byte{string(keys[len(keys)-1]): bigValue(1)}, probes)
}

// testBigBatchAtomic writes batches far beyond one badger transaction
// (longKeys keys beyond the badger key limit with values of 100 KB, and
// thousands of entries with 300-byte values) while readers check they
// never see part of one, then checks the last batch and its position
// survive a reopen. Unless logged, every Write is without a position.
func testBigBatchAtomic(t *testing.T, b backend, longKeys int, logged bool) {
	s := b.open(t)
	const smallKeys, writes = 3000, 8
	key := func(i int) []byte {
		if i < longKeys {
			return fmt.Appendf(bytes.Repeat([]byte("k"), 70_000), "%03d", i)
		}
		return fmt.Appendf(nil, "small-%05d", i)
	}
	batch := func(gen uint64) []Entry {
		es := make([]Entry, longKeys+smallKeys)
		for i := range es {
			v := binary.BigEndian.AppendUint64(nil, gen)
			if i < longKeys {
				v = append(v, bytes.Repeat([]byte{byte(gen)}, 100_000)...)
			} else {
				v = append(v, bytes.Repeat([]byte{byte(gen)}, 300)...)
			}
			es[i] = Entry{Key: key(i), Value: v}
		}
		return es
	}
	position := func(g uint64) int64 {
		if !logged {
			return NoPosition
		}
		return int64(g)
	}
	require.NoError(t, s.Write(batch(0), position(0)))
	done := make(chan error, 1)
	go func() {
		for g := uint64(1); g <= writes; g++ {
			if err := s.Write(batch(g), position(g)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	check := func(s Store) uint64 {
		it, err := s.All()
		require.NoError(t, err)
		n, gen := 0, uint64(0)
		for it.Next() {
			g := binary.BigEndian.Uint64(it.Value())
			if n == 0 {
				gen = g
			}
			require.Equal(t, gen, g, "a reader saw part of a Write")
			n++
		}
		require.NoError(t, it.Err())
		require.NoError(t, it.Close())
		require.Equal(t, longKeys+smallKeys, n)
		v, found, err := s.Get(key(0))
		require.NoError(t, err)
		require.True(t, found)
		require.GreaterOrEqual(t, binary.BigEndian.Uint64(v), gen)
		return gen
	}
	deadline := time.After(60 * time.Second)
	for finished := false; !finished; {
		select {
		case err := <-done:
			require.NoError(t, err)
			finished = true
		case <-deadline:
			t.Fatal("writer did not finish")
		default:
			check(s)
		}
	}
	require.Equal(t, uint64(writes), check(s))
	if b.reopen != nil {
		s = b.reopen(t, s)
		require.Equal(t, uint64(writes), check(s))
	}
	pos, err := s.Position()
	require.NoError(t, err)
	require.Equal(t, position(writes), pos)
}

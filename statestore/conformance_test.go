package statestore

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

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

package statestore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"
)

// A batch beyond one transaction goes through the staged path; the data
// and the position must all land, and survive a reopen.
func TestBadgerWriteLargerThanOneTxn(t *testing.T) {
	dir := t.TempDir()
	o := testBadgerOptions()
	o.MemTableSize = 1 << 20 // caps a transaction at ~1,600 entries
	s := openTestBadger(t, dir, o)
	bs := s.(*badgerStore)

	const n = 20_000
	batch := make([]Entry, 0, n+1)
	for i := 0; i < n; i++ {
		batch = append(batch, Entry{Key: fmt.Appendf(nil, "key-%06d", i), Value: fmt.Appendf(nil, "v%d", i)})
	}
	batch = append(batch, Entry{Key: []byte("key-000000")}) // order still counts
	ops, err := bs.plan(batch)
	require.NoError(t, err)
	require.False(t, bs.fitsOneTxn(ops))
	require.True(t, bs.fitsOneTxn(ops[:100]))
	require.NoError(t, s.Write(batch, 99))

	check := func(s Store) {
		pos, err := s.Position()
		require.NoError(t, err)
		require.Equal(t, int64(99), pos)
		cnt, err := s.ApproximateCount()
		require.NoError(t, err)
		require.Equal(t, int64(n-1), cnt)
		_, found, err := s.Get([]byte("key-000000"))
		require.NoError(t, err)
		require.False(t, found)
		v, found, err := s.Get([]byte("key-019999"))
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, "v19999", string(v))
	}
	check(s)
	require.NoError(t, s.Close())
	check(openTestBadger(t, dir, o))
}

// If the estimate says a batch fits but badger disagrees, Write must still
// succeed through the staged path.
func TestBadgerTxnTooBigFallback(t *testing.T) {
	o := testBadgerOptions()
	o.MemTableSize = 1 << 20
	s := openTestBadger(t, t.TempDir(), o)
	bs := s.(*badgerStore)
	batch := make([]Entry, 0, 5000)
	for i := 0; i < cap(batch); i++ {
		batch = append(batch, Entry{Key: fmt.Appendf(nil, "k%05d", i), Value: []byte("v")})
	}
	ops, err := bs.plan(batch)
	require.NoError(t, err)
	err = bs.writeTxn(ops, 0)
	require.ErrorIs(t, err, badger.ErrTxnTooBig, "the direct transaction must not fit")
	require.NoError(t, bs.writeStaged(ops, []byte{0, 0, 0, 0, 0, 0, 0, 5}))
	n, err := s.ApproximateCount()
	require.NoError(t, err)
	require.Equal(t, int64(len(batch)), n)
}

// stagedKeys counts what a staged write left in the stage namespace.
func stagedKeys(t *testing.T, s Store) int {
	t.Helper()
	n := 0
	require.NoError(t, s.(*badgerStore).db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{stagePrefix}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	}))
	return n
}

// A staged Write is decided by its marker: interrupted after the marker
// (a crash), the next open finishes it; interrupted before, the next open
// discards it and the old data and position stand. Either way the stage is
// gone after the open.
func TestBadgerStagedWriteRecovery(t *testing.T) {
	long := func(i int) []byte { return fmt.Appendf(bytes.Repeat([]byte("x"), 70_000), "%02d", i) }
	batch := func(gen byte) []Entry {
		es := make([]Entry, 20)
		for i := range es {
			es[i] = Entry{Key: long(i), Value: []byte{gen}}
		}
		return append(es, Entry{Key: []byte("short"), Value: []byte{gen}})
	}
	check := func(t *testing.T, s Store, gen byte, pos int64) {
		t.Helper()
		got := collectAll(t, s)
		require.Len(t, got, 21)
		for _, p := range got {
			require.Equal(t, string([]byte{gen}), p.v)
		}
		p, err := s.Position()
		require.NoError(t, err)
		require.Equal(t, pos, p)
		require.Zero(t, stagedKeys(t, s))
	}
	posBytes := func(p int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(p)) }

	for _, tc := range []struct {
		name      string
		interrupt func(t *testing.T, bs *badgerStore, ops []op)
		wantGen   byte
		wantPos   int64
	}{
		{"after the marker", func(t *testing.T, bs *badgerStore, ops []op) {
			require.NoError(t, bs.stage(ops, posBytes(2)))
		}, 2, 2},
		{"before the marker", func(t *testing.T, bs *badgerStore, ops []op) {
			require.NoError(t, bs.stage(ops, posBytes(2)))
			require.NoError(t, bs.db.Update(func(txn *badger.Txn) error { return txn.Delete(stageMarkerKey) }))
		}, 1, 1},
		{"marker without all of its stage", func(t *testing.T, bs *badgerStore, ops []op) {
			require.NoError(t, bs.stage(ops, posBytes(2)))
			require.NoError(t, bs.db.Update(func(txn *badger.Txn) error { return txn.Delete(ownKeys.stage(3)) }))
		}, 1, 1},
		{"after the apply, before the cleanup", func(t *testing.T, bs *badgerStore, ops []op) {
			require.NoError(t, bs.stage(ops, posBytes(2)))
			require.NoError(t, bs.applyGated(ops, posBytes(2)))
		}, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openTestBadger(t, dir, testBadgerOptions())
			require.NoError(t, s.Write(batch(1), 1))
			check(t, s, 1, 1)
			bs := s.(*badgerStore)
			ops, err := bs.plan(batch(2))
			require.NoError(t, err)
			require.False(t, bs.fitsOneTxn(ops), "the batch must need staging")
			tc.interrupt(t, bs, ops)
			require.NoError(t, s.Close())
			s = openTestBadger(t, dir, testBadgerOptions())
			check(t, s, tc.wantGen, tc.wantPos)
			require.NoError(t, s.Write(batch(3), 3), "the store writes on")
			check(t, s, 3, 3)
		})
	}
}

// innerOf wraps a store the way SegmentedStore does, to check that
// TornUntil looks through wrappers.
type innerOf struct{ Store }

func (w innerOf) Inner() Store { return w.Store }

// A torn Write cut short between its data and its position (a crash) leaves
// part of its entries applied under the old position, and the store says
// it is torn up to the Write's position. Replaying the changelog from the
// old position, in Writes that each fit one transaction as restoration
// makes them, sets every key to its latest value over the entries already
// applied, and the Write that reaches the marker's position removes it.
func TestBadgerTornWriteRecovery(t *testing.T) {
	const n = 5000
	batch := func(gen byte, from, to int) []Entry {
		es := make([]Entry, 0, to-from)
		for i := from; i < to; i++ {
			var v []byte
			if i%7 != 0 || gen == 1 {
				v = []byte{gen} // every seventh key is deleted after gen 1
			}
			es = append(es, Entry{Key: fmt.Appendf(nil, "k%05d", i), Value: v})
		}
		return es
	}
	check := func(t *testing.T, s Store, gen byte) {
		t.Helper()
		got := collectAll(t, s)
		want := 0
		for i := range n {
			if i%7 != 0 || gen == 1 {
				want++
			}
		}
		require.Len(t, got, want)
		for _, p := range got {
			require.Equal(t, string([]byte{gen}), p.v, "key %s", p.k)
		}
	}
	o := testBadgerOptions()
	o.MemTableSize = 1 << 20
	dir := t.TempDir()
	s := openTestBadger(t, dir, o)
	bs := s.(*badgerStore)
	require.NoError(t, s.Write(batch(1, 0, n), 10), "a torn Write that completes")
	_, torn := TornUntil(s)
	require.False(t, torn)
	check(t, s, 1)

	// The crash: the marker and 60% of the next Write, not its position.
	ops, err := bs.plan(batch(2, 0, n))
	require.NoError(t, err)
	require.False(t, bs.fitsOneTxn(ops), "the batch must be written torn")
	require.NoError(t, bs.markTorn(20))
	require.NoError(t, bs.writeBatch(ops[:n*6/10]))
	require.NoError(t, s.Close())

	s = openTestBadger(t, dir, o)
	pos, err := s.Position()
	require.NoError(t, err)
	require.Equal(t, int64(10), pos, "the old position stands")
	target, torn := TornUntil(innerOf{s})
	require.True(t, torn)
	require.Equal(t, int64(20), target)

	// The replay: the changelog between 10 and 20 holds the Write's
	// records; it comes back in five Writes.
	for i := range 5 {
		from, to := i*n/5, (i+1)*n/5
		p := int64(12 + 2*i)
		require.NoError(t, s.Write(batch(2, from, to), p))
		_, torn = TornUntil(s)
		require.Equal(t, p < 20, torn, "torn after the replay reached %d", p)
	}
	check(t, s, 2)
	require.NoError(t, s.Close())
	s = openTestBadger(t, dir, o)
	_, torn = TornUntil(s)
	require.False(t, torn, "the marker is gone from disk too")
	pos, err = s.Position()
	require.NoError(t, err)
	require.Equal(t, int64(20), pos)
	check(t, s, 2)

	// A Reset drops a marker with everything else.
	require.NoError(t, s.(*badgerStore).markTorn(30))
	require.NoError(t, s.Reset())
	_, torn = TornUntil(s)
	require.False(t, torn)
}

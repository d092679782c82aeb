package statestore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"
)

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// Closing the store while an iterator is open must not crash; the iterator
// stops and reports ErrClosed.
func TestBadgerCloseWithOpenIterator(t *testing.T) {
	s := openTestBadger(t, t.TempDir(), testBadgerOptions())
	put(t, s, "a", "1", "b", "2", "c", "3")
	it, err := s.All()
	require.NoError(t, err)
	require.True(t, it.Next())
	k := it.Key()
	require.NoError(t, s.Close())
	require.Equal(t, "a", string(k), "pairs already returned stay valid")
	require.False(t, it.Next())
	require.ErrorIs(t, it.Err(), ErrClosed)
	require.NoError(t, it.Close())

	// An iterator finished before Close reports no error.
	s = openTestBadger(t, t.TempDir(), testBadgerOptions())
	it, err = s.All()
	require.NoError(t, err)
	require.False(t, it.Next())
	require.NoError(t, s.Close())
	require.NoError(t, it.Err())
	require.NoError(t, it.Close())
}

func TestBadgerOpenTwiceFailsAndDestroy(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s := openTestBadger(t, dir, testBadgerOptions())
	_, err := OpenBadger(dir, testBadgerOptions())
	require.Error(t, err, "badger locks its directory")
	require.NoError(t, s.Close())
	require.NoError(t, DestroyBadger(dir))
	_, err = os.Stat(dir)
	require.True(t, os.IsNotExist(err))
	s = openTestBadger(t, dir, testBadgerOptions())
	pos, err := s.Position()
	require.NoError(t, err)
	require.Equal(t, NoPosition, pos)
}

func TestBadgerOptionsDefaults(t *testing.T) {
	o := BadgerOptions{Compress: true}.withDefaults()
	d := DefaultBadgerOptions()
	require.Equal(t, d.MemTableSize, o.MemTableSize)
	require.Equal(t, d.NumCompactors, o.NumCompactors)
	require.Equal(t, int64(1<<20), o.BlockCacheSize, "compression needs a block cache")
	require.NotNil(t, o.Logger)

	bo := o.badger("/x")
	require.False(t, bo.DetectConflicts)
	require.Equal(t, d.ValueThreshold, bo.ValueThreshold)

	tuned := BadgerOptions{Tune: func(bo badger.Options) badger.Options { return bo.WithNumCompactors(0) }}.withDefaults().badger("/x")
	require.Equal(t, 0, tuned.NumCompactors)
}

// An iterator open on a store being reset ends with ErrReset; pairs it has
// returned stay valid.
func TestBadgerResetWithOpenIterator(t *testing.T) {
	s := openTestBadger(t, t.TempDir(), testBadgerOptions())
	put(t, s, "a", "1", "b", "2")
	it, err := s.All()
	require.NoError(t, err)
	require.True(t, it.Next())
	k := it.Key()
	require.NoError(t, s.Reset())
	require.Equal(t, "a", string(k))
	require.False(t, it.Next())
	require.ErrorIs(t, it.Err(), ErrReset)
	require.NoError(t, it.Close())
	require.Empty(t, collectAll(t, s))
}

// Reset leaves nothing of the old store on disk, and a reset interrupted
// between moving the old store aside and deleting it is finished by the
// next open: the store opens empty, at no position.
func TestBadgerResetOnDisk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s := openTestBadger(t, dir, testBadgerOptions())
	require.NoError(t, s.Write([]Entry{{Key: []byte("a"), Value: []byte("1")}}, 7))
	require.NoError(t, s.Reset())
	_, err := os.Stat(resetDir(dir))
	require.True(t, os.IsNotExist(err), "the old contents are deleted")
	require.NoError(t, s.Write([]Entry{{Key: []byte("b"), Value: []byte("2")}}, 3))
	require.NoError(t, s.Close())

	// A crash right after the rename: the directory is gone, its old
	// contents sit aside.
	require.NoError(t, os.Rename(dir, resetDir(dir)))
	s = openTestBadger(t, dir, testBadgerOptions())
	pos, err := s.Position()
	require.NoError(t, err)
	require.Equal(t, NoPosition, pos)
	require.Empty(t, collectAll(t, s))
	_, err = os.Stat(resetDir(dir))
	require.True(t, os.IsNotExist(err), "open deletes what an interrupted reset left")
	require.NoError(t, s.Close())
	require.NoError(t, DestroyBadger(dir))
}

// A slot holding another key (a SHA-256 collision, forged here) is never
// read as the key asked for, never overwritten, and deleting the key
// asked for leaves it alone.
func TestBadgerLongKeySlotCollision(t *testing.T) {
	s := openTestBadger(t, t.TempDir(), testBadgerOptions())
	bs := s.(*badgerStore)
	mine := bytes.Repeat([]byte("c"), 70_000)
	other := append(bytes.Repeat([]byte("c"), 69_999), 'd')
	require.NoError(t, bs.db.Update(func(txn *badger.Txn) error {
		return txn.SetEntry(badger.NewEntry(ownKeys.slot(mine), encodeSlot(other, []byte("theirs"))).WithMeta(metaSlotV1))
	}))
	_, found, err := s.Get(mine)
	require.NoError(t, err)
	require.False(t, found)
	require.Error(t, s.Put(mine, []byte("mine")))
	require.Error(t, s.Write([]Entry{{Key: mine, Value: []byte("mine")}}, 1))
	require.NoError(t, s.Delete(mine))
	require.Equal(t, []kv{{string(other), "theirs"}}, collectAll(t, s))
}

// A key of 64,999 bytes, the longest the old layout accepted, may sit
// unslotted in an existing store: it is read, listed and counted, and
// writing or deleting it moves or removes it.
func TestBadgerLegacyLongestKey(t *testing.T) {
	dir := t.TempDir()
	s := openTestBadger(t, dir, testBadgerOptions())
	k := bytes.Repeat([]byte("q"), legacyRawKey)
	require.NoError(t, s.(*badgerStore).db.Update(func(txn *badger.Txn) error { return txn.Set(ownKeys.user(k), []byte("old")) }))
	// An older binary left the key: the store is opened on it.
	require.NoError(t, s.Close())
	s = openTestBadger(t, dir, testBadgerOptions())
	bs := s.(*badgerStore)
	v, found, err := s.Get(k)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "old", string(v))
	require.Equal(t, []kv{{string(k), "old"}}, collectAll(t, s))

	require.NoError(t, s.Put(k, []byte("new")))
	require.Equal(t, []kv{{string(k), "new"}}, collectAll(t, s))
	n, err := s.ApproximateCount()
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "the unslotted copy is gone")

	require.NoError(t, bs.db.Update(func(txn *badger.Txn) error { return txn.Set(ownKeys.user(k), []byte("old")) }))
	require.NoError(t, s.Write([]Entry{{Key: k}}, 1))
	require.Empty(t, collectAll(t, s))
	n, err = s.ApproximateCount()
	require.NoError(t, err)
	require.Zero(t, n)
}

// An entry beyond what badger holds is refused before anything is
// written, naming its index, and the store works on.
func TestBadgerEntryTooLarge(t *testing.T) {
	o := testBadgerOptions()
	o.ValueLogFileSize = 1 << 20
	s := openTestBadger(t, t.TempDir(), o)
	big := make([]byte, 1<<20)
	err := s.Write([]Entry{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Value: big}}, 5)
	var ee *EntryError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 1, ee.Index)
	require.ErrorIs(t, err, ErrTooLarge)
	require.ErrorIs(t, s.Put([]byte("b"), big), ErrTooLarge)
	require.Empty(t, collectAll(t, s))
	pos, err := s.Position()
	require.NoError(t, err)
	require.Equal(t, NoPosition, pos)
	require.NoError(t, s.Write([]Entry{{Key: []byte("b"), Value: big[:500_000]}}, 6))
}

// Gets share one read transaction between writes (see reader): a Get must
// still see every Write, Put and Delete that returned before it started,
// and one Get must never see older data than a Get that finished before
// it, while Writes of every kind (one transaction, torn) land meanwhile.
func TestBadgerSharedReadsFollowWrites(t *testing.T) {
	o := testBadgerOptions()
	o.MemTableSize = 1 << 20 // a transaction holds ~1,600 entries
	s := openTestBadger(t, t.TempDir(), o)
	key := []byte("counter")
	value := func(i uint64) []byte { return binary.BigEndian.AppendUint64(nil, i) }
	filler := make([]Entry, 5_000) // makes a Write torn
	for i := range filler {
		filler[i] = Entry{Key: fmt.Appendf(nil, "filler-%05d", i), Value: []byte("x")}
	}

	const writes = 60
	done := make(chan struct{})
	readErr := make(chan error, 1)
	go func() {
		defer close(readErr)
		var last uint64
		for {
			select {
			case <-done:
				return
			default:
			}
			v, found, err := s.Get(key)
			if err != nil {
				readErr <- err
				return
			}
			if !found {
				continue // not written yet
			}
			got := binary.BigEndian.Uint64(v)
			if got < last {
				readErr <- fmt.Errorf("read %d after %d", got, last)
				return
			}
			last = got
		}
	}()
	for i := uint64(1); i <= writes; i++ {
		switch i % 3 {
		case 0:
			require.NoError(t, s.Write(append([]Entry{{Key: key, Value: value(i)}}, filler...), int64(i)))
			_, torn := s.(*badgerStore).TornUntil()
			require.False(t, torn)
		case 1:
			require.NoError(t, s.Write([]Entry{{Key: key, Value: value(i)}}, int64(i)))
		default:
			require.NoError(t, s.Put(key, value(i)))
		}
		v, found, err := s.Get(key)
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, i, binary.BigEndian.Uint64(v), "a Get after a write must see it")
	}
	close(done)
	require.NoError(t, <-readErr)

	require.NoError(t, s.Delete(key))
	_, found, err := s.Get(key)
	require.NoError(t, err)
	require.False(t, found, "a Get after a Delete must miss")
	require.NoError(t, s.Put(key, value(1)))
	require.NoError(t, s.Reset())
	_, found, err = s.Get(key)
	require.NoError(t, err)
	require.False(t, found, "a Get after a Reset must miss")
}

// A store written before the position moved after the user keys keeps
// its position: it is read from the old record, which the first write of
// the position removes.
func TestBadgerLegacyPositionRecord(t *testing.T) {
	dir := t.TempDir()
	opts := DefaultBadgerOptions()
	opts.ValueLogGCInterval = -1
	db, err := badger.Open(opts.withDefaults().badger(dir))
	require.NoError(t, err)
	require.NoError(t, db.Update(func(txn *badger.Txn) error {
		if err := txn.Set(ownKeys.user([]byte("a")), []byte("1")); err != nil {
			return err
		}
		return txn.Set(legacyPositionKey, binary.BigEndian.AppendUint64(nil, 7))
	}))
	require.NoError(t, db.Close())

	s, err := OpenBadger(dir, opts)
	require.NoError(t, err)
	pos, err := s.Position()
	require.NoError(t, err)
	require.Equal(t, int64(7), pos)
	require.NoError(t, s.Write([]Entry{{Key: []byte("b"), Value: []byte("2")}}, 8))
	require.NoError(t, s.Close())

	s, err = OpenBadger(dir, opts)
	require.NoError(t, err)
	pos, err = s.Position()
	require.NoError(t, err)
	require.Equal(t, int64(8), pos)
	require.False(t, s.(*badgerStore).legacyPos, "the old record is gone")
	for _, k := range []string{"a", "b"} {
		_, found, err := s.Get([]byte(k))
		require.NoError(t, err)
		require.True(t, found, k)
	}
	it, err := s.All()
	require.NoError(t, err)
	n := 0
	for it.Next() {
		n++
	}
	require.NoError(t, it.Close())
	require.Equal(t, 2, n, "the position is no user key")
	require.NoError(t, s.Close())

	// An older binary opens the store, sees no position of its own and
	// writes one: the next open of this binary takes the older binary's.
	db, err = badger.Open(opts.withDefaults().badger(dir))
	require.NoError(t, err)
	require.NoError(t, db.Update(func(txn *badger.Txn) error {
		return txn.Set(legacyPositionKey, binary.BigEndian.AppendUint64(nil, 5))
	}))
	require.NoError(t, db.Close())
	s, err = OpenBadger(dir, opts)
	require.NoError(t, err)
	pos, err = s.Position()
	require.NoError(t, err)
	require.Equal(t, int64(5), pos, "the record an older binary wrote last wins")
	require.NoError(t, s.Write([]Entry{{Key: []byte("c"), Value: []byte("3")}}, 6))
	require.NoError(t, s.Close())
	s, err = OpenBadger(dir, opts)
	require.NoError(t, err)
	pos, err = s.Position()
	require.NoError(t, err)
	require.Equal(t, int64(6), pos)
	require.False(t, s.(*badgerStore).legacyPos)
	require.NoError(t, s.Close())
}

// TestBadgerDiskSize: a store with a DB of its own counts its files, which
// grow with what it holds; one in a shared DB answers without error, and a
// closed store refuses.
func TestBadgerDiskSize(t *testing.T) {
	s, err := OpenBadger(t.TempDir(), testBadgerOptions())
	require.NoError(t, err)
	empty, err := s.(Sizer).DiskSize()
	require.NoError(t, err)
	require.Positive(t, empty, "badger's manifest and value log exist from the start")
	// More than the memtable log allocated from the start (see
	// preallocator) holds.
	value := bytes.Repeat([]byte("v"), 4096)
	for b := range 10 {
		var entries []Entry
		for i := range 200 {
			entries = append(entries, Entry{Key: []byte(fmt.Sprint("k", b, "-", i)), Value: value})
		}
		require.NoError(t, s.Write(entries, int64(b)))
	}
	full, err := s.(Sizer).DiskSize()
	require.NoError(t, err)
	require.Greater(t, full, empty+1000*4096, "the values written are on disk")
	require.NoError(t, s.Close())
	_, err = s.(Sizer).DiskSize()
	require.ErrorIs(t, err, ErrClosed)

	d, err := OpenSharedBadger(t.TempDir(), testBadgerOptions())
	require.NoError(t, err)
	defer d.Close()
	shared, err := d.Open("a")
	require.NoError(t, err)
	defer shared.Close()
	_, err = shared.(Sizer).DiskSize()
	require.NoError(t, err)
}

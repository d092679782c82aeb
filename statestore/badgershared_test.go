package statestore

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"
)

// rawKeys counts the badger keys of d under prefix, whoever's they are.
func rawKeys(t *testing.T, d *SharedBadger, prefix []byte) int {
	t.Helper()
	n := 0
	require.NoError(t, d.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	}))
	return n
}

// waitSwept waits for d to have deleted the keys of every store dropped
// or reset.
func waitSwept(t *testing.T, d *SharedBadger) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; {
		d.mu.Lock()
		n := len(d.dropping)
		d.mu.Unlock()
		if n == 0 && rawKeys(t, d, dropsPrefix) == 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "%d dropped stores not swept", n)
		time.Sleep(10 * time.Millisecond)
	}
}

func sharedID(t *testing.T, d *SharedBadger, name string) uint32 {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	id, ok := d.ids[name]
	require.True(t, ok, "store %q is in the catalog", name)
	return id
}

func words(n int, value string) []Entry {
	es := make([]Entry, n)
	for i := range es {
		es[i] = Entry{Key: fmt.Appendf(nil, "word-%05d", i), Value: fmt.Appendf(nil, "%s %d", value, i)}
	}
	return es
}

func requirePosition(t *testing.T, s Store, want int64) {
	t.Helper()
	pos, err := s.Position()
	require.NoError(t, err)
	require.Equal(t, want, pos)
}

// Stores of one shared DB holding the same keys keep their own values and
// positions through writes, a reset, a drop and a reopen of the DB, and a
// reset or a drop leaves no key behind under the store's old prefix.
func TestSharedStoresAreIndependent(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenSharedBadger(dir, testBadgerOptions())
	require.NoError(t, err)
	a, err := d.Open("0_1/counts")
	require.NoError(t, err)
	b, err := d.Open("0_2/counts")
	require.NoError(t, err)
	_, err = d.Open("0_1/counts")
	require.Error(t, err, "a store is open once at a time")
	require.NoError(t, a.Write(words(500, "a"), 10))
	require.NoError(t, b.Write(words(300, "b"), 20))
	requirePosition(t, a, 10)
	requirePosition(t, b, 20)

	oldA := sharedID(t, d, "0_1/counts")
	require.NoError(t, a.Reset())
	require.Empty(t, collectAll(t, a))
	requirePosition(t, a, NoPosition)
	waitSwept(t, d)
	require.Zero(t, rawKeys(t, d, storeNS(oldA)), "the reset store's old keys are deleted")
	require.NotEqual(t, oldA, sharedID(t, d, "0_1/counts"))
	require.Len(t, collectAll(t, b), 300)
	requirePosition(t, b, 20)
	require.NoError(t, a.Write(words(2, "again"), 3))

	require.NoError(t, d.Close())
	_, _, err = a.Get([]byte("word-00000"))
	require.ErrorIs(t, err, ErrClosed, "closing the DB closes its stores")

	d, err = OpenSharedBadger(dir, testBadgerOptions())
	require.NoError(t, err)
	defer d.Close()
	require.Equal(t, []string{"0_1/counts", "0_2/counts"}, d.Stores())
	a, err = d.Open("0_1/counts")
	require.NoError(t, err)
	require.Equal(t, []kv{{"word-00000", "again 0"}, {"word-00001", "again 1"}}, collectAll(t, a))
	requirePosition(t, a, 3)
	require.Error(t, d.Drop("0_1/counts"), "an open store cannot be dropped")
	require.NoError(t, a.Close())

	idA := sharedID(t, d, "0_1/counts")
	require.NoError(t, d.Drop("0_1/counts", "never-there"))
	require.Equal(t, []string{"0_2/counts"}, d.Stores())
	waitSwept(t, d)
	require.Zero(t, rawKeys(t, d, storeNS(idA)))

	a, err = d.Open("0_1/counts")
	require.NoError(t, err)
	require.Empty(t, collectAll(t, a))
	requirePosition(t, a, NoPosition)
	b, err = d.Open("0_2/counts")
	require.NoError(t, err)
	got := collectAll(t, b)
	require.Len(t, got, 300)
	require.Equal(t, kv{"word-00299", "b 299"}, got[299])
	requirePosition(t, b, 20)
}

// A drop cut short by a crash, after the catalog lost the store and before
// its keys were gone, is finished after the next open.
func TestSharedDropResumesOnOpen(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenSharedBadger(dir, testBadgerOptions())
	require.NoError(t, err)
	s, err := d.Open("gone")
	require.NoError(t, err)
	require.NoError(t, s.Write(words(1000, "v"), 1))
	require.NoError(t, s.Close())
	id := sharedID(t, d, "gone")
	// What Drop commits before it drops the keys.
	require.NoError(t, d.update(func(txn *badger.Txn) error {
		if err := txn.Delete(catalogKey("gone")); err != nil {
			return err
		}
		return txn.Set(dropKey(id), nil)
	}))
	require.NoError(t, d.Close())

	d, err = OpenSharedBadger(dir, testBadgerOptions())
	require.NoError(t, err)
	defer d.Close()
	require.Empty(t, d.Stores())
	waitSwept(t, d)
	require.Zero(t, rawKeys(t, d, storeNS(id)))
}

// Has answers from the catalog: a store opened once is held, closed or
// not, and across a reopening of the DB, until it is dropped.
func TestSharedHas(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenSharedBadger(dir, testBadgerOptions())
	require.NoError(t, err)
	require.False(t, d.Has("a"))
	s, err := d.Open("a")
	require.NoError(t, err)
	require.True(t, d.Has("a"))
	require.NoError(t, s.Close())
	require.NoError(t, d.Close())

	d, err = OpenSharedBadger(dir, testBadgerOptions())
	require.NoError(t, err)
	defer d.Close()
	require.True(t, d.Has("a"))
	require.False(t, d.Has("b"))
	require.NoError(t, d.Drop("a"))
	require.False(t, d.Has("a"))
}

// Badger refuses every write while a DropPrefix runs, whatever its keys.
// Resets and drops of some stores, and a window store's segment drops,
// must not fail the writes of the others.
func TestSharedDropsLeaveOtherWritersAlone(t *testing.T) {
	d, err := OpenSharedBadger(t.TempDir(), testBadgerOptions())
	require.NoError(t, err)
	defer d.Close()
	w, err := d.Open("writer")
	require.NoError(t, err)
	stop := make(chan struct{})
	errs := make(chan error, 1)
	var writes sync.WaitGroup
	writes.Add(1)
	go func() {
		defer writes.Done()
		for pos := int64(0); ; pos++ {
			select {
			case <-stop:
				errs <- nil
				return
			default:
			}
			err := w.Write([]Entry{{Key: fmt.Appendf(nil, "k%d", pos%100), Value: []byte("v")}}, pos)
			if err == nil {
				err = w.Put([]byte("put"), []byte("v"))
			}
			if err != nil {
				errs <- err
				return
			}
		}
	}()
	reset, err := d.Open("reset")
	require.NoError(t, err)
	segments, err := d.Open("segments")
	require.NoError(t, err)
	deadline := time.Now().Add(60 * time.Second)
	for i := range 15 {
		require.True(t, time.Now().Before(deadline), "drops too slow")
		name := fmt.Sprintf("dropped-%d", i)
		s, err := d.Open(name)
		require.NoError(t, err)
		require.NoError(t, s.Write(words(200, "v"), 1))
		require.NoError(t, s.Close())
		require.NoError(t, d.Drop(name))

		require.NoError(t, reset.Write(words(200, "v"), int64(i)))
		require.NoError(t, reset.Reset())

		require.NoError(t, segments.Put([]byte{byte(i), 'x'}, []byte("v")))
		require.NoError(t, segments.(prefixDropper).dropPrefix([]byte{byte(i)}))
	}
	close(stop)
	writes.Wait()
	require.NoError(t, <-errs, "a writer of another store failed during a drop")
	n, err := segments.ApproximateCount()
	require.NoError(t, err)
	require.Zero(t, n)
	waitSwept(t, d)
	require.Equal(t, []string{"reset", "segments", "writer"}, d.Stores())
	require.Positive(t, rawKeys(t, d, storeNS(sharedID(t, d, "writer"))))
	ids := make(map[uint32]bool)
	for _, name := range d.Stores() {
		ids[sharedID(t, d, name)] = true
	}
	for id := range d.next {
		if !ids[id] {
			require.Zero(t, rawKeys(t, d, storeNS(id)), "keys of dropped store %d", id)
		}
	}
}

// Commit writes several stores' entries and positions, a group in one
// transaction or, too big for one, store by store.
func TestSharedCommit(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenSharedBadger(dir, testBadgerOptions())
	require.NoError(t, err)
	defer d.Close()
	var stores []Store
	for _, name := range []string{"c", "a", "b"} {
		s, err := d.Open(name)
		require.NoError(t, err)
		stores = append(stores, s)
	}
	require.NoError(t, d.Commit([]StoreWrite{
		{Store: stores[0], Entries: words(10, "c"), Position: 100},
		{Store: stores[1], Entries: words(20, "a"), Position: 200},
		{Store: stores[2], Entries: []Entry{{Key: []byte("x"), Value: []byte("y")}, {Key: []byte("x")}}, Position: 300},
	}))
	for i, want := range []struct {
		n   int
		pos int64
	}{{10, 100}, {20, 200}, {0, 300}} {
		require.Len(t, collectAll(t, stores[i]), want.n)
		requirePosition(t, stores[i], want.pos)
	}

	// 3 x 3,000 entries of 100 bytes: beyond one transaction of a DB
	// with 2 MiB memtables, and each beyond one of its own (torn).
	big := func(tag string) []Entry {
		es := words(3000, tag)
		for i := range es {
			es[i].Value = bytes.Repeat([]byte(tag), 100)
		}
		return es
	}
	require.NoError(t, d.Commit([]StoreWrite{
		{Store: stores[0], Entries: big("c"), Position: 101},
		{Store: stores[1], Entries: big("a"), Position: 201},
		{Store: stores[2], Entries: big("b"), Position: 301},
	}))
	for i, tag := range []string{"c", "a", "b"} {
		got := collectAll(t, stores[i])
		require.Len(t, got, 3000)
		require.Equal(t, string(bytes.Repeat([]byte(tag), 100)), got[2999].v)
		requirePosition(t, stores[i], int64(101+100*i))
	}

	// 12 parts of 30 KB: more than one transaction together, written
	// store by store as one group, in a transaction each as 12 groups.
	var many []StoreWrite
	for i := range 12 {
		s, err := d.Open(fmt.Sprintf("many-%02d", i))
		require.NoError(t, err)
		es := words(250, "m")
		for j := range es {
			es[j].Value = bytes.Repeat([]byte{byte(i)}, 100)
		}
		many = append(many, StoreWrite{Store: s, Entries: es, Position: int64(i)})
	}
	require.NoError(t, d.Commit(many))
	var groups [][]StoreWrite
	for i, w := range many {
		got := collectAll(t, w.Store)
		require.Len(t, got, 250)
		require.Equal(t, string(bytes.Repeat([]byte{byte(i)}, 100)), got[249].v)
		requirePosition(t, w.Store, int64(i))
		w.Entries = []Entry{{Key: []byte("word-00000")}}
		w.Position += 100
		groups = append(groups, []StoreWrite{w})
	}
	require.NoError(t, d.Commit(groups...))
	for i, w := range many {
		require.Len(t, collectAll(t, w.Store), 249)
		requirePosition(t, w.Store, int64(100+i))
	}

	require.Error(t, d.Commit([]StoreWrite{{Store: stores[0]}}, []StoreWrite{{Store: stores[0]}}), "a store twice")
	other := openTestBadger(t, t.TempDir(), testBadgerOptions())
	require.Error(t, d.Commit([]StoreWrite{{Store: other}}), "a store of another DB")
	require.True(t, d.Holds(stores[0]))
	require.False(t, d.Holds(other))
	require.False(t, d.Holds(NewMemory()))
	require.NoError(t, stores[2].Close())
	require.ErrorIs(t, d.Commit([]StoreWrite{{Store: stores[0], Position: 5}, {Store: stores[2], Position: 5}}), ErrClosed)
	requirePosition(t, stores[0], 101)
}

// Import moves a store with a DB of its own, long keys, an empty value,
// its position and its torn-write marker included, into a shared DB and
// deletes its directory. An import repeated after a crash that left the
// directory behind only deletes it.
func TestSharedImport(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "0_1", "counts")
	long := bytes.Repeat([]byte("l"), 70_000)
	old, err := OpenBadger(dir, testBadgerOptions())
	require.NoError(t, err)
	es := append(words(2500, "old"), Entry{Key: long, Value: []byte("long")}, Entry{Key: []byte("empty"), Value: []byte{}})
	require.NoError(t, old.Write(es, 42))
	require.NoError(t, old.(*badgerStore).markTorn(50))
	require.NoError(t, old.Close())
	copyStore(t, dir, filepath.Join(root, "copy"))

	d, err := OpenSharedBadger(filepath.Join(root, "shared"), testBadgerOptions())
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, d.Import("0_1/counts", dir, testBadgerOptions()))
	_, err = os.Stat(dir)
	require.ErrorIs(t, err, os.ErrNotExist, "the imported store's directory is deleted")
	require.NoError(t, d.Import("0_1/absent", filepath.Join(root, "absent"), testBadgerOptions()))
	require.Equal(t, []string{"0_1/counts"}, d.Stores())

	check := func() {
		t.Helper()
		s, err := d.Open("0_1/counts")
		require.NoError(t, err)
		defer s.Close()
		requirePosition(t, s, 42)
		target, torn := TornUntil(s)
		require.True(t, torn)
		require.Equal(t, int64(50), target)
		got := collectAll(t, s)
		require.Len(t, got, 2502)
		require.Equal(t, kv{"empty", ""}, got[0])
		v, found, err := s.Get(long)
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, "long", string(v))
		v, found, err = s.Get([]byte("word-02499"))
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, "old 2499", string(v))
	}
	check()
	require.Zero(t, rawKeys(t, d, dropsPrefix))

	// The copy stands for the directory a crash after the import's
	// commit left behind.
	s, err := d.Open("0_1/counts")
	require.NoError(t, err)
	require.NoError(t, s.Write([]Entry{{Key: []byte("new"), Value: []byte("v")}}, 51))
	require.NoError(t, s.Close())
	require.NoError(t, d.Import("0_1/counts", filepath.Join(root, "copy"), testBadgerOptions()))
	_, err = os.Stat(filepath.Join(root, "copy"))
	require.ErrorIs(t, err, os.ErrNotExist)
	s, err = d.Open("0_1/counts")
	require.NoError(t, err)
	requirePosition(t, s, 51)
	require.Len(t, collectAll(t, s), 2503)
	require.NoError(t, s.Close())
}

// A damaged table fails the open of the whole shared DB with ErrCorrupt:
// opening without it would lose keys of stores no one could name.
func TestSharedOpenRefusesDamagedTable(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenSharedBadger(dir, testBadgerOptions())
	require.NoError(t, err)
	for _, name := range []string{"a", "b"} {
		s, err := d.Open(name)
		require.NoError(t, err)
		require.NoError(t, s.Write(words(3000, name), 1))
	}
	require.NoError(t, d.Close())
	tables, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	require.NoError(t, err)
	require.NotEmpty(t, tables)
	f, err := os.OpenFile(tables[0], os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("garbage garbage garbage garbage!"), 200)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	_, err = OpenSharedBadger(dir, testBadgerOptions())
	require.ErrorIs(t, err, ErrCorruptTable)
	require.ErrorIs(t, err, ErrCorrupt)
}

// A damaged record of one store fails that store's open alone, with
// ErrCorrupt; dropping it lets it open empty, its neighbours untouched.
func TestSharedDamagedStoreRecord(t *testing.T) {
	d, err := OpenSharedBadger(t.TempDir(), testBadgerOptions())
	require.NoError(t, err)
	defer d.Close()
	for _, name := range []string{"a", "b"} {
		s, err := d.Open(name)
		require.NoError(t, err)
		require.NoError(t, s.Write(words(10, name), 7))
		require.NoError(t, s.Close())
	}
	ks := newKeyspace(storeNS(sharedID(t, d, "a")))
	require.NoError(t, d.update(func(txn *badger.Txn) error { return txn.Set(ks.position, []byte("bad")) }))

	_, err = d.Open("a")
	require.ErrorIs(t, err, ErrCorrupt)
	b, err := d.Open("b")
	require.NoError(t, err)
	requirePosition(t, b, 7)
	require.NoError(t, d.Drop("a"))
	a, err := d.Open("a")
	require.NoError(t, err)
	requirePosition(t, a, NoPosition)
	require.Empty(t, collectAll(t, a))
}

// Value-log garbage collection runs once for the whole DB, while its
// stores are open and read: it rewrites and deletes value-log files, and
// every store's latest values stay readable.
func TestSharedValueLogGC(t *testing.T) {
	o := testBadgerOptions()
	o.ValueLogFileSize = 1 << 20
	o.ValueLogGCInterval = -1
	// Badger finds garbage as it compacts: compact after two flushes.
	o.NumLevelZeroTables = 2
	o.NumLevelZeroTablesStall = 8
	dir := t.TempDir()
	big := func(gen, i int) []byte { return bytes.Repeat([]byte{byte(gen), byte(i)}, 10_000) }
	var d *SharedBadger
	open := func() []Store {
		var stores []Store
		for _, name := range []string{"a", "b"} {
			s, err := d.Open(name)
			require.NoError(t, err)
			stores = append(stores, s)
		}
		return stores
	}
	// Each generation of values goes to tables of its own: a reopen
	// flushes the memtable.
	for gen := range 4 {
		var err error
		d, err = OpenSharedBadger(dir, o)
		require.NoError(t, err)
		for _, s := range open() {
			for i := range 50 {
				require.NoError(t, s.Put(fmt.Appendf(nil, "k%02d", i), big(gen, i)))
			}
		}
		require.NoError(t, d.Close())
	}
	var err error
	d, err = OpenSharedBadger(dir, o)
	require.NoError(t, err)
	defer d.Close()
	stores := open()
	get := func() {
		t.Helper()
		for _, s := range stores {
			for i := range 50 {
				v, found, err := s.Get(fmt.Appendf(nil, "k%02d", i))
				require.NoError(t, err)
				require.True(t, found)
				require.True(t, bytes.Equal(big(3, i), v))
			}
		}
	}
	// Until compactions have found garbage, there is nothing to rewrite.
	for deadline := time.Now().Add(60 * time.Second); ; {
		get() // the stores keep a shared read transaction
		err := d.collectGarbage()
		if err == nil {
			break
		}
		require.ErrorIs(t, err, badger.ErrNoRewrite)
		require.True(t, time.Now().Before(deadline), "no value-log file to rewrite")
		time.Sleep(20 * time.Millisecond)
	}
	get()
	for range 20 {
		get()
		if err := d.collectGarbage(); err != nil {
			require.ErrorIs(t, err, badger.ErrNoRewrite)
			break
		}
	}
	get()
}

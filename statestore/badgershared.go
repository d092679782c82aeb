package statestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// A shared badger DB holds many stores in one directory, each under a key
// prefix of its own, so that an instance pays for one set of memtables,
// compactors, files and memory maps rather than one per store. Its keys:
//
//	00 'c' name          -> id (4 bytes): the catalog of stores
//	00 'd' id            -> (empty): a store's keys being dropped
//	01 id  <store keys>  a store's keys, laid out as in a DB of its own
//	                     (see badgerkeys.go) after the 5-byte prefix
//
// A store's position is one of its keys, so it commits with the store's
// data as in a DB of its own, and Commit can write a group of stores'
// data and positions (a task's) in one transaction.
//
// Reset and Drop move a store off its prefix in one transaction (Reset
// gives the name a new id, Drop removes the name) that also records the
// old id as being dropped. Readers of a store never see a mix: the switch
// of prefix is one transaction, and no reader reads an old prefix after
// it. A goroutine of the DB then deletes the old keys, a tombstone each,
// and the record; a crash or a Close before it is done leaves the record,
// and the next open resumes.
//
// Badger's DropPrefix would remove them without tombstones, but it
// flushes the memtables and compacts all of level 0 into level 1, refusing
// every write of every store meanwhile (ErrBlockedWrites): its cost grows
// with the whole DB, not with the store dropped, and every store waits.
// Tombstones cost the dropped store's size in writes, off every store's
// path; compaction reclaims them with the keys. A window store's expired segments (see SegmentedStore) are
// deleted the same way, synchronously.
//
// Damage. The DB's table files are verified when it opens, as a store's
// are (see checkTables). A damaged table fails the open of the whole DB
// with an error wrapping ErrCorrupt: which stores the table held is
// written in the table itself, and opening without it would silently lose
// their keys. Every store in the DB must then be rebuilt: delete the
// directory (DestroyBadger) and restore each store from its changelog. A
// record of one store that does not parse (its position, a torn or staged
// write's marker) fails only that store's Open, with ErrCorrupt; Drop
// removes that one store.
const (
	sharedCatalog byte = 0x00
	sharedStores  byte = 0x01
)

var (
	catalogPrefix = []byte{sharedCatalog, 'c'}
	dropsPrefix   = []byte{sharedCatalog, 'd'}
)

// storeNS is the prefix of the keys of the store with the given id.
func storeNS(id uint32) []byte { return binary.BigEndian.AppendUint32([]byte{sharedStores}, id) }

func dropKey(id uint32) []byte {
	return binary.BigEndian.AppendUint32(append([]byte{}, dropsPrefix...), id)
}

func catalogKey(name string) []byte { return append(append([]byte{}, catalogPrefix...), name...) }

// DefaultSharedBadgerOptions returns the options OpenSharedBadger uses for
// zero fields. Where DefaultBadgerOptions keeps each of many DBs small, one
// DB holds every store of an instance under one memory budget, and what
// it holds in the Go heap is sized for an instance of many keys:
//
//   - 4 MiB memtables, ~5.3 MiB of arena each: the one written, and up
//     to NumMemtables (2) full ones queued while another is flushed. One
//     transaction holds 15% of a memtable, ~630 KB or 6,550 small
//     entries: a changelog reader's batch (3,000 records) fits; a larger
//     store write is torn (badgertorn.go).
//   - 512 KiB base tables. Badger builds every table in a buffer of twice
//     the level's table size that grows to the table (a level-0 table is
//     a whole memtable), keeps up to 8 such buffers for reuse, whatever
//     their size, and builds 8 or more tables at once in a compaction.
//     These buffers dominated the Go heap at the peak of 12 tasks counting
//     4,000,000 keys (eddybench -only c): 96-164 MiB with 16 MiB
//     memtables and 2 MiB tables, 37-44 MiB with these sizes (and a peak
//     RSS of 495-513 MiB against 587-692 MiB). The price is about twice
//     as many tables, and descriptors, as 1 MiB tables (a table per
//     ~0.5-1 MiB of data), and four times as many flushes.
//   - Level 0 compacted at 10 tables, writes stalled at 20, into a base
//     level of 8 MiB. Under new keys every level-0 table spans every
//     store's newest keys, so a compaction of level 0 rewrites every table
//     of the level it goes into: the bottom level while that holds at most
//     BaseLevelSize, then a level above it, which stays near BaseLevelSize
//     and goes down a table at a time. Ten tables rather than five halve
//     those rewrites, 8 MiB rather than 32 bounds each: two writers
//     committing new keys to 12 stores (BenchmarkSharedCountNewKeys),
//     alternating with 5 tables and 32 MiB, made a third fewer tables and
//     spent 3,829-3,861 against 4,138-4,581 ns of CPU per key at
//     4,000,000 keys (2,774-2,824 against 2,712-3,026 at 1,000,000),
//     peaking at 284-296 against 316-325 MiB.
func DefaultSharedBadgerOptions() BadgerOptions {
	o := DefaultBadgerOptions()
	o.MemTableSize = 4 << 20
	o.NumMemtables = 2
	o.BaseTableSize = 512 << 10
	o.BaseLevelSize = 8 << 20
	o.NumLevelZeroTables = 10
	o.NumLevelZeroTablesStall = 20
	return o
}

// SharedBadger is a badger DB in one directory holding many stores, each
// under a key prefix of its own (see the notes above). Its stores behave as
// stores opened with OpenBadger do, Reset included; closing one leaves the
// DB open. Only one process may hold the directory open at a time.
type SharedBadger struct {
	db    *badger.DB
	dir   string
	opts  BadgerOptions
	alloc *preallocator

	// mu guards the catalog as held in memory and the open stores. It is
	// taken before any store's locks, never after.
	mu     sync.Mutex
	ids    map[string]uint32
	next   uint32
	stores map[string]*badgerStore
	shut   bool
	// dropping holds the ids whose keys are to be deleted, in the order
	// they were dropped; the sweeper deletes them.
	dropping []uint32

	stop      chan struct{} // closed by Close
	sweepWake chan struct{}
	gcDone    chan struct{}
	sweepDone chan struct{}
}

// OpenSharedBadger opens (creating if needed) a shared badger DB in dir,
// with DefaultSharedBadgerOptions for zero fields of opts. The deletion of
// dropped stores' keys that a crash or Close interrupted resumes in the
// background. Its errors are
// classified as OpenBadger's are: ErrCorrupt on proof of damage, a
// *MachineError or a *DiskFullError for the machine's.
func OpenSharedBadger(dir string, opts BadgerOptions) (*SharedBadger, error) {
	opts = opts.sharedDefaults().withDefaults()
	db, err := openBadgerDB(dir, opts)
	if err != nil {
		return nil, err
	}
	d := &SharedBadger{
		db:        db,
		dir:       dir,
		opts:      opts,
		ids:       make(map[string]uint32),
		stores:    make(map[string]*badgerStore),
		stop:      make(chan struct{}),
		sweepWake: make(chan struct{}, 1),
		gcDone:    make(chan struct{}),
		sweepDone: make(chan struct{}),
	}
	if err := d.readCatalog(); err != nil {
		_ = db.Close()
		return nil, openError(dir, opts.DiskReserve, err)
	}
	d.alloc = startPrealloc(dir, opts)
	go d.sweepLoop()
	d.wakeSweeper()
	if opts.ValueLogGCInterval > 0 {
		go d.gcLoop(opts.ValueLogGCInterval)
	} else {
		close(d.gcDone)
	}
	return d, nil
}

// sharedDefaults fills the zero fields of o that DefaultSharedBadgerOptions
// sets apart from DefaultBadgerOptions.
func (o BadgerOptions) sharedDefaults() BadgerOptions {
	d := DefaultSharedBadgerOptions()
	if o.MemTableSize == 0 {
		o.MemTableSize = d.MemTableSize
	}
	if o.NumMemtables == 0 {
		o.NumMemtables = d.NumMemtables
	}
	if o.BaseTableSize == 0 {
		o.BaseTableSize = d.BaseTableSize
	}
	if o.BaseLevelSize == 0 {
		o.BaseLevelSize = d.BaseLevelSize
	}
	if o.NumLevelZeroTables == 0 {
		o.NumLevelZeroTables = d.NumLevelZeroTables
	}
	if o.NumLevelZeroTablesStall == 0 {
		o.NumLevelZeroTablesStall = d.NumLevelZeroTablesStall
	}
	return o
}

// readCatalog loads the catalog and the ids being dropped.
func (d *SharedBadger) readCatalog() error {
	next := uint64(0)
	err := d.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{sharedCatalog}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			var id uint32
			switch {
			case slices.Equal(k[:2], catalogPrefix):
				err := it.Item().Value(func(v []byte) error {
					if len(v) != 4 {
						return fmt.Errorf("%w: catalog entry of %d bytes for store %q", ErrCorrupt, len(v), k[2:])
					}
					id = binary.BigEndian.Uint32(v)
					return nil
				})
				if err != nil {
					return err
				}
				d.ids[string(k[2:])] = id
			case slices.Equal(k[:2], dropsPrefix) && len(k) == 6:
				id = binary.BigEndian.Uint32(k[2:])
				d.dropping = append(d.dropping, id)
			default:
				return fmt.Errorf("%w: unknown catalog key %q", ErrCorrupt, k)
			}
			next = max(next, uint64(id)+1)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("statestore: read the catalog of shared badger %s: %w", d.dir, err)
	}
	if next > math.MaxUint32 {
		return fmt.Errorf("statestore: shared badger %s: store ids exhausted", d.dir)
	}
	d.next = uint32(next)
	return nil
}

// dropPrefix removes every key of db with prefix (see badgerStore's
// dropPrefix): with DropPrefix in a DB of the store's own (d is nil), with
// tombstones in d (see the notes above).
func (d *SharedBadger) dropPrefix(db *badger.DB, prefix []byte) error {
	if d == nil {
		return db.DropPrefix(prefix)
	}
	_, err := d.deleteKeys(prefix, nil)
	return err
}

// update runs one write transaction.
func (d *SharedBadger) update(f func(txn *badger.Txn) error) error { return d.db.Update(f) }

// newID returns an id no store has used since the DB was opened. Called
// with mu held.
func (d *SharedBadger) newID() (uint32, error) {
	if d.next == math.MaxUint32 {
		return 0, fmt.Errorf("statestore: shared badger %s: store ids exhausted", d.dir)
	}
	d.next++
	return d.next - 1, nil
}

// Open opens the store called name, creating it empty if the DB does not
// hold it. A store is open at most once at a time.
func (d *SharedBadger) Open(name string) (Store, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.shut {
		return nil, ErrClosed
	}
	if _, ok := d.stores[name]; ok {
		return nil, fmt.Errorf("statestore: store %q of shared badger %s is already open", name, d.dir)
	}
	id, ok := d.ids[name]
	if !ok {
		var err error
		if id, err = d.newID(); err != nil {
			return nil, err
		}
		err = d.update(func(txn *badger.Txn) error {
			return txn.Set(catalogKey(name), binary.BigEndian.AppendUint32(nil, id))
		})
		if err != nil {
			return nil, diskError(d.dir, d.opts.DiskReserve, fmt.Errorf("statestore: create store %q in shared badger %s: %w", name, d.dir, err))
		}
		d.ids[name] = id
	}
	s := d.store(name, id)
	err := s.load()
	if err != nil {
		return nil, diskError(d.dir, d.opts.DiskReserve, fmt.Errorf("statestore: open store %q in shared badger %s: %w", name, d.dir, err))
	}
	d.stores[name] = s
	return s, nil
}

// store makes the store of name under id, not yet loaded.
func (d *SharedBadger) store(name string, id uint32) *badgerStore {
	s := &badgerStore{
		db:             d.db,
		dir:            d.dir,
		keys:           newKeyspace(storeNS(id)),
		home:           d,
		name:           name,
		opts:           d.opts,
		alloc:          d.alloc,
		valueThreshold: d.opts.ValueThreshold,
		iters:          make(map[*badgerIter]struct{}),
		stopGC:         make(chan struct{}),
		gcDone:         make(chan struct{}),
	}
	// The DB collects value-log garbage for all its stores.
	close(s.gcDone)
	return s
}

// closed forgets a store that has been closed.
func (d *SharedBadger) closed(s *badgerStore) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stores[s.name] == s {
		delete(d.stores, s.name)
	}
}

// reset empties s by moving it to a new id; see the notes above.
func (d *SharedBadger) reset(s *badgerStore) error {
	d.mu.Lock()
	s.mu.Lock()
	if s.closed || d.shut {
		s.mu.Unlock()
		d.mu.Unlock()
		return ErrClosed
	}
	s.releaseIters(ErrReset)
	s.dropShared()
	old := d.ids[s.name]
	id, err := d.newID()
	if err == nil {
		err = d.update(func(txn *badger.Txn) error {
			if err := txn.Set(catalogKey(s.name), binary.BigEndian.AppendUint32(nil, id)); err != nil {
				return err
			}
			return txn.Set(dropKey(old), nil)
		})
	}
	if err == nil {
		d.ids[s.name] = id
		d.dropping = append(d.dropping, old)
		s.keys = newKeyspace(storeNS(id))
		s.absent.Store(newKeyFilter())
		s.position.Store(NoPosition)
		s.torn.Store(NoPosition)
		s.failed.Store(nil)
	}
	s.mu.Unlock()
	d.mu.Unlock()
	if err != nil {
		// The store is still on its old prefix, as it was.
		return diskError(d.dir, d.opts.DiskReserve, fmt.Errorf("statestore: reset store %q of shared badger %s: %w", s.name, d.dir, err))
	}
	d.wakeSweeper()
	return nil
}

// Drop removes the named stores, in one transaction; their keys are
// deleted in the background (see the notes above). They must not be open;
// names the DB does not hold are skipped. It is how a
// task's stores are removed when the task leaves the instance, and how one
// store found damaged (see the notes above) is deleted.
func (d *SharedBadger) Drop(names ...string) error {
	d.mu.Lock()
	if d.shut {
		d.mu.Unlock()
		return ErrClosed
	}
	var ids []uint32
	for _, name := range names {
		if _, ok := d.stores[name]; ok {
			d.mu.Unlock()
			return fmt.Errorf("statestore: drop store %q of shared badger %s: it is open", name, d.dir)
		}
		if id, ok := d.ids[name]; ok {
			ids = append(ids, id)
		}
	}
	err := d.update(func(txn *badger.Txn) error {
		for _, name := range names {
			id, ok := d.ids[name]
			if !ok {
				continue
			}
			if err := txn.Delete(catalogKey(name)); err != nil {
				return err
			}
			if err := txn.Set(dropKey(id), nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		for _, name := range names {
			delete(d.ids, name)
		}
		d.dropping = append(d.dropping, ids...)
	}
	d.mu.Unlock()
	if err != nil {
		return diskError(d.dir, d.opts.DiskReserve, fmt.Errorf("statestore: drop stores of shared badger %s: %w", d.dir, err))
	}
	d.wakeSweeper()
	return nil
}

// Stores returns the names of the stores the DB holds, sorted.
func (d *SharedBadger) Stores() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	names := make([]string, 0, len(d.ids))
	for name := range d.ids {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Has reports whether the DB holds the store called name.
func (d *SharedBadger) Has(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.ids[name]
	return ok
}

// Dir returns the directory the DB is in.
func (d *SharedBadger) Dir() string { return d.dir }

// Holds reports whether s is a store of d, which Commit can write.
func (d *SharedBadger) Holds(s Store) bool {
	b, ok := s.(*badgerStore)
	return ok && b.home == d
}

func (d *SharedBadger) gcLoop(every time.Duration) {
	defer close(d.gcDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
		}
		for {
			if err := d.collectGarbage(); err != nil {
				if !errors.Is(err, badger.ErrNoRewrite) && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrDiskFull) {
					d.opts.Logger.Warn("statestore: badger value log GC failed", "dir", d.dir, "err", err)
				}
				break
			}
		}
	}
}

// collectGarbage runs one value-log GC, with every open store's shared
// read transaction ended for its duration (see badgerStore's
// collectGarbage); mu keeps stores from opening meanwhile.
func (d *SharedBadger) collectGarbage() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.shut {
		return ErrClosed
	}
	// As a store's collectGarbage.
	if err := roomFor(d.dir, d.opts.DiskReserve, d.alloc, d.opts.ValueLogFileSize); err != nil {
		return err
	}
	for _, s := range d.stores {
		s.beginChange()
		defer s.endChange()
	}
	return d.db.RunValueLogGC(0.5)
}

// Close closes the stores still open and then the DB. Closing twice is a
// no-op.
func (d *SharedBadger) Close() error {
	d.mu.Lock()
	if d.shut {
		d.mu.Unlock()
		return nil
	}
	d.shut = true
	open := make([]*badgerStore, 0, len(d.stores))
	for _, s := range d.stores {
		open = append(open, s)
	}
	d.mu.Unlock()
	close(d.stop)
	<-d.gcDone
	<-d.sweepDone
	var errs []error
	for _, s := range open {
		errs = append(errs, s.Close())
	}
	d.alloc.stop()
	if err := closeWhenRoom(d.db, d.dir, d.opts); err != nil {
		errs = append(errs, fmt.Errorf("statestore: close shared badger %s: %w", d.dir, err))
	}
	return errors.Join(errs...)
}

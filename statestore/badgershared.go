package statestore

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
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

// deleteKeys deletes every key with prefix, in batches of sweepBatch keys,
// and reports whether it got to the end: it stops early once stop is
// closed. Given a stop (the sweeper), it waits for room before each batch
// (waitRoom).
func (d *SharedBadger) deleteKeys(prefix []byte, stop <-chan struct{}) (bool, error) {
	// Each batch starts after the last key deleted: from the prefix, it
	// would read every tombstone written so far again.
	from := prefix
	for {
		select {
		case <-stop:
			return false, nil
		default:
		}
		if stop != nil && !d.waitRoom(stop) {
			return false, nil
		}
		var keys [][]byte
		err := d.db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
			defer it.Close()
			for it.Seek(from); it.Valid() && len(keys) < sweepBatch; it.Next() {
				keys = append(keys, it.Item().KeyCopy(nil))
			}
			return nil
		})
		if err != nil || len(keys) == 0 {
			return err == nil, err
		}
		from = append(bytes.Clone(keys[len(keys)-1]), 0)
		wb := d.db.NewWriteBatch()
		for _, k := range keys {
			if err := wb.Delete(k); err != nil {
				wb.Cancel()
				return false, err
			}
		}
		if err := wb.Flush(); err != nil {
			return false, err
		}
	}
}

// waitRoom waits until the DB may be written (roomFor), or stop is closed,
// and reports which. The sweeper's tombstones are writes like any other:
// on a full filesystem they would fill the memtable, whose next log and
// flushed table badger writes through maps of unallocated files.
func (d *SharedBadger) waitRoom(stop <-chan struct{}) bool {
	var logged time.Time
	for wait := closeWaitFirst; ; wait = min(2*wait, closeWaitMax) {
		err := roomFor(d.dir, d.opts.DiskReserve, d.alloc, 0)
		if err == nil {
			return true
		}
		if time.Since(logged) >= diskFullLogEvery {
			logged = time.Now()
			d.opts.Logger.Warn("disk full: the deletion of a dropped store's keys waits for space", "dir", d.dir, "err", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-stop:
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

// sweepBatch is how many keys of a dropped store one WriteBatch deletes.
const sweepBatch = 10_000

// update runs one write transaction.
func (d *SharedBadger) update(f func(txn *badger.Txn) error) error { return d.db.Update(f) }

// wakeSweeper has the sweeper look for work.
func (d *SharedBadger) wakeSweeper() {
	select {
	case d.sweepWake <- struct{}{}:
	default:
	}
}

// sweepLoop deletes the keys of dropped stores and then their drop
// records, until Close.
func (d *SharedBadger) sweepLoop() {
	defer close(d.sweepDone)
	for {
		select {
		case <-d.stop:
			return
		case <-d.sweepWake:
		}
		for {
			d.mu.Lock()
			if len(d.dropping) == 0 {
				d.mu.Unlock()
				break
			}
			id := d.dropping[0]
			d.mu.Unlock()
			done, err := d.deleteKeys(storeNS(id), d.stop)
			if err == nil && done {
				err = d.update(func(txn *badger.Txn) error { return txn.Delete(dropKey(id)) })
			}
			if err != nil {
				// The record stays: the next open retries.
				d.opts.Logger.Warn("statestore: cannot delete the keys of a dropped store", "dir", d.dir, "err", err)
				return
			}
			if !done {
				return
			}
			d.mu.Lock()
			d.dropping = d.dropping[1:]
			d.mu.Unlock()
		}
	}
}

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

// StoreWrite is one store's part of a Commit: what its Write would apply.
type StoreWrite struct {
	Store    Store
	Entries  []Entry
	Position int64
}

// Commit applies groups of writes, each write to a distinct store of d, as
// the stores' Writes would. A group (a task's stores, say) commits in one
// badger transaction, so a crash keeps all of it or none, unless it is too
// big for one (more than about 15% of MemTableSize): then each write in
// it is written as its store's Write would write it. The groups'
// transactions go to badger's write loop together, which writes them to
// its log at once, and Commit waits for all of them: committing a
// thread's tasks in one call costs less than one Write after another.
//
// Groups are not merged into one transaction: badger applies a
// transaction's entries to its memtable in no particular order (a map's),
// and the entries of thousands of stores, scattered that way over the
// memtable, cost markedly more to insert than the same entries store by
// store.
func (d *SharedBadger) Commit(groups ...[]StoreWrite) error {
	var ss []*badgerStore
	for _, g := range groups {
		for _, w := range g {
			s, ok := w.Store.(*badgerStore)
			if !ok || s.home != d {
				return fmt.Errorf("statestore: commit to shared badger %s: a store that is not one of its stores", d.dir)
			}
			ss = append(ss, s)
		}
	}
	// Stores are locked in name order, so commits of overlapping sets of
	// stores cannot deadlock.
	order := slices.Clone(ss)
	slices.SortFunc(order, func(a, b *badgerStore) int { return cmp.Compare(a.name, b.name) })
	for i := 1; i < len(order); i++ {
		if order[i] == order[i-1] {
			return fmt.Errorf("statestore: commit to shared badger %s: store %q written twice", d.dir, order[i].name)
		}
	}
	for i, s := range order {
		if err := s.enter(); err != nil {
			for _, s := range order[:i] {
				s.wmu.Unlock()
				s.exit()
			}
			return err
		}
		s.wmu.Lock()
	}
	defer func() {
		for _, s := range order {
			s.wmu.Unlock()
			s.exit()
		}
	}()
	var vlog int64
	for _, g := range groups {
		for _, w := range g {
			vlog += valueLogBytes(w.Entries, d.opts.ValueThreshold)
		}
	}
	if err := roomFor(d.dir, d.opts.DiskReserve, d.alloc, vlog); err != nil {
		return err
	}
	for _, s := range order {
		s.beginChange()
		defer s.endChange()
	}

	// Every group's transaction is made before the first is sent: badger
	// makes a new transaction wait until every one sent before it has
	// been applied, so making them one after another's commit would send
	// them one trip of the write loop apart.
	txns := make([]*badger.Txn, len(groups))
	ops := make([][][]op, len(groups))
	var err error
	first := 0 // of the group's stores in ss
	for i, g := range groups {
		gs := ss[first : first+len(g)]
		first += len(g)
		if txns[i], ops[i], err = d.groupTxn(gs, g); err != nil {
			break
		}
	}
	if err != nil {
		for _, txn := range txns {
			if txn != nil {
				txn.Discard()
			}
		}
		return err
	}
	var (
		wg   sync.WaitGroup
		errs = make([]error, len(groups))
	)
	for i, txn := range txns {
		if txn == nil {
			continue
		}
		wg.Add(1)
		txn.CommitWith(func(err error) {
			errs[i] = err
			wg.Done()
		})
	}
	wg.Wait()
	first = 0
	for i, g := range groups {
		gs := ss[first : first+len(g)]
		first += len(g)
		if txns[i] == nil {
			// Too big for one transaction: each store's write as its
			// Write would make it.
			for j, w := range g {
				err = cmp.Or(err, gs[j].writeOps(ops[i][j], w.Position))
			}
			continue
		}
		if errs[i] != nil {
			err = cmp.Or(err, diskError(d.dir, d.opts.DiskReserve, fmt.Errorf("statestore: badger write: %w", errs[i])))
			continue
		}
		for j, w := range g {
			gs[j].mended(w.Position)
			gs[j].position.Store(w.Position)
		}
	}
	return err
}

// groupTxn plans a group's writes and returns a transaction holding them,
// to commit, or none if they do not fit in one.
func (d *SharedBadger) groupTxn(ss []*badgerStore, g []StoreWrite) (*badger.Txn, [][]op, error) {
	ops := make([][]op, len(g))
	var count, size int64
	for i, w := range g {
		var err error
		if ops[i], err = ss[i].plan(w.Entries); err != nil {
			return nil, nil, diskError(d.dir, d.opts.DiskReserve, fmt.Errorf("statestore: badger write: %w", err))
		}
		c, s := ss[i].txnCost(ops[i])
		count, size = count+c, size+s
	}
	if count >= d.db.MaxBatchCount() || size >= d.db.MaxBatchSize() {
		return nil, ops, nil
	}
	txn := d.db.NewTransaction(true)
	for i, w := range g {
		es := entries(ops[i])
		err := ss[i].setPosition(txn, w.Position)
		for j := 0; j < len(ops[i]) && err == nil; j++ {
			err = setOp(txn, ops[i][j], &es[j])
		}
		if err != nil {
			txn.Discard()
			if errors.Is(err, badger.ErrTxnTooBig) {
				// The estimate fell short of badger's count.
				return nil, ops, nil
			}
			return nil, nil, fmt.Errorf("statestore: badger write: %w", err)
		}
	}
	return txn, ops, nil
}

// importBatch is how many entries Import copies per badger WriteBatch.
const importBatch = 1000

// Import moves the store in dir, a DB of its own opened with opts (see
// OpenBadger), into d as the store called name, then deletes dir: its keys, position and any
// torn-write marker are copied under a new prefix (a staged Write is
// finished first, as opening it does). It is the migration from one DB
// per store. The store must not be open, in d or in dir. If d already
// holds name, an earlier Import got as far as committing it: dir is only
// deleted. A crash during the copy leaves dir whole and the partial copy
// marked for dropping at the next open. A dir that does not exist is no
// error. An error opening dir (wrapping ErrCorrupt, say) is returned as it
// is: the store can then be deleted and rebuilt from its changelog.
func (d *SharedBadger) Import(name, dir string, opts BadgerOptions) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.shut {
		return ErrClosed
	}
	if _, ok := d.stores[name]; ok {
		return fmt.Errorf("statestore: import into store %q of shared badger %s: it is open", name, d.dir)
	}
	if _, ok := d.ids[name]; ok {
		return DestroyBadger(dir)
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	opts.ValueLogGCInterval = -1
	old, err := OpenBadger(dir, opts)
	if err != nil {
		return err
	}
	id, err := d.newID()
	marked := false
	if err == nil {
		err = d.update(func(txn *badger.Txn) error { return txn.Set(dropKey(id), nil) })
		marked = err == nil
	}
	if err == nil {
		err = d.copyStore(old.(*badgerStore), d.store(name, id), id)
	}
	switch {
	case err == nil:
		d.ids[name] = id
	case marked:
		d.dropping = append(d.dropping, id)
		d.wakeSweeper()
	}
	err = errors.Join(err, old.Close())
	if err != nil {
		return fmt.Errorf("statestore: import %s into store %q of shared badger %s: %w", dir, name, d.dir, err)
	}
	return DestroyBadger(dir)
}

// copyStore copies from's keys into to, a store of d under id, then, in
// one transaction, its records, to's catalog entry and the removal of
// to's drop record.
func (d *SharedBadger) copyStore(from, to *badgerStore, id uint32) error {
	it, err := from.All()
	if err != nil {
		return err
	}
	defer it.Close()
	batch := make([]Entry, 0, importBatch)
	flush := func() error {
		ops, err := to.plan(batch)
		if err == nil {
			err = to.writeBatch(ops)
		}
		batch = batch[:0]
		return err
	}
	for it.Next() {
		batch = append(batch, Entry{Key: bytes.Clone(it.Key()), Value: bytes.Clone(it.Value())})
		if len(batch) == importBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	if err := flush(); err != nil {
		return err
	}
	pos, err := from.Position()
	if err != nil {
		return err
	}
	torn, isTorn := from.TornUntil()
	return d.update(func(txn *badger.Txn) error {
		if pos != NoPosition {
			if err := txn.Set(to.keys.position, binary.BigEndian.AppendUint64(nil, uint64(pos))); err != nil {
				return err
			}
		}
		if isTorn {
			if err := txn.Set(to.keys.torn, encodeTorn(torn)); err != nil {
				return err
			}
		}
		if err := txn.Set(catalogKey(to.name), binary.BigEndian.AppendUint32(nil, id)); err != nil {
			return err
		}
		return txn.Delete(dropKey(id))
	})
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

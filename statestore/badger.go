package statestore

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/dgraph-io/badger/v4"
)

// Key namespaces inside a badger DB. User keys carry userPrefix, the
// store's own bookkeeping carries metaPrefix, or tailPrefix for the
// position, so no user key can collide with metadata and Range/All never
// see it.
//
// Every Write's transaction holds the position, so every memtable, and
// every level-0 table flushed from it, spans from the position key to its
// last user key. Sorting first, as it once did, the position made each
// level-0 table overlap every level-1 table below its last key, and each
// level-0 compaction rewrite them all, even when the keys arrive in order
// (a changelog of ascending keys: one that restored 1,000,000 cost ~0.4 s
// more CPU than with no position, or with it last). Sorting last, it
// overlaps only the last level-1 table.
const (
	metaPrefix byte = 0x00
	userPrefix byte = 0x01
	tailPrefix byte = 0xff
)

var positionKey = []byte{tailPrefix, 'p', 'o', 's'}

// legacyPositionKey is where stores written before tailPrefix kept their
// position. It is read when positionKey is absent, and deleted by the
// first write of the position under positionKey.
var legacyPositionKey = []byte{metaPrefix, 'p', 'o', 's'}

// OpenBadger opens (creating if needed) a badger-backed Store in dir. Only
// one process may hold dir open at a time; badger locks it.
//
// Keys of any length are accepted, although badger's own keys may not
// exceed 65,000 bytes: longer ones are stored under a derived key (see the
// layout notes in badgerkeys.go). A Write applies its entries and position
// atomically, for readers and across crashes, however large it is; see
// Write. Its table files are verified before badger opens them: a damaged
// one fails the open with an error wrapping ErrCorruptTable (see
// checkTables). An open that fails on proof that the files are damaged
// returns an error wrapping ErrCorrupt; one that fails because of the
// machine (a limit, a permission, a failing disk), a *MachineError or a
// *DiskFullError (see openError).
func OpenBadger(dir string, opts BadgerOptions) (Store, error) {
	opts = opts.withDefaults()
	// A Reset interrupted by a crash after moving the old store aside
	// leaves it behind; nothing in it is wanted.
	if err := os.RemoveAll(resetDir(dir)); err != nil {
		return nil, fmt.Errorf("statestore: remove %s: %w", resetDir(dir), err)
	}
	db, err := openBadgerDB(dir, opts)
	if err != nil {
		return nil, err
	}
	s := &badgerStore{
		db:             db,
		dir:            dir,
		keys:           ownKeys,
		opts:           opts,
		valueThreshold: opts.ValueThreshold,
		iters:          make(map[*badgerIter]struct{}),
		stopGC:         make(chan struct{}),
		gcDone:         make(chan struct{}),
	}
	if err := s.load(); err != nil {
		_ = db.Close()
		return nil, openError(dir, opts.DiskReserve, err)
	}
	s.alloc = startPrealloc(dir, opts)
	if opts.ValueLogGCInterval > 0 {
		go s.gcLoop(opts.ValueLogGCInterval, opts.Logger)
	} else {
		close(s.gcDone)
	}
	return s, nil
}

// DestroyBadger deletes a badger store's directory and everything in it.
// The store must be closed first. Removing the directory by any other means
// is equally fine: a store keeps nothing outside it.
func DestroyBadger(dir string) error {
	return errors.Join(os.RemoveAll(dir), os.RemoveAll(resetDir(dir)))
}

// resetDir is where Reset moves a store's directory before deleting it.
// Kafka topic names cannot hold '~', so it is no logged store's directory;
// only an unlogged store named "<name>~reset" would collide.
func resetDir(dir string) string { return filepath.Clean(dir) + "~reset" }

type badgerStore struct {
	db  *badger.DB
	dir string
	// keys is where the store's keys live in db: everywhere, unless the
	// DB is home's, shared with other stores.
	keys           keyspace
	home           *SharedBadger
	name           string        // in home
	opts           BadgerOptions // with defaults applied; Reset reopens with them
	valueThreshold int64
	// alloc preallocates db's mapped files (home's, for a store of a
	// shared DB). Replaced, like db, by Reset.
	alloc *preallocator

	// mu guards closed and db. Every operation holds it for reading while
	// it uses db, so Close and Reset (which take it for writing) wait for
	// operations in flight, and later ones see ErrClosed or the new db.
	mu     sync.RWMutex
	closed bool
	// absent, when set, has been shown every key the store holds (see
	// keyFilter): a Get of a key it does not pass finds nothing without
	// reading badger. Set by load for a store that holds no key, and by a
	// Reset; a store opened on keys has none, nor one written from its
	// changelog (Restoring).
	absent atomic.Pointer[keyFilter]
	// position mirrors the position record, so Position needs no read.
	position atomic.Int64
	// torn mirrors the torn-write marker: the position the store must
	// reach before it is consistent again, or NoPosition (see
	// badgertorn.go).
	torn atomic.Int64
	// wmu serialises writers, so position follows the order of Writes.
	wmu sync.Mutex
	// legacyPos is set while legacyPositionKey exists: the next write of
	// the position deletes it. Guarded by wmu (and by mu while opening).
	legacyPos bool
	// view gates the taking of read snapshots: a staged or torn Write holds it
	// exclusively while it applies, so no snapshot sees part of it.
	view sync.RWMutex
	// failed is set when a staged or torn Write could not be applied: every
	// call returns it until a Reset, or a reopen (which finishes or drops a
	// staged Write, and finds a torn one marked for restoration to repair).
	failed atomic.Pointer[error]

	// shared is the read transaction Gets share until the next change to
	// the store, changing the number of changes in progress (see reader).
	// sharedMu guards them and the transaction's users.
	sharedMu sync.Mutex
	shared   *sharedTxn
	changing int

	// Open iterators, so Close can release them before closing the DB:
	// their owners may not have finished, and a badger iterator must not
	// outlive its DB.
	itersMu sync.Mutex
	iters   map[*badgerIter]struct{}

	stopGC chan struct{}
	gcDone chan struct{}
}

func (s *badgerStore) enter() error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	if err := s.failed.Load(); err != nil {
		s.mu.RUnlock()
		return *err
	}
	return nil
}

// snapshot opens a read transaction that sees whole Writes only.
func (s *badgerStore) snapshot() *badger.Txn {
	s.view.RLock()
	defer s.view.RUnlock()
	return s.db.NewTransaction(false)
}

func (s *badgerStore) exit() { s.mu.RUnlock() }

// sharedTxn is a read transaction used by several Gets, with the number of
// its users (the store counting as one while it offers it).
type sharedTxn struct {
	txn   *badger.Txn
	users int
}

// reader returns a read transaction for a Get; release it with done.
// Opening and discarding a badger transaction for every Get costs more
// than looking up a key that does not exist (both pass a mark through
// badger's watermark goroutine, and opening takes the oracle's lock), so
// between two changes to the store the Gets share one. While a change is
// in progress (between beginChange and endChange) every Get opens its own
// transaction, as a Get always did: the change may become visible at any
// moment, and a Get must not see older data than a read that went before
// it. A Get still holding the shared transaction when a change begins
// started before the change, and reads as if it had finished before it.
//
// Badger drops old versions only below the oldest open read, so a shared
// transaction keeps at most the versions of one interval between changes.
func (s *badgerStore) reader() *sharedTxn {
	s.sharedMu.Lock()
	defer s.sharedMu.Unlock()
	if s.changing > 0 {
		return &sharedTxn{txn: s.snapshot(), users: 1}
	}
	r := s.shared
	if r == nil {
		r = &sharedTxn{txn: s.snapshot(), users: 1}
		s.shared = r
	}
	r.users++
	return r
}

func (s *badgerStore) done(r *sharedTxn) {
	s.sharedMu.Lock()
	defer s.sharedMu.Unlock()
	s.releaseLocked(r)
}

func (s *badgerStore) releaseLocked(r *sharedTxn) {
	if r.users--; r.users == 0 {
		r.txn.Discard()
	}
}

// beginChange stops sharing a read transaction until the matching
// endChange. Everything that writes to the DB calls it first.
func (s *badgerStore) beginChange() {
	s.sharedMu.Lock()
	defer s.sharedMu.Unlock()
	s.changing++
	s.dropSharedLocked()
}

func (s *badgerStore) endChange() {
	s.sharedMu.Lock()
	defer s.sharedMu.Unlock()
	s.changing--
}

// dropShared discards the shared transaction once its users are done.
// Close and Reset call it before they close the DB: a transaction must be
// discarded while its DB is open, and as they hold mu no Get is using it.
func (s *badgerStore) dropShared() {
	s.sharedMu.Lock()
	defer s.sharedMu.Unlock()
	s.dropSharedLocked()
}

func (s *badgerStore) dropSharedLocked() {
	if r := s.shared; r != nil {
		s.shared = nil
		s.releaseLocked(r)
	}
}

func (s *badgerStore) Get(key []byte) ([]byte, bool, error) {
	if err := s.enter(); err != nil {
		return nil, false, err
	}
	defer s.exit()
	if f := s.absent.Load(); f != nil && !f.mayHave(key) {
		return nil, false, nil
	}
	r := s.reader()
	v, found, err := getIn(r.txn, s.keys, key)
	s.done(r)
	if err != nil {
		return nil, false, fmt.Errorf("statestore: badger get: %w", err)
	}
	return v, found, nil
}

// restoring drops the filter of new keys (see Restoring). A Get that
// loaded it before answers as it would have before the write that follows.
func (s *badgerStore) restoring() { s.absent.Store(nil) }

func (s *badgerStore) Put(key, value []byte) error {
	if value == nil {
		return ErrNilValue
	}
	return s.update(Entry{Key: key, Value: value})
}

func (s *badgerStore) Delete(key []byte) error {
	return s.update(Entry{Key: key})
}

// update writes one entry in one transaction, which always fits: a badger
// key is at most 65,000 bytes and a value of 16 KiB or more
// (ValueThreshold) goes to the value log, leaving a pointer in the
// transaction.
func (s *badgerStore) update(e Entry) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.room(valueLogBytes([]Entry{e}, s.valueThreshold)); err != nil {
		return err
	}
	s.beginChange()
	defer s.endChange()
	if f := s.absent.Load(); f != nil {
		f.add([]Entry{e})
	}
	err := s.db.Update(func(txn *badger.Txn) error {
		if err := s.check(e); err != nil {
			return &EntryError{Index: 0, Err: err}
		}
		p := planner{txn: txn, keys: s.keys}
		ops, err := p.add(nil, e)
		if err != nil {
			return &EntryError{Index: 0, Err: err}
		}
		for _, o := range ops {
			if err := setOp(txn, o, o.entry()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return diskError(s.dir, s.opts.DiskReserve, fmt.Errorf("statestore: badger write: %w", err))
	}
	return nil
}

// dropPrefix removes every key starting with prefix, long-key slots
// included (a slot keeps its key's first bytes), without writing
// tombstones: badger flushes its memtables, drops the tables that hold
// only such keys and rewrites those holding some (DB.DropPrefix). Writes
// wait meanwhile; readers may see the keys vanish under them, so it is
// meant for data no reader wants any more (expired window segments). The
// position is left as it is. In a shared DB it writes a tombstone per key
// instead (see badgershared.go).
func (s *badgerStore) dropPrefix(prefix []byte) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.beginChange()
	defer s.endChange()
	if err := s.home.dropPrefix(s.db, s.keys.user(prefix)); err != nil {
		return diskError(s.dir, s.opts.DiskReserve, fmt.Errorf("statestore: badger drop prefix: %w", err))
	}
	return nil
}

func (s *badgerStore) Position() (int64, error) {
	if err := s.enter(); err != nil {
		return NoPosition, err
	}
	defer s.exit()
	return s.position.Load(), nil
}

func (s *badgerStore) Range(from, to []byte) (Iterator, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	txn := s.snapshot()
	it := &badgerIter{
		store: s,
		keys:  s.keys,
		txn:   txn,
		iter:  txn.NewIterator(badger.IteratorOptions{Prefix: s.keys.users()}),
		seek:  s.keys.seek(from),
		from:  bytes.Clone(from),
		to:    bytes.Clone(to),
	}
	s.itersMu.Lock()
	s.iters[it] = struct{}{}
	s.itersMu.Unlock()
	return it, nil
}

func (s *badgerStore) All() (Iterator, error) { return s.Range(nil, nil) }

// ApproximateCount counts the user keys with a key-only scan of one
// snapshot, so it is exact for that snapshot but costs O(n): roughly
// 100-200 ns per key, tens of milliseconds for 100,000 keys. Badger's own
// table statistics cannot do better: they count every version and
// tombstone and miss the memtables. Call it for diagnostics and queries,
// not per record.
func (s *badgerStore) ApproximateCount() (int64, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.exit()
	// One badger key per user key, whatever its layout.
	var n int64
	txn := s.snapshot()
	defer txn.Discard()
	it := txn.NewIterator(badger.IteratorOptions{Prefix: s.keys.users()})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		n++
	}
	return n, nil
}

// DiskSize implements Sizer. A store with a DB of its own counts the space
// allocated to the files in its directory, its memtable logs' preallocated
// blocks included (see preallocator). One in a shared DB counts the tables that hold its keys
// alone, which leaves out its share of tables mixed with other stores' keys
// and of the memtables and value log: an underestimate, of a store that has
// been written to disk at all.
func (s *badgerStore) DiskSize() (int64, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.exit()
	if s.home != nil {
		onDisk, _ := s.db.EstimateSize(s.keys.ns)
		return int64(onDisk), nil
	}
	var n int64
	err := filepath.WalkDir(s.dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			// Badger removes files as it compacts; one gone since the
			// listing is no longer part of the store.
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += usedBytes(info)
			}
		}
		return nil
	})
	return n, err
}

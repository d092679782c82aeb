package statestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
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

// BadgerOptions tunes a badger-backed store. A zero field takes its value
// from DefaultBadgerOptions, so BadgerOptions{} is a valid configuration.
type BadgerOptions struct {
	// MemTableSize is the size of one memtable (badger's write buffer).
	MemTableSize int64
	// NumMemtables is how many memtables, the mutable one included, may
	// exist before writes stall waiting for a flush.
	NumMemtables int
	// BaseTableSize is the target size of an SSTable on level 1.
	BaseTableSize int64
	// BaseLevelSize is the target size of level 1.
	BaseLevelSize int64
	// NumLevelZeroTables is the level-0 table count that triggers compaction;
	// NumLevelZeroTablesStall the count at which writes stall.
	NumLevelZeroTables      int
	NumLevelZeroTablesStall int
	// BlockCacheSize is the block cache in bytes. It may stay 0 unless
	// Compress is set: uncompressed blocks are read straight from the
	// memory-mapped tables.
	BlockCacheSize int64
	// Compress enables Snappy compression of SSTable blocks. It needs a
	// block cache; if BlockCacheSize is 0, 1 MiB is used.
	Compress bool
	// ValueThreshold is the value size from which a value is stored in the
	// value log rather than inline in the LSM tree. Must not exceed 15% of
	// MemTableSize (badger's limit).
	ValueThreshold int64
	// ValueLogFileSize is the size of one value-log file.
	ValueLogFileSize int64
	// NumCompactors is the number of compaction goroutines (0 or >= 2).
	NumCompactors int
	// SyncWrites fsyncs every write. Off by default: state is rebuilt from
	// the changelog, and badger's log replay keeps a crashed store
	// consistent (data and position still move together), only older.
	SyncWrites bool
	// ValueLogGCInterval is how often value-log garbage collection runs.
	// Only values of at least ValueThreshold bytes live in the value log.
	// Negative disables it.
	ValueLogGCInterval time.Duration
	// Logger receives badger's warnings and errors; its info and debug
	// messages go out at slog's debug level. Nil means slog.Default().
	Logger *slog.Logger
	// DiskReserve is the free space, in bytes, below which the store
	// refuses writes (Write, Put, Delete) and opening with an error
	// wrapping ErrDiskFull, and skips value-log garbage collection. Badger
	// writes its logs and tables through memory-mapped sparse files, so a
	// filesystem that runs out of space under it does not return an error:
	// the process dies with SIGBUS (checked with badger v4.9.6 on a full
	// tmpfs: a compaction's table write faulted). The reserve leaves room
	// for the work badger may still do for writes it has accepted: its
	// memtable logs, their flush, one level-0 compaction and a value-log
	// file. Zero means that sum for these options (about 72 MiB with the
	// defaults); negative disables the check.
	//
	// The reserve guards against this store's own growth. Against space
	// taken by another process, on Linux, the files badger writes through
	// its maps are allocated ahead of its writes (fallocate; see
	// prealloc_linux.go): its memtable logs in full as they appear, its
	// DISCARD file, and its newest value-log file for each write's large
	// values before the write is handed to badger; an allocation refused
	// for lack of space refuses the database's writes with ErrDiskFull
	// until it succeeds. A write accepted before the filesystem filled up
	// then lands in blocks it owns. What remains exposed to a filesystem
	// filled by another process: the table files of flushes and
	// compactions (badger creates each table file at its size and copies
	// the table into its map at once, before anything outside badger can
	// allocate it), the first pages of a memtable log or value-log file
	// badger starts in the middle of a write (it writes them as it creates
	// the file, before the directory watch reports it), and a
	// filesystem without fallocate (logged once). Writing the tables for
	// the writes the store accepted is what the reserve is for, so a full
	// filesystem of Eddy's own making cannot fault there.
	DiskReserve int64
	// Tune, if set, may adjust the final badger options (an escape hatch;
	// the store's correctness does not depend on any option it sets).
	Tune func(badger.Options) badger.Options
}

// DefaultBadgerOptions returns the options OpenBadger uses for zero fields.
// They are chosen for many small stores in one process: an instance may
// hold a dozen or more open DBs (one per store per task) and must stay
// within a few hundred MiB.
//
//   - MemTableSize 2 MiB, NumMemtables 2. Badger allocates each memtable's
//     skiplist arena up front at ~1.3x MemTableSize (room for one more
//     maximal transaction): 2.6 MiB of Go heap, resident once written to.
//     The memtable's write-ahead log is a memory-mapped file of which up to
//     ~2 MiB of page cache is dirty. A second memtable exists only while the
//     previous one is being flushed. A transaction may hold 15% of
//     MemTableSize (~315 KB, 3,275 entries); larger Writes are torn or
//     staged (see Write). Restoration batches (changelog's
//     DefaultMaxBatchRecords, 3,000) fit.
//   - No compression and no block cache: uncompressed SSTables are read
//     through the kernel page cache via mmap, so reads need no private
//     cache and table builds start no compression goroutines. Table indexes
//     and bloom filters are read in place from the memory-mapped tables
//     (IndexCacheSize only matters for encrypted tables): ~1.2 bytes of
//     bloom per key plus block offsets, 1.9 MiB per million keys, resident
//     like the tables' other pages (~32 bytes per small entry).
//   - Table building (flushes and compactions) uses buffers of at least
//     2 x BaseTableSize = 2 MiB, which badger pools per DB (up to 8) and
//     frees after ~2 s idle. BaseTableSize 1 MiB: level-1 tables, and the
//     tables of the level the DB's data sits in while small.
//   - NumLevelZeroTables 10, NumLevelZeroTablesStall 20: a DB compacts its
//     level 0 after ten memtable flushes (20 MiB) instead of badger's five,
//     half as many compactions, each larger, and fewer table-build buffers
//     alive at once. 12 DBs holding 8,000,000 keys in total peaked at
//     567-568 MiB in the statestore memory test against 582-588 MiB, and
//     an instance counting them at 561-582 MiB against 598-603 MiB
//     (eddybench -only c -keys 8000000); at 4,000,000 keys a DB's ~10 MiB
//     no longer reaches a level-0 compaction at all. A read of a key that
//     is not in the memtables checks up to ten level-0 tables' bloom
//     filters; counting new keys was as fast (eddybench -only m, CPU time).
//     The stall keeps the ten tables of headroom it had.
//   - ValueThreshold 16 KiB: ordinary state values stay in the LSM tree
//     and are reclaimed by compaction; only larger ones go to the value
//     log (16 MiB files, GC every 5 minutes).
//   - NumCompactors 2 (badger's minimum when compaction is on).
//   - Conflict detection (one writer per store) and metrics are off.
//
// Per open DB that makes ~0.3 MiB when idle and never written (arena pages
// untouched), ~5 MiB of Go heap while being written (arena + pooled
// table-build buffer), ~10 MiB or more during a flush and a compaction,
// plus file pages the kernel can reclaim. Measured with
// TestBadgerMemoryFootprint (12 DBs in one process, 1,000,000 keys in
// total, 10-byte keys and 8-byte values written through Write in batches
// of 2,000, on two shared cores): 12 freshly opened DBs add ~3 MiB RSS;
// after the writes the Go heap holds 56 MiB live and the process peaks at
// 151 MiB VmRSS, garbage awaiting collection included (GOGC=100; a Go
// memory limit lowers it), against 112 MiB live (62 MiB of memtable
// arenas) and 207 MiB with the former 4 MiB memtables and 2 MiB tables.
// At 4,000,000 keys the store test alone peaks at 359-407 MiB either way,
// the DBs' compactions and their pooled table-build buffers dominating;
// the smaller memtables cost that test ~10-20% more CPU (more flushes and
// level-0 compactions), and an instance counting 4,000,000 keys ~45 MiB
// less at its peak (eddybench -only c; see DESIGN.md, State directory).
// One DB holding all 4,000,000 keys peaks at ~245 MiB: part of the cost is
// per DB and grows with its data. Writes too big for one transaction are
// torn (see badgertorn.go), or staged when they carry no position
// (badgerstage.go), which costs about three times as much.
func DefaultBadgerOptions() BadgerOptions {
	return BadgerOptions{
		MemTableSize:            2 << 20,
		NumMemtables:            2,
		BaseTableSize:           1 << 20,
		BaseLevelSize:           8 << 20,
		NumLevelZeroTables:      10,
		NumLevelZeroTablesStall: 20,
		BlockCacheSize:          0,
		ValueThreshold:          16 << 10,
		ValueLogFileSize:        16 << 20,
		NumCompactors:           2,
		ValueLogGCInterval:      5 * time.Minute,
	}
}

// EffectiveDiskReserve returns the free space a store opened with o keeps
// in reserve: DiskReserve, or the sum it defaults to for the other
// options; negative when the check is off.
func (o BadgerOptions) EffectiveDiskReserve() int64 { return o.withDefaults().DiskReserve }

func (o BadgerOptions) withDefaults() BadgerOptions {
	d := DefaultBadgerOptions()
	set64 := func(v *int64, def int64) {
		if *v == 0 {
			*v = def
		}
	}
	setInt := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	set64(&o.MemTableSize, d.MemTableSize)
	setInt(&o.NumMemtables, d.NumMemtables)
	set64(&o.BaseTableSize, d.BaseTableSize)
	set64(&o.BaseLevelSize, d.BaseLevelSize)
	setInt(&o.NumLevelZeroTables, d.NumLevelZeroTables)
	setInt(&o.NumLevelZeroTablesStall, d.NumLevelZeroTablesStall)
	set64(&o.ValueThreshold, d.ValueThreshold)
	set64(&o.ValueLogFileSize, d.ValueLogFileSize)
	setInt(&o.NumCompactors, d.NumCompactors)
	if o.ValueLogGCInterval == 0 {
		o.ValueLogGCInterval = d.ValueLogGCInterval
	}
	if o.DiskReserve == 0 {
		o.DiskReserve = o.defaultReserve()
	}
	if o.Compress && o.BlockCacheSize == 0 {
		o.BlockCacheSize = 1 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// defaultReserve sums what badger may write for work already accepted:
// each memtable's log (a sparse file of twice MemTableSize), the tables
// their flushes produce, one compaction of level 0 into level 1, and one
// value-log file (also sparse, of twice ValueLogFileSize).
func (o BadgerOptions) defaultReserve() int64 {
	logs := int64(o.NumMemtables) * 2 * o.MemTableSize
	flushes := int64(o.NumMemtables) * o.MemTableSize
	compaction := int64(o.NumLevelZeroTables)*o.MemTableSize + o.BaseLevelSize
	return logs + flushes + compaction + 2*o.ValueLogFileSize
}

func (o BadgerOptions) badger(dir string) badger.Options {
	bo := badger.DefaultOptions(dir).
		WithMemTableSize(o.MemTableSize).
		WithNumMemtables(o.NumMemtables).
		WithBaseTableSize(o.BaseTableSize).
		WithBaseLevelSize(o.BaseLevelSize).
		WithNumLevelZeroTables(o.NumLevelZeroTables).
		WithNumLevelZeroTablesStall(o.NumLevelZeroTablesStall).
		WithBlockCacheSize(o.BlockCacheSize).
		WithIndexCacheSize(0).
		WithValueThreshold(o.ValueThreshold).
		WithValueLogFileSize(o.ValueLogFileSize).
		WithNumCompactors(o.NumCompactors).
		WithSyncWrites(o.SyncWrites).
		WithDetectConflicts(false).
		WithMetricsEnabled(false).
		WithNumVersionsToKeep(1).
		WithLogger(badgerLogger{l: o.Logger.With("dir", dir)})
	if o.Compress {
		bo = bo.WithCompression(options.Snappy)
	} else {
		bo = bo.WithCompression(options.None)
	}
	if o.Tune != nil {
		bo = o.Tune(bo)
	}
	return bo
}

// badgerLogger routes badger's printf-style logging to slog. Badger logs
// every flush and compaction at info level, so info and debug are demoted
// to slog's debug level and formatted only when that level is enabled.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) log(level slog.Level, format string, args ...any) {
	ctx := context.Background()
	if !b.l.Enabled(ctx, level) {
		return
	}
	b.l.Log(ctx, level, "badger: "+strings.TrimSpace(fmt.Sprintf(format, args...)))
}

func (b badgerLogger) Errorf(f string, a ...any)   { b.log(slog.LevelError, f, a...) }
func (b badgerLogger) Warningf(f string, a ...any) { b.log(slog.LevelWarn, f, a...) }
func (b badgerLogger) Infof(f string, a ...any)    { b.log(slog.LevelDebug, f, a...) }
func (b badgerLogger) Debugf(f string, a ...any)   { b.log(slog.LevelDebug, f, a...) }

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

// checkRoom refuses to let badger write into dir's filesystem when less
// than reserve bytes are free (see BadgerOptions.DiskReserve). The
// directory need not exist yet: its nearest existing parent is measured.
func checkRoom(dir string, reserve int64) error {
	if reserve < 0 {
		return nil
	}
	for d := dir; ; {
		free, ok := freeBytes(d)
		if ok {
			if free < reserve {
				return &DiskFullError{Dir: dir, Free: free, Reserve: reserve}
			}
			return nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return nil
		}
		d = parent
	}
}

// room refuses a write to the store below its reserve, or while its
// preallocator finds the filesystem full, and has the preallocator
// allocate the value log for the write's vlog bytes (see valueLogBytes).
func (s *badgerStore) room(vlog int64) error {
	return roomFor(s.dir, s.opts.DiskReserve, s.alloc, vlog)
}

// roomFor refuses a write to the badger database in dir, kept with
// reserve and alloc, as badgerStore's room describes.
func roomFor(dir string, reserve int64, alloc *preallocator, vlog int64) error {
	if err := checkRoom(dir, reserve); err != nil {
		return err
	}
	if err := alloc.check(); err != nil {
		return err
	}
	if vlog > 0 {
		if err := alloc.ahead(vlog); err != nil {
			return err
		}
	}
	if roomChecked != nil {
		roomChecked(dir)
	}
	return nil
}

// valueLogBytes bounds what entries add to the value log: badger keeps a
// value there, with its key and a header, from threshold bytes on.
func valueLogBytes(entries []Entry, threshold int64) int64 {
	var n int64
	for _, e := range entries {
		if int64(len(e.Value)) >= threshold {
			n += int64(len(e.Key)+len(e.Value)) + vlogEntryOverhead
		}
	}
	return n
}

// vlogEntryOverhead bounds a value-log entry's header, checksum and key
// prefix.
const vlogEntryOverhead = 64

// roomChecked, when set by a test, runs after a write passed the room
// checks and before badger is given it: where another process may fill
// the filesystem.
var roomChecked func(dir string)

// diskError marks err as a full disk if the filesystem said so.
func diskError(dir string, reserve int64, err error) error {
	if err == nil || !isNoSpace(err) || errors.Is(err, ErrDiskFull) {
		return err
	}
	return &DiskFullError{Dir: dir, Free: -1, Reserve: reserve, Err: err}
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

func setOp(txn *badger.Txn, o op, e *badger.Entry) error {
	if o.value == nil {
		return txn.Delete(o.key)
	}
	return txn.SetEntry(e)
}

// Write applies entries and records position.
//
// When the batch fits in one badger transaction (badger caps a transaction
// at 15% of MemTableSize and a matching entry count, 3,275 small entries
// or ~315 KB with the default options), entries and position commit
// together. A larger batch with a position is written torn (see
// badgertorn.go): applied with new reads held back, so atomic for
// readers, then the position; a crash in between leaves the store torn
// until its changelog is replayed past the batch. A larger batch without
// a position is staged (see badgerstage.go), atomic for readers and across
// a crash, at the cost of writing it twice.
func (s *badgerStore) Write(entries []Entry, position int64) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	s.wmu.Lock()
	defer s.wmu.Unlock()

	// Checked before anything is written, so a refused Write leaves the
	// store exactly as it was and may simply be retried.
	if err := s.room(valueLogBytes(entries, s.valueThreshold)); err != nil {
		return err
	}
	s.beginChange()
	defer s.endChange()
	ops, err := s.plan(entries)
	if err != nil {
		return diskError(s.dir, s.opts.DiskReserve, fmt.Errorf("statestore: badger write: %w", err))
	}
	return s.writeOps(ops, position)
}

// writeOps writes the planned ops of a Write and its position, between
// beginChange and endChange.
func (s *badgerStore) writeOps(ops []op, position int64) error {
	var pos [8]byte
	binary.BigEndian.PutUint64(pos[:], uint64(position))
	var err error
	big := !s.fitsOneTxn(ops)
	if !big {
		err = s.writeTxn(ops, position)
		big = errors.Is(err, badger.ErrTxnTooBig)
	}
	switch {
	case !big:
	case position == NoPosition:
		// Nothing to replay a torn write from: keep it atomic.
		err = s.writeStaged(ops, pos[:])
	default:
		err = s.writeTorn(ops, position)
	}
	if err != nil {
		return diskError(s.dir, s.opts.DiskReserve, fmt.Errorf("statestore: badger write: %w", err))
	}
	s.position.Store(position)
	return nil
}

// plan turns a batch into badger ops. Short keys, nearly always all of
// them, get their namespaced keys from one allocation; long keys go
// through a planner, which reads their slots. Every write of a batch plans
// it first, so plan shows the batch's keys to the store's filter, before
// badger holds them.
func (s *badgerStore) plan(entries []Entry) ([]op, error) {
	if f := s.absent.Load(); f != nil {
		f.add(entries)
	}
	n, ns, maxRaw := 0, s.keys.ns, s.keys.maxRaw()
	for _, e := range entries {
		if len(e.Key) <= maxRaw {
			n += len(ns) + 1 + len(e.Key)
		}
	}
	buf := make([]byte, n)
	ops := make([]op, 0, len(entries))
	var p *planner
	for i, e := range entries {
		if err := s.check(e); err != nil {
			return nil, &EntryError{Index: i, Err: err}
		}
		if len(e.Key) <= maxRaw {
			n := len(ns) + 1 + len(e.Key)
			k := buf[:n:n]
			copy(k, ns)
			k[len(ns)] = userPrefix
			copy(k[len(ns)+1:], e.Key)
			buf = buf[n:]
			ops = append(ops, op{key: k, value: e.Value})
			continue
		}
		if p == nil {
			p = &planner{txn: s.db.NewTransaction(false), keys: s.keys}
			defer p.txn.Discard()
		}
		var err error
		if ops, err = p.add(ops, e); err != nil {
			return nil, &EntryError{Index: i, Err: err}
		}
	}
	return ops, nil
}

// check refuses, before anything is written, an entry badger cannot hold:
// a value (with the key, for a slot) beyond one value-log file.
func (s *badgerStore) check(e Entry) error {
	n := int64(len(e.Value))
	if len(e.Key) > s.keys.maxRaw() {
		n += int64(len(e.Key)) + binary.MaxVarintLen64
	}
	// Staging adds a few bytes of framing and the badger key.
	if n+3+binary.MaxVarintLen64+maxKeyBytes > s.opts.ValueLogFileSize {
		return fmt.Errorf("%w: key of %d bytes and value of %d bytes exceed the value-log file size of %d bytes (BadgerOptions.ValueLogFileSize)",
			ErrTooLarge, len(e.Key), len(e.Value), s.opts.ValueLogFileSize)
	}
	return nil
}

// fitsOneTxn mirrors badger's transaction size check (Txn.checkSize) so
// that a batch known to be too big skips building a doomed transaction.
// If the two ever disagree, Write still falls back on ErrTxnTooBig.
func (s *badgerStore) fitsOneTxn(ops []op) bool {
	count, size := s.txnCost(ops)
	return count < s.db.MaxBatchCount() && size < s.db.MaxBatchSize()
}

// txnCost is what badger counts against its transaction limits for ops
// and the position written with them.
func (s *badgerStore) txnCost(ops []op) (count, size int64) {
	const perEntry = 2 + 10 // meta bytes and the version suffix
	count = int64(len(ops) + 1)
	size = int64(len(s.keys.position) + 8 + perEntry)
	if s.legacyPos {
		count++
		size += int64(len(s.keys.legacyPosition) + perEntry)
	}
	for _, o := range ops {
		size += int64(len(o.key)) + perEntry
		if v := int64(len(o.value)); v < s.valueThreshold {
			size += v
		} else {
			size += 12 // value pointer
		}
	}
	return count, size
}

func (s *badgerStore) writeTxn(ops []op, position int64) error {
	txn := s.db.NewTransaction(true)
	defer txn.Discard()
	es := entries(ops)
	for i, o := range ops {
		if err := setOp(txn, o, &es[i]); err != nil {
			return err
		}
	}
	if err := s.setPosition(txn, position); err != nil {
		return err
	}
	if err := txn.Commit(); err != nil {
		return err
	}
	s.legacyPos = false
	s.mended(position)
	return nil
}

// readPosition reads the position and sets legacyPos. Called while
// opening. When legacyPositionKey exists it wins over positionKey: this
// binary deletes it in the transaction that writes positionKey, so if both
// exist an older binary wrote the legacy record later (a downgrade
// followed by an upgrade) and positionKey is stale.
func (s *badgerStore) readPosition() (int64, error) {
	pos := NoPosition
	var legacy bool
	err := s.db.View(func(txn *badger.Txn) error {
		if _, err := readPositionAt(txn, s.keys.position, &pos); err != nil {
			return err
		}
		var err error
		legacy, err = readPositionAt(txn, s.keys.legacyPosition, &pos)
		return err
	})
	if err != nil {
		return NoPosition, fmt.Errorf("statestore: read position in %s: %w", s.dir, err)
	}
	s.legacyPos = legacy
	return pos, nil
}

// readPositionAt sets *pos to the position stored under key, if any.
func readPositionAt(txn *badger.Txn, key []byte, pos *int64) (bool, error) {
	item, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, item.Value(func(v []byte) error {
		if len(v) != 8 {
			return fmt.Errorf("%w: position record of %d bytes", ErrCorrupt, len(v))
		}
		*pos = int64(binary.BigEndian.Uint64(v))
		return nil
	})
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

func (s *badgerStore) gcLoop(every time.Duration, log *slog.Logger) {
	defer close(s.gcDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stopGC:
			return
		case <-t.C:
		}
		// Each successful run rewrites one value-log file; keep going
		// while there is garbage worth collecting.
		for {
			if err := s.collectGarbage(); err != nil {
				if !errors.Is(err, badger.ErrNoRewrite) && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrDiskFull) {
					log.Warn("statestore: badger value log GC failed", "dir", s.dir, "err", err)
				}
				break
			}
		}
	}
}

func (s *badgerStore) collectGarbage() error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	// GC writes a new value-log file before deleting the old one, moving
	// at most one file's values into the newest.
	if err := s.room(s.opts.ValueLogFileSize); err != nil {
		return err
	}
	// A rewritten value-log file is deleted once no iterator is open,
	// whatever snapshots still point into it: no Get may keep reading
	// through one taken before.
	s.beginChange()
	defer s.endChange()
	return s.db.RunValueLogGC(0.5)
}

func (s *badgerStore) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()

	close(s.stopGC)
	<-s.gcDone

	s.releaseIters(ErrClosed)
	s.dropShared()
	if s.home != nil {
		s.home.closed(s)
		return nil
	}
	if err := s.closeDB(); err != nil {
		return fmt.Errorf("statestore: close badger %s: %w", s.dir, err)
	}
	return nil
}

// openBadgerDB opens the badger database in dir once the filesystem has
// room (opening replays and flushes badger's logs: it needs the same room
// as a write) and its tables pass checkTables, classifying errors as
// OpenBadger documents.
func openBadgerDB(dir string, opts BadgerOptions) (*badger.DB, error) {
	if err := checkRoom(dir, opts.DiskReserve); err != nil {
		return nil, err
	}
	bo := opts.badger(dir)
	if err := checkTables(dir, bo); err != nil {
		return nil, openError(dir, opts.DiskReserve, err)
	}
	db, err := badger.Open(bo)
	if err != nil {
		return nil, openError(dir, opts.DiskReserve, err)
	}
	return db, nil
}

// closeMu lets one store at a time close on a filesystem short of space,
// so that stores closing together do not each count the same free space
// as room for their own flush.
var closeMu sync.Mutex

// Waits for room to close are retried after closeWaitFirst, doubling up to
// closeWaitMax, and logged at most once per diskFullLogEvery.
const (
	closeWaitFirst   = 100 * time.Millisecond
	closeWaitMax     = time.Second
	diskFullLogEvery = 30 * time.Second
)

// closeDB closes the database once the filesystem has room for what
// closing writes. Badger writes its memtables out as tables when it
// closes, through memory-mapped sparse files, so closing on a full
// filesystem kills the process with SIGBUS rather than returning an error;
// the writes refused below the reserve (checkRoom) keep the memtables from
// growing, but not the data already in them from being flushed. Below the
// reserve, stores close one at a time, each waiting (for as long as it
// takes, logging) until the filesystem has room for two tables per
// memtable.
func (s *badgerStore) closeDB() error {
	s.alloc.stop()
	return closeWhenRoom(s.db, s.dir, s.opts)
}

// closeWhenRoom closes db, kept in dir with opts, as closeDB describes.
func closeWhenRoom(db *badger.DB, dir string, opts BadgerOptions) error {
	if opts.DiskReserve < 0 || checkRoom(dir, opts.DiskReserve) == nil {
		return db.Close()
	}
	closeMu.Lock()
	defer closeMu.Unlock()
	need := 2 * int64(opts.NumMemtables) * opts.MemTableSize
	start, logged := time.Now(), time.Time{}
	for wait := closeWaitFirst; ; wait = min(2*wait, closeWaitMax) {
		err := checkRoom(dir, need)
		if err == nil {
			break
		}
		if time.Since(logged) >= diskFullLogEvery {
			logged = time.Now()
			opts.Logger.Error("disk full: the store waits for space to close, since closing writes its memtables out; free space to resume",
				"dir", dir, "needed_bytes", need, "waited", time.Since(start).Round(time.Millisecond), "err", err)
		}
		time.Sleep(wait)
	}
	if !logged.IsZero() {
		opts.Logger.Info("disk space freed; store closing", "dir", dir, "waited", time.Since(start).Round(time.Millisecond))
	}
	return db.Close()
}

// releaseIters ends every open iterator with err: a badger iterator must
// not outlive its DB.
func (s *badgerStore) releaseIters(err error) {
	s.itersMu.Lock()
	open := make([]*badgerIter, 0, len(s.iters))
	for it := range s.iters {
		open = append(open, it)
	}
	s.itersMu.Unlock()
	for _, it := range open {
		it.release(err)
	}
}

// Reset closes the DB, renames its directory aside and opens a new, empty
// DB in its place, then deletes the old one. The rename is the one step
// that decides: a crash before it leaves the old store whole (its position
// still does not fit, so it is reset again), a crash after it leaves no
// store at all, which opens empty. Badger's DropAll deletes in several
// steps a crash can come between, and must not run alongside readers;
// queries may read a store at any time.
//
// Readers wait while it runs, for one DB close and open: typically tens of
// milliseconds. If no DB can be opened again the store is left closed and
// every later call returns ErrClosed. A store of a shared DB moves to a new
// key prefix instead (see badgershared.go).
func (s *badgerStore) Reset() error {
	if s.home != nil {
		return s.home.reset(s)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.releaseIters(ErrReset)
	s.dropShared()
	if err := s.closeDB(); err != nil {
		s.breakLocked()
		return fmt.Errorf("statestore: reset badger %s: close: %w", s.dir, err)
	}
	aside := resetDir(s.dir)
	err := os.RemoveAll(aside)
	if err == nil {
		err = os.Rename(s.dir, aside)
	}
	if err != nil {
		// The old store is still where it was: keep serving it.
		err = fmt.Errorf("statestore: reset badger %s: %w", s.dir, err)
		if rerr := s.reopenLocked(); rerr != nil {
			s.breakLocked()
			return errors.Join(err, rerr)
		}
		return err
	}
	if err := syncDir(filepath.Dir(s.dir)); err != nil {
		// Should the rename be lost to a crash, the old store comes back
		// with its old position, and is found unfit and reset again.
		s.opts.Logger.Warn("statestore: cannot sync the directory of a reset store", "dir", s.dir, "err", err)
	}
	if err := s.reopenLocked(); err != nil {
		s.breakLocked()
		return fmt.Errorf("statestore: reset badger %s: %w", s.dir, err)
	}
	if err := os.RemoveAll(aside); err != nil {
		// The store is reset; the next open retries the cleanup.
		s.opts.Logger.Warn("statestore: cannot delete the contents of a reset store", "dir", aside, "err", err)
	}
	return nil
}

// reopenLocked opens the DB in s.dir again after Reset closed it.
func (s *badgerStore) reopenLocked() error {
	db, err := badger.Open(s.opts.badger(s.dir))
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	s.db = db
	if err := s.load(); err != nil {
		_ = db.Close()
		return err
	}
	s.alloc = startPrealloc(s.dir, s.opts)
	s.failed.Store(nil)
	return nil
}

// load finishes or drops a staged Write and reads the store's records,
// before the store is handed out.
func (s *badgerStore) load() error {
	if err := s.recoverStage(); err != nil {
		return err
	}
	pos, err := s.readPosition()
	if err != nil {
		return err
	}
	s.position.Store(pos)
	torn, err := s.readTorn()
	if err != nil {
		return err
	}
	s.torn.Store(torn)
	s.absent.Store(nil)
	if s.empty() {
		s.absent.Store(newKeyFilter())
	}
	return nil
}

// empty reports whether the store holds no key, as a new or reset one.
func (s *badgerStore) empty() bool {
	txn := s.db.NewTransaction(false)
	defer txn.Discard()
	it := txn.NewIterator(badger.IteratorOptions{Prefix: s.keys.users()})
	defer it.Close()
	it.Rewind()
	return !it.Valid()
}

// breakLocked leaves the store closed after a Reset that lost its DB.
func (s *badgerStore) breakLocked() {
	s.closed = true
	close(s.stopGC)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	return errors.Join(err, f.Close())
}

// badgerIter iterates one read transaction, yielding real keys in
// bytewise order within [from, to). Badger's order is that order except
// within a group of keys sharing their first slotPrefixLen bytes (see
// badgerkeys.go), so a group is read whole, sorted and then yielded. Key
// and Value are copied into buffers the iterator owns, so they stay valid
// even if the store closes under them.
type badgerIter struct {
	store *badgerStore
	keys  keyspace

	// mu makes Close of the store (from another goroutine) safe against a
	// Next in progress.
	mu       sync.Mutex
	txn      *badger.Txn
	iter     *badger.Iterator
	seek     []byte
	from, to []byte // real-key bounds; nil: unbounded
	started  bool
	// positioned: iter already stands on the next unread item (reading a
	// group stops on the first item after it).
	positioned bool
	group      []pair // the rest of the group being yielded
	done       bool
	err        error
	key        []byte // nil when not on a pair
	val        []byte
	kbuf, vbuf []byte // reused for items outside groups
}

func (it *badgerIter) Next() bool {
	it.mu.Lock()
	defer it.mu.Unlock()
	for !it.done {
		if len(it.group) > 0 {
			p := it.group[0]
			it.group = it.group[1:]
			if it.from != nil && bytes.Compare(p.key, it.from) < 0 {
				continue
			}
			if it.to != nil && bytes.Compare(p.key, it.to) >= 0 {
				it.finish()
				return false
			}
			it.key, it.val = p.key, p.value
			return true
		}
		switch {
		case !it.started:
			it.started = true
			it.iter.Seek(it.seek)
		case it.positioned:
			it.positioned = false
		default:
			it.iter.Next()
		}
		if !it.iter.Valid() {
			it.finish()
			return false
		}
		item := it.iter.Item()
		if it.keys.inGroup(item.Key()) {
			if err := it.readGroup(); err != nil {
				it.err = fmt.Errorf("statestore: badger iterate: %w", err)
				it.finish()
				return false
			}
			continue
		}
		it.kbuf = item.KeyCopy(it.kbuf[:0])
		key := it.keys.real(it.kbuf)
		if it.from != nil && bytes.Compare(key, it.from) < 0 {
			continue
		}
		if it.to != nil && bytes.Compare(key, it.to) >= 0 {
			it.finish()
			return false
		}
		val, err := item.ValueCopy(it.vbuf[:0])
		if err != nil {
			it.err = fmt.Errorf("statestore: badger iterate: %w", err)
			it.finish()
			return false
		}
		if val == nil {
			val = []byte{}
		}
		it.vbuf = val
		it.key, it.val = key, val
		return true
	}
	return false
}

// readGroup reads the group starting at the current item into it.group,
// sorted by real key, leaving iter on the first item after it.
func (it *badgerIter) readGroup() error {
	first := it.iter.Item().Key()
	prefix := bytes.Clone(it.keys.groupOf(first))
	var group []pair
	for ; it.iter.Valid(); it.iter.Next() {
		item := it.iter.Item()
		k := item.Key()
		if !it.keys.inGroup(k) || !bytes.Equal(it.keys.groupOf(k), prefix) {
			break
		}
		v, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		if v == nil {
			v = []byte{}
		}
		if item.UserMeta() != metaSlotV1 {
			group = append(group, pair{key: bytes.Clone(it.keys.real(k)), value: v})
			continue
		}
		key, val, err := decodeSlot(v)
		if err != nil {
			return err
		}
		group = append(group, pair{key: key, value: val})
	}
	sortPairs(group)
	it.group, it.positioned = group, true
	return nil
}

// finish ends the iteration early, releasing the snapshot right away
// rather than at Close. Called with mu held.
func (it *badgerIter) finish() {
	it.done = true
	it.key, it.val, it.group = nil, nil, nil
	if it.iter != nil {
		it.iter.Close()
		it.txn.Discard()
		it.iter, it.txn = nil, nil
	}
}

// release closes the iterator from the store's side.
func (it *badgerIter) release(err error) {
	it.mu.Lock()
	defer it.mu.Unlock()
	if !it.done && it.err == nil {
		it.err = err
	}
	it.finish()
}

func (it *badgerIter) Key() []byte {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.done {
		return nil
	}
	return it.key
}

func (it *badgerIter) Value() []byte {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.done {
		return nil
	}
	return it.val
}

func (it *badgerIter) Err() error {
	it.mu.Lock()
	defer it.mu.Unlock()
	return it.err
}

func (it *badgerIter) Close() error {
	it.mu.Lock()
	it.finish()
	it.mu.Unlock()
	s := it.store
	s.itersMu.Lock()
	delete(s.iters, it)
	s.itersMu.Unlock()
	return nil
}

package statestore

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

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

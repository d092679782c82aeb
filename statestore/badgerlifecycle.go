package statestore

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
)

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

//go:build linux

package statestore

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// A preallocator gives the files badger writes through memory maps their
// blocks as soon as they appear in a database's directory, so that a
// filesystem filled by another process finds badger's next writes already
// paid for instead of killing the process with SIGBUS (see
// BadgerOptions.DiskReserve for what it covers and what it does not).
//
// Badger extends these files with ftruncate, which allocates nothing, and
// then writes into their mappings. The preallocator allocates those in the
// directory when the database opens, and those badger creates later as the
// process's directory watch (dirWatch) reports them:
//
//   - every memtable's log (*.mem, 2 x MemTableSize), allocated in full:
//     badger writes it up to about MemTableSize and starts a new one;
//   - the DISCARD file (1 MiB), allocated in full;
//   - the newest value-log file (*.vlog, 2 x ValueLogFileSize), allocated
//     up to its data plus vlogAhead, and, before a write with values of
//     ValueThreshold bytes or more (the only ones badger puts there), up to
//     its data plus those values plus vlogAhead (ahead): allocating the
//     whole file would hold 2 x ValueLogFileSize per database for values
//     most stores never have.
//
// On disk (RAM, on a tmpfs) that makes, per database, each memtable log's
// 2 x MemTableSize from its creation rather than as it fills (one log
// normally, up to NumMemtables + 1 while flushes are queued: 4 MiB each for
// a store's own database, 8 MiB for the shared one), 1 MiB of DISCARD and
// up to vlogAhead of value log: about MemTableSize + 2 MiB more than the
// files' written parts. The files are deleted as badger always deletes
// them, which frees their blocks.
//
// An allocation refused for lack of space (ENOSPC) is the first sign that
// the filesystem is full: the database's writes are refused with a
// DiskFullError (check) until the allocation, retried by each refused
// write, succeeds.
type preallocator struct {
	dir       string
	memBytes  int64 // length of a memtable log
	vlogBytes int64 // length of a value-log file
	reserve   int64 // for DiskFullError
	log       *slog.Logger

	wd int32 // the watch of dir (dirWatch); -1 if there is none

	mu sync.Mutex
	// pending holds the files whose allocation the filesystem refused for
	// lack of space, by name, with the length to allocate.
	pending map[string]int64
	// unsupported is set once the filesystem turns fallocate down.
	unsupported bool
	// vlog is the name of the newest value-log file seen.
	vlog string
	// full mirrors len(pending) > 0, for writers' fast path.
	full atomic.Bool
}

// vlogAhead is how far past its data the newest value-log file is
// allocated.
const vlogAhead = 1 << 20

// fallocateUnsupportedLogged makes the warning about a filesystem without
// fallocate a one-off: every database on it would repeat it.
var fallocateUnsupportedLogged atomic.Bool

// watchFailureLogged likewise: with the per-store layout, every database
// opened past the limit would repeat it.
var watchFailureLogged atomic.Bool

// discardBytes is the length of badger's DISCARD file (discard.go).
const discardBytes = 1 << 20

// startPrealloc allocates the mapped files already in dir, badger's
// database opened with opts, and keeps allocating those it creates until
// stop.
func startPrealloc(dir string, opts BadgerOptions) *preallocator {
	p := &preallocator{
		dir:       dir,
		memBytes:  2 * opts.MemTableSize,
		vlogBytes: 2 * opts.ValueLogFileSize,
		reserve:   opts.DiskReserve,
		log:       opts.Logger,
		pending:   make(map[string]int64),
		wd:        -1,
	}
	// The watch comes first, so no file created during the scan is missed.
	if err := watcher.add(p); err != nil && !watchFailureLogged.Swap(true) {
		p.log.Warn("statestore: cannot watch a badger directory (fs.inotify limits?); only the files present at open are preallocated; further failures are not logged",
			"dir", dir, "err", err)
	}
	p.scan()
	return p
}

// stop ends the watch; the files keep their blocks.
func (p *preallocator) stop() {
	if p == nil {
		return
	}
	watcher.remove(p)
}

// check returns a DiskFullError while an allocation is refused for lack
// of space, retrying the refused allocations first.
func (p *preallocator) check() error {
	if p == nil || !p.full.Load() {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var last error
	for name, n := range p.pending {
		if err := p.fallocate(name, n); err != nil {
			last = err
		}
	}
	if last == nil {
		p.log.Info("statestore: disk space freed; badger's files are preallocated again", "dir", p.dir)
		return nil
	}
	return &DiskFullError{Dir: p.dir, Free: -1, Reserve: p.reserve, Err: last}
}

// scan allocates the mapped files present in dir: the memtable logs, the
// DISCARD file and the newest value-log file.
func (p *preallocator) scan() {
	entries, err := os.ReadDir(p.dir)
	if err != nil {
		p.log.Warn("statestore: cannot list a badger directory to preallocate its files", "dir", p.dir, "err", err)
		return
	}
	newestVlog := ""
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range entries {
		name := e.Name()
		if strings.HasSuffix(name, ".vlog") {
			// Badger names them by a zero-padded number, so the newest
			// sorts last, as ReadDir returns them.
			newestVlog = name
			continue
		}
		p.allocateLocked(name)
	}
	if newestVlog != "" {
		p.allocateLocked(newestVlog)
	}
}

// ahead allocates the newest value-log file for n more bytes, and returns
// a DiskFullError if the filesystem has no room for them.
func (p *preallocator) ahead(n int64) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.unsupported || p.vlog == "" {
		return nil
	}
	path := filepath.Join(p.dir, p.vlog)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil
	}
	// Within the file badger made, unless the write goes past it.
	data := dataEnd(f)
	want := data + n + vlogAhead
	if limit := max(info.Size(), p.vlogBytes); want > limit {
		want = max(limit, data+n)
	}
	err = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, want)
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return &DiskFullError{Dir: p.dir, Free: -1, Reserve: p.reserve, Err: &os.PathError{Op: "fallocate", Path: path, Err: err}}
	}
	return nil
}

// dataEnd returns where the data of a value-log file ends: badger writes
// it from its start, so at its first hole (or its end). Allocated blocks
// not written yet are holes to SEEK_HOLE on tmpfs and ext4.
func dataEnd(f *os.File) int64 {
	end, err := unix.Seek(int(f.Fd()), 0, unix.SEEK_HOLE)
	if err != nil {
		return 0
	}
	return end
}

// length returns how much of the file name, currently size bytes long,
// to allocate from its start: 0 for files badger does not map for writing.
func (p *preallocator) length(name string, f *os.File, size int64) int64 {
	switch {
	case strings.HasSuffix(name, ".mem"):
		// Just created, the file may not be extended yet.
		return max(size, p.memBytes)
	case name == "DISCARD":
		return max(size, discardBytes)
	case strings.HasSuffix(name, ".vlog"):
		if name > p.vlog {
			p.vlog = name
		}
		return min(max(size, p.vlogBytes), dataEnd(f)+vlogAhead)
	}
	return 0
}

// allocate allocates the file name, new in dir, as scan does.
func (p *preallocator) allocate(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if strings.HasSuffix(name, ".vlog") && name < p.vlog {
		return
	}
	p.allocateLocked(name)
}

// allocateLocked allocates the file name if badger maps it for writing,
// recording a refusal for lack of space in pending.
func (p *preallocator) allocateLocked(name string) {
	if p.unsupported {
		return
	}
	f, err := os.OpenFile(filepath.Join(p.dir, name), os.O_RDWR, 0)
	if err != nil {
		// Gone already (a flushed memtable's log), or not a file of
		// badger's (only badger's are opened read-write by name here).
		return
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		return
	}
	n := p.length(name, f, info.Size())
	if n == 0 {
		return
	}
	_ = p.fallocateFile(name, f, n)
}

// fallocate allocates the first n bytes of the file name, as
// allocateLocked does.
func (p *preallocator) fallocate(name string, n int64) error {
	f, err := os.OpenFile(filepath.Join(p.dir, name), os.O_RDWR, 0)
	if err != nil {
		// Deleted since: nothing left to allocate.
		delete(p.pending, name)
		p.full.Store(len(p.pending) > 0)
		return nil
	}
	defer f.Close()
	return p.fallocateFile(name, f, n)
}

func (p *preallocator) fallocateFile(name string, f *os.File, n int64) error {
	// KEEP_SIZE: the file's length stays badger's to set.
	err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, n)
	switch {
	case err == nil:
		delete(p.pending, name)
	case errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT):
		if len(p.pending) == 0 {
			p.log.Error("disk full: a badger file cannot be preallocated; the database's writes are refused until space is freed",
				"dir", p.dir, "file", name, "bytes", n, "err", err)
		}
		p.pending[name] = n
	case errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS):
		p.unsupported = true
		if fallocateUnsupportedLogged.Swap(true) {
			break
		}
		p.log.Warn("statestore: the filesystem cannot preallocate badger's files (no fallocate); a disk filled by another process can kill the process with SIGBUS",
			"dir", p.dir, "err", err)
	default:
		p.log.Warn("statestore: cannot preallocate a badger file", "dir", p.dir, "file", name, "err", err)
	}
	p.full.Store(len(p.pending) > 0)
	if _, ok := p.pending[name]; ok {
		return &os.PathError{Op: "fallocate", Path: filepath.Join(p.dir, name), Err: err}
	}
	return nil
}

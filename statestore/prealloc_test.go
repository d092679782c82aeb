//go:build linux

package statestore

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// allocated returns the bytes the filesystem has given the file at path.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	require.NoError(t, err)
	return usedBytes(info)
}

// watching reports whether the goroutine watching badger directories runs.
func watching() bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "(*dirWatch).run")
}

// requireAllocated waits until every file of dir with the suffix is
// allocated to at least n bytes, and there is one.
func requireAllocated(t *testing.T, dir, suffix string, n int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		paths, err := filepath.Glob(filepath.Join(dir, "*"+suffix))
		if err != nil || len(paths) == 0 {
			return false
		}
		for _, p := range paths {
			info, err := os.Stat(p)
			if err == nil && usedBytes(info) < n {
				return false
			}
		}
		return true
	}, 5*time.Second, 5*time.Millisecond, "%s files of %s not allocated to %d bytes", suffix, dir, n)
}

func fillerBatch(round, n int) []Entry {
	es := make([]Entry, n)
	for i := range es {
		es[i] = Entry{Key: fmt.Appendf(nil, "r%d-k%04d", round, i), Value: fmt.Appendf(nil, "%01000d", round*10000+i)}
	}
	return es
}

// bigValues returns n entries of values for the value log, 256 KiB each.
func bigValues(round, n int) []Entry {
	es := make([]Entry, n)
	for i := range es {
		es[i] = Entry{Key: fmt.Appendf(nil, "r%d-big%02d", round, i), Value: bytes.Repeat([]byte{byte('a' + i)}, 256<<10)}
	}
	return es
}

// A store's memtable logs, DISCARD file and value-log head are allocated
// when it opens, its value log ahead of large values, new memtable logs as
// badger creates them, and again after a Reset, in a store's own database
// and in a shared one; closing the last database ends the watch.
func TestBadgerPreallocatesMappedFiles(t *testing.T) {
	fs := mountTmpfs(t, 64<<20)
	o := diskFullOptions().withDefaults()
	dir := filepath.Join(fs, "store")
	s, err := OpenBadger(dir, o)
	require.NoError(t, err)
	// Closed before the tmpfs is unmounted, should the test fail.
	t.Cleanup(func() { _ = s.Close() })
	requireAllocated(t, dir, ".mem", 2*o.MemTableSize)
	require.GreaterOrEqual(t, allocated(t, filepath.Join(dir, "DISCARD")), int64(discardBytes))
	requireAllocated(t, dir, ".vlog", min(2*o.ValueLogFileSize, vlogAhead))

	// A Write of values for the value log finds them allocated, with
	// vlogAhead to spare.
	require.NoError(t, s.Write(bigValues(0, 3), 0))
	vlogs, _ := filepath.Glob(filepath.Join(dir, "*.vlog"))
	require.GreaterOrEqual(t, allocated(t, vlogs[len(vlogs)-1]), int64(3*256<<10+vlogAhead))

	// ~3 MiB through 1 MiB memtables: badger starts new logs.
	mems, _ := filepath.Glob(filepath.Join(dir, "*.mem"))
	for i := range 30 {
		require.NoError(t, s.Write(fillerBatch(i, 100), int64(i)))
	}
	later, _ := filepath.Glob(filepath.Join(dir, "*.mem"))
	require.NotEqual(t, mems, later, "no new memtable log")
	requireAllocated(t, dir, ".mem", 2*o.MemTableSize)

	require.NoError(t, s.Reset())
	requireAllocated(t, dir, ".mem", 2*o.MemTableSize)

	// One watch serves every database; closing one leaves the others'.
	d, err := OpenSharedBadger(filepath.Join(fs, "shared"), o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	requireAllocated(t, d.Dir(), ".mem", 2*o.MemTableSize)
	require.True(t, watching())
	require.NoError(t, s.Close())
	a, err := d.Open("a")
	require.NoError(t, err)
	mems, _ = filepath.Glob(filepath.Join(d.Dir(), "*.mem"))
	for i := range 30 {
		require.NoError(t, a.Write(fillerBatch(i, 100), int64(i)))
	}
	later, _ = filepath.Glob(filepath.Join(d.Dir(), "*.mem"))
	require.NotEqual(t, mems, later, "no new memtable log")
	requireAllocated(t, d.Dir(), ".mem", 2*o.MemTableSize)
	require.NoError(t, d.Close())
	watcher.mu.Lock()
	others := len(watcher.byWD)
	for _, p := range watcher.byWD {
		require.False(t, strings.HasPrefix(p.dir, fs), "%s is still watched", p.dir)
	}
	watcher.mu.Unlock()
	if others == 0 {
		require.False(t, watching(), "the watch outlived the databases")
	}
}

// A memtable log that cannot be allocated for lack of space makes the
// store refuse writes with ErrDiskFull, the filesystem's ENOSPC with it,
// even with the reserve check off; once space is freed the allocation is
// retried and writes go through.
func TestBadgerPreallocationRefusedRefusesWrites(t *testing.T) {
	fs := mountTmpfs(t, 32<<20)
	o := diskFullOptions()
	o.DiskReserve = -1
	dir := filepath.Join(fs, "store")
	s := openTestBadger(t, dir, o)
	require.NoError(t, s.Write(fillerBatch(1, 100), 1))

	ballast := fillTo(t, fs, 0)
	// Runs before the store's close, which on a full filesystem would
	// fault writing the memtable out.
	t.Cleanup(func() { _ = os.Remove(ballast) })
	// Stands for the log badger starts when its memtable is full.
	next := filepath.Join(dir, "99999.mem")
	f, err := os.Create(next)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	// Writing before the refusal is seen would go into the memtable
	// log, on a full filesystem.
	alloc := s.(*badgerStore).alloc
	require.Eventually(t, func() bool { return alloc != nil && alloc.full.Load() }, 5*time.Second, time.Millisecond,
		"the allocation of a new memtable log was not refused")
	require.ErrorIs(t, s.Write(fillerBatch(2, 100), 2), ErrDiskFull)
	err = s.Put([]byte("x"), []byte("y"))
	require.ErrorIs(t, err, ErrDiskFull)
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.ErrorContains(t, err, dir)

	require.NoError(t, os.Remove(ballast))
	require.NoError(t, s.Write(fillerBatch(2, 100), 2))
	require.GreaterOrEqual(t, allocated(t, next), 2*o.withDefaults().MemTableSize)
	require.NoError(t, os.Remove(next))
	pos, err := s.Position()
	require.NoError(t, err)
	require.Equal(t, int64(2), pos)
}

// Another process fills the filesystem between a Write's room check and
// badger's writing it into its memtable log, which still has pages never
// written: the pages are allocated already, so the Write lands instead of
// the process dying of SIGBUS; the next Writes are refused with
// ErrDiskFull, and once the space is freed they land and everything
// acknowledged reads back, before and after reopening. The store runs in a
// child process, so that a fault fails this test rather than ending the
// test binary.
func TestBadgerFilledByAnotherProcess(t *testing.T) {
	if fs := os.Getenv("EDDY_FILLED_DIR"); fs != "" {
		writeWhileFilled(t, fs, os.Getenv("EDDY_FILLED_LAYOUT"))
		return
	}
	for _, layout := range []string{"own", "shared"} {
		t.Run(layout, func(t *testing.T) {
			fs := mountTmpfs(t, 64<<20)
			cmd := exec.Command(os.Args[0], "-test.run=^TestBadgerFilledByAnotherProcess$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), "EDDY_FILLED_DIR="+fs, "EDDY_FILLED_LAYOUT="+layout)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "the store's process died writing on a filesystem filled under it:\n%s", firstLines(string(out), 30))
		})
	}
}

func writeWhileFilled(t *testing.T, fs, layout string) {
	o := diskFullOptions().withDefaults()
	dir := filepath.Join(fs, "db")
	var (
		s     Store
		write func(es []Entry, pos int64) error
		close func() error
	)
	open := func() {
		switch layout {
		case "own":
			st, err := OpenBadger(dir, o)
			require.NoError(t, err)
			s, write, close = st, st.Write, st.Close
		case "shared":
			d, err := OpenSharedBadger(dir, o)
			require.NoError(t, err)
			st, err := d.Open("a")
			require.NoError(t, err)
			s, close = st, d.Close
			write = func(es []Entry, pos int64) error {
				return d.Commit([]StoreWrite{{Store: st, Entries: es, Position: pos}})
			}
		default:
			t.Fatalf("layout %q", layout)
		}
	}
	open()
	// 100 entries of 1 KB: one transaction, ~100 KB of memtable log each,
	// well inside the 1 MiB memtable and on pages never written before;
	// the second also puts 1.5 MiB in the value log, past what is
	// allocated of it ahead of time.
	second := append(fillerBatch(2, 100), bigValues(2, 6)...)
	require.NoError(t, write(fillerBatch(1, 100), 1))
	var ballast string
	roomChecked = func(string) {
		if ballast == "" {
			ballast = fillTo(t, fs, 0)
		}
	}
	err := write(second, 2)
	roomChecked = nil
	require.NotEmpty(t, ballast, "the filesystem was not filled")
	require.NoError(t, err)
	require.ErrorIs(t, write(fillerBatch(3, 100), 3), ErrDiskFull)

	require.NoError(t, os.Remove(ballast))
	require.NoError(t, write(fillerBatch(3, 100), 3))
	readBack := func() {
		pos, err := s.Position()
		require.NoError(t, err)
		require.Equal(t, int64(3), pos)
		all := append(append(fillerBatch(1, 100), second...), fillerBatch(3, 100)...)
		{
			for _, e := range all {
				v, found, err := s.Get(e.Key)
				require.NoError(t, err)
				require.True(t, found, "%s", e.Key)
				require.Equal(t, e.Value, v)
			}
		}
	}
	readBack()
	require.NoError(t, close())
	open()
	readBack()
	require.NoError(t, close())
}

package statestore

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// mountTmpfs mounts a tmpfs of size bytes for the test, so the test can
// fill a real filesystem. It skips the test where mounting is not
// permitted (not root, no mount command, a container without the right).
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("disk-full test needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Skipf("disk-full test cannot mount a tmpfs: %v: %s", err, out)
	}
	// Registered after TempDir's cleanup, so it runs before it.
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fillTo writes a ballast file until only leave bytes remain free in dir's
// filesystem, and returns its path.
func fillTo(t *testing.T, dir string, leave int64) string {
	t.Helper()
	free, ok := freeBytes(dir)
	require.True(t, ok)
	require.Greater(t, free, leave, "nothing to fill")
	path := filepath.Join(dir, "ballast")
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for n := free - leave; n > 0; n -= int64(len(chunk)) {
		_, err := f.Write(chunk[:min(n, int64(len(chunk)))])
		require.NoError(t, err)
	}
	return path
}

// diskFullOptions keeps badger's files small, so that a tmpfs of a few
// dozen MiB holds the store and its reserve (14 MiB with these options).
func diskFullOptions() BadgerOptions {
	o := testBadgerOptions()
	o.MemTableSize = 1 << 20
	o.BaseTableSize = 256 << 10
	o.BaseLevelSize = 1 << 20
	o.ValueLogFileSize = 1 << 20
	o.NumLevelZeroTables = 5
	o.ValueLogGCInterval = -1
	return o
}

// A store on a full filesystem refuses writes with ErrDiskFull naming its
// directory, keeps serving its last committed state, opens no new store,
// and writes again once space is freed, with nothing lost or half-applied.
func TestBadgerDiskFull(t *testing.T) {
	fs := mountTmpfs(t, 32<<20)
	o := diskFullOptions().withDefaults()
	require.Equal(t, int64(14<<20), o.DiskReserve)
	dir := filepath.Join(fs, "store")
	s := openTestBadger(t, dir, o)

	batch := func(round, n int) []Entry {
		es := make([]Entry, n)
		for i := range es {
			es[i] = Entry{Key: fmt.Appendf(nil, "k%05d", i), Value: fmt.Appendf(nil, "round-%d-%0100d", round, i)}
		}
		return es
	}
	// One Write within a transaction, one staged (beyond 15% of the
	// memtable).
	require.NoError(t, s.Write(batch(1, 100), 10))
	require.NoError(t, s.Write(batch(2, 5000), 20))

	ballast := fillTo(t, fs, o.DiskReserve/2)

	check := func(err error, dir string) {
		t.Helper()
		require.ErrorIs(t, err, ErrDiskFull)
		require.ErrorContains(t, err, dir)
		var dfe *DiskFullError
		require.True(t, errors.As(err, &dfe))
		require.Less(t, dfe.Free, dfe.Reserve)
	}
	check(s.Write(batch(3, 100), 30), dir)
	check(s.Write(batch(3, 5000), 30), dir)
	check(s.Put([]byte("x"), []byte("y")), dir)
	check(s.Delete([]byte("k00001")), dir)
	_, err := OpenBadger(filepath.Join(fs, "other"), o)
	check(err, filepath.Join(fs, "other"))

	// Reads see the last committed Write, whole.
	pos, err := s.Position()
	require.NoError(t, err)
	require.Equal(t, int64(20), pos)
	for _, i := range []int{0, 99, 4999} {
		v, found, err := s.Get(fmt.Appendf(nil, "k%05d", i))
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, fmt.Sprintf("round-2-%0100d", i), string(v))
	}
	n, err := s.ApproximateCount()
	require.NoError(t, err)
	require.Equal(t, int64(5000), n)

	// Space is freed: the very Write that was refused goes through.
	require.NoError(t, os.Remove(ballast))
	require.NoError(t, s.Write(batch(3, 5000), 30))
	require.NoError(t, s.Close())

	s = openTestBadger(t, dir, o)
	pos, err = s.Position()
	require.NoError(t, err)
	require.Equal(t, int64(30), pos)
	v, found, err := s.Get([]byte("k04999"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, fmt.Sprintf("round-3-%0100d", 4999), string(v))
}

// The filesystem's own ENOSPC is reported as ErrDiskFull too, without
// losing the system error.
func TestDiskErrorWrapsENOSPC(t *testing.T) {
	err := diskError("/d", 5, fmt.Errorf("write: %w", syscall.ENOSPC))
	require.ErrorIs(t, err, ErrDiskFull)
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.ErrorContains(t, err, "/d")
	require.NoError(t, diskError("/d", 5, nil))
	other := errors.New("other")
	require.Equal(t, other, diskError("/d", 5, other))
}

// A negative reserve turns the check off; the default follows the options.
func TestDiskReserveOption(t *testing.T) {
	require.NoError(t, checkRoom(t.TempDir(), -1))
	require.Equal(t, int64(72<<20), BadgerOptions{}.withDefaults().DiskReserve)
	var dfe *DiskFullError
	require.True(t, errors.As(checkRoom(filepath.Join(t.TempDir(), "not", "yet"), 1<<62), &dfe), "a missing directory is measured at its parent")
}

// Closing a store whose memtable holds data on a full filesystem waits for
// space instead of flushing into it: badger writes its memtable out as a
// table through a memory-mapped sparse file, and on a full tmpfs that
// kills the process with SIGBUS. The close goes through once space is
// freed, and the store reopens with everything. The store runs in a child
// process, so that the fault, if it comes, fails this test rather than
// ending the test binary.
func TestBadgerCloseOnFullDiskWaitsForSpace(t *testing.T) {
	if dir := os.Getenv("EDDY_CLOSE_FULL_DIR"); dir != "" {
		closeOnFullDisk(t, dir)
		return
	}
	fs := mountTmpfs(t, 32<<20)
	cmd := exec.Command(os.Args[0], "-test.run=^TestBadgerCloseOnFullDiskWaitsForSpace$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "EDDY_CLOSE_FULL_DIR="+fs)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the store's process died closing on a full disk:\n%s", firstLines(string(out), 30))
}

func closeOnFullDisk(t *testing.T, fs string) {
	o := diskFullOptions().withDefaults()
	dir := filepath.Join(fs, "store")
	s, err := OpenBadger(dir, o)
	require.NoError(t, err)
	es := make([]Entry, 3000)
	for i := range es {
		es[i] = Entry{Key: fmt.Appendf(nil, "k%05d", i), Value: fmt.Appendf(nil, "%0200d", i)}
	}
	require.NoError(t, s.Write(es, 7))
	ballast := fillTo(t, fs, 0)

	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("the store closed with no space to write its memtable out: %v", err)
	case <-time.After(time.Second):
	}
	require.NoError(t, os.Remove(ballast))
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the store did not close once space was freed")
	}
	s, err = OpenBadger(dir, o)
	require.NoError(t, err)
	defer s.Close()
	pos, err := s.Position()
	require.NoError(t, err)
	require.Equal(t, int64(7), pos)
	v, found, err := s.Get([]byte("k02999"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, fmt.Sprintf("%0200d", 2999), string(v))
}

// The sweeper of a shared DB deletes a dropped store's keys only while the
// filesystem has room, as writes do: its tombstones would otherwise fill
// the memtable on a full disk. It finishes once space is freed.
func TestSharedSweepWaitsForRoom(t *testing.T) {
	fs := mountTmpfs(t, 32<<20)
	o := diskFullOptions()
	var logs syncBuffer
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	d, err := OpenSharedBadger(filepath.Join(fs, "db"), o)
	require.NoError(t, err)
	defer d.Close()
	s, err := d.Open("gone")
	require.NoError(t, err)
	require.NoError(t, s.Write(words(1000, "v"), 1))
	require.NoError(t, s.Close())
	id := sharedID(t, d, "gone")
	keys := rawKeys(t, d, storeNS(id))
	ballast := fillTo(t, fs, o.withDefaults().DiskReserve/2)
	t.Cleanup(func() { _ = os.Remove(ballast) })

	require.NoError(t, d.Drop("gone"))
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "dropped store's keys waits for space") },
		5*time.Second, 5*time.Millisecond, "the sweeper did not wait for space")
	require.Equal(t, keys, rawKeys(t, d, storeNS(id)), "keys deleted on a full disk")

	require.NoError(t, os.Remove(ballast))
	waitSwept(t, d)
	require.Zero(t, rawKeys(t, d, storeNS(id)))
}

// syncBuffer is a bytes.Buffer that a logger's goroutines may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[:min(len(lines), n)], "\n")
}

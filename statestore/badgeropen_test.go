package statestore

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/dgraph-io/badger/v4/y"
	"github.com/stretchr/testify/require"
)

// copyStore copies the files of the store in from (open or not) to to,
// as a crash would leave them: badger's logs are shared mappings, so what
// was written to them is in the copy.
func copyStore(t *testing.T, from, to string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(to, 0o755))
	entries, err := os.ReadDir(from)
	require.NoError(t, err)
	for _, e := range entries {
		if e.Name() == "LOCK" {
			continue
		}
		src, err := os.Open(filepath.Join(from, e.Name()))
		require.NoError(t, err)
		dst, err := os.Create(filepath.Join(to, e.Name()))
		require.NoError(t, err)
		_, err = io.Copy(dst, src)
		require.NoError(t, err)
		require.NoError(t, src.Close())
		require.NoError(t, dst.Close())
	}
}

// A store whose MANIFEST is gone, its tables and memtable log still there
// (kill -9, then the file deleted), fails the open with ErrCorrupt and is
// left as it is. Badger would open it with a new, empty manifest, delete the
// tables as unlisted and replay the log, whose position record is recent:
// the store would report a current position over missing keys.
func TestBadgerOpenRefusesMissingManifest(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	opts := DefaultBadgerOptions()
	fillAndClose(t, dir, opts)
	s, err := OpenBadger(dir, opts)
	require.NoError(t, err)
	require.NoError(t, s.Write([]Entry{{Key: []byte("late"), Value: []byte("in the memtable log")}}, 3001))
	crashed := filepath.Join(t.TempDir(), "crashed")
	copyStore(t, dir, crashed)
	require.NoError(t, s.Close())

	// The copy is what kill -9 leaves: it opens with all its keys.
	intact := filepath.Join(t.TempDir(), "intact")
	copyStore(t, crashed, intact)
	s, err = OpenBadger(intact, opts)
	require.NoError(t, err)
	pos, err := s.Position()
	require.NoError(t, err)
	require.EqualValues(t, 3001, pos)
	_, ok, err := s.Get([]byte("word-01234"))
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, s.Close())

	require.NoError(t, os.Remove(filepath.Join(crashed, "MANIFEST")))
	tables, err := filepath.Glob(filepath.Join(crashed, "*.sst"))
	require.NoError(t, err)
	require.NotEmpty(t, tables)
	s, err = OpenBadger(crashed, opts)
	if err == nil {
		pos, _ := s.Position()
		_, ok, _ := s.Get([]byte("word-01234"))
		s.Close()
		t.Fatalf("a store without its MANIFEST opened, at position %d, with word-01234 present: %v", pos, ok)
	}
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), "MANIFEST")
	for _, path := range tables {
		_, err := os.Stat(path)
		require.NoError(t, err, "the refused open left the tables alone")
	}
}

// A store that cannot be opened for want of file descriptors is no damaged
// store: at every limit from the files already open up to one the open
// fits in, the open fails with a MachineError naming RLIMIT_NOFILE (or
// badger exits the process, see below), never with ErrCorrupt nor an
// error of unknown cause, and the store still opens whole afterwards. The
// open runs in a child process, under a lowered RLIMIT_NOFILE, because
// badger exits the process (log.Fatal) when it cannot list the store's
// directory while opening it.
func TestBadgerOpenOutOfFilesKeepsStore(t *testing.T) {
	if dir := os.Getenv("EDDY_TEST_NOFILE_DIR"); dir != "" {
		openUnderFileLimit(dir, os.Getenv("EDDY_TEST_NOFILE_SPARE"))
		return
	}
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("counting open files needs /proc/self/fd")
	}
	dir := t.TempDir()
	opts := DefaultBadgerOptions()
	fillAndClose(t, dir, opts)
	// More tables, for badger to open several.
	for round := range 3 {
		s, err := OpenBadger(dir, opts)
		require.NoError(t, err)
		var es []Entry
		for i := range 3000 {
			es = append(es, Entry{Key: fmt.Appendf(nil, "round-%d-%05d", round, i), Value: []byte("a value")})
		}
		require.NoError(t, s.Write(es, int64(3001+round)))
		require.NoError(t, s.Close())
	}
	tables, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(tables), 4)

	var machine, inText, fatal int
	for spare := -2; ; spare++ {
		require.Less(t, spare, 100, "the open never fit")
		cmd := exec.Command(os.Args[0], "-test.run=^TestBadgerOpenOutOfFilesKeepsStore$", "-test.count=1")
		cmd.Env = append(os.Environ(), "EDDY_TEST_NOFILE_DIR="+dir, "EDDY_TEST_NOFILE_SPARE="+strconv.Itoa(spare))
		out, _ := cmd.CombinedOutput()
		_, result, ok := strings.Cut(string(out), "nofile-result: ")
		if !ok {
			// Badger's log.Fatal: it could not list the directory.
			require.Contains(t, string(out), "too many open files", "spare %d: %s", spare, out)
			fatal++
		} else {
			result, _, _ = strings.Cut(result, "\n")
			kind, msg, _ := strings.Cut(result, " ")
			t.Logf("spare %d: %s %s", spare, kind, msg)
			if kind == "opened" {
				break
			}
			require.Contains(t, []string{"machine-chain", "machine-text"}, kind, "spare %d: %s", spare, msg)
			require.Contains(t, msg, "RLIMIT_NOFILE")
			require.Contains(t, msg, "ulimit -n")
			machine++
			if kind == "machine-text" {
				inText++
			}
		}
		s, err := OpenBadger(dir, opts)
		require.NoError(t, err, "spare %d", spare)
		v, ok, err := s.Get([]byte("word-01234"))
		require.NoError(t, err)
		require.True(t, ok, "spare %d", spare)
		require.Equal(t, "count 1234 of a word", string(v))
		pos, err := s.Position()
		require.NoError(t, err)
		require.EqualValues(t, 3003, pos)
		require.NoError(t, s.Close())
	}
	t.Logf("%d opens failed with a machine error (%d found only in badger's text), %d ended in badger's log.Fatal", machine, inText, fatal)
	require.Positive(t, inText, "some failures came from badger, its error flattened into text")
}

// openUnderFileLimit opens the store in dir with RLIMIT_NOFILE set to the
// files open now plus spare, and prints how the open went.
func openUnderFileLimit(dir, spare string) {
	n, err := strconv.Atoi(spare)
	if err != nil {
		panic(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		panic(err)
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		panic(err)
	}
	// The listing held one descriptor of its own.
	lim.Cur = uint64(len(fds) - 1 + n)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		panic(err)
	}
	s, err := OpenBadger(dir, DefaultBadgerOptions())
	var me *MachineError
	switch {
	case err == nil:
		fmt.Println("nofile-result: opened")
		_ = s.Close()
	case errors.As(err, &me) && me.Errno == syscall.EMFILE:
		kind := "machine-text"
		if errors.Is(me.Err, syscall.EMFILE) {
			kind = "machine-chain"
		}
		fmt.Printf("nofile-result: %s %s\n", kind, strings.ReplaceAll(err.Error(), "\n", " "))
	case errors.Is(err, ErrCorrupt):
		fmt.Printf("nofile-result: corrupt %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
	default:
		fmt.Printf("nofile-result: other %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
	}
}

// Errors of the machine are found where badger flattened them into text
// (y.Wrapf, as badger wraps them), each with what to change; badger's words
// for damaged files wrap ErrCorrupt; anything else claims nothing.
func TestBadgerOpenErrorClassification(t *testing.T) {
	flat := func(errno syscall.Errno) error {
		return y.Wrapf(&fs.PathError{Op: "open", Path: "/s/000001.mem", Err: errno}, "While opening memtable: %s", "/s/000001.mem")
	}
	for _, c := range []struct {
		err   error
		errno syscall.Errno
		hint  string
	}{
		{flat(syscall.EMFILE), syscall.EMFILE, "ulimit -n"},
		{flat(syscall.ENFILE), syscall.ENFILE, "fs.file-max"},
		{flat(syscall.EACCES), syscall.EACCES, "access to the state directory"},
		{flat(syscall.EPERM), syscall.EPERM, "access to the state directory"},
		{flat(syscall.EIO), syscall.EIO, "input/output error"},
		{flat(syscall.ENOMEM), syscall.ENOMEM, "vm.max_map_count"},
		{flat(syscall.EROFS), syscall.EROFS, "read-write"},
		// A table the manifest lists whose file cannot be read for want of
		// descriptors is no damaged table.
		{y.Wrapf(flat(syscall.EMFILE), "Opening table: %q", "/s/000002.sst"), syscall.EMFILE, "RLIMIT_NOFILE"},
	} {
		require.False(t, errors.Is(c.err, c.errno), "the chain is lost: %v", c.err)
		err := openError("/s", 0, c.err)
		var me *MachineError
		require.True(t, errors.As(err, &me), "%v", err)
		require.Equal(t, c.errno, me.Errno)
		require.ErrorIs(t, err, c.errno)
		require.NotErrorIs(t, err, ErrCorrupt)
		require.Contains(t, err.Error(), c.hint)
		require.Contains(t, err.Error(), "/s")
	}

	noSpace := openError("/s", 0, flat(syscall.ENOSPC))
	require.ErrorIs(t, noSpace, ErrDiskFull)
	require.NotErrorIs(t, noSpace, ErrCorrupt)

	for _, damaged := range []error{
		errors.New("manifest has checksum mismatch"),
		fmt.Errorf("file does not exist for table %d", 7),
		y.Wrap(errors.New("Key range overlap"), "Level validation"),
	} {
		require.ErrorIs(t, openError("/s", 0, damaged), ErrCorrupt, "%v", damaged)
	}

	var me *MachineError
	for _, unknown := range []error{
		errors.New("something badger never said"),
		// Only badger's words count, not a store's name.
		y.Wrapf(errors.New("something badger never said"), "While opening file: /s/CHECKSUM_MISMATCH/000001.vlog"),
	} {
		err := openError("/s/CHECKSUM_MISMATCH", 0, unknown)
		require.NotErrorIs(t, err, ErrCorrupt, "%v", unknown)
		require.False(t, errors.As(err, &me))
	}
}

// A store another process holds open (badger's directory lock) is no
// damaged store.
func TestBadgerOpenHeldStoreIsNoDamage(t *testing.T) {
	dir := t.TempDir()
	opts := DefaultBadgerOptions()
	fillAndClose(t, dir, opts)
	s, err := OpenBadger(dir, opts)
	require.NoError(t, err)
	defer s.Close()
	_, err = OpenBadger(dir, opts)
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrCorrupt)
	var me *MachineError
	require.False(t, errors.As(err, &me), "%v", err)
}

// A store whose files the process may not read is no damaged store.
func TestBadgerOpenPermissionDenied(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads files whatever their mode")
	}
	dir := filepath.Join(t.TempDir(), "store")
	opts := DefaultBadgerOptions()
	fillAndClose(t, dir, opts)
	require.NoError(t, os.Chmod(dir, 0))
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	_, err := OpenBadger(dir, opts)
	var me *MachineError
	require.True(t, errors.As(err, &me), "%v", err)
	require.Equal(t, syscall.EACCES, me.Errno)
	require.NotErrorIs(t, err, ErrCorrupt)
}

package statestore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// fillAndClose writes enough keys for badger to hold them in table files
// once the store is closed, and returns the table files.
func fillAndClose(t *testing.T, dir string, opts BadgerOptions) []string {
	t.Helper()
	s, err := OpenBadger(dir, opts)
	require.NoError(t, err)
	var es []Entry
	for i := range 3000 {
		es = append(es, Entry{Key: fmt.Appendf(nil, "word-%05d", i), Value: fmt.Appendf(nil, "count %d of a word", i)})
	}
	require.NoError(t, s.Write(es, 3000))
	require.NoError(t, s.Close())
	tables, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	require.NoError(t, err)
	require.NotEmpty(t, tables, "closing flushes the memtable to a table file")
	return tables
}

// A table file damaged on disk fails the open with ErrCorruptTable, on the
// caller's goroutine: badger itself would panic on a goroutine of its own
// (a truncated table, killing the process) or at the first read of the
// damaged block (a garbled one), and its own checksum verification would
// open the store without the table's keys.
func TestBadgerOpenRefusesDamagedTable(t *testing.T) {
	for _, c := range []struct {
		name     string
		compress bool
		damage   func(t *testing.T, path string)
	}{
		{"garbled block", false, func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			require.NoError(t, err)
			defer f.Close()
			_, err = f.WriteAt([]byte("garbage garbage garbage garbage!"), 200)
			require.NoError(t, err)
		}},
		{"garbled block, compressed", true, func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			require.NoError(t, err)
			defer f.Close()
			_, err = f.WriteAt([]byte("garbage garbage garbage garbage!"), 200)
			require.NoError(t, err)
		}},
		{"truncated", false, func(t *testing.T, path string) {
			info, err := os.Stat(path)
			require.NoError(t, err)
			require.NoError(t, os.Truncate(path, info.Size()/2))
		}},
		{"emptied", false, func(t *testing.T, path string) {
			require.NoError(t, os.Truncate(path, 0))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := DefaultBadgerOptions()
			opts.Compress = c.compress
			tables := fillAndClose(t, dir, opts)

			// Intact, the store opens with its data.
			s, err := OpenBadger(dir, opts)
			require.NoError(t, err)
			v, ok, err := s.Get([]byte("word-01234"))
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, "count 1234 of a word", string(v))
			require.NoError(t, s.Close())

			c.damage(t, tables[0])
			_, err = OpenBadger(dir, opts)
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrCorruptTable), "got %v", err)

			// Deleted, it opens empty.
			require.NoError(t, DestroyBadger(dir))
			s, err = OpenBadger(dir, opts)
			require.NoError(t, err)
			_, ok, err = s.Get([]byte("word-01234"))
			require.NoError(t, err)
			require.False(t, ok)
			require.NoError(t, s.Close())
		})
	}
}

// A store written with other compression settings is no damaged store.
func TestBadgerOpenTablesOfOtherCompression(t *testing.T) {
	dir := t.TempDir()
	opts := DefaultBadgerOptions()
	opts.Compress = true
	fillAndClose(t, dir, opts)
	opts.Compress = false
	s, err := OpenBadger(dir, opts)
	require.NoError(t, err)
	v, ok, err := s.Get([]byte("word-00007"))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "count 7 of a word", string(v))
	require.NoError(t, s.Close())
}

// A table file the manifest does not list (one a crash left half written)
// is no damaged store: badger deletes it when it opens the store.
func TestBadgerOpenIgnoresUnlistedTable(t *testing.T) {
	dir := t.TempDir()
	opts := DefaultBadgerOptions()
	fillAndClose(t, dir, opts)
	orphan := filepath.Join(dir, "000999.sst")
	require.NoError(t, os.WriteFile(orphan, make([]byte, 4096), 0o644))
	s, err := OpenBadger(dir, opts)
	require.NoError(t, err)
	v, ok, err := s.Get([]byte("word-00042"))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "count 42 of a word", string(v))
	require.NoError(t, s.Close())
	_, err = os.Stat(orphan)
	require.ErrorIs(t, err, os.ErrNotExist)
}

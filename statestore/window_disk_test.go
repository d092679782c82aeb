package statestore

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// diskUsage is the space dir's files occupy (allocated blocks, since
// badger's logs are sparse).
func diskUsage(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			n += st.Blocks * 512
		} else {
			n += info.Size()
		}
		return nil
	})
	require.NoError(t, err)
	return n
}

// TestWindowStoreDiskBounded writes a badger window store for far longer
// than its retention: its disk use must stop growing with history. About
// 2.9 MB of windows are live at any time; 39 MB are written in all. Measured:
// 8-12 MiB on disk from the 500th round on (memtable logs and level 0
// tables included), where a store keeping history would pass 39 MiB.
func TestWindowStoreDiskBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 39 MB")
	}
	dir := t.TempDir()
	o := testBadgerOptions()
	o.MemTableSize = 1 << 20
	o.BaseTableSize = 256 << 10
	o.BaseLevelSize = 1 << 20
	inner := openTestBadger(t, dir, o)
	opts := WindowOptions{Retention: 1000, SegmentInterval: 250}
	seg, err := NewSegmentedStore(inner, opts)
	require.NoError(t, err)
	w := openWindows(t, seg, opts)
	value := make([]byte, 200)
	const keys = 100
	var written int64
	const rounds = 2000
	for r := range rounds {
		ts := int64(r) * 10
		batch := make([]Entry, 0, keys)
		for k := range keys {
			key := []byte(fmt.Sprintf("key-%03d", k))
			batch = append(batch, Entry{Key: w.key(key, ts), Value: value})
			written += int64(len(key) + len(value))
		}
		require.NoError(t, seg.Write(batch, int64(r)))
		if r > 0 && (r%250 == 0 || r == rounds-1) {
			u := diskUsage(t, dir)
			t.Logf("round %d: written %d MiB, disk %d KiB", r, written>>20, u>>10)
			require.Less(t, u, int64(20<<20), "round %d: disk use grows with history", r)
		}
	}
	require.Greater(t, written, int64(38<<20))
	n, err := inner.ApproximateCount()
	require.NoError(t, err)
	require.LessOrEqual(t, n, int64(keys*(1000+250)/10))
}

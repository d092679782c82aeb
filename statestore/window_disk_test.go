package statestore

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// diskUsage is the space dir's files occupy (allocated blocks, since
// badger's logs are sparse). Badger's compactor deletes tables while the
// walk runs, so a file gone between listing and stat counts as nothing.
func diskUsage(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
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
			// Badger's compactors run behind the writes, further behind
			// on a busy machine: a sample over the bound is taken again
			// until they catch up. A store keeping history never would.
			u := diskUsage(t, dir)
			t.Logf("round %d: written %d MiB, disk %d KiB", r, written>>20, u>>10)
			deadline := time.Now().Add(30 * time.Second)
			for u >= 20<<20 && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
				u = diskUsage(t, dir)
			}
			require.Less(t, u, int64(20<<20), "round %d: disk use grows with history (%d KiB after compactions had 30 s)", r, u>>10)
		}
	}
	require.Greater(t, written, int64(38<<20))
	n, err := inner.ApproximateCount()
	require.NoError(t, err)
	require.LessOrEqual(t, n, int64(keys*(1000+250)/10))
}

// dropCounter counts the tombstones written to a store and the prefixes
// dropped from it.
type dropCounter struct {
	Store
	tombstones int
	dropped    [][]byte
}

func (d *dropCounter) Write(entries []Entry, position int64) error {
	for _, e := range entries {
		if e.Deleted() {
			d.tombstones++
		}
	}
	return d.Store.Write(entries, position)
}

func (d *dropCounter) dropPrefix(p []byte) error {
	d.dropped = append(d.dropped, p)
	return d.Store.(prefixDropper).dropPrefix(p)
}

// TestSegmentDropByPrefix: on badger, an expired segment of more than
// dropBatch keys goes by prefix, a smaller one key by key, and both are
// gone while later segments and the position stay.
func TestSegmentDropByPrefix(t *testing.T) {
	opts := WindowOptions{Retention: 100, SegmentInterval: 10, WindowSize: 1}
	inner := &dropCounter{Store: openTestBadger(t, t.TempDir(), testBadgerOptions())}
	seg, err := NewSegmentedStore(inner, opts)
	require.NoError(t, err)
	w := openWindows(t, seg, opts)
	var batch []Entry
	for i := range dropBatch + 100 {
		batch = append(batch, Entry{Key: w.key([]byte(fmt.Sprintf("big-%05d", i)), 5), Value: []byte("v")})
	}
	for i := range 10 {
		batch = append(batch, Entry{Key: w.key([]byte(fmt.Sprintf("small-%d", i)), 15), Value: []byte("v")})
	}
	batch = append(batch, Entry{Key: w.key([]byte("live"), 120), Value: []byte("v")})
	require.NoError(t, seg.Write(batch[:len(batch)-1], 7))
	n, err := inner.ApproximateCount()
	require.NoError(t, err)
	require.Equal(t, int64(dropBatch+110), n)
	// Time 120 expires everything at or below 20: segments 0 and 1.
	require.NoError(t, seg.Write(batch[len(batch)-1:], 8))
	require.Equal(t, [][]byte{appendTime(nil, 0)}, inner.dropped)
	require.Equal(t, 10, inner.tombstones, "the small segment key by key")
	it, err := inner.All()
	require.NoError(t, err)
	var left []string
	for it.Next() {
		left = append(left, string(it.Key()))
	}
	require.NoError(t, it.Err())
	require.NoError(t, it.Close())
	require.Equal(t, []string{string(append(appendTime(nil, 12), w.key([]byte("live"), 120)...))}, left, "the inner store holds the key behind its segment")
	p, err := seg.Position()
	require.NoError(t, err)
	require.Equal(t, int64(8), p)
}

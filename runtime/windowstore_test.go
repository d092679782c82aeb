package runtime

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
)

// A changelog written under one segment interval restores into a store
// laid out by another: keys are re-segmented, so the windows are found,
// and a later record of the same window replaces the earlier one.
func TestWindowStoreResegmentsChangelogKeys(t *testing.T) {
	old := statestore.WindowOptions{Retention: 100_000, SegmentInterval: 1_000, WindowSize: 10}
	src := statestore.NewMemory()
	oldStore, err := statestore.NewSegmentedStore(src, old)
	require.NoError(t, err)
	ws, err := statestore.NewWindowStore(oldStore, old)
	require.NoError(t, err)
	for start := int64(0); start < 50_000; start += 2_500 {
		require.NoError(t, ws.Put([]byte("k"), start, []byte{byte(start / 2_500)}))
	}
	var entries []statestore.Entry
	it, err := src.All()
	require.NoError(t, err)
	for it.Next() {
		entries = append(entries, statestore.Entry{Key: append([]byte(nil), it.Key()...), Value: append([]byte(nil), it.Value()...)})
	}
	require.NoError(t, it.Close())
	// The same window written again, now under the new layout's key.
	info := graph.StoreInfo{Name: "w", Kind: graph.Window, Retention: 100_000, SegmentInterval: 7_000, WindowSize: 10}
	dst, err := wrapWindowed(statestore.NewMemory(), info)
	require.NoError(t, err)
	require.NoError(t, dst.Write(entries, 10))

	// Without the rewrite the foundation refuses the keys.
	plain, err := statestore.NewSegmentedStore(statestore.NewMemory(), info.WindowOptions())
	require.NoError(t, err)
	var ee *statestore.EntryError
	require.ErrorAs(t, plain.Write(entries, 10), &ee)

	rd, err := statestore.NewWindowStore(dst, info.WindowOptions())
	require.NoError(t, err)
	require.NoError(t, rd.Put([]byte("k"), 47_500, []byte{99}))
	for start := int64(0); start < 47_500; start += 2_500 {
		v, ok, err := rd.Get([]byte("k"), start)
		require.NoError(t, err)
		require.True(t, ok, "window %d", start)
		require.Equal(t, []byte{byte(start / 2_500)}, v)
	}
	v, _, err := rd.Get([]byte("k"), 47_500)
	require.NoError(t, err)
	require.Equal(t, []byte{99}, v)
	n, err := dst.ApproximateCount()
	require.NoError(t, err)
	require.Equal(t, int64(20), n)
}

func TestWindowLayoutFileResetsStore(t *testing.T) {
	a := &App{log: slog.New(slog.DiscardHandler), dir: &stateDir{path: t.TempDir()}}
	id := task.ID{SubTopology: 0, Partition: 1}
	info := graph.StoreInfo{Name: "w", Persistent: true, Kind: graph.Window, Retention: 10_000}
	require.NoError(t, a.checkWindowLayout(id, info))
	s, err := a.openPersistent(id, "w")
	require.NoError(t, err)
	require.NoError(t, s.Write([]statestore.Entry{{Key: []byte("x"), Value: []byte("y")}}, 5))
	require.NoError(t, s.Close())

	require.NoError(t, a.checkWindowLayout(id, info))
	require.Zero(t, a.StoresWiped(), "same layout keeps the store")
	info.Retention = 20_000
	require.NoError(t, a.checkWindowLayout(id, info))
	require.Equal(t, int64(1), a.StoresWiped())
	s, err = a.openPersistent(id, "w")
	require.NoError(t, err)
	pos, err := s.Position()
	require.NoError(t, err)
	require.Equal(t, statestore.NoPosition, pos, "a store of another layout is rebuilt from scratch")
	require.NoError(t, s.Close())
}

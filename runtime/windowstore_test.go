package runtime

import (
	"encoding/binary"
	"log/slog"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
)

// A changelog written before segments left the changelog carries keys
// behind the segment of their writer's interval; they restore into a store
// of another interval, and a later record of the same window, keyed
// without a segment, replaces the earlier one.
func TestWindowStoreRestoresSegmentPrefixedChangelog(t *testing.T) {
	cur := statestore.WindowOptions{Retention: 100_000, WindowSize: 10}
	src, err := statestore.NewSegmentedStore(statestore.NewMemory(), cur)
	require.NoError(t, err)
	ws, err := statestore.NewWindowStore(src, cur)
	require.NoError(t, err)
	for start := int64(0); start < 50_000; start += 2_500 {
		require.NoError(t, ws.Put([]byte("k"), start, []byte{byte(start / 2_500)}))
	}
	// The changelog records of the old layout: the key behind its segment
	// under the old default interval, half the retention.
	var entries []statestore.Entry
	it, err := src.All()
	require.NoError(t, err)
	for it.Next() {
		start := int64(binary.BigEndian.Uint64(it.Key()[len(it.Key())-8:]))
		k := binary.BigEndian.AppendUint64(nil, uint64(start/50_000))
		entries = append(entries, statestore.Entry{Key: append(k, it.Key()...), Value: append([]byte(nil), it.Value()...)})
	}
	require.NoError(t, it.Close())
	require.Len(t, entries, 20)
	info := graph.StoreInfo{Name: "w", Kind: graph.Window, Retention: 100_000, WindowSize: 10}
	dst, err := wrapWindowed(statestore.NewMemory(), info, 7_000)
	require.NoError(t, err)
	require.NoError(t, dst.Write(entries, 10))

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

// A persistent window store written under the old default interval (half
// the retention) keeps it when reopened, though the default has changed:
// its windows read back and new ones land beside them. A store recorded as
// another kind is deleted.
func TestWindowLayoutFileKeepsInterval(t *testing.T) {
	t.Parallel()
	a := &App{log: slog.New(slog.DiscardHandler), dir: &stateDir{path: t.TempDir()}}
	id := task.ID{SubTopology: 0, Partition: 1}
	info := graph.StoreInfo{Name: "w", Persistent: true, Kind: graph.Window, Retention: 10_000, WindowSize: 100}
	require.NotEqual(t, int64(5_000), segmentInterval(info.WindowOptions()), "the default is no longer half the retention")
	require.NoError(t, os.MkdirAll(task.Dir(a.appDir(), id), 0o755))
	require.NoError(t, os.WriteFile(a.layoutFile(id, "w"), []byte("kind=window segment-interval=5000\n"), 0o644))
	s, err := a.openPersistent(id, "w")
	require.NoError(t, err)
	old := info.WindowOptions()
	old.SegmentInterval = 5_000
	seg, err := statestore.NewSegmentedStore(s, old)
	require.NoError(t, err)
	w, err := statestore.NewWindowStore(seg, old)
	require.NoError(t, err)
	for start := int64(0); start <= 9_000; start += 100 {
		require.NoError(t, w.Put([]byte("k"), start, []byte{byte(start / 100)}))
	}
	require.NoError(t, seg.Write(nil, 5))
	require.NoError(t, seg.Close())

	iv, err := a.checkWindowLayout(id, info)
	require.NoError(t, err)
	require.Equal(t, int64(5_000), iv, "the recorded interval")
	s, err = a.openPersistent(id, "w")
	require.NoError(t, err)
	store, err := wrapWindowed(s, info, iv)
	require.NoError(t, err)
	w, err = statestore.NewWindowStore(store, info.WindowOptions())
	require.NoError(t, err)
	require.NoError(t, w.Put([]byte("k"), 9_100, []byte{91}))
	wit, err := w.Fetch([]byte("k"), 0, 10_000)
	require.NoError(t, err)
	var got []int64
	for wit.Next() {
		require.Equal(t, []byte{byte(wit.Start() / 100)}, wit.Value())
		got = append(got, wit.Start())
	}
	require.NoError(t, wit.Err())
	require.NoError(t, wit.Close())
	require.Len(t, got, 92)
	require.Equal(t, int64(9_100), got[len(got)-1])
	pos, err := store.Position()
	require.NoError(t, err)
	require.Equal(t, int64(5), pos)
	require.NoError(t, store.Close())
	require.Zero(t, a.storesWiped.Load())

	// Reopened under the wrong interval, the store refuses rather than
	// misreads.
	s, err = a.openPersistent(id, "w")
	require.NoError(t, err)
	wrong, err := wrapWindowed(s, info, segmentInterval(info.WindowOptions()))
	require.NoError(t, err)
	_, _, err = wrong.Get(append([]byte("k\x00\x01"), make([]byte, 8)...))
	require.ErrorContains(t, err, "another segment interval")
	require.NoError(t, wrong.Close())

	info.Kind = graph.Session
	iv, err = a.checkWindowLayout(id, info)
	require.NoError(t, err)
	require.Equal(t, segmentInterval(info.WindowOptions()), iv)
	require.Equal(t, int64(1), a.storesWiped.Load())
	s, err = a.openPersistent(id, "w")
	require.NoError(t, err)
	pos, err = s.Position()
	require.NoError(t, err)
	require.Equal(t, statestore.NoPosition, pos, "a store of another kind is rebuilt from scratch")
	require.NoError(t, s.Close())
	have, err := os.ReadFile(a.layoutFile(id, "w"))
	require.NoError(t, err)
	require.Equal(t, windowLayout(graph.Session, iv), string(have))
}

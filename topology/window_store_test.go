package topology

import (
	"testing"

	"github.com/eddystreams/eddy/internal/cache"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/stretchr/testify/require"
)

func TestTypedWindowAndSessionStores(t *testing.T) {
	opts := statestore.WindowOptions{Retention: 100, SegmentInterval: 10, WindowSize: 10}
	seg, err := statestore.NewSegmentedStore(statestore.NewMemory(), opts)
	require.NoError(t, err)
	cache := cache.New(seg, nil)
	bw, err := statestore.NewWindowStore(cache, opts)
	require.NoError(t, err)
	w := NewWindowStore(bw, serde.String, serde.Int64)
	win := TumblingWindows(10 * ms)
	for _, ts := range []int64{3, 7, 12, 25} {
		for _, x := range win.WindowsFor(ts) {
			old, _, err := w.Get("k", x.Start)
			require.NoError(t, err)
			require.NoError(t, w.Put("k", x.Start, old+1))
		}
	}
	it, err := w.Fetch("k", 0, 100)
	require.NoError(t, err)
	got, err := it.Collect()
	require.NoError(t, err)
	require.Equal(t, []KeyValue[Windowed[string], int64]{
		{Key: Windowed[string]{"k", Window{0, 10}}, Value: 2},
		{Key: Windowed[string]{"k", Window{10, 20}}, Value: 1},
		{Key: Windowed[string]{"k", Window{20, 30}}, Value: 1},
	}, got)
	it, err = w.FetchBackward("k", 10, 20)
	require.NoError(t, err)
	got, err = it.Collect()
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, int64(20), got[0].Key.Window.Start)
	require.NoError(t, w.Remove("k", 0))
	_, found, err := w.Get("k", 0)
	require.NoError(t, err)
	require.False(t, found)

	sopts := statestore.WindowOptions{Retention: 100}
	sseg, err := statestore.NewSegmentedStore(statestore.NewMemory(), sopts)
	require.NoError(t, err)
	bs, err := statestore.NewSessionStore(sseg, sopts)
	require.NoError(t, err)
	s := NewSessionStore(bs, serde.String, serde.Int64)
	sw := NewSessionWindows(5 * ms)
	for _, ts := range []int64{1, 4, 20, 12, 16} {
		e, l := sw.SearchBounds(ts)
		it, err := s.FindSessions("u", e, l)
		require.NoError(t, err)
		found, err := it.Collect()
		require.NoError(t, err)
		n := int64(1)
		var joined []Window
		for _, f := range found {
			joined = append(joined, f.Key.Window)
			n += f.Value
			require.NoError(t, s.Remove("u", f.Key.Window))
		}
		require.NoError(t, s.Put("u", sw.Merge(ts, joined), n))
	}
	it, err = s.FindSessions("u", 0, 100)
	require.NoError(t, err)
	got, err = it.Collect()
	require.NoError(t, err)
	require.Equal(t, []KeyValue[Windowed[string], int64]{
		{Key: Windowed[string]{"u", Window{1, 4}}, Value: 2},
		{Key: Windowed[string]{"u", Window{12, 20}}, Value: 3},
	}, got)
}

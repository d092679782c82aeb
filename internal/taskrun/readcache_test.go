package taskrun

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/cache"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// A running task's key-value stores keep what they read; its window stores,
// restoring tasks and parked ones do not, and a demoted task gives the
// read share of its budget back.
func TestReadCacheOnlyWhileRunningAndKeyValue(t *testing.T) {
	b := topology.NewBuilder()
	g := topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
	g.Count("counts").ToStream().To("out", serde.String, serde.Int64)
	w := topology.TumblingWindows(time.Minute)
	topology.WindowedBy(g, w).Count("wcounts").ToStream().To("wout", topology.TimeWindowedSerde(serde.String, w.Size()), serde.Int64)
	topo, err := b.Build()
	require.NoError(t, err)
	budget := cache.NewBudget(1 << 20)
	a, err := NewActive(Config{
		ID: task.ID{}, AppID: "app", Topology: topo,
		Changelog: func(s string) string { return "app-" + s + "-changelog" },
		Open: func(_ task.ID, info topology.StoreInfo) (statestore.Store, error) {
			if info.Windowed() {
				return statestore.NewSegmentedStore(statestore.NewMemory(), info.WindowOptions())
			}
			return statestore.NewMemory(), nil
		},
		Budget: budget,
		Sender: &sink{},
	})
	require.NoError(t, err)
	defer a.Close(true)
	kv, _ := a.Store("counts")
	win, _ := a.Store("wcounts")
	require.NoError(t, kv.Inner.Write([]statestore.Entry{{Key: []byte("restored"), Value: []byte{1}}}, 1))
	_, _, err = kv.Cache.Get([]byte("restored"))
	require.NoError(t, err)
	require.Zero(t, kv.Cache.ReadCacheLen(), "a restoring task's store is written by the restorer: nothing is kept")
	a.Restored()

	var off int64
	round := func() {
		for _, k := range []string{"a", "b", "c"} {
			require.NoError(t, a.Process(graph.InputRecord{Topic: "in", Offset: off, Key: []byte(k), Value: []byte("v"), Timestamp: time.Unix(60, 0)}))
			off++
		}
		require.NoError(t, a.Flush())
		a.PendingChangelog()
		require.NoError(t, a.CompleteCommit(func(string, int32) (int64, bool) { return off, true }))
	}
	round()
	round() // reads the committed counts back through the caches
	require.Equal(t, 3, kv.Cache.ReadCacheLen())
	require.Zero(t, win.Cache.ReadCacheLen())
	require.NotZero(t, budget.ReadUsed())
	round()
	v, found, err := kv.Cache.Get([]byte("a"))
	require.NoError(t, err)
	require.True(t, found)
	n, _ := serde.Int64.Decode(bareValue(v))
	require.EqualValues(t, 3, n)

	stores, err := a.Demote()
	require.NoError(t, err)
	require.Zero(t, budget.ReadUsed())
	for _, h := range stores {
		require.Zero(t, h.Cache.ReadCacheLen())
		require.NoError(t, h.Inner.Close())
	}
}

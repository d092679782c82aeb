package runtime

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// overlap records how many calls of during run at once. The first call
// waits (up to a few seconds) for a second to start, so that calls made
// several at once are seen to overlap however the machine schedules them,
// and calls made one at a time are not.
type overlap struct{ now, most atomic.Int64 }

func (o *overlap) during(f func()) {
	n := o.now.Add(1)
	for m := o.most.Load(); n > m && !o.most.CompareAndSwap(m, n); m = o.most.Load() {
	}
	for deadline := time.Now().Add(3 * time.Second); o.most.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	f()
	o.now.Add(-1)
}

// closeOverlap is a store whose Close is watched by an overlap.
type closeOverlap struct {
	statestore.Store
	o *overlap
}

func (c closeOverlap) Close() (err error) {
	c.o.during(func() { err = c.Store.Close() })
	return err
}

func runningTasks(a *App) int {
	n := 0
	for _, t := range a.Tasks() {
		if t.State == task.Running {
			n++
		}
	}
	return n
}

// A thread opens the stores of the tasks it is newly assigned several at
// once, and closes its tasks' stores several at once when it stops.
func TestTaskStoresOpenAndCloseSeveralAtOnce(t *testing.T) {
	b, err := broker.Start(broker.Config{Partitions: 4})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	_, err = kadm.NewClient(cl).CreateTopics(context.Background(), 4, -1, nil, "in")
	require.NoError(t, err)

	app, err := New(countTopology(t), Config{ApplicationID: "overlap", Brokers: b.Addrs(), StateDir: t.TempDir(), NumStreamThreads: 1})
	require.NoError(t, err)
	var opens, closes overlap
	app.openStoreHook = func(_ task.ID, _ topology.StoreInfo, open func() (statestore.Store, error)) (s statestore.Store, err error) {
		opens.during(func() { s, err = open() })
		if err != nil {
			return nil, err
		}
		return closeOverlap{Store: s, o: &closes}, nil
	}
	require.NoError(t, app.Start(context.Background()))
	waitFor(t, 30*time.Second, "all four tasks running", func() bool { return runningTasks(app) == 4 })
	require.GreaterOrEqual(t, opens.most.Load(), int64(2), "the four stores were opened one at a time")
	require.NoError(t, app.Close(context.Background()))
	require.GreaterOrEqual(t, closes.most.Load(), int64(2), "the four stores were closed one at a time")
}

// A restarted instance's tasks take the stores it opened to read their
// positions for its subscription instead of opening them again.
func TestRestartTakesTheStoresItScanned(t *testing.T) {
	b, _ := startBroker(t, "in")
	dir := t.TempDir()
	start := func() (*App, *atomic.Int64) {
		app, err := New(countTopology(t), Config{ApplicationID: "scanned", Brokers: b.Addrs(), StateDir: dir, NumStreamThreads: 1})
		require.NoError(t, err)
		var opened atomic.Int64
		app.openStoreHook = func(_ task.ID, _ topology.StoreInfo, open func() (statestore.Store, error)) (statestore.Store, error) {
			opened.Add(1)
			return open()
		}
		require.NoError(t, app.Start(context.Background()))
		waitFor(t, 30*time.Second, "both tasks running", func() bool { return runningTasks(app) == 2 })
		return app, &opened
	}
	app, opened := start()
	require.EqualValues(t, 2, opened.Load())
	require.NoError(t, app.Close(context.Background()))

	app, opened = start()
	defer app.Close(context.Background())
	require.Zero(t, opened.Load(), "stores opened again after the state directory's scan")
}

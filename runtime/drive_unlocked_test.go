package runtime

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// A stream thread runs user code without its lock: a processor that waits
// for another goroutine to take and release the thread's mu gets past the
// wait, and the thread goes on to process and publish the record.
func TestProcessorRunsWithoutTheThreadsLock(t *testing.T) {
	t.Parallel()
	b, _ := startBroker(t, "in")
	entered := make(chan struct{})
	took := make(chan struct{})
	var enterOnce sync.Once
	var tookInTime atomic.Bool
	bld := topology.NewBuilder()
	topology.Stream(bld, "in", serde.String, serde.String).Peek(func(_, v string) {
		if v != "block" {
			return
		}
		enterOnce.Do(func() { close(entered) })
		select {
		case <-took:
			tookInTime.Store(true)
		case <-time.After(20 * time.Second):
		}
	}).GroupByKey(serde.String, serde.String).Count("counts")
	topo, err := bld.Build()
	require.NoError(t, err)
	app, err := New(topo, Config{ApplicationID: "drive-unlocked", Brokers: b.Addrs(), StateDir: t.TempDir(), NumStreamThreads: 1})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	t.Cleanup(func() { _ = app.Close(context.Background()) })
	waitFor(t, 20*time.Second, "running", func() bool { return app.State() == StateRunning })

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	require.NoError(t, err)
	defer cl.Close()
	produceValues(t, cl, "k", "block")
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the processor never ran")
	}
	th := app.threads[0]
	th.mu.Lock()
	th.mu.Unlock()
	close(took)
	waitFor(t, 30*time.Second, "the record processed", func() bool {
		var n int64
		for _, ti := range app.Tasks() {
			n += ti.Processed
		}
		return n == 1
	})
	require.True(t, tookInTime.Load(), "the processor waited for the thread's lock, which its thread held")
	require.NoError(t, app.Err())
}

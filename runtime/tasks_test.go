package runtime

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// App.Tasks, and the metrics that show the tasks, answer while a stream
// thread is stuck in a processor, with the tasks as the thread last
// published them; once the processor returns, the thread publishes what it
// processed.
func TestTasksDoNotWaitForAThreadInAProcessor(t *testing.T) {
	t.Parallel()
	b, _ := startBroker(t, "in")
	entered := make(chan struct{})
	release := make(chan struct{})
	var enterOnce, releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	bld := topology.NewBuilder()
	s := topology.Stream(bld, "in", serde.String, serde.String).Peek(func(_, v string) {
		if v == "block" {
			enterOnce.Do(func() { close(entered) })
			<-release
		}
	})
	s.GroupByKey(serde.String, serde.String).Count("counts")
	topo, err := bld.Build()
	require.NoError(t, err)
	app, err := New(topo, Config{ApplicationID: "tasks-busy", Brokers: b.Addrs(), StateDir: t.TempDir(), NumStreamThreads: 1})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(app.Metrics()))
	require.NoError(t, app.Start(context.Background()))
	t.Cleanup(func() { _ = app.Close(context.Background()) })
	t.Cleanup(unblock) // first: Close waits for the processor
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

	var tasks []TaskInfo
	within(t, 5*time.Second, "App.Tasks while a processor blocks", func() { tasks = app.Tasks() })
	require.Len(t, tasks, 2)
	for _, ti := range tasks {
		require.Equal(t, task.Running, ti.State, "%v", ti.ID)
		require.Zero(t, ti.Processed, "%v: the blocked poll is not published yet", ti.ID)
	}
	within(t, 5*time.Second, "a metrics scrape while a processor blocks", func() {
		require.Len(t, gather(t, reg).labelValues("eddy_task_records_processed_total", "task"), 2)
	})

	unblock()
	waitFor(t, 20*time.Second, "the processed record published", func() bool {
		var n int64
		for _, ti := range app.Tasks() {
			n += ti.Processed
		}
		return n == 1
	})
}

package runtime

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/task"
)

// A task directory left behind when its task moves to another instance is
// reported in the subscription while it is kept, and deleted once it has
// been unassigned for StateCleanupDelay.
func TestTaskDirectoriesOfMovedTasksAreCleanedUp(t *testing.T) {
	b, _ := startBroker(t, "in")
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic("in"))
	require.NoError(t, err)
	defer cl.Close()
	for i := range 20 {
		cl.Produce(context.Background(), &kgo.Record{Key: []byte{byte('a' + i%5)}, Value: []byte("v")}, nil)
	}
	require.NoError(t, cl.Flush(context.Background()))

	const delay = 2 * time.Second
	start := func(dir string) *App {
		app, err := New(countTopology(t), Config{ApplicationID: "clean", Brokers: b.Addrs(), StateDir: dir,
			StateCleanupDelay: delay, CommitInterval: 50 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, app.Start(context.Background()))
		t.Cleanup(func() { app.Close(context.Background()) })
		return app
	}
	dirA := t.TempDir()
	a := start(dirA)
	waitFor(t, 10*time.Second, "a runs both tasks", func() bool {
		info, ok := a.Assignment()
		return ok && len(info.Active) == 2 && a.Ready()
	})
	waitFor(t, 10*time.Second, "a has committed its counts", func() bool {
		n := 0
		for _, ri := range a.Replicas() {
			n += int(ri.Position)
		}
		return n > 0
	})
	start(t.TempDir())
	var moved task.ID
	waitFor(t, 10*time.Second, "a task to move to the new instance", func() bool {
		info, ok := a.Assignment()
		if !ok || len(info.Active) != 1 {
			return false
		}
		moved = task.ID{SubTopology: 0, Partition: 1 - info.Active[0].Partition}
		return true
	})
	dir := task.Dir(filepath.Join(dirA, "clean"), moved)
	_, err = os.Stat(dir)
	require.NoError(t, err, "the moved task's directory is kept at first")
	require.True(t, a.hasStore(moved, "counts"), "the moved task's store is kept at first")
	reported := false
	for _, to := range a.registry.subscription() {
		reported = reported || to.Task == moved
	}
	require.True(t, reported, "a kept directory is reported in the subscription")
	waitFor(t, 10*time.Second, "the moved task's directory and store to be deleted", func() bool {
		_, err := os.Stat(dir)
		return os.IsNotExist(err) && !a.hasStore(moved, "counts")
	})
	for _, to := range a.registry.subscription() {
		require.NotEqual(t, moved, to.Task, "a deleted directory is no longer reported")
	}
}

//go:build unix

package runtime

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/groupproto"
	"github.com/eddystreams/eddy/task"
)

// A complete routing table is in use, and readable through the router,
// while it is still being written to the state directory: the write holds
// no lock the group goroutine's next assignment or App.Assignment needs.
// Here the write hangs on a FIFO standing where its temporary file goes,
// until the test reads it.
func TestRoutingTableWrittenWithoutTheRoutersLock(t *testing.T) {
	b, _ := startBroker(t, "in")
	app, err := New(countTopology(t), Config{ApplicationID: "routing", Brokers: b.Addrs(), StateDir: t.TempDir(), Endpoint: "self:1"})
	require.NoError(t, err)
	require.NoError(t, app.prepare(context.Background()))
	t.Cleanup(app.releaseResources)
	sub, ok := app.storeSubTopology("counts")
	require.True(t, ok)
	id := func(p int32) task.ID { return task.ID{SubTopology: sub, Partition: p} }

	fifo := filepath.Join(app.dir.path, routingFileName+".tmp")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	written := make(chan struct{})
	t.Cleanup(func() {
		// Lets a write still waiting for a reader finish, so that
		// releaseResources does not wait for it.
		select {
		case <-written:
		default:
			if f, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
				defer f.Close()
			}
			<-written
		}
	})
	go func() {
		defer close(written)
		// A version 2 assignment carries the group's maps: a complete
		// table at once, of epoch 0.
		app.router.assigned(0, groupproto.AssignmentInfo{Version: 2, Active: []task.ID{id(0), id(1)},
			PartitionsByHost: map[string][]task.ID{"self:1": {id(0), id(1)}}})
	}()

	inUse := make(chan struct{})
	go func() {
		defer close(inUse)
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if _, ok := app.router.groupTable(0); ok {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	select {
	case <-inUse:
	case <-time.After(20 * time.Second):
		t.Fatal("reading the routing table waits for its write to the state directory")
	}
	_, ok = app.router.groupTable(0)
	require.True(t, ok, "the assignment's table is in use")
	select {
	case <-written:
		t.Fatal("the write finished without a reader of the FIFO")
	default:
	}

	f, err := os.Open(fifo)
	require.NoError(t, err)
	saved, err := io.ReadAll(f)
	require.NoError(t, f.Close())
	require.NoError(t, err)
	require.Contains(t, string(saved), `"self:1"`, "the table written is the assignment's")
	select {
	case <-written:
	case <-time.After(20 * time.Second):
		t.Fatal("the assignment was not taken once the table was written")
	}
}

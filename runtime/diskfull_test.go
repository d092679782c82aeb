package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/statestore"
)

// mountTmpfs mounts a tmpfs of size bytes for the test, skipping it where
// mounting is not permitted.
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("disk-full test needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Skipf("disk-full test cannot mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fillTo writes a ballast file until only leave bytes remain free in dir's
// filesystem, and returns its path.
func fillTo(t *testing.T, dir string, leave int64) string {
	t.Helper()
	var st syscall.Statfs_t
	require.NoError(t, syscall.Statfs(dir, &st))
	free := int64(st.Bavail) * st.Bsize
	require.Greater(t, free, leave, "nothing to fill")
	path := filepath.Join(dir, "ballast")
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for n := free - leave; n > 0; n -= int64(len(chunk)) {
		_, err := f.Write(chunk[:min(n, int64(len(chunk)))])
		require.NoError(t, err)
	}
	return path
}

// A disk that fills up under a running instance pauses its commits without
// failing the thread, losing or repeating anything; once space is freed
// the instance carries on by itself, and the counts are exact, also after
// a restart that reads them back from the stores.
func TestDiskFullPausesAndResumes(t *testing.T) {
	t.Parallel()
	for _, g := range []ProcessingGuarantee{AtLeastOnce, ExactlyOnce} {
		t.Run(g.String(), func(t *testing.T) {
			reserve := statestore.DefaultSharedBadgerOptions().EffectiveDiskReserve()
			fs := mountTmpfs(t, reserve+64<<20)
			c := newEOSCluster(t)
			start := func() *App {
				app, err := New(countTopology(t), Config{ApplicationID: "diskfull", Brokers: c.b.Addrs(), StateDir: fs,
					ProcessingGuarantee: g, SessionTimeout: 2 * time.Second})
				require.NoError(t, err)
				require.NoError(t, app.Start(context.Background()))
				return app
			}
			app := start()
			want := map[string]int64{}
			c.produce(t, 300, want)
			waitCounts(t, app, want)

			ballast := fillTo(t, fs, reserve/2)
			c.produce(t, 200, want)
			waitFor(t, 20*time.Second, "a store write refused for a full disk", func() bool { return app.Stats().DiskFullWaits > 0 })
			require.True(t, app.State().IsRunningOrRebalancing(), "a full disk does not stop the instance")
			// The waiting commit counts with the group, but not yet in the
			// stores queries read: the actives refuse to answer as
			// rebalancing rather than answer as current with older state.
			for p := range int32(2) {
				waitFor(t, 20*time.Second, fmt.Sprintf("partition %d refused while its commit waits for disk space", p), func() bool {
					_, err := app.Queries().Replica("counts", p)
					return errors.Is(err, iq.ErrRebalancing)
				})
			}
			require.NoError(t, os.Remove(ballast))
			c.produce(t, 100, want)
			waitCounts(t, app, want)
			require.True(t, app.State().IsRunningOrRebalancing())
			require.Zero(t, app.Stats().StoresWiped)
			require.NoError(t, app.Close(context.Background()))

			app = start()
			defer app.Close(context.Background())
			waitCounts(t, app, want)
		})
	}
}

// An instance that must open a store on a full disk waits for space
// instead of stopping, deletes nothing, and carries on once space is freed.
// Per store, the tasks' stores wait; shared, Start waits to open the
// database.
func TestDiskFullAtOpenWaitsForSpace(t *testing.T) {
	for _, layout := range []StoreLayout{StoreLayoutShared, StoreLayoutPerStore} {
		t.Run(layout.String(), func(t *testing.T) { testDiskFullAtOpen(t, layout) })
	}
}

func testDiskFullAtOpen(t *testing.T, layout StoreLayout) {
	reserve := statestore.DefaultBadgerOptions().EffectiveDiskReserve()
	if layout == StoreLayoutShared {
		reserve = statestore.DefaultSharedBadgerOptions().EffectiveDiskReserve()
	}
	fs := mountTmpfs(t, reserve+16<<20)
	c := newEOSCluster(t)
	want := map[string]int64{}
	c.produce(t, 50, want)
	ballast := fillTo(t, fs, reserve/2)
	app, err := New(countTopology(t), Config{ApplicationID: "diskfull-open", Brokers: c.b.Addrs(), StateDir: fs, SessionTimeout: 2 * time.Second, StoreLayout: layout})
	require.NoError(t, err)
	started := make(chan error, 1)
	go func() { started <- app.Start(context.Background()) }()
	defer app.Close(context.Background())
	waitFor(t, 20*time.Second, "a store's opening refused for the full disk", func() bool {
		return app.Stats().DiskFullWaits > 0 || app.Err() != nil
	})
	require.NoError(t, app.Err(), "a full disk at open does not stop the instance")

	require.NoError(t, os.Remove(ballast))
	select {
	case err := <-started:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Start did not return once space was freed")
	}
	c.produce(t, 50, want)
	waitCounts(t, app, want)
	require.NoError(t, app.Err())
	require.Zero(t, app.Stats().StoresWiped)
}

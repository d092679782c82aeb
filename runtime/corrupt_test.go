package runtime

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/task"
)

// A task directory whose store files are garbled on disk does not stop the
// instance: that store alone is deleted, rebuilt from its changelog, and
// counted; the counts come out exact.
func TestUnreadableStoreIsWipedAndRestored(t *testing.T) {
	for _, damage := range []struct {
		name string
		// wiped: whether the store must be deleted, or badger's own crash
		// recovery suffices (a log cut short is what kill -9 leaves; the
		// data and its position go back together and the tail is
		// restored).
		wiped int64
		do    func(t *testing.T, dir string)
	}{
		{"garbled manifest", 1, func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "MANIFEST"), []byte("this is not a badger manifest at all"), 0o644))
		}},
		{"truncated value log and memtable log", 0, func(t *testing.T, dir string) {
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			n := 0
			for _, e := range entries {
				// Table files (.sst) are damaged in the cases below.
				if strings.HasSuffix(e.Name(), ".vlog") || strings.HasSuffix(e.Name(), ".mem") {
					info, err := e.Info()
					require.NoError(t, err)
					require.NoError(t, os.Truncate(filepath.Join(dir, e.Name()), info.Size()/3))
					n++
				}
			}
			require.Positive(t, n, "the store has files to damage")
		}},
		// Badger would panic on a goroutine of its own opening a truncated
		// table, and at the first read of a garbled block; the store checks
		// its tables before badger opens them.
		{"truncated table file", 1, func(t *testing.T, dir string) {
			damageTables(t, dir, func(path string, size int64) {
				require.NoError(t, os.Truncate(path, size/2))
			})
		}},
		{"garbled table file", 1, func(t *testing.T, dir string) {
			damageTables(t, dir, func(path string, size int64) {
				f, err := os.OpenFile(path, os.O_RDWR, 0)
				require.NoError(t, err)
				defer f.Close()
				_, err = f.WriteAt([]byte("not what badger wrote here, not at all"), size/3)
				require.NoError(t, err)
			})
		}},
	} {
		t.Run(damage.name, func(t *testing.T) {
			c := newEOSCluster(t)
			dir := t.TempDir()
			start := func() *App {
				app, err := New(countTopology(t), Config{ApplicationID: "corrupt", Brokers: c.b.Addrs(), StateDir: dir, SessionTimeout: 2 * time.Second})
				require.NoError(t, err)
				require.NoError(t, app.Start(context.Background()))
				return app
			}
			app := start()
			want := map[string]int64{}
			c.produce(t, 500, want)
			waitCounts(t, app, want)
			require.NoError(t, app.Close(context.Background()))

			storeDir := filepath.Join(task.Dir(filepath.Join(dir, "corrupt"), task.ID{SubTopology: 0, Partition: 0}), "counts")
			damage.do(t, storeDir)

			app = start()
			defer app.Close(context.Background())
			c.produce(t, 100, want)
			waitCounts(t, app, want)
			require.Equal(t, damage.wiped, app.StoresWiped(), "stores wiped")
			require.True(t, app.State().IsRunningOrRebalancing())
		})
	}
}

// damageTables applies damage to every table file (.sst) of the store in dir.
func damageTables(t *testing.T, dir string, damage func(path string, size int64)) {
	t.Helper()
	tables, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	require.NoError(t, err)
	require.NotEmpty(t, tables, "the store has table files to damage")
	for _, path := range tables {
		info, err := os.Stat(path)
		require.NoError(t, err)
		damage(path, info.Size())
	}
}

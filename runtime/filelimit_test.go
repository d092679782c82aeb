package runtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Start refuses, before it opens a store, an open-file limit that cannot
// hold the persistent stores of every task, and names the limit and the
// descriptors needed; a limit that can is accepted. Per store, each store
// counts; shared, the one database does.
func TestStartChecksFileLimit(t *testing.T) {
	b, _ := startBroker(t, "in")
	for _, c := range []struct {
		layout StoreLayout
		// Two tasks, one badger store each, one thread.
		need uint64
	}{
		{StoreLayoutPerStore, descriptorsBase + descriptorsPerThread + 2*descriptorsPerStore},
		{StoreLayoutShared, descriptorsBase + descriptorsPerThread + descriptorsShared},
	} {
		t.Run(c.layout.String(), func(t *testing.T) {
			dir := t.TempDir()
			cfg := Config{ApplicationID: "fl", Brokers: b.Addrs(), StateDir: dir, NumStreamThreads: 1, StoreLayout: c.layout}
			app, err := New(countTopology(t), cfg)
			require.NoError(t, err)
			app.fileLimit = func() (uint64, error) { return c.need - 1, nil }
			err = app.Start(context.Background())
			require.ErrorIs(t, err, ErrFileLimit)
			require.ErrorContains(t, err, fmt.Sprintf("RLIMIT_NOFILE is %d ", c.need-1))
			require.ErrorContains(t, err, "all 2 tasks")
			require.ErrorContains(t, err, fmt.Sprintf("at least %d descriptors", c.need))
			require.Equal(t, StateFailed, app.State())
			entries, err := os.ReadDir(filepath.Join(dir, "fl"))
			require.NoError(t, err)
			for _, e := range entries {
				require.False(t, e.IsDir(), "Start made %s", e.Name())
			}

			app, err = New(countTopology(t), cfg)
			require.NoError(t, err)
			app.fileLimit = func() (uint64, error) { return c.need, nil }
			require.NoError(t, app.Start(context.Background()))
			require.NoError(t, app.Close(context.Background()))
		})
	}
}

package runtime

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Start refuses, before it opens a store, an open-file limit that cannot
// hold the persistent stores of every task, and names the limit and the
// descriptors needed; a limit that can is accepted.
func TestStartChecksFileLimit(t *testing.T) {
	b, _ := startBroker(t, "in")
	// Two tasks, one badger store each, one thread.
	need := uint64(descriptorsBase + descriptorsPerThread + 2*descriptorsPerStore)

	dir := t.TempDir()
	app, err := New(countTopology(t), Config{ApplicationID: "fl", Brokers: b.Addrs(), StateDir: dir, NumStreamThreads: 1})
	require.NoError(t, err)
	app.fileLimit = func() (uint64, error) { return need - 1, nil }
	err = app.Start(context.Background())
	require.ErrorIs(t, err, ErrFileLimit)
	require.ErrorContains(t, err, "RLIMIT_NOFILE is 95 ")
	require.ErrorContains(t, err, "all 2 tasks")
	require.ErrorContains(t, err, "at least 96 descriptors")
	require.Equal(t, StateFailed, app.State())
	entries, err := os.ReadDir(filepath.Join(dir, "fl"))
	require.NoError(t, err)
	for _, e := range entries {
		require.False(t, e.IsDir(), "Start made %s", e.Name())
	}

	app, err = New(countTopology(t), Config{ApplicationID: "fl", Brokers: b.Addrs(), StateDir: dir, NumStreamThreads: 1})
	require.NoError(t, err)
	app.fileLimit = func() (uint64, error) { return need, nil }
	require.NoError(t, app.Start(context.Background()))
	require.NoError(t, app.Close(context.Background()))
}

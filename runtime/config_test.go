package runtime

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConfigDefaults(t *testing.T) {
	c := Config{ApplicationID: "a", Brokers: []string{"h:1"}}.withDefaults()
	require.Equal(t, DefaultCommitInterval, c.CommitInterval)
	require.Equal(t, DefaultDrainedCommitDelay, c.DrainedCommitDelay)
	require.Equal(t, int64(DefaultCacheMaxBytes), c.CacheMaxBytes)
	require.Equal(t, DefaultSessionTimeout, c.SessionTimeout)
	require.Equal(t, DefaultNumStreamThreads, c.NumStreamThreads)
	require.Zero(t, c.TaskIdleTime, "Kafka Streams' max.task.idle.ms default")
	require.Equal(t, DefaultBufferedRecordsPerPartition, c.BufferedRecordsPerPartition)
	require.Equal(t, int16(-1), c.ReplicationFactor)
	require.Equal(t, filepath.Join(os.TempDir(), "eddy"), c.StateDir)
	require.NotNil(t, c.Logger)
	require.True(t, c.Logger.Enabled(context.Background(), slog.LevelInfo), "the default logger says what the App does")
	require.False(t, c.Logger.Enabled(context.Background(), slog.LevelDebug))
	require.NoError(t, c.Validate())
}

func TestConfigValidate(t *testing.T) {
	ok := Config{ApplicationID: "app", Brokers: []string{"localhost:9092"}}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no app", func(c *Config) { c.ApplicationID = "" }, "ApplicationID is required"},
		{"bad app", func(c *Config) { c.ApplicationID = "a b" }, "may hold only"},
		{"no brokers", func(c *Config) { c.Brokers = nil }, "Brokers is required"},
		{"bad broker", func(c *Config) { c.Brokers = []string{"nohostport"} }, "not host:port"},
		{"bad endpoint", func(c *Config) { c.Endpoint = "x" }, "Endpoint"},
		{"threads", func(c *Config) { c.NumStreamThreads = -1 }, "NumStreamThreads"},
		{"commit", func(c *Config) { c.CommitInterval = -time.Second }, "CommitInterval"},
		{"drained commit", func(c *Config) { c.DrainedCommitDelay = -time.Millisecond }, "DrainedCommitDelay"},
		{"cache", func(c *Config) { c.CacheMaxBytes = -1 }, "CacheMaxBytes"},
		{"handler", func(c *Config) { c.DeserializationErrors = 7 }, "DeserializationErrors"},
		{"rf", func(c *Config) { c.ReplicationFactor = -3 }, "ReplicationFactor"},
		{"task idle", func(c *Config) { c.TaskIdleTime = -time.Second }, "TaskIdleTime"},
		{"buffered", func(c *Config) { c.BufferedRecordsPerPartition = -1 }, "BufferedRecordsPerPartition"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mod(&c)
			err := c.Validate()
			require.ErrorContains(t, err, tc.want)
			_, nerr := New(nil, c)
			require.Error(t, nerr)
		})
	}
	require.NoError(t, ok.Validate())
	never := ok
	never.TaskIdleTime = NeverWaitForInput
	require.NoError(t, never.Validate())
}

func TestStateDirLockAndProcessID(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "app")
	a, err := openStateDir(dir)
	require.NoError(t, err)
	require.Len(t, a.processID, 32)

	_, err = openStateDir(dir)
	require.True(t, errors.Is(err, ErrStateDirLocked), "second open must fail with ErrStateDirLocked, got %v", err)
	require.ErrorContains(t, err, dir)

	require.NoError(t, a.close())
	b, err := openStateDir(dir)
	require.NoError(t, err, "the lock is released on close")
	require.Equal(t, a.processID, b.processID, "the process ID is stable across restarts")
	require.NoError(t, b.close())
}

package runtime

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMissingTopicsError(t *testing.T) {
	var err error = fmt.Errorf("wrapped: %w", &MissingTopicsError{Sources: []string{"a", "b"}, Sinks: []string{"c"}})
	var m *MissingTopicsError
	require.True(t, errors.As(err, &m))
	require.Equal(t, []string{"a", "b"}, m.Sources)
	require.Equal(t, []string{"c"}, m.Sinks)
	require.ErrorContains(t, err, `topics the topology uses are missing: source topics "a", "b"; sink topic "c"`)
	require.ErrorContains(t, err, "Config.CreateMissingTopics")

	only := &MissingTopicsError{Sinks: []string{"dlq"}}
	require.NotContains(t, only.Error(), "source topics")
	require.Contains(t, only.Error(), `are missing: sink topic "dlq"; create them`)
}

func TestConfigTopicFields(t *testing.T) {
	ok := Config{ApplicationID: "app", Brokers: []string{"localhost:9092"}}
	d := ok.withDefaults()
	require.Equal(t, DefaultRepartitionPurgeInterval, d.RepartitionPurgeInterval)
	require.Equal(t, int32(-1), d.DefaultPartitions)
	require.Equal(t, CompressionNone, d.Compression)
	require.False(t, d.CreateMissingTopics)

	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"partitions", func(c *Config) { c.DefaultPartitions = -2 }, "DefaultPartitions must be -1 or positive"},
		{"purge", func(c *Config) { c.RepartitionPurgeInterval = -time.Second }, "RepartitionPurgeInterval"},
		{"compression", func(c *Config) { c.Compression = CompressionZstd + 1 }, "unknown Compression"},
		{"negative compression", func(c *Config) { c.Compression = -1 }, "unknown Compression"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mod(&c)
			require.ErrorContains(t, c.Validate(), tc.want)
		})
	}
	c := ok
	c.RepartitionPurgeInterval = NoRepartitionPurge
	require.NoError(t, c.Validate())
	c.DefaultPartitions, c.RepartitionPurgeInterval, c.Compression, c.CreateMissingTopics = 6, time.Second, CompressionLZ4, true
	require.NoError(t, c.Validate())
}

func TestParseCompression(t *testing.T) {
	for c := CompressionNone; c <= CompressionZstd; c++ {
		got, err := ParseCompression(c.String())
		require.NoError(t, err)
		require.Equal(t, c, got)
		require.NotEmpty(t, c.codec())
	}
	_, err := ParseCompression("brotli")
	require.ErrorContains(t, err, `unknown compression "brotli"`)
	require.Equal(t, "Compression(9)", Compression(9).String())
}

package changelog

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestWindowedTopicConfigs(t *testing.T) {
	c := WindowedTopicConfigs(time.Hour, -1)
	require.Equal(t, "compact,delete", *c["cleanup.policy"])
	require.Equal(t, "90000000", *c["retention.ms"], "an hour plus a day")
	require.Equal(t, "60000", *WindowedTopicConfigs(time.Minute, 0)["retention.ms"])
}

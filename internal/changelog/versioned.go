package changelog

import (
	"math"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// VersionedCompactionMargin is what a versioned store's changelog keeps
// uncompacted beyond the store's history retention: one day, as Kafka
// Streams adds to the min.compaction.lag.ms of its versioned stores'
// changelogs.
const VersionedCompactionMargin = 24 * time.Hour

// VersionedTopicConfigs are the topic configs of a versioned store's
// changelog: compacted, but no record younger than the history retention
// (historyMs, in milliseconds)
// plus VersionedCompactionMargin, so that a restoration finds every
// version the store may still be asked for, while older ones, which the
// store has dropped, leave as in any compacted changelog. Use them as
// TopicSpec.Configs.
func VersionedTopicConfigs(historyMs int64) map[string]*string {
	lag := int64(math.MaxInt64)
	if margin := VersionedCompactionMargin.Milliseconds(); historyMs <= math.MaxInt64-margin {
		lag = historyMs + margin
	}
	return map[string]*string{
		"cleanup.policy":        kadm.StringPtr("compact"),
		"min.compaction.lag.ms": kadm.StringPtr(strconv.FormatInt(lag, 10)),
	}
}

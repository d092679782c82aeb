package changelog

import (
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// DefaultWindowedRetentionMargin is what a window or session store's
// changelog keeps beyond the store's own retention, so that a restoration
// or a standby that falls behind still finds every live window in the log:
// one day, Kafka Streams' windowstore.changelog.additional.retention.ms.
const DefaultWindowedRetentionMargin = 24 * time.Hour

// WindowedTopicConfigs are the topic configs of a window or session store's
// changelog: compacted, so each window keeps its latest value, and deleted
// by time, since expired windows are dropped from the store without
// tombstones (statestore.SegmentedStore) and only the log's own retention
// removes them. retention.ms is the store's retention plus margin (a
// negative margin means the default). Use them as TopicSpec.Configs.
func WindowedTopicConfigs(storeRetention, margin time.Duration) map[string]*string {
	if margin < 0 {
		margin = DefaultWindowedRetentionMargin
	}
	ms := (storeRetention + margin).Milliseconds()
	return map[string]*string{
		"cleanup.policy": kadm.StringPtr("compact,delete"),
		"retention.ms":   kadm.StringPtr(strconv.FormatInt(ms, 10)),
	}
}

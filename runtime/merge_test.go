package runtime

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// mergeOrder takes every run a timestampMerge gives and returns the records
// in the order it gives them, as "topic@offset".
func mergeOrder(parts []kgo.FetchTopicPartition) []string {
	m := timestampMerge{parts: parts}
	var got []string
	for {
		p, end := m.run()
		if p < 0 {
			return got
		}
		if end <= m.next[p] {
			panic(fmt.Sprintf("empty run of partition %d at %d", p, m.next[p]))
		}
		for _, r := range parts[p].Records[m.next[p]:end] {
			got = append(got, fmt.Sprintf("%s@%d", r.Topic, r.Offset))
		}
		m.next[p] = end
	}
}

func partOf(topic string, stamps ...int) kgo.FetchTopicPartition {
	t0 := time.Unix(1_700_000_000, 0)
	p := kgo.FetchTopicPartition{Topic: topic}
	for i, s := range stamps {
		p.Records = append(p.Records, &kgo.Record{Topic: topic, Offset: int64(i), Timestamp: t0.Add(time.Duration(s) * time.Millisecond)})
	}
	return p
}

func TestTimestampMerge(t *testing.T) {
	// One partition: its order, in one run.
	require.Equal(t, []string{"a@0", "a@1", "a@2"}, mergeOrder([]kgo.FetchTopicPartition{partOf("a", 5, 1, 3)}))
	// Earliest next record first; each partition keeps its own order even
	// when its timestamps go back; a tie goes to the partition listed first.
	require.Equal(t,
		[]string{"t@0", "s@0", "s@1", "t@1", "t@2", "t@3", "s@2", "s@3"},
		mergeOrder([]kgo.FetchTopicPartition{
			partOf("s", 10, 20, 30, 40),
			partOf("t", 0, 20, 25, 5),
		}))
	require.Equal(t,
		[]string{"s@0", "t@0", "u@0", "s@1", "u@1", "t@1"},
		mergeOrder([]kgo.FetchTopicPartition{
			partOf("s", 1, 2),
			partOf("t", 1, 9),
			partOf("u", 1, 3),
		}))
	// Empty partitions take no part.
	require.Equal(t, []string{"b@0", "b@1"}, mergeOrder([]kgo.FetchTopicPartition{partOf("a"), partOf("b", 1, 2)}))
	require.Empty(t, mergeOrder(nil))
}

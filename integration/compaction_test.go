package integration

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRestartAfterCompactionRestoresTail closes an instance, lets another
// count more input (every word again), compacts the changelog, and restarts
// the first instance on its state directory. Compaction removed every
// record the first instance had applied, and kfake's own log start moved
// past its store positions; but Kafka's log cleaner never moves the log
// start, so on a real cluster the stores' positions still fit and each
// store restores only the records it missed and compaction kept. The
// embedded broker must agree: no store is reset, only the tail is
// restored, and the counts are exact.
func TestRestartAfterCompactionRestoresTail(t *testing.T) {
	const app = "wc"
	c := newCluster(t, 3)
	dir := t.TempDir()
	counts := make(map[string]int64)
	// A small vocabulary, so that each round of input updates every word
	// and compaction clears all but the last round's records.
	const vocab = 60

	gen := newCorpus(41, vocab)

	first := c.start(t, "first", instanceConfig{stateDir: dir})
	c.waitSettled(t, app, first)
	c.produceLines(t, gen.Lines(10_000, counts))
	c.waitCaughtUp(t, app)
	requireStore(t, counts, first)
	first.close(t)
	pos := storePositions(t, dir, app, c.partitions)
	require.Len(t, pos, int(c.partitions), "the first instance kept a store of every partition")

	// Several rounds, each committed before the next: the changelog gets
	// batches that the last round supersedes whole.
	other := c.start(t, "other", instanceConfig{stateDir: t.TempDir()})
	c.waitSettled(t, app, other)
	for range 4 {
		round := make(map[string]int64)
		c.produceLines(t, gen.Lines(5_000, round))
		require.Len(t, round, len(counts), "precondition: a round updates every word")
		for w, n := range round {
			counts[w] += n
		}
		c.waitCaughtUp(t, app)
	}
	requireStore(t, counts, other)
	other.close(t)

	cl := changelogTopic(app)
	ends := c.endOffsets(t, cl)[cl]
	c.b.Compact()
	for p, end := range ends {
		pi := c.b.Cluster().PartitionInfo(cl, p)
		require.NotNil(t, pi)
		require.Greater(t, pi.LogStartOffset, pos[p],
			"precondition: compaction cleared partition %d past the first instance's position (kfake's own start)", p)
		require.Equal(t, end, pi.HighWatermark)
	}
	starts, err := c.adm.ListStartOffsets(ctx(t), cl)
	require.NoError(t, err)
	require.NoError(t, starts.Error())
	starts.Each(func(o kadm.ListedOffset) {
		require.Zero(t, o.Offset, "the log start of %s[%d] where Kafka leaves it", o.Topic, o.Partition)
	})

	tail := c.countRecordsFrom(t, cl, pos, ends)
	kept := c.countRecordsFrom(t, cl, make(map[int32]int64), ends)
	written := sumOffsets(ends)

	again := c.start(t, "again", instanceConfig{stateDir: dir})
	c.waitSettled(t, app, again)
	require.Zero(t, again.Stats().StoreResets, "no store is reset")
	require.Equal(t, sumOffsets(tail), again.Stats().RestoredRecords, "restored the tail; tasks: %v", again.Tasks())
	require.Less(t, again.Stats().RestoredRecords, written)
	for _, ti := range again.Tasks() {
		if ti.ID.SubTopology == 1 {
			require.Equal(t, tail[ti.ID.Partition], ti.Restored, "records restored by task %s", ti.ID)
		}
	}
	requireStore(t, counts, again)
	got, parts := replicaContents(t, again)
	require.Len(t, parts, int(c.partitions))
	requireCounts(t, counts, got, "stores restored after compaction")
	t.Logf("changelog: %d records written, %d kept by compaction; the restarted instance restored %d (positions %v, kfake's starts moved past them), store resets %d",
		written, sumOffsets(kept), again.Stats().RestoredRecords, pos, again.Stats().StoreResets)

	// Counting goes on from the restored stores.
	want := maps.Clone(counts)
	c.produceLines(t, gen.Lines(5_000, want))
	c.waitCaughtUp(t, app)
	requireStore(t, want, again)
	c.requireOutput(t, want)
	require.Zero(t, again.Stats().StoreResets)
	again.close(t)
}

// countRecordsFrom reads each partition of topic from the offset in from to
// the end offset in ends, and counts the records there by partition. The
// log may have gaps where compaction removed records.
func (c *cluster) countRecordsFrom(t *testing.T, topic string, from, ends map[int32]int64) map[int32]int64 {
	t.Helper()
	parts := make(map[int32]kgo.Offset)
	for p, end := range ends {
		if from[p] < end {
			parts[p] = kgo.NewOffset().At(from[p])
		}
	}
	out := make(map[int32]int64)
	if len(parts) == 0 {
		return out
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.b.Addrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}),
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	require.NoError(t, err)
	defer cl.Close()
	next := maps.Clone(from)
	rctx := ctx(t)
	for {
		done := true
		for p, end := range ends {
			if next[p] < end {
				done = false
			}
		}
		if done {
			return out
		}
		fs := cl.PollFetches(rctx)
		require.NoError(t, rctx.Err(), "reading %s: got to %v of %v", topic, next, ends)
		fs.EachError(func(_ string, p int32, err error) { require.NoError(t, err, fmt.Sprintf("partition %d", p)) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < ends[r.Partition] {
				out[r.Partition]++
				next[r.Partition] = r.Offset + 1
			}
		})
	}
}

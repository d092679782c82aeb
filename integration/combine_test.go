package integration

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/topology"
)

// TestCombinedCountExactThroughKillExactlyOnce counts with two instances
// under exactly-once while the word count combines before its repartition
// (WithCombining),
// kills one instance in the middle of the input, and requires exact counts
// in the stores and the output: partials of aborted transactions never
// reach the counts, and those a killed instance held in memory are rebuilt
// from the input it had not committed. The repartition topic carries
// marked partials, far fewer than the words.
func TestCombinedCountExactThroughKillExactlyOnce(t *testing.T) {
	t.Parallel() // correctness only, no timing bound: runs beside another such test
	c := newCluster(t, 4)
	gen := newCorpus(17, 2000)
	want := make(map[string]int64)
	cfg := func() instanceConfig {
		return instanceConfig{stateDir: t.TempDir(), guarantee: runtime.ExactlyOnce, keepRepartition: true, combine: true}
	}
	a := c.start(t, "a", cfg())
	b := c.start(t, "b", cfg())
	c.waitSettled(t, "wc", a, b)

	c.produceLines(t, gen.Lines(20_000, want))
	waitFor(t, settleTimeout, "some input committed", func() (bool, string) {
		com, err := c.committed(t, "wc", inputTopic)
		if err != nil {
			return false, err.Error()
		}
		var n int64
		for _, o := range com[inputTopic] {
			n += o
		}
		return n > 0, fmt.Sprintf("%d input records committed", n)
	})
	// Killed right after more input arrives, b dies with partials in
	// memory and an open transaction.
	c.produceLines(t, gen.Lines(20_000, want))
	b.App.Kill()
	c.produceLines(t, gen.Lines(20_000, want))
	waitCaughtUpAny(t, c, runtime.ExactlyOnce)
	requireStore(t, want, a)
	requireCounts(t, want, readCommittedLatest(t, c.b.Addrs()[0], outputTopic, c.partitions), "topic "+outputTopic)

	var words int64
	for _, n := range want {
		words += n
	}
	records, marked := readRepartition(t, c)
	require.Equal(t, records, marked, "every committed repartition record is a marked partial")
	require.Positive(t, records)
	require.Less(t, records, words/2, "partials, not one record per word")
	t.Logf("%d words sent as %d committed partials", words, records)
}

// TestCombinedCountExactThroughHandOverAtLeastOnce closes one of two
// instances in the middle of the input under at-least-once: the close
// commits, which sends its combiners' partials before the input offsets,
// and the rebalance makes the survivor commit (and send) too, so the
// counts are exact, with no redone work to over-count.
func TestCombinedCountExactThroughHandOverAtLeastOnce(t *testing.T) {
	c := newCluster(t, 4)
	gen := newCorpus(18, 2000)
	want := make(map[string]int64)
	a := c.start(t, "a", instanceConfig{stateDir: t.TempDir(), combine: true})
	b := c.start(t, "b", instanceConfig{stateDir: t.TempDir(), combine: true})
	c.waitSettled(t, "wc", a, b)
	c.produceLines(t, gen.Lines(20_000, want))
	b.close(t)
	c.produceLines(t, gen.Lines(20_000, want))
	c.waitCaughtUp(t, "wc")
	requireStore(t, want, a)
	c.requireOutput(t, want)
}

// readRepartition reads the committed records of the word count's
// repartition topic and counts those marked as partial aggregates. As in
// readCommittedLatest, a sentinel (a null value, which the count drops)
// ends each partition.
func readRepartition(t *testing.T, c *cluster) (records, marked int64) {
	t.Helper()
	topic := repartitionTopic("wc")
	sentinel := fmt.Sprintf("\x00end-%d", rand.Uint64())
	pcl, err := kgo.NewClient(kgo.SeedBrokers(c.b.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer pcl.Close()
	rctx := ctx(t)
	for p := range c.partitions {
		require.NoError(t, pcl.ProduceSync(rctx, &kgo.Record{Topic: topic, Partition: p, Key: []byte(sentinel)}).FirstErr())
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.b.Addrs()...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(200*time.Millisecond),
	)
	require.NoError(t, err)
	defer cl.Close()
	seen := make(map[int32]bool)
	for len(seen) < int(c.partitions) {
		fs := cl.PollFetches(rctx)
		require.NoError(t, rctx.Err(), "reading %s: sentinels seen in %d of %d partitions", topic, len(seen), c.partitions)
		fs.EachError(func(_ string, _ int32, err error) { require.NoError(t, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if seen[r.Partition] {
				return
			}
			if string(r.Key) == sentinel {
				seen[r.Partition] = true
				return
			}
			records++
			for _, h := range r.Headers {
				if h.Key == topology.CombinedHeader && string(h.Value) == topology.CombinedVersion {
					marked++
				}
			}
		})
	}
	return records, marked
}

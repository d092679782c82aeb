package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
)

// TestExactlyOnceCountsNoAbortedInput: under exactly-once, a stream thread
// whose fetches fill up (its 1 MiB response limit) with many partitions
// behind never counts records of aborted transactions. The input holds, in
// every partition, transactions that alternately abort and commit, far more
// than one fetch takes, so most fetch responses end inside a partition: the
// embedded broker returned such a partition's records without the aborted
// transactions among them, and the thread counted them (the audit's run
// eos5-35 over-counted 538 words that way).
func TestExactlyOnceCountsNoAbortedInput(t *testing.T) {
	const (
		partitions = 6
		rounds     = 3
		perTxn     = 384 // lines per partition and transaction, of ~1 KiB
	)
	c := newCluster(t, partitions)
	// One long word pads each line to ~1 KiB; uncompressed, so the fetch
	// limits count what the test means them to.
	pad := strings.Repeat("z", 1000)
	w, err := kgo.NewClient(
		kgo.SeedBrokers(c.b.Addrs()...),
		kgo.TransactionalID("eos-fetch-writer"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerBatchMaxBytes(64<<10),
	)
	require.NoError(t, err)
	defer w.Close()
	for i := range 2 * rounds {
		commit := i%2 == 1
		word := "aborted"
		if commit {
			word = "committed"
		}
		require.NoError(t, w.BeginTransaction())
		for p := range int32(partitions) {
			for range perTxn {
				w.Produce(context.Background(), &kgo.Record{Topic: inputTopic, Partition: p, Value: []byte(word + " " + pad)},
					func(_ *kgo.Record, err error) {
						if err != nil {
							t.Errorf("produce: %v", err)
						}
					})
			}
		}
		require.NoError(t, w.Flush(ctx(t)))
		require.NoError(t, w.EndTransaction(ctx(t), kgo.TransactionEndTry(commit)))
	}

	in := c.start(t, "a", instanceConfig{guarantee: runtime.ExactlyOnce, stateDir: t.TempDir()})
	q := iq.NewQuerier(in.Queries())
	count := func(word string) int64 {
		res, err := iq.Get(context.Background(), q, countsStore, word, serde.String, serde.Int64)
		if err != nil || !res.Found {
			return 0
		}
		return res.Value
	}
	want := int64(rounds * perTxn * partitions)
	waitFor(t, settleTimeout, "every committed line counted", func() (bool, string) {
		require.Zero(t, count("aborted"), "count of a word only aborted transactions hold")
		if n, np := count("committed"), count(pad); n != want || np != want {
			return false, fmt.Sprintf("committed %d, pad %d of %d", n, np, want)
		}
		return true, ""
	})
}

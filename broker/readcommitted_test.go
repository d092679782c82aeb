package broker

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// abortedLog fills every partition of topic with transactions that
// alternately commit and abort, rounds of each, n records of size bytes per
// partition and transaction. Committed values start with "c", aborted ones
// with "a". It returns how many committed records each partition holds.
func abortedLog(ctx context.Context, t *testing.T, b *Broker, topic string, partitions int32, rounds, n, size int) int {
	t.Helper()
	cl := newClient(t, b,
		kgo.TransactionalID("aborted-log"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(64<<10),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	for i := 0; i < 2*rounds; i++ {
		commit := i%2 == 1
		mark := byte('a')
		if commit {
			mark = 'c'
		}
		require.NoError(t, cl.BeginTransaction())
		for p := int32(0); p < partitions; p++ {
			for j := 0; j < n; j++ {
				v := append([]byte{mark}, bytes.Repeat([]byte{'x'}, size-1)...)
				cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: p, Value: v}, func(_ *kgo.Record, err error) {
					if err != nil {
						t.Errorf("produce: %v", err)
					}
				})
			}
		}
		require.NoError(t, cl.Flush(ctx))
		require.NoError(t, cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)))
	}
	return rounds * n
}

// TestReadCommittedFetchFullResponse: a read_committed consumer whose fetch
// response fills up (FetchMaxBytes) in the middle of a partition gets none
// of that partition's aborted records. kfake, when the response limit cuts
// a partition, returns the batches it took from it without the aborted
// transactions among them, so the consumer took aborted records for
// committed ones. The limits are the runtime's stream thread's: 1 MiB per
// fetch, 256 KiB per partition.
func TestReadCommittedFetchFullResponse(t *testing.T) {
	ctx := testCtx(t)
	b := start(t, Config{})
	const partitions = 6
	createTopic(ctx, t, b, "txns", partitions, nil)
	// 384 KiB per partition and transaction: every partition has more
	// than a fetch takes from it, so each fetch reaches the response limit
	// inside its fourth partition.
	want := abortedLog(ctx, t, b, "txns", partitions, 3, 384, 1024)

	cl := newClient(t, b,
		kgo.ConsumeTopics("txns"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxBytes(1<<20),
		kgo.FetchMaxPartitionBytes(256<<10))
	got := make(map[int32]int)
	aborted := make(map[int32]int)
	total := 0
	for total < want*partitions {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read %d of %d committed records", total, want*partitions)
		fs.EachError(func(topic string, p int32, err error) {
			require.NoError(t, err, "fetch %s/%d", topic, p)
		})
		fs.EachRecord(func(r *kgo.Record) {
			if r.Value[0] == 'a' {
				aborted[r.Partition]++
				return
			}
			got[r.Partition]++
			total++
		})
	}
	require.Empty(t, aborted, "aborted records read per partition")
	for p := int32(0); p < partitions; p++ {
		require.Equal(t, want, got[p], "committed records of partition %d", p)
	}
}

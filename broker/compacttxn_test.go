package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A compaction that runs while a transaction is open must not let the open
// transaction's records supersede committed records of the same keys: if
// the transaction then aborts, a read-committed reader (a store restoring
// its changelog) would find neither. Kafka's cleaner never cleans past the
// last stable offset.
func TestCompactionKeepsWhatAnOpenTransactionWouldSupersede(t *testing.T) {
	b := start(t, Config{Partitions: 1})
	ctx := testCtx(t)
	adm := kadm.NewClient(newClient(t, b))
	compact := "compact"
	_, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": &compact}, "changelog")
	require.NoError(t, err)
	txn := func(id string) *kgo.Client {
		return newClient(t, b, kgo.TransactionalID(id), kgo.DefaultProduceTopic("changelog"), kgo.TransactionTimeout(time.Minute))
	}
	put := func(cl *kgo.Client, k, v string) {
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Key: []byte(k), Value: []byte(v)}).FirstErr())
	}
	owner, zombie := txn("owner"), txn("zombie")
	require.NoError(t, owner.BeginTransaction())
	put(owner, "k", "committed")
	require.NoError(t, owner.EndTransaction(ctx, kgo.TryCommit))
	require.NoError(t, zombie.BeginTransaction())
	put(zombie, "k", "stale")
	// Committed records after the open one, so that it is not in the
	// partition's last batch, which compaction never touches.
	require.NoError(t, owner.BeginTransaction())
	put(owner, "other", "x")
	require.NoError(t, owner.EndTransaction(ctx, kgo.TryCommit))

	b.Compact()
	require.NoError(t, zombie.EndTransaction(ctx, kgo.TryAbort))

	cl := newClient(t, b, kgo.ConsumeTopics("changelog"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	got := map[string]string{}
	// "other" was committed after everything else.
	for got["other"] == "" {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read so far: %v", got)
		fs.EachRecord(func(r *kgo.Record) { got[string(r.Key)] = string(r.Value) })
	}
	require.Equal(t, map[string]string{"k": "committed", "other": "x"}, got)
}

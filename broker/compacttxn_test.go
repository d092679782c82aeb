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
	b, txn := txnTopic(t)
	ctx := testCtx(t)
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

	// "other" was committed after everything else.
	require.Equal(t, map[string]string{"k": "committed", "other": "x"}, readCommittedUntil(t, b, "other"))
}

// txnTopic starts a broker with a compacted topic "changelog" and returns
// it with a maker of transactional clients producing to it.
func txnTopic(t *testing.T) (*Broker, func(id string) *kgo.Client) {
	t.Helper()
	b := start(t, Config{Partitions: 1})
	compact := "compact"
	_, err := kadm.NewClient(newClient(t, b)).CreateTopic(testCtx(t), 1, -1, map[string]*string{"cleanup.policy": &compact}, "changelog")
	require.NoError(t, err)
	return b, func(id string) *kgo.Client {
		return newClient(t, b, kgo.TransactionalID(id), kgo.DefaultProduceTopic("changelog"), kgo.TransactionTimeout(time.Minute))
	}
}

// readCommittedUntil reads "changelog" read-committed from its start until
// it has read key until, and returns each key's last value.
func readCommittedUntil(t *testing.T, b *Broker, until string) map[string]string {
	t.Helper()
	ctx := testCtx(t)
	cl := newClient(t, b, kgo.ConsumeTopics("changelog"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	got := map[string]string{}
	for got[until] == "" {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read so far: %v", got)
		fs.EachRecord(func(r *kgo.Record) { got[string(r.Key)] = string(r.Value) })
	}
	return got
}

// TestCompactionHoldsWritesUntilDone: a transaction that opens after the
// compaction found none open, and writes batches before kfake compacts,
// must not have those batches cleaned: when it aborts, a read-committed
// reader would find neither its records nor the committed ones they
// superseded. Writes wait for the compaction instead.
func TestCompactionHoldsWritesUntilDone(t *testing.T) {
	b, txn := txnTopic(t)
	ctx := testCtx(t)
	put := func(cl *kgo.Client, k, v string) error {
		return cl.ProduceSync(ctx, &kgo.Record{Key: []byte(k), Value: []byte(v)}).FirstErr()
	}
	owner, zombie := txn("owner"), txn("zombie")
	require.NoError(t, owner.BeginTransaction())
	require.NoError(t, put(owner, "k", "committed"))
	require.NoError(t, owner.EndTransaction(ctx, kgo.TryCommit))

	// Just before kfake compacts, the zombie opens a transaction and
	// writes two batches, k's not the partition's last.
	wrote := make(chan error, 1)
	b.starts.beforeCompact = func() {
		go func() {
			if err := zombie.BeginTransaction(); err != nil {
				wrote <- err
				return
			}
			if err := put(zombie, "k", "stale"); err != nil {
				wrote <- err
				return
			}
			wrote <- put(zombie, "other", "x")
		}()
		deadline := time.After(10 * time.Second)
		for b.starts.refused.Load() == 0 {
			select {
			case err := <-wrote:
				wrote <- err // written before the compaction
				return
			case <-deadline:
				t.Error("the zombie's write was neither written nor refused")
				return
			case <-time.After(time.Millisecond):
			}
		}
	}
	b.Compact()
	b.starts.beforeCompact = nil
	require.NoError(t, <-wrote)
	require.Positive(t, b.starts.refused.Load(), "the zombie's writes waited for the compaction")
	require.NoError(t, zombie.EndTransaction(ctx, kgo.TryAbort))
	require.NoError(t, owner.BeginTransaction())
	require.NoError(t, put(owner, "last", "y"))
	require.NoError(t, owner.EndTransaction(ctx, kgo.TryCommit))

	require.Equal(t, map[string]string{"k": "committed", "last": "y"}, readCommittedUntil(t, b, "last"))
}

// TestCompactionKeepsCommittedAfterAnAbortWhoseMarkerWasCleaned: a
// producer aborts a transaction, another producer's records supersede
// all of its data, compaction runs, and the first producer commits again.
// A read-committed reader from the start must see that last commit: kfake
// drops the ABORT marker and keeps the aborted transaction listed, and a
// reader drops the producer's batches until it meets a marker.
func TestCompactionKeepsCommittedAfterAnAbortWhoseMarkerWasCleaned(t *testing.T) {
	b, txn := txnTopic(t)
	ctx := testCtx(t)
	write := func(cl *kgo.Client, commit bool, kvs ...string) {
		t.Helper()
		require.NoError(t, cl.BeginTransaction())
		for i := 0; i < len(kvs); i += 2 {
			require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Key: []byte(kvs[i]), Value: []byte(kvs[i+1])}).FirstErr())
		}
		require.NoError(t, cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)))
	}
	x, y := txn("x"), txn("y")
	// Never superseded: the log start stays before x's transactions.
	write(y, true, "keep", "-")
	write(x, true, "k", "1")
	// Two aborts: a reader pops one of them at each marker it meets.
	write(x, false, "k", "aborted")
	write(x, false, "k", "aborted again")
	write(y, true, "k", "2")
	write(y, true, "pad", "-")
	b.Compact()
	write(x, true, "k", "3")
	write(y, true, "last", "-")

	require.Equal(t, "3", readCommittedUntil(t, b, "last")["k"], "the last committed value of k, read committed from the start")
}

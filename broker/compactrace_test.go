package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestCompactionHoldsWritesUntilDone: a transaction that opens after the
// compaction found none open, and writes batches before kfake compacts,
// must not have those batches cleaned: when it aborts, a read-committed
// reader would find neither its records nor the committed ones they
// superseded. Writes wait for the compaction instead.
func TestCompactionHoldsWritesUntilDone(t *testing.T) {
	b := start(t, Config{Partitions: 1})
	ctx := testCtx(t)
	adm := kadm.NewClient(newClient(t, b))
	compact := "compact"
	_, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": &compact}, "changelog")
	require.NoError(t, err)
	txn := func(id string) *kgo.Client {
		return newClient(t, b, kgo.TransactionalID(id), kgo.DefaultProduceTopic("changelog"), kgo.TransactionTimeout(time.Minute))
	}
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

	cl := newClient(t, b, kgo.ConsumeTopics("changelog"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	got := map[string]string{}
	for got["last"] == "" {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read so far: %v", got)
		fs.EachRecord(func(r *kgo.Record) { got[string(r.Key)] = string(r.Value) })
	}
	require.Equal(t, map[string]string{"k": "committed", "last": "y"}, got)
}

// TestCompactionKeepsCommittedAfterAnAbortWhoseMarkerWasCleaned: a
// producer aborts a transaction, another producer's records supersede
// all of its data, compaction runs, and the first producer commits again.
// A read-committed reader from the start must see that last commit: kfake
// drops the ABORT marker and keeps the aborted transaction listed, and a
// reader drops the producer's batches until it meets a marker.
func TestCompactionKeepsCommittedAfterAnAbortWhoseMarkerWasCleaned(t *testing.T) {
	b := start(t, Config{Partitions: 1})
	ctx := testCtx(t)
	adm := kadm.NewClient(newClient(t, b))
	compact := "compact"
	_, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": &compact}, "changelog")
	require.NoError(t, err)
	txn := func(id string) *kgo.Client {
		return newClient(t, b, kgo.TransactionalID(id), kgo.DefaultProduceTopic("changelog"), kgo.TransactionTimeout(time.Minute))
	}
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

	cl := newClient(t, b, kgo.ConsumeTopics("changelog"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	got := map[string]string{}
	for got["last"] == "" {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read so far: %v", got)
		fs.EachRecord(func(r *kgo.Record) { got[string(r.Key)] = string(r.Value) })
	}
	require.Equal(t, "3", got["k"], "the last committed value of k, read committed from the start")
}

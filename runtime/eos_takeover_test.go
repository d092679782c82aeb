package runtime

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/task"
)

// A task taken over under exactly-once while its previous owner's
// transaction is still open — the owner paused or cut off after it
// committed its offsets into the transaction, before it ended it — must not
// start from that transaction's offsets on a store that lacks its changelog
// writes. The transaction commits after the new owner was assigned; the
// group's offsets, which the new owner's consumer waits for, then include
// the records it counted, so its store must include their counts too.
func TestExactlyOnceTakeoverWaitsForThePreviousOwnersTransaction(t *testing.T) {
	c := newEOSCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const app, changelogTopic = "eos", "eos-counts-changelog"
	_, err := c.adm.CreateTopics(ctx, 2, -1, map[string]*string{"cleanup.policy": new(string)}, changelogTopic)
	require.NoError(t, err)
	// w's partition, of the input and of the changelog, is the one
	// queries look it up in.
	var part int32 = -1
	produce := func(n int) {
		for range n {
			r, err := c.cl.ProduceSync(ctx, &kgo.Record{Key: []byte("w"), Value: []byte("v")}).First()
			require.NoError(t, err)
			require.True(t, part < 0 || part == r.Partition)
			part = r.Partition
		}
	}
	// Five records of w, which the previous owner counted: its open
	// transaction holds the count's changelog record and the offset past
	// the records.
	produce(5)
	const txnID = "previous-owner"
	prev, err := kgo.NewClient(kgo.SeedBrokers(c.b.Addrs()...), kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(time.Minute), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer prev.Close()
	require.NoError(t, prev.BeginTransaction())
	five, err := serde.Int64.Encode(5)
	require.NoError(t, err)
	require.NoError(t, prev.ProduceSync(ctx, &kgo.Record{Topic: changelogTopic, Partition: part, Key: []byte("w"), Value: five}).FirstErr())
	pid, epoch, err := prev.ProducerID(ctx)
	require.NoError(t, err)
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = txnID, pid, epoch, app
	addResp, err := add.RequestWith(ctx, prev)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(addResp.ErrorCode))
	commit := kmsg.NewPtrTxnOffsetCommitRequest()
	commit.TransactionalID, commit.Group, commit.ProducerID, commit.ProducerEpoch = txnID, app, pid, epoch
	commit.Generation = -1
	listed, err := c.adm.ListTopics(ctx, "in")
	require.NoError(t, err)
	ct := kmsg.NewTxnOffsetCommitRequestTopic()
	ct.Topic, ct.TopicID = "in", listed["in"].ID // requests from v6 name topics by ID
	cp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	cp.Partition, cp.Offset, cp.LeaderEpoch = part, 5, -1
	ct.Partitions = append(ct.Partitions, cp)
	commit.Topics = append(commit.Topics, ct)
	commitResp, err := commit.RequestWith(ctx, prev)
	require.NoError(t, err)
	for _, rt := range commitResp.Topics {
		for _, rp := range rt.Partitions {
			require.NoError(t, kerr.ErrorForCode(rp.ErrorCode))
		}
	}

	// The consumer asks for the group's offsets, requiring them stable,
	// once a second while the transaction holds them back.
	var fetches atomic.Int32
	c.b.Cluster().ControlKey(int16(kmsg.OffsetFetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.b.Cluster().KeepControl()
		fetch := req.(*kmsg.OffsetFetchRequest)
		for _, g := range fetch.Groups {
			if g.Group == app && fetch.RequireStable {
				fetches.Add(1)
			}
		}
		return nil, nil, false
	})
	a, err := New(countTopology(t), Config{
		ApplicationID: app, Brokers: c.b.Addrs(), StateDir: t.TempDir(),
		ProcessingGuarantee: ExactlyOnce, SessionTimeout: 2 * time.Second, NumStreamThreads: 1,
	})
	require.NoError(t, err)
	require.NoError(t, a.Start(context.Background()))
	defer a.Close(context.Background())
	held := task.ID{SubTopology: 0, Partition: part}
	// Either the task finished restoring without the open transaction's
	// writes, or it is still waiting after the consumer was refused the
	// offsets at least twice: either way the transaction commits now,
	// after the new owner took the task.
	waitFor(t, 30*time.Second, "the new owner restored the task or waits on the transaction", func() bool {
		for _, ti := range a.Tasks() {
			if ti.ID == held && ti.State == task.Running {
				return true
			}
		}
		return fetches.Load() >= 3
	})
	t.Logf("the previous owner's transaction commits after %d fetches of the group's offsets", fetches.Load())
	require.NoError(t, prev.EndTransaction(ctx, kgo.TryCommit))

	produce(3)
	waitFor(t, 30*time.Second, "the group committed every input record", func() bool {
		offs, err := c.adm.FetchOffsets(ctx, app)
		if err != nil {
			return false
		}
		o, ok := offs.Lookup("in", part)
		return ok && o.At >= 8
	})
	var got int64
	waitFor(t, 10*time.Second, "the task's store written", func() bool {
		v, found, _, err := activeGet(a, "counts", []byte("w"))
		if err != nil || !found {
			return false
		}
		got, err = serde.Int64.Decode(v)
		return err == nil
	})
	require.Equal(t, int64(8), got, "count of w: 5 counted by the previous owner, 3 by the new one")
}

// An instance killed with a transaction open on its changelogs and
// restarted on its state directory aborts that transaction as it connects:
// its tasks' restoration, which reads through open transactions, does not
// wait for the broker to time the transaction out.
func TestExactlyOnceRestartAbortsTheTransactionItLeftOpen(t *testing.T) {
	c := newEOSCluster(t)
	dir := t.TempDir()
	start := func() *App {
		app, err := New(countTopology(t), Config{
			ApplicationID: "eos", Brokers: c.b.Addrs(), StateDir: dir,
			ProcessingGuarantee: ExactlyOnce, SessionTimeout: 2 * time.Second, NumStreamThreads: 1,
			// Far longer than the test waits for its counts.
			TransactionTimeout: time.Minute,
		})
		require.NoError(t, err)
		require.NoError(t, app.Start(context.Background()))
		return app
	}
	want := map[string]int64{}
	app := start()
	c.produce(t, 200, want)
	waitCounts(t, app, want)

	// Crash in a commit whose changelog records the broker already holds:
	// the transaction stays open, holding back the changelogs' last
	// stable offsets.
	cl := app.threads[0].cl
	var armed, flushed atomic.Bool
	crash := func(step string) bool {
		if step != "before-commit" || !armed.Load() {
			return false
		}
		flushed.Store(cl.Flush(context.Background()) == nil)
		return true
	}
	crashAt.Store(&crash)
	defer crashAt.Store(nil)
	armed.Store(true)
	c.produce(t, 50, want)
	waitFor(t, 20*time.Second, "the crash", func() bool { return app.threads[0].killed.Load() })
	app.Kill()
	crashAt.Store(nil)
	require.True(t, flushed.Load(), "the crashed transaction's records reached the broker")

	app = start()
	defer app.Close(context.Background())
	waitCounts(t, app, want)
}

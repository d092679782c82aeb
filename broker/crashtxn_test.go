package broker

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// crashImage copies the data directory of a running broker, which is what
// the directory holds when the broker's process is killed at that moment:
// kfake writes every batch and log entry to its files before it answers.
func crashImage(t *testing.T, from string) string {
	t.Helper()
	to := t.TempDir()
	err := filepath.Walk(from, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		if info.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(dst)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	require.NoError(t, err)
	return to
}

// readCommittedValues reads topic's partition 0 with read_committed up to
// a record it appends first (records of an aborted transaction the broker
// wrote no marker for leave no trace a reader could wait for), and returns
// the values of the committed records before it.
func readCommittedValues(ctx context.Context, t *testing.T, b *Broker, topic string) []string {
	t.Helper()
	end := newClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	res := end.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte("end")})
	require.NoError(t, res.FirstErr())
	endAt := res[0].Record.Offset
	cl := newClient(t, b,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	defer cl.Close()
	var out []string
	for done := false; !done; {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read %v", out)
		fs.EachError(func(topic string, p int32, err error) {
			require.NoError(t, err, "fetch %s/%d", topic, p)
		})
		fs.EachRecord(func(r *kgo.Record) {
			switch {
			case r.Offset == endAt:
				done = true
			case r.Offset < endAt && string(r.Value) != "end":
				out = append(out, string(r.Value))
			}
		})
	}
	return out
}

// txnProduce writes values to topic's partition 0 in one transaction of
// txid and commits it, or leaves it open when commit is false.
func txnProduce(ctx context.Context, t *testing.T, b *Broker, txid, topic string, commit bool, values ...string) *kgo.Client {
	t.Helper()
	cl := newClient(t, b, kgo.TransactionalID(txid), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, cl.BeginTransaction())
	for _, v := range values {
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte(v)}).FirstErr())
	}
	if commit {
		require.NoError(t, cl.EndTransaction(ctx, kgo.TryCommit))
	}
	return cl
}

// crashedWithOpenTxn returns the data directory of a broker killed while
// producer "tx" had a transaction (records a1, a2) open in topic "out",
// after one committed transaction (c0).
func crashedWithOpenTxn(ctx context.Context, t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	b1, err := Start(Config{DataDir: dir, Partitions: 1})
	require.NoError(t, err)
	createTopic(ctx, t, b1, "out", 1, nil)
	txnProduce(ctx, t, b1, "tx", "out", true, "c0")
	open := txnProduce(ctx, t, b1, "tx", "out", false, "a1", "a2")
	crashed := crashImage(t, dir)
	open.Close()
	b1.Close()
	return crashed
}

// TestCrashAbortedTxnStaysAborted: a transaction open when the broker is
// killed is aborted when it restarts, and stays aborted across later
// crashes once its producer has committed another transaction.
func TestCrashAbortedTxnStaysAborted(t *testing.T) {
	ctx := testCtx(t)
	crashed := crashedWithOpenTxn(ctx, t)

	b2 := start(t, Config{DataDir: crashed, Partitions: 1})
	require.Equal(t, []string{"c0"}, readCommittedValues(ctx, t, b2, "out"),
		"the transaction open at the crash is aborted")
	txnProduce(ctx, t, b2, "tx", "out", true, "c3")
	require.Equal(t, []string{"c0", "c3"}, readCommittedValues(ctx, t, b2, "out"))

	b3 := start(t, Config{DataDir: crashImage(t, crashed), Partitions: 1})
	require.Equal(t, []string{"c0", "c3"}, readCommittedValues(ctx, t, b3, "out"),
		"after a second crash")
}

// TestCrashAbortedTxnEndsWithMarker: a read_committed reader that keeps
// control records reaches the end of a log whose last transaction was
// open at the crash (the runtime's restoration waits for that).
func TestCrashAbortedTxnEndsWithMarker(t *testing.T) {
	ctx := testCtx(t)
	crashed := crashedWithOpenTxn(ctx, t)

	b2 := start(t, Config{DataDir: crashed, Partitions: 1})
	ends, err := kadm.NewClient(newClient(t, b2)).ListEndOffsets(ctx, "out")
	require.NoError(t, err)
	end, _ := ends.Lookup("out", 0)
	cl := newClient(t, b2,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"out": {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords())
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	next := int64(0)
	for next < end.Offset {
		fs := cl.PollFetches(short)
		require.NoError(t, short.Err(), "read up to %d of %d", next, end.Offset)
		fs.EachRecord(func(r *kgo.Record) { next = r.Offset + 1 })
	}
}

// TestGracefulRestartKeepsOpenTxn: a transaction open when the broker
// is closed (not killed) stays open across the restart, and its producer
// commits it.
func TestGracefulRestartKeepsOpenTxn(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	b1, err := Start(Config{DataDir: dir, Partitions: 1})
	require.NoError(t, err)
	addr := b1.Addrs()[0]
	createTopic(ctx, t, b1, "out", 1, nil)
	open := txnProduce(ctx, t, b1, "tx", "out", false, "c1", "c2")
	b1.Close()

	b2 := start(t, Config{DataDir: dir, Partitions: 1, Listen: addr})
	require.NoError(t, open.EndTransaction(ctx, kgo.TryCommit))
	require.Equal(t, []string{"c1", "c2"}, readCommittedValues(ctx, t, b2, "out"))
}

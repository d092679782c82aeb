package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/iq"
)

// A watch's read back of the changelog says when the log no longer holds
// every record of the range (a watched key's changes may be among those
// compaction removed), and not for an aborted transaction, whose records
// the read skips but the log still holds.
func TestReadChangelogFindsWhatCompactionRemoved(t *testing.T) {
	b, adm := startBroker(t)
	app, err := New(countTopology(t), Config{ApplicationID: "rb", Brokers: b.Addrs(), StateDir: t.TempDir(), ProcessingGuarantee: ExactlyOnce})
	require.NoError(t, err)
	topic := app.changelogTopic("counts")
	_, err = adm.CreateTopic(context.Background(), 1, -1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, topic)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	tx, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic(topic), kgo.TransactionalID("rb-test"))
	require.NoError(t, err)
	defer tx.Close()
	send := func(commit bool, kvs ...string) {
		t.Helper()
		require.NoError(t, tx.BeginTransaction())
		for i := 0; i < len(kvs); i += 2 {
			require.NoError(t, tx.ProduceSync(ctx, &kgo.Record{Key: []byte(kvs[i]), Value: []byte(kvs[i+1])}).FirstErr())
		}
		require.NoError(t, tx.EndTransaction(ctx, kgo.TransactionEndTry(commit)))
	}
	isA := func(k []byte) bool { return string(k) == "a" }
	values := func(cs []iq.Change) (out []string) {
		for _, c := range cs {
			out = append(out, string(c.Value))
		}
		return out
	}
	q := queryBackend{app}

	send(false, "a", "aborted") // 0, its marker at 1
	send(true, "a", "1")        // 2, 3
	changes, heldFrom, err := q.ReadChangelog(ctx, "counts", 0, isA, 0, 4)
	require.NoError(t, err)
	require.Equal(t, []string{"1"}, values(changes), "committed records only")
	require.Equal(t, int64(0), heldFrom, "an aborted transaction removes nothing from the log")

	send(true, "a", "2", "b", "x") // 4, 5, 6
	send(true, "a", "3")           // 7, 8
	b.Compact()
	changes, heldFrom, err = q.ReadChangelog(ctx, "counts", 0, isA, 0, 9)
	require.NoError(t, err)
	require.Equal(t, "3", values(changes)[len(changes)-1])
	require.NotContains(t, values(changes), "2", "compacted away")
	require.Greater(t, heldFrom, int64(0), "the log no longer holds the range whole")

	// From past the last hole, the log holds the range whole.
	changes, heldFrom, err = q.ReadChangelog(ctx, "counts", 0, isA, 7, 9)
	require.NoError(t, err)
	require.Equal(t, []string{"3"}, values(changes))
	require.Equal(t, int64(7), heldFrom)
}

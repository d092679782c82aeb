package runtime

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
)

// Under at-least-once nothing fences a member the group has moved on from:
// its flush can land in a changelog partition after records the task's new
// owner wrote there (a flush held up by a broker restart lands seconds
// late). The coordinator then refuses the old owner's offset commit, and
// its store must not take the position after its own records, which would
// claim it holds the new owner's too: kept as a standby or promoted later,
// it would never read them, and the counts they carried would be lost for
// good. Here the new owner's write is a record appended to the changelog
// just before the flush whose offset commit is refused: the store must end
// up holding it.
func TestAtLeastOnceRefusedCommitLeavesStoreToReadOtherWriters(t *testing.T) {
	t.Parallel()
	b, _ := startBroker(t, "in")
	const group = "alo-refused-store"
	app, err := New(countTopology(t), Config{ApplicationID: group, Brokers: b.Addrs(), StateDir: t.TempDir(),
		NumStreamThreads: 1, CommitInterval: 100 * time.Millisecond, ProcessingGuarantee: AtLeastOnce})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	t.Cleanup(func() { app.Close(context.Background()) })

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	produce := func(topic, key string, value []byte) {
		t.Helper()
		require.NoError(t, cl.ProduceSync(context.Background(),
			&kgo.Record{Topic: topic, Partition: 0, Key: []byte(key), Value: value}).FirstErr())
	}
	adm := kadm.NewClient(cl)
	committed := func() int64 {
		o, err := adm.FetchOffsets(context.Background(), group)
		if err != nil {
			return -1
		}
		c, ok := o.Lookup("in", 0)
		if !ok {
			return -1
		}
		return c.At
	}
	q := iq.NewQuerier(app.Queries())
	count := func(key string) int64 {
		r, err := iq.Get[string, int64](context.Background(), q, "counts", key, serde.String, serde.Int64)
		if err != nil || !r.Found {
			return 0
		}
		return r.Value
	}

	produce("in", "a", []byte("v"))
	waitFor(t, 60*time.Second, "the first record counted and committed", func() bool {
		return count("a") == 1 && committed() == 1
	})

	// The next offset commit is refused, as the old owner's is; the new
	// owner's record is already in the changelog when the old owner
	// flushes.
	fault := b.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: group, Err: kerr.UnknownMemberID, Count: 1})
	t.Cleanup(fault.Remove)
	const other = 50
	produce(app.changelogTopic("counts"), "b", binary.BigEndian.AppendUint64(nil, other))
	produce("in", "a", []byte("v"))

	waitFor(t, 60*time.Second, "the store to hold the other writer's record", func() bool {
		return fault.Hits() == 1 && count("a") >= 2 && count("b") == other && committed() == 2
	})
	require.NoError(t, app.Err())
}

package runtime

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
)

// Under at-least-once nothing fences a task's old owner: after a rebalance
// it may still flush its changelog records while the new owner writes its
// own (a flush held up by a broker restart lands seconds late). A store
// that then took the position after its own records would claim to hold
// the other writer's too and never read them, and the counts they carried
// would be lost for good once the store served again. Here the other
// writer is a record appended to the changelog partition between two
// commits of the task: the store must end up holding it.
func TestAtLeastOnceStoreReadsAnotherWritersChangelogRecords(t *testing.T) {
	b, _ := startBroker(t, "in")
	const group = "shared-changelog"
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
	q := iq.NewQuerier(app.Queries())
	count := func(key string) int64 {
		r, err := iq.Get[string, int64](context.Background(), q, "counts", key, serde.String, serde.Int64)
		if err != nil || !r.Found {
			return 0
		}
		return r.Value
	}
	changelogEnd := func() int64 {
		o, err := kadmOffsets(t, b.Addrs(), app.changelogTopic("counts"))
		require.NoError(t, err)
		return o
	}

	produce("in", "a", []byte("v"))
	waitFor(t, 60*time.Second, "the first record counted and its changelog record written", func() bool {
		return count("a") == 1 && changelogEnd() == 1
	})

	// The other writer's record, then input that makes the task write
	// its changelog again.
	const foreign = 50
	produce(app.changelogTopic("counts"), "b", binary.BigEndian.AppendUint64(nil, foreign))
	produce("in", "a", []byte("v"))

	waitFor(t, 60*time.Second, "the store to hold both writers' records", func() bool {
		return count("a") >= 2 && count("b") == foreign
	})
	require.NoError(t, app.Err())
}

// kadmOffsets returns the end offset of partition 0 of topic.
func kadmOffsets(t *testing.T, addrs []string, topic string) (int64, error) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topic)
	if err != nil {
		return 0, err
	}
	o, ok := ends.Lookup(topic, 0)
	if !ok {
		return 0, nil
	}
	return o.Offset, o.Err
}

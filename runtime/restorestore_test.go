package runtime

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/statestore"
)

// RestoreStore applies a changelog partition to a store in batches, each
// with its position, and a second run starts from the store's position:
// only the records written since are applied.
func TestRestoreStoreFromItsPosition(t *testing.T) {
	const topic = "restore-store-changelog"
	b, _ := startBroker(t, topic)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			r := &kgo.Record{Topic: topic, Partition: 1, Key: fmt.Appendf(nil, "k%03d", i%40), Value: fmt.Appendf(nil, "v%d", i)}
			require.NoError(t, cl.ProduceSync(ctx, r).FirstErr())
		}
	}
	produce(0, 100)
	// A tombstone: the restored store must not hold the key.
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 1, Key: []byte("k000")}).FirstErr())

	store := statestore.NewMemory()
	defer store.Close()
	cfg := RestoreConfig{Brokers: b.Addrs(), MaxBatchRecords: 7}
	res, err := RestoreStore(ctx, store, topic, 1, cfg)
	require.NoError(t, err)
	require.Equal(t, int64(101), res.Records)
	require.Equal(t, int64(101), res.Position)
	pos, err := store.Position()
	require.NoError(t, err)
	require.Equal(t, int64(101), pos)
	_, found, err := store.Get([]byte("k000"))
	require.NoError(t, err)
	require.False(t, found, "deleted key")
	v, found, err := store.Get([]byte("k039"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "v79", string(v))

	produce(100, 105)
	res, err = RestoreStore(ctx, store, topic, 1, cfg)
	require.NoError(t, err)
	require.Equal(t, int64(5), res.Records, "only the records past the store's position")
	require.Equal(t, int64(106), res.Position)
	v, found, err = store.Get([]byte("k020"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "v100", string(v))
}

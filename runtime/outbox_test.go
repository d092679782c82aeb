package runtime

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestOutboxKeepsOrderAndFlushCoversEverySend(t *testing.T) {
	b, _ := startBroker(t, "ob")
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()

	var mu sync.Mutex
	var acked []string
	var failed error
	o := newOutbox(cl, func(r *kgo.Record, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed = err
			return
		}
		acked = append(acked, string(r.Value))
	})
	// More than a few batches, and a partial one at the end.
	const n = outboxBatch*outboxBatches*3 + 17
	for i := range n {
		o.send(&kgo.Record{Topic: "ob", Partition: 0, Value: []byte(strconv.Itoa(i))})
	}
	o.flush()
	// Everything sent is now the producer's, so its Flush waits for all.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, cl.Flush(ctx))
	mu.Lock()
	require.NoError(t, failed)
	require.Len(t, acked, n)
	for i, v := range acked {
		require.Equal(t, strconv.Itoa(i), v, "records reach the partition in the order they were sent")
	}
	mu.Unlock()

	o.close()
	o.close() // idempotent
	select {
	case <-o.done:
	default:
		t.Fatal("close returned before the goroutine ended")
	}
}

func TestOutboxOnClosedClientFailsThroughPromises(t *testing.T) {
	b, _ := startBroker(t, "ob")
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	require.NoError(t, err)
	var mu sync.Mutex
	var errs []error
	o := newOutbox(cl, func(_ *kgo.Record, err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	})
	cl.Close()
	o.send(&kgo.Record{Topic: "ob", Value: []byte("late")})
	o.close()
	// The client runs promises on a goroutine of its own.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(errs) == 1
	}, 10*time.Second, time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.True(t, errors.Is(errs[0], kgo.ErrClientClosed), "got %v", errs[0])
}

package changelog

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/statestore"
)

// A Poll hands its writes to a goroutine and returns: the next Poll fetches
// while they run. The position moves only once the write is done, and
// Unregister and Close wait for it.
func TestPollReturnsWhileItsWriteRuns(t *testing.T) {
	c := newCluster(t, 1, clTopic)
	produce(t, newProducer(t, c), clTopic, 0, numbered(0, 10)...)
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	store := newFakeStore()
	store.onWrite = func([]statestore.Entry, int64) {
		entered <- struct{}{}
		<-release
	}
	r := newReader(t, c, func(cfg *ReaderConfig) { cfg.MaxBatchRecords = 100 })
	require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Follow}))

	// Poll (without a deadline: a Poll returning an error waits for its
	// writes) until one hands a write over. Between Polls the test is the
	// poller, so it may look at the round.
	deadline := time.Now().Add(10 * time.Second)
	for r.round == nil {
		require.True(t, time.Now().Before(deadline), "no write started")
		_, err := r.Poll(context.Background())
		require.NoError(t, err)
	}
	<-entered
	// Poll returned with the write still blocked.
	p, ok := r.Progress(clTopic, 0)
	require.True(t, ok)
	require.Equal(t, statestore.NoPosition, p.Position, "the position moves when the write is done")

	unregistered := make(chan struct{})
	go func() {
		r.Unregister(clTopic, 0)
		close(unregistered)
	}()
	select {
	case <-unregistered:
		t.Fatal("Unregister returned while a write was under way")
	case <-time.After(50 * time.Millisecond):
	}
	closed := make(chan struct{})
	go func() {
		_ = r.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while a write was under way")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-unregistered
	<-closed
	require.Equal(t, int64(10), store.position())
	require.Equal(t, expectMap(numbered(0, 10)...), store.snapshot())
}

// A failed write ends the partition: no later batch reaches the store, so
// its position still says exactly what it holds.
func TestWriteFailureMidRestoreWritesNothingAfter(t *testing.T) {
	c := newCluster(t, 1, clTopic)
	produce(t, newProducer(t, c), clTopic, 0, numbered(0, 200)...)
	boom := errors.New("disk full")
	store := newFakeStore()
	var writes atomic.Int64
	store.onWrite = func([]statestore.Entry, int64) {
		if writes.Add(1) == 3 {
			store.failWith = boom // under store.mu: the next Write fails
		}
	}
	r := newReader(t, c, func(cfg *ReaderConfig) { cfg.MaxBatchRecords = 10 })
	require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Restore}))
	done := pollUntil(t, r, completedFor(clTopic, 0))
	require.Len(t, done, 1)
	require.ErrorIs(t, done[0].Err, boom)
	pos := store.position()
	require.Equal(t, pos, done[0].Position)
	require.Equal(t, pos, done[0].Restored, "one record per offset, none applied twice")
	require.Equal(t, expectMap(numbered(0, int(pos))...), store.snapshot())
	// Nothing more reaches the store, however long the Reader polls.
	for range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, _ = r.Poll(ctx)
		cancel()
	}
	require.EqualValues(t, 3, writes.Load())
	require.Equal(t, pos, store.position())
}

// A restoration stopped part way (its context ended, the Reader closed)
// leaves a badger store whose position matches its data, and a new Reader
// applies the rest exactly once.
func TestRestoreStoppedMidwayResumesExactlyOnce(t *testing.T) {
	const n = 20_000
	c := newCluster(t, 1, clTopic)
	prod := newProducer(t, c)
	for i := 0; i < n; i += 5000 {
		produce(t, prod, clTopic, 0, numbered(i, i+5000)...)
	}
	dir := t.TempDir()
	open := func() statestore.Store {
		s, err := statestore.OpenBadger(dir, statestore.BadgerOptions{ValueLogGCInterval: -1})
		require.NoError(t, err)
		return s
	}
	store := open()
	r := newReader(t, c, func(cfg *ReaderConfig) { cfg.MaxBatchRecords = 500 })
	require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Restore}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var err error
	for polls := 0; err == nil; polls++ {
		if p, ok := r.Progress(clTopic, 0); polls > 500 || (ok && p.Position >= n/4) {
			cancel()
		}
		var done []Completed
		done, err = r.Poll(ctx)
		require.Empty(t, done, "stopped before the end")
	}
	require.ErrorIs(t, err, context.Canceled)
	pos, err := store.Position()
	require.NoError(t, err)
	require.Greater(t, pos, int64(0))
	require.Less(t, pos, int64(n))
	// Poll waited for its writes before returning its error.
	require.NoError(t, r.Close())
	again, err := store.Position()
	require.NoError(t, err)
	require.Equal(t, pos, again)
	require.NoError(t, store.Close())

	store = open()
	t.Cleanup(func() { _ = store.Close() })
	reopened, err := store.Position()
	require.NoError(t, err)
	require.Equal(t, pos, reopened)
	require.Equal(t, int(pos), countKeys(t, store), "the store holds exactly the records below its position")

	r2 := newReader(t, c, func(cfg *ReaderConfig) { cfg.MaxBatchRecords = 500 })
	require.NoError(t, r2.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Restore}))
	done := pollUntil(t, r2, completedFor(clTopic, 0))
	require.NoError(t, done[0].Err)
	require.Equal(t, int64(n)-pos, done[0].Restored)
	require.Equal(t, int64(n), done[0].Position)
	require.Equal(t, n, countKeys(t, store))
	v, found, err := store.Get([]byte(fmt.Sprintf("k%04d", n-1)))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, fmt.Sprintf("v%d", n-1), string(v))
}

func countKeys(t *testing.T, s statestore.Store) int {
	t.Helper()
	it, err := s.All()
	require.NoError(t, err)
	defer it.Close()
	n := 0
	for it.Next() {
		n++
	}
	require.NoError(t, it.Err())
	return n
}

// A Poll may take more records than MaxBatchRecords (to empty the client's
// buffer, see takeSize); they are written in order, in writes of at most
// MaxBatchRecords, each with its position.
func TestLargeTakeIsWrittenInBatches(t *testing.T) {
	c := newCluster(t, 1, clTopic)
	r := newReader(t, c, func(cfg *ReaderConfig) { cfg.MaxBatchRecords = 10 })
	store := newFakeStore()
	var positions []int64
	store.onWrite = func(entries []statestore.Entry, position int64) {
		require.LessOrEqual(t, len(entries), 10)
		positions = append(positions, position)
	}
	require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Follow}))
	_, retry := r.listPending(context.Background())
	require.False(t, retry)

	var recs []*kgo.Record
	for o := range int64(25) {
		recs = append(recs, &kgo.Record{Topic: clTopic, Partition: 0, Offset: o,
			Key: fmt.Appendf(nil, "k%04d", o), Value: fmt.Appendf(nil, "v%d", o)})
	}
	fetches := kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: clTopic, Partitions: []kgo.FetchPartition{
		{Partition: 0, HighWatermark: 25, LastStableOffset: 25, Records: recs},
	}}}}}
	r.mu.Lock()
	epoch := r.epoch
	r.mu.Unlock()
	require.Empty(t, append(r.apply(fetches, epoch), r.waitRound()...))
	require.Equal(t, []int64{10, 20, 25}, positions)
	require.Equal(t, expectMap(numbered(0, 25)...), store.snapshot())
	p, ok := r.Progress(clTopic, 0)
	require.True(t, ok)
	require.Equal(t, int64(25), p.Position)
	require.Equal(t, int64(25), p.Restored)
}

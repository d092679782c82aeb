package changelog

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/statestore"
)

const clTopic = "app-store-changelog"

func TestRestore(t *testing.T) {
	history := append(numbered(0, 50), kv("k0003", "new"), del("k0007"), del("absent"), kv("k0010", ""))
	tests := []struct {
		name         string
		preload      int // records of history already in the store
		maxBatch     int
		wantRestored int64
	}{
		{name: "from empty position", preload: -1, wantRestored: int64(len(history))},
		{name: "from a middle position applies only the tail", preload: 20, wantRestored: int64(len(history) - 20)},
		{name: "already caught up", preload: len(history), wantRestored: 0},
		{name: "in capped batches", preload: -1, maxBatch: 7, wantRestored: int64(len(history))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 2, clTopic)
			prod := newProducer(t, c)
			produce(t, prod, clTopic, 1, history...)
			produce(t, prod, clTopic, 0, kv("other", "partition")) // must not leak in

			store := newFakeStore()
			if tc.preload >= 0 {
				require.NoError(t, store.Write(history[:tc.preload], int64(tc.preload)))
			}
			writesBefore, _ := store.stats()
			r := newReader(t, c, func(cfg *ReaderConfig) { cfg.MaxBatchRecords = tc.maxBatch })
			require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 1, Store: store, Mode: Restore, Task: "0_1"}))

			done := pollUntil(t, r, completedFor(clTopic, 1))
			require.Len(t, done, 1)
			got := done[0]
			require.NoError(t, got.Err)
			require.Equal(t, "0_1", got.Task)
			require.Same(t, statestore.Store(store), got.Store)
			require.Equal(t, tc.wantRestored, got.Restored)
			require.Equal(t, int64(len(history)), got.Position)

			require.Equal(t, expectMap(history...), store.snapshot())
			require.Equal(t, "", store.snapshot()["k0010"])
			pos, _ := store.Position()
			require.Equal(t, int64(len(history)), pos)
			writes, maxBatch := store.stats()
			if tc.wantRestored == 0 {
				require.Equal(t, writesBefore, writes, "a caught-up store is not written")
			}
			if tc.maxBatch > 0 {
				require.LessOrEqual(t, maxBatch, tc.maxBatch)
				require.GreaterOrEqual(t, writes-writesBefore, len(history)/tc.maxBatch)
			}
			_, ok := r.Progress(clTopic, 1)
			require.False(t, ok, "a completed restoration is forgotten")
		})
	}
}

func TestRestoreEmptyChangelogCompletesWithoutFetching(t *testing.T) {
	c := newCluster(t, 1, clTopic)
	r := newReader(t, c, nil)
	store := newFakeStore()
	require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Restore}))
	done := pollUntil(t, r, completedFor(clTopic, 0))
	require.NoError(t, done[0].Err)
	require.Zero(t, done[0].Restored)
	require.Equal(t, statestore.NoPosition, done[0].Position)
	writes, _ := store.stats()
	require.Zero(t, writes)
}

func TestRestoreManyPartitionsAtOnce(t *testing.T) {
	c := newCluster(t, 4, clTopic, "app-other-changelog")
	prod := newProducer(t, c)
	stores := map[TopicPartition]*fakeStore{}
	r := newReader(t, c, nil)
	for _, topic := range []string{clTopic, "app-other-changelog"} {
		for p := range int32(4) {
			produce(t, prod, topic, p, numbered(0, int(p)*10)...) // partition 0 stays empty
			s := newFakeStore()
			stores[TopicPartition{topic, p}] = s
			require.NoError(t, r.Register(Partition{Topic: topic, Partition: p, Store: s, Mode: Restore}))
		}
	}
	done := pollUntil(t, r, func(d []Completed) bool { return len(d) == len(stores) })
	for _, d := range done {
		require.NoError(t, d.Err)
		require.Equal(t, int64(d.Partition)*10, d.Restored, "%s[%d]", d.Topic, d.Partition)
		require.Equal(t, int(d.Partition)*10, stores[TopicPartition{d.Topic, d.Partition}].len())
	}
}

func TestFollowAppliesNewRecordsAndReportsLag(t *testing.T) {
	c := newCluster(t, 1, clTopic)
	prod := newProducer(t, c)
	produce(t, prod, clTopic, 0, numbered(0, 100)...)

	store := newFakeStore()
	r := newReader(t, c, func(cfg *ReaderConfig) { cfg.MaxBatchRecords = 10 })
	require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Follow, Task: "0_0"}))

	// Before any fetch: the end listed at registration gives a lag.
	pollUntil(t, r, func([]Completed) bool {
		p, ok := r.Progress(clTopic, 0)
		require.True(t, ok)
		return p.End == 100
	})
	// Part way: lag is the high watermark minus the position.
	pollUntil(t, r, func([]Completed) bool {
		p, _ := r.Progress(clTopic, 0)
		return p.Position > 0
	})
	p, _ := r.Progress(clTopic, 0)
	require.Equal(t, Follow, p.Mode)
	require.Equal(t, int64(100), p.End)
	require.Equal(t, p.End-p.Position, p.Lag)
	require.Equal(t, p.Position, p.Restored)
	require.Positive(t, p.Lag)

	// Follow keeps going past the end and tracks new records.
	done := runPolling(t, r)
	eventually(t, func() bool { p, _ := r.Progress(clTopic, 0); return p.Lag == 0 }, "caught up")
	produce(t, prod, clTopic, 0, kv("k0001", "changed"), del("k0002"))
	eventually(t, func() bool {
		p, _ := r.Progress(clTopic, 0)
		return p.Position == 102 && p.End == 102 && p.Lag == 0 && p.Restored == 102
	}, "follows new records")
	want := expectMap(append(numbered(0, 100), kv("k0001", "changed"), del("k0002"))...)
	require.Equal(t, want, store.snapshot())
	require.Empty(t, done, "follow never completes")
}

func TestUnregisterStopsApplying(t *testing.T) {
	const sentinelTopic = "app-sentinel-changelog"
	c := newCluster(t, 1, clTopic, sentinelTopic)
	prod := newProducer(t, c)
	r := newReader(t, c, func(cfg *ReaderConfig) { cfg.MaxBatchRecords = 5 })

	var unregistered atomic.Bool
	var lateWrites atomic.Int64
	store := newFakeStore()
	store.onWrite = func([]statestore.Entry, int64) {
		if unregistered.Load() {
			lateWrites.Add(1)
		}
	}
	require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Follow}))
	runPolling(t, r)

	// Keep producing while unregistering, so that a write is likely to
	// be in flight when Unregister runs.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var produceErr error
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			var track Offsets
			Send(context.Background(), prod, clTopic, 0, numbered(i*5, i*5+5), &track)
			if produceErr = errors.Join(prod.Flush(context.Background()), track.Err()); produceErr != nil {
				return
			}
		}
	})
	eventually(t, func() bool { return store.len() >= 20 }, "applying before unregister")
	require.True(t, r.Unregister(clTopic, 0))
	unregistered.Store(true)
	require.False(t, r.Unregister(clTopic, 0), "second unregister finds nothing")
	_, ok := r.Progress(clTopic, 0)
	require.False(t, ok)

	// A sentinel registered afterwards proves fetching went on.
	sentinel := newFakeStore()
	require.NoError(t, r.Register(Partition{Topic: sentinelTopic, Partition: 0, Store: sentinel, Mode: Follow}))
	produce(t, prod, sentinelTopic, 0, kv("s", "1"))
	eventually(t, func() bool { return sentinel.len() == 1 }, "sentinel applied")
	close(stop)
	wg.Wait()
	require.NoError(t, produceErr)
	produce(t, prod, sentinelTopic, 0, kv("s2", "2"))
	eventually(t, func() bool { return sentinel.len() == 2 }, "sentinel applied again")
	require.Zero(t, lateWrites.Load(), "store written after Unregister returned")

	// Registering again resumes from the store's own position.
	before := store.len()
	pos, _ := store.Position()
	end := produceCount(t, c, clTopic, 0)
	unregistered.Store(false)
	require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Follow}))
	eventually(t, func() bool { p, _ := r.Progress(clTopic, 0); return p.Position == end }, "resumed")
	p, _ := r.Progress(clTopic, 0)
	require.Equal(t, end-pos, p.Restored, "only the tail after the store's position is applied")
	require.Equal(t, int(end), store.len())
	require.GreaterOrEqual(t, store.len(), before)
}

// produceCount is the partition's end offset.
func produceCount(t *testing.T, c *kfake.Cluster, topic string, partition int32) int64 {
	t.Helper()
	r := newReader(t, c, nil)
	ends, err := r.listOffsets(context.Background(), []TopicPartition{{topic, partition}}, -1, false)
	require.NoError(t, err)
	return ends[TopicPartition{topic, partition}]
}

// txnHistory writes, to partition 0: a committed transaction (k0..k4), an
// aborted one (a0..a2) and a committed one (k5..k6). Offsets: 0-4 data, 5
// commit marker, 6-8 aborted data, 9 abort marker, 10-11 data, 12 commit
// marker; the end offset is 13.
func txnHistory(t *testing.T, c *kfake.Cluster) {
	t.Helper()
	txn := newProducer(t, c, kgo.TransactionalID("changelog-test"))
	ctx := context.Background()
	for _, step := range []struct {
		entries []statestore.Entry
		commit  bool
	}{
		{numbered(0, 5), true},
		{[]statestore.Entry{kv("a0", "x"), kv("a1", "x"), del("k0001")}, false},
		{[]statestore.Entry{kv("k0005", "v5"), del("k0000")}, true},
	} {
		require.NoError(t, txn.BeginTransaction())
		var track Offsets
		Send(ctx, txn, clTopic, 0, step.entries, &track)
		require.NoError(t, txn.Flush(ctx))
		require.NoError(t, track.Err())
		require.NoError(t, txn.EndTransaction(ctx, kgo.TransactionEndTry(step.commit)))
	}
}

func TestRestoreTransactionalChangelog(t *testing.T) {
	committed := expectMap(append(numbered(0, 5), kv("k0005", "v5"), del("k0000"))...)
	uncommitted := expectMap(append(numbered(0, 5), kv("a0", "x"), kv("a1", "x"), del("k0001"), kv("k0005", "v5"), del("k0000"))...)
	for _, tc := range []struct {
		name          string
		readCommitted bool
		want          map[string]string
		wantRestored  int64
	}{
		{"read committed skips aborted data", true, committed, 7},
		{"read uncommitted applies everything", false, uncommitted, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 1, clTopic)
			txnHistory(t, c)
			store := newFakeStore()
			r := newReader(t, c, func(cfg *ReaderConfig) { cfg.ReadCommitted = tc.readCommitted })
			require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Restore}))
			done := pollUntil(t, r, completedFor(clTopic, 0))
			require.NoError(t, done[0].Err)
			require.Equal(t, int64(13), done[0].Position, "restoration ends past the final commit marker")
			require.Equal(t, tc.wantRestored, done[0].Restored)
			require.Equal(t, tc.want, store.snapshot())
			pos, _ := store.Position()
			require.Equal(t, int64(13), pos)
		})
	}
}

func TestRestoreReadCommittedStopsAtOpenTransaction(t *testing.T) {
	c := newCluster(t, 1, clTopic)
	prod := newProducer(t, c)
	produce(t, prod, clTopic, 0, numbered(0, 3)...)

	txn := newProducer(t, c, kgo.TransactionalID("open-txn"))
	require.NoError(t, txn.BeginTransaction())
	var track Offsets
	Send(context.Background(), txn, clTopic, 0, numbered(3, 6), &track)
	require.NoError(t, txn.Flush(context.Background()))
	require.NoError(t, track.Err())

	store := newFakeStore()
	r := newReader(t, c, func(cfg *ReaderConfig) { cfg.ReadCommitted = true })
	require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Restore}))
	done := pollUntil(t, r, completedFor(clTopic, 0))
	require.NoError(t, done[0].Err)
	require.Equal(t, int64(3), done[0].Position, "the end is the last stable offset")
	require.Equal(t, expectMap(numbered(0, 3)...), store.snapshot())

	// A follower sees the open transaction once it commits, and its lag
	// is measured to the last stable offset.
	require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Follow}))
	pollUntil(t, r, func([]Completed) bool { p, _ := r.Progress(clTopic, 0); return p.End == 3 && p.Lag == 0 })
	require.NoError(t, txn.EndTransaction(context.Background(), kgo.TryCommit))
	pollUntil(t, r, func([]Completed) bool {
		p, _ := r.Progress(clTopic, 0)
		return p.Position == 7 && p.End == 7 && p.Lag == 0
	})
	require.Equal(t, expectMap(numbered(0, 6)...), store.snapshot())
}

// Restoring through open transactions, a restoration ends past the marker
// of every transaction open when its end was listed, holding what those
// that committed wrote and nothing of those that aborted.
func TestRestoreThroughOpenTransactions(t *testing.T) {
	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprintf("commit %t", commit), func(t *testing.T) {
			c := newCluster(t, 1, clTopic)
			prod := newProducer(t, c)
			produce(t, prod, clTopic, 0, numbered(0, 3)...)
			txn := newProducer(t, c, kgo.TransactionalID("open-txn"))
			require.NoError(t, txn.BeginTransaction())
			var track Offsets
			Send(context.Background(), txn, clTopic, 0, numbered(3, 6), &track)
			require.NoError(t, txn.Flush(context.Background()))
			require.NoError(t, track.Err())

			store := newFakeStore()
			r := newReader(t, c, func(cfg *ReaderConfig) { cfg.ReadCommitted, cfg.ThroughOpenTransactions = true, true })
			require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Restore}))
			// Reading up to the transaction, and no further, without
			// completing.
			done := pollUntil(t, r, func(done []Completed) bool {
				p, _ := r.Progress(clTopic, 0)
				return len(done) > 0 || p.Position == 3 && p.End == 6
			})
			require.Empty(t, done, "restoration completed below an open transaction")
			require.NoError(t, txn.EndTransaction(context.Background(), kgo.TransactionEndTry(commit)))
			done = pollUntil(t, r, completedFor(clTopic, 0))
			require.NoError(t, done[0].Err)
			require.Equal(t, int64(7), done[0].Position, "restoration ends past the transaction's marker")
			want := expectMap(numbered(0, 3)...)
			if commit {
				want = expectMap(numbered(0, 6)...)
			}
			require.Equal(t, want, store.snapshot())
		})
	}
}

func TestStoreWriteFailureDropsPartition(t *testing.T) {
	c := newCluster(t, 1, clTopic)
	prod := newProducer(t, c)
	produce(t, prod, clTopic, 0, numbered(0, 10)...)
	store := newFakeStore()
	boom := errors.New("disk full")
	store.failWith = boom
	r := newReader(t, c, nil)
	require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Follow}))
	done := pollUntil(t, r, completedFor(clTopic, 0))
	require.ErrorIs(t, done[0].Err, boom)
	require.Equal(t, Follow, done[0].Mode)
	_, ok := r.Progress(clTopic, 0)
	require.False(t, ok)
}

// fullDiskStore refuses its first refusals writes for a full disk, leaving
// the store unchanged, as a badger store does below its reserve.
type fullDiskStore struct {
	*fakeStore
	refusals atomic.Int32
}

func (s *fullDiskStore) Write(entries []statestore.Entry, position int64) error {
	if s.refusals.Add(-1) >= 0 {
		return &statestore.DiskFullError{Dir: "store", Free: 0, Reserve: 1}
	}
	return s.fakeStore.Write(entries, position)
}

// A store refusing writes for a full disk holds its restoration or its
// following up, without failing it, until space is freed.
func TestStoreFullDiskIsWaitedOut(t *testing.T) {
	for _, mode := range []Mode{Restore, Follow} {
		t.Run(mode.String(), func(t *testing.T) {
			c := newCluster(t, 1, clTopic)
			prod := newProducer(t, c)
			history := numbered(0, 10)
			produce(t, prod, clTopic, 0, history...)
			store := &fullDiskStore{fakeStore: newFakeStore()}
			store.refusals.Store(3)
			r := newReader(t, c, nil)
			require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: mode}))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for {
				done, err := r.Poll(ctx)
				require.NoError(t, err)
				for _, d := range done {
					require.NoError(t, d.Err, "the partition failed on a full disk")
				}
				if pos, _ := store.Position(); pos == int64(len(history)) {
					break
				}
			}
			require.Equal(t, expectMap(history...), store.snapshot())
			require.Negative(t, store.refusals.Load(), "the writes were refused first")
		})
	}
}

func TestRegisterErrors(t *testing.T) {
	c := newCluster(t, 1, clTopic)
	r := newReader(t, c, nil)
	store := newFakeStore()
	require.Error(t, r.Register(Partition{Topic: clTopic, Partition: 0}), "nil store")
	require.Error(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Mode(9)}))
	require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Follow}))
	require.ErrorIs(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Restore}), ErrAlreadyRegistered)

	p, ok := r.Progress(clTopic, 0)
	require.True(t, ok)
	require.Equal(t, Progress{Mode: Follow, Position: statestore.NoPosition, End: -1, Lag: -1, Rebuilding: true, RebuildTarget: -1}, p)

	require.NoError(t, r.Close())
	require.NoError(t, r.Close())
	require.ErrorIs(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store}), ErrClosed)
	_, err := r.Poll(context.Background())
	require.ErrorIs(t, err, ErrClosed)

	_, err = NewReader(ReaderConfig{})
	require.Error(t, err)
	_, err = NewReader(ReaderConfig{Seeds: c.ListenAddrs(), MaxBatchRecords: -1})
	require.Error(t, err)
}

func TestCloseInterruptsPollAndLeaksNothing(t *testing.T) {
	c := newCluster(t, 1, clTopic)
	before := runtime.NumGoroutine()
	r, err := NewReader(ReaderConfig{Seeds: c.ListenAddrs()})
	require.NoError(t, err)
	require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: newFakeStore(), Mode: Follow}))

	errc := make(chan error, 1)
	go func() {
		var err error
		for err == nil {
			_, err = r.Poll(context.Background())
		}
		errc <- err
	}()
	// Let the poll loop reach a blocking fetch before closing.
	eventually(t, func() bool { p, _ := r.Progress(clTopic, 0); return p.End == 0 }, "listed")
	require.NoError(t, r.Close())
	select {
	case err := <-errc:
		require.ErrorIs(t, err, ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("Poll did not return after Close")
	}
	// Checked from this goroutine: require.Eventually runs its condition
	// on goroutines of its own, which would be counted.
	deadline := time.Now().Add(10 * time.Second)
	for n := runtime.NumGoroutine(); n > before; n = runtime.NumGoroutine() {
		require.True(t, time.Now().Before(deadline), "goroutines leaked: %d > %d", n, before)
		time.Sleep(time.Millisecond)
	}
}

func TestProgressIsSafeDuringPoll(t *testing.T) {
	c := newCluster(t, 3, clTopic)
	prod := newProducer(t, c)
	r := newReader(t, c, func(cfg *ReaderConfig) { cfg.MaxBatchRecords = 50 })
	for p := range int32(3) {
		produce(t, prod, clTopic, p, numbered(0, 500)...)
		require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: p, Store: newFakeStore(), Mode: Follow, Task: fmt.Sprint("0_", p)}))
	}
	runPolling(t, r)
	eventually(t, func() bool {
		total := int64(0)
		for p := range int32(3) {
			pr, ok := r.Progress(clTopic, p)
			require.True(t, ok)
			require.GreaterOrEqual(t, pr.Lag, int64(-1))
			total += pr.Restored
		}
		return total == 1500
	}, "all applied")
}

// TestApplyGuards drives the apply step with hand-made fetches to cover
// what a broker rarely produces on cue: records taken before a partition's
// consumption (re)started, duplicates, and fetch errors.
func TestApplyGuards(t *testing.T) {
	c := newCluster(t, 2, clTopic)
	r := newReader(t, c, nil)
	store := newFakeStore()
	require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Follow}))
	other := newFakeStore()
	require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 1, Store: other, Mode: Follow}))
	// Consumption starts once offsets are listed.
	done, retry := r.listPending(context.Background())
	require.Empty(t, done)
	require.False(t, retry)
	listed, _ := r.Progress(clTopic, 0)
	require.False(t, listed.EndConfirmed.IsZero(), "a listing confirms the end")

	fetch := func(partition int32, hwm int64, offsets ...int64) kgo.Fetches {
		var recs []*kgo.Record
		for _, o := range offsets {
			recs = append(recs, &kgo.Record{Topic: clTopic, Partition: partition, Offset: o,
				Key: fmt.Appendf(nil, "k%d", o), Value: []byte("v")})
		}
		return kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: clTopic, Partitions: []kgo.FetchPartition{
			{Partition: partition, HighWatermark: hwm, LastStableOffset: hwm, Records: recs},
		}}}}}
	}
	epoch := func() uint64 { r.mu.Lock(); defer r.mu.Unlock(); return r.epoch }
	// apply leaves its writes to a goroutine, as a round; Poll waits for
	// a round before the next.
	apply := func(fetches kgo.Fetches, epoch uint64) []Completed {
		return append(r.apply(fetches, epoch), r.waitRound()...)
	}

	// Taken before consumption started: dropped, and re-sought.
	before := epoch()
	require.Empty(t, apply(fetch(0, 3, 0, 1, 2), before-2))
	require.Zero(t, store.len())
	require.Greater(t, epoch(), before, "partition re-sought")

	require.Empty(t, apply(fetch(0, 3, 0, 1, 2), epoch()))
	require.Equal(t, 3, store.len())
	// Overlapping records are applied once.
	require.Empty(t, apply(fetch(0, 9, 1, 2, 3, 4), epoch()))
	p, _ := r.Progress(clTopic, 0)
	require.Equal(t, listed.EndConfirmed, p.EndConfirmed, "a fetch raises the end but confirms nothing: when the broker answered it is unknown")
	p.EndConfirmed = time.Time{}
	// Listed when the changelog was empty: consistent from the start.
	require.Equal(t, Progress{Mode: Follow, Restored: 5, Position: 5, End: 9, Lag: 4, RebuildTarget: 0}, p)
	writes, _ := store.stats()
	require.Equal(t, 2, writes, "one write per partition per round")

	// Data loss: the store holds records the log no longer has. It is
	// reset, and nothing taken for it in the same round is applied, not
	// even from a fetch before the one reporting the loss.
	loss := append(fetch(0, 9, 5), fetch(0, 9, 6)...)
	loss[1].Topics[0].Partitions[0].Err = &kgo.ErrDataLoss{Topic: clTopic, Partition: 0, ConsumedTo: 7, ResetTo: 5}
	require.Empty(t, apply(loss, epoch()))
	require.Zero(t, store.len())
	require.Equal(t, 1, store.resetCount())
	p, ok := r.Progress(clTopic, 0)
	require.True(t, ok, "a reset partition stays registered")
	p.EndConfirmed = time.Time{}
	require.Equal(t, Progress{Mode: Follow, Restored: 5, Position: statestore.NoPosition, End: -1, Lag: -1, Rebuilding: true, RebuildTarget: -1}, p)
	r.mu.Lock()
	require.True(t, r.parts[TopicPartition{clTopic, 0}].needOffs, "listed again before reading from the start")
	r.mu.Unlock()
	// Records fetched before the reset went into effect are not applied.
	require.Empty(t, apply(fetch(0, 9, 7, 8), epoch()))
	require.Zero(t, store.len())
	require.EqualValues(t, 1, r.StoreResets())

	// Any other fetch error drops the partition.
	bad := fetch(1, 9, 0)
	bad[0].Topics[0].Partitions[0].Err = kerr.UnknownTopicOrPartition
	done = apply(bad, epoch())
	require.Len(t, done, 1)
	require.ErrorIs(t, done[0].Err, kerr.UnknownTopicOrPartition)
	require.Zero(t, other.len())
	_, ok = r.Progress(clTopic, 1)
	require.False(t, ok)

	// Records for unregistered partitions go nowhere.
	require.True(t, r.Unregister(clTopic, 0))
	require.Empty(t, apply(fetch(0, 20, 6, 7), epoch()))
	require.Zero(t, store.len())
}

// A new badger store restored by a Reader, whose writes pass no filter of
// new keys, finds every restored key afterwards, and still finds nothing
// for a key it was never given.
func TestRestoredBadgerStoreFindsEveryKey(t *testing.T) {
	history := numbered(0, 2500)
	c := newCluster(t, 1, clTopic)
	produce(t, newProducer(t, c), clTopic, 0, history...)
	store, err := statestore.OpenBadger(t.TempDir(), statestore.DefaultBadgerOptions())
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	r := newReader(t, c, func(cfg *ReaderConfig) { cfg.MaxBatchRecords = 700 })
	require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Restore, Task: "0_0"}))
	done := pollUntil(t, r, completedFor(clTopic, 0))
	require.NoError(t, done[0].Err)
	for _, e := range history {
		v, found, err := store.Get(e.Key)
		require.NoError(t, err)
		require.True(t, found, "restored key %s", e.Key)
		require.Equal(t, string(e.Value), string(v))
	}
	_, found, err := store.Get([]byte("never-written"))
	require.NoError(t, err)
	require.False(t, found)
}

package changelog

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/statestore"
)

// staleStore returns a store holding keys of some other history at
// position pos.
func staleStore(t *testing.T, pos int64) *fakeStore {
	t.Helper()
	s := newFakeStore()
	require.NoError(t, s.Write([]statestore.Entry{kv("stale-a", "old"), kv("k0001", "old")}, pos))
	return s
}

// readToEnd registers store in mode and drives the Reader until the store
// reflects the partition up to end: a Restore partition completes, a
// Follow partition reaches end. It returns the completion (zero for Follow).
func readToEnd(t *testing.T, r *Reader, store *fakeStore, mode Mode, end int64) Completed {
	t.Helper()
	require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: mode, Task: "1_0", StoreName: "store"}))
	if mode == Restore {
		done := pollUntil(t, r, completedFor(clTopic, 0))
		require.Len(t, done, 1)
		return done[0]
	}
	pollUntil(t, r, func([]Completed) bool {
		p, ok := r.Progress(clTopic, 0)
		require.True(t, ok, "a followed partition stays registered")
		return max(p.Position, 0) == end && p.End == end && p.Lag == 0
	})
	return Completed{}
}

// A store whose position is past the changelog's end holds another history
// (a topic deleted and created again, a broker reset): it is emptied and
// read from the start, by a restoration and by a follower alike.
func TestPositionPastEndResetsStore(t *testing.T) {
	history := append(numbered(0, 20), del("k0003"))
	for _, mode := range []Mode{Restore, Follow} {
		for _, tc := range []struct {
			name    string
			history []statestore.Entry
		}{
			{"shorter changelog", history},
			{"empty changelog", nil},
		} {
			t.Run(mode.String()+"/"+tc.name, func(t *testing.T) {
				c := newCluster(t, 1, clTopic)
				if len(tc.history) > 0 {
					produce(t, newProducer(t, c), clTopic, 0, tc.history...)
				}
				end := int64(len(tc.history))
				store := staleStore(t, end+50)
				r := newReader(t, c, nil)
				got := readToEnd(t, r, store, mode, end)

				require.Equal(t, expectMap(tc.history...), store.snapshot(), "nothing of the old history is left")
				require.Equal(t, 1, store.resetCount())
				require.EqualValues(t, 1, r.StoreResets())
				pos, _ := store.Position()
				if end == 0 {
					require.Equal(t, statestore.NoPosition, pos, "an empty changelog leaves the store at no position")
				} else {
					require.Equal(t, end, pos)
				}
				if mode == Restore {
					require.NoError(t, got.Err)
					require.Equal(t, end, got.Restored)
				}
			})
		}
	}
}

// A store whose position is below the changelog's log start missed records
// that were deleted (DeleteRecords, retention), tombstones among them: it is
// emptied and read from the log start. A position at the log start, or a
// store that never applied anything, is read on as it is.
func TestPositionBelowLogStartResetsStore(t *testing.T) {
	// Offsets 0-9 put k0000-k0009; 10-14 delete k0000-k0004; 15-24 put
	// k0010-k0019. Records below 15 are then deleted.
	history := numbered(0, 10)
	for _, k := range []string{"k0000", "k0001", "k0002", "k0003", "k0004"} {
		history = append(history, del(k))
	}
	history = append(history, numbered(10, 20)...)
	const logStart, end = 15, 25

	for _, mode := range []Mode{Restore, Follow} {
		for _, tc := range []struct {
			name      string
			preload   int // records of history in the store; -1 for none
			wantReset bool
			want      map[string]string
		}{
			{"position below the start", 10, true, expectMap(history[logStart:]...)},
			{"position at the start", logStart, false, expectMap(history...)},
			{"no position", -1, false, expectMap(history[logStart:]...)},
		} {
			t.Run(mode.String()+"/"+tc.name, func(t *testing.T) {
				c := newCluster(t, 1, clTopic)
				prod := newProducer(t, c)
				produce(t, prod, clTopic, 0, history...)
				deleteRecords(t, prod, logStart)

				store := newFakeStore()
				if tc.preload >= 0 {
					require.NoError(t, store.Write(history[:tc.preload], int64(tc.preload)))
				}
				r := newReader(t, c, nil)
				got := readToEnd(t, r, store, mode, end)

				require.Equal(t, tc.want, store.snapshot())
				pos, _ := store.Position()
				require.Equal(t, int64(end), pos)
				wantResets := 0
				if tc.wantReset {
					wantResets = 1
				}
				require.Equal(t, wantResets, store.resetCount())
				require.EqualValues(t, wantResets, r.StoreResets())
				if mode == Restore {
					require.NoError(t, got.Err)
					require.Equal(t, int64(end-max(logStart, tc.preload)), got.Restored)
				}
			})
		}
	}
}

// deleteRecords moves the log start of clTopic[0] to offset.
func deleteRecords(t *testing.T, cl *kgo.Client, offset int64) {
	t.Helper()
	var os kadm.Offsets
	os.AddOffset(clTopic, 0, offset, -1)
	resp, err := kadm.NewClient(cl).DeleteRecords(context.Background(), os)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
}

// Under read committed the end listed is the last stable offset, which an
// open transaction of another producer holds back below a position that is
// fine: such a store is not reset.
func TestReadCommittedPositionPastOpenTransactionIsKept(t *testing.T) {
	c := newCluster(t, 1, clTopic)
	ctx := context.Background()
	// Offsets 0-1: a transaction left open; 2-3 and the marker at 4: a
	// transaction committed, after which a store stands at 5.
	open := newProducer(t, c, kgo.TransactionalID("left-open"))
	require.NoError(t, open.BeginTransaction())
	var track Offsets
	Send(ctx, open, clTopic, 0, numbered(0, 2), &track)
	require.NoError(t, open.Flush(ctx))
	require.NoError(t, track.Err())
	committed := newProducer(t, c, kgo.TransactionalID("committed"))
	require.NoError(t, committed.BeginTransaction())
	Send(ctx, committed, clTopic, 0, numbered(2, 4), &track)
	require.NoError(t, committed.Flush(ctx))
	require.NoError(t, track.Err())
	require.NoError(t, committed.EndTransaction(ctx, kgo.TryCommit))

	store := newFakeStore()
	require.NoError(t, store.Write(numbered(2, 4), 5))
	r := newReader(t, c, func(cfg *ReaderConfig) { cfg.ReadCommitted = true })
	got := readToEnd(t, r, store, Restore, 0)
	require.NoError(t, got.Err)
	require.Zero(t, got.Restored)
	require.Equal(t, int64(5), got.Position)
	require.Zero(t, store.resetCount())
	require.Equal(t, expectMap(numbered(2, 4)...), store.snapshot())
}

// Under read committed a position past the high watermark may be a commit
// whose marker the broker has not written yet, so the store is reset only if
// a second listing, a retry backoff later, still finds it past the end.
func TestReadCommittedPositionPastEndIsListedTwice(t *testing.T) {
	for _, tc := range []struct {
		name      string
		catchUp   bool // the log reaches the position between the listings
		wantReset bool
	}{
		{"the log catches up", true, false},
		{"the log stays behind", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 1, clTopic)
			prod := newProducer(t, c)
			produce(t, prod, clTopic, 0, numbered(0, 5)...)
			store := newFakeStore()
			require.NoError(t, store.Write(numbered(0, 6), 6))
			r := newReader(t, c, func(cfg *ReaderConfig) { cfg.ReadCommitted = true; cfg.RetryBackoff = 100 * time.Millisecond })
			require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Restore}))

			done, retry := r.listPending(context.Background())
			require.Empty(t, done)
			require.True(t, retry, "listed again later")
			require.Zero(t, store.resetCount(), "not reset on the first listing")
			if tc.catchUp {
				produce(t, prod, clTopic, 0, numbered(5, 6)...)
			}
			all := pollUntil(t, r, completedFor(clTopic, 0))
			require.NoError(t, all[0].Err)
			if tc.wantReset {
				require.Equal(t, 1, store.resetCount())
				require.Equal(t, int64(5), all[0].Position)
				require.Equal(t, expectMap(numbered(0, 5)...), store.snapshot())
			} else {
				require.Zero(t, store.resetCount())
				require.Equal(t, int64(6), all[0].Position)
				require.Equal(t, expectMap(numbered(0, 6)...), store.snapshot())
			}
		})
	}
}

// When the log moves away under a partition being read, the fetch reports
// it (out of range, or data loss once the client validated its epoch): the
// store is reset and the log read again from its start.
func TestFetchLossResetsStoreAndRereads(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"offset out of range", kerr.OffsetOutOfRange},
		{"data loss", &kgo.ErrDataLoss{Topic: clTopic, Partition: 0, ConsumedTo: 12, ResetTo: 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 1, clTopic)
			produce(t, newProducer(t, c), clTopic, 0, numbered(0, 20)...)
			store := staleStore(t, 10)
			r := newReader(t, c, nil)
			require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Follow}))
			_, _ = r.listPending(context.Background())

			r.mu.Lock()
			epoch := r.epoch
			r.mu.Unlock()
			require.Empty(t, r.apply(kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: clTopic, Partitions: []kgo.FetchPartition{
				{Partition: 0, Err: tc.err, HighWatermark: 20, LogStartOffset: 0},
			}}}}}, epoch))
			require.Equal(t, 1, store.resetCount())
			require.Empty(t, store.snapshot())

			pollUntil(t, r, func([]Completed) bool { p, _ := r.Progress(clTopic, 0); return p.Position == 20 })
			require.Equal(t, expectMap(numbered(0, 20)...), store.snapshot())
			require.Equal(t, 1, store.resetCount())
		})
	}
}

// A store that cannot be reset is dropped with the error, like a store that
// cannot be written.
func TestResetFailureDropsPartition(t *testing.T) {
	c := newCluster(t, 1, clTopic)
	produce(t, newProducer(t, c), clTopic, 0, numbered(0, 5)...)
	store := staleStore(t, 50)
	boom := errors.New("read-only file system")
	store.resetErr = boom
	r := newReader(t, c, nil)
	require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Restore}))
	done := pollUntil(t, r, completedFor(clTopic, 0))
	require.ErrorIs(t, done[0].Err, boom)
	_, ok := r.Progress(clTopic, 0)
	require.False(t, ok)
	require.Zero(t, r.StoreResets())
}

// A partition registered while Poll is busy listing others, before it has a
// wait that Register could interrupt, is listed in the next round rather
// than left waiting for records that may never come: here neither
// partition has any. The registration is made from inside a store reset,
// which runs in that window.
func TestRegisterDuringListingIsListedPromptly(t *testing.T) {
	const other = "app-other-changelog"
	c := newCluster(t, 1, clTopic, other)
	r := newReader(t, c, nil)
	late := newFakeStore()
	registered := make(chan error, 1)
	store := staleStore(t, 10)
	store.onReset = func() {
		registered <- r.Register(Partition{Topic: other, Partition: 0, Store: late, Mode: Follow})
	}
	require.NoError(t, r.Register(Partition{Topic: clTopic, Partition: 0, Store: store, Mode: Follow}))
	runPolling(t, r)
	require.NoError(t, <-registered)
	eventually(t, func() bool { p, ok := r.Progress(other, 0); return ok && p.End == 0 }, "the late partition listed")
}

package iq

import (
	"context"
	goruntime "runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// Key watches of one key share a subscription: each reads every change
// while it keeps within its buffer; one further behind coalesces to the
// key's latest change or ends as too slow, which holds back neither the
// others nor the changes appended later.
func TestKeyWatchesShareOneSubscription(t *testing.T) {
	var h Hub
	r := &fakeReplica{info: ReplicaInfo{Store: "s", Role: RoleActive, Position: 100}}
	pk := partKey{"s", 0}
	reader := newFeed(pk, []byte("a"), nil, WatchOptions{Buffer: 2})
	coalescing := newFeed(pk, []byte("a"), nil, WatchOptions{Buffer: 2, Coalesce: true})
	stalled := newFeed(pk, []byte("a"), nil, WatchOptions{Buffer: 2})
	for _, f := range []*feed{reader, coalescing, stalled} {
		h.subscribe(f, r)
		defer h.unsubscribe(f)
	}
	require.Len(t, h.parts[pk].keys, 1)
	publish := func(from, n int) {
		for i := range n {
			h.deliver([]published{{pk, []Change{{Key: []byte("a"), Position: int64(from + i)}, {Key: []byte("b"), Position: int64(from + i + 100)}}}})
		}
	}
	publish(10, 2)
	require.Equal(t, []string{"a@10", "a@11"}, feedKeys(reader))
	<-reader.notify
	publish(12, 1)
	select {
	case <-reader.notify:
	default:
		t.Fatal("a reader with a change to take is poked")
	}
	require.Equal(t, []string{"a@12"}, feedKeys(reader))

	_, skipped, slow := takeAll(coalescing)
	require.True(t, skipped, "three behind a buffer of two")
	require.False(t, slow)
	publish(13, 1)
	updates, skipped, _ := takeAll(coalescing)
	require.False(t, skipped)
	require.Len(t, updates, 1)
	require.Equal(t, int64(13), updates[0].Position)

	_, _, slow = takeAll(stalled)
	require.True(t, slow)
	_, _, slow = takeAll(stalled)
	require.True(t, slow, "a watch too slow stays so")
	require.Equal(t, []string{"a@13"}, feedKeys(reader))

	// The log keeps only what the watches still read, trimmed to it
	// whenever it reaches trimAt changes.
	publish(14, 50)
	require.Equal(t, []string{"a@63"}, feedKeys(coalescing), "coalesced to the latest")
	s := h.parts[pk].keys["a"]
	require.Less(t, len(s.log)-s.head, trimAt)
	s.mu.Lock()
	s.trim()
	s.mu.Unlock()
	require.LessOrEqual(t, len(s.log)-s.head, 2)
}

// The hub makes each change of a key the update its watches deliver once:
// the watches of the key take the same one, which describes the replica
// as it was when the change was published.
func TestKeyWatchesTakeOneUpdate(t *testing.T) {
	var h Hub
	r := &fakeReplica{info: ReplicaInfo{Store: "s", Partition: 2, Role: RoleStandby, Position: 101, Lag: 3}}
	pk := partKey{"s", 2}
	a := newFeed(pk, []byte("k"), nil, WatchOptions{})
	b := newFeed(pk, []byte("k"), nil, WatchOptions{})
	for _, f := range []*feed{a, b} {
		f.host = "h:1"
		h.subscribe(f, r)
		defer h.unsubscribe(f)
	}
	h.deliver([]published{{pk, []Change{{Key: []byte("k"), Value: []byte("v"), Timestamp: 7, Position: 100}}}})
	r.set(func(i *ReplicaInfo) { i.Lag = 9 })
	fromA, _, _, _ := a.takeUpdates(nil)
	fromB, _, _, _ := b.takeUpdates(nil)
	require.Len(t, fromA, 1)
	require.Len(t, fromB, 1)
	require.Same(t, fromA[0], fromB[0], "one update for both watches")
	u := fromA[0]
	require.Equal(t, "v", string(u.Value))
	require.Equal(t, int64(7), u.Timestamp)
	require.Equal(t, int64(100), u.Position)
	require.Equal(t, "h:1", u.Provenance.Host)
	require.Equal(t, int32(2), u.Provenance.Partition)
	require.Equal(t, RoleStandby, u.Provenance.Role)
	require.Equal(t, int64(3), u.Provenance.Lag, "the replica as it was at the change")
}

// A Next waiting for a change returns when its context ends, and a later
// Next under another context waits for, and gets, the next change.
func TestWatchNextEndsWithItsContext(t *testing.T) {
	fb := &watchingBackend{fakeBackend: newFakeBackend("h", map[string]int32{"s": 1})}
	fb.add("s", 0, RoleActive).set(func(i *ReplicaInfo) { i.Position, i.End = 100, 100 })
	w, err := NewQuerier(fb).WatchBytes(context.Background(), "s", []byte("k"), WatchOptions{From: FromNow})
	require.NoError(t, err)
	defer w.Close()

	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() {
		_, err := w.Next(ctx)
		ended <- err
	}()
	cancel()
	select {
	case err := <-ended:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("Next did not return when its context was cancelled")
	}

	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	got := make(chan Update, 1)
	go func() {
		u, err := w.Next(ctx2)
		if err == nil {
			got <- u
		}
	}()
	fb.hub.Publish("s", 0, []Change{{Key: []byte("k"), Value: []byte("v"), Position: 100}})
	select {
	case u := <-got:
		require.Equal(t, int64(100), u.Position)
	case <-ctx2.Done():
		t.Fatal("no update after a cancelled Next")
	}
}

// A watch whose replica fails while a change waits for its reader
// delivers the change, then ends at the next Next, with nothing else to
// wake it.
func TestWatchEndsAfterTheChangesTakenWithItsFailure(t *testing.T) {
	fb := &watchingBackend{fakeBackend: newFakeBackend("h", map[string]int32{"s": 1})}
	fb.add("s", 0, RoleActive).set(func(i *ReplicaInfo) { i.Position, i.End = 100, 100 })
	w, err := NewQuerier(fb).WatchBytes(context.Background(), "s", []byte("k"), WatchOptions{From: FromNow})
	require.NoError(t, err)
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	fb.hub.deliver([]published{{partKey{"s", 0}, []Change{{Key: []byte("k"), Value: []byte("v"), Position: 100}}}})
	u, err := w.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(100), u.Position)

	fb.hub.deliver([]published{{partKey{"s", 0}, []Change{{Key: []byte("k"), Value: []byte("w"), Position: 101}}}})
	w.f.failWith(ErrNotHostedHere)
	u, err = w.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(101), u.Position)
	// Under a context that never ends, so that only the failure can
	// end the wait.
	ends := make(chan error, 1)
	go func() {
		_, err := w.Next(context.Background())
		ends <- err
	}()
	select {
	case err = <-ends:
	case <-ctx.Done():
		t.Fatal("Next waits for a poke already spent")
	}
	var ended *WatchEndedError
	require.ErrorAs(t, err, &ended)
	require.ErrorIs(t, err, ErrNotHostedHere)
	require.Equal(t, int64(101), ended.Resume)
}

// newFeed makes a feed standing alone, for the hub's tests.
func newFeed(pk partKey, key []byte, rng *KeyRange, opts WatchOptions) *feed {
	f := new(feed)
	f.init(pk, key, rng, opts)
	return f
}

// The fields a woken reader touches, its watch's and its feed's, fill the
// first two 64-byte lines of the watch, and the watch's size is one the
// allocator hands out whole, without a header, at a multiple of 64 bytes
// from a page: a reader's wake then costs two misses on its own state.
// A field added to Watch or feed shows here, to be placed, and the watch
// padded to the next such size if need be.
func TestWatchHotFieldsFillTwoLines(t *testing.T) {
	var w Watch
	hotEnd := unsafe.Offsetof(w.f) + unsafe.Offsetof(w.f.stopped) + unsafe.Sizeof(w.f.stopped)
	require.LessOrEqual(t, hotEnd, uintptr(128), "the hot fields end within two lines")
	require.Contains(t, []uintptr{256, 320, 384, 448, 512}, unsafe.Sizeof(w), "a watch's size is a line-aligned allocation class")
}

// A round that wakes many readers lets them run while it goes on waking
// the others: with one processor, readers have taken their changes
// before the round is over.
func TestHubRoundLetsWokenReadersRun(t *testing.T) {
	defer goruntime.GOMAXPROCS(goruntime.GOMAXPROCS(1))
	const keys = 4 * readersPerYield
	var h Hub
	r := &fakeReplica{info: ReplicaInfo{Store: "s", Role: RoleActive, Position: 1 << 20}}
	pk := partKey{"s", 0}
	var took atomic.Int64
	var readers sync.WaitGroup
	changes := make([]Change, keys)
	for i := range keys {
		key := []byte("k" + strconv.Itoa(i))
		changes[i] = Change{Key: key, Position: int64(i)}
		f := newFeed(pk, key, nil, WatchOptions{})
		h.subscribe(f, r)
		defer h.unsubscribe(f)
		readers.Go(func() {
			<-f.notify
			updates, _, _, _ := f.takeUpdates(nil)
			took.Add(int64(len(updates)))
		})
	}
	// Every reader is parked on its feed before the round.
	for range 100 {
		goruntime.Gosched()
	}
	h.deliver([]published{{pk, changes}})
	ranDuring := took.Load()
	readers.Wait()
	require.Equal(t, int64(keys), took.Load())
	require.Positive(t, ranDuring, "no reader ran before the round woke the last")
}

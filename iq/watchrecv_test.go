package iq

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// receiveLog gathers what a receiving watch's function is handed.
type receiveLog struct {
	mu      sync.Mutex
	updates []Update
	errs    []error
}

func (l *receiveLog) fn(u Update, err error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.errs = append(l.errs, err)
	} else {
		l.updates = append(l.updates, u)
	}
	return true
}

func (l *receiveLog) positions() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ps []int64
	for _, u := range l.updates {
		ps = append(ps, u.Position)
	}
	return ps
}

func (l *receiveLog) errors() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// within fails t unless cond holds before a deadline.
func within(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(time.Millisecond)
	}
}

// newWatchingQuerier is a querier of store "s", one partition, whose
// active replica stands at position 100.
func newWatchingQuerier() (*Querier, *watchingBackend) {
	fb := &watchingBackend{fakeBackend: newFakeBackend("h", map[string]int32{"s": 1})}
	fb.add("s", 0, RoleActive).set(func(i *ReplicaInfo) { i.Position, i.End = 100, 100 })
	return NewQuerier(fb), fb
}

// The receiving watches of a key get every change in order, once, as a
// reader with Next does, the current value first when asked for; they
// share one delivery goroutine, which the hub pokes instead of each.
func TestWatchReceiveDeliversInOrder(t *testing.T) {
	q, fb := newWatchingQuerier()
	ctx := context.Background()
	reader, err := q.WatchBytes(ctx, "s", []byte("k"), WatchOptions{From: FromNow})
	require.NoError(t, err)
	defer reader.Close()
	logs := make([]*receiveLog, 3)
	for i := range logs {
		w, err := q.WatchBytes(ctx, "s", []byte("k"), WatchOptions{From: FromNow, Current: i == 0})
		require.NoError(t, err)
		defer w.Close()
		logs[i] = new(receiveLog)
		w.Receive(logs[i].fn)
	}
	s := fb.hub.parts[partKey{"s", 0}].keys["k"]
	s.mu.Lock()
	require.Len(t, s.readers, 1, "only the reader is poked on its own")
	require.Len(t, s.recv.watches, 3)
	s.mu.Unlock()

	var want []int64
	for round := range 20 {
		var batch []Change
		for i := range 3 {
			p := int64(100 + 3*round + i)
			batch = append(batch, Change{Key: []byte("k"), Value: []byte("v"), Position: p}, Change{Key: []byte("other"), Position: p})
			want = append(want, p)
		}
		fb.hub.deliver([]published{{partKey{"s", 0}, batch}})
	}
	for i, l := range logs {
		exp := want
		if i == 0 {
			exp = append([]int64{99}, want...)
		}
		within(t, "every change received", func() bool { return len(l.positions()) >= len(exp) })
		require.Equal(t, exp, l.positions())
	}
	require.True(t, logs[0].updates[0].Current)
	for range want {
		u, err := reader.Next(ctx)
		require.NoError(t, err)
		require.Greater(t, u.Position, int64(99))
	}
}

// A function that overruns ReceiveBudget holds back the other receiving
// watches of its key only until its watch is moved to a goroutine of its
// own; it then gets what it missed, in order, when it returns.
func TestWatchReceiveSlowFunctionMovedOff(t *testing.T) {
	q, fb := newWatchingQuerier()
	ctx := context.Background()
	stuck := make(chan struct{})
	var slowMu sync.Mutex
	var slowGot []int64
	slow, err := q.WatchBytes(ctx, "s", []byte("k"), WatchOptions{From: FromNow})
	require.NoError(t, err)
	defer slow.Close()
	slow.Receive(func(u Update, err error) bool {
		if u.Position == 100 {
			<-stuck
		}
		slowMu.Lock()
		slowGot = append(slowGot, u.Position)
		slowMu.Unlock()
		return true
	})
	var fast receiveLog
	w, err := q.WatchBytes(ctx, "s", []byte("k"), WatchOptions{From: FromNow})
	require.NoError(t, err)
	defer w.Close()
	w.Receive(fast.fn)

	publish := func(p int64) {
		fb.hub.deliver([]published{{partKey{"s", 0}, []Change{{Key: []byte("k"), Value: []byte("v"), Position: p}}}})
	}
	publish(100)
	within(t, "the other watch gets the change the slow one is stuck on", func() bool { return len(fast.positions()) == 1 })
	for p := int64(101); p < 105; p++ {
		publish(p)
	}
	within(t, "the other watch goes on while the slow function runs", func() bool { return len(fast.positions()) == 5 })
	s := fb.hub.parts[partKey{"s", 0}].keys["k"]
	s.mu.Lock()
	require.Len(t, s.recv.watches, 1, "the slow watch was moved off")
	require.Len(t, s.readers, 1, "and is poked on its own")
	s.mu.Unlock()

	close(stuck)
	publish(105)
	want := []int64{100, 101, 102, 103, 104, 105}
	within(t, "the slow watch gets every change once it returns", func() bool {
		slowMu.Lock()
		defer slowMu.Unlock()
		return len(slowGot) >= len(want)
	})
	slowMu.Lock()
	require.Equal(t, want, slowGot)
	slowMu.Unlock()
	within(t, "the other watch too", func() bool { return len(fast.positions()) == 6 })
	require.Equal(t, want, fast.positions())
}

// A receiving watch that ends hands its function the error, with the
// position to resume from, once; a closed one, or one whose function
// returned false, is handed nothing more and leaves the hub.
func TestWatchReceiveEnds(t *testing.T) {
	q, fb := newWatchingQuerier()
	ctx := context.Background()
	publish := func(p int64) {
		fb.hub.deliver([]published{{partKey{"s", 0}, []Change{{Key: []byte("k"), Value: []byte("v"), Position: p}}}})
	}
	var failing, closing receiveLog
	w1, err := q.WatchBytes(ctx, "s", []byte("k"), WatchOptions{From: FromNow})
	require.NoError(t, err)
	w1.Receive(failing.fn)
	w2, err := q.WatchBytes(ctx, "s", []byte("k"), WatchOptions{From: FromNow})
	require.NoError(t, err)
	w2.Receive(closing.fn)
	var once receiveLog
	w3, err := q.WatchBytes(ctx, "s", []byte("k"), WatchOptions{From: FromNow})
	require.NoError(t, err)
	w3.Receive(func(u Update, err error) bool {
		once.fn(u, err)
		return false
	})

	publish(100)
	within(t, "all three get the change", func() bool {
		return len(failing.positions()) == 1 && len(closing.positions()) == 1 && len(once.positions()) == 1
	})
	w2.Close()
	w1.f.failWith(ErrNotHostedHere)
	within(t, "the failed watch gets its end", func() bool { return len(failing.errors()) == 1 })
	var ended *WatchEndedError
	require.True(t, errors.As(failing.errors()[0], &ended))
	require.ErrorIs(t, ended, ErrNotHostedHere)
	require.Equal(t, int64(100), ended.Resume)
	within(t, "every watch left the hub", func() bool { return !fb.hub.HasWatchers() })

	// A watch that joins now receives on the same goroutine, after the
	// others would have: once it has 101, they would have had it too.
	var later receiveLog
	w4, err := q.WatchBytes(ctx, "s", []byte("k"), WatchOptions{From: FromNow})
	require.NoError(t, err)
	defer w4.Close()
	w4.Receive(later.fn)
	publish(101)
	within(t, "a later watch gets the next change", func() bool { return len(later.positions()) == 1 })
	require.Equal(t, []int64{100}, failing.positions())
	require.Len(t, failing.errors(), 1, "the end is handed over once")
	require.Equal(t, []int64{100}, closing.positions())
	require.Empty(t, closing.errors())
	require.Equal(t, []int64{100}, once.positions())
}

// A range watch receives on a goroutine of its own, with what a reader
// with Next would get.
func TestWatchRangeReceives(t *testing.T) {
	q, fb := newWatchingQuerier()
	fb.setMeta(Metadata{Partitions: map[string]int32{"s": 1}}, nil)
	w, err := q.WatchRangeBytes(context.Background(), "s", 0, KeyRange{From: []byte("b"), To: []byte("d")}, WatchOptions{From: FromNow})
	require.NoError(t, err)
	defer w.Close()
	var l receiveLog
	w.Receive(l.fn)
	fb.hub.deliver([]published{{partKey{"s", 0}, []Change{
		{Key: []byte("a"), Position: 100}, {Key: []byte("b"), Position: 101}, {Key: []byte("c"), Position: 102}, {Key: []byte("d"), Position: 103},
	}}})
	within(t, "the range's changes received", func() bool { return len(l.positions()) == 2 })
	require.Equal(t, []int64{101, 102}, l.positions())
	w.Close()
	fb.hub.deliver([]published{{partKey{"s", 0}, []Change{{Key: []byte("b"), Position: 104}}}})
	require.Equal(t, []int64{101, 102}, l.positions())
}

// A function whose calls each keep within ReceiveBudget but together hold
// a round up beyond it has its watch moved off as well.
func TestWatchReceiveManySlowCallsMovedOff(t *testing.T) {
	q, fb := newWatchingQuerier()
	ctx := context.Background()
	var slow receiveLog
	w, err := q.WatchBytes(ctx, "s", []byte("k"), WatchOptions{From: FromNow})
	require.NoError(t, err)
	defer w.Close()
	w.Receive(func(u Update, err error) bool {
		time.Sleep(ReceiveBudget / 2) // a function slow at its work
		return slow.fn(u, err)
	})
	var fast receiveLog
	w2, err := q.WatchBytes(ctx, "s", []byte("k"), WatchOptions{From: FromNow})
	require.NoError(t, err)
	defer w2.Close()
	w2.Receive(fast.fn)
	var batch []Change
	for p := range int64(40) {
		batch = append(batch, Change{Key: []byte("k"), Position: 100 + p})
	}
	fb.hub.deliver([]published{{partKey{"s", 0}, batch}})
	within(t, "the other watch gets the changes before the slow one", func() bool { return len(fast.positions()) == 40 })
	require.Less(t, len(slow.positions()), 40)
	within(t, "the slow one gets them all", func() bool { return len(slow.positions()) == 40 })
	require.Equal(t, fast.positions(), slow.positions())
}

// A watch closed before it receives is delivered nothing: it does not
// join its key's delivery goroutine.
func TestWatchReceiveAfterClose(t *testing.T) {
	q, fb := newWatchingQuerier()
	ctx := context.Background()
	reader, err := q.WatchBytes(ctx, "s", []byte("k"), WatchOptions{From: FromNow})
	require.NoError(t, err)
	defer reader.Close()
	w, err := q.WatchBytes(ctx, "s", []byte("k"), WatchOptions{From: FromNow})
	require.NoError(t, err)
	w.Close()
	w.Receive(func(Update, error) bool {
		t.Error("a closed watch's function was called")
		return true
	})
	s := fb.hub.parts[partKey{"s", 0}].keys["k"]
	s.mu.Lock()
	require.Nil(t, s.recv)
	s.mu.Unlock()
	fb.hub.deliver([]published{{partKey{"s", 0}, []Change{{Key: []byte("k"), Position: 100}}}})
	u, err := reader.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(100), u.Position)
}

// A function that closes its watch and then overruns ReceiveBudget leaves
// the hub poking nothing of it.
func TestWatchReceiveClosedWhileOverrunning(t *testing.T) {
	q, fb := newWatchingQuerier()
	ctx := context.Background()
	reader, err := q.WatchBytes(ctx, "s", []byte("k"), WatchOptions{From: FromNow})
	require.NoError(t, err)
	defer reader.Close()
	w, err := q.WatchBytes(ctx, "s", []byte("k"), WatchOptions{From: FromNow})
	require.NoError(t, err)
	release := make(chan struct{})
	returned := make(chan struct{})
	w.Receive(func(Update, error) bool {
		w.Close()
		<-release
		close(returned)
		return true
	})
	var other receiveLog
	w2, err := q.WatchBytes(ctx, "s", []byte("k"), WatchOptions{From: FromNow})
	require.NoError(t, err)
	defer w2.Close()
	w2.Receive(other.fn)
	fb.hub.deliver([]published{{partKey{"s", 0}, []Change{{Key: []byte("k"), Position: 100}}}})
	within(t, "the other watch gets the change once the closing one is moved off", func() bool { return len(other.positions()) == 1 })
	s := fb.hub.parts[partKey{"s", 0}].keys["k"]
	s.mu.Lock()
	require.Equal(t, []*feed{&reader.f}, s.readers, "the closed watch is poked no more")
	s.mu.Unlock()
	close(release)
	<-returned
}

package changelog

// ReaderConfig.Logger's handler is the caller's code, and the runtime
// calls Progress, Register and Unregister with its own locks held: a line
// written while the Reader's mu, or a partition's applyMu, is held would
// hold those callers up for as long as the handler blocks. Each case blocks
// the handler on one line and shows the locks free meanwhile.

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/statestore"
)

// blockingHandler blocks on the first record of its message until released
// (or a deadline passes, so that a broken run fails rather than hangs),
// after telling entered. Every other record passes.
type blockingHandler struct {
	msg      string
	entered  chan struct{}
	release  chan struct{}
	once     sync.Once
	released sync.Once
	// seen holds, once entered, the record the handler blocked on.
	seen atomic.Pointer[slog.Record]
}

func newBlockingHandler(msg string) *blockingHandler {
	return &blockingHandler{msg: msg, entered: make(chan struct{}), release: make(chan struct{})}
}

func (h *blockingHandler) let() { h.released.Do(func() { close(h.release) }) }

func (h *blockingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *blockingHandler) Handle(_ context.Context, rec slog.Record) error {
	if rec.Message != h.msg {
		return nil
	}
	first := false
	h.once.Do(func() {
		first = true
		h.seen.Store(&rec)
		close(h.entered)
	})
	if first {
		select {
		case <-h.release:
		case <-time.After(60 * time.Second):
		}
	}
	return nil
}

func (h *blockingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }

func (h *blockingHandler) WithGroup(string) slog.Handler { return h }

// requireLocksFree asserts that, while the handler blocks, the Reader's mu
// and the applyMu of tp's partition (if registered) can be taken, and that
// Progress returns. A lock may be busy for a moment with work of its own,
// so it is tried until a deadline.
func requireLocksFree(t *testing.T, r *Reader, tp TopicPartition) {
	t.Helper()
	require.Eventually(t, func() bool {
		if !r.mu.TryLock() {
			return false
		}
		st := r.parts[tp]
		r.mu.Unlock()
		if st != nil {
			if !st.applyMu.TryLock() {
				return false
			}
			st.applyMu.Unlock()
		}
		return true
	}, 5*time.Second, time.Millisecond, "a lock of the reader is held while the handler blocks")

	returned := make(chan struct{})
	go func() {
		defer close(returned)
		r.Progress(tp.Topic, tp.Partition)
	}()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("Progress did not return while the handler blocked")
	}
}

func TestReaderLogsWithLocksFree(t *testing.T) {
	history := numbered(0, 10)
	tests := []struct {
		name string
		msg  string
		mode Mode
		// preload, if set, is the store's position when registered.
		preload  int64
		topic    string // clTopic if empty
		failWith error
		readComm bool
		// refusals, if set, is how many writes the store refuses for a
		// full disk.
		refusals int32
	}{
		{name: "restore started", msg: "changelog restore started", mode: Restore},
		{name: "follow started", msg: "changelog follow started", mode: Follow},
		{name: "restore completed", msg: "changelog restore completed", mode: Restore},
		{name: "restore completed with nothing to read", msg: "changelog restore completed", mode: Restore, preload: int64(len(history))},
		{name: "reading failed", msg: "changelog reading failed", mode: Restore, failWith: errors.New("store broken")},
		{name: "store rebuilt", msg: "changelog store rebuilt: consistent from here on", mode: Follow},
		{name: "offset listing failed", msg: "changelog offset listing failed; will retry", mode: Restore, topic: "no-such-changelog"},
		{name: "store does not fit", msg: "changelog store does not fit its changelog; resetting the store and reading the changelog from its start",
			mode: Follow, preload: 100},
		{name: "position past the end", msg: "changelog store position is past the changelog end; listing again before resetting the store",
			mode: Follow, preload: 100, readComm: true},
		{name: "disk full", msg: "disk full: changelog records cannot enter their store; the write is retried until space is freed",
			mode: Follow, refusals: 3},
		{name: "disk space freed", msg: "disk space freed; changelog records stored", mode: Follow, refusals: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 1, clTopic)
			produce(t, newProducer(t, c), clTopic, 0, history...)
			store := newFakeStore()
			if tc.preload > 0 {
				require.NoError(t, store.Write(nil, tc.preload))
			}
			store.failWith = tc.failWith
			var registered statestore.Store = store
			if tc.refusals > 0 {
				full := &fullDiskStore{fakeStore: store}
				full.refusals.Store(tc.refusals)
				registered = full
			}
			topic := tc.topic
			if topic == "" {
				topic = clTopic
			}

			h := newBlockingHandler(tc.msg)
			r := newReader(t, c, func(cfg *ReaderConfig) {
				cfg.Logger = slog.New(h)
				cfg.ReadCommitted = tc.readComm
			})
			require.NoError(t, r.Register(Partition{Topic: topic, Partition: 0, Store: registered, Mode: tc.mode, Task: "0_0"}))
			runPolling(t, r)
			t.Cleanup(h.let) // before the polling stops, which waits for it

			select {
			case <-h.entered:
			case <-time.After(10 * time.Second):
				t.Fatalf("no %q logged", tc.msg)
			}
			requireLocksFree(t, r, TopicPartition{topic, 0})
			h.let()

			// The line reads as written where it was gathered: in this
			// package, when it was gathered rather than when written.
			rec := h.seen.Load()
			require.NotZero(t, rec.PC, "the line keeps its call site")
			fn := callerFunc(rec.PC)
			require.Contains(t, fn, "eddy/internal/changelog.", "the call site is %s", fn)
			require.NotContains(t, fn, "heldlog", "the call site is %s", fn)
		})
	}
}

// callerFunc names the function of a record's call site.
func callerFunc(pc uintptr) string {
	f, _ := runtime.CallersFrames([]uintptr{pc}).Next()
	return f.Function
}

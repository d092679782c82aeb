package runtime

// Config.Logger's handler is user code: a log line written while the
// thread's, the registry's or the State's lock is held would make every
// goroutine needing that lock wait for a handler that blocks. Each test
// blocks the handler on one line and shows the lock free meanwhile.

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/groupproto"
	"github.com/eddystreams/eddy/task"
)

// blockingHandler is a handler that, once armed with a message, blocks on
// the first record of that message until released (or a deadline passes,
// so that a broken run fails rather than hangs), after telling entered.
// Every other record passes.
type blockingHandler struct {
	on       atomic.Pointer[string]
	entered  chan struct{}
	release  chan struct{}
	once     sync.Once
	released sync.Once
}

func newBlockingHandler() *blockingHandler {
	return &blockingHandler{entered: make(chan struct{}), release: make(chan struct{})}
}

func (h *blockingHandler) arm(msg string) { h.on.Store(&msg) }

func (h *blockingHandler) let() { h.released.Do(func() { close(h.release) }) }

func (h *blockingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *blockingHandler) Handle(_ context.Context, rec slog.Record) error {
	if on := h.on.Load(); on == nil || *on != rec.Message {
		return nil
	}
	first := false
	h.once.Do(func() { first = true; close(h.entered) })
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

// waitEntered waits for the handler to block on its line.
func (h *blockingHandler) waitEntered(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-h.entered:
	case <-time.After(d):
		t.Fatalf("no %q logged within %s", *h.on.Load(), d)
	}
}

// requireFree asserts that mu can be taken while the handler blocks; it
// may be busy for a moment with work of its own, so it is tried until a
// deadline.
func requireFree(t *testing.T, mu *sync.Mutex, what string) {
	t.Helper()
	require.Eventually(t, func() bool {
		if mu.TryLock() {
			mu.Unlock()
			return true
		}
		return false
	}, 10*time.Second, 5*time.Millisecond, "%s held while the logger blocks", what)
}

// A cooperative revocation logs "revoking tasks" with the thread's lock
// released: App.Tasks and the thread's other events do not wait for the
// handler.
func TestRevokingTasksLogsWithoutTheThreadsLock(t *testing.T) {
	t.Parallel()
	b, _ := startBroker(t, "in")
	h := newBlockingHandler()
	defer h.let()
	h.arm("revoking tasks")
	start := func(logger *slog.Logger) *App {
		app, err := New(countTopology(t), Config{ApplicationID: "revlog", Brokers: b.Addrs(), StateDir: t.TempDir(),
			NumStreamThreads: 1, Logger: logger})
		require.NoError(t, err)
		require.NoError(t, app.Start(context.Background()))
		t.Cleanup(func() { app.Close(context.Background()) })
		return app
	}
	first := start(slog.New(h))
	waitFor(t, 30*time.Second, "the first instance running both tasks", func() bool {
		return first.State() == StateRunning && len(first.Tasks()) == 2
	})
	// A second instance takes one of the tasks: the first revokes it.
	second := start(slog.New(slog.DiscardHandler))
	h.waitEntered(t, 60*time.Second)
	requireFree(t, &first.threads[0].mu, "the thread's lock")
	h.let()
	waitFor(t, 60*time.Second, "both instances running one task each", func() bool {
		return first.State() == StateRunning && second.State() == StateRunning &&
			len(first.Tasks()) == 1 && len(second.Tasks()) == 1
	})
}

// An event the closed registry refuses (a thread's share arriving while
// the instance closes) is logged with the registry's lock released:
// queries and metrics do not wait for the handler.
func TestRegistryLogsWithoutItsLock(t *testing.T) {
	t.Parallel()
	b, _ := startBroker(t, "in")
	h := newBlockingHandler()
	defer h.let()
	app, err := New(countTopology(t), Config{ApplicationID: "reglog", Brokers: b.Addrs(), StateDir: t.TempDir(), Logger: slog.New(h)})
	require.NoError(t, err)
	require.NoError(t, app.prepare(context.Background()))
	app.releaseResources()
	sub, ok := app.storeSubTopology("counts")
	require.True(t, ok)

	h.arm("registry closed; event ignored")
	shared := make(chan struct{})
	go func() {
		defer close(shared)
		app.registry.setShare(0, 0, groupproto.AssignmentInfo{Active: []task.ID{{SubTopology: sub, Partition: 0}}})
	}()
	h.waitEntered(t, 10*time.Second)
	requireFree(t, &app.registry.mu, "the registry's lock")
	h.let()
	select {
	case <-shared:
	case <-time.After(10 * time.Second):
		t.Fatal("setShare did not return once the logger let go")
	}
}

// A move of the App's State is logged with stateMu released: State
// changes of other goroutines do not wait for the handler.
func TestStateMoveLogsWithoutTheStateLock(t *testing.T) {
	h := newBlockingHandler()
	defer h.let()
	app, err := New(countTopology(t), Config{ApplicationID: "statelog", Brokers: []string{"127.0.0.1:1"}, StateDir: t.TempDir(), Logger: slog.New(h)})
	require.NoError(t, err)
	h.arm("state")
	moved := make(chan struct{})
	go func() {
		defer close(moved)
		app.setState(StateRebalancing, StateCreated)
	}()
	h.waitEntered(t, 10*time.Second)
	requireFree(t, &app.stateMu, "stateMu")
	require.Equal(t, StateRebalancing, app.State(), "the move is made before it is logged")
	h.let()
	select {
	case <-moved:
	case <-time.After(10 * time.Second):
		t.Fatal("setState did not return once the logger let go")
	}
}

// A standby is opened and closed, and logged, with the registry's lock
// released.
func TestStandbyLinesLogWithoutTheRegistrysLock(t *testing.T) {
	t.Parallel()
	b, _ := startBroker(t, "in")
	start := func(logger *slog.Logger) *App {
		app, err := New(countTopology(t), Config{ApplicationID: "sblog", Brokers: b.Addrs(), StateDir: t.TempDir(),
			NumStreamThreads: 1, NumStandbys: 1, Logger: logger})
		require.NoError(t, err)
		require.NoError(t, app.Start(context.Background()))
		t.Cleanup(func() { app.Close(context.Background()) })
		return app
	}
	first := start(slog.New(slog.DiscardHandler))
	waitFor(t, 30*time.Second, "the first instance running both tasks", func() bool {
		return first.State() == StateRunning && len(first.Tasks()) == 2
	})

	opened := newBlockingHandler()
	defer opened.let()
	opened.arm("standby opened")
	closed := newBlockingHandler()
	defer closed.let()
	second := start(slog.New(fanOut{opened, closed}))
	opened.waitEntered(t, 60*time.Second)
	requireFree(t, &second.registry.mu, "the registry's lock")
	opened.let()
	waitFor(t, 60*time.Second, "the second instance running with a standby", func() bool {
		if second.State() != StateRunning {
			return false
		}
		_, standby, _ := second.registry.instanceShare()
		return len(standby) == 1
	})

	closed.arm("standby closed")
	done := make(chan struct{})
	go func() {
		defer close(done)
		second.Close(context.Background())
	}()
	closed.waitEntered(t, 60*time.Second)
	requireFree(t, &second.registry.mu, "the registry's lock")
	closed.let()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("Close did not return once the logger let go")
	}
}

// fanOut hands every record to each of its handlers in turn.
type fanOut []*blockingHandler

func (f fanOut) Enabled(context.Context, slog.Level) bool { return true }

func (f fanOut) Handle(ctx context.Context, rec slog.Record) error {
	for _, h := range f {
		_ = h.Handle(ctx, rec)
	}
	return nil
}

func (f fanOut) WithAttrs([]slog.Attr) slog.Handler { return f }

func (f fanOut) WithGroup(string) slog.Handler { return f }

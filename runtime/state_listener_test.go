package runtime

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A listener that changes the state itself, as one calling Close on its
// own goroutine would, does not wait for its own call to end: the move is
// queued and heard, in order, once the listener returns.
func TestStateListenerMayChangeTheState(t *testing.T) {
	var app *App
	var log stateLog
	log.onEnter = func(s State) {
		if s == StateRebalancing {
			app.setState(StatePendingShutdown, StateRebalancing)
		}
	}
	app, err := New(countTopology(t), Config{ApplicationID: "reenter", Brokers: []string{"127.0.0.1:1"}, StateListener: log.listen})
	require.NoError(t, err)
	// The listener records under its own lock: the nested move must not
	// reach it before the outer call returned, or it would wait for itself.
	done := make(chan bool)
	go func() { done <- app.setState(StateRebalancing, StateCreated) }()
	select {
	case moved := <-done:
		require.True(t, moved)
	case <-time.After(10 * time.Second):
		t.Fatal("a listener changing the state waits for itself")
	}
	require.Equal(t, []transition{{StateCreated, StateRebalancing}, {StateRebalancing, StatePendingShutdown}}, log.get())
	require.True(t, app.setState(StateNotRunning, StatePendingShutdown))
	require.Equal(t, StatePendingShutdown, log.get()[2].from)
	require.Zero(t, app.badTransitions.Load())
}

// Moves made by many goroutines at once reach the listener once each, in
// the order they happened, one call at a time.
func TestStateListenerHearsConcurrentMovesInOrder(t *testing.T) {
	var log stateLog
	var inside sync.Mutex
	var overlaps atomic.Int64
	listen := func(from, to State) {
		if !inside.TryLock() {
			overlaps.Add(1)
			return
		}
		defer inside.Unlock()
		log.listen(from, to)
	}
	app, err := New(countTopology(t), Config{ApplicationID: "order", Brokers: []string{"127.0.0.1:1"}, StateListener: listen})
	require.NoError(t, err)
	require.True(t, app.setState(StateRebalancing, StateCreated))
	var moves sync.WaitGroup
	var mu sync.Mutex
	moved := 1
	for range 8 {
		moves.Go(func() {
			for range 200 {
				if app.setState(StateRunning, StateRebalancing) || app.setState(StateRebalancing, StateRunning) {
					mu.Lock()
					moved++
					mu.Unlock()
				}
			}
		})
	}
	moves.Wait()
	seen := log.get()
	requireChain(t, seen)
	require.Zero(t, overlaps.Load(), "two listener calls at once")
	require.Len(t, seen, moved, "every move heard once")
	require.Equal(t, app.State(), seen[len(seen)-1].to)
}

// A listener that asks for the state, the counters and the tasks on every
// transition, and on Running starts Close on another goroutine and waits
// for the state to move on, neither deadlocks nor stalls the change: it
// hears the move to PendingShutdown while it waits, and every transition
// once, in order.
func TestStateListenerWaitsForCloseToTakeEffect(t *testing.T) {
	t.Parallel()
	b, _ := startBroker(t, "in")
	var app *App
	var log stateLog
	var sawShutdown bool
	var states []State
	var tasksStuck bool
	closed := make(chan error, 1)
	log.onEnter = func(s State) {
		states = append(states, app.State())
		_ = app.Stats()
		listed := make(chan struct{})
		go func() {
			app.Tasks()
			close(listed)
		}()
		select {
		case <-listed:
		case <-time.After(10 * time.Second):
			tasksStuck = true
		}
		if s != StateRunning {
			return
		}
		go func() { closed <- app.Close(context.Background()) }()
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) {
			if app.State() != StateRunning {
				sawShutdown = app.State() == StatePendingShutdown
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	var err error
	app, err = New(countTopology(t), Config{ApplicationID: "wait-close", Brokers: b.Addrs(), StateDir: t.TempDir(), NumStreamThreads: 1,
		StateListener: log.listen})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(60 * time.Second):
		t.Fatal("Close started by the listener did not return")
	}
	require.False(t, tasksStuck, "Tasks called in the listener waited for the thread calling it")
	require.True(t, sawShutdown, "the listener waited for PendingShutdown in vain: Close waited for the listener")
	require.Equal(t, []transition{{StateCreated, StateRebalancing}, {StateRebalancing, StateRunning},
		{StateRunning, StatePendingShutdown}, {StatePendingShutdown, StateNotRunning}}, log.get())
	// A listener call may come after later moves: the state it reads is
	// the one it hears of, or one after it.
	for i, tr := range log.get() {
		require.True(t, states[i] == tr.to || validTransition(tr.to, states[i]) || states[i].Terminal(), "state %s in the listener for %s", states[i], tr)
	}
	require.Zero(t, app.badTransitions.Load())
}

// A listener that panics does not silence it for the moves after.
func TestStateListenerHearsMovesAfterItPanicked(t *testing.T) {
	var log stateLog
	log.onEnter = func(s State) {
		if s == StateRebalancing {
			panic("listener")
		}
	}
	app, err := New(countTopology(t), Config{ApplicationID: "panic", Brokers: []string{"127.0.0.1:1"}, StateListener: log.listen})
	require.NoError(t, err)
	require.Panics(t, func() { app.setState(StateRebalancing, StateCreated) })
	require.True(t, app.setState(StateRunning, StateRebalancing))
	require.Equal(t, []transition{{StateCreated, StateRebalancing}, {StateRebalancing, StateRunning}}, log.get())
}

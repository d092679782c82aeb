package runtime

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// transition is one call of a state listener.
type transition struct{ from, to State }

func (tr transition) String() string { return fmt.Sprintf("%s→%s", tr.from, tr.to) }

// stateLog records what a state listener hears. onEnter, if set, runs in
// the listener for every state entered.
type stateLog struct {
	mu      sync.Mutex
	seen    []transition
	onEnter func(State)
}

func (l *stateLog) listen(from, to State) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, transition{from, to})
	if l.onEnter != nil {
		l.onEnter(to)
	}
}

func (l *stateLog) get() []transition {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seen)
}

// requireChain checks that transitions follow one another (each leaves the
// state the previous one entered), starting from Created, and that each is
// in the table.
func requireChain(t *testing.T, seen []transition) {
	t.Helper()
	prev := StateCreated
	for i, tr := range seen {
		require.Equal(t, prev, tr.from, "transition %d of %v does not leave the state the previous one entered", i, seen)
		require.True(t, validTransition(tr.from, tr.to), "transition %d of %v is not in the table", i, seen)
		prev = tr.to
	}
}

// issue 12, test 3: the table allows exactly the transitions of the state
// diagram; setState refuses every other one without telling the listener.
func TestStateTransitionTable(t *testing.T) {
	allowed := map[transition]bool{
		{StateCreated, StateRebalancing}:         true,
		{StateCreated, StatePendingShutdown}:     true,
		{StateRebalancing, StateRunning}:         true,
		{StateRebalancing, StatePendingShutdown}: true,
		{StateRebalancing, StatePendingError}:    true,
		{StateRunning, StateRebalancing}:         true,
		{StateRunning, StatePendingShutdown}:     true,
		{StateRunning, StatePendingError}:        true,
		{StatePendingShutdown, StateNotRunning}:  true,
		{StatePendingError, StateFailed}:         true,
	}
	states := []State{StateCreated, StateRebalancing, StateRunning, StatePendingShutdown, StateNotRunning, StatePendingError, StateFailed}
	var log stateLog
	app, err := New(countTopology(t), Config{ApplicationID: "table", Brokers: []string{"127.0.0.1:1"}, StateListener: log.listen})
	require.NoError(t, err)
	illegal := 0
	for _, from := range states {
		for _, to := range states {
			tr := transition{from, to}
			require.Equal(t, allowed[tr], validTransition(from, to), "%s", tr)
			app.state.Store(int32(from))
			before := len(log.get())
			moved := app.setState(to)
			require.Equal(t, allowed[tr], moved, "%s", tr)
			if !allowed[tr] {
				illegal++
				require.Equal(t, from, app.State(), "refused %s must leave the state alone", tr)
				require.Len(t, log.get(), before, "refused %s must not reach the listener", tr)
				continue
			}
			require.Equal(t, to, app.State())
			require.Equal(t, append(log.get()[:before:before], tr), log.get())
		}
	}
	require.EqualValues(t, illegal, app.badTransitions.Load())
	require.Equal(t, len(states)*len(states)-len(allowed), illegal)
	for _, s := range []State{StateNotRunning, StateFailed} {
		require.True(t, s.Terminal())
		require.Empty(t, transitions[s], "%s is terminal", s)
	}

	// A guarded move leaves other states alone and counts nothing.
	app.state.Store(int32(StatePendingShutdown))
	require.False(t, app.setState(StateRebalancing, StateRunning))
	require.EqualValues(t, illegal, app.badTransitions.Load())
}

// Close on an App never started, and a Start that fails, go through the
// pending states.
func TestStateCloseUnstartedAndFailedStart(t *testing.T) {
	var log stateLog
	app, err := New(countTopology(t), Config{ApplicationID: "g", Brokers: []string{"127.0.0.1:1"}, StateListener: log.listen})
	require.NoError(t, err)
	require.NoError(t, app.Close(context.Background()))
	require.Equal(t, []transition{{StateCreated, StatePendingShutdown}, {StatePendingShutdown, StateNotRunning}}, log.get())
	require.Error(t, app.Start(context.Background()), "a closed App does not start")

	b, _ := startBroker(t, "other")
	var failed stateLog
	app, err = New(countTopology(t), Config{ApplicationID: "g", Brokers: b.Addrs(), StateDir: t.TempDir(), StateListener: failed.listen})
	require.NoError(t, err)
	require.ErrorContains(t, app.Start(context.Background()), `topic "in"`)
	require.Equal(t, []transition{{StateCreated, StateRebalancing}, {StateRebalancing, StatePendingError}, {StatePendingError, StateFailed}}, failed.get())
	require.ErrorContains(t, app.Close(context.Background()), `topic "in"`, "Close after a failed Start returns the failure")
	require.Zero(t, app.badTransitions.Load())
}

// issue 12, test 1: an instance's listener hears Created → Rebalancing →
// Running when it starts alone, Running → Rebalancing → Running when a
// second member joins, and Running → PendingShutdown → NotRunning when it
// closes; every transition once, in order.
func TestStateListenerAcrossSecondMemberAndClose(t *testing.T) {
	t.Parallel()
	b, _ := startBroker(t, "in")
	start := func(log *stateLog) *App {
		app, err := New(countTopology(t), Config{ApplicationID: "sl", Brokers: b.Addrs(), StateDir: t.TempDir(), NumStreamThreads: 1,
			StateListener: log.listen})
		require.NoError(t, err)
		require.NoError(t, app.Start(context.Background()))
		return app
	}
	var logA, logB stateLog
	a := start(&logA)
	waitFor(t, 20*time.Second, "A running", func() bool { return a.State() == StateRunning })
	require.Equal(t, []transition{{StateCreated, StateRebalancing}, {StateRebalancing, StateRunning}}, logA.get())
	require.True(t, a.Ready())
	require.Len(t, a.Tasks(), 2)

	bApp := start(&logB)
	waitFor(t, 30*time.Second, "A and B running with one task each", func() bool {
		return a.Ready() && bApp.Ready() && len(a.Tasks()) == 1 && len(bApp.Tasks()) == 1
	})
	seen := logA.get()
	requireChain(t, seen)
	require.GreaterOrEqual(t, len(seen), 4)
	require.Equal(t, transition{StateRunning, StateRebalancing}, seen[2], "the second member's join makes A rebalance: %v", seen)
	require.Equal(t, StateRunning, seen[len(seen)-1].to, "%v", seen)
	for _, tr := range seen[1:] {
		require.Contains(t, []transition{{StateRebalancing, StateRunning}, {StateRunning, StateRebalancing}}, tr, "%v", seen)
	}

	require.NoError(t, a.Close(context.Background()))
	seen = logA.get()
	requireChain(t, seen)
	require.Equal(t, []transition{{StateRunning, StatePendingShutdown}, {StatePendingShutdown, StateNotRunning}}, seen[len(seen)-2:], "%v", seen)
	require.Equal(t, StateNotRunning, a.State())

	waitFor(t, 30*time.Second, "B running both tasks after A left", func() bool { return bApp.Ready() && len(bApp.Tasks()) == 2 })
	require.NoError(t, bApp.Close(context.Background()))
	seenB := logB.get()
	requireChain(t, seenB)
	require.Equal(t, []transition{{StateCreated, StateRebalancing}, {StateRebalancing, StateRunning}}, seenB[:2], "%v", seenB)
	require.Contains(t, seenB, transition{StateRunning, StateRebalancing}, "A leaving makes B rebalance: %v", seenB)
	require.Equal(t, StateNotRunning, seenB[len(seenB)-1].to)
	require.Zero(t, a.badTransitions.Load()+bApp.badTransitions.Load())
}

// gatedStore holds every Write back until its gate opens, so a test can
// keep a restoration in progress as long as it needs.
type gatedStore struct {
	statestore.Store
	gate    chan struct{}
	entered chan struct{}
	once    *sync.Once
}

func (s gatedStore) Write(entries []statestore.Entry, position int64) error {
	s.once.Do(func() { close(s.entered) })
	<-s.gate
	return s.Store.Write(entries, position)
}

// issue 12, test 2: the instance is not Running before it has an
// assignment, nor while an active task restores a long changelog; it is
// Running once the restoration is complete, and only then.
func TestStateNotRunningBeforeAssignmentOrWhileRestoring(t *testing.T) {
	t.Parallel()
	for _, threads := range []int{1, 2} {
		t.Run(fmt.Sprintf("threads=%d", threads), func(t *testing.T) { testNotRunningWhileRestoring(t, threads) })
	}
}

func testNotRunningWhileRestoring(t *testing.T, threads int) {
	const perPartition = 3000
	topic := changelog.TopicName("rs", "counts")
	b, _ := startBroker(t, "in", topic)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	for p := range int32(2) {
		for i := range perPartition {
			v, err := serde.Int64.Encode(int64(i))
			require.NoError(t, err)
			cl.Produce(context.Background(), &kgo.Record{Topic: topic, Partition: p, Key: fmt.Appendf(nil, "k%d-%d", p, i), Value: v}, nil)
		}
	}
	require.NoError(t, cl.Flush(context.Background()))

	var (
		app *App
		log stateLog
		// What held when the App entered Running, seen from the listener.
		atRunning struct {
			assigned bool
			restored int64
		}
	)
	log.onEnter = func(s State) {
		if s != StateRunning {
			return
		}
		atRunning.assigned = app.assignment.Load() != nil && !slices.ContainsFunc(app.threads, func(th *thread) bool { return !th.settled.Load() })
		atRunning.restored = app.Stats().RestoredRecords
	}
	app, err = New(countTopology(t), Config{ApplicationID: "rs", Brokers: b.Addrs(), StateDir: t.TempDir(), NumStreamThreads: threads,
		StateListener: log.listen})
	require.NoError(t, err)
	gate, entered := make(chan struct{}), make(chan struct{})
	var once sync.Once
	app.openStoreHook = func(_ task.ID, _ topology.StoreInfo, open func() (statestore.Store, error)) (statestore.Store, error) {
		s, err := open()
		if err != nil {
			return nil, err
		}
		return gatedStore{Store: s, gate: gate, entered: entered, once: &once}, nil
	}
	var opened sync.Once
	release := func() { opened.Do(func() { close(gate) }) }

	require.NoError(t, app.Start(context.Background()))
	defer app.Close(context.Background())
	// Before Close, which waits for the restoration to stop.
	defer release()
	require.Equal(t, StateRebalancing, app.State(), "started, but with no assignment yet")
	_, assigned := app.Assignment()
	require.False(t, assigned && app.State() == StateRunning)

	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("restoration never wrote to a store")
	}
	waitFor(t, 10*time.Second, "the assignment, with both tasks restoring", func() bool {
		tasks := app.Tasks()
		return len(tasks) == 2 && tasks[0].State == task.Restoring && tasks[1].State == task.Restoring
	})
	_, assigned = app.Assignment()
	require.True(t, assigned)
	require.Equal(t, StateRebalancing, app.State(), "an active task is restoring")
	require.False(t, app.Ready())
	require.Equal(t, []transition{{StateCreated, StateRebalancing}}, log.get())

	release()
	waitFor(t, 30*time.Second, "running after the restoration", func() bool { return app.State() == StateRunning })
	// The listener hears of a move after State shows it.
	waitFor(t, 10*time.Second, "the listener told of Running", func() bool { return len(log.get()) >= 2 })
	require.Equal(t, []transition{{StateCreated, StateRebalancing}, {StateRebalancing, StateRunning}}, log.get())
	log.mu.Lock()
	defer log.mu.Unlock()
	require.True(t, atRunning.assigned, "Running before every thread had its assignment")
	require.EqualValues(t, 2*perPartition, atRunning.restored, "Running before the restoration was complete")
	for _, ti := range app.Tasks() {
		require.Equal(t, task.Running, ti.State)
	}
}

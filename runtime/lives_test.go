package runtime

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/threadcore"
	"github.com/eddystreams/eddy/task"
)

// livesDisagree lists where the two records of an active task's life
// disagree: the instance core's replica (state and owner) and the thread
// core's slot, which the thread's hot paths read (the task itself keeps
// no state). Each thread is checked under its lock once nothing is in
// flight (lockIdle): a batch moves both, so a check never falls between
// the moves of one step.
func livesDisagree(app *App) []string {
	var bad []string
	for _, th := range app.threads {
		th.lockIdle()
		held := make(map[task.ID]bool)
		for _, id := range th.core.Held() {
			held[id] = true
			slot, _ := th.core.Slot(id)
			want := task.Running
			if slot == threadcore.Restoring {
				want = task.Restoring
			}
			app.registry.mu.Lock()
			rep, ok := app.registry.core.Replica(id)
			app.registry.mu.Unlock()
			if th.task(id) == nil || !ok || rep.State != want || rep.Owner != th.idx {
				bad = append(bad, fmt.Sprintf("thread %d, task %s: slot %s (handle %t), replica %+v (known %t)", th.idx, id, slot, th.task(id) != nil, rep, ok))
			}
		}
		// Every active the instance core gives the thread, the thread holds.
		app.registry.mu.Lock()
		for _, id := range app.registry.core.Tasks() {
			rep, _ := app.registry.core.Replica(id)
			if rep.Owner == th.idx && (rep.State == task.Restoring || rep.State == task.Running) && !held[id] {
				bad = append(bad, fmt.Sprintf("thread %d, task %s: the instance core's %s active is not held", th.idx, id, rep.State))
			}
		}
		app.registry.mu.Unlock()
		th.mu.Unlock()
	}
	return bad
}

// An active task's life is recorded by the instance core and the thread
// core; they agree whenever a thread is between steps,
// while instances join and leave, tasks move between them and between
// threads, and records flow.
func TestActiveLivesAgreeThroughRebalances(t *testing.T) {
	b, _ := startBroker(t, "in")
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic("in"))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	start := func(threads int) *App {
		app, err := New(countTopology(t), Config{ApplicationID: "lives", Brokers: b.Addrs(), StateDir: t.TempDir(),
			NumStreamThreads: threads, NumStandbys: 1, SessionTimeout: 10 * time.Second})
		require.NoError(t, err)
		require.NoError(t, app.Start(context.Background()))
		return app
	}
	ctx, cancel := context.WithCancel(context.Background())
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := 0; ctx.Err() == nil; i++ {
			cl.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%50), Value: []byte("v")}, nil)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); <-produced })

	// watch checks the apps until each is ready with actives actives
	// running, failing on the first disagreement.
	watch := func(what string, actives int, apps ...*App) {
		t.Helper()
		checks := 0
		waitFor(t, 30*time.Second, what, func() bool {
			ready := runningActives(apps...) == actives
			for _, app := range apps {
				if bad := livesDisagree(app); len(bad) > 0 {
					t.Fatalf("%s: %v", what, bad)
				}
				ready = ready && app.Ready()
			}
			checks++
			return ready
		})
		t.Logf("%s: %d checks", what, checks)
	}
	first := start(2)
	t.Cleanup(func() { first.Close(context.Background()) })
	watch("the first instance ready", 2, first)
	second := start(1)
	watch("both instances ready", 2, first, second)
	require.NoError(t, second.Close(context.Background()))
	watch("the first instance running every task again", 2, first)
}

// runningActives counts the running active tasks of apps.
func runningActives(apps ...*App) int {
	n := 0
	for _, app := range apps {
		for _, ti := range app.Tasks() {
			if ti.State == task.Running {
				n++
			}
		}
	}
	return n
}

package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/threadcore"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// startIdleCount starts one thread counting "in", of n partitions, with
// the commit interval given, and waits until its n tasks run.
func startIdleCount(t *testing.T, n int, interval time.Duration, topo *topology.Topology) (*App, *kgo.Client) {
	b, adm := startBroker(t)
	_, err := adm.CreateTopics(context.Background(), int32(n), -1, nil, "in")
	require.NoError(t, err)
	app, err := New(topo, Config{
		ApplicationID: "idlepass", Brokers: b.Addrs(), StateDir: t.TempDir(),
		NumStreamThreads: 1, CommitInterval: interval,
	})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	t.Cleanup(func() { app.Close(context.Background()) })
	waitFor(t, 30*time.Second, "every task running", func() bool {
		if app.State() != StateRunning {
			return false
		}
		running := 0
		for _, ti := range app.Tasks() {
			if ti.State == task.Running {
				running++
			}
		}
		return running == n
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic("in"))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return app, cl
}

// passesOf reads what a thread counted of its passes, commits and
// punctuation requests, under its lock once nothing is in flight.
func passesOf(th *thread) (passes, commits, asked int64) {
	th.lockIdle()
	defer th.mu.Unlock()
	return th.passes.Load(), th.commits.Load(), th.puncts.Asked()
}

// An idle thread sleeps until its next commit: it wakes about once per
// commit interval, not at a fixed period, and its passes ask none of its
// tasks to punctuate.
func TestIdleThreadWakesOnlyForCommits(t *testing.T) {
	t.Parallel()
	const tasks = 32
	b := topology.NewBuilder()
	topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String).Count("counts")
	topo, err := b.Build()
	require.NoError(t, err)
	app, cl := startIdleCount(t, tasks, 2*time.Second, topo)
	require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Key: []byte("k1"), Value: []byte("v")}).FirstErr())
	waitCounts(t, app, map[string]int64{"k1": 1})

	th := app.threads[0]
	_, c0, _ := passesOf(th)
	waitFor(t, 20*time.Second, "a commit", func() bool { _, c, _ := passesOf(th); return c > c0 })
	p1, c1, a1 := passesOf(th)
	waitFor(t, 20*time.Second, "three more commits", func() bool { _, c, _ := passesOf(th); return c >= c1+3 })
	p2, c2, a2 := passesOf(th)
	require.LessOrEqual(t, p2-p1, c2-c1+2, "passes of an idle thread over %d commits", c2-c1)
	require.Equal(t, a1, a2, "tasks asked to punctuate by idle passes")
}

// beat counts its task's wall-clock punctuations, every 100 ms, in the
// store "beats" under the key "wall", and its stream-time ones under
// "stream".
type beat struct {
	kv *topology.KeyValueStore[string, int64]
}

func (p *beat) Init(ctx topology.ProcessorContext[string, string]) error {
	kv, err := topology.GetKeyValueStore(ctx, "beats", serde.String, serde.Int64)
	if err != nil {
		return err
	}
	p.kv = kv
	if _, err := ctx.Schedule(100*time.Millisecond, topology.WallClockTime, func(time.Time) error { return p.add("wall") }); err != nil {
		return err
	}
	_, err = ctx.Schedule(time.Second, topology.StreamTime, func(time.Time) error { return p.add("stream") })
	return err
}

func (p *beat) add(k string) error {
	n, _, err := p.kv.Get(k)
	if err != nil {
		return err
	}
	return p.kv.Put(k, n+1)
}

func (p *beat) Process(topology.Record[string, string]) error { return nil }
func (p *beat) Close() error                                  { return nil }

// Punctuators run on schedule on tasks that take no input, and what they
// write is committed although no record made their tasks dirty; a task
// that takes input runs its stream-time punctuators.
func TestIdleTasksPunctuateAndCommit(t *testing.T) {
	t.Parallel()
	b := topology.NewBuilder()
	b.AddStore(topology.StoreInfo{Name: "beats", Persistent: true, Logged: true})
	topology.Process(topology.Stream(b, "in", serde.String, serde.String), "beat",
		func() topology.Processor[string, string, string, string] { return &beat{} }, "beats")
	topo, err := b.Build()
	require.NoError(t, err)
	app, cl := startIdleCount(t, 4, 300*time.Millisecond, topo)
	committed := func(k string) int64 {
		v, found, _, err := activeGet(app, "beats", []byte(k))
		if err != nil || !found {
			return 0
		}
		n, _ := serde.Int64.Decode(v)
		return n
	}
	// Every pass of a 300 ms interval would ask each task; a thread that
	// only woke for commits would run a 100 ms punctuator every 300 ms.
	waitFor(t, 20*time.Second, "committed wall-clock punctuations", func() bool { return committed("wall") >= 20 })
	require.Zero(t, committed("stream"), "no input, no stream time")

	require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Key: []byte("stream"), Value: []byte("v"), Timestamp: time.UnixMilli(5000)}).FirstErr())
	waitFor(t, 20*time.Second, "a committed stream-time punctuation", func() bool { return committed("stream") >= 1 })
}

// A thread whose poll waits for a commit far off still follows the
// restoration of tasks a rebalance gives it at once: the assignment's
// claims end the poll, so the tasks run long before that wait (up to
// threadcore.MaxPollWait) would be over.
func TestAssignmentEndsALongPoll(t *testing.T) {
	t.Parallel()
	const tasks = 4
	b := topology.NewBuilder()
	topology.Stream(b, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String).Count("counts")
	topo, err := b.Build()
	require.NoError(t, err)
	app, _ := startIdleCount(t, tasks, time.Minute, topo)
	second, err := New(topo, Config{
		ApplicationID: "idlepass", Brokers: app.cfg.Brokers, StateDir: t.TempDir(),
		NumStreamThreads: 1, CommitInterval: time.Minute,
	})
	require.NoError(t, err)
	require.NoError(t, second.Start(context.Background()))
	running := func(a *App) int {
		n := 0
		for _, ti := range a.Tasks() {
			if ti.State == task.Running {
				n++
			}
		}
		return n
	}
	waitFor(t, 30*time.Second, "the second instance running tasks", func() bool {
		return second.State() == StateRunning && running(second) > 0 && running(app)+running(second) == tasks
	})
	// Let the first instance's thread settle into a long poll.
	th := app.threads[0]
	p0, _, _ := passesOf(th)
	waitFor(t, 30*time.Second, "a pass of the first instance", func() bool { p, _, _ := passesOf(th); return p > p0 })
	closed := time.Now()
	require.NoError(t, second.Close(context.Background()))
	waitFor(t, 30*time.Second, "the first instance running every task", func() bool { return running(app) == tasks })
	require.Less(t, time.Since(closed), threadcore.MaxPollWait-time.Second, "second instance's Close → the first runs every task")
}

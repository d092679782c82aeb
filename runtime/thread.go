package runtime

// A stream thread: its state, and its run from start to stop.

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/cache"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/internal/groupproto"
	"github.com/eddystreams/eddy/internal/taskrun"
	"github.com/eddystreams/eddy/internal/threadcore"
	"github.com/eddystreams/eddy/task"
)

// thread is a stream thread: one group member that polls its input
// partitions, runs records through the tasks that own them, and commits.
// What it does when is decided by its core (internal/threadcore), which it
// drives in drive.go; its loop is in thread_poll.go, its processing in
// thread_process.go, the input tasks reading several partitions hold across
// polls in thread_buffer.go, its group client, error policy and end in
// thread_end.go, its
// commit protocols in commit*.go, its sender in send.go, its rebalance
// callbacks and task starts and releases in rebalance.go.
//
// mu guards the core while it is stepped, never while its actions run:
// a batch the core answers with is carried out with mu released, and is in
// flight until the driver lands it; meanwhile the core holds back every
// event but the batch's outcomes (threadcore.Core.Admits), so batches of
// the loop and of the rebalance callbacks never run at the same time, and
// whoever carries one out owns the thread's tasks, inputs and restorer
// until it lands. The group client blocks rebalances while the loop
// processes (BlockRebalanceOnPoll: callbacks run only inside PollRecords
// or after AllowRebalance), so a callback rarely waits for a batch of the
// loop; the flight marks order the rest (a callback let through by the
// last AllowRebalance against the loop's rewire, failure, stop or kill;
// the new client's callbacks against the reconnection that made it).
type thread struct {
	app    *App
	idx    int
	log    *slog.Logger
	cl     *kgo.Client
	out    *outbox // sink records on their way to cl
	budget *cache.Budget
	rest   *restorer

	mu sync.Mutex
	// landed is signalled, with mu, when a batch in flight lands or a
	// client starts closing: events the core held back may come in
	// (enter), and readers that need the tasks still may read them
	// (lockIdle).
	landed sync.Cond
	// core decides, from the events the loop and the callbacks feed it,
	// what the thread does: its mode (processing, committing, an abort
	// owed, reconnecting, halted...), its group phase, and which tasks it
	// holds, waits for or restores. It keeps each held task's
	// *taskrun.Active (task). It is stepped with mu held; the goroutine
	// carrying out a batch reads it without mu (task, heldTasks), since
	// only that batch's outcomes step it meanwhile, but for the callbacks
	// of a client a Reconnect or Exit closes, whose batches read it only
	// under mu.
	core      *threadcore.Core
	committer committer
	// settled is what the core last published (ActPublish): whether the
	// thread holds its assignment with no task waiting for another
	// thread, for readers without mu (App.settled).
	settled atomic.Bool
	// tasksSeen is what App.Tasks reports of the thread while a batch is
	// in flight (a query must not wait for a thread running user code),
	// replaced whole (publishTasks): before the thread publishes settled
	// or checks for Running, and after a pass that processed records, at
	// most every tasksPublishEvery. An idle thread publishes nothing:
	// Tasks reads its tasks under mu, with nothing in flight.
	tasksSeen atomic.Pointer[[]TaskInfo]
	// tasksPublished is when tasksSeen was last replaced; tasksChanged is
	// set when a pass processed records since.
	tasksPublished time.Time
	tasksChanged   bool
	// sent is set by Send, inside actions, and reported to the core as
	// EvSent under mu before its next event.
	sent atomic.Bool
	// closing is the group client a Reconnect or Exit is closing: its
	// callbacks are marked (threadcore.Event.Closing), and the core takes
	// them while that batch is in flight. Only used with mu held.
	closing *kgo.Client
	// connected is set once the core knows how the group rebalances.
	connected bool
	// fetches is the poll ActProcess processes; processing is set when it
	// did.
	fetches    kgo.Fetches
	processing bool
	// parts and partNext are processPolled's scratch, kept between polls;
	// processed is its outcome, what each task consumed.
	parts     []kgo.FetchTopicPartition
	partNext  []int
	processed []threadcore.Event
	// inputs holds, per running task reading several partitions, the
	// records it received and has not processed (thread_buffer.go);
	// inputOrder is processInputs' scratch.
	inputs     map[task.ID]*taskInput
	inputOrder []task.ID
	// fullPauses counts the partitions paused for holding more than
	// BufferedRecordsPerPartition, for tests.
	fullPauses atomic.Int64
	// rewiring is the request a rewire reconnection waits on.
	rewiring *rewire
	// commitStart is when the commit in flight began, for its latency.
	commitStart time.Time
	// recordCost is what processing one record has cost the thread lately
	// (see threadcore.PollSize); zero until a poll gave its tasks records.
	recordCost time.Duration
	// lagging holds the input partitions whose last fetch stopped short of
	// the partition's end: with input consumed since the last commit and
	// lagging empty the thread is drained, and the core commits early.
	lagging map[inputPartition]struct{}
	// commits counts the thread's commits begun, whatever their outcome,
	// for tests that bound how often an idle thread commits.
	commits atomic.Int64
	rr      map[string]int32 // round-robin partition for keyless sink records

	// produceErr is the first produce failure of the current client
	// since the last commit; see produceFailure.
	produceErr atomic.Pointer[produceFailure]
	// abandoned is the client and the group contact for which
	// abortIfSessionGone last reset the connections; only the thread's
	// watchSession goroutine uses it.
	abandoned abandonment
	// conns are the connections of the thread's group client, which
	// abortIfSessionGone resets.
	conns *connGroup
	// sess is the transactional session under exactly-once; cl is then
	// its client.
	sess *kgo.GroupTransactSession
	// group is cl for goroutines other than the thread's own (a probing
	// rebalance timer), which may run while a fenced thread replaces its
	// client; nil until the first client exists.
	group atomic.Pointer[kgo.Client]
	// Mailboxes from the group client's goroutines, which must not wait
	// for a batch in flight (a commit in flight may wait for them):
	// rebalancePending is set when the group wants to rebalance while the
	// thread holds it off, synced holds an assignment the balancer decoded
	// at a sync. The loop empties them into the core (EvRebalanceRequested,
	// EvSynced), and the callbacks the sync, before their own events.
	rebalancePending atomic.Bool
	synced           atomic.Pointer[groupproto.AssignmentInfo]
	// assignment is the last assignment taken from synced, which
	// onAssigned and takeShare apply. Only used with mu held: the
	// closing client's callbacks may drain a sync during the batch of
	// another goroutine.
	assignment *groupproto.AssignmentInfo
	// revokedTasks counts the tasks the thread gave up in revocations,
	// and assignments the assignments it received.
	revokedTasks, assignments atomic.Int64
	// contact is when the coordinator last confirmed the thread's member
	// (contact.go), whichever client it had.
	contact groupContact
	// incarnation counts the thread's replacements (ReplaceThread): the
	// registry's core tells a replacement's events from those of the
	// thread it replaces by it, since the replacement's client may hear
	// from the group before that thread's exit is reported. It moves once
	// the old client is closed and before the new one exists.
	incarnation atomic.Int64

	// ctx is cancelled to stop the thread; it bounds polls and restoration
	// but never produce requests, which must finish for a clean commit.
	ctx    context.Context
	cancel context.CancelFunc
	// stopping, rewireReq and killed are requests from other goroutines,
	// turned into the core's EvStop, EvRewire and EvKill by the loop.
	stopping atomic.Bool
	// rewireReq asks the thread to let go of its client and tasks until
	// the application's topics are back (see wipe.go).
	rewireReq atomic.Pointer[rewire]
	killed    atomic.Bool // set by Kill: no commit, no leave-group
	exited    chan struct{}
	exitErr   error

	// Hot-path caches of process and Send, used, like rr, only by the
	// goroutine carrying out a batch.
	//
	// sendCtx is the context of the records the thread sends (Send),
	// set from sendContext at every poll; sendBound is the last
	// sessionBound it made.
	sendCtx   context.Context
	sendBound *sessionBound
	// sendTopic and sendParts remember the partition count of the last
	// sink topic; srcTopic and srcSub the sub-topology of the last input
	// topic. Sink records come in runs per topic and input records in runs
	// per partition, so a string comparison (often of one shared string)
	// replaces a map lookup. The plan does not change once threads run.
	sendTopic string
	sendParts int32
	// maxBatchBytes is the client's ProducerBatchMaxBytes (see Send).
	maxBatchBytes int
	srcTopic      string
	srcSub        int
	// lastTask is the task of lastID, the previous record's: records come
	// in runs per partition. Nil when unknown; processPolled clears it
	// first, and nothing changes the core's tasks while it runs.
	lastID   task.ID
	lastTask *taskrun.Active
	// recs is the unused tail of a block of producer records. Records
	// are handed out one by one and never reused: the producer holds each
	// until its promise runs, and the block stays alive until the last of
	// its records is released. One allocation then serves recBlock sends.
	recs []kgo.Record

	// worked holds the tasks that took input or ran a punctuator since
	// their last commit, puncts which tasks a pass asks to punctuate, and
	// commitBuf the tasks of the commit in flight (thread_idle.go): no
	// pass or commit walks every task the thread holds.
	worked    map[*taskrun.Active]struct{}
	puncts    taskrun.Punctuations
	commitBuf []*taskrun.Active
	// passes counts the loop's passes, for tests that bound how often an
	// idle thread wakes.
	passes atomic.Int64
	// pollStop ends the last poll the loop began (wakePoll). Only used
	// with mu held.
	pollStop context.CancelFunc
}

func newThread(a *App, idx int, budget *cache.Budget) (*thread, error) {
	th := unconnectedThread(a, idx, budget)
	var err error
	if th.rest, err = newRestorer(a, th.log); err != nil {
		return nil, err
	}
	if err := th.connectFirst(); err != nil {
		th.rest.close()
		return nil, err
	}
	return th, nil
}

// connectFirst makes the thread's first client. The client joins the group
// as soon as it exists, and its rebalance callbacks may run before the
// thread is whole: the core holds their events back while the connection
// is in flight (threadcore.Core.Connecting), as it holds a new client's
// while a reconnection is, and they come in once it lands. So mu is free
// while connect waits for the broker (an exactly-once thread's first
// transaction needs its producer ID).
func (th *thread) connectFirst() error {
	// The core connect would make, made here so that it is in flight
	// before the client exists.
	bal, err := th.balancer()
	if err != nil {
		return err
	}
	th.connected = true
	th.core = threadcore.New(th.coreConfig(bal.IsCooperative()))
	if err := th.core.Connecting(); err != nil {
		return fmt.Errorf("runtime: thread %d: %w", th.idx, err)
	}
	if err := th.connect(); err != nil {
		return err
	}
	th.land()
	return nil
}

// unconnectedThread is a thread without clients.
func unconnectedThread(a *App, idx int, budget *cache.Budget) *thread {
	th := &thread{
		app:     a,
		idx:     idx,
		log:     a.log.With("thread", idx),
		budget:  budget,
		rr:      make(map[string]int32),
		lagging: make(map[inputPartition]struct{}),
		exited:  make(chan struct{}),
		conns:   &connGroup{name: fmt.Sprintf("thread %d", idx)},
	}
	th.landed.L = &th.mu
	th.ctx, th.cancel = context.WithCancel(context.Background())
	// Until connect knows how the group rebalances: a thread that never
	// connects (tests) is driven as an eager member.
	th.core = threadcore.New(th.coreConfig(false))
	th.committer = newCommitter(th)
	return th
}

// stop asks the thread to finish its loop; wait waits for it.
func (th *thread) stop() {
	th.stopping.Store(true)
	th.cancel()
}

func (th *thread) wait(ctx context.Context) error {
	select {
	case <-th.exited:
		return th.exitErr
	case <-ctx.Done():
		return fmt.Errorf("runtime: thread %d did not stop: %w", th.idx, ctx.Err())
	}
}

// abort releases a thread that never ran.
func (th *thread) abort() {
	th.cancel()
	th.cl.Close()
	th.out.close()
	th.rest.close()
}

func (th *thread) run() {
	probeCtx, stopProbe := context.WithCancel(th.ctx)
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		if th.app.cfg.ProcessingGuarantee == ExactlyOnce {
			th.probeContact(probeCtx)
			return
		}
		var wg sync.WaitGroup
		wg.Go(func() { th.watchSession(probeCtx) })
		th.probeContact(probeCtx)
		wg.Wait()
	}()
	var err error
	for {
		err = th.loop()
		if err == nil || th.stopping.Load() || th.killed.Load() || th.app.killCtx.Err() != nil {
			break
		}
		var again bool
		if again, err = th.recover(err); !again {
			break
		}
	}
	stopProbe()
	<-probed
	th.app.joins.stopped(th.idx)
	// Kill severs the network before it marks the threads killed: an error
	// in between (a commit that could not dial) is the kill's doing, not a
	// failure of the App, whose state Kill leaves at not-running.
	if err != nil && !th.stopping.Load() && !th.killed.Load() && th.app.killCtx.Err() == nil {
		th.app.fail(err)
	}
	if th.killed.Load() {
		th.die()
		th.app.registry.threadExited(th.idx, th.incarnationNow(), false)
		close(th.exited)
		return
	}
	th.shutdown(err == nil)
	th.app.registry.threadExited(th.idx, th.incarnationNow(), false)
	th.exitErr = err
	close(th.exited)
}

// incarnationNow is the thread's incarnation (instancecore.Event).
func (th *thread) incarnationNow() int { return int(th.incarnation.Load()) }

// runningTasks returns the tasks in a Running slot, sorted by ID.
func (th *thread) runningTasks() []*taskrun.Active {
	return th.activeTasks(th.core.Tasks(threadcore.Running))
}

// task returns the thread's task id, which the core holds (restoring or
// running), or nil.
func (th *thread) task(id task.ID) *taskrun.Active {
	t, _ := th.core.Handle(id).(*taskrun.Active)
	return t
}

// running returns the thread's task id if its slot is Running, or nil.
// It costs what task does: the hot paths ask it once per task of a poll.
func (th *thread) running(id task.ID) *taskrun.Active {
	t, _ := th.core.Running(id).(*taskrun.Active)
	return t
}

// heldTasks returns the tasks the core holds, sorted by ID.
func (th *thread) heldTasks() []*taskrun.Active {
	return th.activeTasks(th.core.Held())
}

// activeTasks returns the thread's tasks of ids.
func (th *thread) activeTasks(ids []task.ID) []*taskrun.Active {
	out := make([]*taskrun.Active, 0, len(ids))
	for _, id := range ids {
		if t := th.task(id); t != nil {
			out = append(out, t)
		}
	}
	return out
}

// released returns the tasks an action lets go of, whose handles the
// core hands back with it (ActPark, ActClose, ActExit).
func released(a threadcore.Action) []*taskrun.Active {
	out := make([]*taskrun.Active, 0, len(a.Handles))
	for _, h := range a.Handles {
		if t, ok := h.(*taskrun.Active); ok {
			out = append(out, t)
		}
	}
	return out
}

// inputPartitions lists the input partitions of a task.
func (th *thread) inputPartitions(id task.ID) map[string][]int32 {
	out := make(map[string][]int32)
	for _, r := range graph.Of(th.app.topo).SubTopologies()[id.SubTopology].Sources {
		out[r.FullName(th.app.cfg.ApplicationID)] = []int32{id.Partition}
	}
	return out
}

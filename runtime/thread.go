package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/cache"
	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/internal/groupproto"
	"github.com/eddystreams/eddy/internal/taskrun"
	"github.com/eddystreams/eddy/internal/threadcore"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// threadFetchMaxBytes bounds one fetch of a stream thread's consumer. It is
// a quarter of a changelog Reader's (changelog.FetchMaxBytes) because the
// records of a buffered fetch are held decoded until polled: with small
// records a fetch of 4 MiB on the wire is ~50 MiB of kgo.Records, and one
// is being polled while the next is buffered. A smaller fetch also means
// less garbage per poll; counting throughput did not drop (eddybench
// -only m, c).
const threadFetchMaxBytes = 1 << 20

// thread is a stream thread: one group member that polls its input
// partitions, runs records through the tasks that own them, and commits.
// What it does when is decided by its core (internal/threadcore), which it
// drives in drive.go; its commit protocols are in commit*.go, its sender in
// send.go, its rebalance callbacks and task starts and releases in
// rebalance.go.
//
// The group client blocks rebalances while the thread processes
// (BlockRebalanceOnPoll), so rebalance callbacks and processing never run at
// the same time; mu makes that explicit for readers of the code and for the
// race detector.
type thread struct {
	app    *App
	idx    int
	log    *slog.Logger
	cl     *kgo.Client
	out    *outbox // sink records on their way to cl
	budget *cache.Budget
	rest   *restorer

	mu    sync.Mutex
	tasks map[task.ID]*taskrun.Active
	// core decides, from the events the loop and the callbacks feed it,
	// what the thread does: its mode (processing, committing, an abort
	// owed, reconnecting, halted...), its group phase, and which tasks it
	// holds, waits for or restores. Only stepped with mu held.
	core      *threadcore.Core
	committer committer
	// phase and waitingAny mirror the core's group phase and whether a
	// task waits for another thread, for readers without mu (App.settled).
	phase      atomic.Uint32
	waitingAny atomic.Bool
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
	// rewiring is the request a rewire reconnection waits on.
	rewiring *rewire
	// commitStart is when the commit in flight began, for its latency.
	commitStart time.Time
	// recordCost is what processing one record has cost the thread lately
	// (see timedPollCap); zero until a poll gave its tasks records.
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
	// Mailboxes from the group client's goroutines, which must not take
	// mu (a commit holding it may wait for them): rebalancePending is set
	// when the group wants to rebalance while the thread holds it off,
	// synced holds an assignment the balancer decoded at a sync. The
	// thread empties them into the core (EvRebalanceRequested, EvSynced)
	// whenever it takes mu.
	rebalancePending atomic.Bool
	synced           atomic.Pointer[groupproto.AssignmentInfo]
	// cooperative is set when the thread's group member rebalances
	// cooperatively (see onRevoked).
	cooperative bool
	// revokedTasks counts the tasks the thread gave up in revocations,
	// and assignments the assignments it received.
	revokedTasks, assignments atomic.Int64
	// info is the assignment the balancer decoded at the last sync, read
	// by onAssigned right after.
	info atomic.Pointer[groupproto.AssignmentInfo]
	// contact is when the coordinator last confirmed the thread's member
	// (contact.go), whichever client it had.
	contact groupContact

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

	// Hot-path caches of process and Send, used, like rr, only with mu
	// held.
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
	// in runs per partition. Nil when unknown; any change to tasks
	// clears it.
	lastID   task.ID
	lastTask *taskrun.Active
	// recs is the unused tail of a block of producer records. Records
	// are handed out one by one and never reused: the producer holds each
	// until its promise runs, and the block stays alive until the last of
	// its records is released. One allocation then serves recBlock sends.
	recs []kgo.Record
}

func newThread(a *App, idx int, budget *cache.Budget) (*thread, error) {
	th := unconnectedThread(a, idx, budget)
	// The client joins the group as soon as it exists, and its rebalance
	// callbacks may run before it is stored: hold mu (which they take)
	// until the thread is whole.
	th.mu.Lock()
	defer th.mu.Unlock()
	var err error
	if th.rest, err = newRestorer(a, th.log); err != nil {
		return nil, err
	}
	if err := th.connect(); err != nil {
		th.rest.close()
		return nil, err
	}
	return th, nil
}

// unconnectedThread is a thread without clients.
func unconnectedThread(a *App, idx int, budget *cache.Budget) *thread {
	th := &thread{
		app:     a,
		idx:     idx,
		log:     a.log.With("thread", idx),
		budget:  budget,
		tasks:   make(map[task.ID]*taskrun.Active),
		rr:      make(map[string]int32),
		lagging: make(map[inputPartition]struct{}),
		exited:  make(chan struct{}),
		conns:   &connGroup{name: fmt.Sprintf("thread %d", idx)},
	}
	th.ctx, th.cancel = context.WithCancel(context.Background())
	// Until connect knows how the group rebalances: a thread that never
	// connects (tests) is driven as an eager member.
	th.core = threadcore.New(th.coreConfig(false))
	th.committer = newCommitter(th)
	return th
}

// connect creates the thread's group client: a consumer and producer in
// one, and under exactly-once a transactional session whose transactional
// ID is stable across restarts, so a restarted instance fences its former
// self and aborts whatever transaction it left open.
func (th *thread) connect() error {
	a, cfg := th.app, th.app.cfg
	bal, err := groupproto.NewBalancer(groupproto.BalancerConfig{
		Subscription: a.subscription,
		Tasks:        a.plan.taskTopics,
		Changelogs:   a.plan.changelogs,
		EndOffsets:   a.endOffsets,
		Assignor:     cfg.assignorConfig(),
		OnAssignment: th.onAssignment,
		// The group cannot settle while its metadata does not fit: stop
		// with the reason rather than retry for ever.
		MaxGroupMetadataBytes: cfg.MaxGroupMetadataBytes,
		OnError:               func(err error) { a.fail(err) },
		Logger:                th.log,
		BareFraming:           cfg.BareGroupFormat,
		AssignFunc:            cfg.AssignFunc,
		TaskRacks:             a.taskRacks,
		Eager:                 cfg.EagerRebalancing,
	})
	if err != nil {
		return fmt.Errorf("runtime: balancer: %w", err)
	}
	th.cooperative = bal.IsCooperative()
	if !th.connected {
		th.connected = true
		th.core = threadcore.New(th.coreConfig(th.cooperative))
	}
	// The coordinator may complete a round before this thread's join
	// arrives; a leader waits for it (see localJoins).
	instance := ""
	if cfg.StaticMembership {
		instance = th.instanceID()
	}
	a.joins.connecting(th.idx, instance)
	hook := &joinHook{th: th, static: cfg.StaticMembership}
	opts := a.clientOpts(
		kgo.WithHooks(hook),
		kgo.ClientID(fmt.Sprintf("%s-%s-%d", cfg.ApplicationID, a.dir.processID, th.idx)),
		kgo.ConsumerGroup(cfg.ApplicationID),
		kgo.ConsumeTopics(a.plan.sources...),
		kgo.Balancers(leaderBalancer{Balancer: bal, th: th}),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(th.onAssigned),
		kgo.OnPartitionsRevoked(th.onRevoked),
		kgo.OnPartitionsLost(th.onLost),
		kgo.OnPartitionsCallbackBlocked(func(context.Context, *kgo.Client) { th.rebalancePending.Store(true) }),
		kgo.SessionTimeout(cfg.SessionTimeout),
		kgo.RebalanceTimeout(cfg.RebalanceTimeout),
		kgo.HeartbeatInterval(cfg.HeartbeatInterval),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Transaction markers come back as records, so that a task's
		// consumed offset moves past them (see passControl): a drained
		// task then commits its partition's end offset, not one below
		// the last marker for ever, which is how the freshness tracker
		// tells that the active covered its input.
		kgo.KeepControlRecords(),
		kgo.FetchMaxWait(500*time.Millisecond),
		kgo.FetchMaxPartitionBytes(changelog.FetchPartitionBytes),
		kgo.FetchMaxBytes(threadFetchMaxBytes),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond),
	)
	// After clientOpts' dialer, which it replaces (Config refuses one of
	// the user's): the same network, with connections the thread can
	// reset (abortIfSessionGone).
	opts = append(opts, kgo.Dialer(a.net.dialerFor(th.conns)))
	if cfg.StaticMembership {
		opts = append(opts, kgo.InstanceID(th.instanceID()))
	}
	if cfg.ProcessingGuarantee != ExactlyOnce {
		// A record whose sessionBound has passed is failed even when
		// the producer had already tried to send it (over a connection
		// that died, say): sent again later, it could land after the
		// records of its task's new owner. Under at-least-once the
		// record is produced again after the rejoin, as a duplicate if
		// the first send did land.
		opts = append(opts, kgo.AllowIdempotentProduceCancellation())
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return fmt.Errorf("runtime: thread %d client: %w", th.idx, err)
		}
		hook.cl.Store(cl)
		th.attach(cl)
		return nil
	}
	opts = append(opts,
		kgo.TransactionalID(fmt.Sprintf("%s-%s-%d", cfg.ApplicationID, a.dir.processID, th.idx)),
		kgo.TransactionTimeout(cfg.TransactionTimeout),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
	)
	if th.sess, err = kgo.NewGroupTransactSession(opts...); err != nil {
		return fmt.Errorf("runtime: thread %d transactional client: %w", th.idx, err)
	}
	hook.cl.Store(th.sess.Client())
	th.attach(th.sess.Client())
	if err := th.committer.begin(); err != nil {
		th.sess.Close()
		th.out.close()
		return fmt.Errorf("runtime: thread %d: %w", th.idx, err)
	}
	return nil
}

// coreConfig is what the thread's core is told of it. An interval commit
// during a cooperative join waits as long as the other members can take to
// notice the rebalance and join (a couple of heartbeats) and no longer: the
// group client holds a commit until the sync, stopping the thread.
func (th *thread) coreConfig(cooperative bool) threadcore.Config {
	cfg := th.app.cfg
	return threadcore.Config{
		Guarantee:          th.guarantee(),
		Cooperative:        cooperative,
		CommitInterval:     cfg.CommitInterval,
		JoinGrace:          2 * cfg.HeartbeatInterval,
		DrainedCommitDelay: cfg.DrainedCommitDelay,
	}
}

// instanceID is the thread's static group membership ID (KIP-345): stable
// across restarts with the same state directory, like the transactional
// ID, so a restarted thread takes its own place in the group back.
func (th *thread) instanceID() string {
	return fmt.Sprintf("%s-%s-%d", th.app.cfg.ApplicationID, th.app.dir.processID, th.idx)
}

// attach makes cl the thread's client, with an outbox of its own.
func (th *thread) attach(cl *kgo.Client) {
	th.cl = cl
	th.group.Store(cl)
	if v, ok := cl.OptValue(kgo.ProducerBatchMaxBytes).(int32); ok {
		th.maxBatchBytes = int(v)
	}
	// A client being replaced fails the records it still holds, maybe
	// after its successor is attached: only the current client's failures
	// concern the thread.
	th.out = newOutbox(cl, func(r *kgo.Record, err error) { th.onProduced(cl, r, err) })
}

// forceRebalance asks the group to rebalance through the thread's current
// client. It may be called from any goroutine.
func (th *thread) forceRebalance() {
	if cl := th.group.Load(); cl != nil {
		cl.ForceRebalance()
	}
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
		if err == nil || th.stopping.Load() || th.killed.Load() {
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
	if err != nil && !th.stopping.Load() && !th.killed.Load() {
		th.app.fail(err)
	}
	if th.killed.Load() {
		th.die()
		close(th.exited)
		return
	}
	th.shutdown(err == nil)
	th.exitErr = err
	close(th.exited)
}

// failed tells the core that the loop stopped on an error (a commit or
// abort that failed may have told it already).
func (th *thread) failed() {
	th.mu.Lock()
	defer th.mu.Unlock()
	th.stepLogged(threadcore.Event{Kind: threadcore.EvFailed})
}

// stepLogged steps the core where nothing can return an error: one is
// logged, and fails the App when the core refused the event (a bug).
func (th *thread) stepLogged(e threadcore.Event) {
	if err := th.step(nil, e); err != nil {
		if errors.Is(err, threadcore.ErrRefused) {
			th.app.fail(err)
			return
		}
		th.log.Warn("stream thread step failed", "event", e.String(), "err", err)
	}
}

// recover applies OnStreamThreadError to an error that stopped the loop.
// It reports whether the loop should run again, and the error the thread
// stops with otherwise.
func (th *thread) recover(err error) (bool, error) {
	th.failed()
	switch th.app.cfg.OnStreamThreadError {
	case ReplaceThread:
		key := failureKey(err)
		ok, n := th.app.replacements.allow(key, time.Now())
		if !ok {
			return false, fmt.Errorf("runtime: stream thread failed %d times in a row on the same %s; not replacing it again: %w", n, key, err)
		}
		th.log.Error("stream thread failed; replacing it: its uncommitted work is dropped and it joins the group again", "err", err, "failures_in_a_row", n)
		th.mu.Lock()
		rerr := th.step(nil, threadcore.Event{Kind: threadcore.EvReplace})
		th.mu.Unlock()
		if rerr != nil {
			return false, errors.Join(err, rerr)
		}
		th.app.replaced.Add(1)
		return true, nil
	case ShutdownApplication:
		th.halt()
		th.app.requestApplicationShutdown(err)
		return true, nil
	}
	return false, err
}

// halt makes the thread stop processing for good: its tasks close without
// committing (under exactly-once the open transaction is aborted), and
// from now on it only polls, so that it keeps its place in the group for
// the rebalance that carries ShutdownApplication to every member.
func (th *thread) halt() {
	th.mu.Lock()
	defer th.mu.Unlock()
	if err := th.step(nil, threadcore.Event{Kind: threadcore.EvHalt}); err != nil {
		th.log.Warn("halting the thread: aborting its transaction failed", "err", err)
	}
}

func (th *thread) loop() error {
	for !th.stopping.Load() {
		if err := th.iteration(); err != nil {
			return err
		}
	}
	return nil
}

// drainSynced feeds the core the assignment of a sync the balancer left in
// its mailbox, if any. Every holder of mu calls it first, so that the core
// sees the sync before the callbacks that follow it. It is called with mu
// held.
func (th *thread) drainSynced() error {
	if info := th.synced.Swap(nil); info != nil {
		return th.step(nil, threadcore.Event{Kind: threadcore.EvSynced, Tasks: info.Active})
	}
	return nil
}

// drainMailboxes also feeds the core a rebalance the group client waits
// for: only the loop does, since only it commits for it. It is called with
// mu held.
func (th *thread) drainMailboxes() error {
	if err := th.drainSynced(); err != nil {
		return err
	}
	if th.rebalancePending.Swap(false) {
		return th.step(nil, threadcore.Event{Kind: threadcore.EvRebalanceRequested})
	}
	return nil
}

// iteration is one pass of the loop: poll, process, restore, commit.
func (th *thread) iteration() error {
	if r := th.rewireReq.Swap(nil); r != nil {
		th.mu.Lock()
		defer th.mu.Unlock()
		th.rewiring = r
		return th.step(nil, threadcore.Event{Kind: threadcore.EvRewire})
	}
	pollCtx, cancel := context.WithTimeout(th.ctx, th.pollWait())
	fetches := th.cl.PollRecords(pollCtx, th.pollCap())
	cancel()
	defer th.cl.AllowRebalance()
	if fetches.IsClientClosed() || th.stopping.Load() {
		return nil
	}
	th.mu.Lock()
	defer th.mu.Unlock()
	th.sendCtx = th.sendContext()
	if err := th.drainMailboxes(); err != nil {
		return err
	}
	// The core processes the poll, or, with an abort owed, aborts first:
	// the records just polled may predate the rewind the abort makes, and
	// will be fetched again. A halted thread does nothing.
	th.fetches, th.processing = fetches, false
	err := th.step(nil, threadcore.Event{Kind: threadcore.EvPolled})
	th.fetches = nil
	if err != nil || !th.processing {
		return err
	}
	if err := th.step(nil, threadcore.Event{Kind: threadcore.EvPollDone}); err != nil {
		return err
	}
	if err := th.restoreStep(); err != nil {
		return err
	}
	th.app.maybeRunning()
	if err := th.drainMailboxes(); err != nil {
		return err
	}
	return th.step(nil, threadcore.Event{Kind: threadcore.EvTick, Clock: th.commitClock()})
}

// minPollRecords is the fewest records a poll asks for while the record
// cache's budget is nearly spent: what one poll may overrun the budget by.
const minPollRecords = 1000

// pollCap is how many records the next poll may return: MaxPollRecords, or
// fewer when processing them would take longer than the thread's poll time
// budget (timedPollCap) or while the record cache's budget is filling up.
// The cache budget is checked between polls, so a poll of MaxPollRecords
// records that are each a new key would overrun a budget of a few MiB
// several times over (100,000 records of 100 bytes each against a thread's
// 5 MiB share of the default); asking for no more records than the budget
// has room for, at the least each can be charged, keeps the cache near its
// bound.
func (th *thread) pollCap() int {
	maxRecs := min(th.app.cfg.MaxPollRecords, th.timedPollCap())
	left, bounded := th.budget.EntriesLeft()
	if !bounded || left >= maxRecs {
		return maxRecs
	}
	return min(maxRecs, max(left, minPollRecords))
}

// firstPollRecords caps a thread's polls until it knows what its records
// cost to process (see timedPollCap).
const firstPollRecords = 1000

// pollTimeBudget is how long processing one poll may take: a quarter of the
// shortest timeout that runs while a thread processes a poll. Nothing is
// committed in the middle of a poll, so under exactly-once the transaction
// the poll's first output record opened stays open until the commit after
// the poll, and the broker aborts a transaction open for TransactionTimeout
// (the thread is then fenced, and processes the same poll again); and a
// rebalance waits for the poll to end, for RebalanceTimeout at most.
func (th *thread) pollTimeBudget() time.Duration {
	cfg := th.app.cfg
	d := cfg.RebalanceTimeout
	if cfg.ProcessingGuarantee == ExactlyOnce {
		d = min(d, cfg.TransactionTimeout)
	}
	return d / 4
}

// timedPollCap is how many records the thread can process within its
// pollTimeBudget at what its records have cost lately, or
// firstPollRecords before it knows. A slow topology (stores on a slow
// disk, a loaded machine, a producer held back by its broker) then takes
// smaller polls and commits between them, where a whole fetch of backlog
// in one poll (tens of thousands of small records) could outlast the
// transaction every time it was processed again.
func (th *thread) timedPollCap() int {
	if th.recordCost <= 0 {
		return firstPollRecords
	}
	return int(max(1, th.pollTimeBudget()/th.recordCost))
}

// notePollCost updates recordCost after a poll whose tasks took n records
// in d. A dearer cost is taken at once and a cheaper one halfway, so that a
// cheap poll (records a filter drops, say) does not let the next one grow
// far past the budget if its records are dear again.
func (th *thread) notePollCost(n int, d time.Duration) {
	if n <= 0 {
		return
	}
	c := max(d/time.Duration(n), 1)
	if c >= th.recordCost {
		th.recordCost = c
	} else {
		th.recordCost = (th.recordCost + c) / 2
	}
}

// processPolled runs the records of the last poll through their tasks
// (ActProcess).
func (th *thread) processPolled() error {
	start := time.Now()
	th.processed = th.processed[:0]
	var fatal error
	doomed := false
	taken := 0
	th.fetches.EachError(func(topic string, p int32, err error) {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return
		}
		if errors.Is(err, kerr.UnknownServerError) {
			// What a Kafka coordinator answers a SyncGroup whose group
			// record exceeds its message.max.bytes.
			th.log.Error("group error UNKNOWN_SERVER_ERROR: if the brokers' message.max.bytes is below MaxGroupMetadataBytes, the group's metadata does not fit; lower MaxGroupMetadataBytes to the brokers' limit to get the sizes, or raise the limit", "err", err, "max_group_metadata_bytes", th.app.cfg.MaxGroupMetadataBytes)
			return
		}
		th.log.Warn("fetch error", "topic", topic, "partition", p, "err", err)
	})
	parts := th.parts[:0]
	th.fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) > 0 {
			parts = append(parts, p)
		}
	})
	if err := th.deletedUnread(parts); err != nil {
		clear(parts)
		th.parts = parts[:0]
		return err
	}
	for i := 0; i < len(parts) && fatal == nil; {
		// A task reading several topics takes the records of all its
		// partitions in this poll together (see processTask); they need
		// not be next to each other in the fetch.
		j := i + 1
		if sub := th.app.plan.topicSub[parts[i].Topic]; th.app.plan.subSources[sub] > 1 {
			for k := j; k < len(parts); k++ {
				if th.app.plan.topicSub[parts[k].Topic] == sub && parts[k].Partition == parts[i].Partition {
					parts[j], parts[k] = parts[k], parts[j]
					j++
				}
			}
		}
		fatal = th.processTask(parts[i:j], &doomed, &taken)
		i = j
	}
	clear(parts)
	th.parts = parts[:0]
	th.notePollCost(taken, time.Since(start))
	return fatal
}

// processTask runs the records one poll returned for one task's partitions
// through the task, in the order of a timestampMerge, and adds those a
// running task took to taken.
func (th *thread) processTask(parts []kgo.FetchTopicPartition, doomed *bool, taken *int) error {
	var fatal error
	m := timestampMerge{parts: parts, next: th.partNext[:0]}
	defer func() { th.partNext = m.next[:0] }()
	consumed := 0
	for fatal == nil && !*doomed {
		pi, end := m.run()
		if pi < 0 {
			break
		}
		p, n := parts[pi], 0
		for _, r := range p.Records[m.next[pi]:end] {
			if fatal != nil || *doomed {
				break
			}
			m.next[pi]++
			var took bool
			if r.Attrs.IsControl() {
				took = th.passControl(r)
			} else {
				took, fatal = th.process(r)
				n++
				if fatal != nil && th.produceFailed() != nil && (th.sess != nil || sessionLost(fatal)) {
					// The transaction is doomed: stop here, and the
					// iteration's end aborts it (commitClock), which
					// rewinds to the committed offsets.
					*doomed, fatal = true, nil
				}
			}
			if took {
				consumed++
			}
		}
		th.app.metrics.processedFrom(p.Topic, n)
	}
	*taken += consumed
	if consumed > 0 {
		id := task.ID{SubTopology: th.app.plan.topicSub[parts[0].Topic], Partition: parts[0].Partition}
		th.processed = append(th.processed, threadcore.Event{Kind: threadcore.EvProcessed, Task: id, N: consumed})
	}
	for _, p := range parts {
		th.noteFetched(p)
	}
	return fatal
}

// timestampMerge orders the records one poll returned for one task's
// partitions as Kafka Streams does: of the partitions' next records the
// earliest goes first, the first partition's on a tie, so records of a
// table that precede a stream's in time are in the table before the
// stream's records are joined with it. Records of one partition keep their
// order. Only the records of one poll are merged: a partition that
// returned none does not hold the others back, as Kafka Streams'
// max.task.idle.ms can.
type timestampMerge struct {
	parts []kgo.FetchTopicPartition
	// next[i] is the index of parts[i]'s next record; the caller advances
	// it over the records it takes.
	next []int
}

// run returns the partition whose records go next and the end of the run
// of its records that go before any other partition's: records stamped
// earlier than every other partition's next record, and those stamped the
// same as the next records of partitions after it. It returns -1 when no
// records are left.
func (m *timestampMerge) run() (part, end int) {
	for len(m.next) < len(m.parts) {
		m.next = append(m.next, 0)
	}
	part = -1
	for k, p := range m.parts {
		if m.next[k] < len(p.Records) && (part < 0 || p.Records[m.next[k]].Timestamp.Before(m.parts[part].Records[m.next[part]].Timestamp)) {
			part = k
		}
	}
	if part < 0 {
		return -1, 0
	}
	recs := m.parts[part].Records
	end = len(recs)
	for k, q := range m.parts {
		if k == part || m.next[k] >= len(q.Records) {
			continue
		}
		at := q.Records[m.next[k]].Timestamp
		for i := m.next[part]; i < end; i++ {
			if ts := recs[i].Timestamp; ts.After(at) || (k < part && ts.Equal(at)) {
				end = i
				break
			}
		}
	}
	return part, end
}

// commitClock is what the thread's input, cache and producer say at the end
// of an iteration; the core, ticked with it, decides whether to commit. A
// drained thread commits early, which spends a commit (under exactly-once a
// transaction) to make results final once input stops, rather than a commit
// interval later.
func (th *thread) commitClock() threadcore.CommitClock {
	return threadcore.CommitClock{
		InputAtEnd:    th.inputAtEnd(),
		BudgetFull:    th.budget.Full(),
		ProduceFailed: th.doomedByProduce(),
	}
}

// inputPartition names a partition of an input topic.
type inputPartition struct {
	topic     string
	partition int32
}

// noteFetched records whether the records a poll returned for a partition
// reach the partition's end as the fetch saw it: the high watermark, or
// under exactly-once the last stable offset, past which a read-committed
// fetch returns nothing yet. Transaction markers are records here (see
// passControl), so a drained partition's position does reach that end. A
// partition whose last record is not its end's predecessor (a poll cut
// short by MaxPollRecords, a fetch capped in bytes, a compacted tail) is
// lagging until a later fetch reaches the end.
func (th *thread) noteFetched(p kgo.FetchTopicPartition) {
	if len(p.Records) == 0 {
		return
	}
	end := p.HighWatermark
	if th.sess != nil {
		end = p.LastStableOffset
	}
	key := inputPartition{p.Topic, p.Partition}
	if p.Records[len(p.Records)-1].Offset+1 >= end {
		delete(th.lagging, key)
	} else {
		th.lagging[key] = struct{}{}
	}
}

// inputAtEnd reports whether every input partition of the thread's running
// tasks it has fetched from is at its end. A poll that returns nothing
// leaves this as it was: the next fetch may simply still be on its way.
// Partitions whose task no longer runs here are forgotten, so a revoked
// partition cannot hold early commits off for good.
func (th *thread) inputAtEnd() bool {
	for p := range th.lagging {
		id := task.ID{SubTopology: th.app.plan.topicSub[p.topic], Partition: p.partition}
		if t := th.tasks[id]; t == nil || t.State() != task.Running {
			delete(th.lagging, p)
			continue
		}
		return false
	}
	return true
}

// pollWait bounds a poll so that commits and restoration are not starved
// when no input arrives: it ends when the core's next commit may be due,
// the interval commit's or, for a drained thread, the early one's.
func (th *thread) pollWait() time.Duration {
	th.mu.Lock()
	defer th.mu.Unlock()
	if th.rest.active() {
		return 20 * time.Millisecond
	}
	wait := th.core.CommitWait(time.Now(), th.inputAtEnd())
	return max(10*time.Millisecond, min(wait, 500*time.Millisecond))
}

// taskOf returns the running task that owns an input record, or nil.
func (th *thread) taskOf(r *kgo.Record) (task.ID, *taskrun.Active) {
	if r.Topic != th.srcTopic {
		th.srcTopic, th.srcSub = r.Topic, th.app.plan.topicSub[r.Topic]
	}
	id := task.ID{SubTopology: th.srcSub, Partition: r.Partition}
	t := th.lastTask
	if t == nil || id != th.lastID {
		t = th.tasks[id]
		th.lastID, th.lastTask = id, t
	}
	if t == nil || t.State() != task.Running {
		// Partitions of tasks that are not running are paused, so this
		// is a record fetched before the pause; it will be fetched again.
		return id, nil
	}
	return id, t
}

// passControl moves a task's consumed offset past a transaction marker
// without processing it, as Kafka Streams commits the consumer's position:
// the next commit then covers the marker, even when it is the only thing
// the task consumed since the last one.
// It reports whether a running task took the marker.
func (th *thread) passControl(r *kgo.Record) bool {
	_, t := th.taskOf(r)
	if t != nil {
		t.Skip(graph.InputRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset})
	}
	return t != nil
}

// process runs a record through its task. It reports whether a running
// task took it.
func (th *thread) process(r *kgo.Record) (bool, error) {
	id, t := th.taskOf(r)
	if t == nil {
		return false, nil
	}
	in := graph.InputRecord{
		Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp,
		Key: r.Key, Value: r.Value,
	}
	if len(r.Headers) > 0 {
		in.Headers = make([]topology.Header, len(r.Headers))
		for i, h := range r.Headers {
			in.Headers[i] = topology.Header{Key: h.Key, Value: h.Value}
		}
	}
	err := t.Process(in)
	if err == nil {
		return true, nil
	}
	if perr := th.produceFailed(); perr != nil {
		// The record's output could not be sent because an earlier one
		// failed: not the record's fault, so no error policy applies.
		return true, perr
	}
	// Declared only here: errors.As makes its target escape, and it would
	// otherwise be allocated for every record.
	var de *topology.DeserializationError
	if errors.As(err, &de) {
		if th.app.cfg.DeserializationErrors != DeserializationLogAndSkip {
			return true, fmt.Errorf("runtime: task %s: %w", id, err)
		}
		th.app.skipped.Add(1)
		return true, th.skip(t, in, "", "skipping record that cannot be deserialized", de.Err)
	}
	pe := &ProcessingError{Task: id, Topic: in.Topic, Partition: in.Partition, Offset: in.Offset, Err: err}
	var ne *topology.NodeError
	if errors.As(err, &ne) {
		pe.Node = ne.Node
	}
	// A store in the wrong layout fails every record alike: skipping them
	// would only empty the input.
	var le *topology.StoreLayoutError
	if th.app.cfg.ProcessingErrors != ProcessingLogAndContinue || errors.As(err, &le) {
		return true, pe
	}
	th.app.processingErrors.Add(1)
	return true, th.skip(t, in, pe.Node, "skipping record a processor failed on", pe.Unwrap())
}

// skip carries on past a record a handler chose to skip: it logs why (a
// few lines a second at most), sends the record to the dead-letter topic if
// there is one, and marks it consumed.
func (th *thread) skip(t *taskrun.Active, in graph.InputRecord, node, msg string, cause error) error {
	if ok, suppressed := th.app.errLogs.allow(time.Now()); ok {
		attrs := []any{"task", t.ID(), "topic", in.Topic, "partition", in.Partition, "offset", in.Offset, "err", cause}
		if node != "" {
			attrs = append(attrs, "node", node)
		}
		if suppressed > 0 {
			attrs = append(attrs, "similar_lines_suppressed", suppressed)
		}
		var pe *topology.PanicError
		if errors.As(cause, &pe) {
			attrs = append(attrs, "stack", string(pe.Stack))
		}
		th.log.Warn(msg, attrs...)
	}
	if dlq := th.app.cfg.DeadLetterTopic; dlq != "" {
		dl := deadLetter(dlq, t.ID(), in, node, cause)
		if th.maxBatchBytes > 0 && batchBytes(dl) > th.maxBatchBytes {
			// A record Kafka took may still be too large for this
			// producer once headers are added (its limit may be below
			// the broker's): the dead letter then names the record
			// without carrying it whole.
			if small, ok := shrinkDeadLetter(dl, th.maxBatchBytes); ok {
				dl = small
			}
		}
		if err := th.Send(dl); err != nil {
			return fmt.Errorf("runtime: task %s: send record %s/%d@%d to the dead-letter topic %q: %w", t.ID(), in.Topic, in.Partition, in.Offset, dlq, err)
		}
	}
	t.Skip(in)
	return nil
}

// reconnect replaces the thread's client (ActReconnect): it leaves the
// group and joins it again as a new member, so every partition it is given
// again is read from the group's committed offset rather than from where
// the old client had got to. The core closed the thread's tasks first. It
// is called with mu held, and releases it while the old client closes,
// since closing runs the revocation callback, which takes mu.
func (th *thread) reconnect(cause threadcore.Cause) error {
	switch cause {
	case threadcore.CauseRefused:
		// The commit refused as from an old generation (errGroupMovedOn),
		// or, under at-least-once, lost with the broker: the tasks may
		// belong to others now.
		th.log.Warn("offset commit refused or lost: dropping uncommitted work and joining the group again")
		th.app.rejoins.Add(1)
	case threadcore.CauseFenced:
		// Another instance owns this thread's work now (this one was a
		// zombie: paused or cut off past its session).
		th.log.Warn("transaction cannot commit (fenced, or dropped from the group while cut off); dropping uncommitted work and rejoining")
	case threadcore.CauseRewire:
		return th.pauseForRewire()
	}
	th.releaseClient()
	return th.connect()
}

// releaseClient closes the thread's client, which leaves the group. It is
// called with mu held, and releases it while the client closes.
func (th *thread) releaseClient() {
	oldSess, oldCl := th.sess, th.cl
	th.mu.Unlock()
	if oldSess != nil {
		oldSess.AllowRebalance()
		oldSess.Close()
	} else {
		oldCl.AllowRebalance()
		oldCl.Close()
	}
	th.mu.Lock()
	th.out.close()
	th.sess = nil
}

func (th *thread) runningTasks() []*taskrun.Active {
	var out []*taskrun.Active
	for _, id := range slices.SortedFunc(maps.Keys(th.tasks), task.ID.Compare) {
		if t := th.tasks[id]; t.State() == task.Running {
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

// die is shutdown after Kill: the network is already cut, so leaving the
// group cannot reach the broker; tasks close without committing.
func (th *thread) die() {
	th.mu.Lock()
	th.stepLogged(threadcore.Event{Kind: threadcore.EvKill})
	th.mu.Unlock()
	th.rest.close()
}

// shutdown commits (when the thread stopped cleanly), leaves the group and
// closes every task.
func (th *thread) shutdown(clean bool) {
	th.mu.Lock()
	if err := th.step(nil, threadcore.Event{Kind: threadcore.EvStop, Clean: clean}); err != nil {
		th.log.Warn("final commit failed", "err", err)
	}
	th.mu.Unlock()
	th.rest.close()
}

// exit leaves the group and closes the client and the tasks the core
// names (ActExit). It is called with mu held, and releases it while the
// client closes: leaving runs the revocation callback, which takes mu (and
// returns at once, the thread being stopped).
func (th *thread) exit(a threadcore.Action) {
	cl := th.cl
	th.mu.Unlock()
	if a.Killed {
		// A cancelled context makes the leave-group attempt return at once.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		cl.LeaveGroupContext(ctx)
		cl.AllowRebalance()
		cl.Close()
	} else {
		cl.CloseAllowingRebalance()
	}
	th.mu.Lock()
	// After the close: a revocation callback may have committed through
	// the outbox.
	th.out.close()
	th.closeTasks(th.activeTasks(a.Tasks), a.Clean)
}

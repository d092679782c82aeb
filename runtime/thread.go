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
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/assignor"
	"github.com/eddystreams/eddy/internal/cache"
	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/internal/taskrun"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// thread is a stream thread: one group member that polls its input
// partitions, runs records through the tasks that own them, and commits.
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
	// waiting holds tasks assigned to this thread that another thread of
	// the instance still held when the assignment came; they start when it
	// lets go. waitingAny mirrors len(waiting) > 0 for readers without mu.
	waiting    map[task.ID]bool
	waitingAny atomic.Bool
	lastCommit time.Time
	rr         map[string]int32 // round-robin partition for keyless sink records

	// produceErr is the first produce failure of the current client
	// since the last commit; see produceFailure.
	produceErr atomic.Pointer[produceFailure]
	// sess is the transactional session under exactly-once; cl is then
	// its client.
	sess *kgo.GroupTransactSession
	// group is cl for goroutines other than the thread's own (a probing
	// rebalance timer), which may run while a fenced thread replaces its
	// client; nil until the first client exists.
	group atomic.Pointer[kgo.Client]
	// rebalancePending is set when the group wants to rebalance while the
	// thread holds it off: the thread commits before letting it proceed.
	rebalancePending atomic.Bool
	// abortPending is set (exactly-once) when a revocation or loss dropped
	// the tasks' uncommitted work, or when the session will abort the
	// open transaction anyway (it aborts the first one to end after a
	// revocation): it must be aborted before anything else is processed.
	abortPending bool
	// dirty is set (exactly-once) when the open transaction holds work:
	// a record processed or passed, or a record sent.
	dirty bool
	// cooperative is set when the thread's group member rebalances
	// cooperatively (see onRevoked).
	cooperative bool
	// joining is set while a cooperative rebalance is between its join
	// and its sync, when the group client holds commits back (see
	// commitDue).
	joining atomic.Bool
	// revokedTasks counts the tasks the thread gave up in revocations,
	// and assignments the assignments it received.
	revokedTasks, assignments atomic.Int64
	// info is the assignment the balancer decoded at the last sync, read
	// by onAssigned right after.
	info     atomic.Pointer[assignor.AssignmentInfo]
	assigned atomic.Bool // an assignment was received since the last revocation

	// ctx is cancelled to stop the thread; it bounds polls and restoration
	// but never produce requests, which must finish for a clean commit.
	ctx      context.Context
	cancel   context.CancelFunc
	stopping atomic.Bool
	// rewireReq asks the thread to let go of its client and tasks until
	// the application's topics are back (see wipe.go).
	rewireReq atomic.Pointer[rewire]
	killed    atomic.Bool // set by Kill: no commit, no leave-group
	// halted is set (under mu) when the thread stopped processing on an
	// error under ShutdownApplication: it keeps polling only to take part
	// in the rebalance that tells every member to shut down.
	halted  bool
	exited  chan struct{}
	exitErr error

	// Hot-path caches of process and Send, used, like rr, only with mu
	// held.
	//
	// sendTopic and sendParts remember the partition count of the last
	// sink topic; srcTopic and srcSub the sub-topology of the last input
	// topic. Sink records come in runs per topic and input records in runs
	// per partition, so a string comparison (often of one shared string)
	// replaces a map lookup. The plan does not change once threads run.
	sendTopic string
	sendParts int32
	srcTopic  string
	srcSub    int
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

// recBlock is how many producer records Send allocates at once: about
// 40 KiB, a few milliseconds of sends at full speed.
const recBlock = 256

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
		waiting: make(map[task.ID]bool),
		rr:      make(map[string]int32),
		exited:  make(chan struct{}),
	}
	th.ctx, th.cancel = context.WithCancel(context.Background())
	return th
}

// connect creates the thread's group client: a consumer and producer in
// one, and under exactly-once a transactional session whose transactional
// ID is stable across restarts, so a restarted instance fences its former
// self and aborts whatever transaction it left open.
func (th *thread) connect() error {
	a, cfg := th.app, th.app.cfg
	bal, err := assignor.NewBalancer(assignor.BalancerConfig{
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
		Eager:                 cfg.EagerRebalancing,
	})
	if err != nil {
		return fmt.Errorf("runtime: balancer: %w", err)
	}
	th.cooperative = bal.IsCooperative()
	opts := a.clientOpts(
		kgo.ClientID(fmt.Sprintf("%s-%s-%d", cfg.ApplicationID, a.dir.processID, th.idx)),
		kgo.ConsumerGroup(cfg.ApplicationID),
		kgo.ConsumeTopics(a.plan.sources...),
		kgo.Balancers(bal),
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
		kgo.FetchMaxBytes(changelog.FetchMaxBytes),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond),
	)
	if cfg.StaticMembership {
		opts = append(opts, kgo.InstanceID(th.instanceID()))
	}
	if cfg.ProcessingGuarantee != ExactlyOnce {
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return fmt.Errorf("runtime: thread %d client: %w", th.idx, err)
		}
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
	if err := th.sess.Begin(); err != nil {
		th.sess.Close()
		return fmt.Errorf("runtime: thread %d begin transaction: %w", th.idx, err)
	}
	th.attach(th.sess.Client())
	return nil
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

// recover applies OnStreamThreadError to an error that stopped the loop.
// It reports whether the loop should run again, and the error the thread
// stops with otherwise.
func (th *thread) recover(err error) (bool, error) {
	switch th.app.cfg.OnStreamThreadError {
	case ReplaceThread:
		key := failureKey(err)
		ok, n := th.app.replacements.allow(key, time.Now())
		if !ok {
			return false, fmt.Errorf("runtime: stream thread failed %d times in a row on the same %s; not replacing it again: %w", n, key, err)
		}
		th.log.Error("stream thread failed; replacing it: its uncommitted work is dropped and it joins the group again", "err", err, "failures_in_a_row", n)
		th.mu.Lock()
		rerr := th.reconnect()
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
	th.halted = true
	th.dropAll()
	if th.sess != nil {
		if err := th.abortTransaction(); err != nil {
			th.log.Warn("aborting the transaction of a halted thread failed", "err", err)
		}
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

// iteration is one pass of the loop: poll, process, restore, commit.
func (th *thread) iteration() error {
	if r := th.rewireReq.Swap(nil); r != nil {
		th.mu.Lock()
		defer th.mu.Unlock()
		return th.pauseForRewire(r)
	}
	pollCtx, cancel := context.WithTimeout(th.ctx, th.pollWait())
	fetches := th.cl.PollRecords(pollCtx, th.app.cfg.MaxPollRecords)
	cancel()
	defer th.cl.AllowRebalance()
	if fetches.IsClientClosed() || th.stopping.Load() {
		return nil
	}
	th.mu.Lock()
	defer th.mu.Unlock()
	if th.halted {
		return nil
	}
	if th.abortPending {
		// The records just polled may predate the rewind the abort
		// makes; they will be fetched again.
		return th.abortTransaction()
	}
	var fatal error
	fetches.EachError(func(topic string, p int32, err error) {
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
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		var n int
		for _, r := range p.Records {
			if fatal != nil {
				break
			}
			if r.Attrs.IsControl() {
				th.passControl(r)
				continue
			}
			fatal = th.process(r)
			n++
		}
		th.app.metrics.processedFrom(p.Topic, n)
	})
	if fatal != nil {
		return fatal
	}
	th.startWaiting()
	if err := th.restoreStep(); err != nil {
		return err
	}
	th.app.maybeRunning()
	if th.commitDue() || th.budget.Full() || th.rebalancePending.Swap(false) {
		if err := th.commitBounded(); err != nil {
			return err
		}
		th.app.purge.afterCommit(th.idx, th.cl)
	}
	now := time.Now()
	for _, t := range th.tasks {
		if err := t.Punctuate(now); err != nil {
			return fmt.Errorf("runtime: task %s punctuate: %w", t.ID(), err)
		}
	}
	return nil
}

// commitDue reports whether the commit interval has passed. While a
// cooperative rebalance is between its join and its sync the group client
// would hold a commit until the sync, stopping the thread, so the commit
// waits, as long as the other members can take to notice the rebalance and
// join (a couple of heartbeats) and no longer.
func (th *thread) commitDue() bool {
	since, cfg := time.Since(th.lastCommit), th.app.cfg
	if since < cfg.CommitInterval {
		return false
	}
	return !th.joining.Load() || since >= cfg.CommitInterval+2*cfg.HeartbeatInterval
}

// pollWait bounds a poll so that commits and restoration are not starved
// when no input arrives.
func (th *thread) pollWait() time.Duration {
	th.mu.Lock()
	defer th.mu.Unlock()
	if th.rest.active() {
		return 20 * time.Millisecond
	}
	wait := th.app.cfg.CommitInterval - time.Since(th.lastCommit)
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
func (th *thread) passControl(r *kgo.Record) {
	if _, t := th.taskOf(r); t != nil {
		th.dirty = true
		t.Skip(graph.InputRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset})
	}
}

func (th *thread) process(r *kgo.Record) error {
	id, t := th.taskOf(r)
	if t == nil {
		return nil
	}
	th.dirty = true
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
		return nil
	}
	// Declared only here: errors.As makes its target escape, and it would
	// otherwise be allocated for every record.
	var de *topology.DeserializationError
	if errors.As(err, &de) {
		if th.app.cfg.DeserializationErrors != DeserializationLogAndSkip {
			return fmt.Errorf("runtime: task %s: %w", id, err)
		}
		th.app.skipped.Add(1)
		return th.skip(t, in, "", "skipping record that cannot be deserialized", de.Err)
	}
	pe := &ProcessingError{Task: id, Topic: in.Topic, Partition: in.Partition, Offset: in.Offset, Err: err}
	var ne *topology.NodeError
	if errors.As(err, &ne) {
		pe.Node = ne.Node
	}
	if th.app.cfg.ProcessingErrors != ProcessingLogAndContinue {
		return pe
	}
	th.app.processingErrors.Add(1)
	return th.skip(t, in, pe.Node, "skipping record a processor failed on", pe.Unwrap())
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
		if err := th.Send(deadLetter(dlq, t.ID(), in, node, cause)); err != nil {
			return fmt.Errorf("runtime: task %s: send record %s/%d@%d to the dead-letter topic %q: %w", t.ID(), in.Topic, in.Partition, in.Offset, dlq, err)
		}
	}
	t.Skip(in)
	return nil
}

// Send implements taskrun.Sender: it partitions a sink record as Kafka's default
// partitioner would and hands it to the producer.
func (th *thread) Send(rec graph.OutputRecord) error {
	if err := th.produceFailed(); err != nil {
		return err
	}
	n := th.sendParts
	if rec.Topic != th.sendTopic || n <= 0 {
		var ok bool
		n, ok = th.app.plan.partitions[rec.Topic]
		if !ok || n <= 0 {
			return fmt.Errorf("runtime: sink topic %q has no known partition count", rec.Topic)
		}
		th.sendTopic, th.sendParts = rec.Topic, n
	}
	var part int32
	if rec.Key != nil {
		part = topology.Partition(rec.Key, n)
	} else {
		part = th.rr[rec.Topic] % n
		th.rr[rec.Topic] = part + 1
	}
	if len(th.recs) == 0 {
		th.recs = make([]kgo.Record, recBlock)
	}
	kr := &th.recs[0]
	th.recs = th.recs[1:]
	*kr = kgo.Record{Topic: rec.Topic, Partition: part, Key: rec.Key, Value: rec.Value, Timestamp: rec.Timestamp}
	if len(rec.Headers) > 0 {
		kr.Headers = make([]kgo.RecordHeader, len(rec.Headers))
		for i, h := range rec.Headers {
			kr.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
		}
	}
	th.dirty = true
	th.out.send(kr)
	return nil
}

// produceFailure is a produce failure and the client it happened on. A
// client being replaced fails the records it still holds, sometimes after
// its successor is attached; those failures concern no one.
type produceFailure struct {
	cl  *kgo.Client
	err error
}

func (th *thread) onProduced(cl *kgo.Client, r *kgo.Record, err error) {
	if err == nil || cl != th.group.Load() {
		return
	}
	f := &produceFailure{cl: cl, err: fmt.Errorf("runtime: produce to %s/%d: %w", r.Topic, r.Partition, err)}
	for {
		old := th.produceErr.Load()
		if old != nil && old.cl == cl {
			return // the first failure is the one to report
		}
		if th.produceErr.CompareAndSwap(old, f) {
			return
		}
	}
}

// produceFailed returns the current client's first produce failure since
// the last commit, if any.
func (th *thread) produceFailed() error {
	if f := th.produceErr.Load(); f != nil && f.cl == th.group.Load() {
		return f.err
	}
	return nil
}

// commitBounded commits with a deadline rather than the thread's context:
// a stop request must not cut a commit in half, but a broker that stopped
// answering must not hang the thread forever either.
func (th *thread) commitBounded() error {
	ctx, cancel := context.WithTimeout(th.app.killCtx, th.app.cfg.RebalanceTimeout)
	defer cancel()
	start := time.Now()
	err := th.commit(ctx)
	th.app.metrics.commitLatency.Observe(time.Since(start).Seconds())
	return err
}

// commit makes everything processed so far durable, in the order that keeps
// at-least-once: store writes go to the changelogs, the producer is flushed
// and every record acknowledged, the writes enter the stores with their new
// changelog positions, and only then are input offsets committed.
func (th *thread) commit(ctx context.Context) error {
	th.lastCommit = time.Now()
	running := th.runningTasks()
	if len(running) == 0 {
		return nil
	}
	for _, t := range running {
		if err := t.Flush(); err != nil {
			return fmt.Errorf("runtime: commit: task %s: %w", t.ID(), err)
		}
	}
	// From here on the producer's Flush, or the transaction's end, covers
	// every record the tasks sent.
	th.out.flush()
	acks := new(changelog.Offsets)
	for _, t := range running {
		for _, w := range t.PendingChangelog() {
			changelog.Send(context.Background(), th.cl, w.Topic, w.Partition, w.Entries, acks)
		}
	}
	if th.sess != nil {
		return th.commitTransaction(ctx, running, acks)
	}
	if err := th.cl.Flush(ctx); err != nil {
		return fmt.Errorf("runtime: commit: flush producer: %w", err)
	}
	if err := th.produceFailed(); err != nil {
		return fmt.Errorf("runtime: commit: %w", err)
	}
	if err := acks.Err(); err != nil {
		return fmt.Errorf("runtime: commit: changelog: %w", err)
	}
	if err := th.writeStores(running, acks.Last); err != nil {
		return err
	}
	offsets := make(map[string]map[int32]kgo.EpochOffset)
	perTask := make(map[task.ID]map[string]int64)
	for _, t := range running {
		o := t.OffsetsToCommit()
		if len(o) == 0 {
			continue
		}
		perTask[t.ID()] = o
		for topic, off := range o {
			if offsets[topic] == nil {
				offsets[topic] = make(map[int32]kgo.EpochOffset)
			}
			offsets[topic][t.ID().Partition] = kgo.EpochOffset{Epoch: -1, Offset: off}
		}
	}
	if len(offsets) == 0 {
		return nil
	}
	var commitErr error
	th.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			commitErr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if e := kerr.ErrorForCode(p.ErrorCode); e != nil && commitErr == nil {
					commitErr = fmt.Errorf("%s/%d: %w", t.Topic, p.Partition, e)
				}
			}
		}
	})
	if commitErr != nil {
		return fmt.Errorf("runtime: commit offsets: %w", commitErr)
	}
	for id, o := range perTask {
		th.tasks[id].MarkCommitted(o)
	}
	return nil
}

// errCrashed stops a thread that a test made crash in the middle of a commit.
var errCrashed = errors.New("runtime: crashed by test hook")

// crashAt is a test seam: when it returns true for a commit step, the
// thread behaves as if the process died there (network cut, nothing more
// written).
// It is set while stream threads run, so it is read atomically.
var crashAt atomic.Pointer[func(step string) bool]

func (th *thread) maybeCrash(step string) error {
	if f := crashAt.Load(); f == nil || !(*f)(step) {
		return nil
	}
	th.app.net.sever()
	th.killed.Store(true)
	return errCrashed
}

// commitTransaction ends the thread's transaction (exactly-once): the
// session flushes the producer, commits the consumed offsets inside the
// transaction and commits it. Only once the transaction has committed do the
// stores receive the writes, with their new changelog positions, so a store
// never holds a write of a transaction that did not commit. If the session
// aborts instead (a rebalance got in the way), the writes are dropped and
// the consumer is back at the last committed offsets.
func (th *thread) commitTransaction(ctx context.Context, running []*taskrun.Active, acks *changelog.Offsets) error {
	try := kgo.TryCommit
	if th.produceFailed() != nil || acks.Err() != nil {
		try = kgo.TryAbort
	}
	if err := th.maybeCrash("before-commit"); err != nil {
		return err
	}
	committed, err := th.sess.End(ctx, try)
	if err != nil {
		return th.transactionFailed(err)
	}
	if !committed {
		th.log.Info("transaction aborted; dropping uncommitted work", "tasks", len(running))
		th.discard(running)
		return th.begin()
	}
	if err := th.maybeCrash("after-commit"); err != nil {
		return err
	}
	// The transaction's commit marker sits right after its last record in
	// each changelog partition (the task is the partition's only writer),
	// so the store's position after the commit is past the marker too:
	// where a reader of the changelog, a standby, stands after it.
	pastMarker := func(topic string, partition int32) (int64, bool) {
		off, ok := acks.Last(topic, partition)
		return off + 1, ok
	}
	if err := th.writeStores(running, pastMarker); err != nil {
		return err
	}
	return th.begin()
}

// completeCommits writes the tasks' committed writes into their stores, all
// tasks at once: every store is a database of its own whose write waits for
// its own disk work, so writing them one after another would add those
// waits up on every commit.
func completeCommits(tasks []*taskrun.Active, last taskrun.LastOffsetFunc) error {
	if len(tasks) == 1 {
		if err := tasks[0].CompleteCommit(last); err != nil {
			return fmt.Errorf("runtime: commit: %w", err)
		}
		return nil
	}
	errs := make([]error, len(tasks))
	var wg sync.WaitGroup
	for i, t := range tasks {
		wg.Go(func() { errs[i] = t.CompleteCommit(last) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("runtime: commit: %w", err)
	}
	return nil
}

// begin starts the next transaction, clearing a produce error that belonged
// to the one just ended.
func (th *thread) begin() error {
	th.produceErr.Store(nil)
	th.dirty = false
	if err := th.sess.Begin(); err != nil {
		return fmt.Errorf("runtime: begin transaction: %w", err)
	}
	return nil
}

// abortTransaction aborts the open transaction after a revocation or loss
// dropped the work it held.
func (th *thread) abortTransaction() error {
	th.abortPending = false
	ctx, cancel := context.WithTimeout(th.app.killCtx, th.app.cfg.RebalanceTimeout)
	defer cancel()
	th.discard(th.runningTasks())
	th.out.flush()
	if _, err := th.sess.End(ctx, kgo.TryAbort); err != nil {
		return th.transactionFailed(err)
	}
	return th.begin()
}

// discard drops the uncommitted writes of tasks whose transaction aborted.
func (th *thread) discard(tasks []*taskrun.Active) {
	for _, t := range tasks {
		t.Abort()
	}
}

// transactionFailed handles an error ending a transaction. Being fenced
// means another instance owns this thread's work now (this one was a
// zombie: paused or cut off past its session): the thread drops its tasks
// without writing them to its stores and joins the group again with a new
// client.
func (th *thread) transactionFailed(err error) error {
	// A transaction that cannot end in time belongs to a member the group
	// has most likely dropped while it was cut off (the session waits for
	// a heartbeat that a blocked rebalance never delivers): treat it like
	// fencing. Reconnecting with the same transactional ID also aborts it.
	stuck := errors.Is(err, context.DeadlineExceeded) && !th.stopping.Load() && th.app.killCtx.Err() == nil
	if !isFenced(err) && !stuck {
		return fmt.Errorf("runtime: end transaction: %w", err)
	}
	th.log.Warn("transaction cannot commit (fenced, or dropped from the group while cut off); dropping uncommitted work and rejoining", "err", err)
	return th.reconnect()
}

// reconnect drops the thread's tasks without committing and replaces its
// client: it leaves the group and joins it again as a new member. It is
// called with mu held, and releases it while the old client closes, since
// closing runs the revocation callback, which takes mu.
func (th *thread) reconnect() error {
	th.releaseClient()
	return th.connect()
}

// releaseClient drops the thread's tasks without committing and closes its
// client, which leaves the group. It is called with mu held, and releases
// it while the client closes.
func (th *thread) releaseClient() {
	th.dropAll()
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
	th.dropAll()
	th.abortPending = false
	th.sess = nil
}

// isFenced reports whether a transactional error means the producer was
// fenced by a newer one with the same transactional ID or the group moved
// on without this member.
func isFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.InvalidProducerIDMapping) || errors.Is(err, kerr.FencedInstanceID)
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

// onAssignment receives the balancer's decoded assignment, just before
// onAssigned runs. It must not block.
//
// A cooperative member that loses tasks revokes them right after this,
// once the thread lets the rebalance go on; asking the thread to commit
// first means the revocation usually finds nothing uncommitted, which under
// exactly-once spares the kept tasks an aborted transaction.
func (th *thread) onAssignment(info assignor.AssignmentInfo) {
	prev := th.info.Swap(&info)
	th.joining.Store(false)
	if th.cooperative && prev != nil && slices.ContainsFunc(prev.Active, func(id task.ID) bool { return !slices.Contains(info.Active, id) }) {
		th.rebalancePending.Store(true)
	}
	th.app.assignmentReceived(th, info)
}

// onAssigned starts the active tasks of a new assignment: each takes its
// stores from the registry when they are open here (idle since the
// revocation, or a standby being promoted) and restores only what they
// lack. Then the registry brings standbys in line.
func (th *thread) onAssigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	th.mu.Lock()
	defer th.mu.Unlock()
	info := th.info.Load()
	if info == nil {
		th.app.fail(errors.New("runtime: assigned partitions without an assignment from the balancer"))
		return
	}
	for _, id := range info.Active {
		if _, ok := th.tasks[id]; ok {
			continue
		}
		if !th.startActive(id) {
			// Its input stays paused until the task starts.
			th.cl.PauseFetchPartitions(th.inputPartitions(id))
			th.waiting[id] = true
		}
	}
	th.waitingAny.Store(len(th.waiting) > 0)
	th.app.registry.setShare(th.idx, *info)
	th.app.metrics.rebalances.Inc()
	th.assignments.Add(1)
	th.assigned.Store(true)
	th.log.Info("assigned", "active", len(info.Active), "standby", len(info.Standby), "warmup", len(info.Warmup))
	th.app.maybeRunning()
}

// startActive creates an active task around the stores the registry hands
// over (or opens them) and starts restoring it. It returns false, doing
// nothing, when another thread of this instance still holds the task.
func (th *thread) startActive(id task.ID) bool {
	stores, held := th.app.registry.claimActive(th, id)
	if held {
		return false
	}
	t, err := taskrun.NewActive(taskrun.Config{
		ID:        id,
		AppID:     th.app.cfg.ApplicationID,
		Topology:  th.app.topo,
		Changelog: th.app.changelogTopic,
		Open:      th.app.openStore,
		Stores:    stores,
		Budget:    th.budget,
		Sender:    th,
		Logger:    th.log,
	})
	if err != nil {
		th.app.registry.forget(th, id)
		th.app.fail(err)
		return true
	}
	th.tasks[id] = t
	th.lastTask = nil
	err = th.startRestoring(t)
	th.app.registry.activeStarted(th, t)
	if err != nil {
		th.app.fail(err)
	}
	return true
}

// startWaiting starts the assigned tasks that were held by another thread
// when the assignment came, once that thread has let them go.
func (th *thread) startWaiting() {
	if len(th.waiting) == 0 {
		return
	}
	for _, id := range slices.SortedFunc(maps.Keys(th.waiting), task.ID.Compare) {
		if th.startActive(id) {
			delete(th.waiting, id)
		}
	}
	th.waitingAny.Store(len(th.waiting) > 0)
}

// startRestoring pauses a task's input and hands its changelogs to the
// restorer; the task runs once they are caught up.
func (th *thread) startRestoring(t *taskrun.Active) error {
	if err := t.StartRestoring(); err != nil {
		return err
	}
	th.cl.PauseFetchPartitions(th.inputPartitions(t.ID()))
	return th.rest.register(t)
}

// restoreStep applies a batch of changelog records to restoring tasks and
// starts those that caught up.
func (th *thread) restoreStep() error {
	done, err := th.rest.finished()
	if err != nil {
		return err
	}
	for _, id := range done {
		t, ok := th.tasks[id]
		if !ok || t.State() != task.Restoring {
			continue
		}
		if err := t.Restored(); err != nil {
			return err
		}
		th.app.registry.activeRunning(t)
		th.cl.ResumeFetchPartitions(th.inputPartitions(id))
	}
	return nil
}

// onRevoked gives up tasks. An eager member gives up all of them at every
// rebalance; a cooperative one only those whose partitions it lost (see
// revokeSome).
func (th *thread) onRevoked(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
	if th.stopping.Load() {
		// The thread is shutting down: it closes its tasks itself, and may
		// be holding mu right now while its final commit waits for the
		// transactional session's lock, which the session holds while it
		// runs this callback (a rebalance the last poll let through).
		// Waiting for mu here would deadlock Close.
		return
	}
	th.mu.Lock()
	defer th.mu.Unlock()
	th.assigned.Store(false)
	th.app.rebalanceStarted()
	if th.cooperative {
		th.revokeSome(ctx, lost)
		return
	}
	defer th.unassigned()
	if th.halted {
		th.dropAll()
		return
	}
	if th.sess != nil {
		// The session aborts a transaction a revocation interrupts; the
		// thread committed just before allowing the rebalance when it
		// could, so this drops at most what came after.
		th.discard(th.runningTasks())
		th.abortPending = true
		th.parkAll()
		return
	}
	if err := th.commit(ctx); err != nil {
		th.log.Warn("commit on revocation failed; dropping uncommitted work", "err", err)
		th.dropAll()
		return
	}
	th.parkAll()
}

// revokeSome is a cooperative revocation. At the end of every group session
// it gets nothing: the thread keeps its tasks and processes them through the
// rebalance. After a sync that took tasks away it gets their partitions,
// and commits the thread's work before it parks them: a task's partitions
// go to their next owner only once its work is committed.
//
// Under exactly-once one transaction spans every task of the thread, and
// this callback cannot end it (the session holds the lock that ending
// needs). The thread commits it just before it lets the revocation run
// (onAssignment asks it to); if work came in since, the revoked tasks'
// share cannot be committed alone, so the whole transaction is aborted,
// every task rewinds to its last commit, and the kept tasks process their
// share again. Either way the session aborts the next transaction to end,
// so the thread aborts it, empty, before processing more.
func (th *thread) revokeSome(ctx context.Context, lost map[string][]int32) {
	if len(lost) == 0 {
		th.joining.Store(true)
		return
	}
	var revoked []*taskrun.Active
	for topic, ps := range lost {
		sub, ok := th.app.plan.topicSub[topic]
		if !ok {
			continue
		}
		for _, p := range ps {
			id := task.ID{SubTopology: sub, Partition: p}
			delete(th.waiting, id)
			if t, ok := th.tasks[id]; ok && !slices.Contains(revoked, t) {
				revoked = append(revoked, t)
			}
		}
	}
	th.waitingAny.Store(len(th.waiting) > 0)
	// Until its next assignment, the registry keeps the parked stores
	// open for whichever thread claims them.
	th.app.registry.revoked(th.idx)
	th.log.Info("revoking tasks", "tasks", len(revoked), "kept", len(th.tasks)-len(revoked))
	switch {
	case th.halted:
		for _, t := range revoked {
			th.closeTask(t, false)
		}
		return
	case th.sess != nil:
		if th.dirty {
			th.log.Info("tasks revoked while the transaction holds work; aborting it for every task of the thread")
			th.discard(th.runningTasks())
		}
		th.abortPending = true
	default:
		if err := th.commit(ctx); err != nil {
			// The kept tasks' next commit meets the same failure and
			// stops the thread; the revoked ones must go now.
			th.log.Warn("commit on revocation failed; dropping the revoked tasks' uncommitted work", "err", err)
			for _, t := range revoked {
				th.closeTask(t, false)
			}
			return
		}
	}
	th.revokedTasks.Add(int64(len(revoked)))
	for _, t := range revoked {
		th.rest.unregister(t)
		th.app.registry.park(t)
		delete(th.tasks, t.ID())
		th.lastTask = nil
	}
}

// unassigned forgets the tasks still waiting to start and tells the
// registry that the thread's next assignment is not yet known.
func (th *thread) unassigned() {
	clear(th.waiting)
	th.waitingAny.Store(false)
	th.app.registry.revoked(th.idx)
}

// parkAll hands every task's open stores to the registry after a
// revocation. Eager rebalancing revokes everything; the stores stay open, so
// a task assigned back — to this thread or another, as active or standby —
// keeps its state.
func (th *thread) parkAll() {
	th.revokedTasks.Add(int64(len(th.tasks)))
	for _, t := range th.tasks {
		th.rest.unregister(t)
		th.app.registry.park(t)
		delete(th.tasks, t.ID())
		th.lastTask = nil
	}
}

func (th *thread) onLost(_ context.Context, _ *kgo.Client, _ map[string][]int32) {
	if th.stopping.Load() {
		// The thread is shutting down: it closes its tasks itself, and may
		// be holding mu right now while its final commit waits for the
		// transactional session's lock, which the session holds while it
		// runs this callback (a rebalance the last poll let through).
		// Waiting for mu here would deadlock Close.
		return
	}
	th.mu.Lock()
	defer th.mu.Unlock()
	th.assigned.Store(false)
	th.joining.Store(false)
	th.app.rebalanceStarted()
	defer th.unassigned()
	th.log.Warn("partitions lost; closing tasks without committing")
	th.dropAll()
	if th.sess != nil {
		th.abortPending = true
	}
}

// dropAll closes every task without committing: the stores keep what their
// recorded positions cover and nothing more.
func (th *thread) dropAll() {
	for _, t := range th.tasks {
		th.closeTask(t, false)
	}
}

func (th *thread) closeTask(t *taskrun.Active, clean bool) {
	th.rest.unregister(t)
	th.app.registry.closeActive(t, clean)
	delete(th.tasks, t.ID())
	th.lastTask = nil
}

// die is shutdown after Kill: the network is already cut, so leaving the
// group cannot reach the broker; tasks close without committing.
func (th *thread) die() {
	th.mu.Lock()
	th.dropAll()
	th.mu.Unlock()
	// A cancelled context makes the leave-group attempt return at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	th.cl.LeaveGroupContext(ctx)
	th.cl.AllowRebalance()
	th.cl.Close()
	th.out.close()
	th.rest.close()
}

// shutdown commits (when the thread stopped cleanly), leaves the group and
// closes every task.
func (th *thread) shutdown(clean bool) {
	th.mu.Lock()
	if clean {
		if err := th.commitBounded(); err != nil {
			th.log.Warn("final commit failed", "err", err)
			clean = false
			th.dropAll()
		}
	} else {
		th.dropAll()
	}
	th.mu.Unlock()
	// Leaving the group runs the revocation callback, which takes mu.
	th.cl.CloseAllowingRebalance()
	th.mu.Lock()
	// After the close: the revocation callback commits through the outbox.
	th.out.close()
	for _, t := range th.tasks {
		th.closeTask(t, clean)
	}
	th.mu.Unlock()
	th.rest.close()
}

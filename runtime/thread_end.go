package runtime

// A stream thread's group client, made and replaced, and how its loop ends: its error policy, stop, kill and exit.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/groupproto"
	"github.com/eddystreams/eddy/internal/instancecore"
	"github.com/eddystreams/eddy/internal/threadcore"
)

// threadFetchMaxBytes bounds one fetch of a stream thread's consumer. It is
// a quarter of a changelog Reader's (changelog.FetchMaxBytes) because the
// records of a buffered fetch are held decoded until polled: with small
// records a fetch of 4 MiB on the wire is ~50 MiB of kgo.Records, and one
// is being polled while the next is buffered. A smaller fetch also means
// less garbage per poll; counting throughput did not drop (eddybench
// -only m, c).
const threadFetchMaxBytes = 1 << 20

// connect creates the thread's group client: a consumer and producer in
// one, and under exactly-once a transactional session whose transactional
// ID is stable across restarts, so a restarted instance fences its former
// self and aborts whatever transaction it left open.
func (th *thread) connect() error {
	a, cfg := th.app, th.app.cfg
	bal, err := th.balancer()
	if err != nil {
		return err
	}
	if !th.connected {
		th.connected = true
		th.core = threadcore.New(th.coreConfig(bal.IsCooperative()))
	}
	// The coordinator may complete a round before this thread's join
	// arrives; a leader waits for it (see localJoins).
	instance := ""
	if cfg.StaticMembership {
		instance = th.instanceID()
	}
	a.joins.connecting(th.idx, instance)
	hook := &joinHook{th: th, static: cfg.StaticMembership}
	opts := th.clientOpts(bal, hook)
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

// balancer is the thread's group balancer: the application's assignor,
// and the callback through which the sync's assignment reaches the
// thread (onAssignment).
func (th *thread) balancer() (*groupproto.Balancer, error) {
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
		return nil, fmt.Errorf("runtime: balancer: %w", err)
	}
	return bal, nil
}

// clientOpts are the options of the thread's group client, whichever the
// guarantee: its group, callbacks, fetching and producing.
func (th *thread) clientOpts(bal *groupproto.Balancer, hook *joinHook) []kgo.Opt {
	a, cfg := th.app, th.app.cfg
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
	return opts
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

// failed tells the core that the loop stopped on an error (a commit or
// abort that failed may have told it already).
func (th *thread) failed() {
	th.stepLogged(threadcore.Event{Kind: threadcore.EvFailed})
}

// stepLogged steps the core where nothing can return an error: one is
// logged, and fails the App when the core refused the event (a bug).
func (th *thread) stepLogged(e threadcore.Event) {
	th.logStepErr(e, th.step(nil, e))
}

// logStepErr is what stepLogged does with the error of stepping e.
func (th *thread) logStepErr(e threadcore.Event, err error) {
	if err == nil {
		return
	}
	if errors.Is(err, threadcore.ErrRefused) {
		th.app.fail(err)
		return
	}
	th.log.Warn("stream thread step failed", "event", e.String(), "err", err)
}

// recover carries out what the instance core decides for an error that
// stopped the loop (OnStreamThreadError and the replacement budget, see
// registry.threadFailed). It reports whether the loop should run again,
// and the error the thread stops with otherwise.
func (th *thread) recover(err error) (bool, error) {
	th.failed()
	key := failureKey(err)
	a, ok := th.app.registry.threadFailed(th.idx, th.incarnationNow(), key)
	if !ok {
		return false, err
	}
	switch a.Kind {
	case instancecore.ActReplaceThread:
		th.log.Error("stream thread failed; replacing it: its uncommitted work is dropped and it joins the group again", "err", err, "failures_in_a_row", a.Failures)
		was := th.incarnationNow()
		rerr := th.step(nil, threadcore.Event{Kind: threadcore.EvReplace})
		if th.incarnationNow() != was {
			// Its client closed: the thread it was has exited, whether
			// or not its replacement could connect.
			th.app.registry.threadExited(th.idx, was, true)
		}
		if rerr != nil {
			return false, errors.Join(err, rerr)
		}
		th.app.replaced.Add(1)
		return true, nil
	case instancecore.ActShutdownApplication:
		th.halt()
		th.app.requestApplicationShutdown(err)
		return true, nil
	}
	if a.Failures > 0 {
		return false, fmt.Errorf("runtime: stream thread failed %d times in a row on the same %s; not replacing it again: %w", a.Failures, key, err)
	}
	return false, err
}

// halt makes the thread stop processing for good: its tasks close without
// committing (under exactly-once the open transaction is aborted), and
// from now on it only polls, so that it keeps its place in the group for
// the rebalance that carries ShutdownApplication to every member.
func (th *thread) halt() {
	if err := th.step(nil, threadcore.Event{Kind: threadcore.EvHalt}); err != nil {
		th.log.Warn("halting the thread: aborting its transaction failed", "err", err)
	}
}

// reconnect replaces the thread's client (ActReconnect): it leaves the
// group and joins it again as a new member, so every partition it is given
// again is read from the group's committed offset rather than from where
// the old client had got to. The core closed the thread's tasks first.
// Closing the old client runs its revocation callbacks, which the core
// takes while this batch is in flight (threadcore.Event.Closing); the new
// client's wait until it has landed.
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
	if cause == threadcore.CauseReplace {
		// What the group tells from now on is the replacement's.
		th.incarnation.Add(1)
	}
	return th.connect()
}

// releaseClient closes the thread's client, which leaves the group; its
// callbacks are marked as the closing client's while it closes.
func (th *thread) releaseClient() {
	oldSess, oldCl := th.sess, th.cl
	th.markClosing(oldCl)
	if oldSess != nil {
		oldSess.AllowRebalance()
		oldSess.Close()
	} else {
		oldCl.AllowRebalance()
		oldCl.Close()
	}
	th.markClosing(nil)
	th.out.close()
	th.sess = nil
}

// die is shutdown after Kill: the network is already cut, so leaving the
// group cannot reach the broker; tasks close without committing.
func (th *thread) die() {
	th.stepLogged(threadcore.Event{Kind: threadcore.EvKill})
	th.rest.close()
}

// shutdown commits (when the thread stopped cleanly), leaves the group and
// closes every task.
func (th *thread) shutdown(clean bool) {
	if err := th.step(nil, threadcore.Event{Kind: threadcore.EvStop, Clean: clean}); err != nil {
		th.log.Warn("final commit failed", "err", err)
	}
	th.rest.close()
}

// exit leaves the group and closes the client and the tasks the core
// names (ActExit). Leaving runs the revocation callback, marked as the
// closing client's (it changes nothing: the core has exited).
func (th *thread) exit(a threadcore.Action) {
	cl := th.cl
	th.markClosing(cl)
	defer th.markClosing(nil)
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
	// After the close: a revocation callback may have committed through
	// the outbox.
	th.out.close()
	th.closeTasks(released(a), a.Clean)
}

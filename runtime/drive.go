package runtime

// How a stream thread drives its core (internal/threadcore): the loop, the
// rebalance callbacks and the sender turn what they observe into events,
// and step, the one way in, carries out the actions the core answers with,
// feeding the outcomes of claims, processing, commits, aborts and
// reconnections back to it.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/eddystreams/eddy/internal/threadcore"
)

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

// step feeds an event to the core and carries out the actions it calls
// for: every event reaches the core here, stamped with the time. It is
// called with mu held. ctx bounds commits and aborts; when nil, they are
// bounded by RebalanceTimeout rather than the thread's context, so that a
// stop request does not cut a commit in half while a broker that stopped
// answering cannot hang the thread either. The error is the one
// that stops the loop, if any: the core is then Failed, or the error came
// from an action without an outcome (the loop's exit feeds EvFailed).
func (th *thread) step(ctx context.Context, e threadcore.Event) error {
	if e.Kind != threadcore.EvSent && e.At.IsZero() {
		// The core's only clock; a send needs none.
		e.At = time.Now()
	}
	out, err := th.core.Step(e)
	if err != nil {
		return fmt.Errorf("runtime: thread %d: %w", th.idx, err)
	}
	if e.Kind == threadcore.EvSent {
		// Every sink record: the core answers nothing.
		return nil
	}
	// Made when a commit or abort first needs it: most steps have
	// neither.
	var cancel context.CancelFunc
	defer func() {
		if cancel != nil {
			cancel()
		}
	}()
	opCtx := func() context.Context {
		if ctx == nil {
			ctx, cancel = context.WithTimeout(th.app.killCtx, th.app.cfg.RebalanceTimeout)
		}
		return ctx
	}
	var queue []threadcore.Event
	var stopErr error
	for {
		// Actions may unlock mu (a reconnection closes the old client,
		// whose callbacks step the core): keep this batch.
		for _, a := range slices.Clone(out) {
			next, err := th.do(opCtx, a)
			if err != nil {
				stopErr = err
			}
			if len(next) > 0 {
				queue = append(queue, next...)
				if a.Kind != threadcore.ActClaim {
					break
				}
			}
			if err != nil && len(next) == 0 {
				return err
			}
		}
		if len(queue) == 0 {
			break
		}
		e, queue = queue[0], queue[1:]
		e.At = time.Now()
		if out, err = th.core.Step(e); err != nil {
			return fmt.Errorf("runtime: thread %d: %w", th.idx, err)
		}
	}
	return stopErr
}

// do carries out one action; next is its outcome, for actions that have
// one. err stops the loop.
func (th *thread) do(ctx func() context.Context, a threadcore.Action) (next []threadcore.Event, err error) {
	outcome := func(k threadcore.EventKind) []threadcore.Event { return []threadcore.Event{{Kind: k, Task: a.Task}} }
	failed := func(k threadcore.EventKind, err error) ([]threadcore.Event, error) {
		cause := th.cause(err)
		if cause == threadcore.CauseFatal {
			return []threadcore.Event{{Kind: k, Cause: cause}}, err
		}
		th.log.Warn("commit or abort failed", "cause", cause, "err", err)
		return []threadcore.Event{{Kind: k, Cause: cause}}, nil
	}
	switch a.Kind {
	case threadcore.ActClaim:
		th.wakePoll()
		return []threadcore.Event{th.startActive(a.Task)}, nil
	case threadcore.ActPause:
		th.cl.PauseFetchPartitions(th.inputPartitions(a.Task))
	case threadcore.ActResume:
		t := th.task(a.Task)
		if t == nil {
			return nil, fmt.Errorf("runtime: thread %d: task %s restored but not held", th.idx, a.Task)
		}
		if err := t.Restored(); err != nil {
			return nil, err
		}
		th.app.registry.activeRunning(t)
		th.puncts.Check(t)
		th.cl.ResumeFetchPartitions(th.inputPartitions(a.Task))
	case threadcore.ActPark:
		th.revokedTasks.Add(int64(len(a.Tasks)))
		for _, t := range released(a) {
			th.dropInput(t.ID())
			th.rest.unregister(t)
			th.app.registry.park(th, t)
		}
	case threadcore.ActClose:
		for _, t := range released(a) {
			th.dropInput(t.ID())
		}
		th.closeTasks(released(a), a.Clean)
	case threadcore.ActDiscard:
		// The consumer goes back to the last commit: what the tasks
		// hold comes again.
		for _, t := range th.activeTasks(a.Tasks) {
			th.dropInput(t.ID())
			t.Abort()
		}
	case threadcore.ActProcess:
		th.processing = true
		err := th.processPolled()
		return th.processed, err
	case threadcore.ActFlush:
		th.commitStart = time.Now()
		th.commits.Add(1)
		if err := th.committer.flush(ctx(), th.commitTasks()); err != nil {
			return failed(threadcore.EvCommitFailed, err)
		}
	case threadcore.ActCommit:
		aborted, err := th.committer.commit(ctx(), th.commitTasks(), len(a.Tasks) > 0)
		th.app.metrics.commitLatency.Observe(time.Since(th.commitStart).Seconds())
		switch {
		case err != nil:
			return failed(threadcore.EvCommitFailed, err)
		case aborted:
			return outcome(threadcore.EvCommitAborted), nil
		}
		return outcome(threadcore.EvCommitted), nil
	case threadcore.ActAbortTxn:
		if err := th.committer.abort(ctx()); err != nil {
			return failed(threadcore.EvAbortFailed, err)
		}
		return outcome(threadcore.EvAborted), nil
	case threadcore.ActBegin:
		return nil, th.committer.begin()
	case threadcore.ActPunctuate:
		return nil, th.punctuate()
	case threadcore.ActPurge:
		th.app.purge.afterCommit(th.idx, th.cl)
	case threadcore.ActUnsettle:
		th.app.rebalanceStarted()
	case threadcore.ActRegistryRevoked:
		th.app.registry.revoked(th.idx, th.incarnationNow())
	case threadcore.ActReconnect:
		th.dropInputs()
		if err := th.reconnect(a.Cause); err != nil {
			return nil, err
		}
		return outcome(threadcore.EvReconnected), nil
	case threadcore.ActExit:
		th.dropInputs()
		th.exit(a)
	case threadcore.ActOpenAhead:
		th.openAhead(a.Tasks)
	case threadcore.ActTakeShare:
		th.takeShare()
	case threadcore.ActPublish:
		// The tasks first: whoever sees the thread settled (and so the
		// App Running) sees the tasks it settled with.
		th.publishTasks()
		th.settled.Store(a.Settled)
		th.wakePoll() // the loop's pass moves the App to Running

	}
	return nil, nil
}

package runtime

// How a stream thread drives its core (internal/threadcore): the loop and
// the rebalance callbacks turn what they observe into events, and step,
// the one way in, steps the core under mu, then carries out the batch it
// answers with, mu released, feeding the outcomes of claims, processing,
// commits, aborts and reconnections back to it in the batch's flight,
// which it then lands.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/eddystreams/eddy/internal/heldlog"

	"github.com/twmb/franz-go/pkg/kgo"

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

// step feeds an event to the core and carries out the batch it answers
// with. It is called without mu: it waits, under mu, until the core admits
// the event (threadcore.Core.Admits: nothing is in flight, or the event
// may come in meanwhile), steps it, and carries the batch out with mu
// released (carry). ctx bounds commits and aborts; when nil, they are
// bounded by RebalanceTimeout rather than the thread's context, so that a
// stop request does not cut a commit in half while a broker that stopped
// answering cannot hang the thread either. The error is the one that
// stops the loop, if any: the core is then Failed, or the error came from
// an action without an outcome (the loop's exit feeds EvFailed).
func (th *thread) step(ctx context.Context, e threadcore.Event) error {
	th.enter(&e, nil)
	return th.stepEntered(ctx, e)
}

// enter takes mu and waits until the core admits e: while a batch is in
// flight (carried out by this thread's loop or by a rebalance callback)
// the core holds other events back, and landing a batch wakes the
// waiters. cl is the client whose callback brings e, nil for the loop's
// own events: e is marked as the closing client's (Closing) when it is,
// which may become so while the callback waits (a Reconnect or Exit in
// flight closing it, see markClosing). It returns with mu held.
func (th *thread) enter(e *threadcore.Event, cl *kgo.Client) {
	th.mu.Lock()
	for {
		e.Closing = cl != nil && cl == th.closing
		if th.core.Admits(*e) {
			return
		}
		th.landed.Wait()
	}
}

// markClosing records the client a Reconnect or Exit is about to close, or
// nil once it is closed, and wakes the callbacks of that client waiting to
// come in: closing waits for them.
func (th *thread) markClosing(cl *kgo.Client) {
	th.mu.Lock()
	defer th.mu.Unlock()
	th.closing = cl
	th.landed.Broadcast()
}

// stepEntered steps e, which enter admitted, releases mu and carries out
// the batch the core answers with.
func (th *thread) stepEntered(ctx context.Context, e threadcore.Event) error {
	return th.stepEnteredLogging(ctx, e, nil)
}

// stepEnteredLogging is stepEntered for a caller that gathered log lines
// while it held mu: they are written once mu is released, before the
// batch is carried out, since the logger is user code.
func (th *thread) stepEnteredLogging(ctx context.Context, e threadcore.Event, logs heldlog.Lines) error {
	out, err := th.stepLocked(e)
	th.mu.Unlock()
	logs.Write(th.log)
	if err != nil || len(out) == 0 {
		return err
	}
	return th.carry(ctx, out)
}

// stepLocked steps the core, with mu held, and returns a copy of its
// batch, which outlives mu. The sends made since the last step are
// reported first (EvSent): the sender only marks them (Send), since it
// runs inside actions, without mu.
func (th *thread) stepLocked(e threadcore.Event) ([]threadcore.Action, error) {
	th.reportSent()
	if e.At.IsZero() {
		// The core's only clock.
		e.At = time.Now()
	}
	out, err := th.core.Step(e)
	if err != nil {
		return nil, fmt.Errorf("runtime: thread %d: %w", th.idx, err)
	}
	return slices.Clone(out), nil
}

// reportSent tells the core of the sends since it last heard (EvSent,
// which every mode takes and which answers nothing). It is called with mu
// held.
func (th *thread) reportSent() {
	if th.sent.Load() && th.sent.Swap(false) {
		_, _ = th.core.Step(threadcore.Event{Kind: threadcore.EvSent})
	}
}

// carry carries out a batch in flight, in order, with mu released: no
// lock is held across user code (Process, Punctuate, a flush's cache
// evictions) or the broker's I/O (Flush, Commit, AbortTxn, Reconnect,
// Exit). The outcome of an action that has one is stepped back in the
// same flight, before the rest of the batch, and its own batch carried
// out in turn; the flight then lands, which lets held events in.
func (th *thread) carry(ctx context.Context, out []threadcore.Action) error {
	defer th.land()
	// Made when a commit or abort first needs it: most batches have
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
		for _, a := range out {
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
		var e threadcore.Event
		e, queue = queue[0], queue[1:]
		th.mu.Lock()
		next, err := th.stepLocked(e)
		th.mu.Unlock()
		if err != nil {
			return err
		}
		out = next
	}
	return stopErr
}

// land tells the core that the batch in flight is carried out, and wakes
// the goroutines waiting to step an event it held back. A refused landing
// fails the App once mu is released: failing logs and tells the state
// listener, user code both.
func (th *thread) land() {
	th.mu.Lock()
	th.reportSent()
	err := th.core.Land()
	th.landed.Broadcast()
	th.mu.Unlock()
	if err != nil {
		th.app.fail(fmt.Errorf("runtime: thread %d: %w", th.idx, err))
	}
}

// lockIdle takes mu once nothing is in flight: the thread's tasks, inputs
// and restorer are then still until mu is released, since a batch begins
// only under mu.
func (th *thread) lockIdle() {
	th.mu.Lock()
	for th.core.Busy() {
		th.landed.Wait()
	}
}

// do carries out one action; next is its outcome, for actions that have
// one. err stops the loop.
func (th *thread) do(ctx func() context.Context, a threadcore.Action) (next []threadcore.Event, err error) {
	switch a.Kind {
	case threadcore.ActClaim, threadcore.ActPause, threadcore.ActResume, threadcore.ActPark, threadcore.ActClose,
		threadcore.ActDiscard, threadcore.ActOpenAhead:
		return th.doTasks(a)
	case threadcore.ActFlush, threadcore.ActCommit, threadcore.ActAbortTxn, threadcore.ActBegin:
		return th.doCommit(ctx, a)
	case threadcore.ActProcess:
		th.processing = true
		err := th.processPolled()
		return th.processed, err
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
		return []threadcore.Event{{Kind: threadcore.EvReconnected}}, nil
	case threadcore.ActExit:
		th.dropInputs()
		th.exit(a)
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

// doTasks carries out an action that starts, moves or lets go of tasks.
func (th *thread) doTasks(a threadcore.Action) ([]threadcore.Event, error) {
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
		t.Restored()
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
	case threadcore.ActOpenAhead:
		th.openAhead(a.Tasks)
	}
	return nil, nil
}

// doCommit carries out a step of the commit protocol (the committer's);
// a commit's or abort's outcome says whether it went through, and why not
// (threadcore.Cause), a fatal cause stopping the loop.
func (th *thread) doCommit(ctx func() context.Context, a threadcore.Action) ([]threadcore.Event, error) {
	outcome := func(k threadcore.EventKind) []threadcore.Event { return []threadcore.Event{{Kind: k}} }
	failed := func(k threadcore.EventKind, err error) ([]threadcore.Event, error) {
		cause := th.cause(err)
		if cause == threadcore.CauseFatal {
			return []threadcore.Event{{Kind: k, Cause: cause}}, err
		}
		th.log.Warn("commit or abort failed", "cause", cause, "err", err)
		return []threadcore.Event{{Kind: k, Cause: cause}}, nil
	}
	switch a.Kind {
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
	}
	return nil, nil
}

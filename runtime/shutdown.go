package runtime

// Stopping an App: instancecore.Shutdown decides the order, shutdownRun
// carries out each step and reports its outcome.

import (
	"context"
	"errors"
	"fmt"

	"github.com/eddystreams/eddy/internal/instancecore"
)

// shutdownRun is one shutdown of the App in progress.
type shutdownRun struct {
	a   *App
	ctx context.Context
	// threads are the stream threads as a Start in progress left them.
	threads []*thread
	// won is set once the shutdown holds the App (StepTake); a shutdown
	// that lost only waited for the one that won.
	won  bool
	errs []error
}

// shutdown stops the App as kind says, in the order the sequencer gives,
// and reports whether it was the App's shutdown (not one that waited for
// another) with the errors its steps met. ctx bounds the wait for the
// threads of a clean close.
func (a *App) shutdown(ctx context.Context, kind instancecore.ShutdownKind) (won bool, err error) {
	seq := instancecore.NewShutdown(kind, a.cfg.StaticMembership)
	run := &shutdownRun{a: a, ctx: ctx}
	for step := seq.Next(); step != instancecore.StepDone; step = seq.Next() {
		if err := seq.Report(run.do(step)); err != nil {
			// The run reports the step it was given: a refusal is a bug.
			panic(fmt.Sprintf("runtime: shutdown: %v", err))
		}
	}
	return run.won, errors.Join(run.errs...)
}

// do carries out one step and says what came of it.
func (r *shutdownRun) do(step instancecore.ShutdownStep) instancecore.ShutdownOutcome {
	a := r.a
	o := instancecore.ShutdownOutcome{Step: step}
	switch step {
	case instancecore.StepAskClose:
		a.closeAskedOnce.Do(func() { close(a.closeAsked) })
	case instancecore.StepSever:
		a.net.sever()
		a.killCancel()
	case instancecore.StepAwaitStart:
		// Start holds startMu until it returns.
		a.startMu.Lock()
		r.threads = a.threads
		a.startMu.Unlock()
		o.Threads = len(r.threads)
	case instancecore.StepKillThreads:
		for _, th := range r.threads {
			th.killed.Store(true)
			th.stop()
		}
	case instancecore.StepTake:
		r.won = a.closing.CompareAndSwap(false, true)
		o.Won = r.won
	case instancecore.StepAwaitDone:
		<-a.done
	case instancecore.StepPendingShutdown:
		a.setState(StatePendingShutdown, StateCreated, StateRebalancing, StateRunning)
	case instancecore.StepPendingError:
		a.setState(StatePendingError, StateRebalancing)
	case instancecore.StepStopThreads:
		for _, th := range r.threads {
			th.stop()
		}
	case instancecore.StepAwaitThreads:
		for _, th := range r.threads {
			o.Failed = r.failed(th.wait(r.ctx)) || o.Failed
		}
	case instancecore.StepAwaitExits:
		for _, th := range r.threads {
			<-th.exited
		}
	case instancecore.StepLeaveGroup:
		o.Failed = r.failed(a.leaveStatic(r.ctx))
	default:
		r.release(step)
	}
	return o
}

// failed records err, if any, and reports whether there was one.
func (r *shutdownRun) failed(err error) bool {
	if err != nil {
		r.errs = append(r.errs, err)
	}
	return err != nil
}

// release carries out a step that closes something the App holds; what
// a failed Start never made is not there to close.
func (r *shutdownRun) release(step instancecore.ShutdownStep) {
	a := r.a
	switch step {
	case instancecore.StepStopWatcher:
		if a.stopWatch != nil {
			a.stopWatch()
			<-a.watchDone
		}
	case instancecore.StepStopProbe:
		a.probeMu.Lock()
		if a.probe != nil {
			a.probe.Stop()
		}
		a.probeMu.Unlock()
	case instancecore.StepCloseFreshness:
		if a.fresh != nil {
			a.fresh.close()
		}
	case instancecore.StepCloseRegistry:
		if a.registry != nil {
			a.registry.close()
		}
	case instancecore.StepCloseAhead:
		a.ahead.close()
	case instancecore.StepStopGlobal:
		if a.global != nil {
			a.global.close()
		}
	case instancecore.StepClosePurger:
		a.purge.close()
	case instancecore.StepCloseRouter:
		a.router.close()
	case instancecore.StepCloseAdmin:
		if a.adminCl != nil {
			a.adminCl.Close()
			a.adminCl = nil
		}
	case instancecore.StepCloseLayout:
		a.closeLayout()
	case instancecore.StepCloseStateDir:
		if a.dir != nil {
			a.dir.close()
		}
	case instancecore.StepStopped:
		a.stopped()
	default:
		panic(fmt.Sprintf("runtime: no shutdown step %s", step))
	}
}

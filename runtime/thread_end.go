package runtime

// How a stream thread's loop ends: its error policy, its client's replacement, stop, kill and exit.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/eddystreams/eddy/internal/threadcore"
)

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
		was := th.incarnationNow()
		th.mu.Lock()
		rerr := th.step(nil, threadcore.Event{Kind: threadcore.EvReplace})
		th.mu.Unlock()
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
	if cause == threadcore.CauseReplace {
		// What the group tells from now on is the replacement's.
		th.incarnation.Add(1)
	}
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
	th.closeTasks(released(a), a.Clean)
}

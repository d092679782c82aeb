package runtime

// The registry's side of the threads' active tasks: claimed, started, parked between threads and closed.

import (
	"slices"
	"time"

	"github.com/eddystreams/eddy/internal/instancecore"
	"github.com/eddystreams/eddy/internal/taskrun"
	"github.com/eddystreams/eddy/task"
)

// park releases an active task that was just revoked (and committed),
// demoting it: its stores stay open, Parked, until the next assignment says
// where the task goes. The core closes a task that cannot be demoted.
func (r *registry) park(th *thread, t *taskrun.Active) {
	stores, err := t.Demote()
	if err != nil {
		r.log.Warn("demote task", "task", t.ID(), "err", err)
	}
	id := t.ID()
	var answer instancecore.ActionKind
	answered := false
	r.mu.Lock()
	ran := r.stateLocked(id) == task.Running
	acts := r.stepLocked(instancecore.Event{Kind: instancecore.EvRelease, Thread: th.idx, Incarnation: th.incarnationNow(), Task: id, Committed: true, Demoted: stores != nil},
		func(a instancecore.Action) {
			if a.Task != id {
				return
			}
			answer, answered = a.Kind, true
			if a.Kind != instancecore.ActPark {
				return
			}
			rep := r.reps[id]
			rep.stores, rep.standby = stores, nil
			rep.opened, rep.caughtUp = time.Now(), time.Time{}
			rep.ends, rep.endsConfirmed = nil, time.Time{}
			if ran {
				// A running task was its changelogs' only writer, and
				// committed before it was parked: it stands at their
				// ends. One still restoring stands wherever its
				// restoration got.
				rep.ends = positions(stores)
			}
		})
	r.unlock()
	r.carry(acts)
	switch {
	case answered && answer == instancecore.ActPark:
	case answered && answer == instancecore.ActCloseActive:
		r.closeTask(t, false)
	default:
		// A thread parks only tasks it started, which the core records
		// as its own, restoring or running: anything else is a bug
		// (logged by the refused event). The stores are not kept.
		r.log.Error("cannot park task; closing its stores", "task", id)
		for _, h := range stores {
			if err := h.Inner.Close(); err != nil {
				r.log.Warn("close store", "task", id, "store", h.Info.Name, "err", err)
			}
		}
	}
}

// claimActive hands a thread the open stores of a task it is to run as
// active, as the core answers its claim: parked stores (ActHandOver) or a
// standby's or warmup's (ActPromote). It returns no stores when the task's
// stores are not open here (ActOpenActive): the caller opens them, and
// until it reports the task started the core holds the task for it,
// Created, so nothing else opens the same directory. It returns held
// (ActHeld) when another thread of this instance still owns the task (that
// thread has not yet learnt that it lost it: it fell out of the group and
// has not noticed), or while the task's stores are being opened or closed;
// the caller must try again once they are let go.
//
// A promoted standby's reader may be writing a batch to its stores; that
// write is waited for outside mu, with the replica already the caller's, so
// queries keep reading it meanwhile and no decision acts on it.
func (r *registry) claimActive(th *thread, id task.ID) (stores []*taskrun.StoreHandle, held bool) {
	var answer instancecore.Action
	var promoted *taskrun.Standby
	var from task.State
	answered := false
	r.mu.Lock()
	r.threads[th.idx] = th
	holder := r.ownerLocked(id)
	from = r.stateLocked(id)
	acts := r.stepLocked(instancecore.Event{Kind: instancecore.EvClaim, Thread: th.idx, Incarnation: th.incarnationNow(), Task: id}, func(a instancecore.Action) {
		if a.Task != id || a.Thread != th.idx {
			return
		}
		answer, answered = a, true
		rep := r.reps[id]
		switch a.Kind {
		case instancecore.ActHandOver:
			// A parked active committed right before it was parked: its
			// position was the changelog's end then.
			rep.endsConfirmed = rep.opened
			stores = rep.stores
		case instancecore.ActPromote:
			rep.ends, rep.endsConfirmed = r.followedEndsLocked(rep)
			promoted, rep.standby = rep.standby, nil
			stores = rep.stores
		}
	})
	r.unlock()
	r.carry(acts)
	switch {
	case !answered:
		return nil, true
	case answer.Kind == instancecore.ActHeld && holder != nil && holder != th:
		r.log.Info("task assigned while another thread still holds it; waiting for its release", "task", id, "holder", holder.idx, "thread", th.idx)
		return nil, true
	case answer.Kind == instancecore.ActHeld:
		if holder == nil {
			r.log.Info("task assigned while its stores are being opened or closed; waiting for them", "task", id, "thread", th.idx)
		}
		return nil, true
	case promoted != nil:
		r.unfollow(id, stores)
		r.log.Info("promoting standby", "task", id, "thread", th.idx, "from", from.String())
		return promoted.Release(), false
	}
	return stores, false
}

// followedEndsLocked reads the changelog ends a standby last saw, and when
// the broker confirmed them (the oldest confirmation; zero if one was never
// confirmed).
func (r *registry) followedEndsLocked(rep *replica) (map[string]int64, time.Time) {
	ends := make(map[string]int64)
	var confirmed time.Time
	for i, h := range rep.stores {
		p, ok := r.follower.Progress(h.Changelog, rep.id.Partition)
		if ok && p.End >= 0 {
			ends[h.Changelog] = p.End
		}
		if !ok || p.EndConfirmed.IsZero() {
			confirmed = time.Time{}
			break
		}
		if i == 0 || p.EndConfirmed.Before(confirmed) {
			confirmed = p.EndConfirmed
		}
	}
	return ends, confirmed
}

// activeStarted records a task a thread now owns and restores: a replica
// it claimed moves from Created to Restoring (one it claimed open is
// Restoring already).
func (r *registry) activeStarted(th *thread, t *taskrun.Active) {
	r.mu.Lock()
	defer r.unlock()
	if rep := r.reps[t.ID()]; rep != nil && r.ownerLocked(t.ID()) == th {
		rep.stores = t.Stores()
	}
	r.stepLocked(instancecore.Event{Kind: instancecore.EvStarted, Thread: th.idx, Incarnation: th.incarnationNow(), Task: t.ID()}, nil)
}

// forget drops a replica a thread claimed but could not start; its stores
// are closed by the caller.
func (r *registry) forget(th *thread, id task.ID) {
	r.mu.Lock()
	acts := r.stepLocked(instancecore.Event{Kind: instancecore.EvClaimFailed, Thread: th.idx, Incarnation: th.incarnationNow(), Task: id}, nil)
	if _, ok := r.core.Replica(id); !ok {
		delete(r.reps, id)
	}
	r.unlock()
	r.carry(acts)
}

// activeRunning records that a task finished restoring and runs.
func (r *registry) activeRunning(t *taskrun.Active) {
	r.mu.Lock()
	defer r.unlock()
	if r.stateLocked(t.ID()) != task.Restoring {
		return
	}
	r.stepLocked(instancecore.Event{Kind: instancecore.EvRestored, Task: t.ID()}, nil)
	if rep := r.reps[t.ID()]; rep != nil {
		rep.caughtUp = time.Now()
	}
}

// closeActive closes a task a thread owns, for good; its directory is left
// on disk with its positions recorded. The task leaves the replicas queries
// see before its stores close.
func (r *registry) closeActive(th *thread, t *taskrun.Active, clean bool) {
	id := t.ID()
	r.mu.Lock()
	acts := r.stepLocked(instancecore.Event{Kind: instancecore.EvCloseActive, Thread: th.idx, Incarnation: th.incarnationNow(), Task: id, Committed: clean}, nil)
	closing := slices.ContainsFunc(acts, func(a instancecore.Action) bool {
		return a.Kind == instancecore.ActCloseActive && a.Task == id
	})
	r.unlock()
	r.carry(acts)
	if !closing {
		// Refused (a bug, logged): the task's stores are closed all the
		// same.
		if err := t.Close(clean); err != nil {
			r.log.Warn("close task", "task", id, "err", err)
		}
		return
	}
	r.closeTask(t, clean)
}

// closeTask carries out the core's ActCloseActive for t and reports its
// outcome.
func (r *registry) closeTask(t *taskrun.Active, clean bool) {
	id := t.ID()
	if err := t.Close(clean); err != nil {
		r.log.Warn("close task", "task", id, "err", err)
	}
	r.mu.Lock()
	acts := r.closedLocked(id, r.reps[id].positions)
	r.unlock()
	r.carry(acts)
}

// threadExited tells the core that a thread's incarnation exited,
// replaced by the next one or for good. The thread closed its actives
// first; any the core still records as its own are let go here: their
// stores, the ones the registry knows of, closed uncleanly.
func (r *registry) threadExited(idx, incarnation int, replaced bool) {
	r.mu.Lock()
	acts := r.stepLocked(instancecore.Event{Kind: instancecore.EvThreadExit, Thread: idx, Incarnation: incarnation, Replaced: replaced}, nil)
	var left []task.ID
	for _, a := range acts {
		if a.Kind == instancecore.ActCloseActive {
			left = append(left, a.Task)
		}
	}
	r.unlock()
	r.carry(acts)
	for _, id := range left {
		r.log.Error("stream thread exited still owning a task; closing its stores", "task", id, "thread", idx)
		r.mu.Lock()
		rep := r.reps[id]
		r.unlock()
		for _, h := range rep.stores {
			if err := h.Inner.Close(); err != nil {
				r.log.Warn("close store", "task", id, "store", h.Info.Name, "err", err)
			}
		}
		r.mu.Lock()
		acts := r.closedLocked(id, rep.positions)
		r.unlock()
		r.carry(acts)
	}
}

// threadFailed asks the core what becomes of a thread's incarnation that
// stopped on an error, failure naming it (failureKey): its answer is one
// of ActReplaceThread, ActShutdownApplication and ActStopThread, which
// the thread carries out. ok is false when the core refused the event (a
// bug, logged).
func (r *registry) threadFailed(idx, incarnation int, failure string) (decided instancecore.Action, ok bool) {
	r.mu.Lock()
	acts := r.stepLocked(instancecore.Event{Kind: instancecore.EvThreadFailed, Thread: idx, Incarnation: incarnation,
		Failure: failure, At: time.Now()}, func(a instancecore.Action) {
		switch a.Kind {
		case instancecore.ActReplaceThread, instancecore.ActShutdownApplication, instancecore.ActStopThread:
			decided, ok = a, true
		}
	})
	r.unlock()
	r.carry(acts)
	return decided, ok
}

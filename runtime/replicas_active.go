package runtime

// The registry's side of the threads' active tasks: claimed, started, parked between threads and closed.

import (
	"time"

	"github.com/eddystreams/eddy/internal/taskrun"
	"github.com/eddystreams/eddy/task"
)

// park takes the stores of an active task that was just revoked (and
// committed), demoting it: they stay open, Parked, until the next
// assignment says where the task goes. A task that cannot be demoted is
// closed instead.
func (r *registry) park(t *taskrun.Active) {
	stores, err := t.Demote()
	if err != nil {
		r.log.Warn("demote task", "task", t.ID(), "err", err)
		if stores == nil {
			r.closeActive(t, false)
			return
		}
	}
	r.mu.Lock()
	rep, ok := r.reps[t.ID()]
	ran := ok && rep.state() == task.Running
	if ok && r.moveLocked(rep, task.Parked) {
		rep.stores, rep.owner, rep.standby = stores, nil, nil
		rep.opened, rep.caughtUp = time.Now(), time.Time{}
		rep.ends, rep.endsConfirmed = nil, time.Time{}
		if ran {
			// A running task was its changelogs' only writer, and
			// committed before it was parked: it stands at their ends.
			// One still restoring stands wherever its restoration got.
			rep.ends = positions(stores)
		}
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	// A thread parks only tasks it started, which the registry records
	// as restoring or running: anything else is a bug (logged by the
	// refused transition). The stores are not kept.
	r.log.Error("cannot park task; closing its stores", "task", t.ID(), "recorded", ok)
	for _, h := range stores {
		if err := h.Inner.Close(); err != nil {
			r.log.Warn("close store", "task", t.ID(), "store", h.Info.Name, "err", err)
		}
	}
}

// claimActive hands a thread the open stores of a task it is to run as
// active, moving the replica to Restoring: parked stores (claimed back) or
// a standby's or warmup's (promotion). It returns no stores when the
// task's stores are not open here: the caller opens them, and until it
// reports the task started the registry holds the task for it, Created, so
// nothing else opens the same directory. It returns held when another
// thread of this instance still owns the task (that thread has not yet
// learnt that it lost it: it fell out of the group and has not noticed),
// or while a reconciliation opens or closes the task's stores; the caller
// must try again once they are let go.
//
// A promoted standby's reader may be writing a batch to its stores; that
// write is waited for outside mu, with the replica already the caller's, so
// queries keep reading it meanwhile and no plan acts on it.
func (r *registry) claimActive(th *thread, id task.ID) (stores []*taskrun.StoreHandle, held bool) {
	r.mu.Lock()
	if _, moving := r.moving[id]; moving {
		r.mu.Unlock()
		r.log.Info("task assigned while its stores are being opened or closed; waiting for them", "task", id, "thread", th.idx)
		return nil, true
	}
	rep, ok := r.reps[id]
	if !ok {
		delete(r.onDisk, id)
		rep = r.newReplica(id)
		rep.owner, rep.opened = th, time.Now()
		r.reps[id] = rep
		r.mu.Unlock()
		return nil, false
	}
	promoted := rep.standby
	from := rep.state()
	switch {
	case from == task.Parked:
		// A parked active committed right before it was parked: its
		// position was the changelog's end then.
		rep.endsConfirmed = rep.opened
	case from.Following():
		rep.ends, rep.endsConfirmed = r.followedEndsLocked(rep)
	default:
		r.mu.Unlock()
		if rep.owner != th {
			r.log.Info("task assigned while another thread still holds it; waiting for its release", "task", id, "holder", rep.owner.idx, "thread", th.idx)
		}
		return nil, true
	}
	// The replica stays visible to queries, now restoring, while the
	// thread builds the task around its stores.
	if !r.moveLocked(rep, task.Restoring) {
		r.mu.Unlock()
		return nil, true
	}
	rep.owner, rep.standby = th, nil
	stores = rep.stores
	r.mu.Unlock()
	if promoted != nil {
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
	defer r.mu.Unlock()
	rep, ok := r.reps[t.ID()]
	if !ok || rep.owner != th {
		rep = r.newReplica(t.ID())
		rep.owner, rep.opened = th, time.Now()
		r.reps[t.ID()] = rep
	}
	if rep.state() == task.Created {
		r.moveLocked(rep, task.Restoring)
	}
	rep.stores = t.Stores()
}

// forget drops a replica a thread claimed but could not start; its stores
// are closed by the caller.
func (r *registry) forget(th *thread, id task.ID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rep, ok := r.reps[id]; ok && rep.owner == th {
		r.moveLocked(rep, task.Closed)
		delete(r.reps, id)
	}
}

// activeRunning records that a task finished restoring and runs.
func (r *registry) activeRunning(t *taskrun.Active) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rep, ok := r.reps[t.ID()]; ok && r.moveLocked(rep, task.Running) {
		rep.caughtUp = time.Now()
	}
}

// closeActive closes a task a thread owns, for good; its directory is left
// on disk with its positions recorded. The task leaves the replicas queries
// see before its stores close, and stays moving until they have.
func (r *registry) closeActive(t *taskrun.Active, clean bool) {
	id := t.ID()
	pos := positions(t.Stores())
	r.mu.Lock()
	if rep, ok := r.reps[id]; ok {
		r.moveLocked(rep, task.Closed)
		delete(r.reps, id)
	}
	r.moving[id] = move{positions: pos}
	r.mu.Unlock()
	if err := t.Close(clean); err != nil {
		r.log.Warn("close task", "task", id, "err", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.doneMovingLocked(id)
	r.leftOnDiskLocked(id, pos)
}

func (r *registry) leftOnDiskLocked(id task.ID, pos map[string]int64) {
	if len(r.persistentLogged(id.SubTopology)) == 0 {
		return
	}
	r.onDisk[id] = diskState{positions: pos, since: time.Now()}
}

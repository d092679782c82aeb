package runtime

// The registry as the driver of the instance's core: events in under mu,
// actions carried out with mu released, outcomes stepped back.

import (
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/eddystreams/eddy/internal/instancecore"
	"github.com/eddystreams/eddy/internal/taskrun"
	"github.com/eddystreams/eddy/task"
)

// stepLocked steps the core with e, stamped with the time, and begins the
// actions it returns, in order: what each needs recorded at once, under mu, before its I/O (a
// replica's record made, the positions it reports while its stores close).
// own, if not nil, begins the caller's own actions: a claim's answer, or
// the park or close of its active, which only its caller can carry out. A
// refused event is a bug in the driver, logged (once mu is released, see
// unlock); it changes nothing.
func (r *registry) stepLocked(e instancecore.Event, own func(instancecore.Action)) []instancecore.Action {
	if e.At.IsZero() {
		// The core's only clock.
		e.At = time.Now()
	}
	out, err := r.core.Step(e)
	r.quiet.Broadcast()
	if err != nil {
		if ref, ok := errors.AsType[*instancecore.Refusal](err); ok && ref.Closing {
			r.logs.Add(slog.LevelDebug, "registry closed; event ignored", "event", e.String())
		} else {
			r.logs.Add(slog.LevelError, "registry event refused", "err", err)
		}
		return nil
	}
	acts := slices.Clone(out)
	for _, a := range acts {
		r.beginLocked(a, own)
	}
	return acts
}

// ownKind reports whether an action is carried out by the thread whose
// event called for it, rather than by carry.
func ownKind(k instancecore.ActionKind) bool {
	switch k {
	case instancecore.ActOpenActive, instancecore.ActHandOver, instancecore.ActPromote, instancecore.ActHeld,
		instancecore.ActPark, instancecore.ActCloseActive, instancecore.ActOpenAhead,
		instancecore.ActReplaceThread, instancecore.ActShutdownApplication, instancecore.ActStopThread:
		return true
	}
	return false
}

func (r *registry) beginLocked(a instancecore.Action, own func(instancecore.Action)) {
	rep := r.reps[a.Task]
	switch a.Kind {
	case instancecore.ActOpenActive:
		delete(r.disk, a.Task)
		r.reps[a.Task] = &replica{id: a.Task, opened: time.Now()}
	case instancecore.ActOpenStandby:
		r.reps[a.Task] = &replica{id: a.Task, positions: r.disk[a.Task].positions}
		delete(r.disk, a.Task)
	case instancecore.ActRetag:
		r.logs.Add(slog.LevelInfo, "standby retagged", "task", a.Task, "as", a.As.String())
	}
	if ownKind(a.Kind) && own != nil {
		own(a)
	}
	switch a.Kind {
	case instancecore.ActCloseStandby, instancecore.ActCloseParked, instancecore.ActCloseActive:
		if rep != nil {
			rep.positions = positions(rep.stores)
		}
	}
}

// carry carries out, with mu released, the actions of steps that are not
// a thread's own, and those their outcomes call for, until none is left:
// several at once (forStores), since an instance given thousands of
// standbys opens them all here. Adoptions, which open and close no store,
// go first so that they do not wait behind others.
func (r *registry) carry(acts []instancecore.Action) {
	acts = slices.DeleteFunc(acts, func(a instancecore.Action) bool { return ownKind(a.Kind) })
	for len(acts) > 0 {
		slices.SortStableFunc(acts, func(a, b instancecore.Action) int {
			return boolInt(a.Kind != instancecore.ActAdopt) - boolInt(b.Kind != instancecore.ActAdopt)
		})
		var mu sync.Mutex
		var next []instancecore.Action
		forStores(len(acts), func(i int) {
			more := r.do(acts[i])
			mu.Lock()
			next = append(next, more...)
			mu.Unlock()
		})
		acts = next
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// do carries out one action and steps the core with its outcome,
// returning the actions that calls for.
func (r *registry) do(a instancecore.Action) []instancecore.Action {
	id := a.Task
	switch a.Kind {
	case instancecore.ActOpenStandby:
		return r.openedLocking(id, r.openStandby(id, nil, a.As), false)
	case instancecore.ActAdopt:
		r.mu.Lock()
		stores := r.reps[id].stores
		r.unlock()
		return r.openedLocking(id, r.openStandby(id, stores, a.As), true)
	case instancecore.ActCloseStandby:
		r.mu.Lock()
		rep := r.reps[id]
		r.unlock()
		return r.closedLocking(id, r.closeStandby(rep))
	case instancecore.ActCloseParked:
		r.mu.Lock()
		rep := r.reps[id]
		r.unlock()
		for _, h := range rep.stores {
			if err := h.Inner.Close(); err != nil {
				r.log.Warn("close parked store", "task", id, "store", h.Info.Name, "err", err)
			}
		}
		return r.closedLocking(id, rep.positions)
	case instancecore.ActDelete:
		return r.deletedLocking(id, r.removeDir(id))
	case instancecore.ActReleaseAhead:
		return r.releaseAhead(a.Keep)
	case instancecore.ActRetag:
		return nil
	}
	r.log.Error("registry action without a driver", "action", a.String())
	return nil
}

// openedLocking records a standby or warmup that follows its changelogs,
// or could not start (sb nil: its stores are closed).
func (r *registry) openedLocking(id task.ID, sb *taskrun.Standby, adopted bool) []instancecore.Action {
	r.mu.Lock()
	defer r.unlock()
	rep := r.reps[id]
	switch {
	case sb == nil:
		delete(r.reps, id)
	case adopted:
		// The parked active committed right before it was parked: its
		// position was the changelog's end then, which the standby
		// reports until its reader lists the end.
		rep.endsConfirmed = rep.opened
	default:
		rep.ends, rep.endsConfirmed, rep.caughtUp = nil, time.Time{}, time.Time{}
	}
	if sb != nil {
		rep.standby, rep.stores, rep.opened, rep.positions = sb, sb.Stores(), time.Now(), nil
	}
	return r.stepLocked(instancecore.Event{Kind: instancecore.EvOpened, Task: id, OK: sb != nil}, nil)
}

// closedLocking records a replica whose stores are closed, its directory
// left on disk at positions left.
func (r *registry) closedLocking(id task.ID, left map[string]int64) []instancecore.Action {
	r.mu.Lock()
	defer r.unlock()
	return r.closedLocked(id, left)
}

func (r *registry) closedLocked(id task.ID, left map[string]int64) []instancecore.Action {
	delete(r.reps, id)
	kept := len(r.persistentLogged(id.SubTopology)) > 0
	if kept {
		r.disk[id] = diskState{positions: left}
	}
	return r.stepLocked(instancecore.Event{Kind: instancecore.EvClosed, Task: id, LeftOnDisk: kept}, nil)
}

// deletedLocking records a task directory deleted, or kept because its
// deletion failed: the core tries again at its next tick.
func (r *registry) deletedLocking(id task.ID, err error) []instancecore.Action {
	r.mu.Lock()
	defer r.unlock()
	if err != nil {
		r.logs.Add(slog.LevelWarn, "cannot delete task directory", "task", id, "err", err)
	} else {
		delete(r.disk, id)
	}
	return r.stepLocked(instancecore.Event{Kind: instancecore.EvDeleted, Task: id, OK: err == nil}, nil)
}

// releaseAhead closes the stores opened ahead for tasks not in keep (see
// aheadStores), and records the directories they leave behind.
func (r *registry) releaseAhead(keep []task.ID) []instancecore.Action {
	closed := r.app.ahead.release(func(id task.ID) bool {
		_, found := slices.BinarySearchFunc(keep, id, task.ID.Compare)
		return found
	})
	r.mu.Lock()
	defer r.unlock()
	var acts []instancecore.Action
	for _, id := range closed {
		acts = append(acts, r.stepLocked(instancecore.Event{Kind: instancecore.EvAheadClosed, Task: id}, nil)...)
		if _, known := r.disk[id]; !known && r.core.OnDisk(id) {
			// Empty, so no position.
			r.disk[id] = diskState{positions: map[string]int64{}}
		}
	}
	return acts
}

// awaitQuiet waits until the core is quiet (instancecore.Core.Quiet).
func (r *registry) awaitQuiet() {
	r.mu.Lock()
	defer r.unlock()
	for !r.core.Quiet() {
		r.quiet.Wait()
	}
}

// ownerLocked is the thread that owns a task's active, nil for none.
func (r *registry) ownerLocked(id task.ID) *thread {
	c, ok := r.core.Replica(id)
	if !ok || c.Owner < 0 {
		return nil
	}
	return r.threads[c.Owner]
}

// stateLocked is the state of a task's replica.
func (r *registry) stateLocked(id task.ID) task.State {
	c, _ := r.core.Replica(id)
	return c.State
}

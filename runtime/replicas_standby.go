package runtime

// The registry's standbys and warmups: the reconciliation that opens, adopts, retags and closes them.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/groupproto"
	"github.com/eddystreams/eddy/internal/taskrun"
	"github.com/eddystreams/eddy/task"
)

// step is one transition of a reconciliation plan: one replica moving from
// one state to another. A step from Created opens a standby or warmup
// whose stores are not open here; from Parked to Standby or Warmup it
// adopts a parked active's open stores; between Standby and Warmup it
// retags, moving no state; to Closed it closes a standby's or parked
// replica's stores. Promotions and demotions are not planned here: the
// threads claim (claimActive) and park (park) their tasks' replicas as
// their assignments and revocations arrive.
type step struct {
	id       task.ID
	from, to task.State
}

// io reports whether carrying out the step opens or closes stores, which
// the registry does outside its lock.
func (s step) io() bool { return !(s.from.Following() && s.to.Following()) }

func (s step) String() string { return fmt.Sprintf("%s %s->%s", s.id, s.from, s.to) }

// planReconcile decides what a reconciliation does: it opens the standbys
// the threads' current assignments want and, once every one of threads has
// its assignment (current), closes the standbys and parked stores none
// wants. held gives the state of every replica open here; moving lists the
// tasks whose stores are being opened or closed, which the plan leaves
// alone.
//
// Until every thread has its assignment a replica that no current
// assignment names is kept as it is — a standby keeps following, parked
// stores stay open — because the threads still to hear may be about to
// claim it: a standby promoted on another thread, or a task moving from
// one thread to another, keeps its open stores whichever thread learns its
// assignment first. The shares of those threads are from before their
// revocation and say nothing about what comes.
//
// Steps come in task order, those acting on open replicas first; every one
// is a transition the table allows; the plan is a pure function of its
// arguments.
func planReconcile(held map[task.ID]task.State, moving map[task.ID]bool, shares map[int]groupproto.AssignmentInfo, current map[int]bool, threads int) []step {
	settled := len(current) >= threads
	active := make(map[task.ID]bool)
	standby := make(map[task.ID]task.State) // Standby or Warmup
	for idx, sh := range shares {
		if !current[idx] {
			continue
		}
		for _, id := range sh.Active {
			active[id] = true
		}
	}
	for idx, sh := range shares {
		if !current[idx] {
			continue
		}
		for _, id := range sh.Standby {
			if !active[id] {
				standby[id] = task.Standby
			}
		}
	}
	for idx, sh := range shares {
		if !current[idx] {
			continue
		}
		// A task one thread wants as a standby and another as a warmup
		// is a standby.
		for _, id := range sh.Warmup {
			if _, dup := standby[id]; !active[id] && !dup {
				standby[id] = task.Warmup
			}
		}
	}
	var plan []step
	for _, id := range slices.SortedFunc(maps.Keys(held), task.ID.Compare) {
		if moving[id] {
			continue
		}
		from := held[id]
		want, wantStandby := standby[id]
		switch {
		case from.Following():
			if wantStandby && from != want {
				plan = append(plan, step{id: id, from: from, to: want})
			} else if !wantStandby && settled && !active[id] {
				// A standby wanted as active is kept for the thread
				// that will claim it.
				plan = append(plan, step{id: id, from: from, to: task.Closed})
			}
		case from == task.Parked:
			if wantStandby {
				plan = append(plan, step{id: id, from: from, to: want})
			} else if settled && !active[id] {
				plan = append(plan, step{id: id, from: from, to: task.Closed})
			}
		}
	}
	for _, id := range slices.SortedFunc(maps.Keys(standby), task.ID.Compare) {
		if _, open := held[id]; !open && !moving[id] {
			plan = append(plan, step{id: id, from: task.Created, to: standby[id]})
		}
	}
	return plan
}

// reconcile plans under mu what the threads' assignments ask of the
// standbys and parked stores (planReconcile), then carries the plan out with
// mu released: stores open and close, changelogs are followed and
// unfollowed, and writes under way are waited for while queries go on.
// Each replica a step moves is taken out of reps into moving for the
// duration and published back, under mu, as soon as its step is done.
//
// One reconciliation runs at a time, so two threads' assignments arriving
// together never act on the same replica twice: a thread whose assignment
// arrives while another thread's reconciliation runs leaves it to that
// one, which plans again once done, and returns without waiting for stores
// it does not need.
func (r *registry) reconcile() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stale = true
	if r.reconciling {
		return
	}
	r.reconciling = true
	defer r.moved.Broadcast()
	for r.stale && !r.closed {
		r.stale = false
		r.reconcileOnceLocked()
	}
	r.reconciling = false
}

// reconcileOnceLocked plans and carries out one reconciliation; mu is
// released while it opens and closes stores.
func (r *registry) reconcileOnceLocked() {
	held := make(map[task.ID]task.State, len(r.reps))
	for id, rep := range r.reps {
		held[id] = rep.state()
	}
	busy := make(map[task.ID]bool, len(r.moving))
	for id := range r.moving {
		busy[id] = true
	}
	plan := planReconcile(held, busy, r.shares, r.current, r.app.cfg.NumStreamThreads)
	type work struct {
		step
		rep *replica
	}
	var moves []work
	for _, st := range plan {
		rep := r.reps[st.id]
		if !st.io() {
			r.moveLocked(rep, st.to)
			continue
		}
		if st.from == task.Parked && st.to.Following() {
			// Adopting a parked replica's open stores: it stays listed,
			// parked, for queries (its position and the end it committed
			// at are known) until it follows its changelogs.
			r.moving[st.id] = move{positions: positions(rep.stores), adopting: true}
			moves = append(moves, work{st, rep})
			continue
		}
		var pos map[string]int64
		if rep != nil {
			pos = positions(rep.stores)
		} else if d, ok := r.onDisk[st.id]; ok {
			pos = d.positions
		}
		if rep == nil {
			rep = r.newReplica(st.id)
		}
		delete(r.reps, st.id)
		delete(r.onDisk, st.id)
		r.moving[st.id] = move{positions: pos}
		moves = append(moves, work{st, rep})
	}
	// Adoptions open and close no store: carried out first, they do not
	// wait behind other replicas' stores opening and closing.
	later := func(w work) int {
		if w.from == task.Parked && w.to.Following() {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(moves, func(a, b work) int { return later(a) - later(b) })
	r.mu.Unlock()
	defer r.mu.Lock()

	// Adoptions first, then the others several at once (forStores): an
	// instance given thousands of standbys opens them all here.
	adoptions := 0
	for adoptions < len(moves) && later(moves[adoptions]) == 0 {
		adoptions++
	}
	carry := func(m work) {
		var left map[string]int64
		var sb *taskrun.Standby
		switch {
		case m.to == task.Closed && m.from.Following():
			left = r.closeStandby(m.rep)
		case m.to == task.Closed:
			left = positions(m.rep.stores)
			for _, h := range m.rep.stores {
				if err := h.Inner.Close(); err != nil {
					r.log.Warn("close parked store", "task", m.id, "store", h.Info.Name, "err", err)
				}
			}
		default:
			// Created or Parked to Standby or Warmup: open the stores
			// (or adopt the parked ones) and follow their changelogs.
			sb = r.openStandby(m.id, m.rep.stores, m.to)
		}
		r.mu.Lock()
		r.doneMovingLocked(m.id)
		switch {
		case sb != nil && r.moveLocked(m.rep, m.to):
			if m.from == task.Parked {
				// The parked active committed right before it was parked:
				// its position was the changelog's end then, which the
				// standby reports until its reader lists the end.
				m.rep.endsConfirmed = m.rep.opened
			} else {
				m.rep.ends, m.rep.endsConfirmed, m.rep.caughtUp = nil, time.Time{}, time.Time{}
			}
			m.rep.standby, m.rep.stores, m.rep.opened = sb, sb.Stores(), time.Now()
			r.reps[m.id] = m.rep
		case sb != nil:
			// Refused (a bug, logged): not kept.
			if r.reps[m.id] == m.rep {
				delete(r.reps, m.id)
			}
			r.mu.Unlock()
			r.closeStandby(&replica{id: m.id, stores: sb.Stores(), standby: sb})
			r.mu.Lock()
		default:
			// Closed, or the standby could not start (its stores are
			// closed).
			r.moveLocked(m.rep, task.Closed)
			if r.reps[m.id] == m.rep {
				// An adoption that failed.
				delete(r.reps, m.id)
			}
			if left != nil {
				r.leftOnDiskLocked(m.id, left)
			}
		}
		r.mu.Unlock()
	}
	for _, m := range moves[:adoptions] {
		carry(m)
	}
	rest := moves[adoptions:]
	forStores(len(rest), func(i int) { carry(rest[i]) })
}

// doneMovingLocked ends a task's move and wakes whoever waits for moves to
// end.
func (r *registry) doneMovingLocked(id task.ID) {
	delete(r.moving, id)
	r.moved.Broadcast()
}

// openStandby opens the stores of a standby or warmup replica, adopting
// open ones if given, and follows their changelogs. It returns nil if the
// standby cannot start.
func (r *registry) openStandby(id task.ID, stores []*taskrun.StoreHandle, to task.State) *taskrun.Standby {
	sb, err := taskrun.NewStandby(taskrun.StandbyConfig{
		ID:        id,
		Topology:  r.app.topo,
		Changelog: r.app.changelogTopic,
		Open:      r.app.openStore,
		Stores:    stores,
		Logger:    r.log,
	})
	if errors.Is(err, ErrTooManyDamagedStores) {
		r.app.fail(err)
		return nil
	}
	if err != nil {
		r.log.Warn("cannot open standby", "task", id, "err", err)
		return nil
	}
	for _, h := range sb.Stores() {
		err := r.follower.Register(changelog.Partition{Topic: h.Changelog, Partition: id.Partition, Store: h.Inner, Mode: changelog.Follow,
			Task: id.String(), StoreName: h.Info.Name})
		if err != nil {
			r.log.Warn("cannot follow changelog", "task", id, "topic", h.Changelog, "err", err)
		}
	}
	r.log.Info("standby opened", "task", id, "as", to.String())
	return sb
}

// unfollow stops the standby reader following a replica's changelogs,
// waiting for a write to its stores under way.
func (r *registry) unfollow(id task.ID, stores []*taskrun.StoreHandle) {
	for _, h := range stores {
		r.follower.Unregister(h.Changelog, id.Partition)
	}
}

// closeStandby stops following a standby and closes it, returning the
// positions its stores were left at.
func (r *registry) closeStandby(rep *replica) map[string]int64 {
	r.unfollow(rep.id, rep.stores)
	pos := positions(rep.stores)
	if err := rep.standby.Close(); err != nil {
		r.log.Warn("close standby", "task", rep.id, "err", err)
	}
	r.log.Info("standby closed", "task", rep.id)
	return pos
}

// follow runs the standby changelog reader and tracks when each standby was
// last caught up: as of the sending of the end listing its position has
// reached, not of when that was noticed, which may be a confirmation
// window later.
func (r *registry) follow(ctx context.Context) {
	r.mu.Lock()
	rd, exited := r.follower, r.exited
	r.mu.Unlock()
	defer close(exited)
	for {
		completed, err := rd.Poll(ctx)
		for _, c := range completed {
			if c.Err != nil {
				r.log.Warn("standby stopped following its changelog", "task", c.Task, "topic", c.Topic, "err", c.Err)
			}
		}
		if err != nil && (errors.Is(err, changelog.ErrClosed) || ctx.Err() != nil) {
			return
		}
		r.mu.Lock()
		for _, rep := range r.reps {
			if rep.state().Following() {
				if at, ok := r.standbyCaughtUpLocked(rep); ok && at.After(rep.caughtUp) {
					rep.caughtUp = at
				}
			}
		}
		r.mu.Unlock()
	}
}

// standbyCaughtUpLocked reports, for a standby whose every store has a
// lag of 0 to an end the broker confirmed within LagConfirmWindow, the
// oldest of those confirmations: the time as of which the standby holds
// all its changelogs held. Not while a store rebuilds.
func (r *registry) standbyCaughtUpLocked(rep *replica) (time.Time, bool) {
	var at time.Time
	for _, h := range rep.stores {
		p, ok := r.follower.Progress(h.Changelog, rep.id.Partition)
		if !ok || p.Lag != 0 || p.Rebuilding || time.Since(p.EndConfirmed) > LagConfirmWindow {
			return time.Time{}, false
		}
		if at.IsZero() || p.EndConfirmed.Before(at) {
			at = p.EndConfirmed
		}
	}
	return at, !at.IsZero()
}

// janitor deletes task directories left on disk longer than
// StateCleanupDelay.
func (r *registry) janitor(ctx context.Context) {
	every := min(r.app.cfg.StateCleanupDelay/2, 30*time.Second)
	tick := time.NewTicker(max(every, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// Directories are deleted outside mu, moving meanwhile so that
		// nobody opens them.
		r.mu.Lock()
		var expired []task.ID
		for id, d := range r.onDisk {
			if _, open := r.reps[id]; open || time.Since(d.since) < r.app.cfg.StateCleanupDelay {
				continue
			}
			delete(r.onDisk, id)
			r.moving[id] = move{positions: d.positions, deleting: true}
			expired = append(expired, id)
		}
		r.mu.Unlock()
		for _, id := range expired {
			err := r.removeDir(id)
			r.mu.Lock()
			if err != nil {
				r.log.Warn("cannot delete task directory", "task", id, "err", err)
				// Kept, and tried again at the next tick.
				r.onDisk[id] = diskState{positions: r.moving[id].positions, since: time.Now().Add(-r.app.cfg.StateCleanupDelay)}
			} else {
				r.log.Info("deleted task directory left unassigned", "task", id, "after", r.app.cfg.StateCleanupDelay)
			}
			r.doneMovingLocked(id)
			r.mu.Unlock()
		}
	}
}

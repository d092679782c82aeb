package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/internal/groupproto"
	"github.com/eddystreams/eddy/internal/taskrun"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
)

// edgeRoles derives from a replica's state the roles the world outside the
// instance sees: the assignor, in the subscription (a running active, a
// standby or warmup following its changelog, or only state with positions
// — a restoring active is ranked by its lag like any other copy), and
// queries, routing and metrics labels (iq.Role). A parked replica holds
// committed data and processes nothing, so queries see it as a standby;
// the assignor sees state left behind, to be placed by its positions.
func edgeRoles(s task.State) (groupproto.TaskRole, iq.Role) {
	switch s {
	case task.Running:
		return groupproto.RoleActive, iq.RoleActive
	case task.Standby:
		return groupproto.RoleStandby, iq.RoleStandby
	case task.Warmup:
		return groupproto.RoleStandby, iq.RoleWarmup
	case task.Parked:
		return groupproto.RoleNone, iq.RoleStandby
	default: // Created, Restoring (Closed replicas are not listed)
		return groupproto.RoleNone, iq.RoleRestoring
	}
}

// replica is one task's state held open by this instance.
type replica struct {
	id task.ID
	// life is the replica's state; it changes only under the registry's
	// mu, through moveLocked.
	life    taskrun.Lifecycle
	stores  []*taskrun.StoreHandle
	standby *taskrun.Standby // Standby, Warmup
	owner   *thread          // Created (claimed), Restoring, Running
	// caughtUp is when the replica was last known to have no lag.
	caughtUp time.Time
	// opened is when this instance opened the replica's stores (for a
	// parked replica, when it was parked).
	opened time.Time
	// ends is the last changelog end known for each of the replica's
	// changelog topics: carried over when a standby is promoted or an
	// active parked, so a replica never reports an unknown lag while it
	// changes state.
	ends map[string]int64
	// endsConfirmed is when the broker last confirmed ends (the oldest
	// confirmation among the stores), carried with them: a promoted
	// standby's end stays as trustworthy as it was until its restoration
	// lists the end again. Zero when ends were not confirmed.
	endsConfirmed time.Time
}

func (rep *replica) state() task.State { return rep.life.State() }

// newReplica starts the record of a replica whose stores are about to be
// opened here.
func (r *registry) newReplica(id task.ID) *replica {
	return &replica{id: id, life: taskrun.NewLifecycle(id, r.app.transitionObserver("replica"))}
}

// moveLocked moves a replica to another state. A move the transition
// table forbids is a bug: it is logged and refused, the replica keeping
// its state.
func (r *registry) moveLocked(rep *replica, to task.State) bool {
	return rep.life.To(to) == nil
}

// transitionObserver returns the observer of the lifecycles of one kind:
// "replica" for the registry's replicas, "task" for the threads' active
// tasks. An illegal transition is a bug, logged as an error (and refused by
// the lifecycle).
func (a *App) transitionObserver(kind string) taskrun.Observer {
	return func(id task.ID, from, to task.State, err error) {
		if err != nil {
			a.log.Error("illegal state transition refused", "kind", kind, "task", id, "from", from.String(), "to", to.String())
		}
		if a.transitionHook != nil {
			a.transitionHook(kind, id, from, to, err)
		}
	}
}

// move is a task whose stores or directory are being opened, closed or
// deleted outside the registry's lock.
type move struct {
	// positions are the changelog positions of the task's stores when the
	// move began, reported in the subscription meanwhile.
	positions map[string]int64
	// deleting is set while the task's directory is deleted: the
	// instance holds its state no more.
	deleting bool
	// adopting is set while a standby or warmup adopts a parked
	// replica's open stores: the replica stays in reps, Parked, so that
	// queries keep reading it until it follows its changelogs.
	adopting bool
}

// diskState is a task directory left on disk by a task no longer held.
type diskState struct {
	positions map[string]int64 // changelog topic → position
	since     time.Time
}

// registry is the instance's record of every task whose state it holds:
// actives (owned by stream threads), standbys (followed by the registry's
// own changelog reader), parked stores between a revocation and the next
// assignment, and directories left on disk. It is the one place that
// decides when stores open and close, so that state moving between roles —
// a standby promoted, an active demoted, a task moving between threads —
// keeps its open stores and never rereads what it has. Each replica's
// state (task.State) changes only under mu, along the transition table
// (moveLocked).
//
// Queries, metrics and the subscription read the registry under mu, which
// is never held while a store opens, closes or waits for a write: the
// registry decides under mu (planReconcile for the standbys and parked
// stores, claimActive and closeActive for the threads' tasks), marks the
// tasks concerned as moving, does the I/O without mu, then publishes the
// outcome under mu. A replica moving is not listed, so a query finds it
// absent rather than waiting for it — except a parked replica being adopted
// as a standby or warmup, whose stores stay open throughout: it stays
// listed, parked, until it follows its changelogs.
type registry struct {
	app      *App
	log      *slog.Logger
	follower *changelog.Reader
	cancel   context.CancelFunc
	exited   chan struct{}

	// mu guards what follows. Queries and metrics take it, so it is never
	// held across store I/O.
	mu     sync.Mutex
	reps   map[task.ID]*replica
	shares map[int]groupproto.AssignmentInfo // latest assignment of each thread
	// current holds the threads whose share is an assignment received
	// since their last revocation or loss. Threads learn a new assignment
	// one at a time; until every one has, a thread still to hear may be
	// about to claim any replica, so none is closed.
	current map[int]bool
	// synced holds, for each thread, the tasks the assignment of its
	// latest answered SyncGroup names (active, standby or warmup),
	// recorded at once, without waiting for the thread: queries stop
	// treating a replica (but a running active) as one as soon as every
	// thread has heard that none of them keeps it, though closing it waits
	// for the thread and the reconciliation (see servableLocked).
	synced map[int]map[task.ID]bool
	// moving holds the tasks whose stores are being opened or closed
	// outside mu. They are in neither reps nor onDisk (but for a parked
	// replica being adopted, which stays in reps: move.adopting): queries
	// do not see them, plans leave them alone, and a thread claiming one
	// waits until the move is over, so no directory is ever opened twice.
	moving map[task.ID]move
	// reconciling is set while a reconciliation runs; stale, when the
	// threads' assignments changed since it planned.
	reconciling, stale bool
	// moved is signalled, under mu, whenever a task leaves moving or a
	// reconciliation ends.
	moved  *sync.Cond
	onDisk map[task.ID]diskState
	closed bool
}

func newRegistry(a *App) (*registry, error) {
	r := &registry{app: a}
	rd, err := r.newFollower()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.log = a.log
	r.follower = rd
	r.cancel = cancel
	r.exited = make(chan struct{})
	r.reps = make(map[task.ID]*replica)
	r.shares = make(map[int]groupproto.AssignmentInfo)
	r.current = make(map[int]bool)
	r.synced = make(map[int]map[task.ID]bool)
	r.moving = make(map[task.ID]move)
	r.onDisk = make(map[task.ID]diskState)
	r.moved = sync.NewCond(&r.mu)
	if err := r.scanDisk(); err != nil {
		cancel()
		rd.Close()
		return nil, err
	}
	go r.follow(ctx)
	go r.janitor(ctx)
	return r, nil
}

// newFollower creates the standby changelog reader.
func (r *registry) newFollower() (*changelog.Reader, error) {
	a := r.app
	rd, err := changelog.NewReader(changelog.ReaderConfig{
		Seeds:         a.cfg.Brokers,
		ClientOpts:    a.connOpts(),
		Logger:        a.log.With("reader", "standby"),
		ReadCommitted: a.cfg.ProcessingGuarantee == ExactlyOnce,
		// Small enough for one badger transaction with small values, so
		// queries never see part of a batch.
		MaxBatchRecords: restoreBatchRecords,
		Applied:         a.publishApplied,
	})
	if err != nil {
		return nil, fmt.Errorf("runtime: standby changelog reader: %w", err)
	}
	return rd, nil
}

// persistentLogged lists the stores of a sub-topology whose state survives
// on disk and can be brought up to date from a changelog.
func (r *registry) persistentLogged(sub int) []string {
	var out []string
	for _, s := range graph.Of(r.app.topo).SubTopologies()[sub].Stores {
		if s.Persistent && s.Logged {
			out = append(out, s.Name)
		}
	}
	return out
}

// positions reads the changelog positions of a replica's logged stores.
func positions(stores []*taskrun.StoreHandle) map[string]int64 {
	out := make(map[string]int64)
	for _, h := range stores {
		if h.Changelog == "" {
			continue
		}
		if pos, err := h.Inner.Position(); err == nil && pos != statestore.NoPosition {
			out[h.Changelog] = pos
		}
	}
	return out
}

// subscription is the part of the member's subscription that describes the
// state this instance holds.
func (r *registry) subscription() []groupproto.TaskOffsets {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []groupproto.TaskOffsets
	for id, rep := range r.reps {
		role, _ := edgeRoles(rep.state())
		out = append(out, groupproto.TaskOffsets{Task: id, Role: role, Positions: positions(rep.stores)})
	}
	for id, d := range r.onDisk {
		if _, open := r.reps[id]; !open {
			out = append(out, groupproto.TaskOffsets{Task: id, Role: groupproto.RoleNone, Positions: maps.Clone(d.positions)})
		}
	}
	// A task whose stores are opening or closing is here either way.
	for id, m := range r.moving {
		if m.deleting || m.adopting {
			continue
		}
		pos := maps.Clone(m.positions)
		if pos == nil {
			pos = make(map[string]int64)
		}
		out = append(out, groupproto.TaskOffsets{Task: id, Role: groupproto.RoleNone, Positions: pos})
	}
	slices.SortFunc(out, func(a, b groupproto.TaskOffsets) int { return a.Task.Compare(b.Task) })
	return out
}

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

// setShare records a thread's new assignment and brings the standbys in
// line with what the threads' assignments want.
func (r *registry) setShare(idx int, info groupproto.AssignmentInfo) {
	r.mu.Lock()
	r.shares[idx] = info
	r.current[idx] = true
	r.mu.Unlock()
	r.reconcile()
}

// received records the assignment a thread's SyncGroup just answered with,
// before the thread takes it in (setShare), which may wait for a commit.
func (r *registry) received(idx int, info groupproto.AssignmentInfo) {
	named := make(map[task.ID]bool, len(info.Active)+len(info.Standby)+len(info.Warmup))
	for _, ids := range [][]task.ID{info.Active, info.Standby, info.Warmup} {
		for _, id := range ids {
			named[id] = true
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.synced[idx] = named
}

// servableLocked reports whether queries may read rep. A replica no
// thread's latest assignment names is no longer one: the group has given
// its role away, and it is only waiting to be closed or parked. A running
// active is the exception: it stays its partition's one writer until its
// thread has committed and revoked it, and answers as such until then.
func (r *registry) servableLocked(rep *replica) bool {
	if rep.state() == task.Running || len(r.synced) < r.app.cfg.NumStreamThreads {
		return true
	}
	for _, named := range r.synced {
		if named[rep.id] {
			return true
		}
	}
	return false
}

// revoked records that a thread gave up its assignment (revoked or lost)
// and will learn a new one.
func (r *registry) revoked(idx int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.current, idx)
}

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

// close stops following and closes every standby, warmup and parked replica, once
// the reconciliation and the moves under way are over. Threads must have
// closed their actives first.
func (r *registry) close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	for r.reconciling || len(r.moving) > 0 {
		r.moved.Wait()
	}
	r.mu.Unlock()
	r.cancel()
	r.follower.Close()
	<-r.exited
	r.mu.Lock()
	closing := r.takeIdleLocked()
	r.mu.Unlock()
	forStores(len(closing), func(i int) {
		if rep := closing[i]; rep.standby != nil {
			rep.standby.Close()
		} else {
			for _, h := range rep.stores {
				h.Inner.Close()
			}
		}
	})
}

// takeIdleLocked takes out of the registry, Closed, every replica no
// thread owns (standbys, warmups, parked stores), for the caller to close
// their stores.
func (r *registry) takeIdleLocked() []*replica {
	var out []*replica
	for id, rep := range r.reps {
		if st := rep.state(); st.Following() || st == task.Parked {
			r.moveLocked(rep, task.Closed)
			delete(r.reps, id)
			out = append(out, rep)
		}
	}
	return out
}

// ReplicaInfo describes one store partition this instance holds, in one of
// the states of its replica's lifecycle (task.State). Its figures are the last known ones, each with the time
// that says how far to trust it; Queries (iq.ReplicaInfo) reports only what
// they vouch for:
//
//   - while Rebuilding, the store is no snapshot of any offset: no
//     position, no lag;
//   - a lag whose end the broker last confirmed more than LagConfirmWindow
//     ago is unknown (the replica may be cut off from the broker);
//   - CaughtUp is the last time the lag was confirmed to be 0;
//   - InputCommitted is the last time the partition's active was seen to
//     have committed all the input then present, which keeps aging while
//     the active is dead even though its changelog, no longer written,
//     shows no lag.
//
// A running active is the changelog's writer and processes the input
// itself: lag 0, confirmed, caught up and covering its input now.
type ReplicaInfo struct {
	Task      task.ID
	Store     string
	Partition int32
	// State is the replica's state: Restoring or Running for an active,
	// Standby or Warmup for a replica following its changelogs, Parked
	// between a revocation and the assignment after it.
	State task.State
	// Position is the changelog offset of the next record the store would
	// apply; End is the changelog's end as last known (the restoration
	// target while restoring, the high watermark — last stable offset
	// under exactly-once — for a standby); Lag is End minus Position, or
	// -1 while unknown.
	Position, End, Lag int64
	// Rebuilding is set while the store is read from empty (opened
	// without a position, or reset because its position no longer fitted
	// its changelog) and has not reached the changelog end listed when
	// that reading began. Compaction drops records, so until then the
	// store holds some keys' newest values and other keys' older ones.
	Rebuilding bool
	// EndConfirmed is when the broker last confirmed End (a listing, or a
	// fetch that returned records); zero if never.
	EndConfirmed time.Time
	// CaughtUp is when the replica last had a confirmed lag of 0; zero if
	// not since this instance opened it.
	CaughtUp time.Time
	// InputCommitted is the latest time at which the task's active was
	// seen to have committed every source partition up to its end offset
	// then (see FreshnessInterval); zero if never observed.
	InputCommitted time.Time
	// Contact is when the group coordinator last confirmed the membership
	// of the stream thread the replica is held for (see groupContact):
	// the thread running an active, the one whose assignment names a
	// standby, warmup or parked replica. Zero if never.
	Contact time.Time
	// Refuted is set when the coordinator has since answered that it no
	// longer counts that thread's member in the group as it stands.
	Refuted bool
	// AssignmentVouched is set, for a standby, warmup or parked replica,
	// while the thread it is held for awaits the answer to a JoinGroup or
	// SyncGroup: it is the latest time the coordinator is known not to
	// have settled a new balance since (the first such request's sending,
	// or a later heartbeat answered as rebalancing). A balance settled
	// after it may have moved the replica without the thread hearing.
	// Zero otherwise, and always for a thread's own active, which stays
	// its own until it revokes it.
	AssignmentVouched time.Time
	// Opened is when this instance opened the replica's stores.
	Opened time.Time
	// Thread is the index of the stream thread the replica is held for:
	// the one running an active, else the first whose latest assignment
	// names the task; -1 when none does (a parked replica between
	// assignments).
	Thread int
	// Restored counts records restoration applied to the store since this
	// instance started.
	Restored int64
	// Backing is the store the replica reads from; it reflects committed
	// data only, and readers see whole batches.
	Backing statestore.Store
}

// replicas lists every store partition of every open replica.
func (r *registry) replicas() []ReplicaInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []ReplicaInfo
	for _, rep := range r.reps {
		for _, h := range rep.stores {
			out = append(out, r.infoLocked(rep, h))
		}
	}
	slices.SortFunc(out, func(a, b ReplicaInfo) int {
		if c := a.Task.Compare(b.Task); c != 0 {
			return c
		}
		return strings.Compare(a.Store, b.Store)
	})
	return out
}

// replica describes one store of one replica, if it is open here.
func (r *registry) replica(id task.ID, store string) (ReplicaInfo, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep, ok := r.reps[id]
	if !ok || !r.servableLocked(rep) {
		return ReplicaInfo{}, false
	}
	for _, h := range rep.stores {
		if h.Info.Name == store {
			return r.infoLocked(rep, h), true
		}
	}
	return ReplicaInfo{}, false
}

func (r *registry) infoLocked(rep *replica, h *taskrun.StoreHandle) ReplicaInfo {
	now := time.Now()
	ri := ReplicaInfo{Task: rep.id, Store: h.Info.Name, Partition: rep.id.Partition, State: rep.state(), Lag: -1, End: -1,
		CaughtUp: rep.caughtUp, Opened: rep.opened, Backing: h.Inner}
	pos, err := h.Inner.Position()
	if err != nil || pos == statestore.NoPosition {
		pos = 0
	}
	ri.Position = pos
	switch ri.State {
	case task.Running:
		ri.End, ri.Lag, ri.CaughtUp = pos, 0, now
		ri.EndConfirmed, ri.InputCommitted = now, now
	case task.Created, task.Restoring:
		switch p, ok := rep.owner.rest.progress(h.Changelog, rep.id.Partition); {
		case h.Changelog == "" || rep.owner.rest.isDone(rep.id):
			// Nothing to restore, or restored and about to run: the task
			// is the changelog's only writer now.
			ri.End, ri.Lag, ri.EndConfirmed = pos, 0, now
		case ok && p.End >= 0:
			ri.Rebuilding, ri.EndConfirmed = p.Rebuilding, p.EndConfirmed
			ri.End, ri.Lag = p.End, max(p.End-pos, 0)
		default:
			if ok {
				ri.Rebuilding = p.Rebuilding
			}
			if end, known := rep.ends[h.Changelog]; known {
				// Not listed yet: the end the replica knew before it
				// started restoring (a promoted standby's, a parked
				// active's), as confirmed as it was then.
				ri.End, ri.Lag = max(end, pos), max(end-pos, 0)
				ri.EndConfirmed = rep.endsConfirmed
			}
		}
	case task.Parked:
		if end, known := rep.ends[h.Changelog]; known {
			ri.End, ri.Lag = max(end, pos), max(end-pos, 0)
			// A parked active committed before it was parked: its
			// position was the changelog's end then.
			ri.EndConfirmed = rep.opened
			if ri.Lag == 0 && rep.opened.After(ri.CaughtUp) {
				ri.CaughtUp = rep.opened
			}
		}
	case task.Standby, task.Warmup:
		p, ok := r.follower.Progress(h.Changelog, rep.id.Partition)
		if ok {
			ri.Rebuilding, ri.EndConfirmed = p.Rebuilding, p.EndConfirmed
		}
		switch end, known := rep.ends[h.Changelog]; {
		case ok && p.End >= 0:
			ri.End, ri.Lag = p.End, max(p.End-pos, 0)
		case known:
			// An adopted parked replica whose reader has not listed the
			// end yet: the end it committed at, as confirmed as it was.
			ri.End, ri.Lag = max(end, pos), max(end-pos, 0)
			ri.EndConfirmed = rep.endsConfirmed
		}
	}
	if ri.State != task.Running && r.app.fresh != nil {
		ri.InputCommitted, _ = r.app.fresh.inputCommitted(rep.id)
	}
	ri.Contact = r.contactLocked(rep)
	ri.Refuted = r.refutedLocked(rep)
	ri.AssignmentVouched = r.assignmentVouchedLocked(rep)
	ri.Thread = r.threadLocked(rep)
	if h.Changelog != "" {
		if rep.owner != nil {
			ri.Restored = rep.owner.rest.restoredInto(h.Changelog, rep.id.Partition)
		} else {
			ri.Restored = r.app.restored.get(changelog.TopicPartition{Topic: h.Changelog, Partition: rep.id.Partition})
		}
	}
	return ri
}

// contactLocked is when the group last confirmed the member a replica is
// held for (see groupContact): the thread running it, or, for a standby,
// warmup or parked replica, whichever thread's latest assignment names
// its task, else any thread of the instance. Zero if never.
func (r *registry) contactLocked(rep *replica) time.Time {
	if rep.owner != nil {
		return rep.owner.contact.last()
	}
	if !r.app.threadsUp.Load() {
		return time.Time{}
	}
	var named, anyThread time.Time
	for _, th := range r.app.threads {
		at := th.contact.last()
		anyThread = later(anyThread, at)
		if sh, ok := r.shares[th.idx]; ok && (slices.Contains(sh.Active, rep.id) || slices.Contains(sh.Standby, rep.id) || slices.Contains(sh.Warmup, rep.id)) {
			named = later(named, at)
		}
	}
	if named.IsZero() {
		return anyThread
	}
	return named
}

// assignmentVouchedLocked is ReplicaInfo.AssignmentVouched of rep: for a
// replica without an owner, the latest time vouched among the threads
// whose latest assignment names its task (every thread when none does),
// zero if any of them awaits no assignment.
func (r *registry) assignmentVouchedLocked(rep *replica) time.Time {
	if rep.owner != nil || !r.app.threadsUp.Load() {
		return time.Time{}
	}
	var named, all []*thread
	for _, th := range r.app.threads {
		all = append(all, th)
		if sh, ok := r.shares[th.idx]; ok && (slices.Contains(sh.Active, rep.id) || slices.Contains(sh.Standby, rep.id) || slices.Contains(sh.Warmup, rep.id)) {
			named = append(named, th)
		}
	}
	if len(named) == 0 {
		named = all
	}
	var vouched time.Time
	for _, th := range named {
		at, awaiting := th.contact.assignmentVouched()
		if !awaiting {
			return time.Time{}
		}
		vouched = later(vouched, at)
	}
	return vouched
}

// threadLocked is ReplicaInfo.Thread of rep.
func (r *registry) threadLocked(rep *replica) int {
	if rep.owner != nil {
		return rep.owner.idx
	}
	for _, idx := range slices.Sorted(maps.Keys(r.shares)) {
		sh := r.shares[idx]
		if slices.Contains(sh.Active, rep.id) || slices.Contains(sh.Standby, rep.id) || slices.Contains(sh.Warmup, rep.id) {
			return idx
		}
	}
	return -1
}

// refutedLocked reports whether the coordinator refuted the membership of
// the thread a replica is held for (see groupContact.refuted): its owner,
// or every thread whose assignment names its task (every thread when none
// does).
func (r *registry) refutedLocked(rep *replica) bool {
	if rep.owner != nil {
		return rep.owner.contact.isRefuted()
	}
	if !r.app.threadsUp.Load() {
		return false
	}
	named, all := false, true
	for _, th := range r.app.threads {
		refuted := th.contact.isRefuted()
		all = all && refuted
		if sh, ok := r.shares[th.idx]; ok && (slices.Contains(sh.Active, rep.id) || slices.Contains(sh.Standby, rep.id) || slices.Contains(sh.Warmup, rep.id)) {
			if !refuted {
				return false
			}
			named = true
		}
	}
	return named || all
}

// later returns the later of two times.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// instanceShare is the union of every thread's latest share of the
// assignment, sorted.
func (r *registry) instanceShare() (active, standby, warmup []task.ID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, sh := range r.shares {
		active = append(active, sh.Active...)
		standby = append(standby, sh.Standby...)
		warmup = append(warmup, sh.Warmup...)
	}
	for _, l := range []*[]task.ID{&active, &standby, &warmup} {
		slices.SortFunc(*l, task.ID.Compare)
		*l = slices.CompactFunc(*l, func(a, b task.ID) bool { return a == b })
	}
	return active, standby, warmup
}

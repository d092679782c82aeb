package runtime

// The instance's registry of the task replicas it holds, their one lifecycle each and the roles seen outside.

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
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

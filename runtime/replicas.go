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

	"github.com/eddystreams/eddy/internal/heldlog"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/internal/groupproto"
	"github.com/eddystreams/eddy/internal/instancecore"
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

// replica is what the registry keeps, beside the core's record of its
// state (instancecore.Replica), of one task's replica: its open stores and
// the figures queries report.
type replica struct {
	id      task.ID
	stores  []*taskrun.StoreHandle
	standby *taskrun.Standby // Standby, Warmup
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
	// positions are the changelog positions of the replica's stores when
	// they began to open or close, reported in the subscription while
	// that I/O is in flight.
	positions map[string]int64
}

// diskState is a task directory left on disk by a task no longer held.
type diskState struct {
	positions map[string]int64 // changelog topic → position
}

// registry is the instance's record of every task whose state it holds:
// actives (owned by stream threads), standbys (followed by the registry's
// own changelog reader), parked stores between a revocation and the next
// assignment, and directories left on disk. It drives the instance's core
// (instancecore), which decides when stores open and close, so that state
// moving between roles — a standby promoted, an active demoted, a task
// moving between threads — keeps its open stores and never rereads what it
// has. The registry steps the core under mu with what the threads and its
// own goroutines report, carries out the actions a step returns with mu
// released, and steps the core with each outcome (replicas_drive.go).
//
// Queries, metrics and the subscription read the registry under mu, which
// is never held while a store opens, closes or waits for a write. A
// replica whose stores are being opened, closed or deleted is not listed,
// so a query finds it absent rather than waiting for it — except a parked
// replica being adopted as a standby or warmup, whose stores stay open
// throughout: it stays listed, parked, until it follows its changelogs.
type registry struct {
	app      *App
	log      *slog.Logger
	follower *changelog.Reader
	cancel   context.CancelFunc
	exited   chan struct{}

	// mu guards what follows. Queries and metrics take it, so it is never
	// held across store I/O.
	mu   sync.Mutex
	core *instancecore.Core
	// reps holds the stores and figures of each replica the core records.
	reps map[task.ID]*replica
	// disk holds the positions of each directory the core records as left
	// on disk.
	disk map[task.ID]diskState
	// threads are the stream threads that claimed tasks, by index: the
	// owner of an active, as the core names it, restores it and vouches
	// for its group membership.
	threads map[int]*thread
	// quiet is signalled, under mu, whenever an outcome is stepped, for
	// a pause or a close waiting for the core to be quiet.
	quiet *sync.Cond
	// logs are the log lines of the section holding mu, written by
	// unlock once mu is released.
	logs heldlog.Lines
}

// unlock releases mu, then writes the log lines gathered while it was
// held (r.logs): the sections that step the core, and those beside them
// in the registry's files, end with it, so that the logger, user code,
// never runs under mu. Queries, which step nothing, unlock mu itself.
func (r *registry) unlock() {
	logs := r.logs
	r.logs = nil
	r.mu.Unlock()
	logs.Write(r.log)
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
	r.disk = make(map[task.ID]diskState)
	r.threads = make(map[int]*thread)
	r.quiet = sync.NewCond(&r.mu)
	dirs, err := r.scanDisk()
	if err != nil {
		cancel()
		rd.Close()
		return nil, err
	}
	r.core = instancecore.New(instancecore.Config{Threads: a.cfg.NumStreamThreads, CleanupDelay: a.cfg.StateCleanupDelay, OnDisk: dirs,
		OnThreadFailure: threadPolicy(a.cfg.OnStreamThreadError), MaxReplacements: MaxThreadReplacements, ReplacementWindow: replacementWindow})
	r.core.OnMove = func(id task.ID, from, to task.State) {
		// Runs under mu: the hook is only ever a test's.
		if a.transitionHook != nil {
			a.transitionHook("replica", id, from, to, nil)
		}
	}
	go r.follow(ctx)
	go r.tick(ctx)
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
// state this instance holds: each replica in its role, a task whose stores
// are opening or closing with the positions they had, and the directories
// left on disk.
func (r *registry) subscription() []groupproto.TaskOffsets {
	r.mu.Lock()
	defer r.unlock()
	var out []groupproto.TaskOffsets
	for _, id := range r.core.Tasks() {
		c, _ := r.core.Replica(id)
		rep := r.reps[id]
		switch c.Work {
		case instancecore.Idle, instancecore.Adopting:
			role, _ := edgeRoles(c.State)
			out = append(out, groupproto.TaskOffsets{Task: id, Role: role, Positions: positions(rep.stores)})
		case instancecore.Opening, instancecore.Closing:
			pos := maps.Clone(rep.positions)
			if pos == nil {
				pos = make(map[string]int64)
			}
			out = append(out, groupproto.TaskOffsets{Task: id, Role: groupproto.RoleNone, Positions: pos})
		}
	}
	for id, d := range r.disk {
		if r.core.OnDisk(id) {
			out = append(out, groupproto.TaskOffsets{Task: id, Role: groupproto.RoleNone, Positions: maps.Clone(d.positions)})
		}
	}
	slices.SortFunc(out, func(a, b groupproto.TaskOffsets) int { return a.Task.Compare(b.Task) })
	return out
}

// setShare records a thread's new assignment and brings the standbys and
// parked stores in line with what the threads' assignments want.
func (r *registry) setShare(idx, incarnation int, info groupproto.AssignmentInfo) {
	r.mu.Lock()
	acts := r.stepLocked(instancecore.Event{Kind: instancecore.EvShare, Thread: idx, Incarnation: incarnation, Share: shareOf(info)}, nil)
	r.unlock()
	r.carry(acts)
}

// shareOf is the part of an assignment the core reads.
func shareOf(info groupproto.AssignmentInfo) instancecore.Share {
	return instancecore.Share{Active: info.Active, Standby: info.Standby, Warmup: info.Warmup}
}

// received records the assignment a thread's SyncGroup just answered with,
// before the thread takes it in (setShare), which may wait for a commit:
// queries stop treating a replica (but a running active) as one as soon as
// every thread has heard that none of them keeps it, though closing it
// waits for the thread (instancecore.Core.Servable).
func (r *registry) received(idx, incarnation int, info groupproto.AssignmentInfo) {
	r.mu.Lock()
	defer r.unlock()
	r.stepLocked(instancecore.Event{Kind: instancecore.EvReceived, Thread: idx, Incarnation: incarnation, Share: shareOf(info)}, nil)
}

// revoked records that a thread gave up its assignment (revoked or lost)
// and will learn a new one.
func (r *registry) revoked(idx, incarnation int) {
	r.mu.Lock()
	acts := r.stepLocked(instancecore.Event{Kind: instancecore.EvRevoked, Thread: idx, Incarnation: incarnation}, nil)
	r.unlock()
	r.carry(acts)
}

// close closes every standby, warmup and parked replica once the I/O under
// way is over, then stops following. Threads must have closed their
// actives first. It is called once, by the App's shutdown (StepCloseRegistry).
func (r *registry) close() {
	r.mu.Lock()
	acts := r.stepLocked(instancecore.Event{Kind: instancecore.EvClose}, nil)
	r.unlock()
	r.carry(acts)
	r.awaitQuiet()
	r.cancel()
	r.follower.Close()
	<-r.exited
}

// instanceShare is the union of every thread's latest share of the
// assignment, sorted.
func (r *registry) instanceShare() (active, standby, warmup []task.ID) {
	r.mu.Lock()
	defer r.unlock()
	for th := range r.app.cfg.NumStreamThreads {
		sh, _ := r.core.Share(th)
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

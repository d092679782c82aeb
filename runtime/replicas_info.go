package runtime

// What the registry tells queries and metrics of each replica it holds, and how far to trust it.

import (
	"slices"
	"strings"
	"time"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/taskrun"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
)

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
	for id, rep := range r.reps {
		if !r.core.Visible(id) {
			continue
		}
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
	if !ok || !r.core.Servable(id) {
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
	ri := ReplicaInfo{Task: rep.id, Store: h.Info.Name, Partition: rep.id.Partition, State: r.stateLocked(rep.id), Lag: -1, End: -1,
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
		owner := r.ownerLocked(rep.id)
		switch p, ok := owner.rest.progress(h.Changelog, rep.id.Partition); {
		case h.Changelog == "" || owner.rest.isDone(rep.id):
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
		if owner := r.ownerLocked(rep.id); owner != nil {
			ri.Restored = owner.rest.restoredInto(h.Changelog, rep.id.Partition)
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
	if owner := r.ownerLocked(rep.id); owner != nil {
		return owner.contact.last()
	}
	if !r.app.threadsUp.Load() {
		return time.Time{}
	}
	var named, anyThread time.Time
	for _, th := range r.app.threads {
		at := th.contact.last()
		anyThread = later(anyThread, at)
		if r.namesLocked(th.idx, rep.id) {
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
	if r.ownerLocked(rep.id) != nil || !r.app.threadsUp.Load() {
		return time.Time{}
	}
	var named, all []*thread
	for _, th := range r.app.threads {
		all = append(all, th)
		if r.namesLocked(th.idx, rep.id) {
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
	if owner := r.ownerLocked(rep.id); owner != nil {
		return owner.idx
	}
	for idx := range r.app.cfg.NumStreamThreads {
		if r.namesLocked(idx, rep.id) {
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
	if owner := r.ownerLocked(rep.id); owner != nil {
		return owner.contact.isRefuted()
	}
	if !r.app.threadsUp.Load() {
		return false
	}
	named, all := false, true
	for _, th := range r.app.threads {
		refuted := th.contact.isRefuted()
		all = all && refuted
		if r.namesLocked(th.idx, rep.id) {
			if !refuted {
				return false
			}
			named = true
		}
	}
	return named || all
}

// namesLocked reports whether a thread's latest share names a task.
func (r *registry) namesLocked(idx int, id task.ID) bool {
	sh, ok := r.core.Share(idx)
	return ok && (slices.Contains(sh.Active, id) || slices.Contains(sh.Standby, id) || slices.Contains(sh.Warmup, id))
}

// later returns the later of two times.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

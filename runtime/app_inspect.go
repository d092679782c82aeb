package runtime

// What an App reports of its tasks, replicas and assignment.

import (
	"slices"
	"time"

	"github.com/eddystreams/eddy/internal/taskrun"
	"github.com/eddystreams/eddy/internal/threadcore"
	"github.com/eddystreams/eddy/task"
)

// TaskInfo describes one task this instance holds.
type TaskInfo struct {
	ID    task.ID
	State task.State
	// Restored counts changelog records restoration applied to the task's
	// stores since this instance started.
	Restored int64
	// Remaining is the number of changelog records still to restore, summed
	// over the task's stores; 0 once the task runs.
	Remaining int64
	// Processed and Punctuations count the records the task processed and
	// the punctuator calls it made since this instance last opened it.
	Processed, Punctuations int64
	// DroppedLate counts the records the task's windowed aggregations
	// left out of windows that had closed (later than window end plus
	// grace), since this instance last opened the task.
	DroppedLate int64
	// DroppedJoin counts the stream records the task's stream-table joins
	// dropped for a null key or value, since this instance last opened
	// the task.
	DroppedJoin int64
}

// Tasks lists the tasks this instance holds, ordered by ID. Tasks does not
// wait for a thread carrying out a batch of its core (processing,
// punctuating, committing): such a thread's part is as it published it, at
// the end of its last pass that processed records or, if that pass came
// less than tasksPublishEvery after the publish before, of the first pass
// after it that came later, or when it last settled or checked for
// Running; any other thread's part is as it is now.
func (a *App) Tasks() []TaskInfo {
	if !a.threadsUp.Load() {
		return nil
	}
	var out []TaskInfo
	for _, th := range a.threads {
		out = append(out, th.tasksNow()...)
	}
	slices.SortFunc(out, func(x, y TaskInfo) int { return x.ID.Compare(y.ID) })
	return out
}

// tasksNow is the thread's part of App.Tasks: its tasks as they are when
// nothing is in flight (a batch begins only under mu, so they stay still
// while Tasks holds it), and what it last published otherwise, since the
// batch in flight may be running them.
func (th *thread) tasksNow() []TaskInfo {
	if th.mu.TryLock() {
		defer th.mu.Unlock()
		if !th.core.Busy() {
			return th.taskInfos(th.heldStates())
		}
	}
	if seen := th.tasksSeen.Load(); seen != nil {
		return *seen
	}
	return nil
}

// publishTasks replaces what App.Tasks reports of the thread. It is called
// without mu, by the goroutine that carries out a batch or, between
// batches, by the loop: no other goroutine moves the tasks meanwhile.
func (th *thread) publishTasks() {
	th.mu.Lock()
	ts := th.heldStates()
	th.mu.Unlock()
	infos := th.taskInfos(ts)
	th.tasksSeen.Store(&infos)
	th.tasksPublished, th.tasksChanged = time.Now(), false
}

// tasksPublishEvery bounds how often a busy thread replaces what App.Tasks
// reports of it: describing a thousand tasks after every poll would cost
// a busy instance a share of a core.
const tasksPublishEvery = 50 * time.Millisecond

// heldTask is a task the thread holds and its state as the thread's core
// records it in the task's slot.
type heldTask struct {
	t     *taskrun.Active
	state task.State
}

// heldStates returns the tasks the core holds, sorted by ID, with the
// states of their slots; the caller holds mu.
func (th *thread) heldStates() []heldTask {
	ids := th.core.Held()
	out := make([]heldTask, 0, len(ids))
	for _, id := range ids {
		t := th.task(id)
		if t == nil {
			continue
		}
		st := task.Restoring
		if s, _ := th.core.Slot(id); s == threadcore.Running {
			st = task.Running
		}
		out = append(out, heldTask{t, st})
	}
	return out
}

// taskInfos describes tasks of the thread, which must stay still
// meanwhile.
func (th *thread) taskInfos(ts []heldTask) []TaskInfo {
	var out []TaskInfo
	for _, h := range ts {
		t := h.t
		info := TaskInfo{ID: t.ID(), State: h.state, Restored: th.rest.restoredRecords(t),
			Processed: t.Processed(), Punctuations: t.Punctuations(), DroppedLate: t.DroppedLate(), DroppedJoin: t.DroppedJoin()}
		if h.state == task.Restoring {
			for _, h := range t.Stores() {
				if h.Changelog == "" {
					continue
				}
				if p, ok := th.rest.progress(h.Changelog, t.ID().Partition); ok && p.Lag > 0 {
					info.Remaining += p.Lag
				}
			}
		}
		out = append(out, info)
	}
	return out
}

// storeResets sums the store resets of every reader (Stats.StoreResets).
func (a *App) storeResets() int64 {
	n := a.recreatedResets.Load()
	// Start builds the threads, the registry and the global thread while
	// Stats may be called; each is read only once the flag Start sets
	// after it was built says so.
	if a.threadsUp.Load() {
		for _, th := range a.threads {
			n += th.rest.storeResets()
		}
	}
	if !a.serving.Load() {
		return n
	}
	if r := a.registry; r != nil {
		r.mu.Lock()
		n += r.follower.StoreResets()
		r.mu.Unlock()
	}
	if a.global != nil {
		n += a.global.rebuilds.Load()
	}
	return n
}

// Replicas lists every store partition this instance holds — running and
// restoring actives, standbys, warmups, and parked stores between a
// revocation and the next assignment — with its role, position and lag.
// It asks the broker nothing: lags come from what the changelog readers last
// fetched or listed, with the time the broker last confirmed them (see
// ReplicaInfo for what each figure vouches for).
func (a *App) Replicas() []ReplicaInfo {
	if !a.serving.Load() || a.registry == nil {
		return nil
	}
	return a.registry.replicas()
}

// Assignment is what an instance holds in the group's latest balance: its
// own tasks over all its stream threads, and the group-wide maps of which
// hosts hold which tasks in which role.
type Assignment struct {
	// Active, Standby and Warmup are the instance's tasks, sorted.
	Active, Standby, Warmup []task.ID
	// NextProbingRebalanceMs is the Unix time in milliseconds at which the
	// group rebalances again to check on warmups, or 0.
	NextProbingRebalanceMs int64
	// PartitionsByHost maps each query endpoint of the group to the tasks
	// it runs as active, StandbyPartitionsByHost to those it holds as
	// standby, WarmupPartitionsByHost to those it holds as warmup.
	// Instances without an endpoint are left out.
	PartitionsByHost        map[string][]task.ID
	StandbyPartitionsByHost map[string][]task.ID
	WarmupPartitionsByHost  map[string][]task.ID
	// Epoch names the balance: every member of one balance has the same
	// non-zero epoch, and each balance a different one; 0 when some member
	// speaks a version of the group protocol that carries none.
	Epoch int64
	// Version is the version of the group protocol the assignment came in:
	// the latest every member of the group can read, so below this
	// build's during a rolling upgrade.
	Version int32
}

// Assignment returns the latest assignment this instance received; false
// before the first. When the group protocol carries the group-wide maps
// only in DescribeGroups (version 3 on), they are those of the routing
// table rebuilt from the group for the assignment's epoch, and nil until it
// is (see routing.go).
func (a *App) Assignment() (Assignment, bool) {
	p := a.assignment.Load()
	if p == nil {
		return Assignment{}, false
	}
	info := Assignment{Active: p.Active, Standby: p.Standby, Warmup: p.Warmup, NextProbingRebalanceMs: p.NextProbingRebalanceMs,
		PartitionsByHost: p.PartitionsByHost, StandbyPartitionsByHost: p.StandbyPartitionsByHost, WarmupPartitionsByHost: p.WarmupPartitionsByHost,
		Epoch: p.Epoch, Version: p.Version}
	if info.Epoch != 0 {
		r, _ := a.router.groupTable(info.Epoch)
		info.PartitionsByHost, info.StandbyPartitionsByHost, info.WarmupPartitionsByHost = r.Active, r.Standby, r.Warmup
	}
	if a.registry != nil && len(a.threads) > 1 {
		info.Active, info.Standby, info.Warmup = a.registry.instanceShare()
	}
	return info, true
}

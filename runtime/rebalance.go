package runtime

// The rebalance callbacks of a stream thread, and the start and release of
// its active tasks.

import (
	"context"
	"errors"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/assignor"
	"github.com/eddystreams/eddy/internal/taskrun"
	"github.com/eddystreams/eddy/task"
)

// onAssignment receives the balancer's decoded assignment, just before
// onAssigned runs. It must not block.
//
// A cooperative member that loses tasks revokes them right after this,
// once the thread lets the rebalance go on; asking the thread to commit
// first means the revocation usually finds nothing uncommitted, which under
// exactly-once spares the kept tasks an aborted transaction.
func (th *thread) onAssignment(info assignor.AssignmentInfo) {
	prev := th.info.Swap(&info)
	th.joining.Store(false)
	th.rejoining.Store(false)
	if th.cooperative && prev != nil && slices.ContainsFunc(prev.Active, func(id task.ID) bool { return !slices.Contains(info.Active, id) }) {
		th.rebalancePending.Store(true)
	}
	th.app.assignmentReceived(th, info)
}

// onAssigned starts the active tasks of a new assignment: each takes its
// stores from the registry when they are open here (idle since the
// revocation, or a standby being promoted) and restores only what they
// lack. Then the registry brings standbys in line.
func (th *thread) onAssigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	th.mu.Lock()
	defer th.mu.Unlock()
	info := th.info.Load()
	if info == nil {
		th.app.fail(errors.New("runtime: assigned partitions without an assignment from the balancer"))
		return
	}
	for _, id := range info.Active {
		if _, ok := th.tasks[id]; ok {
			continue
		}
		if !th.startActive(id) {
			// Its input stays paused until the task starts.
			th.cl.PauseFetchPartitions(th.inputPartitions(id))
			th.waiting[id] = true
		}
	}
	th.waitingAny.Store(len(th.waiting) > 0)
	th.app.registry.setShare(th.idx, *info)
	th.app.metrics.rebalances.Inc()
	th.assignments.Add(1)
	th.assigned.Store(true)
	th.log.Info("assigned", "active", len(info.Active), "standby", len(info.Standby), "warmup", len(info.Warmup))
	th.app.maybeRunning()
}

// startActive creates an active task around the stores the registry hands
// over (or opens them) and starts restoring it. It returns false, doing
// nothing, when another thread of this instance still holds the task.
func (th *thread) startActive(id task.ID) bool {
	stores, held := th.app.registry.claimActive(th, id)
	if held {
		return false
	}
	t, err := taskrun.NewActive(taskrun.Config{
		ID:        id,
		AppID:     th.app.cfg.ApplicationID,
		Topology:  th.app.topo,
		Changelog: th.app.changelogTopic,
		Open:      th.app.openStore,
		Stores:    stores,
		Budget:    th.budget,
		Sender:    th,
		Logger:    th.log,
		Observe:   th.app.transitionObserver("task"),
	})
	if err != nil {
		th.app.registry.forget(th, id)
		th.app.fail(err)
		return true
	}
	th.tasks[id] = t
	th.lastTask = nil
	err = th.startRestoring(t)
	th.app.registry.activeStarted(th, t)
	if err != nil {
		th.app.fail(err)
	}
	return true
}

// startWaiting starts the assigned tasks that were held by another thread
// when the assignment came, once that thread has let them go.
func (th *thread) startWaiting() {
	if len(th.waiting) == 0 {
		return
	}
	for _, id := range slices.SortedFunc(maps.Keys(th.waiting), task.ID.Compare) {
		if th.startActive(id) {
			delete(th.waiting, id)
		}
	}
	th.waitingAny.Store(len(th.waiting) > 0)
}

// startRestoring pauses a task's input and hands its changelogs to the
// restorer; the task runs once they are caught up.
func (th *thread) startRestoring(t *taskrun.Active) error {
	if err := t.StartRestoring(); err != nil {
		return err
	}
	th.cl.PauseFetchPartitions(th.inputPartitions(t.ID()))
	return th.rest.register(t)
}

// restoreStep applies a batch of changelog records to restoring tasks and
// starts those that caught up.
func (th *thread) restoreStep() error {
	done, err := th.rest.finished()
	if err != nil {
		return err
	}
	for _, id := range done {
		t, ok := th.tasks[id]
		if !ok || t.State() != task.Restoring {
			continue
		}
		if err := t.Restored(); err != nil {
			return err
		}
		th.app.registry.activeRunning(t)
		th.cl.ResumeFetchPartitions(th.inputPartitions(id))
	}
	return nil
}

// onRevoked gives up tasks. An eager member gives up all of them at every
// rebalance; a cooperative one only those whose partitions it lost (see
// revokeSome).
func (th *thread) onRevoked(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
	if th.stopping.Load() {
		// The thread is shutting down: it closes its tasks itself, and may
		// be holding mu right now while its final commit waits for the
		// transactional session's lock, which the session holds while it
		// runs this callback (a rebalance the last poll let through).
		// Waiting for mu here would deadlock Close.
		return
	}
	th.mu.Lock()
	defer th.mu.Unlock()
	th.assigned.Store(false)
	th.app.rebalanceStarted()
	if th.cooperative {
		th.revokeSome(ctx, lost)
		return
	}
	defer th.unassigned()
	if th.halted {
		th.dropAll()
		return
	}
	if th.sess != nil {
		// The session aborts a transaction a revocation interrupts; the
		// thread committed just before allowing the rebalance when it
		// could, so this drops at most what came after.
		th.discard(th.runningTasks())
		th.abortPending = true
		th.parkAll()
		return
	}
	if err := th.commit(ctx); err != nil {
		th.log.Warn("commit on revocation failed; dropping uncommitted work", "err", err)
		th.dropAll()
		return
	}
	th.parkAll()
}

// revokeSome is a cooperative revocation. At the end of every group session
// it gets nothing: the thread keeps its tasks and processes them through the
// rebalance. After a sync that took tasks away it gets their partitions,
// and commits the thread's work before it parks them: a task's partitions
// go to their next owner only once its work is committed.
//
// Under exactly-once one transaction spans every task of the thread, and
// this callback cannot end it (the session holds the lock that ending
// needs). The thread commits it just before it lets the revocation run
// (onAssignment asks it to); if work came in since, the revoked tasks'
// share cannot be committed alone, so the whole transaction is aborted,
// every task rewinds to its last commit, and the kept tasks process their
// share again. Either way the session aborts the next transaction to end,
// so the thread aborts it, empty, before processing more.
func (th *thread) revokeSome(ctx context.Context, lost map[string][]int32) {
	if len(lost) == 0 {
		th.joining.Store(true)
		return
	}
	var revoked []*taskrun.Active
	for topic, ps := range lost {
		sub, ok := th.app.plan.topicSub[topic]
		if !ok {
			continue
		}
		for _, p := range ps {
			id := task.ID{SubTopology: sub, Partition: p}
			delete(th.waiting, id)
			if t, ok := th.tasks[id]; ok && !slices.Contains(revoked, t) {
				revoked = append(revoked, t)
			}
		}
	}
	th.waitingAny.Store(len(th.waiting) > 0)
	th.rejoining.Store(true)
	// Until its next assignment, the registry keeps the parked stores
	// open for whichever thread claims them.
	th.app.registry.revoked(th.idx)
	th.log.Info("revoking tasks", "tasks", len(revoked), "kept", len(th.tasks)-len(revoked))
	switch {
	case th.halted:
		for _, t := range revoked {
			th.closeTask(t, false)
		}
		return
	case th.sess != nil:
		if th.dirty {
			th.log.Info("tasks revoked while the transaction holds work; aborting it for every task of the thread")
			th.discard(th.runningTasks())
		}
		th.abortPending = true
	default:
		if err := th.commit(ctx); err != nil {
			// The kept tasks' next commit meets the same failure and
			// stops the thread; the revoked ones must go now.
			th.log.Warn("commit on revocation failed; dropping the revoked tasks' uncommitted work", "err", err)
			for _, t := range revoked {
				th.closeTask(t, false)
			}
			return
		}
	}
	th.revokedTasks.Add(int64(len(revoked)))
	for _, t := range revoked {
		th.rest.unregister(t)
		th.app.registry.park(t)
		delete(th.tasks, t.ID())
		th.lastTask = nil
	}
}

// unassigned forgets the tasks still waiting to start and tells the
// registry that the thread's next assignment is not yet known.
func (th *thread) unassigned() {
	clear(th.waiting)
	th.waitingAny.Store(false)
	th.app.registry.revoked(th.idx)
}

// parkAll hands every task's open stores to the registry after a
// revocation. Eager rebalancing revokes everything; the stores stay open, so
// a task assigned back — to this thread or another, as active or standby —
// keeps its state.
func (th *thread) parkAll() {
	th.revokedTasks.Add(int64(len(th.tasks)))
	for _, t := range th.tasks {
		th.rest.unregister(t)
		th.app.registry.park(t)
		delete(th.tasks, t.ID())
		th.lastTask = nil
	}
}

func (th *thread) onLost(_ context.Context, _ *kgo.Client, _ map[string][]int32) {
	if th.stopping.Load() {
		// The thread is shutting down: it closes its tasks itself, and may
		// be holding mu right now while its final commit waits for the
		// transactional session's lock, which the session holds while it
		// runs this callback (a rebalance the last poll let through).
		// Waiting for mu here would deadlock Close.
		return
	}
	th.mu.Lock()
	defer th.mu.Unlock()
	th.assigned.Store(false)
	th.joining.Store(false)
	th.rejoining.Store(false)
	th.app.rebalanceStarted()
	defer th.unassigned()
	th.log.Warn("partitions lost; closing tasks without committing")
	th.dropAll()
	if th.sess != nil {
		th.abortPending = true
	}
}

// dropAll closes every task without committing: the stores keep what their
// recorded positions cover and nothing more.
func (th *thread) dropAll() {
	for _, t := range th.tasks {
		th.closeTask(t, false)
	}
}

func (th *thread) closeTask(t *taskrun.Active, clean bool) {
	th.rest.unregister(t)
	th.app.registry.closeActive(t, clean)
	delete(th.tasks, t.ID())
	th.lastTask = nil
}

package runtime

// The rebalance callbacks of a stream thread, which feed its core, and the
// start and release of its active tasks.

import (
	"context"
	"errors"
	"log/slog"
	"slices"

	"github.com/eddystreams/eddy/internal/heldlog"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/groupproto"
	"github.com/eddystreams/eddy/internal/taskrun"
	"github.com/eddystreams/eddy/internal/threadcore"
	"github.com/eddystreams/eddy/task"
)

// onAssignment receives the balancer's decoded assignment, just before
// onAssigned runs. It must not block, nor wait for a batch in flight: the
// thread's commit in flight may wait for this sync. It leaves the
// assignment in a mailbox the thread empties into its core (EvSynced)
// before its next event: a cooperative member losing tasks then commits before it lets the
// revocation run.
func (th *thread) onAssignment(info groupproto.AssignmentInfo) {
	// Only a SyncGroup answered without error carries an assignment.
	th.contact.synced()
	th.synced.Store(&info)
	th.app.assignmentReceived(th, info)
}

// onAssigned starts the active tasks of a new assignment: each takes its
// stores from the registry when they are open here (parked since the
// revocation, or a standby being promoted) and restores only what they
// lack; one another thread still holds waits. The stores of tasks new to
// the instance are opened first, several at once (openAhead). Then the
// registry brings standbys in line.
func (th *thread) onAssigned(_ context.Context, cl *kgo.Client, _ map[string][]int32) {
	if err := th.drainSynced(cl); err != nil {
		th.app.fail(err)
		return
	}
	e := threadcore.Event{Kind: threadcore.EvAssigned}
	th.enter(&e, cl)
	if th.assignment == nil {
		th.mu.Unlock()
		th.app.fail(errors.New("runtime: assigned partitions without an assignment from the balancer"))
		return
	}
	e.Tasks = th.assignment.Active
	th.logStepErr(e, th.stepEntered(nil, e))
}

// takeShare gives the registry the thread's share of the assignment
// (ActTakeShare): its standbys and warmups, and the stores opened ahead
// that no claim took.
func (th *thread) takeShare() {
	th.mu.Lock()
	info := th.assignment
	th.mu.Unlock()
	th.app.registry.setShare(th.idx, th.incarnationNow(), *info)
	th.app.metrics.rebalances.Inc()
	th.assignments.Add(1)
	th.log.Info("assigned", "active", len(info.Active), "standby", len(info.Standby), "warmup", len(info.Warmup))
	th.publishTasks() // before Running: Tasks then shows the tasks claimed
	th.app.maybeRunning()
}

// startActive creates an active task around the stores the registry hands
// over (or opens them) and starts restoring it: the claim's outcome for the
// core. Another thread of this instance still holding the task is EvHeld,
// and a task that could not be built EvClaimFailed (the App fails).
func (th *thread) startActive(id task.ID) threadcore.Event {
	stores, held := th.app.registry.claimActive(th, id)
	if held {
		return threadcore.Event{Kind: threadcore.EvHeld, Task: id}
	}
	t, err := taskrun.NewActive(taskrun.Config{
		ID:        id,
		AppID:     th.app.cfg.ApplicationID,
		Topology:  th.app.topo,
		Changelog: th.app.changelogTopic,
		Open:      th.app.openStore,
		Global:    th.app.globalStore,
		Stores:    stores,
		Budget:    th.budget,
		Sender:    th,
		Logger:    th.log,
	})
	if err != nil {
		th.app.registry.forget(th, id)
		th.app.fail(err)
		return threadcore.Event{Kind: threadcore.EvClaimFailed, Task: id}
	}
	err = th.startRestoring(t)
	th.app.registry.activeStarted(th, t)
	if err != nil {
		th.app.fail(err)
	}
	return threadcore.Event{Kind: threadcore.EvClaimed, Task: id, Handle: t}
}

// startWaiting claims again the assigned tasks that another thread held
// when the assignment came, as the loop does after each poll.
func (th *thread) startWaiting() error {
	return th.step(nil, threadcore.Event{Kind: threadcore.EvPollDone})
}

// startRestoring pauses a task's input and hands its changelogs to the
// restorer; the task runs once they are caught up.
func (th *thread) startRestoring(t *taskrun.Active) error {
	th.cl.PauseFetchPartitions(th.inputPartitions(t.ID()))
	return th.rest.register(t)
}

// restoreStep applies a batch of changelog records to restoring tasks and
// tells the core of those that caught up: it starts them (ActResume).
func (th *thread) restoreStep() error {
	done, err := th.rest.finished()
	if err != nil {
		return err
	}
	for _, id := range done {
		if err := th.step(nil, threadcore.Event{Kind: threadcore.EvRestored, Task: id}); err != nil {
			return err
		}
	}
	return nil
}

// onRevoked gives up tasks. An eager member gives up all of them at every
// rebalance; a cooperative one only those whose partitions it lost, and at
// the end of every group session it gets nothing: it keeps its tasks and
// processes them through the rebalance. The core decides what a
// revocation commits, discards, parks or closes (threadcore.Core.revoked).
func (th *thread) onRevoked(ctx context.Context, cl *kgo.Client, lost map[string][]int32) {
	if th.stopping.Load() {
		// The thread is shutting down: it closes its tasks itself, and its
		// final commit may be in flight right now, waiting for the
		// transactional session's lock, which the session holds while it
		// runs this callback (a rebalance the last poll let through).
		// Waiting for that flight to land here would deadlock Close.
		return
	}
	th.committer.revoked()
	if err := th.drainSynced(cl); err != nil {
		th.app.fail(err)
		return
	}
	// Which revocation it is needs the core, read under mu once admitted;
	// all three come in, or wait, alike (threadcore's inFlight).
	e := threadcore.Event{Kind: threadcore.EvRevokedAll}
	th.enter(&e, cl)
	var logs heldlog.Lines
	if th.core.Cooperative() {
		e.Kind = threadcore.EvSessionEnded
		if len(lost) > 0 {
			e.Kind, e.Tasks = threadcore.EvRevoked, th.tasksOf(lost)
			logs.Add(slog.LevelInfo, "revoking tasks", "tasks", len(e.Tasks), "held", len(th.core.Held()))
		}
	}
	if err := th.stepEnteredLogging(ctx, e, logs); err != nil {
		if errors.Is(err, threadcore.ErrRefused) {
			th.app.fail(err)
			return
		}
		th.log.Warn("commit on revocation failed; dropping uncommitted work", "err", err)
	}
}

// tasksOf lists the tasks whose input partitions these are, sorted.
func (th *thread) tasksOf(parts map[string][]int32) []task.ID {
	var ids []task.ID
	for topic, ps := range parts {
		sub, ok := th.app.plan.topicSub[topic]
		if !ok {
			continue
		}
		for _, p := range ps {
			if id := (task.ID{SubTopology: sub, Partition: p}); !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	slices.SortFunc(ids, task.ID.Compare)
	return ids
}

func (th *thread) onLost(_ context.Context, cl *kgo.Client, _ map[string][]int32) {
	if th.stopping.Load() {
		// As in onRevoked.
		return
	}
	th.committer.revoked()
	if th.app.cfg.ProcessingGuarantee != ExactlyOnce {
		// Before taking mu, which a commit waiting for these records to
		// be acknowledged holds.
		th.dropUnsent(cl)
	}
	if err := th.drainSynced(cl); err != nil {
		th.app.fail(err)
		return
	}
	th.log.Warn("partitions lost; closing tasks without committing")
	e := threadcore.Event{Kind: threadcore.EvLost}
	th.enter(&e, cl)
	th.logStepErr(e, th.stepEntered(nil, e))
}

// closeTasks closes tasks for good, their stores several at once
// (forStores): a thread stopping closes all its tasks.
func (th *thread) closeTasks(ts []*taskrun.Active, clean bool) {
	for _, t := range ts {
		th.rest.unregister(t)
	}
	forStores(len(ts), func(i int) { th.app.registry.closeActive(th, ts[i], clean) })
}

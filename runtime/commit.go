package runtime

// The commit protocols of a stream thread: at-least-once (commit) and
// exactly-once (commitTransaction), and how a transaction that cannot end is
// handled.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/taskrun"
	"github.com/eddystreams/eddy/task"
)

// commitBounded commits with a deadline rather than the thread's context:
// a stop request must not cut a commit in half, but a broker that stopped
// answering must not hang the thread forever either.
func (th *thread) commitBounded() error {
	ctx, cancel := context.WithTimeout(th.app.killCtx, th.app.cfg.RebalanceTimeout)
	defer cancel()
	start := time.Now()
	err := th.commit(ctx)
	th.app.metrics.commitLatency.Observe(time.Since(start).Seconds())
	return err
}

// commit makes everything processed so far durable, in the order that keeps
// at-least-once: store writes go to the changelogs, the producer is flushed
// and every record acknowledged, the writes enter the stores with their new
// changelog positions, and only then are input offsets committed.
func (th *thread) commit(ctx context.Context) error {
	th.lastCommit, th.consumed = time.Now(), false
	th.commits.Add(1)
	running := th.runningTasks()
	if len(running) == 0 {
		return nil
	}
	for _, t := range running {
		if err := t.Flush(); err != nil {
			return fmt.Errorf("runtime: commit: task %s: %w", t.ID(), err)
		}
	}
	// From here on the producer's Flush, or the transaction's end, covers
	// every record the tasks sent.
	th.out.flush()
	acks := new(changelog.Offsets)
	for _, t := range running {
		for _, w := range t.PendingChangelog() {
			changelog.Send(context.Background(), th.cl, w.Topic, w.Partition, w.Entries, acks)
		}
	}
	if th.sess != nil {
		return th.commitTransaction(ctx, running, acks)
	}
	if err := th.cl.Flush(ctx); err != nil {
		return fmt.Errorf("runtime: commit: flush producer: %w", err)
	}
	if err := th.produceFailed(); err != nil {
		return fmt.Errorf("runtime: commit: %w", err)
	}
	if err := acks.Err(); err != nil {
		return fmt.Errorf("runtime: commit: changelog: %w", err)
	}
	if err := th.writeStores(running, acks.Last); err != nil {
		return err
	}
	offsets := make(map[string]map[int32]kgo.EpochOffset)
	perTask := make(map[task.ID]map[string]int64)
	for _, t := range running {
		o := t.OffsetsToCommit()
		if len(o) == 0 {
			continue
		}
		perTask[t.ID()] = o
		for topic, off := range o {
			if offsets[topic] == nil {
				offsets[topic] = make(map[int32]kgo.EpochOffset)
			}
			offsets[topic][t.ID().Partition] = kgo.EpochOffset{Epoch: -1, Offset: off}
		}
	}
	if len(offsets) == 0 {
		return nil
	}
	var commitErr error
	th.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			commitErr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if e := kerr.ErrorForCode(p.ErrorCode); e != nil && commitErr == nil {
					commitErr = fmt.Errorf("%s/%d: %w", t.Topic, p.Partition, e)
				}
			}
		}
	})
	if commitErr != nil {
		if groupMovedOn(commitErr) {
			return fmt.Errorf("runtime: commit offsets: %w: %w", errGroupMovedOn, commitErr)
		}
		return fmt.Errorf("runtime: commit offsets: %w", commitErr)
	}
	for id, o := range perTask {
		th.tasks[id].MarkCommitted(o)
	}
	return nil
}

// errCrashed stops a thread that a test made crash in the middle of a commit.
var errCrashed = errors.New("runtime: crashed by test hook")

// crashAt is a test seam: when it returns true for a commit step, the
// thread behaves as if the process died there (network cut, nothing more
// written).
// It is set while stream threads run, so it is read atomically.
var crashAt atomic.Pointer[func(step string) bool]

func (th *thread) maybeCrash(step string) error {
	if f := crashAt.Load(); f == nil || !(*f)(step) {
		return nil
	}
	th.app.net.sever()
	th.killed.Store(true)
	return errCrashed
}

// commitTransaction ends the thread's transaction (exactly-once): the
// session flushes the producer, commits the consumed offsets inside the
// transaction and commits it. Only once the transaction has committed do the
// stores receive the writes, with their new changelog positions, so a store
// never holds a write of a transaction that did not commit. If the session
// aborts instead (a rebalance got in the way), the writes are dropped and
// the consumer is back at the last committed offsets.
func (th *thread) commitTransaction(ctx context.Context, running []*taskrun.Active, acks *changelog.Offsets) error {
	try := kgo.TryCommit
	if th.produceFailed() != nil || acks.Err() != nil {
		try = kgo.TryAbort
	}
	if err := th.maybeCrash("before-commit"); err != nil {
		return err
	}
	committed, err := th.sess.End(ctx, try)
	if err != nil {
		return th.transactionFailed(err)
	}
	if !committed {
		th.log.Info("transaction aborted; dropping uncommitted work", "tasks", len(running))
		th.discard(running)
		return th.begin()
	}
	if err := th.maybeCrash("after-commit"); err != nil {
		return err
	}
	// The transaction's commit marker sits right after its last record in
	// each changelog partition (the task is the partition's only writer),
	// so the store's position after the commit is past the marker too:
	// where a reader of the changelog, a standby, stands after it.
	pastMarker := func(topic string, partition int32) (int64, bool) {
		off, ok := acks.Last(topic, partition)
		return off + 1, ok
	}
	if err := th.writeStores(running, pastMarker); err != nil {
		return err
	}
	return th.begin()
}

// completeCommits writes the tasks' committed writes into their stores, all
// tasks at once: every store is a database of its own whose write waits for
// its own disk work, so writing them one after another would add those
// waits up on every commit.
func completeCommits(tasks []*taskrun.Active, last taskrun.LastOffsetFunc) error {
	if len(tasks) == 1 {
		if err := tasks[0].CompleteCommit(last); err != nil {
			return fmt.Errorf("runtime: commit: %w", err)
		}
		return nil
	}
	errs := make([]error, len(tasks))
	var wg sync.WaitGroup
	for i, t := range tasks {
		wg.Go(func() { errs[i] = t.CompleteCommit(last) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("runtime: commit: %w", err)
	}
	return nil
}

// begin starts the next transaction, clearing a produce error that belonged
// to the one just ended.
func (th *thread) begin() error {
	th.produceErr.Store(nil)
	th.dirty = false
	if err := th.sess.Begin(); err != nil {
		return fmt.Errorf("runtime: begin transaction: %w", err)
	}
	return nil
}

// abortTransaction aborts the open transaction after a revocation or loss
// dropped the work it held.
func (th *thread) abortTransaction() error {
	th.abortPending, th.consumed = false, false
	ctx, cancel := context.WithTimeout(th.app.killCtx, th.app.cfg.RebalanceTimeout)
	defer cancel()
	th.discard(th.runningTasks())
	th.out.flush()
	if _, err := th.sess.End(ctx, kgo.TryAbort); err != nil {
		return th.transactionFailed(err)
	}
	return th.begin()
}

// discard drops the uncommitted writes of tasks whose transaction aborted.
func (th *thread) discard(tasks []*taskrun.Active) {
	for _, t := range tasks {
		t.Abort()
	}
}

// transactionFailed handles an error ending a transaction. Being fenced
// means another instance owns this thread's work now (this one was a
// zombie: paused or cut off past its session): the thread drops its tasks
// without writing them to its stores and joins the group again with a new
// client.
func (th *thread) transactionFailed(err error) error {
	// A transaction that cannot end in time belongs to a member the group
	// has most likely dropped while it was cut off (the session waits for
	// a heartbeat that a blocked rebalance never delivers): treat it like
	// fencing. Reconnecting with the same transactional ID also aborts it.
	stuck := errors.Is(err, context.DeadlineExceeded) && !th.stopping.Load() && th.app.killCtx.Err() == nil
	if !isFenced(err) && !stuck {
		return fmt.Errorf("runtime: end transaction: %w", err)
	}
	th.log.Warn("transaction cannot commit (fenced, or dropped from the group while cut off); dropping uncommitted work and rejoining", "err", err)
	return th.reconnect()
}

// isFenced reports whether a transactional error means the producer was
// fenced by a newer one with the same transactional ID or the group moved
// on without this member.
func isFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.InvalidProducerIDMapping) || errors.Is(err, kerr.FencedInstanceID)
}

// errGroupMovedOn marks an offset commit the coordinator refused because
// this member is no longer part of the group's current generation: it was
// evicted (a long pause, a missed session) or the group is rebalancing.
// Kafka Streams calls this a task migration. The thread has not lost
// anything durable — the store writes of the commit are in the changelogs,
// which is all at-least-once asks — but its tasks may belong to others now,
// so it drops them uncommitted and joins again (see thread.rejoin).
var errGroupMovedOn = errors.New("the group moved on without this member")

// groupMovedOn reports whether a commit error means the member's
// generation is over rather than that something is broken.
func groupMovedOn(err error) bool {
	return errors.Is(err, kerr.IllegalGeneration) || errors.Is(err, kerr.UnknownMemberID) ||
		errors.Is(err, kerr.RebalanceInProgress)
}

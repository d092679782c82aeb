package runtime

// The commit protocols of a stream thread behind one interface: the
// thread's core (internal/threadcore) decides when to flush, commit, abort,
// begin or discard, and the thread carries it out through its committer,
// at-least-once (commit_alo.go) or exactly-once (commit_eos.go), without
// branching on the guarantee itself.

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/taskrun"
	"github.com/eddystreams/eddy/internal/threadcore"
	"github.com/eddystreams/eddy/statestore"
)

// committer is a commit protocol. Its methods run on the thread's
// goroutine (or in its rebalance callbacks) with the thread's lock held.
type committer interface {
	// flush makes what tasks hold leave them: caches are flushed, the
	// outbox drained and the stores' dirty entries sent to their
	// changelogs. At-least-once also waits for every acknowledgement.
	// The tasks are those of the core's commit that need one
	// (thread.commitTasks): of an idle instance's thousands, none does.
	flush(ctx context.Context, tasks []*taskrun.Active) error
	// commit commits the tasks' consumed offsets; it follows a flush of
	// the same tasks. At-least-once then writes the flushed entries into
	// the stores with their new positions; exactly-once ends the
	// transaction, when the core's commit names any running task
	// (running), and then writes the stores; aborted reports that the
	// group client aborted it instead, dropping the tasks' work.
	commit(ctx context.Context, tasks []*taskrun.Active, running bool) (aborted bool, err error)
	// abort aborts the open transaction (exactly-once).
	abort(ctx context.Context) error
	// begin begins the next transaction (exactly-once), clearing a produce
	// error that belonged to the one just ended.
	begin() error
	// revoked hears that the group took partitions from the thread (a
	// revocation or a loss), which the transactional session marks its
	// open transaction for abort on. It may run on any goroutine.
	revoked()
}

// newCommitter returns the thread's commit protocol.
func newCommitter(th *thread) committer {
	if th.app.cfg.ProcessingGuarantee == ExactlyOnce {
		return &exactlyOnce{th: th}
	}
	return &atLeastOnce{th: th}
}

// guarantee is the core's name for the thread's processing guarantee.
func (th *thread) guarantee() threadcore.Guarantee {
	if th.app.cfg.ProcessingGuarantee == ExactlyOnce {
		return threadcore.ExactlyOnce
	}
	return threadcore.AtLeastOnce
}

// cause is what the core makes of a commit or abort error
// (threadcore.CauseOf): the thread reports what it knows of the error.
func (th *thread) cause(err error) threadcore.Cause {
	return threadcore.CauseOf(threadcore.Failure{
		MovedOn:       errors.Is(err, errGroupMovedOn),
		Crashed:       errors.Is(err, errCrashed),
		Fenced:        isFenced(err),
		SessionGone:   errors.Is(err, kgo.ErrAborting),
		CannotBegin:   errors.Is(err, errCannotBegin),
		TimedOut:      errors.Is(err, context.DeadlineExceeded),
		LostBroker:    lostBroker(err),
		Transient:     !th.stopping.Load() && th.app.killCtx.Err() == nil,
		Transactional: th.sess != nil,
	}, th.guarantee())
}

// completeCommits writes the tasks' committed writes into their stores, all
// tasks at once: a store with a database of its own waits for that
// database's disk work, so writing them one after another would add those
// waits up on every commit. The stores of the shared database (shared, nil
// in the per-store layout) go to it in one Commit, a task's stores in one
// transaction: badger makes each new transaction wait until every one sent
// before it has been applied, so the tasks' writes made apart would each
// wait for the others'.
func completeCommits(tasks []*taskrun.Active, last taskrun.LastOffsetFunc, shared *statestore.SharedBadger) error {
	if shared == nil && len(tasks) == 1 {
		if err := tasks[0].CompleteCommit(last); err != nil {
			return fmt.Errorf("runtime: commit: %w", err)
		}
		return nil
	}
	grouped := func(statestore.Store) bool { return false }
	if shared != nil {
		grouped = shared.Holds
	}
	errs := make([]error, len(tasks))
	pending := make([]*taskrun.PendingCommit, len(tasks))
	var wg sync.WaitGroup
	for i, t := range tasks {
		wg.Go(func() { pending[i], errs[i] = t.BeginCommit(last, grouped) })
	}
	wg.Wait()
	var groups [][]statestore.StoreWrite
	for _, p := range pending {
		if p != nil && len(p.Writes) > 0 {
			groups = append(groups, p.Writes)
		}
	}
	var err error
	if len(groups) > 0 {
		err = shared.Commit(groups...)
	}
	for i, p := range pending {
		if p != nil {
			errs[i] = p.Finish(err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("runtime: commit: %w", err)
	}
	return nil
}

// lostBroker reports whether err means the broker could not be reached or
// dropped the connection (a restart, say), so that a request's outcome is
// unknown.
func lostBroker(err error) bool {
	return IsUnreachable(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) ||
		// A connection the thread reset itself (abortIfSessionGone,
		// dropUnsent) fails what was in flight on it this way.
		errors.Is(err, net.ErrClosed)
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

// isFenced reports whether a transactional error means the producer was
// fenced by a newer one with the same transactional ID, the group moved
// on without this member, or the coordinator no longer holds the
// transaction the producer thinks is open (it aborted it on its
// transaction timeout: INVALID_TXN_STATE, or an epoch the abort bumped).
// Each leaves one way on: drop the uncommitted work and start again with a
// new producer, whose initialisation aborts whatever is left.
func isFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.InvalidProducerIDMapping) || errors.Is(err, kerr.FencedInstanceID) ||
		errors.Is(err, kerr.InvalidTxnState)
}

// errGroupMovedOn marks an offset commit the coordinator refused because
// this member is no longer part of the group's current generation: it was
// evicted (a long pause, a missed session) or the group is rebalancing.
// Kafka Streams calls this a task migration. The thread has not lost
// anything durable — the store writes of the commit are in the changelogs,
// which is all at-least-once asks — but its tasks may belong to others now,
// so it drops them uncommitted and joins again.
var errGroupMovedOn = errors.New("the group moved on without this member")

// groupMovedOn reports whether a commit error means the member's
// generation is over rather than that something is broken.
func groupMovedOn(err error) bool {
	return errors.Is(err, kerr.IllegalGeneration) || errors.Is(err, kerr.UnknownMemberID) ||
		errors.Is(err, kerr.RebalanceInProgress)
}

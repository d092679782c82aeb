package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/taskrun"
)

// exactlyOnce ends the thread's transaction: the session flushes the
// producer, commits the consumed offsets inside the transaction and commits
// it. Only once the transaction has committed do the stores receive the
// writes, with their new changelog positions, so a store never holds a
// write of a transaction that did not commit. If the session aborts instead
// (a rebalance got in the way), the writes are dropped and the consumer is
// back at the last committed offsets.
type exactlyOnce struct {
	th *thread
	// acks are the changelog sends of the flush the next commit follows.
	acks *changelog.Offsets
	// cannotBegin is set when the session could not begin a transaction
	// (see begin): the next commit fails with it.
	cannotBegin error
	// openIn is the session whose transaction a commit left open because
	// it held nothing (see commit): the next begin there has begun.
	openIn *kgo.GroupTransactSession
	// revokedSince is set when the group took partitions since the
	// session last began or ended a transaction: the session then aborts
	// the open one, and only ending it clears that mark.
	revokedSince atomic.Bool
}

func (c *exactlyOnce) revoked() { c.revokedSince.Store(true) }

func (c *exactlyOnce) flush(_ context.Context, tasks []*taskrun.Active) error {
	th := c.th
	c.acks = new(changelog.Offsets)
	th.returnInput()
	if len(tasks) == 0 {
		return nil
	}
	for _, t := range tasks {
		if err := t.Flush(); err != nil {
			if th.produceFailed() != nil {
				// The transaction can only abort now, which commit
				// does; what is left unflushed is dropped with it.
				return nil
			}
			return fmt.Errorf("runtime: commit: task %s: %w", t.ID(), err)
		}
	}
	// From here on the transaction's end covers every record the tasks
	// sent.
	th.out.flush()
	for _, t := range tasks {
		for _, w := range t.PendingChangelog() {
			changelog.Send(context.Background(), th.cl, w.Topic, w.Partition, w.Entries, c.acks)
		}
	}
	return nil
}

func (c *exactlyOnce) commit(ctx context.Context, tasks []*taskrun.Active, running bool) (bool, error) {
	th, acks := c.th, c.acks
	c.acks = nil
	if c.cannotBegin != nil {
		// Nothing the tasks did since is in a transaction; the thread
		// drops it and starts again with a new producer.
		return false, c.cannotBegin
	}
	if !running {
		return false, nil
	}
	// The transaction ends whatever the tasks did, since the core begins
	// the next one; only the tasks the flush took have writes to land.
	if err := th.maybeCrash("before-commit"); err != nil {
		return false, err
	}
	// Wait for every record of the transaction before choosing how to end
	// it. The session's own flush in End does not look at the records'
	// outcomes: a record the broker refused without failing the producer
	// (INVALID_TXN_STATE, say) would leave a committed transaction
	// without it.
	if err := th.cl.Flush(ctx); err != nil {
		return false, fmt.Errorf("runtime: end transaction: flush producer: %w", err)
	}
	try := kgo.TryCommit
	perr := th.produceFailed()
	if perr == nil {
		perr = acks.Err()
	}
	sent := th.out.takeSent()
	if perr == nil && !sent && acks.Empty() && !c.revokedSince.Load() && th.cl.UncommittedOffsets() == nil {
		// Nothing was sent and no input consumed since the transaction
		// began: it stays open for the next work instead of ending.
		// Ending it would not only be a round for nothing: the session
		// holds its lock for 500 ms after committing a transaction
		// without offsets (franz-go cannot then tell that the broker
		// keeps the offsets of an open transaction from a new owner),
		// which holds up the next commit and the group's next
		// rebalance callbacks. The stores still complete the commit
		// below: a store without a changelog may hold a punctuator's
		// writes, and skipped tombstones are released.
		c.openIn = th.sess
	} else {
		if perr != nil {
			try = kgo.TryAbort
		}
		c.revokedSince.Store(false)
		committed, err := th.sess.End(ctx, try)
		if err != nil {
			return false, fmt.Errorf("runtime: end transaction: %w", err)
		}
		if !committed {
			if perr != nil && permanentProduceError(perr) {
				// Processing the same input again would produce the
				// same record and fail the same way: abort and retry
				// would loop for ever, silently. The thread fails
				// instead, with the policy of
				// Config.OnStreamThreadError.
				return false, fmt.Errorf("runtime: commit: %w", perr)
			}
			th.log.Info("transaction aborted; dropping uncommitted work", "tasks", len(tasks))
			return true, nil
		}
		// Queries of the tasks' actives wait from here until the writes
		// are in the stores (landing.go): the broker shows the commit
		// first. Marked only once End returned: End can take as long as
		// a rebalance, and every query would wait on it.
		defer th.app.landings.begin(tasks)()
	}
	if err := th.maybeCrash("after-commit"); err != nil {
		return false, err
	}
	// The transaction's commit marker sits right after its last record in
	// each changelog partition (the task is the partition's only writer),
	// so the store's position after the commit is past the marker too:
	// where a reader of the changelog, a standby, stands after it.
	pastMarker := func(topic string, partition int32) (int64, bool) {
		off, ok := acks.Last(topic, partition)
		return off + 1, ok
	}
	if err := th.writeStores(tasks, pastMarker); err != nil {
		return false, err
	}
	th.app.publishCommitted(acks)
	return false, nil
}

// abort aborts the open transaction after a revocation or loss dropped the
// work it held (the core discards the tasks' work first).
func (c *exactlyOnce) abort(ctx context.Context) error {
	c.openIn = nil
	c.revokedSince.Store(false)
	c.th.out.flush()
	c.th.out.takeSent()
	if _, err := c.th.sess.End(ctx, kgo.TryAbort); err != nil {
		return fmt.Errorf("runtime: end transaction: %w", err)
	}
	return nil
}

// begin begins the next transaction. A producer whose ID the broker no
// longer accepts cannot begin one: franz-go keeps such a producer ID failed
// for good ("fatal, unrecoverable"), which happens when a broker restart
// aborted the producer's open transaction and bumped its epoch, or
// answered its producer ID request with an error. Kafka Streams treats a
// fatal producer error as a task migration: it closes the producer, makes a
// new one (InitProducerId gives it a new epoch) and processes again from
// the committed offsets. The thread does the same at its next commit, which
// comes at once (the failure counts as a produce failure, see
// commitClock), rather than stop: its stores keep their state, and nothing
// it processes meanwhile is sent, since the client is in no transaction.
// Any other error (an authorization refused, say) stops the thread.
func (c *exactlyOnce) begin() error {
	th := c.th
	th.produceErr.Store(nil)
	c.cannotBegin = nil
	if c.openIn == th.sess {
		c.openIn = nil
		return nil
	}
	c.openIn = nil
	c.revokedSince.Store(false)
	err := th.sess.Begin()
	if err == nil {
		return nil
	}
	err = fmt.Errorf("runtime: begin transaction: %w", err)
	if !producerLost(err) {
		return err
	}
	th.log.Warn("cannot begin a transaction; the thread will drop its uncommitted work and start again with a new producer", "err", err)
	c.cannotBegin = fmt.Errorf("%w: %w", errCannotBegin, err)
	th.produceErr.Store(&produceFailure{cl: th.cl, err: c.cannotBegin})
	return nil
}

// errCannotBegin marks a commit that fails because the thread's
// transactional session could not begin the transaction (see
// exactlyOnce.begin).
var errCannotBegin = errors.New("no transaction open")

// producerLost reports whether err means that the transactional producer
// is no longer usable for a reason a new producer does not share: the
// broker fenced or forgot its epoch, aborted its transaction, or could not
// be reached.
func producerLost(err error) bool {
	if isFenced(err) || lostBroker(err) || errors.Is(err, kerr.UnknownProducerID) ||
		errors.Is(err, kerr.TransactionAbortable) {
		return true
	}
	var ke *kerr.Error
	return errors.As(err, &ke) && ke.Retriable
}

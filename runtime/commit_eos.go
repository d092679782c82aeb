package runtime

import (
	"context"
	"fmt"

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
}

func (c *exactlyOnce) flush(_ context.Context, tasks []*taskrun.Active) error {
	th := c.th
	c.acks = new(changelog.Offsets)
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

func (c *exactlyOnce) commit(ctx context.Context, tasks []*taskrun.Active) (bool, error) {
	th, acks := c.th, c.acks
	c.acks = nil
	if len(tasks) == 0 {
		return false, nil
	}
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
	if perr != nil {
		try = kgo.TryAbort
	}
	committed, err := th.sess.End(ctx, try)
	if err != nil {
		return false, fmt.Errorf("runtime: end transaction: %w", err)
	}
	if committed {
		// Queries of the tasks' actives wait from here until the writes
		// are in the stores (landing.go): the broker shows the commit
		// first. Marked only once End returned: End can take as long as a
		// rebalance, and every query would wait on it.
		defer th.app.landings.begin(tasks)()
	}
	if !committed {
		if perr != nil && permanentProduceError(perr) {
			// Processing the same input again would produce the same
			// record and fail the same way: abort and retry would loop
			// for ever, silently. The thread fails instead, with the
			// policy of Config.OnStreamThreadError.
			return false, fmt.Errorf("runtime: commit: %w", perr)
		}
		th.log.Info("transaction aborted; dropping uncommitted work", "tasks", len(tasks))
		return true, nil
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
	return false, th.writeStores(tasks, pastMarker)
}

// abort aborts the open transaction after a revocation or loss dropped the
// work it held (the core discards the tasks' work first).
func (c *exactlyOnce) abort(ctx context.Context) error {
	c.th.out.flush()
	if _, err := c.th.sess.End(ctx, kgo.TryAbort); err != nil {
		return fmt.Errorf("runtime: end transaction: %w", err)
	}
	return nil
}

func (c *exactlyOnce) begin() error {
	c.th.produceErr.Store(nil)
	if err := c.th.sess.Begin(); err != nil {
		return fmt.Errorf("runtime: begin transaction: %w", err)
	}
	return nil
}

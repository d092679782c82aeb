package runtime

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/taskrun"
	"github.com/eddystreams/eddy/task"
)

// atLeastOnce commits in the order that keeps at-least-once: store writes
// go to the changelogs, the producer is flushed and every record
// acknowledged, the input offsets are committed, and only then do the
// writes enter the stores with their new changelog positions. A crash
// repeats at most what followed the last commit.
//
// The stores wait for the offset commit because nothing fences a member the
// group has moved on from: while its flush waits (for a broker that
// restarts, say), the task's new owner restores and writes the same
// changelog partition, and the old owner's records land after the new
// owner's. A position just past its own records would claim that the old
// owner's store holds the new owner's records too; kept as a standby or
// promoted later, it would never read them, and the counts they carried
// would be lost for good. The coordinator refuses that member's offset
// commit, so its stores keep their positions and read the changelog, both
// writers' records, from there when they serve again. A crash between the
// offset commit and the store writes leaves the stores behind their
// changelogs, which restoration makes up.
type atLeastOnce struct {
	th *thread
	// acks are the changelog offsets the last flush had acknowledged,
	// for its commit to write into the stores.
	acks *changelog.Offsets
}

func (c *atLeastOnce) flush(ctx context.Context, tasks []*taskrun.Active) error {
	th := c.th
	c.acks = nil
	if len(tasks) == 0 {
		return nil
	}
	for _, t := range tasks {
		if err := t.Flush(); err != nil {
			return fmt.Errorf("runtime: commit: task %s: %w", t.ID(), err)
		}
	}
	th.out.flush()
	acks := new(changelog.Offsets)
	sendCtx := th.sendContext()
	for _, t := range tasks {
		for _, w := range t.PendingChangelog() {
			changelog.Send(sendCtx, th.cl, w.Topic, w.Partition, w.Entries, acks)
		}
	}
	if err := th.maybeCrash("before-flush"); err != nil {
		return err
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
	c.acks = acks
	return nil
}

func (c *atLeastOnce) commit(ctx context.Context, tasks []*taskrun.Active, _ bool) (bool, error) {
	th, acks := c.th, c.acks
	c.acks = nil
	offsets := make(map[string]map[int32]kgo.EpochOffset)
	perTask := make(map[task.ID]map[string]int64)
	for _, t := range tasks {
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
		return false, c.writeStores(tasks, acks)
	}
	// A broker that restarts or cannot be reached for a moment leaves the
	// commit's outcome unknown; committing the same offsets again is
	// harmless, so the commit is retried until the broker answers, for as
	// long as the commit may take. The coordinator then either takes it or
	// refuses it because the group moved on meanwhile.
	commitErr := commitOffsets(ctx, th.cl, offsets)
	for wait := startRetryFirst; commitErr != nil && lostBroker(commitErr); wait = min(2*wait, startRetryMax) {
		th.log.Warn("offset commit could not reach the broker; retrying", "err", commitErr, "retry_in", wait)
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("runtime: commit offsets: %w (%w)", ctx.Err(), commitErr)
		case <-th.ctx.Done():
			return false, fmt.Errorf("runtime: commit offsets: stopped while the broker was unreachable: %w", commitErr)
		case <-time.After(wait):
		}
		commitErr = commitOffsets(ctx, th.cl, offsets)
	}
	if commitErr != nil {
		if groupMovedOn(commitErr) {
			return false, fmt.Errorf("runtime: commit offsets: %w: %w", errGroupMovedOn, commitErr)
		}
		return false, fmt.Errorf("runtime: commit offsets: %w", commitErr)
	}
	// The group shows the input offsets committed before the writes are
	// in the stores that queries read: the tasks' actives are landing
	// until they are (landing.go), as under exactly-once.
	defer th.app.landings.begin(tasks)()
	if err := c.writeStores(tasks, acks); err != nil {
		return false, err
	}
	for _, t := range tasks {
		if o, ok := perTask[t.ID()]; ok {
			t.MarkCommitted(o)
		}
	}
	return false, nil
}

// writeStores writes the tasks' flushed entries into their stores with the
// positions acks holds; without a flush before, there is nothing to write.
func (c *atLeastOnce) writeStores(tasks []*taskrun.Active, acks *changelog.Offsets) error {
	if acks == nil {
		return nil
	}
	if err := c.th.writeStores(tasks, acks.Last); err != nil {
		return err
	}
	c.th.app.publishCommitted(acks)
	return nil
}

// commitOffsets commits offsets for the group and returns the first error,
// of the request or of a partition.
func commitOffsets(ctx context.Context, cl *kgo.Client, offsets map[string]map[int32]kgo.EpochOffset) error {
	var commitErr error
	cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
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
	return commitErr
}

// abort and begin are never asked of at-least-once: there is no
// transaction.
func (c *atLeastOnce) abort(context.Context) error { return nil }
func (c *atLeastOnce) begin() error                { return nil }
func (c *atLeastOnce) revoked()                    {}

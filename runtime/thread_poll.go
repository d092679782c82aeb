package runtime

// The stream thread's loop: each poll handed to the core, and how much the next may take and wait.

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/threadcore"
	"github.com/eddystreams/eddy/task"
)

func (th *thread) loop() error {
	for !th.stopping.Load() {
		if err := th.iteration(); err != nil {
			return err
		}
	}
	return nil
}

// drainSynced feeds the core the assignment of a sync the balancer left in
// its mailbox, if any. The loop and the callbacks call it before their own
// events, so that the core sees the sync before the callbacks that follow
// it; cl is the client whose callback drains it, nil for the loop (see
// enter). It is called without mu.
func (th *thread) drainSynced(cl *kgo.Client) error {
	if info := th.synced.Swap(nil); info != nil {
		e := threadcore.Event{Kind: threadcore.EvSynced, Tasks: info.Active}
		th.enter(&e, cl)
		th.assignment = info
		return th.stepEntered(nil, e)
	}
	return nil
}

// drainMailboxes also feeds the core a rebalance the group client waits
// for: only the loop does, since only it commits for it. It is called
// without mu.
func (th *thread) drainMailboxes() error {
	if err := th.drainSynced(nil); err != nil {
		return err
	}
	if th.rebalancePending.Swap(false) {
		return th.step(nil, threadcore.Event{Kind: threadcore.EvRebalanceRequested})
	}
	return nil
}

// iteration is one pass of the loop: poll, process, restore, commit.
func (th *thread) iteration() error {
	if r := th.rewireReq.Swap(nil); r != nil {
		th.rewiring = r
		return th.step(nil, threadcore.Event{Kind: threadcore.EvRewire})
	}
	pollCtx, cancel := th.pollContext()
	fetches := th.cl.PollRecords(pollCtx, th.pollCap())
	cancel()
	defer th.cl.AllowRebalance()
	if fetches.IsClientClosed() || th.stopping.Load() {
		return nil
	}
	th.passes.Add(1)
	// A pass that processed records publishes the tasks unless the last
	// publish is too recent; a later pass then does, so that what Tasks
	// reports of a thread kept busy (exactly-once commits keep a batch in
	// flight) does not stay behind its last processed records.
	th.tasksChanged = th.tasksChanged || fetches.NumRecords() > 0
	if th.tasksChanged {
		defer func() {
			if time.Since(th.tasksPublished) >= tasksPublishEvery {
				th.publishTasks()
			}
		}()
	}
	th.sendCtx = th.sendContext()
	if err := th.drainMailboxes(); err != nil {
		return err
	}
	// The core processes the poll, or, with an abort owed, aborts first:
	// the records just polled may predate the rewind the abort makes, and
	// will be fetched again. A halted thread does nothing.
	th.fetches, th.processing = fetches, false
	err := th.step(nil, threadcore.Event{Kind: threadcore.EvPolled})
	th.fetches = nil
	if err != nil || !th.processing {
		return err
	}
	if err := th.step(nil, threadcore.Event{Kind: threadcore.EvPollDone}); err != nil {
		return err
	}
	if err := th.restoreStep(); err != nil {
		return err
	}
	if th.app.State() != StateRunning {
		th.publishTasks() // before Running: Tasks then shows what restoring started
	}
	th.app.maybeRunning()
	if err := th.drainMailboxes(); err != nil {
		return err
	}
	return th.step(nil, threadcore.Event{Kind: threadcore.EvTick, Clock: th.commitClock()})
}

// pollCap is how many records the next poll may return, as the core
// decides it (threadcore.PollSize) from the thread's poll time budget,
// what its records have cost lately and the record cache's room.
func (th *thread) pollCap() int {
	left, bounded := th.budget.EntriesLeft()
	return threadcore.PollSize(threadcore.PollFacts{
		MaxPollRecords: th.app.cfg.MaxPollRecords,
		TimeBudget:     th.pollTimeBudget(),
		RecordCost:     th.recordCost,
		EntriesLeft:    left,
		Bounded:        bounded,
	})
}

// pollTimeBudget is how long processing one poll may take: a quarter of the
// shortest timeout that runs while a thread processes a poll. Nothing is
// committed in the middle of a poll, so under exactly-once the transaction
// the poll's first output record opened stays open until the commit after
// the poll, and the broker aborts a transaction open for TransactionTimeout
// (the thread is then fenced, and processes the same poll again); and a
// rebalance waits for the poll to end, for RebalanceTimeout at most.
func (th *thread) pollTimeBudget() time.Duration {
	cfg := th.app.cfg
	d := cfg.RebalanceTimeout
	if cfg.ProcessingGuarantee == ExactlyOnce {
		d = min(d, cfg.TransactionTimeout)
	}
	return d / 4
}

// notePollCost updates recordCost after a poll whose tasks took n records
// in d. A dearer cost is taken at once and a cheaper one halfway, so that a
// cheap poll (records a filter drops, say) does not let the next one grow
// far past the budget if its records are dear again.
func (th *thread) notePollCost(n int, d time.Duration) {
	if n <= 0 {
		return
	}
	c := max(d/time.Duration(n), 1)
	if c >= th.recordCost {
		th.recordCost = c
	} else {
		th.recordCost = (th.recordCost + c) / 2
	}
}

// commitClock is what the thread's input, cache and producer say at the end
// of an iteration; the core, ticked with it, decides whether to commit. A
// drained thread commits early, which spends a commit (under exactly-once a
// transaction) to make results final once input stops, rather than a commit
// interval later.
func (th *thread) commitClock() threadcore.CommitClock {
	return threadcore.CommitClock{
		InputAtEnd:    th.inputAtEnd(),
		BudgetFull:    th.budget.Full(),
		ProduceFailed: th.doomedByProduce(),
	}
}

// inputPartition names a partition of an input topic.
type inputPartition struct {
	topic     string
	partition int32
}

// noteFetched records whether the records a poll returned for a partition
// reach the partition's end as the fetch saw it: the high watermark, or
// under exactly-once the last stable offset, past which a read-committed
// fetch returns nothing yet. Transaction markers are records here (see
// passControl), so a drained partition's position does reach that end. A
// partition whose last record is not its end's predecessor (a poll cut
// short by MaxPollRecords, a fetch capped in bytes, a compacted tail) is
// lagging until a later fetch reaches the end.
func (th *thread) noteFetched(p kgo.FetchTopicPartition) {
	if len(p.Records) == 0 {
		return
	}
	end := p.HighWatermark
	if th.sess != nil {
		end = p.LastStableOffset
	}
	key := inputPartition{p.Topic, p.Partition}
	if p.Records[len(p.Records)-1].Offset+1 >= end {
		delete(th.lagging, key)
	} else {
		th.lagging[key] = struct{}{}
	}
}

// inputAtEnd reports whether every input partition of the thread's running
// tasks it has fetched from is at its end. A poll that returns nothing
// leaves this as it was: the next fetch may simply still be on its way.
// Partitions whose task no longer runs here are forgotten, so a revoked
// partition cannot hold early commits off for good.
func (th *thread) inputAtEnd() bool {
	for p := range th.lagging {
		id := task.ID{SubTopology: th.app.plan.topicSub[p.topic], Partition: p.partition}
		if th.running(id) == nil {
			delete(th.lagging, p)
			continue
		}
		return false
	}
	return true
}

// pollContext bounds the next poll by pollWait. A claim or a change of
// settledness made while the poll waits (an assignment's) ends it
// (wakePoll), so that the tasks' restoration, and the App's move to
// Running, follow at once rather than once the wait is over. A callback let
// through by the last AllowRebalance may be carrying out a batch: the
// restorer and the inputs are its until it lands.
func (th *thread) pollContext() (context.Context, context.CancelFunc) {
	th.lockIdle()
	defer th.mu.Unlock()
	ctx, cancel := context.WithTimeout(th.ctx, th.pollWait())
	th.pollStop = cancel
	return ctx, cancel
}

// wakePoll ends the poll the thread waits in, if any. It is called by a
// batch of the core's, which pollContext, the only writer of pollStop,
// waits for.
func (th *thread) wakePoll() {
	if th.pollStop != nil {
		th.pollStop()
	}
}

// pollWait bounds a poll, as the core decides it (threadcore.Core.PollWait)
// from what the thread observes: whether it restores, whether its input is
// at its end, its next wall-clock punctuation and its tasks' waits for
// input. While it restores nothing else counts, and walking its inputs
// would be wasted. It is called with mu held.
func (th *thread) pollWait() time.Duration {
	now := time.Now()
	f := threadcore.WaitFacts{Restoring: th.rest.active()}
	if !f.Restoring {
		f.InputAtEnd = th.inputAtEnd()
		f.Punctuation, f.HasPunctuation = th.nextPunctuation(now)
		f.LookupPending, f.IdleUntil = th.inputWaits()
		f.Lookup = lookupInterval
	}
	return th.core.PollWait(now, f)
}

package threadcore

// The commit protocol and its clock: when a commit is due, what it covers,
// what follows its outcome, and the aborts, discards and reconnections
// that end work the thread cannot commit.

import (
	"time"

	"github.com/eddystreams/eddy/task"
)

// drainedBurst is how many commits a thread may begin back to back before
// an early commit waits for DrainedCommitDelay. Results through repartition
// topics become final only after one drained commit per stage: the upstream
// sub-topology's commit sends its last records (with combining, its
// partial aggregates) to the repartition topic, and only the downstream
// commit that follows makes them state. Spacing those commits
// DrainedCommitDelay apart would add the delay per stage to every result;
// a burst lets a topology of up to drainedBurst stages settle at once,
// while the sliding window still bounds a trickle of input to drainedBurst
// commits per drainedBurst×DrainedCommitDelay.
const drainedBurst = 3

// purpose is what a commit in flight is for, which decides what follows
// its outcome.
type purpose uint8

const (
	forTick      purpose = iota // an interval, early, budget or rebalance commit
	forRevoke                   // at-least-once cooperative revocation
	forRevokeAll                // at-least-once eager revocation
	forStop                     // the final commit
)

// tick decides whether the iteration ends with a commit: the interval has
// passed (while joining, only once the other members had time to join), a
// drained thread may commit early, the cache budget is full, a produce
// failure dooms the transaction, or the group waits to rebalance. The
// rebalance request is only consumed when no other reason commits.
func (c *Core) tick(k CommitClock) {
	joining := c.phase == Joining || c.phase == RejoinJoining
	since := c.now.Sub(c.lastCommit)
	due := since >= c.cfg.CommitInterval && (!joining || since >= c.cfg.CommitInterval+c.cfg.JoinGrace) ||
		!joining && c.drained(k.InputAtEnd) && c.earlyWait(c.now) <= 0 ||
		k.BudgetFull ||
		k.ProduceFailed
	if !due && c.rebalance {
		c.rebalance, due = false, true
	}
	if !due {
		c.emit(Action{Kind: ActPunctuate})
		return
	}
	c.commit(forTick, nil)
}

// drained reports whether a drained thread's early commits are on and the
// thread is drained: it consumed input since its last commit and its input
// is at its end. An idle thread never commits early, and one consuming a
// trickle of input commits early at most drainedBurst times per
// drainedBurst×DrainedCommitDelay.
func (c *Core) drained(inputAtEnd bool) bool {
	return c.cfg.DrainedCommitDelay < c.cfg.CommitInterval && c.consumed && inputAtEnd
}

// earlyWait is how long from now a drained thread must still wait before an
// early commit: until the oldest of its last drainedBurst commits is
// drainedBurst×DrainedCommitDelay old. Zero or less means at once.
func (c *Core) earlyWait(now time.Time) time.Duration {
	return drainedBurst*c.cfg.DrainedCommitDelay - now.Sub(c.recent[c.recentNext])
}

// CommitWait is how long from now the thread may wait (in a poll) before a
// commit may be due: the interval's end or, for a drained thread (inputAtEnd:
// every input partition it fetched from is at its end), the early commit's.
// Zero or less means at once. It changes nothing.
func (c *Core) CommitWait(now time.Time, inputAtEnd bool) time.Duration {
	wait := c.cfg.CommitInterval - now.Sub(c.lastCommit)
	if c.drained(inputAtEnd) {
		wait = min(wait, c.earlyWait(now))
	}
	return wait
}

// commit flushes and commits every running task.
func (c *Core) commit(p purpose, release []task.ID) {
	c.lastCommit = c.now
	c.recent[c.recentNext] = c.now
	c.recentNext = (c.recentNext + 1) % drainedBurst
	c.back = c.mode
	if c.back == AbortPending {
		// A commit after a revocation ends the transaction the group
		// client aborts anyway: its outcome settles the abort owed.
		c.back = c.rest()
	}
	c.setMode(Committing)
	c.purpose, c.releasing = p, release
	c.consumed = false
	c.committed = append(c.commitBuf[:0], c.runningIDs...)
	c.commitBuf = c.committed
	for _, id := range c.worked {
		if s := c.slots[id]; s != nil {
			s.unflushed = false
		}
	}
	c.emit(Action{Kind: ActFlush, Tasks: c.committed})
	c.emit(Action{Kind: ActCommit, Tasks: c.committed})
}

func (c *Core) commitEnded(aborted bool) {
	// Only the tasks in worked may have work, and every one of them that
	// still runs here was running when the commit began, so it is
	// among those committed.
	kept := c.worked[:0]
	for _, id := range c.worked {
		if s := c.slots[id]; s != nil && s.work {
			if s.state == Running {
				s.work = false
			} else {
				kept = append(kept, id)
			}
		}
	}
	c.worked = kept
	switch {
	case c.cfg.Guarantee == AtLeastOnce:
		c.dirty = false
	case len(c.committed) > 0:
		// A commit without running tasks ends no transaction.
		if aborted {
			c.emit(Action{Kind: ActDiscard, Tasks: c.committed})
		}
		c.dirty = false
		c.emit(Action{Kind: ActBegin})
	}
	c.setMode(c.back)
	switch c.purpose {
	case forTick:
		c.emit(Action{Kind: ActPurge})
		c.emit(Action{Kind: ActPunctuate})
	case forRevoke, forRevokeAll:
		c.park(c.releasing)
	case forStop:
		c.exit(true, false)
	}
	c.committed, c.releasing = nil, nil
}

// commitFailed handles a commit that did not go through. An interval
// commit refused because the group moved on (at-least-once) or a fenced or
// stuck transaction (exactly-once) drops every task uncommitted and
// replaces the client; anything else stops the loop. A revocation's commit
// failing drops the revoked tasks' work (the kept tasks' next commit meets
// the same failure).
func (c *Core) commitFailed(cause Cause) {
	p, release := c.purpose, c.releasing
	c.committed, c.releasing = nil, nil
	c.setMode(c.back)
	switch p {
	case forTick:
		switch cause {
		case CauseRefused, CauseFenced:
			c.closeAll()
			c.reconnect(cause, c.rest())
		default:
			c.setMode(Failed)
		}
	case forRevoke:
		c.close(release, false)
	case forRevokeAll:
		c.closeAll()
	case forStop:
		c.closeAll()
		c.exit(false, false)
	}
}

// abort aborts the open transaction; its work is discarded first.
func (c *Core) abort() {
	c.back = c.rest()
	c.setMode(Aborting)
	c.consumed = false
	if len(c.runningIDs) > 0 {
		c.discard(c.running())
	}
	c.emit(Action{Kind: ActAbortTxn})
}

func (c *Core) discardIfDirty() {
	if c.dirty && len(c.runningIDs) > 0 {
		c.discard(c.running())
	}
}

func (c *Core) discard(ids []task.ID) {
	for _, id := range ids {
		s := c.slots[id]
		s.work, s.unflushed = false, false
	}
	c.emit(Action{Kind: ActDiscard, Tasks: ids})
}

func (c *Core) reconnect(cause Cause, back Mode) {
	c.back = back
	c.setMode(Reconnecting)
	c.emit(Action{Kind: ActReconnect, Cause: cause})
}

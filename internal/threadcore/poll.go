package threadcore

// How much the thread's next poll may take and how long it may wait: the
// driver measures the facts, the core decides.

import "time"

// MinPollRecords is the fewest records a poll asks for while the record
// cache's budget is nearly spent: what one poll may overrun the budget by.
const MinPollRecords = 1000

// FirstPollRecords caps a thread's polls until it knows what its records
// cost to process (PollFacts.RecordCost).
const FirstPollRecords = 1000

// MaxPollWait bounds an idle thread's poll when no commit, punctuation,
// restoration or input deadline comes sooner (a long CommitInterval): it
// is how late the thread may notice a request that does not end its poll
// (a rewire).
const MaxPollWait = 5 * time.Second

// WaitingPollWait bounds the poll while a task waits for another thread
// to let it go: the thread claims it again after every poll.
const WaitingPollWait = 500 * time.Millisecond

// RestoringPollWait bounds the poll while the thread restores stores, so
// that restoration, done between polls, is not held up by a poll waiting
// for input.
const RestoringPollWait = 20 * time.Millisecond

// MinPollWait is the shortest a poll waits, so that a deadline already
// past does not turn the loop into a spin.
const MinPollWait = 10 * time.Millisecond

// PollFacts is what the driver measures for sizing the next poll.
type PollFacts struct {
	// MaxPollRecords is the configured cap of one poll.
	MaxPollRecords int
	// TimeBudget is how long processing one poll may take: nothing is
	// committed in the middle of a poll, so a poll must end well within
	// the shortest timeout that runs meanwhile (a transaction's, a
	// rebalance's).
	TimeBudget time.Duration
	// RecordCost is what processing one record has cost lately; zero
	// while the thread has not measured it.
	RecordCost time.Duration
	// EntriesLeft is how many records the record cache's budget has room
	// for at the least each can be charged; it counts only when Bounded.
	EntriesLeft int
	// Bounded reports whether a budget bounds the record cache.
	Bounded bool
}

// PollSize is how many records the next poll may return: MaxPollRecords,
// or fewer when processing them would outlast the poll's time budget or
// while the record cache's budget is filling up.
//
// A slow topology (stores on a slow disk, a loaded machine, a producer
// held back by its broker) takes smaller polls and commits between them,
// where a whole fetch of backlog in one poll could outlast the transaction
// every time it was processed again. And since the cache's budget is
// checked between polls, a poll of MaxPollRecords records that are each a
// new key would overrun a budget of a few MiB several times over; asking
// for no more than the budget has room for keeps the cache near its bound.
func PollSize(f PollFacts) int {
	timed := FirstPollRecords
	if f.RecordCost > 0 {
		timed = int(max(1, f.TimeBudget/f.RecordCost))
	}
	n := min(f.MaxPollRecords, timed)
	if !f.Bounded || f.EntriesLeft >= n {
		return n
	}
	return min(n, max(f.EntriesLeft, MinPollRecords))
}

// WaitFacts is what the driver observes for bounding the next poll's wait,
// beside what the core knows itself (its commit timing, its waiting
// tasks).
type WaitFacts struct {
	// Restoring reports whether the thread has stores to restore; the
	// other facts do not matter then, and the driver may leave them out.
	Restoring bool
	// InputAtEnd reports whether every input partition the thread fetched
	// from is at its end (see CommitWait).
	InputAtEnd bool
	// Punctuation is how long from now until a task's next wall-clock
	// punctuator is due; it counts only when HasPunctuation.
	Punctuation time.Duration
	// HasPunctuation reports whether any task has a wall-clock
	// punctuator scheduled.
	HasPunctuation bool
	// Lookup is how often the driver looks up where an empty partition a
	// task waits on ends; it counts only when LookupPending.
	Lookup time.Duration
	// LookupPending reports whether a task waits on an empty partition
	// whose end the driver has yet to learn.
	LookupPending bool
	// IdleUntil is when the first task waiting for input stops waiting;
	// zero when none waits with a deadline.
	IdleUntil time.Time
}

// PollWait is how long the next poll may wait at now for records, so that
// commits, punctuations, claims and restoration are not starved when no
// input arrives: until the next commit may be due (CommitWait), a
// punctuator is, a waiting task is claimed again, or a task waiting for
// input stops waiting; never longer than MaxPollWait. It changes nothing.
func (c *Core) PollWait(now time.Time, f WaitFacts) time.Duration {
	if f.Restoring {
		return RestoringPollWait
	}
	wait := min(c.CommitWait(now, f.InputAtEnd), MaxPollWait)
	if c.Waiting() {
		wait = min(wait, WaitingPollWait)
	}
	if f.HasPunctuation {
		wait = min(wait, f.Punctuation)
	}
	if f.LookupPending {
		wait = min(wait, f.Lookup)
	}
	if !f.IdleUntil.IsZero() {
		wait = min(wait, f.IdleUntil.Sub(now))
	}
	return max(MinPollWait, wait)
}

package threadcore

import (
	"testing"
	"time"

	"github.com/eddystreams/eddy/task"
)

// A poll takes MaxPollRecords, or fewer: what the thread can process in
// its time budget at what records cost lately (FirstPollRecords before it
// knows, one at the least), and no more than the cache's budget has room
// for, though never fewer than MinPollRecords for that.
func TestPollSize(t *testing.T) {
	const budget = 2500 * time.Millisecond
	for _, tc := range []struct {
		name string
		f    PollFacts
		want int
	}{
		{"cost unknown", PollFacts{MaxPollRecords: 100_000, TimeBudget: budget}, FirstPollRecords},
		{"cost unknown, small max", PollFacts{MaxPollRecords: 500, TimeBudget: budget}, 500},
		{"1 ms a record in 2.5 s", PollFacts{MaxPollRecords: 100_000, TimeBudget: budget, RecordCost: time.Millisecond}, 2500},
		{"a record slower than the budget", PollFacts{MaxPollRecords: 100_000, TimeBudget: budget, RecordCost: time.Minute}, 1},
		{"never above MaxPollRecords", PollFacts{MaxPollRecords: 100_000, TimeBudget: budget, RecordCost: time.Nanosecond}, 100_000},
		{"unbounded cache", PollFacts{MaxPollRecords: 100_000, TimeBudget: budget, RecordCost: time.Nanosecond, EntriesLeft: 0}, 100_000},
		{"cache with room", PollFacts{MaxPollRecords: 100_000, TimeBudget: budget, RecordCost: time.Nanosecond, EntriesLeft: 200_000, Bounded: true}, 100_000},
		{"cache filling up", PollFacts{MaxPollRecords: 100_000, TimeBudget: budget, RecordCost: time.Nanosecond, EntriesLeft: 40_000, Bounded: true}, 40_000},
		{"cache nearly full", PollFacts{MaxPollRecords: 100_000, TimeBudget: budget, RecordCost: time.Nanosecond, EntriesLeft: 10, Bounded: true}, MinPollRecords},
		{"cache full, timed cap smaller", PollFacts{MaxPollRecords: 100_000, TimeBudget: budget, RecordCost: time.Second, EntriesLeft: 0, Bounded: true}, 2},
		{"cache's room above the timed cap", PollFacts{MaxPollRecords: 100_000, TimeBudget: budget, RecordCost: time.Millisecond, EntriesLeft: 3000, Bounded: true}, 2500},
	} {
		if got := PollSize(tc.f); got != tc.want {
			t.Errorf("%s: PollSize = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// A poll waits until the next commit may be due, a punctuator is, a lookup
// or an idle task's deadline comes, a waiting task is claimed again, or
// MaxPollWait; briefly while restoring; never less than MinPollWait.
func TestPollWait(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	long := timed(Config{Guarantee: AtLeastOnce, Cooperative: true})
	long.CommitInterval = time.Minute
	waiting := func(t *testing.T) *Core {
		c := New(aloCoop)
		for _, e := range []Event{
			{Kind: EvSynced, Tasks: []task.ID{t0}, At: base},
			evTasks(EvAssigned, t0),
			evTask(EvHeld, t0),
		} {
			if _, err := landed(c, e); err != nil {
				t.Fatal(err)
			}
		}
		if !c.Waiting() {
			t.Fatal("t0 does not wait")
		}
		return c
	}
	for _, tc := range []struct {
		name string
		core func(*testing.T) *Core
		at   time.Duration
		f    WaitFacts
		want time.Duration
	}{
		{"until the interval commit", func(t *testing.T) *Core { return running(t, aloCoop) }, ms(300), WaitFacts{}, ms(700)},
		{"a long interval: MaxPollWait", func(t *testing.T) *Core { return running(t, long) }, 0, WaitFacts{}, MaxPollWait},
		{"restoring", func(t *testing.T) *Core { return running(t, aloCoop) }, 0, WaitFacts{Restoring: true, HasPunctuation: true, Punctuation: time.Millisecond}, RestoringPollWait},
		{"a task waits for another thread", waiting, 0, WaitFacts{}, WaitingPollWait},
		{"a punctuator due sooner", func(t *testing.T) *Core { return running(t, aloCoop) }, 0, WaitFacts{HasPunctuation: true, Punctuation: ms(50)}, ms(50)},
		{"a lookup pending", func(t *testing.T) *Core { return running(t, aloCoop) }, 0, WaitFacts{LookupPending: true, Lookup: ms(200)}, ms(200)},
		{"a lookup not pending", func(t *testing.T) *Core { return running(t, aloCoop) }, 0, WaitFacts{Lookup: ms(200)}, time.Second},
		{"an idle task's deadline", func(t *testing.T) *Core { return running(t, aloCoop) }, ms(100), WaitFacts{IdleUntil: base.Add(ms(400))}, ms(300)},
		{"deadlines past: MinPollWait", func(t *testing.T) *Core { return running(t, aloCoop) }, ms(5000), WaitFacts{IdleUntil: base}, MinPollWait},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.core(t)
			if got := c.PollWait(base.Add(tc.at), tc.f); got != tc.want {
				t.Errorf("PollWait = %v, want %v", got, tc.want)
			}
		})
	}
}

package threadcore

import (
	"testing"
	"time"
)

// The commit timing rules, from the ticks' times alone: the interval
// counts from the start of the last commit, a cooperative join holds an
// interval commit back for its grace and an early one until the sync, a
// drained thread commits early at most drainedBurst times per
// drainedBurst×DrainedCommitDelay, and a full budget or a doomed
// transaction commits at once.
func TestCommitTiming(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	atEnd := CommitClock{InputAtEnd: true}
	// consumed is a poll in which t0 took input.
	consumed := []step{{ev: ev(EvPolled), want: "Process"}, {ev: processed(t0)}, {ev: ev(EvPollDone)}}
	early := func(at int) []step {
		return append(consumed[:3:3], step{ev: tick(ms(at), atEnd), want: commitsBoth}, step{ev: ev(EvCommitted), want: "Purge Punctuate"})
	}
	seq := func(parts ...[]step) []step {
		var out []step
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	noEarly := aloCoop
	noEarly.DrainedCommitDelay = commitInterval
	for _, tc := range []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{"interval not yet passed", aloCoop, []step{{ev: tick(ms(999), CommitClock{}), want: "Punctuate"}}},
		{"interval passed", aloCoop, []step{{ev: tick(ms(1000), CommitClock{}), want: commitsBoth}}},
		{"interval counts from the last commit's start", aloCoop, []step{
			{ev: tick(ms(1000), CommitClock{}), want: commitsBoth},
			{ev: Event{Kind: EvCommitted, At: base.Add(ms(1500))}, want: "Purge Punctuate"},
			{ev: tick(ms(1999), CommitClock{}), want: "Punctuate"},
			{ev: tick(ms(2000), CommitClock{}), want: commitsBoth},
		}},
		{"a join holds the interval commit for its grace", aloCoop, []step{
			{ev: ev(EvSessionEnded), want: "Unsettle"},
			{ev: tick(ms(1199), CommitClock{}), want: "Punctuate"},
			{ev: tick(ms(1200), CommitClock{}), want: commitsBoth},
		}},
		{"a drained thread commits early", aloCoop, seq(consumed, []step{{ev: tick(ms(10), atEnd), want: commitsBoth}})},
		{"a lagging thread does not", aloCoop, seq(consumed, []step{{ev: tick(ms(10), CommitClock{}), want: "Punctuate"}})},
		{"an idle thread does not", aloCoop, []step{{ev: tick(ms(10), atEnd), want: "Punctuate"}}},
		{"a join holds early commits until the sync", aloCoop, seq(consumed, []step{
			{ev: ev(EvSessionEnded), want: "Unsettle"},
			{ev: tick(ms(10), atEnd), want: "Punctuate"},
		})},
		{"no early commits with a delay at the interval", noEarly, seq(consumed, []step{{ev: tick(ms(10), atEnd), want: "Punctuate"}})},
		{"a burst of three, then the oldest must be three delays old", aloCoop, seq(early(10), early(20), early(30), consumed, []step{
			{ev: tick(ms(309), atEnd), want: "Punctuate"},
			{ev: tick(ms(310), atEnd), want: commitsBoth},
		})},
		{"commits of any kind count in the burst", aloCoop, seq([]step{
			{ev: tick(ms(10), CommitClock{BudgetFull: true}), want: commitsBoth},
			{ev: ev(EvCommitted), want: "Purge Punctuate"},
			{ev: ev(EvRebalanceRequested)},
			{ev: tick(ms(20), CommitClock{}), want: commitsBoth},
			{ev: ev(EvCommitted), want: "Purge Punctuate"},
		}, early(30), consumed, []step{
			{ev: tick(ms(100), atEnd), want: "Punctuate"},
			{ev: tick(ms(310), atEnd), want: commitsBoth},
		})},
		{"a full budget commits at once", aloCoop, []step{{ev: tick(ms(1), CommitClock{BudgetFull: true}), want: commitsBoth}}},
		{"a doomed transaction commits at once, joining or not", eosCoop, []step{
			{ev: ev(EvSessionEnded), want: "Unsettle"},
			{ev: tick(ms(1), CommitClock{ProduceFailed: true}), want: commitsBoth},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			script(t, running(t, tc.cfg), tc.steps...)
		})
	}
}

// CommitWait bounds a poll by the next commit that may be due: the
// interval's end, or a drained thread's early commit.
func TestCommitWait(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	c := running(t, aloCoop)
	at := func(n int) time.Time { return base.Add(ms(n)) }
	if w := c.CommitWait(at(400), true); w != ms(600) {
		t.Fatalf("idle thread: wait %s, want 600ms", w)
	}
	script(t, c, step{ev: ev(EvPolled), want: "Process"}, step{ev: processed(t0)})
	if w := c.CommitWait(at(400), false); w != ms(600) {
		t.Fatalf("lagging thread: wait %s, want 600ms", w)
	}
	if w := c.CommitWait(at(400), true); w > 0 {
		t.Fatalf("drained thread that never committed: wait %s", w)
	}
	for _, n := range []int{410, 420, 430} {
		script(t, c,
			step{ev: tick(ms(n), CommitClock{InputAtEnd: true}), want: commitsBoth},
			step{ev: ev(EvCommitted), want: "Purge Punctuate"},
			step{ev: ev(EvPolled), want: "Process"}, step{ev: processed(t0)})
	}
	if w := c.CommitWait(at(440), true); w != ms(270) {
		t.Fatalf("after a burst: wait %s, want 270ms (until 710ms)", w)
	}
}

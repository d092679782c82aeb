package instancecore

import (
	"errors"
	"testing"
	"time"
)

func failed(th, incarnation int, failure string, at time.Duration) Event {
	return Event{Kind: EvThreadFailed, Thread: th, Incarnation: incarnation, Failure: failure, At: clock(at)}
}

// policyCore is a two-thread instance whose failed threads are dealt with
// by policy, with a budget of two replacements in a row within a minute.
func policyCore(policy ThreadPolicy) *Core {
	return New(Config{Threads: 2, CleanupDelay: testDelay, OnThreadFailure: policy,
		MaxReplacements: 2, ReplacementWindow: time.Minute})
}

// Each policy answers a failure with its one action, and only ReplaceThread
// counts failures.
func TestThreadFailurePolicies(t *testing.T) {
	for _, tc := range []struct {
		policy       ThreadPolicy
		first, again string
	}{
		{StopThread, "StopThread(t1,failures=0)", "StopThread(t0,failures=0)"},
		{ReplaceThread, "ReplaceThread(t1,failures=1)", "ReplaceThread(t0,failures=2)"},
		{ShutdownApplication, "ShutdownApplication(t1)", "ShutdownApplication(t0)"},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			c := policyCore(tc.policy)
			script(t, c,
				step{ev: failed(1, 0, "record a/0@7", time.Second), want: tc.first},
				step{ev: failed(0, 0, "record a/0@7", 2*time.Second), want: tc.again},
			)
			for _, id := range c.Tasks() {
				t.Fatalf("a failure touched replica %s", id)
			}
		})
	}
}

// The budget: the same failure in a row, whichever thread meets it, is
// replaced MaxReplacements times, then stops its thread with the count;
// a different failure, or the same one more than the window after the
// last, starts a new run.
func TestReplacementBudget(t *testing.T) {
	const poison = "record a/0@7"
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"same failure in a row stops with the count", []step{
			{ev: failed(0, 0, poison, time.Second), want: "ReplaceThread(t0,failures=1)"},
			{ev: failed(1, 0, poison, 2*time.Second), want: "ReplaceThread(t1,failures=2)"},
			{ev: failed(0, 0, poison, 3*time.Second), want: "StopThread(t0,failures=3)"},
			{ev: failed(1, 0, poison, 4*time.Second), want: "StopThread(t1,failures=4)"},
		}},
		{"a different failure starts a new run", []step{
			{ev: failed(0, 0, poison, time.Second), want: "ReplaceThread(t0,failures=1)"},
			{ev: failed(0, 0, poison, 2*time.Second), want: "ReplaceThread(t0,failures=2)"},
			{ev: failed(0, 0, "broker gone", 3*time.Second), want: "ReplaceThread(t0,failures=1)"},
			{ev: failed(0, 0, poison, 4*time.Second), want: "ReplaceThread(t0,failures=1)"},
		}},
		{"a failure past the window starts a new run", []step{
			{ev: failed(0, 0, poison, time.Second), want: "ReplaceThread(t0,failures=1)"},
			{ev: failed(0, 0, poison, 2*time.Second), want: "ReplaceThread(t0,failures=2)"},
			{ev: failed(0, 0, poison, 2*time.Second+time.Minute+1), want: "ReplaceThread(t0,failures=1)"},
		}},
		{"a failure right at the window is in a row", []step{
			{ev: failed(0, 0, poison, time.Second), want: "ReplaceThread(t0,failures=1)"},
			{ev: failed(0, 0, poison, time.Second+time.Minute), want: "ReplaceThread(t0,failures=2)"},
			{ev: failed(0, 0, poison, time.Second+2*time.Minute), want: "StopThread(t0,failures=3)"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			script(t, policyCore(ReplaceThread), tc.steps...)
		})
	}
}

// The window runs on the core's clock, the latest time any event carried:
// a failure stamped earlier than a tick already seen is counted at the
// tick's time.
func TestReplacementWindowOnTheCoresClock(t *testing.T) {
	c := policyCore(ReplaceThread)
	script(t, c,
		step{ev: failed(0, 0, "x", time.Second), want: "ReplaceThread(t0,failures=1)"},
		step{ev: tick(2 * time.Minute)},
		step{ev: failed(0, 0, "x", 2*time.Second), want: "ReplaceThread(t0,failures=1)"},
	)
}

// A failure is heard only from a thread's current incarnation, with a
// time; a refused one does not count.
func TestThreadFailureRefused(t *testing.T) {
	c := policyCore(ReplaceThread)
	for _, e := range []Event{
		failed(2, 0, "x", time.Second),
		failed(0, 1, "x", time.Second),
		{Kind: EvThreadFailed, Thread: 0, Failure: "x"},
	} {
		if _, err := c.Step(e); !errors.Is(err, ErrRefused) {
			t.Fatalf("%s: %v, want refused", e, err)
		}
	}
	script(t, c,
		step{ev: failed(0, 0, "x", time.Second), want: "ReplaceThread(t0,failures=1)"},
		step{ev: Event{Kind: EvThreadExit, Thread: 0, Replaced: true}},
		step{ev: failed(0, 1, "x", 2*time.Second), want: "ReplaceThread(t0,failures=2)"},
		step{ev: Event{Kind: EvThreadExit, Thread: 1}},
	)
	if _, err := c.Step(failed(1, 0, "x", 3*time.Second)); !errors.Is(err, ErrRefused) {
		t.Fatalf("a thread gone for good failed: %v, want refused", err)
	}
	if _, err := c.Step(failed(0, 0, "x", 3*time.Second)); !errors.Is(err, ErrRefused) {
		t.Fatalf("an exited incarnation failed: %v, want refused", err)
	}
	script(t, c, step{ev: failed(0, 1, "x", 4*time.Second), want: "StopThread(t0,failures=3)"})
}

package threadcore

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eddystreams/eddy/task"
)

var (
	t0 = task.ID{SubTopology: 0, Partition: 0}
	t1 = task.ID{SubTopology: 0, Partition: 1}
	t2 = task.ID{SubTopology: 1, Partition: 0}
)

// step is one event of a scripted scenario and the actions it must emit,
// written as their String forms joined by spaces ("" for none).
type step struct {
	ev   Event
	want string
}

// acts leaves ActPublish out: TestPublish and the property test check it.
func acts(as []Action) string {
	s := make([]string, 0, len(as))
	for _, a := range as {
		if a.Kind != ActPublish {
			s = append(s, a.String())
		}
	}
	return strings.Join(s, " ")
}

// script feeds steps to c and compares what it emits.
func script(t *testing.T, c *Core, steps ...step) {
	t.Helper()
	for i, s := range steps {
		got, err := landed(c, s.ev)
		if err != nil {
			t.Fatalf("step %d %s: %v", i, s.ev, err)
		}
		if g := acts(got); g != s.want {
			t.Fatalf("step %d %s in %s/%s:\n got  %q\n want %q", i, s.ev, c.Mode(), c.Phase(), g, s.want)
		}
	}
}

func ev(k EventKind) Event                      { return Event{Kind: k} }
func evTask(k EventKind, id task.ID) Event      { return Event{Kind: k, Task: id} }
func evTasks(k EventKind, ids ...task.ID) Event { return Event{Kind: k, Tasks: ids} }
func processed(id task.ID) Event                { return Event{Kind: EvProcessed, Task: id, N: 1} }
func failed(k EventKind, c Cause) Event         { return Event{Kind: k, Cause: c} }

// base is when running's cores start; tick(d, k) is a tick d later.
var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func tick(d time.Duration, k CommitClock) Event {
	return Event{Kind: EvTick, At: base.Add(d), Clock: k}
}

const (
	commitInterval = time.Second
	joinGrace      = 200 * time.Millisecond
	drainedDelay   = 100 * time.Millisecond
	commitsBoth    = "Flush[0_0 0_1] Commit[0_0 0_1]"
)

// running brings a core to two running tasks, t0 and t1.
func running(t *testing.T, cfg Config) *Core {
	t.Helper()
	c := New(cfg)
	script(t, c,
		step{ev: Event{Kind: EvSynced, Tasks: []task.ID{t0, t1}, At: base}},
		step{ev: evTasks(EvAssigned, t0, t1), want: "OpenAhead[0_0 0_1] Claim(0_0) Claim(0_1) TakeShare"},
		step{ev: evTask(EvClaimed, t0)},
		step{ev: evTask(EvClaimed, t1)},
		step{ev: evTask(EvRestored, t0), want: "Resume(0_0)"},
		step{ev: evTask(EvRestored, t1), want: "Resume(0_1)"},
	)
	if c.Phase() != Assigned || !c.Settled() {
		t.Fatalf("phase %s, settled %t", c.Phase(), c.Settled())
	}
	return c
}

func wantState(t *testing.T, c *Core, m Mode, p Phase) {
	t.Helper()
	if c.Mode() != m || c.Phase() != p {
		t.Fatalf("in %s/%s, want %s/%s", c.Mode(), c.Phase(), m, p)
	}
}

var (
	aloCoop  = timed(Config{Guarantee: AtLeastOnce, Cooperative: true})
	eosCoop  = timed(Config{Guarantee: ExactlyOnce, Cooperative: true})
	aloEager = timed(Config{Guarantee: AtLeastOnce})
	eosEager = timed(Config{Guarantee: ExactlyOnce})
)

func timed(cfg Config) Config {
	cfg.CommitInterval, cfg.JoinGrace, cfg.DrainedCommitDelay = commitInterval, joinGrace, drainedDelay
	return cfg
}

func TestIntervalCommit(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		done string
	}{{aloCoop, "Purge Punctuate"}, {eosCoop, "Begin Purge Punctuate"}} {
		t.Run(tc.cfg.Guarantee.String(), func(t *testing.T) {
			c := running(t, tc.cfg)
			script(t, c,
				step{ev: ev(EvPolled), want: "Process"},
				step{ev: processed(t0)},
				step{ev: ev(EvPollDone)},
				step{ev: tick(commitInterval-time.Millisecond, CommitClock{}), want: "Punctuate"},
				step{ev: tick(commitInterval, CommitClock{}), want: commitsBoth},
			)
			wantState(t, c, Committing, Assigned)
			script(t, c, step{ev: ev(EvCommitted), want: tc.done})
			wantState(t, c, Processing, Assigned)
			if len(c.Work()) != 0 || c.Dirty() {
				t.Fatalf("work %v dirty %t after a commit", c.Work(), c.Dirty())
			}
		})
	}
}

// While a cooperative rebalance is between join and sync, an interval
// commit waits until the other members had time to join; an early commit
// of a drained thread waits for the sync.
func TestCommitWaitsOutTheJoin(t *testing.T) {
	c := running(t, aloCoop)
	script(t, c,
		step{ev: ev(EvPolled), want: "Process"},
		step{ev: processed(t0)},
		step{ev: ev(EvSessionEnded), want: "Unsettle"},
		step{ev: tick(commitInterval, CommitClock{}), want: "Punctuate"},
		step{ev: tick(commitInterval+joinGrace/2, CommitClock{InputAtEnd: true}), want: "Punctuate"},
		step{ev: tick(commitInterval+joinGrace, CommitClock{}), want: commitsBoth},
		step{ev: ev(EvCommitted), want: "Purge Punctuate"},
	)
	wantState(t, c, Processing, Joining)
}

// A drained thread commits early only if it consumed since its last commit
// and its input is at its end.
func TestDrainedEarlyCommit(t *testing.T) {
	c := running(t, aloCoop)
	drained := CommitClock{InputAtEnd: true}
	script(t, c,
		step{ev: tick(10*time.Millisecond, drained), want: "Punctuate"}, // idle: nothing consumed
		step{ev: ev(EvPolled), want: "Process"},
		step{ev: processed(t1)},
		step{ev: tick(20*time.Millisecond, CommitClock{}), want: "Punctuate"}, // lagging
		step{ev: tick(30*time.Millisecond, drained), want: commitsBoth},
		step{ev: ev(EvCommitted), want: "Purge Punctuate"},
		step{ev: tick(40*time.Millisecond, drained), want: "Punctuate"},
	)
}

// A rebalance request commits when nothing else does, and is kept for the
// next tick when something else already commits.
func TestRebalanceRequestCommits(t *testing.T) {
	c := running(t, aloEager)
	script(t, c,
		step{ev: ev(EvRebalanceRequested)},
		step{ev: tick(0, CommitClock{BudgetFull: true}), want: commitsBoth},
		step{ev: ev(EvCommitted), want: "Purge Punctuate"},
		step{ev: tick(0, CommitClock{}), want: commitsBoth},
		step{ev: ev(EvCommitted), want: "Purge Punctuate"},
		step{ev: tick(0, CommitClock{}), want: "Punctuate"},
	)
}

// Cooperative revocation under at-least-once: the sync that takes a task
// away asks for a commit before the revocation; the revocation commits
// again and parks the revoked task only; the kept one keeps running.
func TestCooperativeRevocationAtLeastOnce(t *testing.T) {
	c := running(t, aloCoop)
	script(t, c,
		step{ev: ev(EvPolled), want: "Process"},
		step{ev: processed(t1)},
		step{ev: ev(EvSessionEnded), want: "Unsettle"},
		step{ev: evTasks(EvSynced, t0)},
		step{ev: tick(0, CommitClock{}), want: commitsBoth},
		step{ev: ev(EvCommitted), want: "Purge Punctuate"},
		step{ev: evTasks(EvRevoked, t1), want: "Unsettle RegistryRevoked Flush[0_0 0_1] Commit[0_0 0_1]"},
		step{ev: ev(EvCommitted), want: "Park[0_1]"},
		step{ev: evTasks(EvAssigned, t0), want: "TakeShare"},
	)
	wantState(t, c, Processing, Rejoining)
	if c.Settled() {
		t.Fatal("settled with a rejoin owed")
	}
	script(t, c,
		step{ev: ev(EvSessionEnded), want: "Unsettle"},
		step{ev: evTasks(EvSynced, t0, t2)},
		step{ev: evTasks(EvAssigned, t0, t2), want: "OpenAhead[1_0] Claim(1_0) TakeShare"},
		step{ev: evTask(EvClaimed, t2)},
	)
	wantState(t, c, Processing, Assigned)
	if got := c.Tasks(Running); len(got) != 1 || got[0] != t0 {
		t.Fatalf("running %v", got)
	}
}

// A revocation's commit failing drops the revoked task's work; the kept
// task stays.
func TestCooperativeRevocationCommitFails(t *testing.T) {
	c := running(t, aloCoop)
	script(t, c,
		step{ev: evTasks(EvRevoked, t1), want: "Unsettle RegistryRevoked Flush[0_0 0_1] Commit[0_0 0_1]"},
		step{ev: failed(EvCommitFailed, CauseRefused), want: "Close[0_1](clean=false)"},
	)
	wantState(t, c, Processing, Revoked)
	if _, ok := c.Slot(t0); !ok {
		t.Fatal("kept task gone")
	}
}

// Cooperative revocation under exactly-once: a transaction holding work
// is discarded for every task, the revoked task parked, and nothing is
// processed until the owed abort.
func TestCooperativeRevocationExactlyOnce(t *testing.T) {
	t.Run("dirty", func(t *testing.T) {
		c := running(t, eosCoop)
		script(t, c,
			step{ev: ev(EvPolled), want: "Process"},
			step{ev: processed(t0)},
			step{ev: evTasks(EvRevoked, t1), want: "Unsettle RegistryRevoked Discard[0_0 0_1] Park[0_1]"},
		)
		wantState(t, c, AbortPending, Revoked)
		script(t, c,
			step{ev: ev(EvPolled), want: "Discard[0_0] AbortTxn"},
			step{ev: ev(EvAborted), want: "Begin"},
			step{ev: ev(EvPolled), want: "Process"},
		)
	})
	t.Run("clean", func(t *testing.T) {
		c := running(t, eosCoop)
		script(t, c,
			step{ev: evTasks(EvRevoked, t1), want: "Unsettle RegistryRevoked Park[0_1]"},
			step{ev: ev(EvPolled), want: "Discard[0_0] AbortTxn"},
			step{ev: failed(EvAbortFailed, CauseFenced), want: "Close[0_0](clean=false) Reconnect(fenced)"},
			step{ev: ev(EvReconnected)},
		)
		wantState(t, c, Processing, Revoked)
	})
}

func TestEagerRevocation(t *testing.T) {
	t.Run("at-least-once", func(t *testing.T) {
		c := running(t, aloEager)
		script(t, c,
			step{ev: ev(EvRevokedAll), want: "Unsettle RegistryRevoked Flush[0_0 0_1] Commit[0_0 0_1]"},
			step{ev: ev(EvCommitted), want: "Park[0_0 0_1]"},
		)
		wantState(t, c, Processing, Unassigned)
	})
	t.Run("at-least-once commit fails", func(t *testing.T) {
		c := running(t, aloEager)
		script(t, c,
			step{ev: ev(EvRevokedAll), want: "Unsettle RegistryRevoked Flush[0_0 0_1] Commit[0_0 0_1]"},
			step{ev: failed(EvCommitFailed, CauseFatal), want: "Close[0_0 0_1](clean=false)"},
		)
		wantState(t, c, Processing, Unassigned)
	})
	t.Run("exactly-once", func(t *testing.T) {
		c := running(t, eosEager)
		script(t, c,
			step{ev: ev(EvRevokedAll), want: "Unsettle RegistryRevoked Discard[0_0 0_1] Park[0_0 0_1]"},
			step{ev: ev(EvPolled), want: "AbortTxn"},
			step{ev: ev(EvAborted), want: "Begin"},
		)
		wantState(t, c, Processing, Unassigned)
	})
}

func TestLost(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		mode Mode
	}{{aloCoop, Processing}, {eosCoop, AbortPending}} {
		t.Run(tc.cfg.Guarantee.String(), func(t *testing.T) {
			c := running(t, tc.cfg)
			script(t, c, step{ev: ev(EvLost), want: "Unsettle Close[0_0 0_1](clean=false) RegistryRevoked"})
			wantState(t, c, tc.mode, Unassigned)
		})
	}
}

// A commit the group refused (at-least-once) or a fenced transaction
// (exactly-once) drops every task and replaces the client; an aborted
// transaction drops the work and goes on.
func TestCommitFailures(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ev   Event
		want string
		mode Mode
	}{
		{"refused", aloCoop, failed(EvCommitFailed, CauseRefused), "Close[0_0 0_1](clean=false) Reconnect(refused)", Reconnecting},
		{"fenced", eosCoop, failed(EvCommitFailed, CauseFenced), "Close[0_0 0_1](clean=false) Reconnect(fenced)", Reconnecting},
		{"fatal", aloCoop, failed(EvCommitFailed, CauseFatal), "", Failed},
		{"aborted", eosCoop, ev(EvCommitAborted), "Discard[0_0 0_1] Begin Purge Punctuate", Processing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := running(t, tc.cfg)
			script(t, c,
				step{ev: ev(EvPolled), want: "Process"},
				step{ev: processed(t0)},
				step{ev: tick(commitInterval, CommitClock{}), want: commitsBoth},
				step{ev: tc.ev, want: tc.want},
			)
			wantState(t, c, tc.mode, Assigned)
			if tc.mode != Reconnecting {
				return
			}
			if _, err := landed(c, ev(EvPolled)); !errors.Is(err, ErrRefused) {
				t.Fatalf("polled while reconnecting: %v", err)
			}
			// The old client may complete a session as it closes; its
			// leave revokes what it still had.
			script(t, c,
				step{ev: evTasks(EvAssigned, t0, t1), want: "TakeShare"},
				step{ev: evTasks(EvRevoked, t0, t1), want: "Unsettle RegistryRevoked"},
				step{ev: ev(EvReconnected)},
				step{ev: ev(EvPolled), want: "Process"},
			)
		})
	}
}

func TestStop(t *testing.T) {
	t.Run("clean", func(t *testing.T) {
		c := running(t, eosCoop)
		script(t, c,
			step{ev: Event{Kind: EvStop, Clean: true}, want: "Flush[0_0 0_1] Commit[0_0 0_1]"},
			step{ev: ev(EvCommitted), want: "Begin Exit[0_0 0_1](clean=true,killed=false)"},
		)
		wantState(t, c, Exited, Assigned)
	})
	t.Run("final commit fails", func(t *testing.T) {
		c := running(t, aloCoop)
		script(t, c,
			step{ev: Event{Kind: EvStop, Clean: true}, want: "Flush[0_0 0_1] Commit[0_0 0_1]"},
			step{ev: failed(EvCommitFailed, CauseRefused), want: "Close[0_0 0_1](clean=false) Exit[](clean=false,killed=false)"},
		)
	})
	t.Run("after an error", func(t *testing.T) {
		c := running(t, aloCoop)
		script(t, c,
			step{ev: ev(EvFailed)},
			step{ev: Event{Kind: EvStop}, want: "Close[0_0 0_1](clean=false) Exit[](clean=false,killed=false)"},
		)
	})
	t.Run("kill", func(t *testing.T) {
		c := running(t, eosCoop)
		script(t, c, step{ev: ev(EvKill), want: "Close[0_0 0_1](clean=false) Exit[](clean=false,killed=true)"})
		if _, err := landed(c, ev(EvPolled)); !errors.Is(err, ErrRefused) {
			t.Fatalf("polled after exit: %v", err)
		}
	})
}

// ShutdownApplication halts the thread: its tasks close, the transaction
// is aborted, and from then on it processes nothing; revocations close.
func TestHalt(t *testing.T) {
	c := running(t, eosCoop)
	script(t, c,
		step{ev: ev(EvFailed)},
		step{ev: ev(EvHalt), want: "Close[0_0 0_1](clean=false) AbortTxn"},
		step{ev: ev(EvAborted), want: "Begin"},
		step{ev: ev(EvPolled)},
		step{ev: evTasks(EvAssigned, t2), want: "OpenAhead[1_0] Claim(1_0) TakeShare"},
		step{ev: evTask(EvClaimed, t2)},
		step{ev: evTasks(EvRevoked, t2), want: "Unsettle RegistryRevoked Close[1_0](clean=false)"},
		step{ev: Event{Kind: EvStop, Clean: true}, want: "Exit[](clean=true,killed=false)"},
	)
}

// A task another thread of the instance still holds waits, its input
// paused once, and is claimed again after every poll.
func TestHeldTaskWaits(t *testing.T) {
	c := New(aloCoop)
	script(t, c,
		step{ev: evTasks(EvSynced, t0)},
		step{ev: evTasks(EvAssigned, t0), want: "OpenAhead[0_0] Claim(0_0) TakeShare"},
		step{ev: evTask(EvHeld, t0), want: "Pause(0_0)"},
	)
	if c.Settled() {
		t.Fatal("settled with a task waiting")
	}
	script(t, c,
		step{ev: ev(EvPolled), want: "Process"},
		step{ev: ev(EvPollDone), want: "Claim(0_0)"},
		step{ev: evTask(EvHeld, t0)},
		step{ev: ev(EvPollDone), want: "Claim(0_0)"},
		step{ev: evTask(EvClaimed, t0)},
	)
	if !c.Settled() {
		t.Fatal("not settled")
	}
}

func TestRewire(t *testing.T) {
	c := running(t, eosCoop)
	script(t, c,
		step{ev: ev(EvRewire), want: "Close[0_0 0_1](clean=false) Unsettle RegistryRevoked Reconnect(rewire)"},
		step{ev: ev(EvReconnected)},
	)
	wantState(t, c, Processing, Unassigned)
}

// Events a mode or a table forbids are refused and change nothing.
func TestRefusedEvents(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		prep []Event
		ev   Event
	}{
		{"processed for a restoring task", aloCoop, []Event{evTasks(EvAssigned, t0), evTask(EvClaimed, t0)}, processed(t0)},
		{"processed for a task not held", aloCoop, nil, processed(t0)},
		{"assigned between join and sync", aloCoop, []Event{ev(EvSessionEnded)}, evTasks(EvAssigned, t0)},
		{"commit aborted under at-least-once", aloCoop, nil, ev(EvCommitAborted)},
		{"eager revocation of a cooperative member", aloCoop, nil, ev(EvRevokedAll)},
		{"cooperative revocation of an eager member", aloEager, nil, evTasks(EvRevoked, t0)},
		{"tick while committing", aloCoop, []Event{{Kind: EvSynced, At: base}, tick(commitInterval, CommitClock{})}, tick(commitInterval, CommitClock{})},
		{"poll while aborting", eosCoop, []Event{ev(EvLost), ev(EvPolled)}, ev(EvPolled)},
		{"processed while abort owed", eosCoop, []Event{ev(EvLost)}, processed(t0)},
		{"claimed twice", aloCoop, []Event{evTasks(EvAssigned, t0), evTask(EvClaimed, t0)}, evTask(EvClaimed, t0)},
		{"replace without failure", aloCoop, nil, ev(EvReplace)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(tc.cfg)
			for _, e := range tc.prep {
				if _, err := landed(c, e); err != nil {
					t.Fatalf("prep %s: %v", e, err)
				}
			}
			before := fmt.Sprintf("%s %s %v", c.Mode(), c.Phase(), c.Tasks(Running))
			if _, err := landed(c, tc.ev); !errors.Is(err, ErrRefused) {
				t.Fatalf("%s accepted: %v", tc.ev, err)
			}
			if after := fmt.Sprintf("%s %s %v", c.Mode(), c.Phase(), c.Tasks(Running)); after != before {
				t.Fatalf("refused event changed %s to %s", before, after)
			}
		})
	}
}

// A produce failure dooms an exactly-once transaction: the iteration ends
// it at once, even between join and sync, instead of processing more work
// into it. At-least-once commits at once too when the runtime reports a
// failure as dooming (a member whose session may have expired): the
// commit fails, and the thread rejoins without more doomed work.
func TestProduceFailureEndsTheTransaction(t *testing.T) {
	failed := CommitClock{ProduceFailed: true}
	c := running(t, eosCoop)
	script(t, c,
		step{ev: ev(EvPolled), want: "Process"},
		step{ev: processed(t0)},
		step{ev: ev(EvSessionEnded), want: "Unsettle"},
		step{ev: tick(0, failed), want: "Flush[0_0 0_1] Commit[0_0 0_1]"},
		step{ev: ev(EvCommitAborted), want: "Discard[0_0 0_1] Begin Purge Punctuate"},
	)
	wantState(t, c, Processing, Joining)

	c = running(t, aloCoop)
	script(t, c,
		step{ev: ev(EvPolled), want: "Process"},
		step{ev: processed(t0)},
		step{ev: tick(0, failed), want: "Flush[0_0 0_1] Commit[0_0 0_1]"},
	)
}

// The events the driver once checked the mode for before stepping are the
// core's to take: after the exit the closing client's callbacks change
// nothing, a loop failure reported twice is one failure, and a stop during
// a reconnection exits without committing.
func TestEventsTheDriverNeedNotGuard(t *testing.T) {
	exited := func(t *testing.T) *Core {
		c := running(t, aloCoop)
		script(t, c, step{ev: ev(EvKill), want: "Close[0_0 0_1](clean=false) Exit[](clean=false,killed=true)"})
		return c
	}
	for _, tc := range []struct {
		name  string
		core  func(*testing.T) *Core
		steps []step
		mode  Mode
	}{
		{"assigned after the exit", exited, []step{{ev: evTasks(EvAssigned, t0)}}, Exited},
		{"synced after the exit", exited, []step{{ev: evTasks(EvSynced, t0)}}, Exited},
		{"revoked after the exit", exited, []step{{ev: evTasks(EvRevoked, t0)}, {ev: ev(EvSessionEnded)}}, Exited},
		{"lost after the exit", exited, []step{{ev: ev(EvLost)}}, Exited},
		{"sent after the exit", exited, []step{{ev: ev(EvSent)}}, Exited},
		{"failed twice", func(t *testing.T) *Core { return running(t, eosCoop) },
			[]step{{ev: ev(EvFailed)}, {ev: ev(EvFailed)}}, Failed},
		{"stop during a reconnection", func(t *testing.T) *Core { return running(t, aloCoop) }, []step{
			{ev: tick(commitInterval, CommitClock{}), want: commitsBoth},
			{ev: failed(EvCommitFailed, CauseRefused), want: "Close[0_0 0_1](clean=false) Reconnect(refused)"},
			{ev: Event{Kind: EvStop, Clean: true}, want: "Exit[](clean=false,killed=false)"},
		}, Exited},
		{"assigned again while held", func(t *testing.T) *Core { return running(t, aloEager) },
			[]step{{ev: evTasks(EvAssigned, t0, t1, t1), want: "TakeShare"}}, Processing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.core(t)
			wasExited, before := c.Mode() == Exited, c.key()
			script(t, c, tc.steps...)
			if c.Mode() != tc.mode {
				t.Fatalf("mode %s, want %s", c.Mode(), tc.mode)
			}
			if wasExited && c.key() != before {
				t.Fatalf("an exited core changed: %s to %s", before, c.key())
			}
			if _, err := landed(c, ev(EvPolled)); tc.mode != Processing && !errors.Is(err, ErrRefused) {
				t.Fatalf("polled in %s: %v", c.Mode(), err)
			}
		})
	}
}

// Settled reaches other goroutines through ActPublish, first in the batch
// of the step that changed it, and only then.
func TestPublish(t *testing.T) {
	c := New(aloCoop)
	all := func(e Event) string {
		t.Helper()
		out, err := landed(c, e)
		if err != nil {
			t.Fatalf("%s: %v", e, err)
		}
		s := make([]string, len(out))
		for i, a := range out {
			s[i] = a.String()
		}
		return strings.Join(s, " ")
	}
	for _, s := range []step{
		{ev: evTasks(EvSynced, t0)},
		{ev: evTasks(EvAssigned, t0), want: "OpenAhead[0_0] Claim(0_0) TakeShare"},
		{ev: evTask(EvHeld, t0), want: "Pause(0_0)"},
		{ev: ev(EvPollDone), want: "Claim(0_0)"},
		{ev: evTask(EvClaimed, t0), want: "Publish(settled=true)"},
		{ev: evTask(EvRestored, t0), want: "Resume(0_0)"},
		{ev: ev(EvSessionEnded), want: "Publish(settled=false) Unsettle"},
		{ev: evTasks(EvSynced, t0)},
		{ev: evTasks(EvAssigned, t0), want: "Publish(settled=true) TakeShare"},
	} {
		if got := all(s.ev); got != s.want {
			t.Fatalf("%s: got %q, want %q", s.ev, got, s.want)
		}
	}
}

// The core keeps the handle a claim gave with the task's slot, gives it
// as a running task's once the slot runs, and the action that lets the
// task go hands it back.
func TestHandles(t *testing.T) {
	c := New(aloCoop)
	h0, h1 := new(int), new(int)
	script(t, c,
		step{ev: evTasks(EvSynced, t0, t1)},
		step{ev: evTasks(EvAssigned, t0, t1), want: "OpenAhead[0_0 0_1] Claim(0_0) Claim(0_1) TakeShare"},
		step{ev: Event{Kind: EvClaimed, Task: t0, Handle: h0}},
	)
	if c.Handle(t0) != h0 || c.Handle(t1) != nil || c.Handle(t2) != nil {
		t.Fatalf("handles %v %v %v", c.Handle(t0), c.Handle(t1), c.Handle(t2))
	}
	if c.Running(t0) != nil {
		t.Fatalf("a restoring task's handle is not a running one")
	}
	script(t, c, step{ev: evTask(EvRestored, t0), want: "Resume(0_0)"})
	if c.Running(t0) != h0 || c.Running(t1) != nil {
		t.Fatalf("running %v %v", c.Running(t0), c.Running(t1))
	}
	script(t, c, step{ev: Event{Kind: EvClaimed, Task: t1, Handle: h1}})
	if got := c.Held(); len(got) != 2 || got[0] != t0 || got[1] != t1 {
		t.Fatalf("held %v", got)
	}
	let := func(e Event, k ActionKind, want any) {
		t.Helper()
		out, err := landed(c, e)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(out, func(a Action) bool { return a.Kind == k })
		if i < 0 || len(out[i].Handles) != 1 || out[i].Handles[0] != want {
			t.Fatalf("%s: %s, want %s handing back %v", e, acts(out), k, want)
		}
	}
	script(t, c, step{ev: evTasks(EvRevoked, t1), want: "Unsettle RegistryRevoked Flush[0_0] Commit[0_0]"})
	let(ev(EvCommitted), ActPark, h1)
	let(ev(EvKill), ActClose, h0)
}

package threadcore

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/eddystreams/eddy/task"
)

// runningMany returns a core holding n running tasks.
func runningMany(t *testing.T, cfg Config, n int) *Core {
	t.Helper()
	ids := make([]task.ID, n)
	for i := range ids {
		ids[i] = task.ID{Partition: int32(i)}
	}
	c := New(cfg)
	steps := []Event{
		{Kind: EvSynced, Tasks: ids, At: base},
		{Kind: EvAssigned, Tasks: ids},
	}
	for _, id := range ids {
		steps = append(steps, Event{Kind: EvClaimed, Task: id}, Event{Kind: EvRestored, Task: id})
	}
	for _, e := range steps {
		if _, err := landed(c, e); err != nil {
			t.Fatal(err)
		}
	}
	if !c.Settled() || len(c.Tasks(Running)) != n {
		t.Fatalf("settled %t with %d running", c.Settled(), len(c.Tasks(Running)))
	}
	return c
}

// An idle thread's passes, one that ends in an interval commit included,
// cost the core nothing per task it holds: no allocation, whatever the
// number of tasks. Kafka Streams deployments run hundreds of tasks per
// thread; an idle instance of thousands must stay near zero CPU.
func TestIdlePassesAllocateNothing(t *testing.T) {
	for _, cfg := range []Config{aloCoop, eosEager} {
		t.Run(cfg.Guarantee.String(), func(t *testing.T) {
			c := runningMany(t, cfg, 1024)
			at := base
			pass := func(commit bool) {
				at = at.Add(time.Millisecond)
				if commit {
					at = at.Add(cfg.CommitInterval)
				}
				for _, e := range []Event{
					{Kind: EvPolled, At: at},
					{Kind: EvPollDone, At: at},
					{Kind: EvTick, At: at},
				} {
					if _, err := landed(c, e); err != nil {
						t.Fatal(err)
					}
				}
				if c.Mode() == Committing {
					if _, err := landed(c, Event{Kind: EvCommitted, At: at}); err != nil {
						t.Fatal(err)
					}
				}
			}
			pass(true) // the first commit makes what the next ones reuse
			if n := testing.AllocsPerRun(50, func() { pass(false) }); n != 0 {
				t.Errorf("an idle pass allocates %.1f times", n)
			}
			if n := testing.AllocsPerRun(50, func() { pass(true) }); n != 0 {
				t.Errorf("an idle pass with an interval commit allocates %.1f times", n)
			}
		})
	}
}

// The lists the core keeps of its held and running tasks follow every
// slot move: a commit names exactly the running tasks, work is cleared
// for those it covered, and a task let go leaves the lists.
func TestKeptListsFollowSlots(t *testing.T) {
	c := runningMany(t, aloCoop, 8)
	at := base.Add(time.Millisecond)
	mustStep := func(e Event) []Action {
		t.Helper()
		e.At = at
		out, err := landed(c, e)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	mustStep(Event{Kind: EvPolled})
	mustStep(Event{Kind: EvProcessed, Task: task.ID{Partition: 3}, N: 2})
	mustStep(Event{Kind: EvPollDone})
	if w := c.Work(); len(w) != 1 || !w[task.ID{Partition: 3}] {
		t.Fatalf("work %v", w)
	}
	mustStep(Event{Kind: EvRevoked, Tasks: []task.ID{{Partition: 5}}})
	if c.Mode() != Committing {
		t.Fatalf("mode %s after a revocation with work", c.Mode())
	}
	out := mustStep(Event{Kind: EvCommitted})
	if len(out) != 1 || out[0].Kind != ActPark || len(out[0].Tasks) != 1 || out[0].Tasks[0] != (task.ID{Partition: 5}) {
		t.Fatalf("after the revocation's commit: %v", out)
	}
	if w := c.Work(); len(w) != 0 {
		t.Fatalf("work %v after the commit", w)
	}
	held := c.Held()
	if len(held) != 7 || slices.Contains(held, task.ID{Partition: 5}) {
		t.Fatalf("held %v", held)
	}
	at = at.Add(2 * commitInterval)
	out = mustStep(Event{Kind: EvTick})
	if len(out) != 2 || out[0].Kind != ActFlush || len(out[0].Tasks) != 7 || slices.Contains(out[0].Tasks, task.ID{Partition: 5}) {
		t.Fatalf("interval commit: %v", out)
	}
}

// BenchmarkIdlePass is one idle pass of a thread holding tasks (poll,
// poll done, tick), one in four ending in an interval commit: its cost
// does not grow with the tasks held.
func BenchmarkIdlePass(b *testing.B) {
	for _, n := range []int{64, 2048} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
			c := runningMany(&testing.T{}, aloCoop, n)
			at := base
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				at = at.Add(aloCoop.CommitInterval / 4)
				for _, k := range []EventKind{EvPolled, EvPollDone, EvTick} {
					if _, err := landed(c, Event{Kind: k, At: at}); err != nil {
						b.Fatal(err)
					}
				}
				if c.Mode() == Committing {
					if _, err := landed(c, Event{Kind: EvCommitted, At: at}); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

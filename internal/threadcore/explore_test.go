package threadcore

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eddystreams/eddy/task"
)

func (c *Core) clone() *Core {
	d := *c
	d.slots = make(map[task.ID]*slot, len(c.slots))
	for id, s := range c.slots {
		cp := *s
		d.slots[id] = &cp
	}
	d.committed = slices.Clone(c.committed)
	d.heldIDs = slices.Clone(c.heldIDs)
	d.runningIDs = slices.Clone(c.runningIDs)
	d.worked = slices.Clone(c.worked)
	d.commitBuf = nil
	d.releasing = slices.Clone(c.releasing)
	d.active = slices.Clone(c.active)
	d.out = nil
	return &d
}

func (c *Core) key() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %t %s %d %v %v %t %t %t %v %t|", c.mode, c.phase, c.halted, c.back, c.purpose, c.committed, c.releasing, c.dirty, c.consumed, c.rebalance, c.active, c.settled)
	for _, id := range slices.SortedFunc(maps.Keys(c.slots), task.ID.Compare) {
		s := c.slots[id]
		fmt.Fprintf(&b, "%s:%s:%t:%t:%t ", id, s.state, s.paused, s.work, s.unflushed)
	}
	return b.String()
}

// alphabet is every event over one task: the random sequences cover
// several, and one keeps the closure small enough to run every time.
// EDDY_THREADCORE_TWO_TASKS=1 explores two (about four minutes).
func alphabet() []Event {
	ids := []task.ID{t0}
	sets := [][]task.ID{nil, {t0}}
	if os.Getenv("EDDY_THREADCORE_TWO_TASKS") != "" {
		ids = []task.ID{t0, t1}
		sets = [][]task.ID{nil, {t0}, {t1}, {t0, t1}}
	}
	var evs []Event
	for k := range numEventKinds {
		switch k {
		case EvClaimed, EvHeld, EvClaimFailed, EvRestored:
			for _, id := range ids {
				evs = append(evs, Event{Kind: k, Task: id})
			}
		case EvProcessed:
			for _, id := range ids {
				evs = append(evs, Event{Kind: k, Task: id, N: 1})
			}
		case EvSynced, EvAssigned, EvRevoked:
			for _, s := range sets {
				evs = append(evs, Event{Kind: k, Tasks: s})
			}
		case EvTick:
			// Ticks at the start, once the interval passed and once its
			// join grace did too.
			for _, d := range []time.Duration{0, commitInterval, commitInterval + joinGrace} {
				for _, k2 := range []CommitClock{{}, {InputAtEnd: true}, {BudgetFull: true}} {
					evs = append(evs, tick(d, k2))
				}
			}
		case EvCommitFailed, EvAbortFailed:
			for _, cs := range []Cause{CauseRefused, CauseFenced, CauseFatal} {
				evs = append(evs, Event{Kind: k, Cause: cs})
			}
		case EvStop:
			evs = append(evs, Event{Kind: k}, Event{Kind: k, Clean: true})
		default:
			evs = append(evs, Event{Kind: k})
		}
	}
	return evs
}

// Every state reachable from a new core, by any event the core accepts,
// moves only as the tables allow (the core panics otherwise) and keeps the
// core's own invariants; refused events change nothing, and while the batch
// a step answered is in flight, neither do the events held back (every
// kind that is not an outcome, callbacks not marked as the closing
// client's). Every move the
// tables allow is made on the way: they hold none the core never makes.
func TestEveryReachableStateIsInTheTables(t *testing.T) {
	made := map[string]bool{}
	moved := func(table string, from, to uint8) { made[fmt.Sprint(table, from, to)] = true }
	for _, cfg := range []Config{aloCoop, eosCoop, aloEager, eosEager} {
		t.Run(fmt.Sprintf("%s cooperative=%t", cfg.Guarantee, cfg.Cooperative), func(t *testing.T) {
			start := New(cfg)
			start.moved = moved
			seen := map[string]bool{start.key(): true}
			queue := []*Core{start}
			modes := map[Mode]bool{}
			phases := map[Phase]bool{}
			evs := alphabet()
			var held []Event
			for _, e := range evs {
				if inFlight[e.Kind] != outcome {
					held = append(held, e)
				}
			}
			for len(queue) > 0 {
				c := queue[0]
				queue = queue[1:]
				modes[c.mode], phases[c.phase] = true, true
				for _, e := range evs {
					d := c.clone()
					// The key holds no time: every state is explored as
					// if its last commit began at base.
					d.now, d.lastCommit = base, base
					before := d.key()
					var err error
					func() {
						defer func() {
							if r := recover(); r != nil {
								t.Fatalf("from %s, %s: %v", before, e, r)
							}
						}()
						_, err = d.Step(e)
					}()
					if err != nil {
						if d.key() != before {
							t.Fatalf("refused %s changed %s to %s", e, before, d.key())
						}
						continue
					}
					if d.Busy() {
						// In flight, every event another goroutine
						// brings is held back and changes nothing.
						inflight := d.key()
						for _, h := range held {
							if _, err := d.Step(h); !errors.Is(err, ErrBusy) {
								t.Fatalf("from %s, %s in the flight of %s: %v", inflight, h, e, err)
							}
						}
						if k := d.key(); k != inflight {
							t.Fatalf("events held in the flight of %s changed %s to %s", e, inflight, k)
						}
						if err := d.Land(); err != nil || d.Busy() {
							t.Fatalf("landing %s: %v", e, err)
						}
					}
					if d.mode == Exited && len(d.slots) > 0 {
						t.Fatalf("exited with slots: %s", d.key())
					}
					if d.mode != Committing && (d.committed != nil || d.releasing != nil) {
						t.Fatalf("commit state outside Committing: %s", d.key())
					}
					if d.halted && d.mode == Processing {
						t.Fatalf("halted thread processing: %s", d.key())
					}
					if k := d.key(); !seen[k] {
						seen[k] = true
						queue = append(queue, d)
					}
				}
				if len(seen) > 500000 {
					t.Fatalf("state space larger than expected: %d", len(seen))
				}
			}
			t.Logf("%d states, modes %v, phases %v", len(seen), slices.Sorted(maps.Keys(modes)), slices.Sorted(maps.Keys(phases)))
		})
	}
	if t.Failed() {
		return
	}
	unmade := func(table string, from, to uint8, name string) {
		if !made[fmt.Sprint(table, from, to)] {
			t.Errorf("%s move %s is in the table but never made", table, name)
		}
	}
	for from, tos := range modeMoves {
		for _, to := range tos {
			unmade("mode", uint8(from), uint8(to), fmt.Sprintf("%s → %s", from, to))
		}
	}
	for from, tos := range phaseMoves {
		for _, to := range tos {
			unmade("phase", uint8(from), uint8(to), fmt.Sprintf("%s → %s", from, to))
		}
	}
	for from, tos := range slotMoves {
		for _, to := range tos {
			unmade("slot", uint8(from), uint8(to), fmt.Sprintf("%s → %s", from, to))
		}
	}
}

package assignor

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRespreadSkipsOnlyTasksThatCannotGain checks the filter respread puts
// before each re-placement: in random clusters over zone and rack (three
// zones pin every task's replicas half the time), a task that mayGain rules
// out never gains by replaceStandbys, and where settled says no
// re-placement can help, none does.
func TestRespreadSkipsOnlyTasksThatCannotGain(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 35))
	skipped, settledRuns := 0, 0
	for trial := range 300 {
		cfg := cfgWith(func(c *Config) { c.NumStandbys = 2; c.RackAwareTags = []string{"zone", "rack"} })
		zones := 2 + rng.IntN(3)
		clients := map[string]ClientState{}
		for c := range 4 + rng.IntN(12) {
			clients[fmt.Sprintf("c%02d", c)] = ClientState{Capacity: 1 + rng.IntN(2), Tags: map[string]string{
				"zone": fmt.Sprint(c % zones), "rack": fmt.Sprint(rng.IntN(5)),
			}}
		}
		r := newRun(cfg.WithDefaults(), Input{Tasks: taskMap(tasks(0, 1+rng.IntN(30)), nil), Clients: clients})
		r.spreadStatefulActives()
		for c := range r.clients {
			r.clients[c].replicas = r.clients[c].targetLoad
		}
		for i := range r.sf {
			r.sf[i].holders = append(make([]int, 0, 1+r.k), r.sf[i].target)
		}
		ns := len(r.sf)
		lo, hi := bounds(ns*(1+r.k), r.capacities(), ns)
		r.keepStandbys(hi)
		r.fillStandbys(hi)
		off := func(c int) int { return max(0, r.clients[c].replicas-hi[c]) + max(0, lo[c]-r.clients[c].replicas) }
		room := r.roomByValue(lo, hi, r.pinnedKey())
		settled := room.settled()
		if settled {
			settledRuns++
		}
		for i := range r.sf {
			may := room.mayGain(i, lo, hi)
			if !may {
				skipped++
			}
			gained := r.replaceStandbys(i, lo, hi, off)
			require.False(t, gained && (!may || settled), "trial %d task %d: gained, mayGain %v, settled %v", trial, i, may, settled)
			if gained {
				room = r.roomByValue(lo, hi, r.pinnedKey())
			}
		}
	}
	require.Positive(t, skipped)
	require.Positive(t, settledRuns)
}

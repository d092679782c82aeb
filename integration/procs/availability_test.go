package procs

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eddystreams/eddy/integration/fixture"

	"github.com/stretchr/testify/require"
)

const (
	// availSession is the instances' session timeout: short, so that the
	// group notices the kill, and the test ends, soon.
	availSession = 3 * time.Second
)

// availMinAnswered is the share of queries under each bound that must be
// answered (correctly): refusals are allowed while partitions change hands,
// but a test that passes by refusing everything proves nothing. Under
// active, a third of the partitions has no active from the kill until the
// rebalance (the session timeout and more), about half the time queried;
// under age:5s the standbys of a dead active may stop answering too, as
// that active's last commit ages past 5 s; under lag:10000 the standbys,
// current at the kill, can answer throughout, or the active in their stead.
var availMinAnswered = map[string]float64{"lag:10000": 0.8, "age:5s": 0.4, "active": 0.4}

// TestAvailabilityThroughKill is issue 10's test 1. Three instances (a
// broker and each instance a separate process), one standby per task, a
// generated text counted in full beforehand; then, while several goroutines
// query present and absent words through every live instance under
// lag:10000, age:5s and active (route=true), the instance holding actives
// is killed with SIGKILL. Through the session timeout, the rebalance that
// follows (which opens fresh standbys on the survivors) and until every
// replica is current again, every count answered must equal the text's and
// every 404 must be for a word the text does not contain. Refusals are
// allowed and counted. The "restarted" variant brings the victim back on
// its state directory once the survivors have taken over, and keeps
// querying through all three until they settle.
func TestAvailabilityThroughKill(t *testing.T) {
	t.Run("dead", func(t *testing.T) { testAvailability(t, false) })
	t.Run("restarted", func(t *testing.T) { testAvailability(t, true) })
}

func testAvailability(t *testing.T, restart bool) {
	seed := chaosSeed(t)
	t.Logf("seed %d (EDDY_CHAOS_SEED=%d replays the text and the victim)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0xa7a11))
	// 60 000 words over a 3 000-word Zipf vocabulary: a few hundred to a
	// few thousand changelog records per partition, so that a replica
	// opened empty is well within lag:10000 of the end.
	_, h, insts, want := countedCluster(t, seed, 60_000)

	// The sample: the thirty most frequent words, thirty others, and
	// twenty words of the vocabulary's alphabet the text does not contain.
	byCount := slices.SortedFunc(maps.Keys(want), func(a, b string) int {
		return cmp.Or(cmp.Compare(want[b], want[a]), strings.Compare(a, b))
	})
	sample := slices.Clone(byCount[:30])
	rest := byCount[30:]
	for _, i := range rng.Perm(len(rest))[:30] {
		sample = append(sample, rest[i])
	}
	absent := 0
	for _, w := range fixture.NewCorpus(seed^0xab5e7, 500).Vocab {
		if _, ok := want[w]; !ok && absent < 20 {
			sample = append(sample, w)
			absent++
		}
	}
	require.Equal(t, 20, absent, "absent words found")
	rng.Shuffle(len(sample), func(i, j int) { sample[i], sample[j] = sample[j], sample[i] })

	r, err := h.routing(insts[0].http)
	require.NoError(t, err)
	victim := insts[rng.IntN(len(insts))]
	var held []int32
	for p, host := range r.actives {
		if host == victim.http {
			held = append(held, p)
		}
	}
	slices.Sort(held)
	require.NotEmpty(t, held, "the victim holds an active: %s", r)
	var survivors []*procInstance
	for _, in := range insts {
		if in != victim {
			survivors = append(survivors, in)
		}
	}

	// About 300 queries a second in all: enough to land several in the
	// half second a fresh standby takes to fill, without starving the
	// instances on a shared machine.
	load := newAvailLoad(h, want, sample, 3, 10*time.Millisecond)
	load.setTargets(insts...)
	load.start()
	defer load.halt()
	load.waitAnswers(t, 50)

	load.setTargets(survivors...)
	killed := time.Now()
	victim.kill()
	t.Logf("killed %s, active of partitions %v", victim.name, held)
	fixture.WaitFor(t, fixture.SettleTimeout, "the survivors to take over the victim's partitions", func() (bool, string) {
		requireAlive(t, survivors...)
		r, err := h.routing(survivors[0].http)
		if err != nil {
			return false, err.Error()
		}
		for p := range int32(procPartitions) {
			if host, ok := r.actives[p]; !ok || host == victim.http {
				return false, fmt.Sprintf("partition %d active on %q", p, host)
			}
		}
		return true, ""
	})
	t.Logf("survivors took over %s after the kill", time.Since(killed).Round(time.Millisecond))
	live := survivors
	if restart {
		victim.restart()
		live = insts
		load.setTargets(insts...)
		t.Logf("%s restarted %s after the kill", victim.name, time.Since(killed).Round(time.Millisecond))
	}
	waitSettled(t, h, fixture.SettleTimeout, procPartitions, live...)
	fixture.WaitFor(t, fixture.SettleTimeout, "every replica current again", func() (bool, string) {
		requireAlive(t, live...)
		msg := replicasCurrentProblem(h, procPartitions, 1, live...)
		return msg == "", msg
	})
	t.Logf("settled, every replica current, %s after the kill", time.Since(killed).Round(time.Millisecond))
	load.waitAnswers(t, 50)
	load.halt()

	wrong, share := load.report(t)
	if len(wrong) > 0 {
		t.Errorf("%d answers contradict the text, e.g.:\n  %s", len(wrong), strings.Join(wrong[:min(len(wrong), 20)], "\n  "))
	}
	for _, m := range availModes {
		require.GreaterOrEqual(t, share[m], availMinAnswered[m], "share of queries answered under %s", m)
	}
}

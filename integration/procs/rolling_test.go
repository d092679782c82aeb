package procs

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eddystreams/eddy/integration/fixture"

	"github.com/stretchr/testify/require"
)

// TestAvailabilityThroughRollingRestart restarts three exactly-once
// instances (each a separate process, one standby per task) one after
// another the way an operator rolls a deployment: SIGTERM, wait for the
// process to exit, start it again on its state directory, wait until every
// replica is current, then the next. Meanwhile a query load asks every
// instance still up for present and absent words under lag:10000, age:5s
// and active, routed. Every answer must equal the text's count, and
// lag:10000 must never be refused: at every moment of a graceful restart
// some replica within that bound holds each partition (the leaving
// instance's standby, promoted, or its active until it hands over).
func TestAvailabilityThroughRollingRestart(t *testing.T) {
	seed := chaosSeed(t)
	t.Logf("seed %d (EDDY_CHAOS_SEED=%d replays the text)", seed, seed)
	_, h, insts, want := countedCluster(t, seed, 40_000)
	words := slices.Sorted(maps.Keys(want))

	sample := slices.Clone(words[:min(len(words), 60)])
	absent := 0
	for _, w := range fixture.NewCorpus(seed^0xab5e7, 500).Vocab {
		if _, ok := want[w]; !ok && absent < 10 {
			sample = append(sample, w)
			absent++
		}
	}
	load := newAvailLoad(h, want, sample, 3, 10*time.Millisecond)
	load.setTargets(insts...)
	load.start()
	defer load.halt()
	load.waitAnswers(t, 50)

	for _, victim := range insts {
		var others []*procInstance
		for _, in := range insts {
			if in != victim {
				others = append(others, in)
			}
		}
		load.setTargets(others...)
		stopped := time.Now()
		victim.term()
		t.Logf("%s stopped by SIGTERM in %s", victim.name, time.Since(stopped).Round(time.Millisecond))
		require.NoError(t, victim.exitErr(), "%s exits cleanly on SIGTERM", victim.name)
		victim.restart()
		load.setTargets(insts...)
		waitSettled(t, h, fixture.SettleTimeout, procPartitions, insts...)
		fixture.WaitFor(t, fixture.SettleTimeout, "every replica current again", func() (bool, string) {
			requireAlive(t, insts...)
			msg := replicasCurrentProblem(h, procPartitions, 1, insts...)
			return msg == "", msg
		})
		t.Logf("%s back, every replica current, %s after its SIGTERM", victim.name, time.Since(stopped).Round(time.Millisecond))
		load.waitAnswers(t, 30)
	}
	load.halt()

	wrong, share := load.report(t)
	if len(wrong) > 0 {
		t.Errorf("%d answers contradict the text, e.g.:\n  %s", len(wrong), strings.Join(wrong[:min(len(wrong), 20)], "\n  "))
	}
	load.mu.Lock()
	refusedLag := load.stats["lag:10000"].refused
	examples := slices.Clone(load.refusals["lag:10000"])
	load.mu.Unlock()
	if len(refusedLag) > 0 {
		t.Errorf("lag:10000 refused through a rolling restart: %s; first refusals:\n  %s", sortedCounts(refusedLag), strings.Join(examples, "\n  "))
	}
	for _, m := range availModes {
		require.Greater(t, share[m], 0.0, "share of queries answered under %s", m)
	}
}

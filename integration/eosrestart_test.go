package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/eddystreams/eddy/runtime"
)

// TestExactlyOnceRollingRestartWithPurgeLosesNothing restarts every
// instance of an exactly-once group in turn, three times over, gracefully
// and on its own state directory, while input flows and the repartition
// topic is purged after nearly every commit: the hand-overs, revocations
// and aborts the restarts cause must leave the stores and the output equal
// to the reference.
func TestExactlyOnceRollingRestartWithPurgeLosesNothing(t *testing.T) {
	c := newCluster(t, haPartitions)
	cfg := func(int) instanceConfig {
		return instanceConfig{
			guarantee:  runtime.ExactlyOnce,
			standbys:   1,
			purgeEvery: 100 * time.Millisecond,
		}
	}
	insts := c.startGroup(t, 5, cfg)
	waitFor(t, settleTimeout, "every task running", func() (bool, string) {
		n := 0
		for _, in := range insts {
			ids, _ := in.runningTasks()
			n += len(ids)
		}
		return n == c.allTasks(), fmt.Sprintf("%d of %d tasks running", n, c.allTasks())
	})

	want := make(map[string]int64)
	lp := c.startProducing(newCorpus(29, 2000), want, 400, 10*time.Millisecond)
	lp.waitBatches(t, 20)
	for range 3 {
		for i, in := range insts {
			in.close(t)
			lp.waitBatches(t, 10)
			next := cfg(i)
			next.stateDir = in.stateDir
			insts[i] = c.startMember(t, i, next)
			lp.waitBatches(t, 20)
		}
	}
	lp.stopProducing(t)
	c.waitCaughtUp(t, haApp)
	requireStore(t, want, insts...)
	requireCounts(t, want, readCommittedLatest(t, c.b.Addrs()[0], outputTopic, c.partitions), "topic "+outputTopic)
}

package procs

// Issue 11's test 4: instances killed with SIGKILL and restarted at random,
// without waiting for the group to settle between kills, as users do.

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/eddystreams/eddy/integration/fixture"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	// killLoopFor is how long instances keep being killed.
	killLoopFor = 60 * time.Second
	// killLoopSession is the instances' group session timeout: short, so
	// that dead members leave the group within the loop's kill interval.
	killLoopSession = 3 * time.Second
	// killLoopMinGap and killLoopMaxGap bound the time between two kills.
	killLoopMinGap, killLoopMaxGap = 3 * time.Second, 8 * time.Second
)

// killLoop is the outcome of a kill loop: the reference counts of every
// line the broker acknowledged, the kills' redo windows, and the figures.
type killLoop struct {
	c       *procCluster
	h       *procHTTP
	insts   []*procInstance
	probe   *offsetProbe
	want    map[string]int64
	words   []string
	windows []redoWindow
	kills   int
}

// runKillLoop starts a broker and three instances (one standby per task,
// a killLoopSession session timeout) with the guarantee, produces generated
// text continuously, and for killLoopFor kills a random instance every
// killLoopMinGap–killLoopMaxGap, restarting it on its state directory
// 0.2–1.5 s after each kill. Neither the kills nor the restarts wait for
// the group. After the last restart every partition of the counts store
// must have a running active within twice the session timeout; the text
// stops then.
func runKillLoop(t *testing.T, guarantee string) *killLoop {
	seed := chaosSeed(t)
	t.Logf("kill-loop seed %d (EDDY_CHAOS_SEED=%d replays the schedule and the text)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x6b111))

	c := newProcCluster(t, procPartitions)
	kl := &killLoop{c: c, h: newProcHTTP(t), want: make(map[string]int64)}
	for i := range 3 {
		// The over-count bound reads the repartition topic afterwards.
		kl.insts = append(kl.insts, c.startInstanceWith(fmt.Sprintf("i%d", i+1), guarantee,
			"--session-timeout", killLoopSession.String(), "--keep-repartition-records"))
	}
	waitSettled(t, kl.h, fixture.SettleTimeout, procPartitions, kl.insts...)
	kl.probe = newOffsetProbe(t, c.addr, procApp, fixture.InputTopic, fixture.RepartitionTopic(procApp))
	mon := newActiveMonitor(kl.insts, procPartitions)
	defer mon.close()

	// The text: batches of a few lines, one every 50 ms, about 1 000
	// words a second over a 400-word vocabulary. Only what the broker
	// acknowledged counts in the reference.
	pcl, err := kgo.NewClient(kgo.SeedBrokers(c.addr), kgo.DefaultProduceTopic(fixture.InputTopic))
	require.NoError(t, err)
	defer pcl.Close()
	var wantMu sync.Mutex
	stopText, textDone := make(chan struct{}), make(chan error, 1)
	go func() {
		gen := fixture.NewCorpus(seed, 400)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopText:
				textDone <- nil
				return
			case <-tick.C:
			}
			counts := make(map[string]int64)
			var recs []*kgo.Record
			for _, l := range gen.Lines(50, counts) {
				recs = append(recs, &kgo.Record{Value: []byte(l)})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := pcl.ProduceSync(ctx, recs...).FirstErr()
			cancel()
			if err != nil {
				textDone <- fmt.Errorf("producing the text: %w", err)
				return
			}
			wantMu.Lock()
			for w, n := range counts {
				kl.want[w] += n
			}
			wantMu.Unlock()
		}
	}()
	stopTextOnce := sync.OnceFunc(func() {
		close(stopText)
		require.NoError(t, <-textDone)
	})
	defer stopTextOnce()

	began := time.Now()
	var lastRestart time.Time
	for at := began.Add(killLoopMinGap); at.Sub(began) < killLoopFor; at = at.Add(killLoopMinGap + time.Duration(rng.Int64N(int64(killLoopMaxGap-killLoopMinGap)))) {
		// The pauses are the kill schedule, not waits for a condition.
		time.Sleep(time.Until(at))
		requireAlive(t, kl.insts...)
		v := kl.insts[rng.IntN(len(kl.insts))]
		from := kl.probe.committed(t)
		v.kill()
		kl.windows = append(kl.windows, redoWindow{from: from, to: kl.probe.ends(t)})
		down := 200*time.Millisecond + time.Duration(rng.Int64N(int64(1300*time.Millisecond)))
		time.Sleep(down)
		// Timed from the start of the process, not from its ready line.
		lastRestart = time.Now()
		v.restart()
		kl.kills++
		lacked, _ := mon.longestLack()
		t.Logf("%5.1fs: killed %s, restarted after %s; longest lack of a running active so far %s",
			at.Sub(began).Seconds(), v.name, down.Round(time.Millisecond), lacked.Round(time.Millisecond))
	}

	// Within twice the session timeout of the last restart every
	// partition runs an active: the dead member of the last kill has left
	// the group by one session timeout, and one rebalance and a restore
	// of the changelogs' tails take the rest.
	bound := 2 * killLoopSession
	var allRunning time.Duration
	fixture.WaitFor(t, settleAfterChaos, "every partition to have a running active after the last restart", func() (bool, string) {
		requireAlive(t, kl.insts...)
		since, ok := mon.allRunningSince()
		if !ok {
			return false, "some partition lacks a running active"
		}
		allRunning = max(0, since.Sub(lastRestart))
		return true, ""
	})
	lacked, where := mon.longestLack()
	t.Logf("kill loop over after %s: %d kills; every partition had a running active %s after the last restart (bound %s); longest a partition lacked one: %s (%s)",
		time.Since(began).Round(time.Millisecond), kl.kills, allRunning.Round(time.Millisecond), bound, lacked.Round(time.Millisecond), where)
	require.LessOrEqual(t, allRunning, bound, "time from the last restart until every partition had a running active")

	stopTextOnce()
	wantMu.Lock()
	kl.words = slices.Sorted(maps.Keys(kl.want))
	wantMu.Unlock()
	t.Logf("text: %d words, %d distinct", sumCounts(kl.want), len(kl.words))
	require.Greater(t, kl.kills, 5, "kills in %s", killLoopFor)
	return kl
}

// lost is how many counts are below the reference, over all words.
func lost(want, got map[string]int64) int64 {
	var n int64
	for w, x := range want {
		n += max(0, x-got[w])
	}
	return n
}

// TestKillLoopExactlyOnce: under exactly-once, after a minute of kills that
// never wait for the group, every count in the stores and the last count
// of every word in the output topic, read with read-committed isolation,
// equal the text's.
func TestKillLoopExactlyOnce(t *testing.T) {
	kl := runKillLoop(t, "exactly-once")
	began := time.Now()
	var got map[string]int64
	fixture.WaitFor(t, settleAfterChaos, "every count to equal the text's", func() (bool, string) {
		requireAlive(t, kl.insts...)
		var failed map[string]error
		got, failed = snapshotCounts(kl.h, kl.words, "active", kl.insts...)
		return len(failed) == 0 && maps.Equal(got, kl.want), fixture.CountDiff(kl.want, got, failed)
	})
	t.Logf("counts exact %s after the text stopped; records lost: %d; over-count: 0",
		time.Since(began).Round(time.Millisecond), lost(kl.want, got))
	fixture.RequireCounts(t, kl.want, fixture.ReadCommittedLatest(t, kl.c.addr, fixture.OutputTopic, procPartitions),
		"topic "+fixture.OutputTopic+" read committed")
}

// TestKillLoopAtLeastOnce: under at-least-once the same loop loses nothing,
// and each word's over-count stays within what the kills can make the
// application redo: the records past the group's committed offsets when
// each victim died (see overcountBound).
func TestKillLoopAtLeastOnce(t *testing.T) {
	kl := runKillLoop(t, "at-least-once")
	waitAllCommitted(t, kl.probe, settleAfterChaos, kl.insts...)
	var got map[string]int64
	fixture.WaitFor(t, fixture.SettleTimeout, "every count to be readable", func() (bool, string) {
		var failed map[string]error
		got, failed = snapshotCounts(kl.h, kl.words, "active", kl.insts...)
		return len(failed) == 0, fixture.CountDiff(kl.want, got, failed)
	})
	bound := overcountBound(t, kl.c.addr, kl.windows)
	excess, words := checkOvercount(t, kl.want, got, bound)
	t.Logf("at-least-once after %d kills: records lost %d; %d of %d words over-counted, by %d in all (%.2f%% of %d words; the kills' redo windows allow %d)",
		kl.kills, lost(kl.want, got), words, len(kl.words), excess, 100*float64(excess)/float64(sumCounts(kl.want)), sumCounts(kl.want), sumCounts(bound))
	fixture.RequireCounts(t, got, fixture.ReadCommittedLatest(t, kl.c.addr, fixture.OutputTopic, procPartitions),
		"topic "+fixture.OutputTopic+" against the stores")
}

package integration

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// These tests run groups of instances with standby replicas: where replicas
// are placed, how standbys keep up, and where work goes when an instance
// leaves, dies, joins or comes back. Instances joining or coming back are
// in standby_join_test.go; the input and reads the tests keep up while
// instances come and go, in standby_load_test.go.

// TestStandbyPlacement checks where standbys go and that they keep up: one
// standby over three instances, two over four, and one over four instances
// in two zones spread by zone.
func TestStandbyPlacement(t *testing.T) {
	cases := []struct {
		name      string
		instances int
		standbys  int
		zones     []string // per instance; nil for no tags
	}{
		{name: "three instances one standby", instances: 3, standbys: 1},
		{name: "four instances two standbys", instances: 4, standbys: 2},
		{name: "four instances in two zones", instances: 4, standbys: 1, zones: []string{"a", "a", "b", "b"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, haPartitions)
			zoneOf := make(map[*instance]string)
			insts := c.startGroup(t, tc.instances, func(i int) instanceConfig {
				// Probing settles the group as it forms (see
				// TestJoinOnEmptyChangelogsNeedsNoWarmup).
				cfg := instanceConfig{standbys: tc.standbys, probing: time.Second}
				if tc.zones != nil {
					cfg.tags = map[string]string{"zone": tc.zones[i]}
					cfg.rackTags = []string{"zone"}
				}
				return cfg
			})
			for i, in := range insts {
				if tc.zones != nil {
					zoneOf[in] = tc.zones[i]
				}
			}
			requireZones := func(view map[int32]*partView) {
				t.Helper()
				if tc.zones == nil {
					return
				}
				for p, v := range view {
					for _, h := range v.standby {
						require.NotEqual(t, zoneOf[v.active[0].in], zoneOf[h.in],
							"partition %d: standby on %s in the zone of its active on %s", p, h.in.name, v.active[0].in.name)
					}
				}
			}
			view := c.waitPlacement(t, insts, tc.standbys)
			requireZones(view)

			want := make(map[string]int64)
			c.produceLines(t, newCorpus(11, 2000).Lines(20_000, want))
			stopped := time.Now()
			c.waitCaughtUp(t, haApp)
			committed := time.Since(stopped)
			view = c.waitStandbysCurrent(t, insts, tc.standbys, standbyCatchUp)
			t.Logf("after the last input record: all input committed in %s, standbys current in %s",
				committed.Round(time.Millisecond), time.Since(stopped).Round(time.Millisecond))
			requireZones(view)
			requireStore(t, want, insts...)
			requireStandbyContents(t, c.partitions, view, want)
		})
	}
}

// TestGracefulCloseStandbyTakesOver closes an instance: each of its counts
// partitions becomes active where its standby was, restoring at most what
// the standby lacked, and no count is lost or doubled.
func TestGracefulCloseStandbyTakesOver(t *testing.T) {
	c := newCluster(t, haPartitions)
	// A small AcceptableRecoveryLag makes the standby the only caught-up
	// home of each of the leaver's tasks; with the default, an instance
	// without state may count as caught up on these short changelogs and
	// receive a task for balance, restoring it whole.
	insts := c.startGroup(t, 3, func(int) instanceConfig {
		return instanceConfig{standbys: 1, probing: 2 * time.Second, acceptableLag: 50}
	})
	c.waitPlacement(t, insts, 1)

	gen := newCorpus(12, 3000)
	want := make(map[string]int64)
	c.produceLines(t, gen.Lines(60_000, want))
	c.waitCaughtUp(t, haApp)
	view := c.waitStandbysCurrent(t, insts, 1, standbyCatchUp)

	leaver := insts[0]
	heir := make(map[int32]*instance)  // leaver's partition → its standby's instance
	standbyAt := make(map[int32]int64) // the standby's position before the close
	for p, v := range view {
		if v.active[0].in == leaver {
			heir[p] = v.standby[0].in
			standbyAt[p] = v.standby[0].info.Position
		}
	}
	require.NotEmpty(t, heir, "the leaver owns counts partitions")

	began := time.Now()
	leaver.close(t)
	rest := insts[1:]
	waitFor(t, settleTimeout, "the standbys to take over", func() (bool, string) {
		view = c.observe(rest)
		probs := c.activeProblems(rest, view)
		return len(probs) == 0, strings.Join(probs, "; ")
	})
	t.Logf("hand-over after a graceful close took %s", time.Since(began).Round(time.Millisecond))

	ends := c.endOffsets(t, changelogTopic(haApp))[changelogTopic(haApp)]
	for p, in := range heir {
		h := view[p].active[0]
		require.Same(t, in, h.in, "partition %d went to %s, its standby was on %s", p, h.in.name, in.name)
		// Restoration reads from the standby's position (or later: it kept
		// following until promoted) to the changelog's end.
		require.LessOrEqual(t, h.info.Restored, ends[p]-standbyAt[p],
			"partition %d restored more than the standby lacked (position %d, end %d)", p, standbyAt[p], ends[p])
		require.Less(t, h.info.Restored, ends[p], "partition %d restored its whole changelog", p)
		t.Logf("partition %d: promoted on %s, restored %d of %d changelog records", p, in.name, h.info.Restored, ends[p])
	}

	c.produceLines(t, gen.Lines(20_000, want))
	c.waitCaughtUp(t, haApp)
	requireStore(t, want, rest...)
	c.requireOutput(t, want)
}

// TestKillStandbyTakesOver kills an instance while input flows. After the
// session timeout its standbys take over; counts read from the serving
// instances never go backwards; and every word is counted at least as often
// as it was produced and at most once more for each of its occurrences in
// records the killed instance had not committed.
//
// The bound, per word w: the killed instance's uncommitted work is the input
// records of its stateless tasks at or after their committed offsets, and
// the repartition records of its counts tasks at or after theirs. Replaying
// an input record can write its words to the repartition topic a second
// time (one extra count each); replaying a repartition record whose update
// already reached the changelog counts it again (one extra). Nothing else
// is replayed: the others hand over through commits. Committed offsets read
// before the kill and end offsets read after it bound those windows from
// outside, so the sum of w's occurrences in them bounds w's excess.
func TestKillStandbyTakesOver(t *testing.T) {
	const sessionTimeout = 2 * time.Second
	c := newCluster(t, haPartitions)
	insts := c.startGroup(t, 3, func(int) instanceConfig {
		// The redo windows are read from the repartition topic after
		// the take-over has committed past them.
		return instanceConfig{standbys: 1, sessionTimeout: sessionTimeout, probing: 2 * time.Second, keepRepartition: true}
	})
	c.waitPlacement(t, insts, 1)

	gen := newCorpus(13, 2000)
	want := make(map[string]int64)
	c.produceLines(t, gen.Lines(30_000, want))
	c.waitCaughtUp(t, haApp)
	view := c.waitStandbysCurrent(t, insts, 1, standbyCatchUp)

	reader := startMonotonicReader(t, insts, topWords(want, c.partitions, 5))
	producer := c.startProducing(gen, want, 100, 20*time.Millisecond)
	producer.waitBatches(t, 20)

	victim := insts[0]
	rest := insts[1:]
	heir := make(map[int32]*instance)
	view = c.observe(insts)
	for p, v := range view {
		require.Len(t, v.active, 1, "partition %d before the kill: %v", p, v)
		require.Len(t, v.standby, 1, "partition %d before the kill: %v", p, v)
		if v.active[0].in == victim {
			heir[p] = v.standby[0].in
		}
	}
	require.NotEmpty(t, heir)
	standbyAt := make(map[int32]int64)
	for p, in := range heir {
		for _, ri := range in.Replicas() {
			if ri.Store == countsStore && ri.Partition == p {
				standbyAt[p] = ri.Position
			}
		}
	}
	owned := victim.Tasks()
	topics := []string{inputTopic, repartitionTopic(haApp)}
	committed, err := c.committed(t, haApp, topics...)
	require.NoError(t, err)

	victim.Kill()
	killed := time.Now()
	require.Equal(t, runtime.StateNotRunning, victim.State())
	ends := c.endOffsets(t, append(topics, changelogTopic(haApp))...)

	waitFor(t, sessionTimeout+settleTimeout, "the standbys to take over", func() (bool, string) {
		view = c.observe(rest)
		if probs := c.activeProblems(rest, view); len(probs) > 0 {
			return false, strings.Join(probs, "; ")
		}
		return true, ""
	})
	took := time.Since(killed)
	reader.phase.Store(1)
	t.Logf("standbys took over %s after the kill (session timeout %s)", took.Round(time.Millisecond), sessionTimeout)
	require.Greater(t, took, sessionTimeout/2, "tasks moved before the group could have noticed the death")

	endsNow := c.endOffsets(t, changelogTopic(haApp))[changelogTopic(haApp)]
	for p, in := range heir {
		h := view[p].active[0]
		require.Same(t, in, h.in, "partition %d went to %s, its standby was on %s", p, h.in.name, in.name)
		// The promoted standby restores from where it was (or further) to
		// the changelog's end when restoration began, which is at most its
		// end now.
		require.LessOrEqual(t, h.info.Restored, endsNow[p]-standbyAt[p], "partition %d restored more than its standby lacked", p)
		t.Logf("partition %d: promoted on %s, restored %d; standby lag at the kill ≤ %d", p, in.name, h.info.Restored,
			ends[changelogTopic(haApp)][p]-standbyAt[p])
	}

	producer.waitBatches(t, 20)
	producer.stopProducing(t)
	c.waitCaughtUp(t, haApp)
	reader.stopReading()

	// Counts never went backwards, and the reader saw the killed instance's
	// partitions both before and after the take-over.
	require.Empty(t, reader.violations, "counts that went backwards")
	for _, w := range reader.words {
		key, _ := serde.String.Encode(w)
		if _, ok := heir[topology.Partition(key, c.partitions)]; ok {
			r := reader.reads[w]
			require.Positive(t, r[0], "reads of %q before the take-over", w)
			require.Positive(t, r[1], "reads of %q after the take-over", w)
		}
	}

	// The windows of uncommitted work.
	bound := make(map[string]int64)
	var windowRecs int
	for _, ti := range owned {
		p := ti.ID.Partition
		switch ti.ID.SubTopology {
		case 0:
			for _, r := range c.readRange(t, inputTopic, p, committed[inputTopic][p], ends[inputTopic][p]) {
				windowRecs++
				for _, w := range tokenize(string(r.Value)) {
					bound[w]++
				}
			}
		case 1:
			rp := repartitionTopic(haApp)
			for _, r := range c.readRange(t, rp, p, committed[rp][p], ends[rp][p]) {
				windowRecs++
				w, err := serde.String.Decode(r.Key)
				require.NoError(t, err)
				bound[w]++
			}
		}
	}

	got := storeCounts(t, slices.Sorted(maps.Keys(want)), rest...)
	var excess, allowed int64
	var over []string
	for w, n := range want {
		if got[w] < n || got[w]-n > bound[w] {
			over = append(over, fmt.Sprintf("%q: produced %d, counted %d, allowed excess %d", w, n, got[w], bound[w]))
		}
		excess += got[w] - n
		allowed += bound[w]
	}
	slices.Sort(over)
	require.Empty(t, over[:min(10, len(over))], "%d words counted outside [produced, produced + uncommitted occurrences]", len(over))
	t.Logf("%d records in the uncommitted windows; %d words counted twice, at most %d allowed", windowRecs, excess, allowed)

	// The output topic ends with what the stores hold.
	out := c.readLatest(t, outputTopic)
	requireCounts(t, got, out, "topic "+outputTopic+" against the stores")
}

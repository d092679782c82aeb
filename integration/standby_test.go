package integration

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/assignor"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// These tests run groups of instances with standby replicas: where replicas
// are placed, how standbys keep up, and where work goes when an instance
// leaves, dies, joins or comes back.

const (
	haApp = "wc"
	// haPartitions gives every instance of a three-instance group two
	// counts partitions to own.
	haPartitions = 6
	// standbyCatchUp bounds how long standbys may trail their actives once
	// input stops. A healthy run needs well under a second.
	standbyCatchUp = 10 * time.Second
)

// countsTask is the task that owns partition p of the counts store.
func countsTask(p int32) task.ID { return task.ID{SubTopology: 1, Partition: p} }

// startGroup starts n instances, one after the other, each with its own
// state directory and a distinct endpoint (the assignor's host maps list only
// processes that advertise one).
func (c *cluster) startGroup(t *testing.T, n int, cfg func(i int) instanceConfig) []*instance {
	t.Helper()
	insts := make([]*instance, n)
	for i := range insts {
		insts[i] = c.startMember(t, i, cfg(i))
	}
	return insts
}

// startMember starts instance number i of a group.
func (c *cluster) startMember(t *testing.T, i int, cfg instanceConfig) *instance {
	t.Helper()
	if cfg.stateDir == "" {
		cfg.stateDir = t.TempDir()
	}
	cfg.endpoint = memberEndpoint(i)
	return c.start(t, fmt.Sprintf("i%d", i), cfg)
}

func memberEndpoint(i int) string { return fmt.Sprintf("127.0.0.1:%d", 10001+i) }

// holder is one instance's replica of one counts partition.
type holder struct {
	in   *instance
	info runtime.ReplicaInfo
}

func (h holder) String() string {
	return fmt.Sprintf("%s:%s@%d/%d", h.in.name, h.info.State, h.info.Position, h.info.End)
}

// partView is every replica of one counts partition across a group.
type partView struct {
	active  []holder // running actives
	standby []holder // standbys proper, not warmups
	other   []holder // restoring, warmup, idle
}

func (v *partView) instances() []*instance {
	var out []*instance
	for _, hs := range [][]holder{v.active, v.standby, v.other} {
		for _, h := range hs {
			out = append(out, h.in)
		}
	}
	return out
}

func (v *partView) String() string {
	return fmt.Sprintf("active %v standby %v other %v", v.active, v.standby, v.other)
}

// live returns the instances that are running.
func live(insts []*instance) []*instance {
	var out []*instance
	for _, in := range insts {
		if in.State().IsRunningOrRebalancing() {
			out = append(out, in)
		}
	}
	return out
}

// observe gathers the counts replicas of the running instances by
// partition.
func (c *cluster) observe(insts []*instance) map[int32]*partView {
	view := make(map[int32]*partView, c.partitions)
	for p := range c.partitions {
		view[p] = &partView{}
	}
	for _, in := range live(insts) {
		for _, ri := range in.Replicas() {
			if ri.Store != countsStore {
				continue
			}
			v := view[ri.Partition]
			h := holder{in: in, info: ri}
			switch ri.State {
			case task.Running:
				v.active = append(v.active, h)
			case task.Standby:
				v.standby = append(v.standby, h)
			default:
				v.other = append(v.other, h)
			}
		}
	}
	return view
}

// activeProblems says what keeps the running instances from serving every
// task: each task held once, running, and every counts partition readable
// from exactly one active.
func (c *cluster) activeProblems(insts []*instance, view map[int32]*partView) []string {
	var probs []string
	held := make(map[task.ID]string)
	for _, in := range live(insts) {
		if err := in.Err(); err != nil {
			probs = append(probs, fmt.Sprintf("%s failed: %v", in.name, err))
		}
		for _, ti := range in.Tasks() {
			if ti.State != task.Running {
				probs = append(probs, fmt.Sprintf("%s: task %s %s", in.name, ti.ID, ti.State))
			}
			if other, dup := held[ti.ID]; dup {
				probs = append(probs, fmt.Sprintf("task %s on %s and %s", ti.ID, other, in.name))
			}
			held[ti.ID] = in.name
		}
	}
	if len(held) != c.allTasks() {
		probs = append(probs, fmt.Sprintf("%d of %d tasks held", len(held), c.allTasks()))
	}
	for p := range c.partitions {
		if n := len(view[p].active); n != 1 {
			probs = append(probs, fmt.Sprintf("partition %d has %d running actives: %v", p, n, view[p]))
		}
	}
	return probs
}

// placementProblems says what keeps the group from the settled layout with
// k standbys per counts partition: one running active and k standbys on
// distinct instances, no other replicas, every instance holding the same
// latest assignment without warmups or a pending probing rebalance, actives
// balanced, and the assignment's host maps naming the replicas the
// instances actually hold.
func (c *cluster) placementProblems(insts []*instance, k int, view map[int32]*partView) []string {
	probs := c.activeProblems(insts, view)
	running := live(insts)
	for p := range c.partitions {
		v := view[p]
		if len(v.standby) != k || len(v.other) != 0 {
			probs = append(probs, fmt.Sprintf("partition %d: want 1 active and %d standbys, have %v", p, k, v))
		}
		ins := v.instances()
		if len(slices.Compact(sortedNames(ins))) != len(ins) {
			probs = append(probs, fmt.Sprintf("partition %d: replicas share an instance: %v", p, v))
		}
	}
	var first *runtime.Assignment
	for _, in := range running {
		a, ok := in.Assignment()
		if !ok {
			probs = append(probs, in.name+" has no assignment")
			continue
		}
		if len(a.Warmup) > 0 {
			probs = append(probs, fmt.Sprintf("%s has warmups %v", in.name, a.Warmup))
		}
		if a.NextProbingRebalanceMs != 0 {
			probs = append(probs, in.name+" awaits a probing rebalance")
		}
		if first == nil {
			first = &a
			continue
		}
		if !sameHostMaps(*first, a) {
			probs = append(probs, in.name+" holds a different assignment")
		}
	}
	if first == nil || len(probs) > 0 {
		return probs
	}
	if len(first.PartitionsByHost) != len(running) {
		probs = append(probs, fmt.Sprintf("assignment names %d active hosts for %d instances", len(first.PartitionsByHost), len(running)))
	}
	probs = append(probs, c.balanceProblems(*first)...)
	for p := range c.partitions {
		id := countsTask(p)
		v := view[p]
		if hs := hostsOf(first.PartitionsByHost, id); !slices.Equal(hs, []string{v.active[0].in.endpoint}) {
			probs = append(probs, fmt.Sprintf("assignment names %v as active hosts of %s, %s runs it", hs, id, v.active[0].in.name))
		}
		var sb []string
		for _, h := range v.standby {
			sb = append(sb, h.in.endpoint)
		}
		slices.Sort(sb)
		if hs := hostsOf(first.StandbyPartitionsByHost, id); !slices.Equal(hs, sb) {
			probs = append(probs, fmt.Sprintf("assignment names %v as standby hosts of %s, replicas are on %v", hs, id, sb))
		}
	}
	return probs
}

func sortedNames(ins []*instance) []string {
	var out []string
	for _, in := range ins {
		out = append(out, in.name)
	}
	slices.Sort(out)
	return out
}

func sameHostMaps(a, b runtime.Assignment) bool {
	return maps.EqualFunc(a.PartitionsByHost, b.PartitionsByHost, slices.Equal[[]task.ID]) &&
		maps.EqualFunc(a.StandbyPartitionsByHost, b.StandbyPartitionsByHost, slices.Equal[[]task.ID])
}

// hostsOf lists, sorted, the hosts a host map gives a task.
func hostsOf(m map[string][]task.ID, id task.ID) []string {
	var out []string
	for h, ids := range m {
		if slices.Contains(ids, id) {
			out = append(out, h)
		}
	}
	slices.Sort(out)
	return out
}

// waitPlacement waits for the settled layout with k standbys and returns it.
func (c *cluster) waitPlacement(t *testing.T, insts []*instance, k int) map[int32]*partView {
	t.Helper()
	var view map[int32]*partView
	waitFor(t, settleTimeout, fmt.Sprintf("one active and %d standbys per partition", k), func() (bool, string) {
		view = c.observe(insts)
		probs := c.placementProblems(insts, k, view)
		return len(probs) == 0, strings.Join(probs, "; ")
	})
	return view
}

// waitStandbysCurrent waits, in the settled layout, until every standby's
// position is its active's and both are at the end of the changelog: the
// standby has applied everything the active wrote.
func (c *cluster) waitStandbysCurrent(t *testing.T, insts []*instance, k int, timeout time.Duration) map[int32]*partView {
	t.Helper()
	var view map[int32]*partView
	waitFor(t, timeout, "standbys to reach their actives' positions", func() (bool, string) {
		view = c.observe(insts)
		if probs := c.placementProblems(insts, k, view); len(probs) > 0 {
			return false, strings.Join(probs, "; ")
		}
		ends := c.endOffsets(t, changelogTopic(haApp))[changelogTopic(haApp)]
		for p, v := range view {
			if pos := v.active[0].info.Position; pos != ends[p] {
				return false, fmt.Sprintf("partition %d: active at %d of %d", p, pos, ends[p])
			}
			for _, h := range v.standby {
				if h.info.Position != ends[p] {
					return false, fmt.Sprintf("partition %d: %v, changelog end %d", p, v, ends[p])
				}
			}
		}
		return true, ""
	})
	return view
}

// requireStandbyContents reads every word of want from the standbys of its
// partition: a current standby holds exactly what its active holds.
func requireStandbyContents(t *testing.T, partitions int32, view map[int32]*partView, want map[string]int64) {
	t.Helper()
	for p, v := range view {
		for _, h := range v.standby {
			got := make(map[string]int64)
			sub := make(map[string]int64)
			for w, n := range want {
				key, err := serde.String.Encode(w)
				require.NoError(t, err)
				if topology.Partition(key, partitions) != p {
					continue
				}
				sub[w] = n
				val, found, err := h.info.Backing.Get(key)
				require.NoError(t, err, "standby %s of partition %d", h.in.name, p)
				if found {
					val, _ = statestore.SplitTimestamped(val) // a count with its time
					got[w], err = serde.Int64.Decode(val)
					require.NoError(t, err)
				}
			}
			requireCounts(t, sub, got, fmt.Sprintf("standby of partition %d on %s", p, h.in.name))
		}
	}
}

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

// liveProducer feeds the input topic from a goroutine while a test does
// something else, and keeps the reference count of what was acknowledged.
type liveProducer struct {
	c       *cluster
	gen     *corpus
	mu      sync.Mutex
	want    map[string]int64
	err     error
	batches atomic.Int64
	stop    chan struct{}
	done    chan struct{}
}

// startProducing sends batches of lines holding wordsPerBatch words, one
// batch each interval, until stopped. The corpus and want belong to the
// producer until stopProducing returns.
func (c *cluster) startProducing(gen *corpus, want map[string]int64, wordsPerBatch int, interval time.Duration) *liveProducer {
	lp := &liveProducer{c: c, gen: gen, want: want, stop: make(chan struct{}), done: make(chan struct{})}
	go lp.run(wordsPerBatch, interval)
	return lp
}

func (lp *liveProducer) run(wordsPerBatch int, interval time.Duration) {
	defer close(lp.done)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-lp.stop:
			return
		case <-tick.C:
		}
		counts := make(map[string]int64)
		lines := lp.gen.Lines(wordsPerBatch, counts)
		recs := make([]*kgo.Record, len(lines))
		for i, l := range lines {
			recs[i] = &kgo.Record{Topic: inputTopic, Partition: lp.c.next, Value: []byte(l)}
			lp.c.next = (lp.c.next + 1) % lp.c.partitions
		}
		pctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
		err := lp.c.cl.ProduceSync(pctx, recs...).FirstErr()
		cancel()
		lp.mu.Lock()
		if err != nil {
			lp.err = err
			lp.mu.Unlock()
			return
		}
		for w, n := range counts {
			lp.want[w] += n
		}
		lp.mu.Unlock()
		lp.batches.Add(1)
	}
}

// waitBatches waits until n more batches than now were acknowledged.
func (lp *liveProducer) waitBatches(t *testing.T, n int64) {
	t.Helper()
	target := lp.batches.Load() + n
	waitFor(t, settleTimeout, fmt.Sprintf("%d more batches of input", n), func() (bool, string) {
		lp.mu.Lock()
		err := lp.err
		lp.mu.Unlock()
		require.NoError(t, err, "producing input")
		got := lp.batches.Load()
		return got >= target, fmt.Sprintf("%d of %d batches", got, target)
	})
}

// stopProducing stops the producer and requires that every batch was
// acknowledged.
func (lp *liveProducer) stopProducing(t *testing.T) {
	t.Helper()
	close(lp.stop)
	<-lp.done
	require.NoError(t, lp.err, "producing input")
}

// monotonicReader reads sample words from every instance in a loop and
// records any count that is lower than one read before it.
type monotonicReader struct {
	insts []*instance
	words []string
	keys  [][]byte

	mu         sync.Mutex
	last       map[string]int64
	reads      map[string][2]int // per word: reads before and after the phase flips
	violations []string
	phase      atomic.Int32

	stop chan struct{}
	done chan struct{}
}

func startMonotonicReader(t *testing.T, insts []*instance, words []string) *monotonicReader {
	m := &monotonicReader{
		insts: insts, words: words,
		last: make(map[string]int64), reads: make(map[string][2]int),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	for _, w := range words {
		key, err := serde.String.Encode(w)
		require.NoError(t, err)
		m.keys = append(m.keys, key)
	}
	go m.run()
	return m
}

func (m *monotonicReader) run() {
	defer close(m.done)
	for {
		select {
		case <-m.stop:
			return
		default:
		}
		for i, w := range m.words {
			for _, in := range m.insts {
				val, found, _, err := activeGet(in, countsStore, m.keys[i])
				if err != nil || !found {
					continue
				}
				n, err := serde.Int64.Decode(val)
				m.mu.Lock()
				switch {
				case err != nil:
					m.violations = append(m.violations, fmt.Sprintf("%q on %s: undecodable %x", w, in.name, val))
				case n < m.last[w]:
					m.violations = append(m.violations, fmt.Sprintf("%q on %s: %d after %d", w, in.name, n, m.last[w]))
				default:
					m.last[w] = n
				}
				r := m.reads[w]
				r[m.phase.Load()]++
				m.reads[w] = r
				m.mu.Unlock()
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (m *monotonicReader) stopReading() {
	close(m.stop)
	<-m.done
}

// readRange returns the records of one partition at offsets [from, to).
func (c *cluster) readRange(t *testing.T, topic string, p int32, from, to int64) []*kgo.Record {
	t.Helper()
	if from >= to {
		return nil
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.b.Addrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(from)}}),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	require.NoError(t, err)
	defer cl.Close()
	var out []*kgo.Record
	next := from
	rctx := ctx(t)
	for next < to {
		fs := cl.PollFetches(rctx)
		require.NoError(t, rctx.Err(), "reading %s/%d: got to %d of [%d, %d)", topic, p, next, from, to)
		fs.EachError(func(_ string, _ int32, err error) { require.NoError(t, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= next && r.Offset < to {
				out = append(out, r)
				next = r.Offset + 1
			}
		})
	}
	return out
}

// storeCounts reads every word of words from whichever running instance
// hosts its partition as a running active.
func storeCounts(t *testing.T, words []string, insts ...*instance) map[string]int64 {
	t.Helper()
	got := make(map[string]int64, len(words))
	for _, w := range words {
		key, err := serde.String.Encode(w)
		require.NoError(t, err)
		hosted := false
		for _, in := range insts {
			v, found, _, err := activeGet(in, countsStore, key)
			if errors.Is(err, iq.ErrNotHostedHere) || errors.Is(err, iq.ErrNotRunning) {
				continue
			}
			require.NoError(t, err, "activeGet(%q) on %s", w, in.name)
			hosted = true
			if found {
				got[w], err = serde.Int64.Decode(v)
				require.NoError(t, err)
			}
			break
		}
		require.True(t, hosted, "no instance hosts the partition of %q", w)
	}
	return got
}

// topWords returns the n most frequent words of each counts partition.
func topWords(counts map[string]int64, partitions int32, n int) []string {
	byPart := make(map[int32][]string)
	for w := range counts {
		key, _ := serde.String.Encode(w)
		p := topology.Partition(key, partitions)
		byPart[p] = append(byPart[p], w)
	}
	var out []string
	for _, ws := range byPart {
		sort.Slice(ws, func(i, j int) bool {
			if counts[ws[i]] != counts[ws[j]] {
				return counts[ws[i]] > counts[ws[j]]
			}
			return ws[i] < ws[j]
		})
		out = append(out, ws[:min(n, len(ws))]...)
	}
	slices.Sort(out)
	return out
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

// TestNewInstanceWarmsUp adds an instance to a group with large state. It
// receives warmups, never an active it has not warmed up to within
// AcceptableRecoveryLag, and probing rebalances move actives to it until
// the group is balanced.
//
// The group leader's plans are recorded through AssignFunc rather than
// sampled from the new instance: a round can last less than one poll (a
// warmup that catches up is promoted by the next probing rebalance, and a
// cooperative hold-back adds a round within milliseconds), so sampling can
// miss the assignment that carried a task's warmup and see only its
// promotion.
func TestNewInstanceWarmsUp(t *testing.T) {
	const acceptableLag = 100
	type plan struct {
		in  assignor.Input
		out assignor.Output
	}
	var (
		mu    sync.Mutex
		plans []plan
	)
	cfg := instanceConfig{acceptableLag: acceptableLag, maxWarmups: 1, probing: time.Second,
		assign: func(ac assignor.Config, in assignor.Input) assignor.Output {
			out := assignor.Assign(ac, in)
			mu.Lock()
			plans = append(plans, plan{in, out})
			mu.Unlock()
			return out
		}}
	c := newCluster(t, haPartitions)
	insts := c.startGroup(t, 2, func(int) instanceConfig { return cfg })
	c.waitPlacement(t, insts, 0)

	gen := newCorpus(14, 3000)
	want := make(map[string]int64)
	// Several batches, each committed before the next, so the changelogs
	// hold several updates per word however fast processing is.
	for range 5 {
		c.produceLines(t, gen.Lines(12_000, want))
		c.waitCaughtUp(t, haApp)
	}
	ends := c.endOffsets(t, changelogTopic(haApp))[changelogTopic(haApp)]
	for p, end := range ends {
		require.Greater(t, end, int64(5*acceptableLag), "changelog partition %d is too small for a fresh instance to be behind", p)
	}

	joiner := c.startMember(t, 2, cfg)
	insts = append(insts, joiner)
	var assignments []runtime.Assignment // distinct, in order, as sampled
	began := time.Now()
	waitFor(t, settleTimeout, "the group to converge with the new instance", func() (bool, string) {
		if a, ok := wholeAssignment(joiner); ok && (len(assignments) == 0 || !assignmentsEqual(assignments[len(assignments)-1], a)) {
			assignments = append(assignments, a)
		}
		view := c.observe(insts)
		if probs := c.placementProblems(insts, 0, view); len(probs) > 0 {
			return false, strings.Join(probs, "; ")
		}
		a, _ := joiner.Assignment()
		if a.NextProbingRebalanceMs != 0 {
			return false, "another probing rebalance is scheduled"
		}
		probs := c.balanceProblems(a)
		return len(probs) == 0, strings.Join(probs, "; ")
	})
	t.Logf("converged %s after the join through %d sampled assignments of the new instance", time.Since(began).Round(time.Millisecond), len(assignments))

	mu.Lock()
	recorded := slices.Clone(plans)
	mu.Unlock()
	pid := joiner.ProcessID()
	var (
		warmedUp     = make(map[task.ID]bool)
		earlyActives []string
		probing      int
		rounds       int
	)
	for _, p := range recorded {
		cs, ok := p.in.Clients[pid]
		if !ok {
			continue
		}
		rounds++
		a := p.out.Clients[pid]
		t.Logf("plan %d for the new instance: active %v, standby %v, warmup %v, follow-up %v", rounds, a.Active, a.Standby, a.Warmup, p.out.FollowupRebalance)
		require.LessOrEqual(t, len(a.Warmup), cfg.maxWarmups, "plan %d: %v", rounds, a.Warmup)
		for _, id := range a.Active {
			if !p.in.Tasks[id].Stateful || slices.Contains(cs.PrevActive, id) {
				continue
			}
			if lag, has := cs.Lags[id]; !has || (lag != assignor.LagRunning && lag > acceptableLag) {
				earlyActives = append(earlyActives, fmt.Sprintf("%s in plan %d (lag %d, has state %v)", id, rounds, lag, has))
			}
		}
		for _, id := range a.Warmup {
			warmedUp[id] = true
		}
		if p.out.FollowupRebalance {
			probing++
		}
	}

	require.NotEmpty(t, warmedUp, "the new instance received no warmups")
	require.Empty(t, earlyActives, "counts actives planned on the new instance before it was caught up")
	require.GreaterOrEqual(t, probing, 2,
		"with one warmup at a time, two actives need at least two probing rebalances to move")
	// Input is stopped, so what an active restored on the new instance is
	// the lag its warmup had when the active moved; Restored counts every
	// restoration since the instance started.
	stateful := 0
	for _, ti := range joiner.Tasks() {
		if ti.ID.SubTopology != 1 {
			continue
		}
		stateful++
		t.Logf("task %s: restored %d of %d changelog records on the new instance", ti.ID, ti.Restored, ends[ti.ID.Partition])
		require.LessOrEqual(t, ti.Restored, int64(acceptableLag), "task %s restored more than AcceptableRecoveryLag", ti.ID)
	}
	require.Equal(t, haPartitions/3, stateful, "counts tasks on the new instance")

	c.produceLines(t, gen.Lines(10_000, want))
	c.waitCaughtUp(t, haApp)
	requireStore(t, want, insts...)
	c.requireOutput(t, want)
}

// balanceProblems says how an assignment's actives are not spread evenly
// over the stream threads of its hosts, each of which runs c.threads: the
// assignor balances per thread of capacity, so once each host's tasks are
// split as evenly as they can be over its threads, every thread's counts
// tasks and all its tasks must be within one of every other thread's. With
// one thread per host that is every host within one of every other.
func (c *cluster) balanceProblems(a runtime.Assignment) []string {
	if len(a.PartitionsByHost) == 0 {
		return []string{"no active hosts"}
	}
	threads := max(c.threads, 1)
	stateful := make(map[string]int)
	for host, ids := range a.PartitionsByHost {
		for _, id := range ids {
			if id.SubTopology == 1 {
				stateful[host]++
			}
		}
	}
	// spread is the fewest and the most tasks of a kind that any thread
	// runs.
	spread := func(count func(host string) int) (lo, hi int) {
		lo = -1
		for host := range a.PartitionsByHost {
			n := count(host)
			if lo < 0 || n/threads < lo {
				lo = n / threads
			}
			hi = max(hi, (n+threads-1)/threads)
		}
		return lo, hi
	}
	sfLo, sfHi := spread(func(h string) int { return stateful[h] })
	allLo, allHi := spread(func(h string) int { return len(a.PartitionsByHost[h]) })
	if sfHi-sfLo <= 1 && allHi-allLo <= 1 {
		return nil
	}
	var probs []string
	for _, host := range slices.Sorted(maps.Keys(a.PartitionsByHost)) {
		probs = append(probs, fmt.Sprintf("%s runs %d counts tasks of %d tasks", host, stateful[host], len(a.PartitionsByHost[host])))
	}
	return append(probs, fmt.Sprintf("per thread of %d on each host: counts tasks %d to %d, all tasks %d to %d", threads, sfLo, sfHi, allLo, allHi))
}

// wholeAssignment returns the instance's assignment once every one of its
// threads has received the latest: Assignment joins the threads' shares,
// which arrive one by one, so until then the instance's tasks differ from
// what the group-wide host maps say it holds.
func wholeAssignment(in *instance) (runtime.Assignment, bool) {
	a, ok := in.Assignment()
	if !ok {
		return a, false
	}
	same := func(mine []task.ID, byHost map[string][]task.ID) bool {
		theirs := slices.SortedFunc(slices.Values(byHost[in.endpoint]), task.ID.Compare)
		return slices.Equal(slices.SortedFunc(slices.Values(mine), task.ID.Compare), theirs)
	}
	return a, same(a.Active, a.PartitionsByHost) && same(a.Standby, a.StandbyPartitionsByHost) &&
		same(a.Warmup, a.WarmupPartitionsByHost)
}

// TestJoinOnEmptyChangelogsNeedsNoWarmup starts a second instance after the
// first already runs every task but before any input: every changelog is
// empty, so the newcomer's lag on every task is zero and it is caught up.
// The group must balance at once, without warmups or a probing rebalance
// (whose default interval is ten minutes).
func TestJoinOnEmptyChangelogsNeedsNoWarmup(t *testing.T) {
	c := newCluster(t, haPartitions)
	first := c.startMember(t, 0, instanceConfig{})
	first.waitAllTasksRunning(t, c.allTasks(), settleTimeout)
	insts := []*instance{first, c.startMember(t, 1, instanceConfig{})}
	waitFor(t, 20*time.Second, "two instances to split the tasks without warmups", func() (bool, string) {
		probs := c.placementProblems(insts, 0, c.observe(insts))
		if len(probs) == 0 {
			a, _ := first.Assignment()
			probs = c.balanceProblems(a)
		}
		return len(probs) == 0, strings.Join(probs, "; ")
	})
}

func assignmentsEqual(a, b runtime.Assignment) bool {
	return slices.Equal(a.Active, b.Active) && slices.Equal(a.Standby, b.Standby) && slices.Equal(a.Warmup, b.Warmup) &&
		a.NextProbingRebalanceMs == b.NextProbingRebalanceMs && sameHostMaps(a, b)
}

// TestRestartKeepsCaughtUpState closes an instance, lets the others run its
// tasks for a while, and starts it again on its state directory: it comes
// back as the same process, counts as caught up, and gets its counts
// partitions back at once, restoring only what was written while it was
// away.
func TestRestartKeepsCaughtUpState(t *testing.T) {
	// restartLag is above what the instance misses while away and below
	// every whole changelog. With the default AcceptableRecoveryLag every
	// instance would count as caught up on every task of these short
	// changelogs, so the instances that must give up a task for balance
	// could give up any, not necessarily the returner's old ones.
	const restartLag = 200
	c := newCluster(t, haPartitions)
	// A short probing interval lets the group settle as it forms (see
	// TestJoinOnEmptyChangelogsNeedsNoWarmup); the restart itself must not
	// need a probing rebalance.
	cfg := instanceConfig{probing: time.Second, acceptableLag: restartLag}
	insts := c.startGroup(t, 3, func(int) instanceConfig { return cfg })
	c.waitPlacement(t, insts, 0)

	gen := newCorpus(15, 2000)
	want := make(map[string]int64)
	c.produceLines(t, gen.Lines(40_000, want))
	c.waitCaughtUp(t, haApp)

	back := insts[1]
	view := c.observe(insts)
	var old []task.ID
	for p, v := range view {
		if v.active[0].in == back {
			old = append(old, countsTask(p))
		}
	}
	slices.SortFunc(old, task.ID.Compare)
	require.NotEmpty(t, old)
	pid := back.ProcessID()
	back.close(t)
	rest := []*instance{insts[0], insts[2]}
	waitFor(t, settleTimeout, "the others to take over", func() (bool, string) {
		probs := c.activeProblems(rest, c.observe(rest))
		return len(probs) == 0, strings.Join(probs, "; ")
	})
	c.produceLines(t, gen.Lines(2_000, want))
	c.waitCaughtUp(t, haApp)

	ends := c.endOffsets(t, changelogTopic(haApp))[changelogTopic(haApp)]
	pos := storePositions(t, back.stateDir, haApp, c.partitions)
	tail := make(map[task.ID]int64)
	for _, id := range old {
		p := id.Partition
		require.Contains(t, pos, p, "store of %s left on disk", id)
		tail[id] = ends[p] - pos[p]
		require.Positive(t, tail[id], "the changelog of %s grew while the instance was away", id)
		require.LessOrEqual(t, tail[id], int64(restartLag),
			"precondition: the tail of %s is within AcceptableRecoveryLag", id)
	}
	for p := range c.partitions {
		if slices.Contains(old, countsTask(p)) {
			continue
		}
		lag := ends[p]
		if at, ok := pos[p]; ok && at > 0 {
			lag -= at
		}
		require.Greater(t, lag, int64(restartLag),
			"precondition: the returner is not caught up on partition %d, which it did not run", p)
	}
	t.Logf("tails %v; changelog ends %v", tail, ends)

	cfg.stateDir = back.stateDir
	again := c.startMember(t, 1, cfg)
	require.Equal(t, pid, again.ProcessID(), "process ID kept in the state directory")
	insts[1] = again
	var seen []runtime.Assignment
	waitFor(t, settleTimeout, "the restarted instance to run its old partitions", func() (bool, string) {
		if a, ok := wholeAssignment(again); ok && (len(seen) == 0 || !assignmentsEqual(seen[len(seen)-1], a)) {
			seen = append(seen, a)
		}
		probs := c.placementProblems(insts, 0, c.observe(insts))
		return len(probs) == 0, strings.Join(probs, "; ")
	})
	require.NotEmpty(t, seen)
	for i, a := range seen {
		require.Empty(t, a.Warmup, "assignment %d of the restarted instance has warmups", i)
	}
	// Under cooperative rebalancing an assignment holds back every task
	// another instance still runs, and a probing rebalance may be under way
	// when the returner joins, so its old tasks may come over more than one
	// round. Whatever the rounds, the returner is given back only its own
	// stateful tasks, and all of them.
	var stateful []task.ID
	for i, a := range seen {
		for _, id := range a.Active {
			if id.SubTopology != 1 {
				continue
			}
			require.Contains(t, old, id, "assignment %d of the restarted instance gives it %s, which it did not run", i, id)
			if !slices.Contains(stateful, id) {
				stateful = append(stateful, id)
			}
		}
	}
	slices.SortFunc(stateful, task.ID.Compare)
	require.Equal(t, old, stateful, "counts partitions given to the restarted instance")

	byTask := make(map[task.ID]runtime.TaskInfo)
	for _, ti := range again.Tasks() {
		byTask[ti.ID] = ti
	}
	for _, id := range old {
		require.Equal(t, tail[id], byTask[id].Restored, "task %s restores exactly the tail written while away", id)
		require.Less(t, byTask[id].Restored, ends[id.Partition], "task %s restored its whole changelog", id)
		t.Logf("task %s: restored %d of %d changelog records", id, byTask[id].Restored, ends[id.Partition])
	}

	c.produceLines(t, gen.Lines(10_000, want))
	c.waitCaughtUp(t, haApp)
	requireStore(t, want, insts...)
	c.requireOutput(t, want)
}

package integration

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// storePart is one partition of one store.
type storePart struct {
	store string
	p     int32
}

func (sp storePart) String() string { return fmt.Sprintf("%s/%d", sp.store, sp.p) }

// winReplica is one instance's replica of one store partition.
type winReplica struct {
	name string
	app  *runtime.App
	info runtime.ReplicaInfo
}

func (r winReplica) String() string {
	return fmt.Sprintf("%s:%s@%d/%d", r.name, r.info.State, r.info.Position, r.info.End)
}

// winPartView is every replica of one store partition across a group.
type winPartView struct {
	active, standby, other []winReplica
}

// observeWindows gathers the replicas of stores of the running apps by
// store partition, and says what keeps those apps from running every task
// they hold.
func observeWindows(apps map[string]*runtime.App, stores []string, partitions int32) (map[storePart]*winPartView, []string) {
	view := make(map[storePart]*winPartView)
	for _, s := range stores {
		for p := range partitions {
			view[storePart{s, p}] = &winPartView{}
		}
	}
	var probs []string
	for _, name := range slices.Sorted(maps.Keys(apps)) {
		app := apps[name]
		if !app.State().IsRunningOrRebalancing() {
			continue
		}
		if err := app.Err(); err != nil {
			probs = append(probs, fmt.Sprintf("%s failed: %v", name, err))
		}
		for _, ti := range app.Tasks() {
			if ti.State != task.Running {
				probs = append(probs, fmt.Sprintf("%s: task %s %s", name, ti.ID, ti.State))
			}
		}
		for _, ri := range app.Replicas() {
			v, ok := view[storePart{ri.Store, ri.Partition}]
			if !ok {
				continue
			}
			r := winReplica{name: name, app: app, info: ri}
			switch ri.State {
			case task.Restoring, task.Running:
				v.active = append(v.active, r)
			case task.Standby:
				v.standby = append(v.standby, r)
			default:
				v.other = append(v.other, r)
			}
		}
	}
	return view, probs
}

func sortedParts(m map[storePart]*winPartView) []storePart {
	return slices.SortedFunc(maps.Keys(m), func(a, b storePart) int { return strings.Compare(a.String(), b.String()) })
}

// windowPlacement says what keeps a view from the settled layout: one
// running active and one standby on another instance per store partition,
// nothing else.
func windowPlacement(view map[storePart]*winPartView) []string {
	var probs []string
	for _, sp := range sortedParts(view) {
		v := view[sp]
		if len(v.active) != 1 || len(v.standby) != 1 || len(v.other) != 0 {
			probs = append(probs, fmt.Sprintf("%s: active %v standby %v other %v", sp, v.active, v.standby, v.other))
		} else if v.standby[0].app == v.active[0].app {
			probs = append(probs, fmt.Sprintf("%s: standby beside its active on %s", sp, v.active[0].name))
		}
	}
	return probs
}

// TestWindowStandbyFailover runs the windowed word count (two window
// stores, one of them emit-final with its pending store) on three
// instances with one standby each, kills the instance holding the most
// actives in the middle of the corpus as a crash would, and checks that
// each of its store partitions went to the instance holding its caught-up
// standby, which restored no more than the changelog tail written after
// the standby's position at the kill (far less than the changelog).
//
// Under exactly-once every window's count and emit-final result is then
// exact, with no final result missing or repeated. Under at-least-once a
// window may count more by the killed instance's uncommitted work: per
// window, its words in the input records of the killed instance's
// stateless tasks from their committed offsets (a replay may write them to
// the repartition topic again) plus its repartition records of the killed
// instance's counting tasks from theirs (a replay may count them again);
// committed offsets read before the kill and end offsets after it bound
// those ranges from outside. No window counts less, and a final result may
// repeat only for a window with such excess allowed.
func TestWindowStandbyFailover(t *testing.T) {
	t.Parallel() // correctness only, no timing bound: runs beside another such test
	for _, g := range []runtime.ProcessingGuarantee{runtime.ExactlyOnce, runtime.AtLeastOnce} {
		t.Run(g.String(), func(t *testing.T) { testWindowStandbyFailover(t, g) })
	}
}

func testWindowStandbyFailover(t *testing.T, g runtime.ProcessingGuarantee) {
	const partitions = 4
	c := newCluster(t, partitions)
	resp, err := c.adm.CreateTopics(ctx(t), partitions, -1, nil, winIn, winUpdates, winFinal)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	stores := []string{winCounts, winFinalAgg, topology.PendingStoreName(winFinalAgg)}
	var changelogs []string
	for _, s := range stores {
		changelogs = append(changelogs, changelog.TopicName(winApp, s))
	}

	want := make(map[windowKey]int64)
	batches := timedLines(23, 20_000, want)
	dir := t.TempDir()
	apps := map[string]*runtime.App{}
	for _, name := range []string{"a", "b", "c"} {
		apps[name] = startWindowsWith(t, c, name, dir+"/"+name, g)
	}
	waitFor(t, settleTimeout, "one active and one standby per store partition", func() (bool, string) {
		view, probs := observeWindows(apps, stores, partitions)
		probs = append(probs, windowPlacement(view)...)
		return len(probs) == 0, strings.Join(probs, "; ")
	})

	const killAt = winBatches / 2
	for _, batch := range batches[:killAt] {
		c.produceSpread(t, batch)
		c.waitWindowsCaughtUp(t)
	}
	// Every standby has applied what its active wrote.
	var view map[storePart]*winPartView
	waitFor(t, standbyCatchUp, "standbys at their actives' positions", func() (bool, string) {
		var probs []string
		view, probs = observeWindows(apps, stores, partitions)
		if probs = append(probs, windowPlacement(view)...); len(probs) > 0 {
			return false, strings.Join(probs, "; ")
		}
		ends := c.endOffsets(t, changelogs...)
		for sp, v := range view {
			end := ends[changelog.TopicName(winApp, sp.store)][sp.p]
			if a, s := v.active[0].info, v.standby[0].info; a.Position != s.Position || s.Lag != 0 || s.Position > end {
				return false, fmt.Sprintf("%s: active %v standby %v, changelog end %d", sp, v.active, v.standby, end)
			}
		}
		return true, ""
	})

	// The victim is the instance with the most actives; it dies as soon as
	// it has processed some of the next batch, likely before committing it.
	held := map[string]int{}
	for _, v := range view {
		held[v.active[0].name]++
	}
	victimName := slices.MaxFunc(slices.Sorted(maps.Keys(held)), func(a, b string) int { return held[a] - held[b] })
	victim := apps[victimName]
	// What the kill may cost is measured before the batch goes in: the
	// standbys' positions and the committed offsets then are at most what
	// they are at the kill, so the bounds below can only widen.
	heir := map[storePart]string{}
	standbyAt := map[storePart]int64{}
	for sp, v := range view {
		if v.active[0].name == victimName {
			heir[sp] = v.standby[0].name
			standbyAt[sp] = v.standby[0].info.Position
		}
	}
	require.NotEmpty(t, heir)
	owned := victim.Tasks()
	repartition := winApp + "-" + winGroupBy + "-repartition"
	inputs := []string{winIn, repartition}
	committed, err := c.committed(t, winApp, inputs...)
	require.NoError(t, err)
	processed := func() (n int64) {
		for _, ti := range victim.Tasks() {
			n += ti.Processed
		}
		return n
	}
	before := processed()
	c.produceSpread(t, batches[killAt])
	waitFor(t, settleTimeout, victimName+" to process some of the batch", func() (bool, string) {
		return processed() > before, fmt.Sprintf("processed %d", processed())
	})
	victim.Kill()
	require.Equal(t, runtime.StateNotRunning, victim.State())
	killEnds := c.endOffsets(t, append(changelogs, inputs...)...)
	rest := maps.Clone(apps)
	delete(rest, victimName)

	waitFor(t, 2*settleTimeout, "the standbys to take over", func() (bool, string) {
		var probs []string
		// Standbys are rebuilt on the third instance meanwhile; only
		// the actives matter here.
		view, probs = observeWindows(rest, stores, partitions)
		for _, sp := range sortedParts(view) {
			if n := len(view[sp].active); n != 1 {
				probs = append(probs, fmt.Sprintf("%s has %d running actives", sp, n))
			}
		}
		return len(probs) == 0, strings.Join(probs, "; ")
	})
	ends := c.endOffsets(t, changelogs...)
	var restored, tail, size int64
	for _, sp := range sortedParts(view) {
		if _, ok := heir[sp]; !ok {
			continue
		}
		a := view[sp].active[0]
		require.Equal(t, heir[sp], a.name, "%s went to %s, its standby was on %s", sp, a.name, heir[sp])
		// The promoted standby restores from its position (or later) to
		// the changelog's end when restoration began, at most its end now.
		end := ends[changelog.TopicName(winApp, sp.store)][sp.p]
		require.LessOrEqual(t, a.info.Restored, end-standbyAt[sp], "%s restored more than its standby lacked", sp)
		require.True(t, a.info.Restored == 0 || a.info.Restored < end, "%s restored its whole changelog (%d records)", sp, end)
		// The new active holds everything the killed one wrote.
		require.GreaterOrEqual(t, a.info.Position, killEnds[changelog.TopicName(winApp, sp.store)][sp.p], "%s lost the killed active's writes", sp)
		t.Logf("%s: promoted on %s, restored %d of %d changelog records (standby at %d, changelog end %d at the kill)",
			sp, a.name, a.info.Restored, end, standbyAt[sp], killEnds[changelog.TopicName(winApp, sp.store)][sp.p])
		restored += a.info.Restored
		tail += end - standbyAt[sp]
		size += end
	}
	t.Logf("restored %d records in all, the tails after the standbys' positions held %d, the changelogs %d", restored, tail, size)
	require.Less(t, 4*restored, size, "restoration read a large part of the changelogs")

	c.waitWindowsCaughtUp(t)
	for _, batch := range batches[killAt+1:] {
		c.produceSpread(t, batch)
		c.waitWindowsCaughtUp(t)
	}
	if g == runtime.ExactlyOnce {
		requireWindowedOutputs(t, c, want)
		return
	}
	// The windows of the killed instance's uncommitted work.
	counting := map[int]bool{}
	for _, v := range view {
		counting[v.active[0].info.Task.SubTopology] = true
	}
	extra := map[windowKey]int64{}
	windowOf := func(ts time.Time) int64 {
		ms := ts.UnixMilli()
		return ms - (ms-winBase)%winSize.Milliseconds()
	}
	var redo int
	// A window whose final result the killed instance emitted but did not
	// commit is closed again by the redone records: under at-least-once
	// its final result may repeat although none of its own records were
	// redone. Stream time reached by the redone records of a partition
	// bounds which of that partition's windows closed again.
	redoneTime := map[int32]int64{}
	for _, ti := range owned {
		p := ti.ID.Partition
		topic := winIn
		if counting[ti.ID.SubTopology] {
			topic = repartition
		}
		for _, r := range c.readRange(t, topic, p, committed[topic][p], killEnds[topic][p]) {
			redo++
			if topic == repartition {
				redoneTime[p] = max(redoneTime[p], r.Timestamp.UnixMilli())
				w, err := serde.String.Decode(r.Key)
				require.NoError(t, err)
				extra[windowKey{w, windowOf(r.Timestamp)}]++
				continue
			}
			for _, w := range tokenize(string(r.Value)) {
				extra[windowKey{w, windowOf(r.Timestamp)}]++
			}
		}
	}
	var allowed int64
	for _, n := range extra {
		allowed += n
	}
	t.Logf("%d records of the killed instance's tasks were uncommitted at the kill; %d counts over %d windows allowed in excess", redo, allowed, len(extra))
	closedAgain := func(k windowKey) bool {
		ts, ok := redoneTime[topology.Partition([]byte(k.word), partitions)]
		return ok && k.start+winSize.Milliseconds()+winGrace.Milliseconds() <= ts
	}
	requireWindowedOutputsWithin(t, c, want, extra, closedAgain)
}

const (
	slApp     = "sliding"
	slIn      = "sl-events"
	slOut     = "sl-counts-out"
	slCounts  = "sl-counts"
	slDiff    = 10 * time.Second
	slKeys    = 60
	slBatches = 6
	// slSpan is the event time the records spread over; the grace exceeds
	// it, so no record is late whatever order the partitions are read in
	// and the windows are a function of the records alone.
	slSpan  = 10 * time.Minute
	slGrace = time.Hour
)

// slidingCount counts records per key in sliding windows of slDiff.
func slidingCount(t *testing.T) *topology.Topology {
	t.Helper()
	b := topology.NewBuilder()
	g := topology.Stream(b, slIn, serde.String, serde.String).GroupByKey(serde.String, serde.String)
	topology.SlidingWindowedBy(g, topology.NewSlidingWindows(slDiff).Grace(slGrace)).Count(slCounts).
		ToStream().To(slOut, topology.TimeWindowedSerde(serde.String, slDiff.Milliseconds()), serde.Int64)
	topo, err := b.Build()
	require.NoError(t, err)
	return topo
}

// slidingReference computes, by brute force over each key's record times,
// the count of every sliding window: a record at t defines the window
// [t-d, t] it ends, and the window [t+1, t+1+d] that starts after it when a
// later record of the key lies within d; a window counts the key's records
// within it, both ends included.
func slidingReference(times map[string][]int64, d int64) map[windowKey]int64 {
	want := map[windowKey]int64{}
	for k, ts := range times {
		ts = slices.Sorted(slices.Values(ts))
		starts := map[int64]bool{}
		for _, t := range ts {
			starts[t-d] = true
			if j, _ := slices.BinarySearch(ts, t+1); j < len(ts) && ts[j] <= t+d {
				starts[t+1] = true
			}
		}
		for s := range starts {
			lo, _ := slices.BinarySearch(ts, s)
			hi, _ := slices.BinarySearch(ts, s+d+1)
			want[windowKey{k, s}] = int64(hi - lo)
		}
	}
	return want
}

// TestSlidingWindowedCountFailover runs a sliding-window count on two
// instances under exactly-once against the broker, kills one with records
// in flight, and checks that the latest committed update of every window
// equals a reference computed from the records, with no window missing or
// invented.
func TestSlidingWindowedCountFailover(t *testing.T) {
	t.Parallel() // correctness only, no timing bound: runs beside another such test
	const partitions = 4
	c := newCluster(t, partitions)
	resp, err := c.adm.CreateTopics(ctx(t), partitions, -1, nil, slIn, slOut)
	require.NoError(t, err)
	require.NoError(t, resp.Error())

	rng := rand.New(rand.NewPCG(31, 7))
	times := map[string][]int64{}
	batches := make([][]*kgo.Record, slBatches)
	const n = 8_000
	for i := range n {
		key := fmt.Sprintf("key-%02d", rng.IntN(slKeys))
		ts := winBase + rng.Int64N(slSpan.Milliseconds())
		times[key] = append(times[key], ts)
		kb, _ := serde.String.Encode(key)
		b := i * slBatches / n
		batches[b] = append(batches[b], &kgo.Record{Topic: slIn, Partition: topology.Partition(kb, partitions), Key: kb, Value: []byte("x"), Timestamp: time.UnixMilli(ts)})
	}
	want := slidingReference(times, slDiff.Milliseconds())

	start := func(name, dir string) *runtime.App {
		app, err := c.startEOSPeer(t, slidingCount(t), slApp, name, dir)
		require.NoError(t, err)
		return app
	}
	caughtUp := func() {
		t.Helper()
		c.waitCommitted(t, 2*settleTimeout, slApp, slIn)
	}

	dir := t.TempDir()
	a := start("a", dir+"/a")
	b := start("b", dir+"/b")
	waitFor(t, settleTimeout, "both instances to run tasks", func() (bool, string) {
		na, nb := len(a.Tasks()), len(b.Tasks())
		return na > 0 && nb > 0 && na+nb == partitions, fmt.Sprintf("a holds %d tasks, b %d", na, nb)
	})
	for i, batch := range batches {
		c.produce(t, batch...)
		if i == slBatches/2 {
			// The batch is in flight: what a had processed but not
			// committed is redone by b, exactly once.
			a.Kill()
		}
		caughtUp()
	}
	require.Zero(t, droppedLate(b), "records dropped as late")

	latest := map[windowKey]int64{}
	for _, kv := range readCommittedWindowsWith(t, c, slOut, topology.TimeWindowedSerde(serde.String, slDiff.Milliseconds())) {
		latest[windowKey{kv.Key.Key, kv.Key.Window.Start}] = kv.Value
	}
	var missing, wrong, extra []string
	for k, n := range want {
		got, ok := latest[k]
		switch {
		case !ok:
			missing = append(missing, fmt.Sprintf("%v (count %d)", k, n))
		case got != n:
			wrong = append(wrong, fmt.Sprintf("%v: %d, want %d", k, got, n))
		}
	}
	for k := range latest {
		if _, ok := want[k]; !ok {
			extra = append(extra, fmt.Sprint(k))
		}
	}
	t.Logf("%d records, %d keys, %d sliding windows", n, len(times), len(want))
	require.Empty(t, missing[:min(10, len(missing))], "%d windows missing", len(missing))
	require.Empty(t, wrong[:min(10, len(wrong))], "%d windows miscounted", len(wrong))
	require.Empty(t, extra[:min(10, len(extra))], "%d windows no record defines", len(extra))
}

package integration

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

const (
	winApp      = "windows"
	winIn       = "win-text"
	winUpdates  = "win-updates"
	winFinal    = "win-final"
	winGroupBy  = "win-words"
	winCounts   = "win-counts"
	winFinalAgg = "win-final-counts"
	winSize     = time.Minute
	// winGrace is longer than any disorder the test causes: records are
	// produced in winBatches batches of event time, each shuffled, and
	// each batch is processed completely before the next is produced, so
	// which records count is known in advance and windows close (and
	// emit their final results) all along the run. Lateness is tested
	// with records produced at the end.
	winGrace   = 5 * time.Minute
	winBatches = 10
	// winBase is the event time of the first window, aligned to winSize.
	winBase   int64 = 1_700_000_040_000
	winSpread       = 40 // windows the corpus spreads over
)

var winSerde = topology.TimeWindowedSerde(serde.String, winSize.Milliseconds())

type windowKey struct {
	word  string
	start int64
}

// windowedWordCount counts words per tumbling minute twice: emitting every
// update to winUpdates and, with EmitFinal, one result per closed window
// to winFinal.
func windowedWordCount(t *testing.T) *topology.Topology {
	t.Helper()
	b := topology.NewBuilder()
	lines := topology.Stream(b, winIn, serde.String, serde.String)
	words := topology.FlatMapValues(lines, func(_, line string) []string { return tokenize(line) })
	g := topology.GroupBy(words, func(_, w string) string { return w }, winGroupBy, serde.String, serde.String)
	w := topology.TumblingWindows(winSize).Grace(winGrace)
	topology.WindowedBy(g, w).Count(winCounts).ToStream().To(winUpdates, winSerde, serde.Int64)
	topology.WindowedBy(g, w).EmitFinal().Count(winFinalAgg).ToStream().To(winFinal, winSerde, serde.Int64)
	topo, err := b.Build()
	require.NoError(t, err)
	return topo
}

func startWindows(t *testing.T, c *cluster, name, dir string) *runtime.App {
	t.Helper()
	return startWindowsWith(t, c, name, dir, runtime.ExactlyOnce)
}

// startWindowsWith starts an instance of the windowed count under
// guarantee g; under at-least-once the repartition topic keeps its records,
// which the failover test reads to bound what was counted twice.
func startWindowsWith(t *testing.T, c *cluster, name, dir string, g runtime.ProcessingGuarantee) *runtime.App {
	t.Helper()
	logs := new(logBuffer)
	app, err := runtime.New(windowedWordCount(t), runtime.Config{
		ApplicationID:            winApp,
		Brokers:                  c.b.Addrs(),
		StateDir:                 dir,
		ProcessingGuarantee:      g,
		NumStandbys:              1,
		NumStreamThreads:         streamThreads(t),
		SessionTimeout:           3 * time.Second,
		CommitInterval:           200 * time.Millisecond,
		RepartitionPurgeInterval: purgeInterval(g == runtime.AtLeastOnce),
		Logger:                   slog.New(slog.NewTextHandler(logs, nil)).With("instance", name),
	})
	require.NoError(t, err)
	require.NoError(t, app.Start(ctx(t)))
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		app.Close(cctx)
		if t.Failed() {
			t.Logf("logs of instance %s:\n%s", name, logs.String())
		}
	})
	return app
}

// timedLines generates lines with timestamps spread over winSpread windows,
// in winBatches batches of consecutive event time, each shuffled so that
// its records arrive out of order, and counts every word into its window.
func timedLines(seed uint64, nWords int, want map[windowKey]int64) [][]*kgo.Record {
	rng := rand.New(rand.NewPCG(seed, 3))
	lines := newCorpus(seed, 300).Lines(nWords, map[string]int64{})
	span := int64(winSpread) * winSize.Milliseconds()
	batches := make([][]*kgo.Record, winBatches)
	for _, l := range lines {
		ts := winBase + rng.Int64N(span)
		start := ts - (ts-winBase)%winSize.Milliseconds()
		for _, w := range tokenize(l) {
			want[windowKey{w, start}]++
		}
		b := (ts - winBase) * winBatches / span
		batches[b] = append(batches[b], &kgo.Record{Topic: winIn, Value: []byte(l), Timestamp: time.UnixMilli(ts)})
	}
	// Generated in random time order already; the batches only bound it.
	return batches
}

// sentinelWords returns one word per partition of the repartition topic:
// a record of each, far ahead in time, advances the stream time of every
// counting task past the close of every window of the corpus.
func sentinelWords(partitions int32) []string {
	out := make([]string, partitions)
	found := 0
	for i := 0; found < int(partitions); i++ {
		w := "zzsentinel" + strconv.Itoa(i)
		p := topology.Partition([]byte(w), partitions)
		if out[p] == "" {
			out[p] = w
			found++
		}
	}
	return out
}

func (c *cluster) produceSpread(t *testing.T, recs []*kgo.Record) {
	t.Helper()
	for _, r := range recs {
		r.Partition = c.next
		c.next = (c.next + 1) % c.partitions
	}
	c.produce(t, recs...)
}

// waitWindowsCaughtUp waits until the application committed all its input
// and repartitioned records.
func (c *cluster) waitWindowsCaughtUp(t *testing.T) {
	t.Helper()
	c.waitCommitted(t, 2*settleTimeout, winApp, winIn, winApp+"-"+winGroupBy+"-repartition")
}

// readCommittedWindows reads a windowed count topic with read-committed
// isolation to its end (found with sentinel records, as
// readCommittedLatest does) and returns every record, in order per
// partition.
func readCommittedWindows(t *testing.T, c *cluster, topic string) []topology.KeyValue[topology.Windowed[string], int64] {
	t.Helper()
	return readCommittedWindowsWith(t, c, topic, winSerde)
}

// readCommittedWindowsWith is readCommittedWindows for keys written with
// keySerde.
func readCommittedWindowsWith(t *testing.T, c *cluster, topic string, keySerde serde.Serde[topology.Windowed[string]]) []topology.KeyValue[topology.Windowed[string], int64] {
	t.Helper()
	sentinel := fmt.Sprintf("\x00end-%d", rand.Uint64())
	rctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	for p := range c.partitions {
		require.NoError(t, c.cl.ProduceSync(rctx, &kgo.Record{Topic: topic, Partition: p, Key: []byte(sentinel)}).FirstErr())
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.b.Addrs()...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(200*time.Millisecond),
	)
	require.NoError(t, err)
	defer cl.Close()
	var out []topology.KeyValue[topology.Windowed[string], int64]
	seen := make(map[int32]bool)
	for len(seen) < int(c.partitions) {
		fs := cl.PollFetches(rctx)
		require.NoError(t, rctx.Err(), "reading %s read-committed", topic)
		fs.EachError(func(_ string, _ int32, err error) { require.NoError(t, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if seen[r.Partition] || r.Value == nil && len(r.Key) > 0 && r.Key[0] == 0 {
				if string(r.Key) == sentinel {
					seen[r.Partition] = true
				}
				return
			}
			k, err := keySerde.Decode(r.Key)
			require.NoError(t, err)
			n, err := serde.Int64.Decode(r.Value)
			require.NoError(t, err)
			out = append(out, topology.KV(k, n))
		})
	}
	return out
}

func TestWindowedWordCount(t *testing.T) {
	t.Parallel() // correctness only, no timing bound: runs beside another such test
	for _, kill := range []bool{false, true} {
		name := "steady"
		if kill {
			name = "failover"
		}
		t.Run(name, func(t *testing.T) { testWindowedWordCount(t, kill) })
	}
}

func testWindowedWordCount(t *testing.T, kill bool) {
	const partitions = 4
	c := newCluster(t, partitions)
	resp, err := c.adm.CreateTopics(ctx(t), partitions, -1, nil, winIn, winUpdates, winFinal)
	require.NoError(t, err)
	require.NoError(t, resp.Error())

	want := make(map[windowKey]int64)
	batches := timedLines(7, 20_000, want)
	dir := t.TempDir()
	a := startWindows(t, c, "a", dir+"/a")
	b := startWindows(t, c, "b", dir+"/b")

	for i, batch := range batches {
		if kill && i == winBatches/2 {
			// Half the windows are closed and emitted: what the killed
			// instance emitted must not be emitted again by its
			// successor, nor what it had pending be lost.
			require.Positive(t, len(readCommittedWindows(t, c, winFinal)), "final results before the kill")
			a.Kill()
		}
		c.produceSpread(t, batch)
		// Input partitions are processed independently, so a later batch
		// produced now could overtake this one through the repartition
		// topic by more than the grace.
		c.waitWindowsCaughtUp(t)
	}
	requireWindowedOutputs(t, c, want)

	// Late records: every task's stream time is past their windows' close.
	lateRecs := []*kgo.Record{}
	for i, w := range sentinelWords(partitions) {
		lateRecs = append(lateRecs, &kgo.Record{Topic: winIn, Value: []byte(w), Timestamp: time.UnixMilli(winBase + int64(i))})
	}
	alive := []*runtime.App{b}
	if !kill {
		alive = append(alive, a)
	}
	before := int64(0)
	for _, app := range alive {
		before += droppedLate(app)
	}
	c.produceSpread(t, lateRecs)
	c.waitWindowsCaughtUp(t)
	waitFor(t, settleTimeout, "late records counted", func() (bool, string) {
		n := int64(0)
		for _, app := range alive {
			n += droppedLate(app)
		}
		// Each late word is dropped by both aggregations.
		return n-before == int64(2*len(lateRecs)), fmt.Sprintf("dropped %d, want %d", n-before, 2*len(lateRecs))
	})
	final2 := make(map[windowKey]bool)
	for _, kv := range readCommittedWindows(t, c, winFinal) {
		final2[windowKey{kv.Key.Key, kv.Key.Window.Start}] = true
	}
	require.Len(t, final2, len(want), "late records produce no results")

	// Window changelogs are compacted and deleted by time; the pending
	// store's is a plain compacted one.
	cfgs, err := c.adm.DescribeTopicConfigs(ctx(t), changelog.TopicName(winApp, winCounts), changelog.TopicName(winApp, topology.PendingStoreName(winFinalAgg)))
	require.NoError(t, err)
	got := make(map[string]map[string]string)
	for _, rc := range cfgs {
		require.NoError(t, rc.Err)
		got[rc.Name] = make(map[string]string)
		for _, cfg := range rc.Configs {
			if cfg.Value != nil {
				got[rc.Name][cfg.Key] = *cfg.Value
			}
		}
	}
	wc := got[changelog.TopicName(winApp, winCounts)]
	require.Equal(t, "compact,delete", wc["cleanup.policy"])
	require.Equal(t, strconv.FormatInt((winSize+winGrace+changelog.DefaultWindowedRetentionMargin).Milliseconds(), 10), wc["retention.ms"])
	require.Equal(t, "compact", got[changelog.TopicName(winApp, topology.PendingStoreName(winFinalAgg))]["cleanup.policy"])
}

// requireWindowedOutputs advances every counting task's stream time past
// the close of every window of the corpus (the sentinels' own windows stay
// open) and checks both outputs against want: the latest update of every
// window is its count, and emit-final gave exactly one result per window,
// the full count.
func requireWindowedOutputs(t *testing.T, c *cluster, want map[windowKey]int64) {
	t.Helper()
	requireWindowedOutputsWithin(t, c, want, nil, nil)
}

// requireWindowedOutputsWithin is requireWindowedOutputs allowing, as
// at-least-once does after a failure, up to extra[k] more in window k's
// count, and a final result repeated for a window with extra allowed or
// one that mayRepeat reports (a window whose close was redone), each
// repeat within the same bounds. A nil extra asks for exact counts and one
// result per window.
func requireWindowedOutputsWithin(t *testing.T, c *cluster, want, extra map[windowKey]int64, mayRepeat func(windowKey) bool) {
	t.Helper()
	partitions := c.partitions
	sentinelTs := winBase + int64(winSpread)*winSize.Milliseconds() + winGrace.Milliseconds() + 2*winSize.Milliseconds()
	var sentinels []*kgo.Record
	for _, w := range sentinelWords(partitions) {
		sentinels = append(sentinels, &kgo.Record{Topic: winIn, Value: []byte(w), Timestamp: time.UnixMilli(sentinelTs)})
	}
	c.produceSpread(t, sentinels)
	c.waitWindowsCaughtUp(t)
	sentinelWindows := map[windowKey]bool{}
	for _, w := range sentinelWords(partitions) {
		sentinelWindows[windowKey{w, sentinelTs - (sentinelTs-winBase)%winSize.Milliseconds()}] = true
	}
	outside := func(k windowKey, n int64) string {
		w, ok := want[k]
		switch {
		case !ok:
			return fmt.Sprintf("%v: %d, no such window in the corpus", k, n)
		case n < w || n > w+extra[k]:
			return fmt.Sprintf("%v: %d, produced %d, allowed excess %d", k, n, w, extra[k])
		}
		return ""
	}
	var bad []string
	check := func(what string) {
		t.Helper()
		slices.Sort(bad)
		require.Empty(t, bad[:min(10, len(bad))], "%s: %d problems", what, len(bad))
	}

	// Emit-on-update: the latest update of every window is its count.
	latest := make(map[windowKey]int64)
	for _, kv := range readCommittedWindows(t, c, winUpdates) {
		require.Equal(t, winSize.Milliseconds(), kv.Key.Window.End-kv.Key.Window.Start)
		if k := (windowKey{kv.Key.Key, kv.Key.Window.Start}); !sentinelWindows[k] {
			latest[k] = kv.Value
		}
	}
	var excess int64
	for k, n := range latest {
		if b := outside(k, n); b != "" {
			bad = append(bad, b)
		}
		excess += n - want[k]
	}
	for k := range want {
		if _, ok := latest[k]; !ok {
			bad = append(bad, fmt.Sprintf("%v: no update", k))
		}
	}
	check("latest updates")
	if extra != nil {
		t.Logf("latest updates count %d more than produced, over %d windows", excess, len(want))
	}

	// Emit-final: one result per closed window (under at-least-once, a
	// repeat where work was redone), each within the bounds.
	final := make(map[windowKey]int)
	for _, kv := range readCommittedWindows(t, c, winFinal) {
		k := windowKey{kv.Key.Key, kv.Key.Window.Start}
		if final[k]++; final[k] > 1 && extra[k] == 0 && (mayRepeat == nil || !mayRepeat(k)) {
			bad = append(bad, fmt.Sprintf("%v: emitted %d times", k, final[k]))
		}
		if b := outside(k, kv.Value); b != "" {
			bad = append(bad, "final "+b)
		}
	}
	repeats := 0
	for k := range want {
		switch n := final[k]; {
		case n == 0:
			bad = append(bad, fmt.Sprintf("%v: no final result", k))
		case n > 1:
			repeats += n - 1
		}
	}
	check("final results")
	if repeats > 0 {
		t.Logf("%d final results repeated where the killed instance's work was redone", repeats)
	}
}

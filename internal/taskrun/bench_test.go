package taskrun

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eddystreams/eddy/internal/cache"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// BenchmarkWordCountTasks runs word count through two active tasks the way
// a stream thread does, minus Kafka: lines through FlatMapValues and GroupBy
// into the repartition sink, each repartition record through Count with its
// record cache, and a commit every 20,000 lines. It reports the cost per
// input line of ten words; the producer and the fetch path are not in it.
// Uncombined, every word crosses the repartition sink and source.
func BenchmarkWordCountTasks(b *testing.B) {
	b.Run("combined", func(b *testing.B) { benchWordCountTasks(b, true) })
	b.Run("uncombined", func(b *testing.B) { benchWordCountTasks(b, false) })
}

func benchWordCountTasks(b *testing.B, combine bool) {
	var countOpts []topology.Option
	if combine {
		countOpts = append(countOpts, topology.WithCombining())
	}
	bld := topology.NewBuilder()
	lines := topology.Stream(bld, "text", serde.String, serde.String)
	words := topology.FlatMapValues(lines, func(_, line string) []string { return strings.Fields(line) })
	topology.GroupBy(words, func(_, w string) string { return w }, "words", serde.String, serde.String).
		Count("counts", countOpts...).ToStream().To("word-counts", serde.String, serde.Int64)
	topo, err := bld.Build()
	if err != nil {
		b.Fatal(err)
	}
	budget := cache.NewBudget(10 << 20)
	newTask := func(sub int, out Sender) *Active {
		a, err := NewActive(Config{
			ID: task.ID{SubTopology: sub, Partition: 0}, AppID: "app", Topology: topo,
			Changelog: func(s string) string { return "app-" + s + "-changelog" },
			Open: func(task.ID, topology.StoreInfo) (statestore.Store, error) {
				return statestore.NewMemory(), nil
			},
			Budget: budget,
			Sender: out,
		})
		if err != nil {
			b.Fatal(err)
		}
		a.Restored()
		return a
	}
	repart, output := &sink{}, &sink{}
	split, count := newTask(0, repart), newTask(1, output)

	// A Zipf-distributed vocabulary of 5,000 words, ten to a line.
	rng := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(rng, 1.1, 1, 4999)
	corpus := make([][]byte, 1024)
	for i := range corpus {
		var sb strings.Builder
		for j := range 10 {
			if j > 0 {
				sb.WriteByte(' ')
			}
			sb.WriteString("w" + strconv.FormatUint(zipf.Uint64(), 36))
		}
		corpus[i] = []byte(sb.String())
	}
	ts := time.Unix(1, 0)
	var off int64
	b.ReportAllocs()
	var roff int64
	// CPU time says more than wall time on a machine shared with other
	// work.
	cpu0 := cpuTime()
	defer func() { b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op") }()
	repartition := func() {
		for _, r := range repart.out {
			if err := count.Process(graph.InputRecord{Topic: "app-words-repartition", Offset: roff, Key: r.Key, Value: r.Value, Timestamp: ts}); err != nil {
				b.Fatal(err)
			}
			roff++
		}
		repart.out = repart.out[:0]
	}
	for b.Loop() {
		if err := split.Process(graph.InputRecord{Topic: "text", Offset: off, Value: corpus[off%int64(len(corpus))], Timestamp: ts}); err != nil {
			b.Fatal(err)
		}
		repartition()
		off++
		if off%20000 == 0 {
			// Combined, the split task's partial counts go out now.
			if err := split.Flush(); err != nil {
				b.Fatal(err)
			}
			split.PendingChangelog()
			if err := split.CompleteCommit(func(string, int32) (int64, bool) { return off, true }); err != nil {
				b.Fatal(err)
			}
			repartition()
			output.out = output.out[:0]
			if err := count.Flush(); err != nil {
				b.Fatal(err)
			}
			count.PendingChangelog()
			if err := count.CompleteCommit(func(string, int32) (int64, bool) { return roff, true }); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkCountVsWindowed runs eddybench (w1)'s input through one task of a
// key-value count and one of a tumbling-window count (1-minute windows),
// with badger stores, record caches and a commit every 10,000 records, as
// the runtime does minus Kafka. The records are 833 keys in turn (one
// task's share of (w1)'s 10,000) over 30 minutes of event time, so each
// key has about 3 records per window; the windowed count's extra cost per
// record is the ratio of the two.
//
// The sliding (1-minute difference) and session (1-minute gap) counts read
// a range of their store for every record, through the record cache, so
// they also show what such reads cost while the cache holds a commit
// interval's dirty windows.
func BenchmarkCountVsWindowed(b *testing.B) {
	for _, kind := range []string{"kv", "windowed", "sliding", "session"} {
		b.Run(kind, func(b *testing.B) { benchCount(b, kind) })
	}
}

func benchCount(b *testing.B, kind string) {
	bld := topology.NewBuilder()
	g := topology.Stream(bld, "in", serde.Bytes, serde.Bytes).GroupByKey(serde.Bytes, serde.Bytes)
	switch kind {
	case "windowed":
		w := topology.TumblingWindows(time.Minute)
		topology.WindowedBy(g, w).Count("counts").ToStream().To("out", topology.TimeWindowedSerde(serde.Bytes, w.Size()), serde.Int64)
	case "sliding":
		w := topology.NewSlidingWindows(time.Minute)
		topology.SlidingWindowedBy(g, w).Count("counts").ToStream().To("out", topology.TimeWindowedSerde(serde.Bytes, w.MaxDiff()), serde.Int64)
	case "session":
		topology.SessionWindowedBy(g, topology.NewSessionWindows(time.Minute)).Count("counts").ToStream().To("out", topology.SessionWindowedSerde(serde.Bytes), serde.Int64)
	default:
		g.Count("counts").ToStream().To("out", serde.Bytes, serde.Int64)
	}
	topo, err := bld.Build()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	out := &sink{}
	a, err := NewActive(Config{
		ID: task.ID{}, AppID: "app", Topology: topo,
		Changelog: func(s string) string { return "app-" + s + "-changelog" },
		Open: func(_ task.ID, info topology.StoreInfo) (statestore.Store, error) {
			s, err := statestore.OpenBadger(dir+"/"+info.Name, statestore.DefaultBadgerOptions())
			if err != nil || info.Kind == topology.KeyValueKind {
				return s, err
			}
			return statestore.NewSegmentedStore(s, info.WindowOptions())
		},
		Budget: cache.NewBudget(10 << 20),
		Sender: out,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close(true)
	a.Restored()
	const keys, perTask = 833, 1_000_000 / 12
	kb := make([][]byte, keys)
	for i := range kb {
		kb[i] = []byte("key-" + strconv.Itoa(i))
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	span := (30 * time.Minute).Milliseconds()
	var off int64
	b.ReportAllocs()
	// CPU time, badger's background work included, says more than wall
	// time on a machine shared with other work.
	cpu0 := cpuTime()
	for b.Loop() {
		ts := time.UnixMilli(t0 + off*span/perTask)
		if err := a.Process(graph.InputRecord{Topic: "in", Offset: off, Key: kb[off%keys], Value: []byte("x"), Timestamp: ts}); err != nil {
			b.Fatal(err)
		}
		off++
		if off%10_000 == 0 {
			out.out = out.out[:0]
			if err := a.Flush(); err != nil {
				b.Fatal(err)
			}
			a.PendingChangelog()
			if err := a.CompleteCommit(func(string, int32) (int64, bool) { return off, true }); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cachedTableTask is the task of a table read from "in" into a memory
// store under a record cache of 64 MiB and written on to "out", restored
// and ready, with the 1,000 keys the table benchmarks write.
func cachedTableTask(b *testing.B) (*Active, *sink, [][]byte) {
	bld := topology.NewBuilder()
	topology.Table(bld, "in", serde.String, serde.String, "table").ToStream().To("out", serde.String, serde.String)
	topo, err := bld.Build()
	if err != nil {
		b.Fatal(err)
	}
	out := &sink{}
	a, err := NewActive(Config{
		ID: task.ID{}, AppID: "app", Topology: topo,
		Changelog: func(s string) string { return "app-" + s + "-changelog" },
		Open: func(task.ID, topology.StoreInfo) (statestore.Store, error) {
			return statestore.NewMemory(), nil
		},
		Budget: cache.NewBudget(64 << 20),
		Sender: out,
	})
	if err != nil {
		b.Fatal(err)
	}
	a.Restored()
	kb := make([][]byte, 1000)
	for i := range kb {
		kb[i] = []byte("key-" + strconv.Itoa(i))
	}
	b.Cleanup(func() { a.Close(true) })
	return a, out, kb
}

// commitCachedTable flushes the task and completes its commit with every
// record up to off written, dropping what the flush forwarded.
func commitCachedTable(b *testing.B, a *Active, out *sink, off int64) {
	out.out = out.out[:0]
	if err := a.Flush(); err != nil {
		b.Fatal(err)
	}
	a.PendingChangelog()
	if err := a.CompleteCommit(func(string, int32) (int64, bool) { return off, true }); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkTableTombstones measures a table through the record cache whose
// keys are all written in one commit interval, then each written again and
// deleted in the next: every tombstone the flush forwards is first checked
// against the store as of the last commit, the cost of dropping those of
// keys written and deleted within one interval.
func BenchmarkTableTombstones(b *testing.B) {
	a, out, kb := cachedTableTask(b)
	const keys = 1000 // len(kb)
	var off, n int64
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		// Rounds of 3,000 records: every key written, then every key
		// written and deleted.
		i := n % (3 * keys)
		var value []byte
		if i < keys || (i-keys)%2 == 0 {
			value = []byte("v")
		}
		k := kb[i%keys]
		if i >= keys {
			k = kb[(i-keys)/2]
		}
		if err := a.Process(graph.InputRecord{Topic: "in", Offset: off, Key: k, Value: value, Timestamp: time.Unix(1, 0)}); err != nil {
			b.Fatal(err)
		}
		off++
		n++
		if i == keys-1 || i == 3*keys-1 {
			commitCachedTable(b, a, out, off)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkTableTombstonesUnseen measures a table through the record cache
// whose keys are each written and deleted within every commit interval,
// never reaching the store: the flush forwards none of the tombstones, and
// the commit writes none of them to the store or the changelog.
func BenchmarkTableTombstonesUnseen(b *testing.B) {
	a, out, kb := cachedTableTask(b)
	const keys = 1000 // len(kb)
	var off, n int64
	b.ReportAllocs()
	for b.Loop() {
		// Rounds of 2,000 records: every key written, then deleted.
		i := n % (2 * keys)
		var value []byte
		if i < keys {
			value = []byte("v")
		}
		if err := a.Process(graph.InputRecord{Topic: "in", Offset: off, Key: kb[i%keys], Value: value, Timestamp: time.Unix(1, 0)}); err != nil {
			b.Fatal(err)
		}
		off++
		n++
		if i == 2*keys-1 {
			commitCachedTable(b, a, out, off)
		}
	}
}

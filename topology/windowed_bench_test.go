package topology_test

import (
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/eddystreams/eddy/internal/cache"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/topology"
)

// benchWinEnv is a task environment as the runtime gives one: a record
// cache over a segmented in-memory store, and a sink that drops records.
type benchWinEnv struct {
	info  topology.StoreInfo
	cache *cache.Store
	sent  int
}

func (e *benchWinEnv) AppID() string                               { return "app" }
func (e *benchWinEnv) TaskID() string                              { return "0_0" }
func (e *benchWinEnv) Partition() int32                            { return 0 }
func (e *benchWinEnv) Now() time.Time                              { return time.Unix(1000, 0) }
func (e *benchWinEnv) Send(graph.OutputRecord) error               { e.sent++; return nil }
func (e *benchWinEnv) BufferTableUpdates() bool                    { return true }
func (e *benchWinEnv) Store(string) (statestore.ReadWriter, error) { return e.cache, nil }

// BenchmarkWindowedCountSpread is one task's share of eddybench (w1)
// spread without Kafka or badger: 833 keys, times over 30 minutes for
// 83,333 records, so about 3.3 records per one-minute window, and a
// commit every 27,000 records (about 8,000 dirty windows, as the cache
// budget makes the runtime commit). It reports the windowed count's CPU
// path per record: processing, the graph's flush, the dirty entries'
// sort and the store write.
func BenchmarkWindowedCountSpread(b *testing.B) {
	bld := topology.NewBuilder()
	w := topology.TumblingWindows(time.Minute)
	topology.WindowedBy(topology.Stream(bld, "in", serde.Bytes, serde.Bytes).GroupByKey(serde.Bytes, serde.Bytes), w).
		Count("counts").ToStream().To("out", topology.TimeWindowedSerde(serde.Bytes, w.Size()), serde.Int64)
	topo, err := bld.Build()
	if err != nil {
		b.Fatal(err)
	}
	info := topology.StoreInfo{Name: "counts", Kind: topology.WindowKind, Retention: w.MinRetention(), WindowSize: w.Size()}
	seg, err := statestore.NewSegmentedStore(statestore.NewMemory(), info.WindowOptions())
	if err != nil {
		b.Fatal(err)
	}
	env := &benchWinEnv{info: info, cache: cache.New(seg, nil)}
	g, err := graph.Of(topo).NewTaskGraph(0, env)
	if err != nil {
		b.Fatal(err)
	}
	const keys, perTask, every = 833, 1_000_000 / 12, 27_000
	kb := make([][]byte, keys)
	for i := range kb {
		kb[i] = []byte("key-" + strconv.Itoa(i))
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	span := (30 * time.Minute).Milliseconds()
	commit := func(pos int64) {
		if err := g.Flush(); err != nil {
			b.Fatal(err)
		}
		_ = env.cache.Dirty()
		if err := env.cache.Commit(pos); err != nil {
			b.Fatal(err)
		}
		if d, ok := g.(graph.Discarder); ok {
			d.Committed()
		}
	}
	var off int64
	b.ReportAllocs()
	// CPU time says more than wall time on a machine shared with other
	// work.
	cpu0 := benchCPU()
	for b.Loop() {
		ts := time.UnixMilli(t0 + off*span/perTask)
		if err := g.Process(graph.InputRecord{Topic: "in", Offset: off, Key: kb[off%keys], Value: []byte("x"), Timestamp: ts}); err != nil {
			b.Fatal(err)
		}
		off++
		if off%every == 0 {
			commit(off)
		}
	}
	commit(off)
	b.ReportMetric(float64(benchCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

// benchCPU is the process's user and system CPU time so far.
func benchCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

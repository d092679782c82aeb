package taskrun

import (
	"math/rand/v2"
	"strconv"
	"strings"
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
func BenchmarkWordCountTasks(b *testing.B) {
	bld := topology.NewBuilder()
	lines := topology.Stream(bld, "text", serde.String, serde.String)
	words := topology.FlatMapValues(lines, func(_, line string) []string { return strings.Fields(line) })
	topology.GroupBy(words, func(_, w string) string { return w }, "words", serde.String, serde.String).
		Count("counts").ToStream().To("word-counts", serde.String, serde.Int64)
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
		if err := a.StartRestoring(); err != nil {
			b.Fatal(err)
		}
		if err := a.Restored(); err != nil {
			b.Fatal(err)
		}
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
	for b.Loop() {
		repart.out = repart.out[:0]
		if err := split.Process(graph.InputRecord{Topic: "text", Offset: off, Value: corpus[off%int64(len(corpus))], Timestamp: ts}); err != nil {
			b.Fatal(err)
		}
		for _, r := range repart.out {
			if err := count.Process(graph.InputRecord{Topic: "app-words-repartition", Offset: off, Key: r.Key, Value: r.Value, Timestamp: ts}); err != nil {
				b.Fatal(err)
			}
		}
		off++
		if off%20000 == 0 {
			output.out = output.out[:0]
			if err := count.Flush(); err != nil {
				b.Fatal(err)
			}
			count.PendingChangelog()
			if err := count.CompleteCommit(func(string, int32) (int64, bool) { return off, true }); err != nil {
				b.Fatal(err)
			}
		}
	}
}

package taskrun

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/eddystreams/eddy/internal/cache"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// BenchmarkCountVsJoin runs eddybench (j)'s input through one task of a
// key-value count of orders by customer and one of a stream–table join of
// the orders with a table of customers, with badger stores, record caches
// and a commit every 10,000 records, as the runtime does minus Kafka. The
// task holds 8,333 customers (one task's share of (j)'s 100,000), loaded,
// committed and reopened before the orders, so that the join reads them
// from badger's tables as the (j) run does; orders pick a customer
// uniformly or, in the zipf runs, Zipf-distributed (s = 1.1). The join's cost per record against the count's is the ratio
// (j) is about, without the producer and the fetch path.
func BenchmarkCountVsJoin(b *testing.B) {
	for _, zipf := range []bool{false, true} {
		for _, join := range []bool{false, true} {
			name := "uniform/count"
			if zipf {
				name = "zipf/count"
			}
			if join {
				name = name[:len(name)-len("count")] + "join"
			}
			b.Run(name, func(b *testing.B) { benchCountOrJoin(b, join, zipf) })
		}
	}
}

func benchCountOrJoin(b *testing.B, join, zipf bool) {
	const customers = 100_000 / 12
	bld := topology.NewBuilder()
	orders := topology.Stream(bld, "orders", serde.String, serde.String)
	if join {
		table := topology.Table(bld, "customers", serde.String, serde.String, "customers")
		topology.Join(orders, table, func(o, c string) string { return o + "|" + c }).To("out", serde.String, serde.String)
	} else {
		orders.GroupByKey(serde.String, serde.String).Count("counts").ToStream().To("out", serde.String, serde.Int64)
	}
	topo, err := bld.Build()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	out := &sink{}
	open := func() *Active {
		a, err := NewActive(Config{
			ID: task.ID{}, AppID: "app", Topology: topo,
			Changelog: func(s string) string { return "app-" + s + "-changelog" },
			Open: func(_ task.ID, info topology.StoreInfo) (statestore.Store, error) {
				return statestore.OpenBadger(dir+"/"+info.Name, statestore.DefaultBadgerOptions())
			},
			Budget: cache.NewBudget(10 << 20),
			Sender: out,
		})
		if err != nil {
			b.Fatal(err)
		}
		a.Restored()
		return a
	}
	var off int64
	commit := func(a *Active) {
		out.out = out.out[:0]
		if err := a.Flush(); err != nil {
			b.Fatal(err)
		}
		a.PendingChangelog()
		if err := a.CompleteCommit(func(string, int32) (int64, bool) { return off, true }); err != nil {
			b.Fatal(err)
		}
	}
	ts := time.Unix(1, 0)
	keys := make([][]byte, customers)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "customer-%06d", i)
	}
	a := open()
	if join {
		for i, k := range keys {
			v := fmt.Appendf(nil, "name-%06d|region-%d|tier-%d", i, i%17, i%3)
			if err := a.Process(graph.InputRecord{Topic: "customers", Offset: int64(i), Key: k, Value: v, Timestamp: ts}); err != nil {
				b.Fatal(err)
			}
		}
		commit(a)
		if err := a.Close(true); err != nil {
			b.Fatal(err)
		}
		a = open()
	}
	defer a.Close(true)
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func() int { return rng.IntN(customers) }
	if zipf {
		z := rand.NewZipf(rng, 1.1, 1, customers-1)
		pick = func() int { return int(z.Uint64()) }
	}
	values := make([][]byte, 1024)
	for i := range values {
		values[i] = fmt.Appendf(nil, "order-%08d|amount-%d", i, i%9973)
	}
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		k := keys[pick()]
		if err := a.Process(graph.InputRecord{Topic: "orders", Offset: off, Key: k, Value: values[off%int64(len(values))], Timestamp: ts}); err != nil {
			b.Fatal(err)
		}
		off++
		if off%10_000 == 0 {
			commit(a)
		}
	}
	if join && int64(len(out.out)) != off%10_000 {
		b.Fatalf("%d joined records since the last commit, want %d", len(out.out), off%10_000)
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

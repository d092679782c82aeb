package runtime

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// BenchmarkProbingRebalanceThroughput measures, in one run, the records an
// instance's tasks process per second in windows that each begin with a
// rebalance that moves no task (what a probing rebalance is while warmups
// catch up), against windows without one, alternating them over a backlog
// so that processing is never short of input. It reports both rates and
// their ratio (and the median of the ratios of each rebalancing window to
// the steady window before it), under cooperative and under eager
// rebalancing.
//
//	go test ./runtime/ -run '^$' -bench ProbingRebalance -benchtime 1x
func BenchmarkProbingRebalanceThroughput(b *testing.B) {
	for _, eager := range []bool{false, true} {
		name := "cooperative"
		if eager {
			name = "eager"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				steady, rebalancing, median := probingRebalanceRates(b, eager)
				b.ReportMetric(steady, "steady-rec/s")
				b.ReportMetric(rebalancing, "rebalancing-rec/s")
				b.ReportMetric(rebalancing/steady, "ratio")
				b.ReportMetric(median, "median-pair-ratio")
			}
		})
	}
}

func probingRebalanceRates(b *testing.B, eager bool) (steady, rebalancing, medianRatio float64) {
	const (
		partitions = 4
		backlog    = 10_000_000
		window     = 3 * time.Second
		pairs      = 5
	)
	br, err := startBenchBroker(b, partitions)
	require.NoError(b, err)
	cl, err := kgo.NewClient(kgo.SeedBrokers(br.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(20*time.Millisecond), kgo.MaxBufferedRecords(100_000))
	require.NoError(b, err)
	defer cl.Close()
	for i := range backlog {
		r := &kgo.Record{Topic: "in", Partition: int32(i % partitions), Key: fmt.Appendf(nil, "k%d", i%10_000), Value: []byte("v")}
		cl.Produce(context.Background(), r, func(_ *kgo.Record, err error) {
			if err != nil {
				b.Error(err)
			}
		})
	}
	require.NoError(b, cl.Flush(context.Background()))

	app, err := New(burnCountTopology(b), Config{ApplicationID: "bench", Brokers: br.Addrs(), StateDir: b.TempDir(),
		NumStreamThreads: 2, EagerRebalancing: eager})
	require.NoError(b, err)
	require.NoError(b, app.Start(context.Background()))
	defer app.Close(context.Background())
	waitForB(b, 60*time.Second, func() bool { return app.State() == StateRunning && len(app.Tasks()) == partitions })

	// Records processed from the input topic since the instance started,
	// whatever happened to the tasks that processed them.
	total := func() int64 {
		var m dto.Metric
		require.NoError(b, app.metrics.input.Write(&m))
		return int64(m.GetCounter().GetValue())
	}
	measure := func(rebalance bool) float64 {
		if rebalance {
			app.threads[0].forceRebalance()
		}
		start, began := total(), time.Now()
		time.Sleep(window)
		rate := float64(total()-start) / time.Since(began).Seconds()
		b.Logf("rebalance %v: %.0f records/s, %d processed in all", rebalance, rate, total())
		return rate
	}
	// Each rebalancing window is compared with the steady one just before
	// it, so that a change of load on the machine between pairs cancels.
	var s, r float64
	var ratios []float64
	for range pairs {
		steady, rebalancing := measure(false), measure(true)
		s += steady
		r += rebalancing
		ratios = append(ratios, rebalancing/steady)
	}
	if left := backlog - total(); left <= 0 {
		b.Fatalf("the backlog ran out during the measurement; raise it")
	}
	slices.Sort(ratios)
	return s / pairs, r / pairs, ratios[len(ratios)/2]
}

// burnCountTopology is countTopology with about 25 µs of work per record
// before the count, so that processing, not the backlog, bounds the rate.
func burnCountTopology(t testing.TB) *topology.Topology {
	b := topology.NewBuilder()
	s := topology.Stream(b, "in", serde.String, serde.String).Peek(func(_, v string) {
		sum := sha256.Sum256([]byte(v))
		for range 100 {
			sum = sha256.Sum256(sum[:])
		}
		burnSink = sum[0]
	})
	s.GroupByKey(serde.String, serde.String).Count("counts")
	topo, err := b.Build()
	require.NoError(t, err)
	return topo
}

// burnSink keeps the compiler from dropping burnCountTopology's work.
var burnSink byte

func startBenchBroker(b *testing.B, partitions int32) (*broker.Broker, error) {
	br, err := broker.Start(broker.Config{Partitions: partitions})
	if err != nil {
		return nil, err
	}
	b.Cleanup(br.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(br.Addrs()...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	_, err = kadm.NewClient(cl).CreateTopics(context.Background(), partitions, -1, nil, "in")
	return br, err
}

func waitForB(b *testing.B, d time.Duration, cond func() bool) {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatal("timed out")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

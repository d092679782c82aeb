package runtime

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
)

// BenchmarkProbingRebalanceThroughput measures, in one run, the records an
// instance's tasks process per second in windows that each begin with a
// rebalance that moves no task (what a probing rebalance is while warmups
// catch up), against windows without one, alternating them over a backlog
// so that processing is never short of input. It reports both rates and
// their ratio, under cooperative and under eager rebalancing.
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
				steady, rebalancing := probingRebalanceRates(b, eager)
				b.ReportMetric(steady, "steady-rec/s")
				b.ReportMetric(rebalancing, "rebalancing-rec/s")
				b.ReportMetric(rebalancing/steady, "ratio")
			}
		})
	}
}

func probingRebalanceRates(b *testing.B, eager bool) (steady, rebalancing float64) {
	const (
		partitions = 4
		backlog    = 1_500_000
		window     = 4 * time.Second
		pairs      = 3
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

	app, err := New(countTopology(b), Config{ApplicationID: "bench", Brokers: br.Addrs(), StateDir: b.TempDir(),
		NumStreamThreads: 2, EagerRebalancing: eager})
	require.NoError(b, err)
	require.NoError(b, app.Start(context.Background()))
	defer app.Close(context.Background())
	waitForB(b, 60*time.Second, func() bool { return app.State() == StateRunning && len(app.Tasks()) == partitions })

	// The sum of the task counters, which restart when a task is
	// reopened (eager rebalancing): count what each task object did.
	type counter struct{ last, total int64 }
	counts := map[any]*counter{}
	total := func() int64 {
		var sum int64
		for _, th := range app.threads {
			th.mu.Lock()
			for _, t := range th.tasks {
				c := counts[t]
				if c == nil {
					c = &counter{}
					counts[t] = c
				}
				c.total += t.Processed() - c.last
				c.last = t.Processed()
			}
			th.mu.Unlock()
		}
		for _, c := range counts {
			sum += c.total
		}
		return sum
	}
	measure := func(rebalance bool) float64 {
		if rebalance {
			app.threads[0].forceRebalance()
		}
		start, began := total(), time.Now()
		// Sample often, so that a task closed by an eager revocation is
		// counted up to its last record.
		for time.Since(began) < window {
			time.Sleep(10 * time.Millisecond)
			total()
		}
		return float64(total()-start) / time.Since(began).Seconds()
	}
	var s, r float64
	for range pairs {
		s += measure(false)
		r += measure(true)
	}
	if lag := backlog - total(); lag <= 0 {
		b.Fatalf("the backlog ran out during the measurement; raise it")
	}
	return s / pairs, r / pairs
}

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

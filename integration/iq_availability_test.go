package integration

// How available queries stay while instances are killed, measured.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// BenchmarkIQAvailabilityUnderKills measures issue 4's availability figure:
// three word-count instances with one standby per task under steady input,
// one of them killed and restarted (same state directory, same endpoint) in
// a loop, while a routing client queries at lag:10000. It reports the
// fraction of queries answered (target 1), the largest lag an answer
// reported, and the kills. The loop runs for EDDY_IQ_AVAILABILITY (a Go
// duration, default 60s); run it once:
//
//	go test ./integration -run '^$' -bench IQAvailability -benchtime 1x
//
// The harness helpers take a *testing.T, so the setup is done here with the
// pieces beneath them.
func BenchmarkIQAvailabilityUnderKills(b *testing.B) {
	dur := 60 * time.Second
	if s := os.Getenv("EDDY_IQ_AVAILABILITY"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatalf("EDDY_IQ_AVAILABILITY=%q: %v", s, err)
		}
		dur = d
	}
	for range b.N {
		measureAvailability(b, dur)
	}
}

func measureAvailability(b *testing.B, dur time.Duration) {
	const partitions = 6
	brk, err := broker.Start(broker.Config{Partitions: partitions, CompactionInterval: time.Hour})
	require.NoError(b, err)
	defer brk.Close()
	kcl, err := kgo.NewClient(kgo.SeedBrokers(brk.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond))
	require.NoError(b, err)
	defer kcl.Close()
	c := &cluster{b: brk, cl: kcl, adm: kadm.NewClient(kcl), partitions: partitions, threads: streamThreads(b)}
	bctx, cancel := context.WithTimeout(context.Background(), dur+5*time.Minute)
	defer cancel()
	resp, err := c.adm.CreateTopics(bctx, partitions, -1, nil, inputTopic, outputTopic)
	require.NoError(b, err)
	require.NoError(b, resp.Error())

	dirs := []string{b.TempDir(), b.TempDir(), b.TempDir()}
	nodes := make([]*iqNode, len(dirs))
	start := func(i int, addr string) {
		if addr == "" {
			addr = "127.0.0.1:0"
		}
		ln, err := net.Listen("tcp", addr)
		require.NoError(b, err)
		bld := topology.NewBuilder()
		lines := topology.Stream(bld, inputTopic, serde.String, serde.String)
		words := topology.FlatMapValues(lines, func(_, line string) []string { return tokenize(line) })
		topology.GroupBy(words, func(_, w string) string { return w }, groupByName, serde.String, serde.String).
			Count(countsStore).ToStream().To(outputTopic, serde.String, serde.Int64)
		topo, err := bld.Build()
		require.NoError(b, err)
		app, err := runtime.New(topo, runtime.Config{
			ApplicationID: "wc", Brokers: brk.Addrs(), StateDir: dirs[i], CommitInterval: commitInterval,
			SessionTimeout: failoverSession, Endpoint: ln.Addr().String(), NumStandbys: 1, ProbingRebalanceInterval: time.Second,
			NumStreamThreads: streamThreads(b),
		})
		require.NoError(b, err)
		require.NoError(b, app.Start(bctx))
		in := &instance{App: app, name: fmt.Sprintf("i%d", i), stateDir: dirs[i], endpoint: ln.Addr().String()}
		n := &iqNode{instance: in, addr: in.endpoint, q: iq.NewQuerier(app.Queries()), api: iq.NewServer(app.Queries(), iq.ServerConfig{}, iqCountsCodec())}
		n.srv = &http.Server{Handler: n.api, ReadHeaderTimeout: 5 * time.Second}
		go n.srv.Serve(ln)
		nodes[i] = n
	}
	stopAll := func() {
		for _, n := range nodes {
			n.srv.Close()
			n.api.Close()
			n.Close(context.Background())
		}
	}
	defer func() { stopAll() }()
	settle := func(live []*iqNode, what string) {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			_, probs := c.iqLayoutProblems(live, 1)
			if len(probs) == 0 {
				return
			}
			if time.Now().After(deadline) {
				b.Fatalf("%s: %v", what, probs)
			}
			time.Sleep(pollEvery)
		}
	}
	for i := range nodes {
		start(i, "")
	}
	settle(nodes, "first layout")

	words := make([]string, 0, 4*partitions)
	perPart := make(map[int32]int)
	for i := 0; len(words) < cap(words); i++ {
		w := "avail" + strconv.Itoa(i)
		if p := iqWordPartition(w, partitions); perPart[p] < 4 {
			perPart[p]++
			words = append(words, w)
		}
	}
	feed := c.iqFeed(words, 20*time.Millisecond)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.addr)
	}
	qc, err := iq.NewClient(addrs, iq.ClientOptions{Timeout: time.Second})
	require.NoError(b, err)
	defer qc.Close()
	var maxLag int64
	poll := startIQPoller("routing client", words, func(w string) (iqObs, error) {
		qctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return clientObs(iq.ClientGet[string, int64](qctx, qc, countsStore, w, serde.String, iq.WithStaleness(iq.MaxLag(boundLag))))
	}, func(_ string, o iqObs) string {
		maxLag = max(maxLag, o.lag) // only the poller's goroutine writes it
		return ""
	})

	b.ResetTimer()
	began := time.Now()
	kills := 0
	for time.Since(began) < dur {
		i := kills % len(nodes)
		victim := nodes[i]
		victim.kill()
		victim.api.Close()
		kills++
		var live []*iqNode
		for _, n := range nodes {
			if n != victim {
				live = append(live, n)
			}
		}
		settle(live, "take-over after a kill")
		start(i, victim.addr)
		settle(nodes, "layout after a restart")
	}
	poll.halt()
	b.StopTimer()
	feed.halt(b)
	b.Log(poll)
	answered := poll.answers[0] + poll.answers[1] + poll.answers[2]
	failed := poll.failures[0] + poll.failures[1] + poll.failures[2]
	b.ReportMetric(float64(answered)/float64(max(answered+failed, 1)), "answered-fraction")
	b.ReportMetric(float64(maxLag), "max-lag")
	b.ReportMetric(float64(kills), "kills")
	b.ReportMetric(float64(failed), "failed-queries")
}

package runtime

import (
	"context"
	"log/slog"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// countsReach waits until every key's count on app is at least want's.
func countsReach(t testing.TB, app *App, want map[string]int64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok := true
		for k, n := range want {
			v, found, _, err := activeGet(app, "counts", []byte(k))
			if err != nil || !found {
				ok = false
				break
			}
			if got, _ := serde.Int64.Decode(v); got < n {
				ok = false
				break
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("counts did not reach %d keys' totals within %s", len(want), within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// produceKeys sends n records spread over keys key0..key(keys-1) and adds
// them to want.
func produceKeys(t testing.TB, cl *kgo.Client, n, keys int, want map[string]int64) {
	for i := range n {
		k := "key" + strconv.Itoa(i%keys)
		want[k]++
		cl.Produce(context.Background(), &kgo.Record{Topic: "in", Key: []byte(k), Value: []byte("v")}, nil)
	}
	require.NoError(t, cl.Flush(context.Background()))
}

// A watcher that stops reading does not hold processing or another
// watcher of the same key back: processing keeps its pace, the reading
// watcher gets every change, and the stopped one, once it reads again,
// ends with ErrWatcherTooSlow and the position to resume from.
func TestWatchSlowWatcherHoldsNothingBack(t *testing.T) {
	c := newEOSCluster(t)
	app := c.start(t, t.TempDir())
	defer app.Close(context.Background())
	want := map[string]int64{}
	c.produce(t, 10, want)
	waitCounts(t, app, want)
	q := iq.NewQuerier(app.Queries())

	// Rounds of input, each waited for, so that every round is a commit
	// of its own and a change of k0.
	const rounds = 30
	run := func() time.Duration {
		start := time.Now()
		for range rounds {
			c.produce(t, 10, want)
			waitCounts(t, app, want)
		}
		return time.Since(start)
	}
	alone := run()

	slow, err := q.WatchBytes(context.Background(), "counts", []byte("k0"), iq.WatchOptions{From: iq.FromNow, Buffer: 4})
	require.NoError(t, err)
	defer slow.Close()
	reader, err := q.WatchBytes(context.Background(), "counts", []byte("k0"), iq.WatchOptions{From: iq.FromNow})
	require.NoError(t, err)
	defer reader.Close()
	from := reader.Resume()
	var got []iq.Update
	readerDone := make(chan error, 1)
	target := want["k0"] + rounds
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for {
			u, err := reader.Next(ctx)
			if err != nil {
				readerDone <- err
				return
			}
			got = append(got, u)
			if n, _ := serde.Int64.Decode(u.Value); n == target {
				readerDone <- nil
				return
			}
		}
	}()
	watched := run()
	require.Equal(t, target, want["k0"])
	require.NoError(t, <-readerDone)
	require.Len(t, got, rounds, "the reading watcher got one update per commit")
	requireSequence(t, got, committedChanges(t, c.b.Addrs(), "eos-counts-changelog", got[0].Provenance.Partition, "k0", from, got[len(got)-1].Position))
	t.Logf("%d commits: %s alone, %s with a stalled and a reading watcher", rounds, alone.Round(time.Millisecond), watched.Round(time.Millisecond))
	// Generous against a shared machine's noise: a watcher that blocked
	// processing would stall it for good.
	require.Less(t, watched, 3*alone+5*time.Second, "processing with a stalled watcher")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := 0
	for {
		_, err := slow.Next(ctx)
		if err != nil {
			var ended *iq.WatchEndedError
			require.ErrorAs(t, err, &ended)
			require.ErrorIs(t, err, iq.ErrWatcherTooSlow)
			require.Equal(t, slow.Resume(), ended.Resume)
			break
		}
		n++
	}
	require.LessOrEqual(t, n, 4, "the stalled watcher gets at most its buffer")
}

// BenchmarkWatchLatency measures the time from an input record's
// production to its count reaching a watcher, on the active and on a
// standby, under exactly-once with the default commit interval (100 ms),
// for a watch read with Next and one receiving in a function
// (iq.Watch.Receive, the metrics named receive-). It reports p50 and p99
// of each in milliseconds.
func BenchmarkWatchLatency(b *testing.B) {
	bc, err := startBenchBroker(b, 2)
	require.NoError(b, err)
	defer bc.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(bc.Addrs()...), kgo.DefaultProduceTopic("in"))
	require.NoError(b, err)
	defer cl.Close()
	var apps []*App
	for range 2 {
		app, err := New(countTopology(b), Config{ApplicationID: "lat", Brokers: bc.Addrs(), StateDir: b.TempDir(),
			ProcessingGuarantee: ExactlyOnce, NumStreamThreads: 1, NumStandbys: 1, SessionTimeout: 2 * time.Second, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(b, err)
		require.NoError(b, app.Start(context.Background()))
		defer app.Close(context.Background())
		apps = append(apps, app)
	}
	key := []byte("hot")
	p, err := apps[0].Queries().KeyPartition("counts", key)
	require.NoError(b, err)
	cl.ProduceSync(context.Background(), &kgo.Record{Key: key, Value: []byte("v")})
	roles := map[iq.Role]*App{}
	waitForB(b, 60*time.Second, func() bool {
		clear(roles)
		for _, a := range apps {
			if r, err := a.Queries().Replica("counts", p); err == nil {
				if info := r.Info(); info.Lag == 0 && info.Position > 0 {
					roles[info.Role] = a
				}
			}
		}
		return roles[iq.RoleActive] != nil && roles[iq.RoleStandby] != nil
	})
	type sample struct {
		role    iq.Role
		receive bool
		d       time.Duration
	}
	var mu sync.Mutex
	var samples []sample
	sent := sync.Map{} // count -> production time
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for _, role := range []iq.Role{iq.RoleActive, iq.RoleStandby} {
		w, err := iq.NewQuerier(roles[role].Queries()).WatchBytes(ctx, "counts", key, iq.WatchOptions{From: iq.FromNow, Staleness: iq.MaxLag(1 << 30)})
		require.NoError(b, err)
		defer w.Close()
		record := func(u iq.Update, receive bool) {
			at := time.Now()
			n, _ := serde.Int64.Decode(u.Value)
			if t0, ok := sent.Load(n); ok {
				mu.Lock()
				samples = append(samples, sample{role, receive, at.Sub(t0.(time.Time))})
				mu.Unlock()
			}
		}
		wg.Go(func() {
			for {
				u, err := w.Next(ctx)
				if err != nil {
					return
				}
				record(u, false)
			}
		})
		rw, err := iq.NewQuerier(roles[role].Queries()).WatchBytes(ctx, "counts", key, iq.WatchOptions{From: iq.FromNow, Staleness: iq.MaxLag(1 << 30)})
		require.NoError(b, err)
		defer rw.Close()
		rw.Receive(func(u iq.Update, err error) bool {
			if err == nil {
				record(u, true)
			}
			return err == nil
		})
	}
	// One record every 10 ms for 10 s: each commit carries a few, and the
	// latency of a count is that of the record that made it; a hundred
	// commits make a p99.
	count := int64(1)
	b.ResetTimer()
	for range b.N * 1000 {
		count++
		sent.Store(count, time.Now())
		cl.ProduceSync(context.Background(), &kgo.Record{Key: key, Value: []byte("v")})
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(time.Second) // the last commits reach the watchers
	b.StopTimer()
	cancel()
	wg.Wait()
	// The receiving watches may still be handed a count.
	mu.Lock()
	defer mu.Unlock()
	for _, role := range []iq.Role{iq.RoleActive, iq.RoleStandby} {
		for _, receive := range []bool{false, true} {
			var ds []time.Duration
			for _, s := range samples {
				if s.role == role && s.receive == receive {
					ds = append(ds, s.d)
				}
			}
			name := role.String()
			if receive {
				name = "receive-" + name
			}
			require.NotEmpty(b, ds, name)
			slices.Sort(ds)
			b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, name+"-p50-ms")
			b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds())/1000, name+"-p99-ms")
		}
	}
}

// BenchmarkWatchersThroughput runs a word count over 1,000 words on one
// instance, once with no watchers and once with 10,000 (ten per word,
// each read with Next on a goroutine of its own, or, under "receive", each
// receiving its updates in a function: iq.Watch.Receive), and reports the
// throughput ratio in lines (the mean of four alternating pairs, and the
// lowest and highest pair), by the clock and per CPU second of the
// process, the CPU each update delivered cost beyond the unwatched run's,
// and the memory each watcher takes (heap and its reading goroutine's
// stack). The watchers' cost follows the commits, one update per watcher
// each, not the lines: on a machine whose other load slows a run down, a
// run spans more commits and the ratios fall, while the CPU per update
// holds.
func BenchmarkWatchersThroughput(b *testing.B) {
	for _, mode := range []string{"next", "receive"} {
		b.Run(mode, func(b *testing.B) { watchersThroughput(b, mode == "receive") })
	}
}

// wordCountTopology splits each line at spaces and counts the words in
// "counts", through a repartition topic.
func wordCountTopology(t testing.TB) *topology.Topology {
	b := topology.NewBuilder()
	lines := topology.Stream(b, "in", serde.String, serde.String)
	words := topology.FlatMapValues(lines, func(_, line string) []string { return strings.Fields(line) })
	topology.GroupBy(words, func(_, w string) string { return w }, "words", serde.String, serde.String).Count("counts")
	topo, err := b.Build()
	require.NoError(t, err)
	return topo
}

// produceLines sends n lines of wordsPerLine words each, the words taken
// in turn from key0..key(keys-1), and adds them to want.
func produceLines(t testing.TB, cl *kgo.Client, n, keys int, want map[string]int64) {
	const wordsPerLine = 8
	var next int
	for range n {
		var line strings.Builder
		for j := range wordsPerLine {
			k := "key" + strconv.Itoa(next%keys)
			next += 7 // coprime to the key count: every line's words differ
			want[k]++
			if j > 0 {
				line.WriteByte(' ')
			}
			line.WriteString(k)
		}
		cl.Produce(context.Background(), &kgo.Record{Topic: "in", Value: []byte(line.String())}, nil)
	}
	require.NoError(t, cl.Flush(context.Background()))
}

func watchersThroughput(b *testing.B, receive bool) {
	// A run lasts seconds: its end is seen at a commit, so a run of a
	// few commit intervals would be measured to within a large part of
	// one.
	const keys, watchers, lines, pairs = 1000, 10_000, 400_000, 4
	bc, err := startBenchBroker(b, 1)
	require.NoError(b, err)
	defer bc.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(bc.Addrs()...), kgo.DefaultProduceTopic("in"), kgo.ProducerLinger(5*time.Millisecond))
	require.NoError(b, err)
	defer cl.Close()
	// Commits every 100 ms, so that the counts show how far processing
	// got within a tenth of a second.
	app, err := New(wordCountTopology(b), Config{ApplicationID: "tput", Brokers: bc.Addrs(), StateDir: b.TempDir(), NumStreamThreads: 1,
		CommitInterval: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(b, err)
	require.NoError(b, app.Start(context.Background()))
	defer app.Close(context.Background())
	want := map[string]int64{}
	produceLines(b, cl, keys, keys, want)
	countsReach(b, app, want, time.Minute)

	// A run's throughput is taken both by the clock and by the CPU the
	// process spent (lines per CPU second): the machine's other load
	// moves the first a lot, the second little, and with the process
	// using both cores as it does here they agree on what watchers cost.
	type rate struct{ wall, cpu float64 }
	measure := func(n int) rate {
		start, cpu := time.Now(), processCPU()
		produceLines(b, cl, n, keys, want)
		countsReach(b, app, want, 5*time.Minute)
		return rate{float64(n) / time.Since(start).Seconds(), float64(n) / (processCPU() - cpu).Seconds()}
	}
	// A first run, not counted, warms the broker's log, the store and the
	// producer, which would otherwise weigh on the first unwatched run
	// alone.
	_ = measure(lines / 5)
	b.ResetTimer()
	var perWatcher, without, with float64
	var ratios, cpuRatios, perUpdate []float64
	for range b.N {
		// Unwatched and watched runs alternate, so that a neighbour's
		// load on the machine falls on both alike.
		for range pairs {
			alone := measure(lines)

			goruntime.GC()
			var before, after goruntime.MemStats
			goruntime.ReadMemStats(&before)
			q := iq.NewQuerier(app.Queries())
			ctx, cancel := context.WithCancel(context.Background())
			var delivered atomic.Int64
			var wg sync.WaitGroup
			ws := make([]*iq.Watch, 0, watchers)
			for i := range watchers {
				w, err := q.WatchBytes(ctx, "counts", []byte("key"+strconv.Itoa(i%keys)), iq.WatchOptions{From: iq.FromNow, Coalesce: true, Buffer: 16})
				require.NoError(b, err)
				ws = append(ws, w)
				if receive {
					w.Receive(func(_ iq.Update, err error) bool {
						if err == nil {
							delivered.Add(1)
						}
						return err == nil
					})
					continue
				}
				wg.Go(func() {
					for {
						if _, err := w.Next(ctx); err != nil {
							return
						}
						delivered.Add(1)
					}
				})
			}
			goruntime.GC()
			goruntime.ReadMemStats(&after)
			perWatcher = float64(after.HeapAlloc+after.StackInuse-before.HeapAlloc-before.StackInuse) / watchers

			watched := measure(lines)
			cancel()
			wg.Wait()
			for _, w := range ws {
				w.Close()
			}
			require.Positive(b, delivered.Load())
			without += alone.wall / float64(pairs*b.N)
			with += watched.wall / float64(pairs*b.N)
			ratios = append(ratios, watched.wall/alone.wall)
			cpuRatios = append(cpuRatios, watched.cpu/alone.cpu)
			extra := float64(lines)/watched.cpu - float64(lines)/alone.cpu // CPU seconds
			perUpdate = append(perUpdate, extra/float64(delivered.Load())*1e6)
			b.Logf("pair %d: %.0f lines/s unwatched, %.0f watched (%d updates delivered): ratio %.2f; per CPU second %.0f and %.0f: ratio %.2f",
				len(ratios), alone.wall, watched.wall, delivered.Load(), watched.wall/alone.wall, alone.cpu, watched.cpu, watched.cpu/alone.cpu)
		}
	}
	mean := func(rs []float64) float64 {
		m := 0.0
		for _, r := range rs {
			m += r / float64(len(rs))
		}
		return m
	}
	b.ReportMetric(without, "lines/s-unwatched")
	b.ReportMetric(with, "lines/s-watched")
	b.ReportMetric(mean(ratios), "ratio")
	b.ReportMetric(slices.Min(ratios), "ratio-min")
	b.ReportMetric(slices.Max(ratios), "ratio-max")
	b.ReportMetric(mean(cpuRatios), "cpu-ratio")
	b.ReportMetric(slices.Min(cpuRatios), "cpu-ratio-min")
	b.ReportMetric(slices.Max(cpuRatios), "cpu-ratio-max")
	b.ReportMetric(mean(perUpdate), "cpu-us/update")
	b.ReportMetric(perWatcher, "heap+stack-B/watcher")
}

// processCPU is the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

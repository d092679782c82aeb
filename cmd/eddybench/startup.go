package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

const (
	suInput     = "su-text"
	suOutput    = "su-counts"
	suApp       = "bench-startup"
	suBaseGroup = "bench-startup-baseline"
	suLines     = 1000
	suTail      = 100
)

// startTimes is what one start of an instance took: from Start (or, for
// the baseline, from creating the client) to the first input record
// handed to user code, and to the Running state.
type startTimes struct {
	first, running, startCall time.Duration
}

// benchStartup is benchmark (s): a single instance of the word-count
// topology starting with its input already produced, fresh and then again
// on its state directory, against a bare kgo group client joining a new
// group and polling its first record, all on one in-process broker. It
// also times the tail: from the acknowledgement of the last input record
// of a batch produced to a running instance to the counts of that batch
// being readable as committed state. Baseline and Eddy alternate (see
// alternate); each Eddy run is an App with an application ID and state
// directory of its own, so its fresh start finds the whole input so far,
// which every run before it lengthened by two batches of suTail lines.
func benchStartup(ctx context.Context, cfg *config) ([]row, error) {
	fmt.Fprintf(cfg.out, "\n(s) start-up: word count, %d partitions, %d preloaded lines, in-process broker\n", cfg.partitions, suLines)
	addrs, admCl, adm, closeAll, err := startBenchBroker(ctx, int32(cfg.partitions), suInput, suOutput)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	gen := newLineGen(cfg.seed)
	ref := make(map[string]int64)
	produce := func(n int) error {
		p := &producer{cl: admCl}
		var buf []string
		for range n {
			l := gen.line()
			for _, w := range appendWords(buf[:0], l) {
				ref[w]++
			}
			p.send(ctx, &kgo.Record{Topic: suInput, Value: []byte(l)})
		}
		if got, err := p.flush(ctx); err != nil || got != int64(n) {
			return fmt.Errorf("producing input: %d of %d acknowledged: %v", got, n, err)
		}
		return nil
	}
	if err := produce(suLines); err != nil {
		return nil, err
	}

	root, err := os.MkdirTemp("", "eddybench-startup-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	var freshRunning, restartFirst, restartRunning, tails spread
	runs, err := alternate(cfg,
		side{"baseline: first record", func(i int) (float64, error) {
			d, err := baselineFirstRecord(ctx, addrs, fmt.Sprintf("%s-%d", suBaseGroup, i))
			return ms(d), err
		}},
		side{"eddy fresh: Start → first record", func(i int) (float64, error) {
			inst := &startupInstance{cfg: cfg, addrs: addrs, appID: fmt.Sprintf("%s-%d", suApp, i), dir: filepath.Join(root, strconv.Itoa(i))}
			fresh, restart, tail, err := inst.run(ctx, adm, ref, produce)
			if i > 0 {
				freshRunning, restartFirst = append(freshRunning, ms(fresh.running)), append(restartFirst, ms(restart.first))
				restartRunning, tails = append(restartRunning, ms(restart.running)), append(tails, ms(tail))
			}
			return ms(fresh.first), err
		}})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.out, "  baseline = a kgo client in a new consumer group (FetchMaxWait 500ms, reset to start) polling until\n"+
		"             its first record; timed from kgo.NewClient.\n"+
		"  eddy     = runtime App, %d stream thread(s), at-least-once, word count FlatMapValues → GroupBy →\n"+
		"             Count; first record = the first line reaching FlatMapValues, timed from App.Start;\n"+
		"             Running = the StateListener's move to Running. Tail = from the producer's\n"+
		"             acknowledgement of the last of %d lines to every count equal to the reference\n"+
		"             (a Querier's Get) and the group's offsets covering the input and repartition topics.\n",
		cfg.threads, suTail)
	within := func(limit float64) func(spread) bool { return func(s spread) bool { return s.median() <= limit } }
	fresh := infoRow("(s) fresh: Start → first record", "ms", runs[1], runs[0])
	restart := infoRow("(s) restart: Start → first record", "ms", restartFirst, runs[0])
	for _, r := range []*row{&fresh, &restart} {
		r.target, r.hasCheck, r.pass = "≤ 300 ms", true, r.eddy <= 300
	}
	return []row{
		fresh,
		runsRow("(s) fresh: Start → Running", "ms", freshRunning, "info", nil),
		restart,
		runsRow("(s) restart: Start → Running", "ms", restartRunning, "info", nil),
		runsRow("(s) last input → final counts", "ms", tails, "≤ 500 ms", within(500)),
	}, nil
}

// run starts the instance fresh on its own state directory and waits for
// every count of the input so far; then it times the tail, a batch
// produced to the running instance, from its last acknowledgement to its
// counts being committed state; then it closes the App and restarts it on
// its state directory and committed offsets, with a new batch waiting.
func (s *startupInstance) run(ctx context.Context, adm *kadm.Client, ref map[string]int64, produce func(int) error) (fresh, restart startTimes, tail time.Duration, err error) {
	if fresh, err = s.start(ctx); err != nil {
		return fresh, restart, 0, fmt.Errorf("fresh start: %w", err)
	}
	s.cfg.logf("%s fresh: Start returned after %s, first record after %s, Running after %s", s.appID,
		fresh.startCall.Round(time.Millisecond), fresh.first.Round(time.Millisecond), fresh.running.Round(time.Millisecond))
	if err := s.waitCounts(ctx, adm, ref); err != nil {
		return fresh, restart, 0, err
	}
	if err := produce(suTail); err != nil {
		return fresh, restart, 0, err
	}
	acked := time.Now()
	if err := s.waitCounts(ctx, adm, ref); err != nil {
		return fresh, restart, 0, err
	}
	tail = time.Since(acked)
	if err := s.app.Close(ctx); err != nil {
		return fresh, restart, tail, err
	}
	if err := produce(suTail); err != nil {
		return fresh, restart, tail, err
	}
	if restart, err = s.start(ctx); err != nil {
		return fresh, restart, tail, fmt.Errorf("restart: %w", err)
	}
	s.cfg.logf("%s restart: Start returned after %s, first record after %s, Running after %s", s.appID,
		restart.startCall.Round(time.Millisecond), restart.first.Round(time.Millisecond), restart.running.Round(time.Millisecond))
	if err := s.waitCounts(ctx, adm, ref); err != nil {
		return fresh, restart, tail, err
	}
	return fresh, restart, tail, s.app.Close(ctx)
}

// baselineFirstRecord times a bare group consumer from its creation to
// its first polled record.
func baselineFirstRecord(ctx context.Context, addrs []string, group string) (time.Duration, error) {
	start := time.Now()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(addrs...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(suInput),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(500*time.Millisecond),
	)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if err := fs.Err(); err != nil {
			return 0, err
		}
		if fs.NumRecords() > 0 {
			return time.Since(start), nil
		}
	}
}

// startupInstance is the App of benchmark (s), started again on the same
// state directory.
type startupInstance struct {
	cfg   *config
	addrs []string
	appID string
	dir   string
	app   *runtime.App
	seen  atomic.Int64
}

// start builds and starts a new App and waits for its first record and
// for Running.
func (s *startupInstance) start(ctx context.Context) (startTimes, error) {
	var firstAt, runningAt atomic.Int64
	s.seen.Store(0)
	bld := topology.NewBuilder()
	text := topology.Stream(bld, suInput, serde.String, serde.String)
	words := topology.FlatMapValues(text, func(_, line string) []string {
		if s.seen.Add(1) == 1 {
			firstAt.Store(time.Now().UnixNano())
		}
		return appendWords(nil, line)
	})
	topology.GroupBy(words, func(_, w string) string { return w }, "words", serde.String, serde.String).
		Count(wcCountsStore).ToStream().To(suOutput, serde.String, serde.Int64)
	topo, err := bld.Build()
	if err != nil {
		return startTimes{}, err
	}
	app, err := runtime.New(topo, runtime.Config{
		ApplicationID:    s.appID,
		Brokers:          s.addrs,
		StateDir:         s.dir,
		NumStreamThreads: s.cfg.threads,
		Logger:           s.cfg.log,
		StateListener: func(_, to runtime.State) {
			if to == runtime.StateRunning {
				runningAt.CompareAndSwap(0, time.Now().UnixNano())
			}
		},
	})
	if err != nil {
		return startTimes{}, err
	}
	s.app = app
	start := time.Now()
	if err := app.Start(ctx); err != nil {
		return startTimes{}, err
	}
	var t startTimes
	t.startCall = time.Since(start)
	err = waitFor(ctx, time.Millisecond, func() (bool, error) {
		select {
		case <-app.Done():
			return false, fmt.Errorf("app stopped: %v", app.Err())
		default:
		}
		return firstAt.Load() != 0 && runningAt.Load() != 0, nil
	})
	if err != nil {
		app.Close(context.Background())
		return t, err
	}
	t.first = time.Unix(0, firstAt.Load()).Sub(start)
	t.running = time.Unix(0, runningAt.Load()).Sub(start)
	return t, nil
}

// waitCounts waits until the group's committed offsets cover the input and
// the repartition topic and every count in the store equals ref.
func (s *startupInstance) waitCounts(ctx context.Context, adm *kadm.Client, ref map[string]int64) error {
	return waitFor(ctx, 2*time.Millisecond, func() (bool, error) {
		select {
		case <-s.app.Done():
			return false, fmt.Errorf("app stopped: %v", s.app.Err())
		default:
		}
		for _, topic := range []string{suInput, s.appID + "-words-repartition"} {
			if ok, err := caughtUpOrEmpty(ctx, adm, s.appID, topic); !ok || err != nil {
				return false, err
			}
		}
		for w, want := range ref {
			v, found, _, err := activeGet(s.app, wcCountsStore, []byte(w))
			if err != nil || !found {
				return false, nil
			}
			got, err := serde.Int64.Decode(v)
			if err != nil {
				return false, err
			}
			if got != want {
				return false, nil
			}
		}
		return true, nil
	})
}

// caughtUpOrEmpty reports whether the instance's group committed the end
// offset of every partition of topic that holds records: a small input
// leaves some partitions empty, and nothing is committed for those.
func caughtUpOrEmpty(ctx context.Context, adm *kadm.Client, group, topic string) (bool, error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return false, err
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return false, nil
	}
	caughtUp := true
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset == 0 {
			return
		}
		if c, ok := committed.Lookup(topic, o.Partition); !ok || c.At < o.Offset {
			caughtUp = false
		}
	})
	return caughtUp, nil
}

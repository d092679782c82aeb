package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// Names of benchmark (k)'s application.
const (
	klApp        = "killloop"
	klInput      = "kl-text"
	klOutput     = "kl-counts-out"
	klStore      = "kl-counts"
	klPartitions = 6
	klInstances  = 3
)

// klTopology is the word count of (k): lines in, a count per word in
// klStore, every new count out to klOutput.
func klTopology() (*topology.Topology, error) {
	b := topology.NewBuilder()
	text := topology.Stream(b, klInput, serde.String, serde.String)
	words := topology.FlatMapValues(text, func(_, line string) []string { return appendWords(nil, line) })
	topology.GroupBy(words, func(_, w string) string { return w }, "words", serde.String, serde.String).
		Count(klStore).ToStream().To(klOutput, serde.String, serde.Int64)
	return b.Build()
}

// klResult is what one kill loop measured.
type klResult struct {
	guarantee  runtime.ProcessingGuarantee
	static     bool
	kills      int
	words      int64 // words in the acknowledged input
	lost       int64 // counts below the reference, summed over words
	over       int64 // counts above the reference, summed over words
	overWords  int
	overBound  int64         // what the kills' redo windows allow, at-least-once only
	beyond     int           // words over-counted beyond their bound
	longest    time.Duration // longest a task lacked a running active
	longestAt  string
	restarts   []time.Duration // restart → every task running, for restarts the next kill did not interrupt
	interrupts int             // restarts the next kill came before every task ran
	lastAll    time.Duration   // last restart → every task running
}

// benchKillLoop is issue 11's kill loop: three instances (one standby per
// task, the --session-timeout session) count words of a steady input
// while a random instance is killed every 3–8 s without waiting for the
// group, and started again on its state directory 0.2–1.5 s later. It runs
// once under exactly-once and once under at-least-once, each for
// --killloop-duration, and prints records lost, the longest time a task
// lacked a running active, the over-count under at-least-once and the time
// from each restart until every task ran.
func benchKillLoop(ctx context.Context, cfg *config) ([]row, error) {
	var rows []row
	gs := []runtime.ProcessingGuarantee{runtime.ExactlyOnce, runtime.AtLeastOnce}
	if cfg.killLoopOnly != "" {
		g, err := runtime.ParseProcessingGuarantee(cfg.killLoopOnly)
		if err != nil {
			return nil, fmt.Errorf("--killloop-guarantee: %w", err)
		}
		gs = []runtime.ProcessingGuarantee{g}
	}
	for _, g := range gs {
		res, err := runKillLoopBench(ctx, cfg, g)
		if err != nil {
			return rows, fmt.Errorf("%s: %w", g, err)
		}
		res.print(cfg)
		rows = append(rows, res.rows(cfg)...)
	}
	return rows, nil
}

func (r *klResult) print(cfg *config) {
	mode := "dynamic membership"
	if r.static {
		mode = "static membership"
	}
	fmt.Fprintf(cfg.out, "\n(k) kill loop, %s, %s, session timeout %s, %s: %d kills, %d words in\n",
		r.guarantee, mode, cfg.sessionTimeout, cfg.killLoopFor, r.kills, r.words)
	fmt.Fprintf(cfg.out, "  records lost %d; over-count %d in %d words (%.3f%%)", r.lost, r.over, r.overWords, 100*float64(r.over)/float64(max(1, r.words)))
	if r.guarantee == runtime.AtLeastOnce {
		fmt.Fprintf(cfg.out, "; the kills' redo windows allow %d, %d words beyond theirs", r.overBound, r.beyond)
	}
	fmt.Fprintln(cfg.out)
	fmt.Fprintf(cfg.out, "  longest a task lacked a running active: %s (%s; target ≤ 2× session = %s)\n",
		r.longest.Round(time.Millisecond), r.longestAt, 2*cfg.sessionTimeout)
	if len(r.restarts) > 0 {
		s := slices.Sorted(slices.Values(r.restarts))
		fmt.Fprintf(cfg.out, "  restart → every task running: median %s, max %s over %d restarts (%d interrupted by the next kill); after the last restart %s\n",
			s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), len(s), r.interrupts, r.lastAll.Round(time.Millisecond))
	}
	fmt.Fprintf(cfg.out, "  method = in-process Apps killed with App.Kill (network cut first: no commit, no leave-group), restarted\n"+
		"           on their state directories; tasks' states sampled every 50 ms through App.Tasks; counts = last value\n"+
		"           per word in %s read with read-committed isolation, against the acknowledged input.\n", klOutput)
}

func (r *klResult) rows(cfg *config) []row {
	name := "(k) " + r.guarantee.String()
	out := []row{
		{name: name + " records lost", unit: "counts", eddy: float64(r.lost), target: "0", hasCheck: true, pass: r.lost == 0},
		{name: name + " longest lack of an active", unit: "ms", eddy: float64(r.longest.Milliseconds()),
			target: fmt.Sprintf("≤ %d ms", (2 * cfg.sessionTimeout).Milliseconds()), hasCheck: true, pass: r.longest <= 2*cfg.sessionTimeout},
	}
	if r.guarantee == runtime.AtLeastOnce {
		out = append(out, row{name: name + " over-count", unit: "counts", eddy: float64(r.over), base: float64(r.overBound),
			target: "≤ redo windows", hasCheck: true, pass: r.beyond == 0})
	} else {
		out = append(out, row{name: name + " over-count", unit: "counts", eddy: float64(r.over), target: "0", hasCheck: true, pass: r.over == 0})
	}
	return out
}

// klCluster is the three instances of a kill loop and what watches them.
type klCluster struct {
	cfg       *config
	addrs     []string
	dir       string
	guarantee runtime.ProcessingGuarantee
	static    bool

	mu   sync.Mutex
	apps [klInstances]*runtime.App // nil while dead

	// Updated by watch.
	wmu      sync.Mutex
	lacking  map[task.ID]time.Time
	longest  time.Duration
	longestT time.Time
	allSince time.Time // zero while some task lacks a running active
}

func (c *klCluster) start(ctx context.Context, i int) error {
	topo, err := klTopology()
	if err != nil {
		return err
	}
	app, err := runtime.New(topo, runtime.Config{
		ApplicationID:       klApp,
		Brokers:             c.addrs,
		StateDir:            filepath.Join(c.dir, strconv.Itoa(i)),
		NumStandbys:         1,
		SessionTimeout:      c.cfg.sessionTimeout,
		ProcessingGuarantee: c.guarantee,
		StaticMembership:    c.static,
		// The over-count bound reads the repartition topic afterwards.
		RepartitionPurgeInterval: runtime.NoRepartitionPurge,
		Endpoint:                 "127.0.0.1:" + strconv.Itoa(21000+i),
		Logger:                   c.cfg.log.With("instance", i),
	})
	if err != nil {
		return err
	}
	if err := app.Start(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	c.apps[i] = app
	c.mu.Unlock()
	return nil
}

func (c *klCluster) kill(i int) {
	c.mu.Lock()
	app := c.apps[i]
	c.apps[i] = nil
	c.mu.Unlock()
	if app != nil {
		app.Kill()
	}
}

func (c *klCluster) closeAll() {
	c.mu.Lock()
	apps := c.apps
	c.mu.Unlock()
	for _, app := range apps {
		if app != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			app.Close(cctx)
			cancel()
		}
	}
}

// failed returns the error of an instance that stopped on its own.
func (c *klCluster) failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, app := range c.apps {
		if app == nil {
			continue
		}
		select {
		case <-app.Done():
			return fmt.Errorf("instance %d stopped: %v", i, app.Err())
		default:
		}
	}
	return nil
}

// watch samples which tasks have a running active every 50 ms until ctx
// ends.
func (c *klCluster) watch(ctx context.Context, subTopologies int) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		running := make(map[task.ID]bool)
		c.mu.Lock()
		for _, app := range c.apps {
			if app == nil {
				continue
			}
			for _, ti := range app.Tasks() {
				if ti.State == task.Running {
					running[ti.ID] = true
				}
			}
		}
		c.mu.Unlock()
		now := time.Now()
		c.wmu.Lock()
		all := true
		for st := range subTopologies {
			for p := range int32(klPartitions) {
				id := task.ID{SubTopology: st, Partition: p}
				since, lacked := c.lacking[id]
				switch {
				case running[id] && lacked:
					if d := now.Sub(since); d > c.longest {
						c.longest, c.longestT = d, now
					}
					delete(c.lacking, id)
				case !running[id]:
					all = false
					if !lacked {
						c.lacking[id] = now
					}
				}
			}
		}
		switch {
		case !all:
			c.allSince = time.Time{}
		case c.allSince.IsZero():
			c.allSince = now
		}
		c.wmu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// allRunningSince returns since when every task has had a running active.
func (c *klCluster) allRunningSince() (time.Time, bool) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.allSince, !c.allSince.IsZero()
}

func runKillLoopBench(ctx context.Context, cfg *config, g runtime.ProcessingGuarantee) (*klResult, error) {
	b, err := broker.Start(broker.Config{Partitions: klPartitions, GroupMinSessionTimeout: 100 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	defer b.Close()
	addrs := b.Addrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(klInput))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if err := createTopics(ctx, adm, klPartitions, klInput, klOutput); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "eddybench-killloop-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	c := &klCluster{cfg: cfg, addrs: addrs, dir: dir, guarantee: g, static: cfg.killLoopStatic, lacking: make(map[task.ID]time.Time)}
	defer c.closeAll()
	for i := range klInstances {
		if err := c.start(ctx, i); err != nil {
			return nil, err
		}
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go c.watch(watchCtx, 2)
	if err := waitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		_, ok := c.allRunningSince()
		return ok, c.failed()
	}); err != nil {
		return nil, fmt.Errorf("the group never ran every task: %w", err)
	}
	// Only the kill loop counts towards the longest lack.
	c.wmu.Lock()
	c.longest = 0
	c.wmu.Unlock()

	// Steady input: five lines every 20 ms. Only acknowledged lines count.
	var refMu sync.Mutex
	ref := make(map[string]int64)
	var words int64
	var feedErr error
	feedCtx, stopFeed := context.WithCancel(ctx)
	feedDone := make(chan struct{})
	go func() {
		defer close(feedDone)
		gen := newLineGen(cfg.seed)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-feedCtx.Done():
				return
			case <-tick.C:
			}
			recs := make([]*kgo.Record, 5)
			for i := range recs {
				recs[i] = &kgo.Record{Value: []byte(gen.line())}
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				refMu.Lock()
				feedErr = err
				refMu.Unlock()
				return
			}
			refMu.Lock()
			for _, r := range recs {
				for _, w := range appendWords(nil, string(r.Value)) {
					ref[w]++
					words++
				}
			}
			refMu.Unlock()
		}
	}()
	stopFeedOnce := sync.OnceFunc(func() { stopFeed(); <-feedDone })
	defer stopFeedOnce()

	res := &klResult{guarantee: g, static: c.static}
	topics := []string{klInput, klApp + "-words-repartition"}
	var windows []klWindow
	rng := rand.New(rand.NewPCG(cfg.seed, 0x6b111))
	began := time.Now()
	var lastRestart time.Time
	pending := false // a restart whose every-task-running time is not yet known
	for at := began.Add(3 * time.Second); at.Sub(began) < cfg.killLoopFor; at = at.Add(3*time.Second + time.Duration(rng.Int64N(int64(5*time.Second)))) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Until(at)):
		}
		if err := c.failed(); err != nil {
			return nil, err
		}
		if pending {
			if since, ok := c.allRunningSince(); ok && since.After(lastRestart) {
				res.restarts = append(res.restarts, since.Sub(lastRestart))
			} else {
				res.interrupts++
			}
		}
		v := rng.IntN(klInstances)
		var w klWindow
		if g == runtime.AtLeastOnce {
			if w.from, err = committedOffsets(ctx, adm, klApp, topics); err != nil {
				return nil, err
			}
		}
		c.kill(v)
		if g == runtime.AtLeastOnce {
			if w.to, err = endOffsets(ctx, adm, topics); err != nil {
				return nil, err
			}
			windows = append(windows, w)
		}
		time.Sleep(200*time.Millisecond + time.Duration(rng.Int64N(int64(1300*time.Millisecond))))
		lastRestart = time.Now()
		if err := c.start(ctx, v); err != nil {
			return nil, fmt.Errorf("restarting instance %d: %w", v, err)
		}
		pending = true
		res.kills++
		cfg.logf("%5.1fs: killed instance %d", at.Sub(began).Seconds(), v)
	}
	if err := waitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		since, ok := c.allRunningSince()
		if ok && since.After(lastRestart) {
			res.lastAll = since.Sub(lastRestart)
			res.restarts = append(res.restarts, res.lastAll)
		}
		return ok, c.failed()
	}); err != nil {
		return nil, fmt.Errorf("after the last restart: %w", err)
	}
	c.wmu.Lock()
	res.longest, res.longestAt = c.longest, c.longestT.Sub(began).Round(100*time.Millisecond).String()+" into the loop"
	c.wmu.Unlock()
	stopFeedOnce()
	if feedErr != nil {
		return nil, fmt.Errorf("producing: %w", feedErr)
	}
	res.words = words

	// Final counts: the group commits everything it was given, then the
	// output topic's last value per word is what the stores hold.
	settle, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	caughtUp := topics
	if g == runtime.ExactlyOnce {
		// The repartition topic ends with a transaction marker no commit
		// covers; the input's commit is in the same transactions.
		caughtUp = topics[:1]
	}
	cfg.logf("loop over after %s; waiting for the group to commit its input", time.Since(began).Round(time.Millisecond))
	lastReport := time.Now()
	if err := waitFor(settle, 100*time.Millisecond, func() (bool, error) {
		if err := c.failed(); err != nil {
			return false, err
		}
		com, err := committedOffsets(settle, adm, klApp, caughtUp)
		if err != nil {
			return false, nil
		}
		ends, err := endOffsets(settle, adm, caughtUp)
		if err != nil {
			return false, nil
		}
		for _, t := range caughtUp {
			for p, end := range ends[t] {
				if com[t][p] < end {
					if time.Since(lastReport) > 10*time.Second {
						lastReport = time.Now()
						cfg.logf("not yet: committed %v, ends %v", com, ends)
					}
					return false, nil
				}
			}
		}
		return true, nil
	}); err != nil {
		return nil, fmt.Errorf("the group never committed all its input: %w", err)
	}
	out, err := newLatestReader(addrs, klOutput, klPartitions)
	if err != nil {
		return nil, err
	}
	defer out.close()
	var got map[string]int64
	// Under exactly-once the repartition topic's last transactions may
	// still be counted after the input's commit: read until the counts
	// match or stop changing for ten seconds.
	var stable int
	if err := waitFor(settle, time.Second, func() (bool, error) {
		latest, err := out.read(settle)
		if err != nil {
			return false, err
		}
		if maps.Equal(latest, got) {
			stable++
		} else {
			stable = 0
		}
		got = latest
		return maps.Equal(got, ref) || stable >= 10, nil
	}); err != nil {
		return nil, fmt.Errorf("reading the output: %w", err)
	}
	for w, n := range ref {
		switch d := got[w] - n; {
		case d < 0:
			res.lost -= d
		case d > 0:
			res.over += d
			res.overWords++
		}
	}
	for w, n := range got {
		if _, ok := ref[w]; !ok {
			res.over += n
			res.overWords++
		}
	}
	if g == runtime.AtLeastOnce {
		bound, err := klOvercountBound(settle, addrs, windows, topics)
		if err != nil {
			return nil, err
		}
		for _, n := range bound {
			res.overBound += n
		}
		for w, n := range got {
			if n-ref[w] > bound[w] {
				res.beyond++
			}
		}
	}
	return res, nil
}

// klWindow is what one kill may make the application redo under
// at-least-once: the records from the group's committed offsets read just
// before the kill to the ends read just after it (see klOvercountBound).
type klWindow struct{ from, to map[string]map[int32]int64 }

func committedOffsets(ctx context.Context, adm *kadm.Client, group string, topics []string) (map[string]map[int32]int64, error) {
	resp, err := adm.FetchOffsetsForTopics(ctx, group, topics...)
	if err != nil {
		return nil, err
	}
	out := make(map[string]map[int32]int64)
	resp.Each(func(r kadm.OffsetResponse) {
		if out[r.Topic] == nil {
			out[r.Topic] = make(map[int32]int64)
		}
		out[r.Topic][r.Partition] = max(0, r.At)
	})
	return out, nil
}

func endOffsets(ctx context.Context, adm *kadm.Client, topics []string) (map[string]map[int32]int64, error) {
	resp, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, err
	}
	out := make(map[string]map[int32]int64)
	var errs []error
	resp.Each(func(l kadm.ListedOffset) {
		if l.Err != nil {
			errs = append(errs, l.Err)
		}
		if out[l.Topic] == nil {
			out[l.Topic] = make(map[int32]int64)
		}
		out[l.Topic][l.Partition] = l.Offset
	})
	return out, errors.Join(errs...)
}

// klOvercountBound is, per word, how many extra counts the kills can
// explain under at-least-once. A killed instance leaves behind at most the
// work on records past the group's committed offsets (at-least-once
// commits offsets only once stores, changelogs and output hold their
// work), which the next owner does again: a redone input line writes each
// of its words to the repartition topic once more, a redone repartition
// record counts its word once more (a partial count by its value). The committed offsets read before the
// kill are at most those in force at the kill, the ends read after it at
// least as far as the victim read, so each window holds all the kill can
// make the application redo.
func klOvercountBound(ctx context.Context, addrs []string, windows []klWindow, topics []string) (map[string]int64, error) {
	bound := make(map[string]int64)
	if len(windows) == 0 {
		return bound, nil
	}
	last := windows[len(windows)-1].to
	recs := make(map[string]map[int32]map[int64]*kgo.Record)
	for _, t := range topics {
		r, err := readTopic(ctx, addrs, t, last[t])
		if err != nil {
			return nil, err
		}
		recs[t] = r
	}
	for _, w := range windows {
		for i, t := range topics {
			for p, to := range w.to[t] {
				for off := w.from[t][p]; off < to; off++ {
					r := recs[t][p][off]
					switch {
					case r == nil:
					case i == 0:
						for _, word := range appendWords(nil, string(r.Value)) {
							bound[word]++
						}
					default:
						n, err := klRecordWords(r)
						if err != nil {
							return nil, err
						}
						bound[string(r.Key)] += n
					}
				}
			}
		}
	}
	return bound, nil
}

// klRecordWords is how many words a repartition record stands for: one for
// a raw word, the partial count for a combined one.
func klRecordWords(r *kgo.Record) (int64, error) {
	for _, h := range r.Headers {
		if h.Key == topology.CombinedHeader {
			n, err := serde.Int64.Decode(r.Value)
			if err != nil {
				return 0, fmt.Errorf("partial count of %q at %s/%d@%d: %w", r.Key, r.Topic, r.Partition, r.Offset, err)
			}
			return n, nil
		}
	}
	return 1, nil
}

// readTopic reads topic's records below ends, without read-committed
// isolation.
func readTopic(ctx context.Context, addrs []string, topic string, ends map[int32]int64) (map[int32]map[int64]*kgo.Record, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	out := make(map[int32]map[int64]*kgo.Record)
	next := make(map[int32]int64)
	done := func() bool {
		for p, end := range ends {
			if next[p] < end {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reading %s: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			if out[r.Partition] == nil {
				out[r.Partition] = make(map[int64]*kgo.Record)
			}
			out[r.Partition][r.Offset] = r
			next[r.Partition] = max(next[r.Partition], r.Offset+1)
		})
	}
	return out, nil
}

// latestReader follows an output topic with read-committed isolation and
// keeps the last count per word.
type latestReader struct {
	pcl, cl    *kgo.Client
	topic      string
	partitions int32
	latest     map[string]int64
	sentinels  int
}

func newLatestReader(addrs []string, topic string, partitions int32) (*latestReader, error) {
	pcl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		pcl.Close()
		return nil, err
	}
	return &latestReader{pcl: pcl, cl: cl, topic: topic, partitions: partitions, latest: make(map[string]int64)}, nil
}

func (r *latestReader) close() { r.pcl.Close(); r.cl.Close() }

// sentinelPrefix starts the key of the records read marks the end with;
// no word starts with a NUL byte.
const sentinelPrefix = "\x00end-"

// read reads on to the topic's current end and returns a copy of the last
// count per word. The end is a sentinel written to every partition first:
// a read-committed reader sees it only once every transaction before it
// ended.
func (r *latestReader) read(ctx context.Context) (map[string]int64, error) {
	r.sentinels++
	sentinel := sentinelPrefix + strconv.Itoa(r.sentinels)
	for p := range r.partitions {
		if err := r.pcl.ProduceSync(ctx, &kgo.Record{Topic: r.topic, Partition: p, Key: []byte(sentinel)}).FirstErr(); err != nil {
			return nil, err
		}
	}
	seen := make(map[int32]bool)
	for len(seen) < int(r.partitions) {
		fs := r.cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(rec *kgo.Record) {
			k := string(rec.Key)
			switch {
			case k == sentinel:
				seen[rec.Partition] = true
			case strings.HasPrefix(k, sentinelPrefix):
			default:
				if n, err := serde.Int64.Decode(rec.Value); err == nil {
					r.latest[k] = n
				}
			}
		})
	}
	return maps.Clone(r.latest), nil
}

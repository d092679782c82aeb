package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/runtime"
)

// The no-argument demo: an embedded broker and a word-count cluster in this
// process, fed generated text at a steady rate, queried through the routing
// client, with one instance killed hard and restarted while it runs (see
// scenario.go), and every final count checked against the text the broker
// acknowledged.

// defaultSynopsis is the flags of the no-argument demo.
const defaultSynopsis = "[--duration D] [--rate N] [--instances N] [--standbys N] [--no-chaos] [--forever] [--state-dir DIR] [--seed N]"

// Settings of the demo's cluster and scenario.
const (
	demoApp = "wordcount"
	// demoSessionTimeout and demoTransactionTimeout are shorter than the
	// runtime's defaults so that a failover fits a one-minute demo: the
	// first is how long the group waits for a killed instance before
	// moving its tasks; the second, under exactly-once, how long the
	// partitions a killed instance was writing stay blocked by its open
	// transaction.
	demoSessionTimeout     = 3 * time.Second
	demoTransactionTimeout = 3 * time.Second
	// demoProbingInterval is how soon the group checks on warmups (a
	// restarted instance too far behind to take its actives back at
	// once catches up as a warmup first), so that the hand-back shows.
	demoProbingInterval = 5 * time.Second
	// demoLagBound is the staleness the demo's queries accept.
	demoLagBound = 10000
	// queryInterval paces the sample queries (40 a second).
	queryInterval = 25 * time.Millisecond
	// pollInterval is how often the scenario looks at every instance's
	// replicas; it is the precision of the failover times it reports.
	pollInterval = 100 * time.Millisecond
	// refreshInterval is how often the view is redrawn.
	refreshInterval = time.Second
	// caughtUpLag is the changelog lag at which the demo calls a standby
	// caught up: standbys trail the changelog's end by a fetch or two.
	caughtUpLag = 500
	// samplePerPartition is how many words per store partition the
	// sample queries cover, so that every partition's failover shows.
	samplePerPartition = 4
	// answersPerSecond is how many sample answers a second the plain
	// output prints while an instance is down or catching up.
	answersPerSecond = 3
	// settleDeadline bounds each wait of the scenario: the cluster
	// settling, a failover, a restart catching up, the counts settling.
	settleDeadline = 90 * time.Second
	// checkWorkers is how many queries at once the final check makes.
	checkWorkers = 8
)

// demoConfig is the no-argument demo's settings, from its flags.
type demoConfig struct {
	duration  time.Duration
	rate      int
	instances int
	standbys  int
	chaos     bool
	forever   bool
	stateDir  string
	seed      uint64
	logs      logFlags
}

// demoFlags defines the no-argument demo's flags on a new flag set.
func demoFlags(s stdio) (*flag.FlagSet, *demoConfig, *bool) {
	fs := newFlagSet("", defaultSynopsis, s)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: demo %s\n\n"+
			"Runs an embedded broker and a word-count cluster in this process, feeds it text,\n"+
			"kills one instance hard and restarts it while querying through the routing client,\n"+
			"and checks every final count against the text the broker acknowledged.\n\nflags:\n", defaultSynopsis)
		fs.PrintDefaults()
	}
	c := &demoConfig{}
	fs.DurationVar(&c.duration, "duration", 60*time.Second, "how long to run; the scenario's steps scale with it (with --forever: the length of one kill-and-restart round)")
	fs.IntVar(&c.rate, "rate", 500, "lines of text per second")
	fs.IntVar(&c.instances, "instances", 3, "word-count instances")
	fs.IntVar(&c.standbys, "standbys", 1, "standby replicas per task")
	noChaos := fs.Bool("no-chaos", false, "kill nothing: just count and query")
	fs.BoolVar(&c.forever, "forever", false, "run until interrupted, killing and restarting an instance every round")
	fs.StringVar(&c.stateDir, "state-dir", "", "new or empty `DIR` for the instances' state, kept after the run (default: a temporary folder, removed at exit)")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the generated text")
	c.logs.add(fs, "warn")
	return fs, c, noChaos
}

// printDemoFlags writes the no-argument demo's flags and their defaults.
func printDemoFlags(w io.Writer) {
	fs, _, _ := demoFlags(stdio{out: w, err: w})
	fs.PrintDefaults()
}

func parseDemoFlags(args []string, s stdio) (demoConfig, error) {
	fs, cp, noChaos := demoFlags(s)
	if err := parseFlags(fs, args); err != nil {
		return *cp, err
	}
	c := *cp
	c.chaos = !*noChaos
	switch {
	case c.duration <= 0:
		return c, usageErrorf(fs, "--duration must be positive")
	case c.rate <= 0:
		return c, usageErrorf(fs, "--rate must be positive")
	case c.instances < 1 || c.instances > 9:
		return c, usageErrorf(fs, "--instances must be between 1 and 9")
	case c.standbys < 0:
		return c, usageErrorf(fs, "--standbys must not be negative")
	}
	if _, err := c.logs.logger(io.Discard); err != nil {
		return c, usageErrorf(fs, "%v", err)
	}
	return c, nil
}

// runDefault is the no-argument demo.
func runDefault(ctx context.Context, args []string, s stdio) error {
	cfg, err := parseDemoFlags(args, s)
	if err != nil {
		return err
	}
	d, err := newDemo(ctx, cfg, s)
	if err != nil {
		return err
	}
	defer d.close()
	return d.run(ctx)
}

// slot is one instance of the cluster across its incarnations: killing it
// and starting it again keeps its name, state directory and (if it is
// free) its query address.
type slot struct {
	idx  int
	name string
	dir  string
	addr string
	// in is the running incarnation; nil while killed or starting.
	in    *instance
	state instanceState
	// processed reads the records processed by the current incarnation;
	// base counts those of earlier ones.
	processed func() int64
	base      int64
	// lastProcessed and lastAt are the previous refresh's reading, for
	// the rate.
	lastProcessed int64
	lastAt        time.Time
	rate          float64
	// replicas is the last poll's view of the "counts" store partitions.
	replicas []runtime.ReplicaInfo
	// restoreBase is, per partition, the Restored count last seen while
	// the partition ran here as active: restoration counters accumulate
	// over an incarnation, so progress is measured from it.
	restoreBase map[int32]int64
}

func (sl *slot) totalProcessed() int64 {
	if sl.processed == nil {
		return sl.base
	}
	return sl.base + sl.processed()
}

// demo is the running no-argument demo.
type demo struct {
	cfg   demoConfig
	s     stdio
	ansi  bool
	width int
	log   *slog.Logger
	start time.Time

	broker      *broker.Broker
	cleanup     []func()
	slots       []*slot
	feed        *feeder
	stopFeed    context.CancelFunc
	feedDone    chan struct{}
	client      *iq.Client
	queries     *queryStats
	stopQueries context.CancelFunc
	queriesDone chan struct{}

	hostsMu sync.Mutex
	hosts   map[string]string // query endpoint → instance name

	eventsMu sync.Mutex
	events   []event
	// printed counts the events already printed as plain lines.
	printed int
}

func newDemo(ctx context.Context, cfg demoConfig, s stdio) (_ *demo, err error) {
	d := &demo{cfg: cfg, s: s, ansi: isTerminal(s.out), width: terminalWidth(), hosts: make(map[string]string), start: time.Now()}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	// Runtime warnings go to stderr as usual, except under the
	// full-screen view, which they would scribble over: there they become
	// events.
	logOut := s.err
	if d.ansi {
		logOut = &lineWriter{line: func(l string) { d.event("log: " + l) }}
	}
	if d.log, err = cfg.logs.logger(logOut); err != nil {
		return nil, err
	}

	dir := cfg.stateDir
	if dir != "" {
		// The embedded broker starts empty on every run, so state an
		// earlier run left would be ahead of its changelogs.
		if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
			return nil, fmt.Errorf("--state-dir %s is not empty: the demo's broker starts empty on every run, so the state of an earlier run would not match it; give a new or empty folder", dir)
		}
	} else {
		tmp, err := os.MkdirTemp("", "eddy-demo-")
		if err != nil {
			return nil, err
		}
		d.cleanup = append(d.cleanup, func() { os.RemoveAll(tmp) })
		dir = tmp
	}
	d.broker, err = broker.Start(broker.Config{Logger: d.log.With("component", "broker")})
	if err != nil {
		return nil, err
	}
	d.cleanup = append(d.cleanup, d.broker.Close)
	d.event(fmt.Sprintf("embedded broker listening on %s; starting %s (state in %s)",
		strings.Join(d.broker.Addrs(), ","), plural(cfg.instances, "word-count instance", "word-count instances"), dir))
	d.flushEvents()

	// The instances start one after another: each joins the group as it
	// comes up, and the group rebalances as the others arrive.
	for i := range cfg.instances {
		sl := &slot{idx: i, name: fmt.Sprintf("#%d", i+1), dir: filepath.Join(dir, fmt.Sprintf("instance-%d", i+1))}
		d.slots = append(d.slots, sl)
		in, err := d.startSlot(ctx, sl)
		if err != nil {
			return nil, fmt.Errorf("start instance %s: %w", sl.name, err)
		}
		d.up(sl, in)
	}
	var addrs, named []string
	for _, sl := range d.slots {
		addrs = append(addrs, sl.addr)
		named = append(named, sl.name+" on "+sl.addr)
	}
	d.event("instances started, each serving queries over HTTP: " + strings.Join(named, ", "))
	if d.client, err = iq.NewClient(addrs, iq.ClientOptions{}); err != nil {
		return nil, err
	}
	d.queries = newQueryStats()

	cl, err := kgo.NewClient(kgo.SeedBrokers(d.broker.Addrs()...), kgo.DefaultProduceTopic(inputTopic))
	if err != nil {
		return nil, err
	}
	d.feed = &feeder{cl: cl, want: make(map[string]int64), minutes: make(map[string]map[int64]int64), latest: make(map[string]int64)}
	feedCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	d.stopFeed, d.feedDone = stop, make(chan struct{})
	go func() {
		defer close(d.feedDone)
		d.feed.run(feedCtx, cfg.rate, newCorpus(cfg.seed))
	}()
	return d, nil
}

// startSlot starts an incarnation of sl, on its old query address if it
// had one and the address is still free.
func (d *demo) startSlot(ctx context.Context, sl *slot) (*instance, error) {
	opts := instanceOptions{
		brokers:            d.broker.Addrs(),
		stateDir:           sl.dir,
		http:               "127.0.0.1:0",
		app:                demoApp,
		logger:             d.log.With("instance", sl.name),
		standbys:           d.cfg.standbys,
		guarantee:          runtime.ExactlyOnce,
		sessionTimeout:     demoSessionTimeout,
		transactionTimeout: demoTransactionTimeout,
		probingInterval:    demoProbingInterval,
	}
	if sl.addr != "" {
		o := opts
		o.http = sl.addr
		if in, err := startInstance(ctx, o); err == nil {
			return in, nil
		}
	}
	return startInstance(ctx, opts)
}

// up records a new incarnation of sl.
func (d *demo) up(sl *slot, in *instance) {
	sl.in, sl.state, sl.addr = in, stateUp, in.addr
	sl.processed = processedCounter(in.app)
	sl.lastProcessed, sl.lastAt, sl.rate = 0, time.Now(), 0
	sl.replicas = nil
	sl.restoreBase = make(map[int32]int64)
	d.hostsMu.Lock()
	d.hosts[in.addr] = sl.name
	d.hostsMu.Unlock()
}

// kill kills sl's incarnation hard.
func (d *demo) kill(sl *slot) {
	sl.in.kill()
	sl.base += sl.processed()
	sl.in, sl.processed, sl.state, sl.rate, sl.replicas = nil, nil, stateKilled, 0, nil
}

func (d *demo) hostName(addr string) string {
	d.hostsMu.Lock()
	defer d.hostsMu.Unlock()
	if n, ok := d.hosts[addr]; ok {
		return n
	}
	return "?"
}

// close stops everything the demo started: the queries, the feed, the
// instances (cleanly, all at once), the broker, and the temporary folder.
func (d *demo) close() {
	if d.stopQueries != nil {
		d.stopQueries()
		<-d.queriesDone
	}
	if d.client != nil {
		d.client.Close()
	}
	if d.stopFeed != nil {
		d.stopFeed()
		<-d.feedDone
		d.feed.cl.Close()
	}
	var wg sync.WaitGroup
	for _, sl := range d.slots {
		if sl.in != nil {
			wg.Go(func() { sl.in.close() })
		}
	}
	wg.Wait()
	for _, f := range slices.Backward(d.cleanup) {
		f()
	}
	d.cleanup = nil
}

// processedCounter returns a reader of an App's records-processed counter,
// gathered from the runtime's Prometheus collector through a registry of
// its own.
func processedCounter(app *runtime.App) func() int64 {
	reg := prometheus.NewRegistry()
	if err := reg.Register(app.Metrics()); err != nil {
		return func() int64 { return 0 }
	}
	return func() int64 {
		mfs, err := reg.Gather()
		if err != nil {
			return 0
		}
		for _, mf := range mfs {
			if mf.GetName() != "eddy_records_processed_total" {
				continue
			}
			var n float64
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
			return int64(n)
		}
		return 0
	}
}

// countsReplicas lists an App's replicas of the "counts" store, by
// partition.
func countsReplicas(app *runtime.App) []runtime.ReplicaInfo {
	var out []runtime.ReplicaInfo
	for _, ri := range app.Replicas() {
		if ri.Store == countsStore {
			out = append(out, ri)
		}
	}
	slices.SortFunc(out, func(a, b runtime.ReplicaInfo) int { return cmp.Compare(a.Partition, b.Partition) })
	return out
}

// lineWriter calls line for each complete line written to it.
type lineWriter struct {
	mu   sync.Mutex
	buf  []byte
	line func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := slices.Index(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.line(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}

// event records a scenario announcement.
func (d *demo) event(msg string) {
	d.eventsMu.Lock()
	defer d.eventsMu.Unlock()
	d.events = append(d.events, event{at: time.Since(d.start), msg: msg})
}

// flushEvents prints, in plain mode, the events not printed yet.
func (d *demo) flushEvents() {
	if d.ansi {
		return
	}
	d.eventsMu.Lock()
	defer d.eventsMu.Unlock()
	for _, e := range d.events[d.printed:] {
		fmt.Fprintln(d.s.out, plainAnnouncement(e))
	}
	d.printed = len(d.events)
}

func (d *demo) lastEvents(n int) []event {
	d.eventsMu.Lock()
	defer d.eventsMu.Unlock()
	return slices.Clone(d.events[max(0, len(d.events)-n):])
}

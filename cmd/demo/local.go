package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
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
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
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

// feeder produces demo text at a steady rate and keeps the reference count:
// the words of every line the broker acknowledged.
type feeder struct {
	cl *kgo.Client

	mu   sync.Mutex
	want map[string]int64
	// minutes counts the words per minute of the records' times (the
	// producer's clock, the time counts-per-minute windows them by on
	// topics with the default CreateTime), by window start.
	minutes map[string]map[int64]int64
	// latest is each word's latest record time, from which the check
	// tells which minutes have closed.
	latest   map[string]int64
	lines    int64 // acknowledged
	words    int64
	failed   int64
	firstErr error
}

// run produces rate lines a second until ctx ends. Records are produced
// with a context that does not end with ctx: a record cancelled after it
// reached the broker would be counted by the cluster but not by the
// reference. Flush waits for the ones in flight.
func (f *feeder) run(ctx context.Context, rate int, c *corpus) {
	produceCtx := context.WithoutCancel(ctx)
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var sent int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// After a stall, catch up at most a tenth of a second's worth
		// at once, so that the rate stays steady.
		due := min(int64(time.Since(start).Seconds()*float64(rate))-sent, max(int64(rate/10), 1))
		for range due {
			line := c.line()
			ws := words(line)
			f.cl.Produce(produceCtx, &kgo.Record{Value: []byte(line)}, func(r *kgo.Record, err error) { f.acked(r, ws, err) })
			sent++
		}
	}
}

func (f *feeder) acked(r *kgo.Record, ws []string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.failed++
		if f.firstErr == nil {
			f.firstErr = err
		}
		return
	}
	f.lines++
	f.words += int64(len(ws))
	ts := r.Timestamp.UnixMilli()
	start := minuteOf(ts)
	for _, w := range ws {
		f.want[w]++
		f.latest[w] = max(f.latest[w], ts)
		if f.minutes[w] == nil {
			f.minutes[w] = make(map[int64]int64)
		}
		f.minutes[w][start]++
	}
}

// minuteOf is the start of the one-minute window holding ms.
func minuteOf(ms int64) int64 {
	return ms - ms%time.Minute.Milliseconds()
}

// fed returns the lines and words acknowledged so far.
func (f *feeder) fed() (lines, words int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lines, f.words
}

// minuteReference returns every word's reference counts of the minutes
// starting at from or later.
func (f *feeder) minuteReference(from int64) map[string]map[int64]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]map[int64]int64)
	for w, ms := range f.minutes {
		for start, n := range ms {
			if start >= from {
				if out[w] == nil {
					out[w] = make(map[int64]int64)
				}
				out[w][start] = n
			}
		}
	}
	return out
}

// reference returns a copy of the reference count.
func (f *feeder) reference() map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int64, len(f.want))
	for w, n := range f.want {
		out[w] = n
	}
	return out
}

// querySample picks the words the demo keeps querying: the most frequent
// words of the corpus, at most samplePerPartition per partition of the
// store, until every partition has that many, so that every partition's
// failover shows in the answers.
func querySample(vocab []string, partitions int32) []string {
	perPart := make([]int, partitions)
	full := 0
	var out []string
	for _, w := range append([]string{possessive}, vocab...) {
		p := topology.Partition([]byte(w), partitions)
		if perPart[p] == samplePerPartition {
			continue
		}
		out = append(out, w)
		if perPart[p]++; perPart[p] == samplePerPartition {
			if full++; int32(full) == partitions {
				break
			}
		}
	}
	return out
}

// queryStats is what the demo's sample queries saw.
type queryStats struct {
	mu          sync.Mutex
	answered    int64
	refused     int64
	byRole      map[string]int64
	reasons     map[string]int64 // refusals by answer.reasons
	maxLag      int64            // -1 before any answer
	maxLagSeen  answer
	latest      map[string]int64 // word → count last answered
	regressions int64            // answers lower than an earlier one
	recent      []answer         // newest last
	seq         int64            // answers and refusals recorded
	watch       *answerWatch
}

// answerWatch records, after a kill, when each partition the killed
// instance ran was first answered by a new active.
type answerWatch struct {
	victim string // its query endpoint
	since  time.Time
	first  map[int32]time.Time
	parts  map[int32]bool
}

func newQueryStats() *queryStats {
	return &queryStats{byRole: make(map[string]int64), reasons: make(map[string]int64), latest: make(map[string]int64), maxLag: -1}
}

// record adds one query's outcome.
func (q *queryStats) record(a answer, at time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.seq++
	a.seq = q.seq
	q.recent = append(q.recent, a)
	if len(q.recent) > 4*maxRecent {
		q.recent = slices.Clone(q.recent[len(q.recent)-maxRecent:])
	}
	if a.refusal != "" {
		q.refused++
		q.reasons[a.reasons]++
		return
	}
	q.answered++
	q.byRole[a.role]++
	if a.lag > q.maxLag {
		q.maxLag, q.maxLagSeen = a.lag, a
	}
	if old, ok := q.latest[a.word]; ok && a.count < old {
		q.regressions++
	}
	q.latest[a.word] = max(a.count, q.latest[a.word])
	if w := q.watch; w != nil && w.parts[a.partition] && a.role == iq.RoleActive.String() && a.host != w.victim {
		if _, seen := w.first[a.partition]; !seen {
			w.first[a.partition] = at
		}
	}
}

// watchFailover starts recording answers from new actives of parts.
func (q *queryStats) watchFailover(victim string, parts []int32, since time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w := &answerWatch{victim: victim, since: since, first: make(map[int32]time.Time), parts: make(map[int32]bool)}
	for _, p := range parts {
		w.parts[p] = true
	}
	q.watch = w
}

// failoverAnswers returns when the first and the last of the watched
// partitions were first answered by a new active, as offsets from the
// kill; all says whether every watched partition was.
func (q *queryStats) failoverAnswers() (first, last time.Duration, all bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w := q.watch
	if w == nil || len(w.first) == 0 {
		return 0, 0, false
	}
	first = time.Duration(1<<63 - 1)
	for _, t := range w.first {
		first = min(first, t.Sub(w.since))
		last = max(last, t.Sub(w.since))
	}
	return first, last, len(w.first) == len(w.parts)
}

// queryTotals is a consistent reading of the counters.
type queryTotals struct {
	answered, refused, maxLag, regressions int64
	maxLagSeen                             answer
	byRole, reasons                        map[string]int64
}

func (q *queryStats) totals() queryTotals {
	q.mu.Lock()
	defer q.mu.Unlock()
	return queryTotals{answered: q.answered, refused: q.refused, maxLag: q.maxLag, regressions: q.regressions,
		maxLagSeen: q.maxLagSeen, byRole: maps.Clone(q.byRole), reasons: maps.Clone(q.reasons)}
}

// top returns the n words with the highest counts answered so far.
func (q *queryStats) top(n int) []topWord {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]topWord, 0, len(q.latest))
	for w, c := range q.latest {
		out = append(out, topWord{w, c})
	}
	slices.SortFunc(out, func(a, b topWord) int { return cmp.Or(cmp.Compare(b.count, a.count), cmp.Compare(a.word, b.word)) })
	return out[:min(n, len(out))]
}

// lastAnswers returns the newest n outcomes, oldest first.
func (q *queryStats) lastAnswers(n int) []answer {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(q.recent[max(0, len(q.recent)-n):])
}

// startQueries keeps querying the sample words, one after another, through
// the routing client with staleness lag:demoLagBound, until stopped.
func (d *demo) startQueries(ctx context.Context, sample []string) {
	ctx, d.stopQueries = context.WithCancel(context.WithoutCancel(ctx))
	d.queriesDone = make(chan struct{})
	go func() {
		defer close(d.queriesDone)
		tick := time.NewTicker(queryInterval)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			w := sample[i%len(sample)]
			a, err := d.query(ctx, d.client, w, iq.WithStaleness(iq.MaxLag(demoLagBound)))
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				a = answer{word: w, refusal: shortRefusal(err), reasons: refusalReasons(err)}
			}
			now := time.Now()
			a.at = now.Sub(d.start)
			d.queries.record(a, now)
		}
	}()
}

// query asks the cluster for a word's count through a routing client.
func (d *demo) query(ctx context.Context, c *iq.Client, word string, opts ...iq.QueryOption) (answer, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := c.Get(qctx, countsStore, word, []byte(word), opts...)
	if err != nil {
		return answer{}, err
	}
	a := answer{word: word, host: res.Provenance.Host, instance: d.hostName(res.Provenance.Host),
		partition: res.Provenance.Partition, role: res.Provenance.Role.String(), lag: res.Provenance.Lag}
	if res.Found {
		if err := json.Unmarshal(res.Value, &a.count); err != nil {
			return answer{}, fmt.Errorf("decode the count of %q: %w", word, err)
		}
	}
	return a, nil
}

// queryMinutes asks the cluster for a word's counts of the minutes
// starting at from or later, by window start.
func (d *demo) queryMinutes(ctx context.Context, c *iq.Client, word string, from int64) (map[int64]int64, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := c.WindowFetch(qctx, minuteStore, word, []byte(word), from, iq.MaxTime)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]int64, len(res.Windows))
	for _, w := range res.Windows {
		var n int64
		if err := json.Unmarshal(w.Value, &n); err != nil {
			return nil, fmt.Errorf("decode the count of %q in the minute from %d: %w", word, w.Start, err)
		}
		out[w.Start] = n
	}
	return out, nil
}

// minuteList renders counts per minute as "[15:04 n, ...]", oldest first.
func minuteList(m map[int64]int64) string {
	var parts []string
	for _, start := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", time.UnixMilli(start).UTC().Format("15:04"), m[start]))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// shortRefusal says in a few words why a query got no answer.
func shortRefusal(err error) string {
	var ue *iq.UnavailableError
	if errors.As(err, &ue) {
		msg := "no replica could answer"
		if ue.Partition >= 0 {
			msg = fmt.Sprintf("no replica of partition %d could answer", ue.Partition)
		}
		return msg + " (" + refusalReasons(err) + ")"
	}
	msg := err.Error()
	if len(msg) > 80 {
		msg = msg[:80] + "…"
	}
	return msg
}

// refusalReasons lists the kinds of refusal behind a failed query: each
// replica's the client tried, or the error's own.
func refusalReasons(err error) string {
	kind := func(err error) string {
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return "timed out"
		case errors.Is(err, iq.ErrTooStale):
			return "too stale"
		case errors.Is(err, iq.ErrBehind):
			return "behind a position already read"
		case errors.Is(err, iq.ErrRebalancing):
			return "rebalancing"
		case errors.Is(err, iq.ErrNotHostedHere):
			return "not hosted"
		case errors.Is(err, iq.ErrNotRunning):
			return "not running"
		case errors.Is(err, iq.ErrNotAvailable):
			return "no replica"
		}
		return "unreachable"
	}
	var ue *iq.UnavailableError
	if !errors.As(err, &ue) || len(ue.Tried) == 0 {
		return kind(err)
	}
	var list []string
	for _, a := range ue.Tried {
		if k := kind(a.Err); !slices.Contains(list, k) {
			list = append(list, k)
		}
	}
	return strings.Join(list, ", ")
}

// checkCounts queries every word of want through a routing client, from
// running actives only, until each count equals want, and each word's
// counts per minute (the windows of counts-per-minute starting at from or
// later) equal wantMin, or ctx ends; it returns the words that still
// differ. progress reports how many words match so far.
//
// The check has a client of its own, without monotonic reads: the sample
// queries' client remembers positions read from standbys, and under
// exactly-once a standby's position counts the last commit marker while
// its active's does not, so that client would find an idle active
// forever "behind" what it read.
func (d *demo) checkCounts(ctx context.Context, want map[string]int64, wantMin map[string]map[int64]int64, from int64, progress func(exact int)) []string {
	var addrs []string
	for _, sl := range d.slots {
		addrs = append(addrs, sl.addr)
	}
	c, err := iq.NewClient(addrs, iq.ClientOptions{DisableMonotonic: true})
	if err != nil {
		return []string{err.Error()}
	}
	defer c.Close()
	pending := slices.Sorted(func(yield func(string) bool) {
		for w := range want {
			if !yield(w) {
				return
			}
		}
	})
	diffs := make(map[string]string)
	for {
		var mu sync.Mutex
		var next []string
		work := make(chan string)
		var wg sync.WaitGroup
		for range checkWorkers {
			wg.Go(func() {
				for w := range work {
					a, err := d.query(ctx, c, w)
					var got map[int64]int64
					if err == nil && a.count == want[w] {
						got, err = d.queryMinutes(ctx, c, w, from)
					}
					mu.Lock()
					switch {
					case err != nil:
						diffs[w] = fmt.Sprintf("%s: %s", w, shortRefusal(err))
						next = append(next, w)
					case a.count != want[w]:
						diffs[w] = fmt.Sprintf("%s: counted %d, produced %d", w, a.count, want[w])
						next = append(next, w)
					case !maps.Equal(got, wantMin[w]):
						diffs[w] = fmt.Sprintf("%s: counted per minute %s, produced %s", w, minuteList(got), minuteList(wantMin[w]))
						next = append(next, w)
					default:
						delete(diffs, w)
					}
					mu.Unlock()
				}
			})
		}
		for _, w := range pending {
			work <- w
		}
		close(work)
		wg.Wait()
		progress(len(want) - len(next))
		if len(next) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			out := make([]string, 0, len(diffs))
			for _, w := range next {
				out = append(out, diffs[w])
			}
			slices.Sort(out)
			return out
		case <-time.After(500 * time.Millisecond):
		}
		slices.Sort(next)
		pending = next
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

// lookup reads a word's count from an instance's running active of the
// word's partition; -1 when the word is not there.
func lookup(in *instance, word string) (int64, error) {
	k, _ := serde.String.Encode(word)
	v, found, _, err := activeGet(in.app, countsStore, k)
	if err != nil || !found {
		return -1, err
	}
	return serde.Int64.Decode(v)
}

// activeGet reads a key through the query path under the default bound, as
// an application does: from the running active of its partition on app.
func activeGet(app *runtime.App, store string, key []byte) (value []byte, found bool, partition int32, err error) {
	res, err := iq.NewQuerier(app.Queries()).GetBytes(context.Background(), store, key)
	return res.Value, res.Found, res.Provenance.Partition, err
}

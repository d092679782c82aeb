// Command eddybench measures Eddy against bare baselines and prints the
// figures the core runtime is held to, as ratios measured in one run:
//
//	(a) word-count throughput, Eddy vs a bare franz-go consume→produce loop
//	    over the same input on the same embedded broker (target ≥ 1.0×
//	    combining before the repartition with topology.WithCombining, as
//	    (a) runs by default; ≥ 0.6× with --combine=false, every word
//	    crossing the repartition topic as in Kafka Streams);
//	(b) restoration rate from a changelog, runtime.RestoreStore into a badger
//	    store vs a bare badger WriteBatch of the same records (target ≥ 0.8×),
//	    and, for information, a whole App restoring a wiped state directory;
//	(c) peak RSS (VmHWM) of one instance holding 12 tasks and 1,000,000
//	    distinct keys, with the broker in a separate process (target ≤ 512 MiB),
//	    broken down by kind of mapping (Go heap, badger tables, memtable
//	    logs) with the Go heap's live high-water mark and badger's table,
//	    index and bloom-filter sizes;
//	(d) failover: from the hard stop of the instance holding a partition's
//	    active to the first record processed on that partition by the new
//	    active (target ≤ session timeout + 1 s), and the records it restored
//	    (target ≤ the standby's lag at the stop);
//	(e) with (a): exactly-once word-count throughput against at-least-once
//	    (target ≥ 0.7×);
//	(f) restart after a crash under exactly-once: records restored against
//	    records in the changelog (target: only the tail), and the time from
//	    the restart to every task running, with and without static
//	    membership (target ≤ 3 s with it);
//	(g) queries under age:5s through the hard stop of each of three
//	    instances in turn: answers correct (target 100%) and queries
//	    answered (target ≥ 99.9%);
//	(h) local point-query p99 while a rebalance moves tasks against the
//	    steady cluster's (target ≤ 2×);
//	(m) high-cardinality counting (not run by default): --keys distinct keys,
//	    one record each, counted by an App into badger stores, against a
//	    bare consume→produce loop over the same records (target ≥ 0.35×);
//	(w) windows (not run by default): a tumbling-window count against the
//	    key-value count over the same input (target ≥ 0.7×); restoring a
//	    window store against a bare badger WriteBatch (target ≥ 0.8×); disk
//	    and Go heap of a window store streamed through for 10× its
//	    retention (target: flat after the first retention period);
//	(j) stream–table join (not run by default): orders joined with a
//	    table of customers against the key-value count of the same orders
//	    (target ≥ 0.7×);
//	(r) global-table restoration (not run by default): App.Start restoring
//	    a global table of --records records over 4 partitions vs a bare
//	    badger WriteBatch of the same records (target ≥ 0.8×);
//	(t) thousands of tasks (not run by default): for each count of
//	    --task-ladder, one instance with two threads holding that many
//	    tasks of a count, one store each: start to all tasks running, cold
//	    and on a restart with state, peak and idle RSS, descriptors,
//	    goroutines, idle CPU and close (targets at 2,048 tasks: restart
//	    ≤ 5 s, peak RSS ≤ 1 GiB, ≤ 1,000 fds, idle CPU ≤ 5% of a core,
//	    close ≤ 3 s);
//	(k) kill loop (not run by default): three instances, a random one
//	    killed every 3–8 s without waiting for the group, for
//	    --killloop-duration under each guarantee; records lost (target 0),
//	    the longest a task lacked a running active (target ≤ 2× session
//	    timeout), over-count under at-least-once.
//
// Usage:
//
//	eddybench [--only a,b,c] [--runs N] [--lines N] [--records N] [--keys N] [--report FILE] [flags]
//
// Every benchmark that holds Eddy to a baseline runs each side once as a
// warm-up whose figure is dropped, then the sides in turn --runs times
// (3 by default), so that load from elsewhere on a shared machine falls on
// both alike. Each side's figure is the median of its runs and its spread
// their range; a ratio is Eddy's median over the baseline's median.
// Benchmarks without a baseline ((c), (d), (f)) repeat the same way and
// report their median and spread. (g), (k) and (w3) run once: they count
// failures or watch growth over one long run rather than time a figure.
// (t) runs --runs times without a warm-up: each run is processes of its
// own, and one of thousands of tasks takes minutes.
//
// --report BENCHMARKS.md writes the run's table, with the machine, its load,
// the Go version and the commit it ran on, as the repository's
// BENCHMARKS.md: the latest run only, history being git's.
//
// Each benchmark prints what exactly it times next to its figures. The
// subcommands "broker", "rss-instance" and "tasks-instance" are the child
// processes of (c) and (t); they are not meant to be run by hand.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/eddystreams/eddy/iq"
	eddyrt "github.com/eddystreams/eddy/runtime"
)

// config holds the flags of a benchmark run.
type config struct {
	only           map[string]bool
	runs           int
	lines          int
	partitions     int
	threads        int
	maxPoll        int
	records        int
	keys           int
	windowRecords  int
	corpus         string
	combine        bool
	tasks          int
	taskLadder     []int
	taskIdle       time.Duration
	fetchPartBytes int
	restoreBatch   int
	e2e            bool
	seed           uint64
	profileDir     string
	sessionTimeout time.Duration
	killLoopFor    time.Duration
	killLoopStatic bool
	killLoopOnly   string
	verbose        bool
	out            io.Writer
	log            *slog.Logger

	// layout is the store layout of Eddy's instances in (a), (b), (c) and (m);
	// taskLayouts those (t) measures in turn.
	layout      eddyrt.StoreLayout
	taskLayouts []eddyrt.StoreLayout
	// taskPair adds to (t) two instances with a standby of every task.
	taskPair bool
}

func (c *config) want(name string) bool { return len(c.only) == 0 || c.only[name] }

// logf prints a progress line; figures go to the final table.
func (c *config) logf(format string, args ...any) {
	fmt.Fprintf(c.out, "  · "+format+"\n", args...)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "eddybench:", err)
		}
		os.Exit(1)
	}
}

// run dispatches to a child-process subcommand or runs the benchmarks.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "broker":
			return runBrokerChild(ctx, args[1:], stdin, stdout)
		case "rss-instance":
			return runRSSInstance(ctx, args[1:], stdin, stdout, stderr)
		case "tasks-instance":
			return runTasksInstance(ctx, args[1:], stdin, stdout, stderr)
		}
	}
	fs := flag.NewFlagSet("eddybench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	only := fs.String("only", "a,b,c,d,f", "comma-separated benchmarks to run: a (word count, with e: exactly-once vs at-least-once), b (restore), c (peak RSS), d (failover), f (restart after a crash under exactly-once), g (query availability through kills), h (query p99 during a rebalance), j (stream–table join vs key-value count), k (kill loop, minutes long), m (high-cardinality count vs a bare loop), r (global-table restore), s (start-up latency), t (thousands of tasks on one instance: start, memory, descriptors, idle CPU, close), w (windows: windowed vs key-value count, window-store restore, window-store disk and heap over 10 retentions)")
	cfg := &config{out: stdout}
	// Eddy's counts become final at a commit (every second), so short runs
	// mostly measure the wait for the last one.
	fs.IntVar(&cfg.runs, "runs", 3, "measured runs of each side, alternating with the other side's, after one dropped warm-up per side")
	fs.IntVar(&cfg.lines, "lines", 2_000_000, "(a) input lines for word count")
	fs.IntVar(&cfg.partitions, "partitions", 6, "(a) partitions of the input, repartition and output topics")
	// One stream thread per core is how an instance is meant to be run; the
	// baseline's client spreads its own work over the cores too.
	fs.IntVar(&cfg.threads, "threads", runtime.NumCPU(), "(a, m) Eddy stream threads, one per core by default")
	fs.IntVar(&cfg.maxPoll, "max-poll-records", 0, "(a) experiment: runtime.Config.MaxPollRecords; 0 keeps the default")
	fs.IntVar(&cfg.records, "records", 1_000_000, "(b, r) changelog (global topic) records to restore")
	fs.BoolVar(&cfg.e2e, "e2e", true, "(b) also time a whole App restoring a wiped state directory")
	fs.IntVar(&cfg.windowRecords, "window-records", 1_000_000, "(w) input records of the windowed count, changelog records of the window-store restore, records streamed through the window store")
	fs.IntVar(&cfg.keys, "keys", 1_000_000, "(c, m) distinct keys held by the instance")
	fs.IntVar(&cfg.tasks, "tasks", 12, "(b e2e, c, m) tasks, i.e. partitions of the input topic")
	fs.IntVar(&cfg.fetchPartBytes, "fetch-partition-bytes", 0, "(c) experiment: give the instance's clients kgo.FetchMaxPartitionBytes(`N`); 0 keeps the runtime's choice")
	fs.IntVar(&cfg.restoreBatch, "restore-batch", 0, "(b) experiment: runtime.RestoreConfig.MaxBatchRecords for the restoring side; 0 keeps the default")
	ladder := fs.String("task-ladder", "64,256,1024,2048", "(t) comma-separated task counts, each measured in turn")
	layout := fs.String("store-layout", "shared", "(a, b, c, m) the instances' Config.StoreLayout: shared or per-store")
	taskLayouts := fs.String("task-layouts", "shared", "(t) comma-separated store layouts (shared, per-store), each measured in turn at every task count")
	fs.BoolVar(&cfg.taskPair, "task-pair", false, "(t) also run two instances with NumStandbys 1 at each task count and measure their idle CPU (target ≤ 10% of a core each at 2,048 tasks)")
	fs.DurationVar(&cfg.taskIdle, "task-idle", 5*time.Second, "(t) how long an idle instance's CPU time is measured over")
	seed := fs.Uint64("seed", 1, "(a) corpus seed")
	fs.StringVar(&cfg.corpus, "corpus", "", "(a) read the word-count input from this text `FILE` (one record per non-blank line) instead of generating --lines lines")
	fs.BoolVar(&cfg.combine, "combine", true, "(a) count with topology.WithCombining: partial counts go through the repartition topic; with --combine=false every word does, as in Kafka Streams")
	fs.DurationVar(&cfg.sessionTimeout, "session-timeout", 3*time.Second, "(d, g, h, k) group session timeout of the instances")
	fs.DurationVar(&cfg.killLoopFor, "killloop-duration", 5*time.Minute, "(k) how long instances are killed, under each guarantee")
	fs.BoolVar(&cfg.killLoopStatic, "killloop-static", false, "(k) instances are static group members")
	fs.StringVar(&cfg.killLoopOnly, "killloop-guarantee", "", "(k) run only under this guarantee (exactly-once or at-least-once); both by default")
	fs.StringVar(&cfg.profileDir, "profile", "", "write CPU profiles of the timed phases into this `DIR`")
	fs.BoolVar(&cfg.verbose, "v", false, "log the runtime's info messages to stderr")
	timeout := fs.Duration("timeout", 30*time.Minute, "give up after this long")
	report := fs.String("report", "", "also write the run's figures, machine and commit as Markdown to `FILE` (BENCHMARKS.md), replacing it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cfg.seed = *seed
	if cfg.corpus != "" {
		n, err := countCorpusLines(cfg.corpus)
		if err != nil {
			return err
		}
		cfg.lines = n
	}
	cfg.only = make(map[string]bool)
	for _, s := range strings.Split(*only, ",") {
		s = strings.TrimSpace(s)
		switch s {
		case "a", "b", "c", "d", "f", "g", "h", "j", "k", "m", "r", "s", "t", "w":
			cfg.only[s] = true
		case "":
		default:
			return fmt.Errorf("--only: unknown benchmark %q (want a, b, c, d, f, g, h, j, k, m, r, s, t or w)", s)
		}
	}
	for _, s := range strings.Split(*ladder, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("--task-ladder: %q is not a positive task count", s)
		}
		cfg.taskLadder = append(cfg.taskLadder, n)
	}
	var err error
	if cfg.layout, err = eddyrt.ParseStoreLayout(*layout); err != nil {
		return fmt.Errorf("--store-layout: %w", err)
	}
	for _, s := range strings.Split(*taskLayouts, ",") {
		l, err := eddyrt.ParseStoreLayout(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("--task-layouts: %w", err)
		}
		cfg.taskLayouts = append(cfg.taskLayouts, l)
	}
	if cfg.taskIdle <= 0 {
		return errors.New("--task-idle must be positive")
	}
	if cfg.killLoopFor <= 0 {
		return errors.New("--killloop-duration must be positive")
	}
	if cfg.runs < 1 || cfg.lines < 1 || cfg.records < 1 || cfg.keys < 1 || cfg.windowRecords < 1 || cfg.partitions < 1 || cfg.tasks < 1 || cfg.threads < 1 {
		return errors.New("--runs, --lines, --records, --keys, --window-records, --partitions, --tasks and --threads must be positive")
	}
	level := slog.LevelWarn
	if cfg.verbose {
		level = slog.LevelInfo
	}
	cfg.log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if cfg.profileDir != "" {
		if err := os.MkdirAll(cfg.profileDir, 0o755); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	info := newRunInfo(args)

	fmt.Fprintf(stdout, "eddybench: %s %s/%s, GOMAXPROCS=%d, %d CPUs\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.NumCPU())
	var rows []row
	var errs []error
	for _, b := range []struct {
		name string
		fn   func(context.Context, *config) ([]row, error)
	}{{"a", benchWordCount}, {"b", benchRestore}, {"c", benchRSS}, {"d", benchFailover}, {"f", benchEOSCrash},
		{"g", benchAvailability}, {"h", benchRebalanceLatency}, {"m", benchHighCardinality}, {"k", benchKillLoop}, {"r", benchGlobalRestore}, {"s", benchStartup}, {"t", benchTasks}, {"w", benchWindows}, {"j", benchJoin}} {
		if !cfg.want(b.name) {
			continue
		}
		start := time.Now()
		r, err := b.fn(ctx, cfg)
		rows = append(rows, r...)
		if err != nil {
			errs = append(errs, fmt.Errorf("(%s): %w", b.name, err))
			fmt.Fprintf(stdout, "  ! (%s) failed: %v\n", b.name, err)
		}
		fmt.Fprintf(stdout, "  (%s) took %s\n", b.name, time.Since(start).Round(100*time.Millisecond))
		// Each benchmark leaves garbage (a whole broker's records for
		// (a) and (b)); collect it so that the next starts from the same
		// place.
		runtime.GC()
	}
	printTable(stdout, rows)
	if *report != "" {
		info.took = time.Since(info.start)
		var buf strings.Builder
		if err := writeReport(&buf, info, rows, errs); err != nil {
			return err
		}
		if err := os.WriteFile(*report, []byte(buf.String()), 0o644); err != nil {
			return fmt.Errorf("--report: %w", err)
		}
		fmt.Fprintf(stdout, "report written to %s\n", *report)
	}
	return errors.Join(errs...)
}

// row is one line of the summary table.
type row struct {
	name     string
	unit     string
	eddy     float64
	base     float64 // 0: no baseline
	target   string
	pass     bool
	hasCheck bool
	// eddyRuns and baseRuns are the figures of each side's measured runs
	// where it ran more than once; eddy and base are then their medians.
	eddyRuns, baseRuns spread
}

// ratio is the table's ratio cell: Eddy's median over the baseline's.
func (r row) ratio() string {
	if r.base <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f×", r.eddy/r.base)
}

// verdict is the table's verdict cell.
func (r row) verdict() string {
	switch {
	case !r.hasCheck:
		return "-"
	case r.pass:
		return "ok"
	}
	return "FAIL"
}

// spreads are the table's spread cells of both sides.
func (r row) spreads() (eddy, base string) {
	eddy, base = r.eddyRuns.String(), "-"
	if len(r.eddyRuns) == 0 {
		eddy = "one run"
	}
	if r.base > 0 {
		base = r.baseRuns.String()
		if len(r.baseRuns) == 0 {
			base = "one run"
		}
	}
	return eddy, base
}

func printTable(w io.Writer, rows []row) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "benchmark\t unit\t eddy\t eddy spread\t baseline\t baseline spread\t ratio\t target\t verdict\t")
	for _, r := range rows {
		base := "-"
		if r.base > 0 {
			base = fmtNum(r.base)
		}
		es, bs := r.spreads()
		fmt.Fprintf(tw, "%s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t\n", r.name, r.unit, fmtNum(r.eddy), es, base, bs, r.ratio(), r.target, r.verdict())
	}
	tw.Flush()
	fmt.Fprintln(w, "eddy and baseline are medians of their runs; ratio = eddy's median / baseline's median.")
}

// fmtNum prints figures with thousands separators and no false precision.
func fmtNum(v float64) string {
	if v < 100 {
		return fmt.Sprintf("%.1f", v)
	}
	s := fmt.Sprintf("%.0f", v)
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// ratioRow builds a row of Eddy's runs against its baseline's, checked
// against a minimum ratio of their medians.
func ratioRow(name, unit string, eddy, base spread, min float64) row {
	r := infoRow(name, unit, eddy, base)
	r.target, r.hasCheck, r.pass = "≥ "+fmtRatio(min)+"×", true, r.base > 0 && r.eddy/r.base >= min
	return r
}

// fmtRatio prints a target ratio with as many decimals as it has, at least
// one: 0.35 is not 0.3.
func fmtRatio(v float64) string {
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

// infoRow builds an unchecked row of one side's runs against another's.
func infoRow(name, unit string, eddy, base spread) row {
	return row{name: name, unit: unit, eddy: eddy.median(), base: base.median(), target: "info", eddyRuns: eddy, baseRuns: base}
}

// runsRow builds a row of a figure with no baseline, the median of its
// runs, checked by pass if it is not nil.
func runsRow(name, unit string, runs spread, target string, pass func(spread) bool) row {
	r := row{name: name, unit: unit, eddy: runs.median(), target: target, eddyRuns: runs}
	if pass != nil {
		r.hasCheck, r.pass = true, pass(runs)
	}
	return r
}

// rate is events per second over d.
func rate(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// waitFor polls cond every interval until it reports true, fails, or ctx
// ends.
func waitFor(ctx context.Context, interval time.Duration, cond func() (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// activeGet reads a key through the query path under the default bound, as
// an application does: from the running active of its partition on app.
func activeGet(app *eddyrt.App, store string, key []byte) (value []byte, found bool, partition int32, err error) {
	res, err := iq.NewQuerier(app.Queries()).GetBytes(context.Background(), store, key)
	return res.Value, res.Found, res.Provenance.Partition, err
}

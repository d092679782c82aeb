package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	eddyrt "github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

const (
	tkTopic = "bench-tasks-in"
	tkStore = "counts"
	// tkKeysPerTask is how many distinct keys each task counts on
	// average: enough that nearly every store holds state, few enough
	// that the figures are the stores' fixed cost.
	tkKeysPerTask = 4
	// tkThreads is the setting: one instance, two stream threads.
	tkThreads = 2
)

// Targets of benchmark (t) at tkTargetTasks tasks.
const (
	tkTargetTasks      = 2048
	tkTargetIdleCPU    = 5.0  // % of one core
	tkTargetRestart    = 5000 // ms, start→all running on a restart with state
	tkTargetPeakRSS    = 1024 // MiB
	tkTargetFDs        = 1000
	tkTargetCloseMilli = 3000
	// tkTargetPairIdleCPU is each instance's, two of them holding a
	// standby of every task (--task-pair).
	tkTargetPairIdleCPU = 10.0
)

// tkReport is what the tasks-instance child prints at each phase; each
// phase fills its own fields.
type tkReport struct {
	Phase string `json:"phase"`
	// Phase "running".
	StartCallMs float64 `json:"start_call_ms,omitempty"`
	RunningMs   float64 `json:"running_ms,omitempty"`
	Tasks       int     `json:"tasks,omitempty"`
	Restored    int64   `json:"restored,omitempty"`
	// StartPeakMiB is VmHWM once all tasks run: the start's share of the
	// peak.
	StartPeakMiB float64 `json:"start_peak_mib,omitempty"`
	// Phase "idle": measured after the parent saw every input offset
	// committed.
	IdleCPU    float64 `json:"idle_cpu_pct,omitempty"`
	IdleRSSMiB float64 `json:"idle_rss_mib,omitempty"`
	FDs        int     `json:"fds,omitempty"`
	Goroutines int     `json:"goroutines,omitempty"`
	Maps       int     `json:"maps,omitempty"`
	// Phase "closed".
	CloseMs    float64 `json:"close_ms,omitempty"`
	PeakRSSMiB float64 `json:"peak_rss_mib,omitempty"`
	Error      string  `json:"error,omitempty"`
}

// tkFigures are the figures of one run of (t): a cold start and a restart
// on the state it left.
type tkFigures struct {
	cold, restart tkReport // each merged over its phases
}

// benchTasks is benchmark (t): for each task count of --task-ladder, one
// instance (a child process, the broker in another) with two stream
// threads counts Stream → GroupByKey → Count over that many partitions,
// one badger store per task. Each run starts the instance cold on an
// empty state directory, measures it idle once its group committed every
// input offset, closes it, then starts it again on that state directory
// with a little new input and measures the same. Runs repeat --runs
// times, each with an application ID and state directory of its own, on
// one broker per task count.
func benchTasks(ctx context.Context, cfg *config) ([]row, error) {
	var rows []row
	for _, n := range cfg.taskLadder {
		for _, layout := range cfg.taskLayouts {
			r, err := benchTasksAt(ctx, cfg, n, layout)
			rows = append(rows, r...)
			if err != nil {
				return rows, fmt.Errorf("%d tasks, %s layout: %w", n, layout, err)
			}
		}
	}
	return rows, nil
}

func benchTasksAt(ctx context.Context, cfg *config, n int, layout eddyrt.StoreLayout) ([]row, error) {
	fmt.Fprintf(cfg.out, "\n(t) %d tasks of a count on one instance, %d threads, %s store layout, broker in a child process\n", n, tkThreads, layout)
	bro, err := startChild(ctx, "broker", "--partitions", strconv.Itoa(n))
	if err != nil {
		return nil, fmt.Errorf("broker child: %w", err)
	}
	defer bro.stop()
	addr, err := bro.readLine()
	if err != nil {
		return nil, fmt.Errorf("broker child: %w", err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if err := createTopics(ctx, adm, int32(n), tkTopic); err != nil {
		return nil, err
	}
	next := 0
	produce := func(k int) error {
		p := &producer{cl: cl}
		val := []byte("x")
		for range k {
			p.send(ctx, &kgo.Record{Topic: tkTopic, Key: benchKey(next % (n * tkKeysPerTask)), Value: val})
			next++
		}
		if acked, err := p.flush(ctx); err != nil || acked != int64(k) {
			return fmt.Errorf("producing input: %d of %d acknowledged: %v", acked, k, err)
		}
		return nil
	}
	if err := produce(n * tkKeysPerTask); err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp("", "eddybench-tasks-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)

	var all []tkFigures
	run := func(i int) (float64, error) {
		appID := fmt.Sprintf("bench-tasks-%d-%s-%d", n, layout, i)
		dir := filepath.Join(root, strconv.Itoa(i))
		var f tkFigures
		var err error
		if f.cold, err = tkInstanceRun(ctx, cfg, adm, addr, appID, dir, n, layout, fmt.Sprintf("tasks-%d-cold", n)); err != nil {
			return 0, fmt.Errorf("cold: %w", err)
		}
		if err := produce(n); err != nil {
			return 0, err
		}
		if f.restart, err = tkInstanceRun(ctx, cfg, adm, addr, appID, dir, n, layout, fmt.Sprintf("tasks-%d-restart", n)); err != nil {
			return 0, fmt.Errorf("restart: %w", err)
		}
		for _, r := range []struct {
			name string
			r    tkReport
		}{{"cold", f.cold}, {"restart", f.restart}} {
			cfg.logf("%s %s: Start %.0f ms, all %d running %.0f ms (restored %d, peak RSS so far %.0f MiB); idle %.1f%% CPU, RSS %.0f MiB, %d fds, %d goroutines, %d maps; close %.0f ms; peak RSS %.0f MiB",
				appID, r.name, r.r.StartCallMs, r.r.Tasks, r.r.RunningMs, r.r.Restored, r.r.StartPeakMiB, r.r.IdleCPU, r.r.IdleRSSMiB, r.r.FDs, r.r.Goroutines, r.r.Maps, r.r.CloseMs, r.r.PeakRSSMiB)
		}
		all = append(all, f)
		return f.cold.RunningMs, nil
	}
	// No warm-up run (see alternate): every run starts processes and an
	// application of its own, and one of thousands of tasks takes
	// minutes.
	var cold spread
	for i := range cfg.runs {
		v, err := run(i)
		if err != nil {
			return nil, fmt.Errorf("run %d: %w", i+1, err)
		}
		cold = append(cold, v)
	}
	fmt.Fprintf(cfg.out, "  method   = the instance is a child process running one App (Stream(%s) → GroupByKey → Count(%q),\n"+
		"             badger stores, %d stream threads, default config) over %d partitions holding %d keys in all.\n"+
		"             Start → all running is timed from App.Start to the App Running with all %d tasks Running\n"+
		"             (polled every 20 ms). Idle figures are taken once the group committed every input offset:\n"+
		"             CPU = the process's user+system time (getrusage) over %s, as %% of one core; RSS = VmRSS;\n"+
		"             fds = entries of /proc/self/fd; maps = lines of /proc/self/maps. Close = App.Close;\n"+
		"             peak RSS = VmHWM after Close, the larger of the cold and the restarted process. The restart\n"+
		"             runs on the cold run's state directory after %d more records.\n",
		tkTopic, tkStore, tkThreads, n, n*tkKeysPerTask, n, cfg.taskIdle, n)
	pick := func(f func(tkFigures) float64) spread {
		var s spread
		for _, x := range all {
			s = append(s, f(x))
		}
		return s
	}
	at := n == tkTargetTasks
	check := func(name, unit string, s spread, limit float64) row {
		if !at {
			return runsRow(name, unit, s, "info", nil)
		}
		return runsRow(name, unit, s, fmt.Sprintf("≤ %s %s", fmtNum(limit), unit), func(s spread) bool { return s.median() <= limit })
	}
	name := func(what string) string {
		if layout != eddyrt.StoreLayoutShared {
			return fmt.Sprintf("(t) %d tasks, %s: %s", n, layout, what)
		}
		return fmt.Sprintf("(t) %d tasks: %s", n, what)
	}
	rows := []row{
		runsRow(name("cold Start → all running"), "ms", cold, "info", nil),
		check(name("restart Start → all running"), "ms", pick(func(f tkFigures) float64 { return f.restart.RunningMs }), tkTargetRestart),
		check(name("peak RSS"), "MiB", pick(func(f tkFigures) float64 { return max(f.cold.PeakRSSMiB, f.restart.PeakRSSMiB) }), tkTargetPeakRSS),
		runsRow(name("idle RSS"), "MiB", pick(func(f tkFigures) float64 { return f.restart.IdleRSSMiB }), "info", nil),
		check(name("idle CPU"), "% core", pick(func(f tkFigures) float64 { return f.restart.IdleCPU }), tkTargetIdleCPU),
		check(name("file descriptors"), "fds", pick(func(f tkFigures) float64 { return float64(f.restart.FDs) }), tkTargetFDs),
		runsRow(name("goroutines"), "count", pick(func(f tkFigures) float64 { return float64(f.restart.Goroutines) }), "info", nil),
		runsRow(name("memory maps"), "count", pick(func(f tkFigures) float64 { return float64(f.restart.Maps) }), "info", nil),
		check(name("close"), "ms", pick(func(f tkFigures) float64 { return max(f.cold.CloseMs, f.restart.CloseMs) }), tkTargetCloseMilli),
	}
	if !cfg.taskPair {
		return rows, nil
	}
	var pair spread
	for i := range cfg.runs {
		appID := fmt.Sprintf("bench-tasks-pair-%d-%s-%d", n, layout, i)
		r, err := tkPairRun(ctx, cfg, adm, addr, appID, filepath.Join(root, "pair-"+strconv.Itoa(i)), n, layout)
		if err != nil {
			return rows, fmt.Errorf("pair run %d: %w", i+1, err)
		}
		for j, r := range r {
			cfg.logf("%s instance %d: all %d actives running and every other task a standby %.0f ms; idle %.1f%% CPU, RSS %.0f MiB, %d fds, %d goroutines; close %.0f ms",
				appID, j, r.Tasks, r.RunningMs, r.IdleCPU, r.IdleRSSMiB, r.FDs, r.Goroutines, r.CloseMs)
		}
		pair = append(pair, max(r[0].IdleCPU, r[1].IdleCPU))
	}
	fmt.Fprintf(cfg.out, "  pair     = two such instances of one application with NumStandbys 1, each holding every task as an\n"+
		"             active or a standby; idle CPU of the busier one, measured over the same %s once both run.\n", cfg.taskIdle)
	if at {
		return append(rows, runsRow(name("two instances with standbys, idle CPU"), "% core", pair, fmt.Sprintf("≤ %s %% core", fmtNum(tkTargetPairIdleCPU)),
			func(s spread) bool { return s.median() <= tkTargetPairIdleCPU })), nil
	}
	return append(rows, runsRow(name("two instances with standbys, idle CPU"), "% core", pair, "info", nil)), nil
}

// tkInstanceRun runs one tasks-instance child through its phases: started
// and all running, idle once the group committed the input, closed. It
// returns the child's reports merged.
func tkInstanceRun(ctx context.Context, cfg *config, adm *kadm.Client, addr, appID, dir string, n int, layout eddyrt.StoreLayout, profileName string) (tkReport, error) {
	args := []string{"tasks-instance", "--brokers", addr, "--app-id", appID, "--state-dir", dir,
		"--tasks", strconv.Itoa(n), "--idle", cfg.taskIdle.String(), "--store-layout", layout.String()}
	if cfg.profileDir != "" {
		args = append(args, "--profile", filepath.Join(cfg.profileDir, profileName))
	}
	inst, err := startChild(ctx, args...)
	if err != nil {
		return tkReport{}, err
	}
	defer inst.stop()
	var out tkReport
	read := func(phase string) error { return readPhase(inst, phase, &out) }
	if err := read("running"); err != nil {
		return out, err
	}
	err = waitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		if inst.exited() {
			return false, errors.New("instance child exited early" + inst.stderrTail())
		}
		return groupCaughtUp(ctx, adm, appID, tkTopic)
	})
	if err != nil {
		return out, fmt.Errorf("waiting for the input's offsets to be committed: %w", err)
	}
	if _, err := io.WriteString(inst.stdin, "idle\n"); err != nil {
		return out, err
	}
	if err := read("idle"); err != nil {
		return out, err
	}
	inst.stdin.Close()
	if err := read("closed"); err != nil {
		return out, err
	}
	if err := inst.wait(); err != nil {
		return out, fmt.Errorf("instance child: %w%s", err, inst.stderrTail())
	}
	return out, nil
}

// readPhase reads a tasks-instance child's report of phase into out.
func readPhase(inst *child, phase string, out *tkReport) error {
	line, err := inst.readLine()
	if err != nil {
		return err
	}
	var r tkReport
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return fmt.Errorf("child report %q: %w", line, err)
	}
	if r.Error != "" {
		return fmt.Errorf("child, %s: %s%s", r.Phase, r.Error, inst.stderrTail())
	}
	if r.Phase != phase {
		return fmt.Errorf("child reported phase %q, want %q", r.Phase, phase)
	}
	mergeReport(out, r)
	return nil
}

// tkPairRun runs two tasks-instance children of one application with a
// standby of every task, each instance holding every task as an active or
// a standby, and returns each one's figures once both have been idle
// together.
func tkPairRun(ctx context.Context, cfg *config, adm *kadm.Client, addr, appID, root string, n int, layout eddyrt.StoreLayout) ([2]tkReport, error) {
	var out [2]tkReport
	var insts [2]*child
	for i := range insts {
		args := []string{"tasks-instance", "--brokers", addr, "--app-id", appID, "--state-dir", filepath.Join(root, strconv.Itoa(i)),
			"--tasks", strconv.Itoa(n), "--idle", cfg.taskIdle.String(), "--store-layout", layout.String(), "--standbys", "1"}
		inst, err := startChild(ctx, args...)
		if err != nil {
			return out, err
		}
		defer inst.stop()
		insts[i] = inst
	}
	for i, inst := range insts {
		if err := readPhase(inst, "running", &out[i]); err != nil {
			return out, fmt.Errorf("instance %d: %w", i, err)
		}
	}
	err := waitFor(ctx, 100*time.Millisecond, func() (bool, error) { return groupCaughtUp(ctx, adm, appID, tkTopic) })
	if err != nil {
		return out, fmt.Errorf("waiting for the input's offsets to be committed: %w", err)
	}
	for _, inst := range insts {
		if _, err := io.WriteString(inst.stdin, "idle\n"); err != nil {
			return out, err
		}
	}
	for i, inst := range insts {
		if err := readPhase(inst, "idle", &out[i]); err != nil {
			return out, fmt.Errorf("instance %d: %w", i, err)
		}
	}
	for i, inst := range insts {
		inst.stdin.Close()
		if err := readPhase(inst, "closed", &out[i]); err != nil {
			return out, fmt.Errorf("instance %d: %w", i, err)
		}
	}
	return out, nil
}

// mergeReport copies into dst the fields r's phase fills.
func mergeReport(dst *tkReport, r tkReport) {
	switch r.Phase {
	case "running":
		dst.StartCallMs, dst.RunningMs, dst.Tasks, dst.Restored, dst.StartPeakMiB = r.StartCallMs, r.RunningMs, r.Tasks, r.Restored, r.StartPeakMiB
	case "idle":
		dst.IdleCPU, dst.IdleRSSMiB, dst.FDs, dst.Goroutines, dst.Maps = r.IdleCPU, r.IdleRSSMiB, r.FDs, r.Goroutines, r.Maps
	case "closed":
		dst.CloseMs, dst.PeakRSSMiB = r.CloseMs, r.PeakRSSMiB
	}
}

// runTasksInstance is the "tasks-instance" subcommand of (t): one App of
// a count over --tasks partitions. It prints a tkReport per phase: once
// all tasks run; after "idle" on stdin, its idle figures over --idle; at
// EOF, the time Close took and VmHWM.
func runTasksInstance(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tasks-instance", flag.ContinueOnError)
	brokers := fs.String("brokers", "", "HOST:PORT of the broker")
	appID := fs.String("app-id", "", "application ID")
	dir := fs.String("state-dir", "", "state directory")
	tasks := fs.Int("tasks", 0, "tasks the instance must run")
	idle := fs.Duration("idle", 5*time.Second, "how long idle figures are measured over")
	layout := fs.String("store-layout", "shared", "the App's Config.StoreLayout")
	standbys := fs.Int("standbys", 0, "the App's Config.NumStandbys; with standbys, the instance runs once it holds every task as an active or a standby")
	profile := fs.String("profile", "", "write CPU profiles of the start, the idle time and the close to `PREFIX`-{start,idle,close}.pprof")
	if err := fs.Parse(args); err != nil {
		return err
	}
	report := func(r tkReport) {
		b, _ := json.Marshal(r)
		fmt.Fprintln(stdout, string(b))
	}
	fail := func(phase string, err error) error {
		report(tkReport{Phase: phase, Error: err.Error()})
		return err
	}
	prof := func(phase string) func() {
		if *profile == "" {
			return func() {}
		}
		f, err := os.Create(*profile + "-" + phase + ".pprof")
		if err != nil {
			return func() {}
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return func() {}
		}
		return func() { pprof.StopCPUProfile(); f.Close() }
	}

	bld := topology.NewBuilder()
	topology.Stream(bld, tkTopic, serde.Bytes, serde.Bytes).GroupByKey(serde.Bytes, serde.Bytes).Count(tkStore)
	topo, err := bld.Build()
	if err != nil {
		return fail("running", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	storeLayout, err := eddyrt.ParseStoreLayout(*layout)
	if err != nil {
		return fail("running", err)
	}
	app, err := eddyrt.New(topo, eddyrt.Config{ApplicationID: *appID, Brokers: []string{*brokers}, StateDir: *dir,
		NumStreamThreads: tkThreads, Logger: log, StoreLayout: storeLayout, NumStandbys: *standbys})
	if err != nil {
		return fail("running", err)
	}
	defer app.Close(context.Background())
	stopProf := prof("start")
	start := time.Now()
	if err := app.Start(ctx); err != nil {
		stopProf()
		return fail("running", err)
	}
	running := tkReport{Phase: "running", StartCallMs: msSince(start)}
	err = waitFor(ctx, 20*time.Millisecond, func() (bool, error) {
		select {
		case <-app.Done():
			return false, fmt.Errorf("app stopped: %v", app.Err())
		default:
		}
		if app.State() != eddyrt.StateRunning {
			return false, nil
		}
		infos := app.Tasks()
		n := 0
		for _, t := range infos {
			if t.State == task.Running {
				n++
			}
		}
		running.Tasks, running.Restored = n, app.Stats().RestoredRecords
		if *standbys > 0 {
			info, ok := app.Assignment()
			held := len(info.Active) + len(info.Standby) + len(info.Warmup)
			return ok && n == len(infos) && n == len(info.Active) && held == *tasks, nil
		}
		return n == *tasks, nil
	})
	running.RunningMs = msSince(start)
	stopProf()
	if err != nil {
		return fail("running", err)
	}
	st, err := procStatus(os.Getpid())
	if err != nil {
		return fail("running", err)
	}
	running.StartPeakMiB = float64(st["VmHWM"]) / 1024
	report(running)

	in := bufio.NewReader(stdin)
	if line, err := in.ReadString('\n'); err != nil || strings.TrimSpace(line) != "idle" {
		return fail("idle", fmt.Errorf("expected \"idle\" on stdin, read %q (%v)", line, err))
	}
	idleRep, err := measureIdle(*idle, prof)
	if err != nil {
		return fail("idle", err)
	}
	report(idleRep)

	waitStdin(ctx, in)
	stopProf = prof("close")
	start = time.Now()
	err = app.Close(ctx)
	closed := tkReport{Phase: "closed", CloseMs: msSince(start)}
	stopProf()
	if err != nil {
		return fail("closed", err)
	}
	if st, err = procStatus(os.Getpid()); err != nil {
		return fail("closed", err)
	}
	closed.PeakRSSMiB = float64(st["VmHWM"]) / 1024
	report(closed)
	return nil
}

// measureIdle measures this process over d: its CPU time as a share of
// one core, and at the end its resident memory, descriptors, goroutines
// and memory maps.
func measureIdle(d time.Duration, prof func(string) func()) (tkReport, error) {
	stop := prof("idle")
	before, err := cpuTime()
	if err != nil {
		stop()
		return tkReport{}, err
	}
	t0 := time.Now()
	time.Sleep(d)
	after, err := cpuTime()
	wall := time.Since(t0)
	stop()
	if err != nil {
		return tkReport{}, err
	}
	r := tkReport{Phase: "idle", IdleCPU: 100 * float64(after-before) / float64(wall), Goroutines: runtime.NumGoroutine()}
	st, err := procStatus(os.Getpid())
	if err != nil {
		return r, err
	}
	r.IdleRSSMiB = float64(st["VmRSS"]) / 1024
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return r, err
	}
	r.FDs = len(fds)
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return r, err
	}
	r.Maps = strings.Count(string(maps), "\n")
	return r, nil
}

// cpuTime is the user and system time this process used so far.
func cpuTime() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

func msSince(t time.Time) float64 { return float64(time.Since(t)) / float64(time.Millisecond) }

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/dgraph-io/ristretto/v2/z"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
	eddyrt "github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

const (
	rssTopic = "bench-rss-keys"
	rssApp   = "bench-rss"
	rssStore = "counts"
	// rssLimitMiB is the target of benchmark (c).
	rssLimitMiB = 512
	// childEnv marks a re-executed child, so that a test binary (whose
	// main is the test runner) knows to run a subcommand instead.
	childEnv = "EDDYBENCH_CHILD"
)

// benchRSS is benchmark (c). Three processes: a broker child (so the
// records it holds are not in the measured heap), this process loading the
// input and watching, and an instance child running one App. The figure is
// the instance child's VmHWM once its group has committed every input
// offset (which the runtime does only after the counts are in the stores).
// Each run starts all three processes anew; a warm-up run is dropped (see
// alternate).
func benchRSS(ctx context.Context, cfg *config) ([]row, error) {
	fmt.Fprintf(cfg.out, "\n(c) peak RSS: %d distinct keys, %d tasks, broker in a child process\n", cfg.keys, cfg.tasks)
	runs, err := alternate(cfg, side{"peak RSS (MiB)", func(int) (float64, error) { return rssRun(ctx, cfg) }})
	if err != nil {
		return nil, err
	}
	return []row{runsRow(fmt.Sprintf("(c) peak RSS, %d tasks", cfg.tasks), "MiB", runs[0], fmt.Sprintf("≤ %d MiB", rssLimitMiB),
		func(s spread) bool { return s.median() <= rssLimitMiB })}, nil
}

// rssRun is one run of (c): it returns the instance child's VmHWM in MiB.
func rssRun(ctx context.Context, cfg *config) (float64, error) {
	bro, err := startChild(ctx, "broker", "--partitions", strconv.Itoa(cfg.tasks))
	if err != nil {
		return 0, fmt.Errorf("broker child: %w", err)
	}
	defer bro.stop()
	addr, err := bro.readLine()
	if err != nil {
		return 0, fmt.Errorf("broker child: %w", err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if err := createTopics(ctx, adm, int32(cfg.tasks), rssTopic); err != nil {
		return 0, err
	}
	loadStart := time.Now()
	p := &producer{cl: cl}
	val := []byte("x")
	for i := range cfg.keys {
		// The default partitioner hashes keys with murmur2, as Eddy does.
		p.send(ctx, &kgo.Record{Topic: rssTopic, Key: benchKey(i), Value: val})
	}
	if acked, err := p.flush(ctx); err != nil || acked != int64(cfg.keys) {
		return 0, fmt.Errorf("loading keys: %d of %d acknowledged: %v", acked, cfg.keys, err)
	}
	cfg.logf("loaded %d keys into %s (%d partitions) in %s", cfg.keys, rssTopic, cfg.tasks, time.Since(loadStart).Round(time.Millisecond))

	dir, err := os.MkdirTemp("", "eddybench-rss-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	args := []string{"rss-instance", "--brokers", addr, "--state-dir", dir, "--keys", strconv.Itoa(cfg.keys), "--store-layout", cfg.layout.String()}
	if cfg.profileDir != "" {
		args = append(args, "--heap-profile", filepath.Join(cfg.profileDir, "rss-instance-heap.pprof"))
	}
	if cfg.fetchPartBytes > 0 {
		args = append(args, "--fetch-partition-bytes", strconv.Itoa(cfg.fetchPartBytes))
		fmt.Fprintf(cfg.out, "  experiment: the instance's clients get kgo.FetchMaxPartitionBytes(%d)\n", cfg.fetchPartBytes)
	}
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		fmt.Fprintf(cfg.out, "  experiment: GOMEMLIMIT=%s (inherited by the instance)\n", v)
	}
	inst, err := startChild(ctx, args...)
	if err != nil {
		return 0, fmt.Errorf("instance child: %w", err)
	}
	defer inst.stop()
	if line, err := inst.readLine(); err != nil || line != "started" {
		return 0, fmt.Errorf("instance child did not start: %q %v", line, err)
	}
	start := time.Now()
	pid := inst.cmd.Process.Pid
	// The breakdown by mapping is sampled less often than the poll: reading
	// smaps walks every mapping of the child.
	var peak rssSample
	lastSmaps := time.Time{}
	err = waitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		if inst.exited() {
			return false, errors.New("instance child exited early")
		}
		if time.Since(lastSmaps) >= 500*time.Millisecond {
			lastSmaps = time.Now()
			if s, err := readSmaps(pid); err == nil && s.total() > peak.total() {
				peak = s
			}
		}
		return groupCaughtUp(ctx, adm, rssApp, rssTopic)
	})
	if err != nil {
		return 0, fmt.Errorf("waiting for the instance to count every key: %w%s", err, inst.stderrTail())
	}
	elapsed := time.Since(start)
	st, err := procStatus(pid)
	if err != nil {
		return 0, err
	}
	// Closing its stdin tells the child to report and verify.
	inst.stdin.Close()
	line, err := inst.readLine()
	if err != nil {
		return 0, fmt.Errorf("instance child report: %w%s", err, inst.stderrTail())
	}
	var rep rssReport
	if err := json.Unmarshal([]byte(line), &rep); err != nil {
		return 0, fmt.Errorf("instance child report %q: %w", line, err)
	}
	if err := inst.wait(); err != nil {
		return 0, fmt.Errorf("instance child: %w%s", err, inst.stderrTail())
	}
	if rep.Error != "" {
		return 0, errors.New("instance child: " + rep.Error)
	}
	mib := func(kb int64) float64 { return float64(kb) / 1024 }
	fmt.Fprintf(cfg.out, "  instance pid %d: VmHWM %.0f MiB; at the end VmRSS %.0f MiB = anon %.0f + file %.0f + shmem %.0f MiB\n",
		pid, mib(st["VmHWM"]), mib(st["VmRSS"]), mib(st["RssAnon"]), mib(st["RssFile"]), mib(st["RssShmem"]))
	fmt.Fprintf(cfg.out, "  Go runtime at the end: HeapInuse %.0f MiB, HeapSys %.0f MiB, Sys %.0f MiB, %d GCs (GOGC=%s, GOMEMLIMIT=%s)\n",
		float64(rep.HeapInuse)/(1<<20), float64(rep.HeapSys)/(1<<20), float64(rep.Sys)/(1<<20), rep.NumGC, envOr("GOGC", "100"), envOr("GOMEMLIMIT", "off"))
	fmt.Fprintf(cfg.out, "  Go heap over the run (sampled every 250 ms): live after GC ≤ %.0f MiB, objects (live + garbage) ≤ %.0f MiB\n",
		float64(rep.MaxHeapLive)/(1<<20), float64(rep.MaxHeapObjects)/(1<<20))
	fmt.Fprintf(cfg.out, "  badger table-build buffers (Go heap, pooled ones included; sampled every 250 ms): ≤ %.0f MiB in %d buffers\n",
		float64(rep.MaxBuilders)/(1<<20), rep.MaxBuildersN)
	fmt.Fprintf(cfg.out, "  largest sampled RSS (smaps, every 500 ms): %s\n", peak)
	fmt.Fprintf(cfg.out, "  badger after close, %d DBs: %s keys in %d tables (%.1f MiB on disk, %.1f MiB indexes of which %.1f MiB bloom filters)\n",
		rep.DBs, fmtNum(float64(rep.TableKeys)), rep.Tables, float64(rep.TableBytes)/(1<<20), float64(rep.IndexBytes)/(1<<20), float64(rep.BloomBytes)/(1<<20))
	fmt.Fprintf(cfg.out, "  %d keys counted in %s (%s keys/s) by %d tasks; %d of %d sampled keys read back with count 1\n",
		cfg.keys, elapsed.Round(time.Millisecond), fmtNum(rate(int64(cfg.keys), elapsed)), rep.Tasks, rep.Verified, rep.Sampled)
	fmt.Fprintf(cfg.out, "  method   = the instance is a child process running one App (topology: Stream(%s) →\n"+
		"             GroupByKey → Count(%q), badger stores, default config); keys were preloaded. When the\n"+
		"             group's committed offsets reach the topic's end offsets (the runtime commits offsets only\n"+
		"             after the counts are in the stores), VmHWM is read from /proc/<pid>/status.\n",
		rssTopic, rssStore)
	if rep.Tasks != cfg.tasks || rep.Verified != rep.Sampled {
		return 0, fmt.Errorf("instance held %d tasks (want %d) and read back %d of %d sampled keys with count 1 (%d counted more than once, %d missing)",
			rep.Tasks, cfg.tasks, rep.Verified, rep.Sampled, rep.Recounted, rep.Sampled-rep.Verified-rep.Recounted)
	}
	return mib(st["VmHWM"]), nil
}

// groupCaughtUp reports whether group has committed, on every partition of
// topic, the partition's end offset.
func groupCaughtUp(ctx context.Context, adm *kadm.Client, group, topic string) (bool, error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return false, err
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return false, nil // the group may not exist yet
	}
	caughtUp := true
	ends.Each(func(o kadm.ListedOffset) {
		// A partition nothing was written to has no commit to wait for
		// (a small corpus may leave a repartition partition empty).
		if o.Offset == 0 {
			return
		}
		c, ok := committed.Lookup(topic, o.Partition)
		if !ok || c.At < o.Offset {
			caughtUp = false
		}
	})
	return caughtUp, nil
}

// procStatus reads the kB figures of /proc/<pid>/status.
func procStatus(pid int) (map[string]int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64)
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 2 && f[1] == "kB" {
			if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				out[k] = n
			}
		}
	}
	if _, ok := out["VmHWM"]; !ok {
		return nil, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
	}
	return out, nil
}

// child is a re-executed copy of this program running a subcommand. It
// stops when its standard input closes, so it cannot outlive its parent.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	stderr *syncBuffer
	done   chan struct{}
	err    error
}

// syncBuffer collects a child's stderr, which exec copies in from a
// goroutine of its own while the parent may read it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startChild(ctx context.Context, args ...string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	c := &child{cmd: cmd, stderr: new(syncBuffer), done: make(chan struct{})}
	cmd.Stderr = c.stderr
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	// A pipe of our own rather than StdoutPipe: Wait would close that one
	// as soon as the child exits, possibly before its last line is read.
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = pw
	err = cmd.Start()
	pw.Close()
	if err != nil {
		pr.Close()
		return nil, err
	}
	c.out = bufio.NewReader(pr)
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

func (c *child) readLine() (string, error) {
	l, err := c.out.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("reading child output: %w%s", err, c.stderrTail())
	}
	return strings.TrimSpace(l), nil
}

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *child) wait() error {
	<-c.done
	return c.err
}

// stop closes the child's stdin and, if it has not exited within a few
// seconds, kills it.
func (c *child) stop() {
	c.stdin.Close()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// stderrTail is the end of the child's stderr, for error messages. Read
// only after the child exited or when a failure is being reported anyway.
func (c *child) stderrTail() string {
	s := c.stderr.String()
	if s == "" {
		return ""
	}
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return "\nchild stderr:\n" + s
}

// runBrokerChild is the "broker" subcommand: an in-memory embedded broker
// whose address is the first line of output. It runs until stdin closes.
func runBrokerChild(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("broker", flag.ContinueOnError)
	parts := fs.Int("partitions", 12, "partitions of auto-created topics")
	listen := fs.String("listen", "127.0.0.1:0", "HOST:PORT to listen on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	b, err := broker.Start(broker.Config{Listen: *listen, Partitions: int32(*parts)})
	if err != nil {
		return err
	}
	defer b.Close()
	fmt.Fprintln(stdout, b.Addrs()[0])
	waitStdin(ctx, stdin)
	return nil
}

// waitStdin returns when stdin reaches EOF or ctx ends.
func waitStdin(ctx context.Context, stdin io.Reader) {
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		close(eof)
	}()
	select {
	case <-eof:
	case <-ctx.Done():
	}
}

// rssReport is what the instance child prints when asked to stop.
type rssReport struct {
	Tasks    int `json:"tasks"`
	Sampled  int `json:"sampled"`
	Verified int `json:"verified"`
	// Recounted are sampled keys found with a count above 1: input
	// processed again after a commit failed (at-least-once), as when a
	// thread starved of CPU drops out of its group. Lost keys are the
	// sampled ones neither verified nor recounted.
	Recounted int    `json:"recounted"`
	HeapInuse uint64 `json:"heap_inuse"`
	HeapSys   uint64 `json:"heap_sys"`
	Sys       uint64 `json:"sys"`
	NumGC     uint32 `json:"num_gc"`
	// MaxHeapLive and MaxHeapObjects are the largest figures sampled
	// while running: the heap found live by the last GC, and the bytes of
	// heap objects, garbage not yet collected included.
	MaxHeapLive    uint64 `json:"max_heap_live"`
	MaxHeapObjects uint64 `json:"max_heap_objects"`
	// MaxBuilders is the largest sampled figure of badger's table-build
	// buffers (ristretto allocators tagged TableBuilder, pooled ones
	// included) and MaxBuildersN their number then: Go heap, part of the
	// live figure above.
	MaxBuilders  uint64 `json:"max_builders"`
	MaxBuildersN int    `json:"max_builders_n"`
	// Badger's tables once the App has closed its stores.
	DBs        int    `json:"dbs"`
	Tables     int    `json:"tables"`
	TableKeys  int64  `json:"table_keys"`
	TableBytes int64  `json:"table_bytes"`
	IndexBytes int64  `json:"index_bytes"`
	BloomBytes int64  `json:"bloom_bytes"`
	Error      string `json:"error,omitempty"`
}

// runRSSInstance is the "rss-instance" subcommand: one App counting keys.
// It prints "started", runs until stdin closes, then prints an rssReport
// (Go memory figures, tasks held, a sample of keys read back) and exits.
func runRSSInstance(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rss-instance", flag.ContinueOnError)
	brokers := fs.String("brokers", "", "HOST:PORT of the broker")
	dir := fs.String("state-dir", "", "state directory")
	keys := fs.Int("keys", 0, "number of keys fed (for the read-back sample)")
	heapProfile := fs.String("heap-profile", "", "write a heap profile to this file when asked to report")
	fetchPartBytes := fs.Int("fetch-partition-bytes", 0, "if positive, kgo.FetchMaxPartitionBytes for the App's clients")
	layout := fs.String("store-layout", "shared", "the App's Config.StoreLayout")
	if err := fs.Parse(args); err != nil {
		return err
	}
	bld := topology.NewBuilder()
	topology.Stream(bld, rssTopic, serde.Bytes, serde.Bytes).GroupByKey(serde.Bytes, serde.Bytes).Count(rssStore)
	topo, err := bld.Build()
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var extra []kgo.Opt
	if *fetchPartBytes > 0 {
		extra = append(extra, kgo.FetchMaxPartitionBytes(int32(*fetchPartBytes)))
	}
	storeLayout, err := eddyrt.ParseStoreLayout(*layout)
	if err != nil {
		return err
	}
	app, err := eddyrt.New(topo, eddyrt.Config{ApplicationID: rssApp, Brokers: []string{*brokers}, StateDir: *dir, Logger: log, ClientOptions: extra, StoreLayout: storeLayout})
	if err != nil {
		return err
	}
	if err := app.Start(ctx); err != nil {
		return err
	}
	defer app.Close(context.Background())
	fmt.Fprintln(stdout, "started")
	if *heapProfile != "" {
		// A stuck instance can be inspected without killing it.
		stopDumps := dumpGoroutinesOnSignal(*heapProfile + ".goroutines")
		defer stopDumps()
	}
	var rep rssReport
	stopSampler := sampleHeap(&rep, *heapProfile)
	// An App that stopped on a fatal error ends the child at once, so the
	// parent reports it instead of waiting for a catch-up that never comes.
	waitCtx, cancelWait := context.WithCancel(ctx)
	go func() {
		select {
		case <-app.Done():
			cancelWait()
		case <-waitCtx.Done():
		}
	}()
	waitStdin(waitCtx, stdin)
	cancelWait()
	stopSampler()
	select {
	case <-app.Done():
		return fmt.Errorf("app stopped: %v", app.Err())
	default:
	}

	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rep.HeapInuse, rep.HeapSys, rep.Sys, rep.NumGC = ms.HeapInuse, ms.HeapSys, ms.Sys, ms.NumGC
	if *heapProfile != "" {
		if err := writeHeapProfile(*heapProfile); err != nil {
			rep.Error = err.Error()
		}
	}
	for _, t := range app.Tasks() {
		if t.State == task.Running {
			rep.Tasks++
		}
	}
	if err := app.Err(); err != nil {
		rep.Error = err.Error()
	}
	// Every 1000th key, and the last: enough to catch a lost partition.
	for i := 0; *keys > 0 && rep.Error == ""; i += 1000 {
		i = min(i, *keys-1)
		rep.Sampled++
		v, found, _, err := activeGet(app, rssStore, benchKey(i))
		if err == nil && found {
			switch n, _ := serde.Int64.Decode(v); {
			case n == 1:
				rep.Verified++
			case n > 1:
				rep.Recounted++
			}
		}
		if i == *keys-1 {
			break
		}
	}
	if err := app.Close(ctx); err != nil && rep.Error == "" {
		rep.Error = err.Error()
	}
	if err := badgerTables(*dir, &rep); err != nil && rep.Error == "" {
		rep.Error = err.Error()
	}
	b, _ := json.Marshal(rep)
	fmt.Fprintln(stdout, string(b))
	return nil
}

// writeHeapProfile writes the live heap as of the last GC.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup("heap").WriteTo(f, 0)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// sampleHeap records in rep the largest live heap and heap-object figures
// until the returned function is called. With a profile path, it also
// writes a heap profile to path+".peak" whenever the live heap reaches a
// new high by 5% or more: the end-of-run profile misses what only
// compactions and flushes hold.
func sampleHeap(rep *rssReport, profilePath string) (stop func()) {
	samples := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}}
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(samples)
			if live := samples[0].Value.Uint64(); profilePath != "" && live > rep.MaxHeapLive+rep.MaxHeapLive/20 {
				_ = writeHeapProfile(profilePath + ".peak")
			}
			rep.MaxHeapLive = max(rep.MaxHeapLive, samples[0].Value.Uint64())
			rep.MaxHeapObjects = max(rep.MaxHeapObjects, samples[1].Value.Uint64())
			if n, b := tableBuilders(); b > rep.MaxBuilders {
				rep.MaxBuilders, rep.MaxBuildersN = b, n
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// tableBuilders returns the number and bytes of badger's table-build
// buffers, read from ristretto's registry of allocators (which badger
// builds tables in, on the Go heap without the jemalloc build tag). The
// registry offers only a summary line per tag, "Tag: T Num: N Size: S . ";
// a pool hands an allocator out tagged TableBuilder and the builder
// retags it Builder.
func tableBuilders() (n int, bytes uint64) {
	for _, part := range strings.Split(z.Allocators(), " . ") {
		f := strings.Fields(part)
		// Tag: Builder Num: 3 Size: 12 MiB
		if len(f) < 7 || (f[1] != "TableBuilder" && f[1] != "Builder") {
			continue
		}
		k, _ := strconv.Atoi(f[3])
		v, err := strconv.ParseFloat(f[5], 64)
		if err != nil {
			continue
		}
		unit := map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[f[6]]
		n += k
		bytes += uint64(v * unit)
	}
	return n, bytes
}

// badgerTables opens, read-only, every badger DB under root (closed
// cleanly, so nothing is left in their logs) and sums their tables.
func badgerTables(root string, rep *rssReport) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "MANIFEST" {
			return err
		}
		dir := filepath.Dir(path)
		db, err := badger.Open(badger.DefaultOptions(dir).WithReadOnly(true).WithLogger(nil).
			WithCompression(options.None).WithBlockCacheSize(0))
		if err != nil {
			return fmt.Errorf("open %s: %w", dir, err)
		}
		rep.DBs++
		for _, t := range db.Tables() {
			rep.Tables++
			rep.TableKeys += int64(t.KeyCount)
			rep.TableBytes += int64(t.OnDiskSize)
			rep.IndexBytes += int64(t.IndexSz)
			rep.BloomBytes += int64(t.BloomFilterSize)
		}
		return db.Close()
	})
}

// rssSample is a process's resident memory by kind of mapping, in kB.
type rssSample struct {
	anon, sst, memtableLog, vlog, otherFile int64
}

func (s rssSample) total() int64 { return s.anon + s.sst + s.memtableLog + s.vlog + s.otherFile }

func (s rssSample) String() string {
	mib := func(kb int64) float64 { return float64(kb) / 1024 }
	return fmt.Sprintf("%.0f MiB = anonymous %.0f + badger tables (.sst) %.0f + memtable logs (.mem) %.0f + value logs %.0f + other files %.0f",
		mib(s.total()), mib(s.anon), mib(s.sst), mib(s.memtableLog), mib(s.vlog), mib(s.otherFile))
}

// readSmaps sums the resident kB of pid's file mappings by kind; the
// anonymous part is the kernel's RssAnon, read just before.
func readSmaps(pid int) (rssSample, error) {
	var s rssSample
	st, err := procStatus(pid)
	if err != nil {
		return s, err
	}
	s.anon = st["RssAnon"]
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return s, err
	}
	var cur *int64
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if strings.Contains(f[0], "-") && len(f) >= 5 {
			// A mapping's header: address range, perms, offset, dev, inode, path.
			path := ""
			if len(f) >= 6 {
				path = f[5]
			}
			switch {
			case path == "" || strings.HasPrefix(path, "["):
				// Counted from RssAnon instead: summing anonymous
				// mappings of a Go heap that changes while smaps is
				// read has come out above VmHWM.
				cur = nil
			case strings.HasSuffix(path, ".sst"):
				cur = &s.sst
			case strings.HasSuffix(path, ".mem"):
				cur = &s.memtableLog
			case strings.HasSuffix(path, ".vlog"):
				cur = &s.vlog
			default:
				cur = &s.otherFile
			}
			continue
		}
		if f[0] == "Rss:" && cur != nil && len(f) >= 2 {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			*cur += n
		}
	}
	return s, nil
}

// dumpGoroutinesOnSignal writes every goroutine's stack to path each time
// the process receives SIGUSR1, until the returned function is called.
func dumpGoroutinesOnSignal(path string) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-ch:
				if f, err := os.Create(path); err == nil {
					_ = pprof.Lookup("goroutine").WriteTo(f, 2)
					f.Close()
				}
			}
		}
	}()
	return func() { signal.Stop(ch); close(done) }
}

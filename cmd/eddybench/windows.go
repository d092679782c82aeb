package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/topology"
)

const (
	wnInput        = "bench-window-in"
	wnInputMinute  = "bench-window-in-key-minute"
	wnKVOut        = "bench-window-kv-counts"
	wnWinOut       = "bench-window-minute-counts"
	wnStore        = "counts"
	wnRestoreTopic = "bench-window-restore-changelog"
	// wnKeys distinct keys share the input of (w1) and the records of
	// (w2) and (w3).
	wnKeys = 10_000
	// wnSpan is the event time the spread input of (w1) covers: 30
	// one-minute windows, so 30 windows per key.
	wnSpan = 30 * time.Minute
	// wnLiveRate is the event rate of the live input of (w1), records per
	// second: its timestamps advance as a stream of that rate's would, so
	// 1,000,000 records cover 50 s and each key has one or two windows.
	wnLiveRate = 20_000
	wnWindow   = int64(time.Minute / time.Millisecond)
	// wnRetentions is how many retention periods (w3) streams through
	// its store, sampled wnSamplesPer times each.
	wnRetentions    = 10
	wnSamplesPer    = 4
	wnBatch         = 1000 // records per store Write in (w3), as one commit would write
	wnFlatTolerance = 1.25
)

// benchWindows is benchmark (w), not run by default:
//
//	(w1) a tumbling-window count (1-minute windows) against the key-value
//	     count over the same input (target ≥ 0.7×), on two inputs: one
//	     whose times spread over 30 minutes (30 windows per key), one whose
//	     times advance at wnLiveRate records/s;
//	(w2) restoring a window store (statestore.NewSegmentedStore over
//	     OpenBadger) from its changelog against a bare badger WriteBatch of
//	     the same records (target ≥ 0.8×);
//	(w3) disk and Go heap of a window store under a steady stream for 10×
//	     its retention (target: flat after the first retention period).
func benchWindows(ctx context.Context, cfg *config) ([]row, error) {
	var rows []row
	spread := wnWorkload{name: "spread", span: wnSpan}
	live := wnWorkload{name: "live", span: time.Duration(cfg.windowRecords) * time.Second / wnLiveRate}
	// EDDYBENCH_W1=spread (or live) runs only that input of (w1), and
	// neither (w2) nor (w3): for pairs of runs while working on (w1).
	only := os.Getenv("EDDYBENCH_W1")
	for _, w := range []wnWorkload{spread, live} {
		if only != "" && only != w.name {
			continue
		}
		r, err := benchWindowCount(ctx, cfg, w)
		rows = append(rows, r...)
		if err != nil {
			return rows, fmt.Errorf("w1 %s: %w", w.name, err)
		}
	}
	if only != "" {
		return rows, nil
	}
	r, err := benchWindowRestore(ctx, cfg)
	rows = append(rows, r...)
	if err != nil {
		return rows, fmt.Errorf("w2: %w", err)
	}
	r, err = benchWindowRetention(ctx, cfg)
	rows = append(rows, r...)
	if err != nil {
		return rows, fmt.Errorf("w3: %w", err)
	}
	return rows, nil
}

// wnWorkload is one input of (w1): its records' times spread evenly over
// span.
type wnWorkload struct {
	name string
	span time.Duration
}

// wnRecord is the i-th of n input records: its key and event time, the
// times spread evenly over span from t0.
func wnRecord(i, n int, t0 int64, span time.Duration) (key int, ts int64) {
	return i % wnKeys, t0 + int64(i)*span.Milliseconds()/int64(n)
}

// benchWindowCount is (w1) on one input. The key-value and the windowed
// count alternate (see alternate).
func benchWindowCount(ctx context.Context, cfg *config, w wnWorkload) ([]row, error) {
	n := cfg.windowRecords
	wnSpan := w.span
	fmt.Fprintf(cfg.out, "\n(w1 %s) tumbling-window count vs key-value count: %d records, %d keys over %s of event time, %d partitions, in-process broker\n",
		w.name, n, min(n, wnKeys), wnSpan, cfg.tasks)
	addrs, cl, adm, closeAll, err := startBenchBroker(ctx, int32(cfg.tasks), wnInput, wnInputMinute, wnKVOut, wnWinOut)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	// Recent times, so that no topic retention touches the records; a
	// whole number of minutes, so that windows line up with the span.
	t0 := time.Now().Add(-wnSpan - time.Hour).Truncate(time.Minute).UnixMilli()
	kvRef := make(map[int]int64)
	winRef := make(map[[2]int64]int64) // key, window start → count
	latest := make(map[int]int64)      // key → start of its last window
	// The same records keyed by (key, minute), for the informational
	// key-value count with as many aggregates as the windowed count has
	// windows: key k's records in the input's m-th minute get key
	// k + m×wnKeys.
	minuteRef := make(map[int]int64)
	loadStart := time.Now()
	p := &producer{cl: cl}
	val := []byte("x")
	for i := range n {
		k, ts := wnRecord(i, n, t0, wnSpan)
		kvRef[k]++
		winRef[[2]int64{int64(k), ts - ts%wnWindow}]++
		latest[k] = ts - ts%wnWindow
		p.send(ctx, &kgo.Record{Topic: wnInput, Key: benchKey(k), Value: val, Timestamp: time.UnixMilli(ts)})
		km := k + int((ts-t0)/wnWindow)*wnKeys
		minuteRef[km]++
		p.send(ctx, &kgo.Record{Topic: wnInputMinute, Key: benchKey(km), Value: val, Timestamp: time.UnixMilli(ts)})
	}
	if acked, err := p.flush(ctx); err != nil || acked != 2*int64(n) {
		return nil, fmt.Errorf("loading input: %d of %d acknowledged: %v", acked, n, err)
	}
	cfg.logf("loaded %d records into %s in %s; %d windows", n, wnInput, time.Since(loadStart).Round(time.Millisecond), len(winRef))

	var kvCPU, winCPU spread
	app := func(kind string, windowed bool, cpus *spread) side {
		return side{kind + " count", func(i int) (float64, error) {
			d, cpu, err := runWindowBenchApp(ctx, cfg, addrs, adm, fmt.Sprintf("bench-window-%s-%s-%d", w.name, kind, i), wnInput, windowed, n, refs{kvRef, winRef, latest})
			if i > 0 {
				*cpus = append(*cpus, cpu.Seconds())
			}
			return rate(int64(n), d), err
		}}
	}
	runs, err := alternate(cfg, app("key-value", false, &kvCPU), app("windowed", true, &winCPU))
	if err != nil {
		return nil, err
	}
	minute, minuteCPU, err := runWindowBenchApp(ctx, cfg, addrs, adm, "bench-window-"+w.name+"-kv-key-minute", wnInputMinute, false, n, refs{kv: minuteRef})
	if err != nil {
		return nil, fmt.Errorf("key-value count by (key, minute): %w", err)
	}
	nn := int64(n)
	fmt.Fprintf(cfg.out, "  key-value count by (key, minute): %s records/s (%s; informational, run last)\n", fmtNum(rate(nn, minute)), minute.Round(time.Millisecond))
	fmt.Fprintf(cfg.out, "  CPU time of the process (user+sys, broker included, until caught up), medians: key-value %.3f s, windowed %.3f s, by (key, minute) %s\n",
		kvCPU.median(), winCPU.median(), minuteCPU.Round(time.Millisecond))
	fmt.Fprintf(cfg.out, "  both     = runtime App, %d stream thread(s), defaults, badger stores; Stream → GroupByKey →\n"+
		"             Count(%q) → ToStream → To, the windowed one through WindowedBy(TumblingWindows(1m)) and\n"+
		"             TimeWindowedSerde. Timed from the first record until the group's committed offsets reach\n"+
		"             the input's end; 100 keys' counts are checked (the windowed one's in the input's last\n"+
		"             window, the only one a store without grace still holds).\n"+
		"  by (key, minute) = informational: the key-value count over the same records keyed by key and\n"+
		"             minute, so it keeps, emits and changelogs as many aggregates (%d) as the windowed count has\n"+
		"             windows; the windowed count against it is the cost of windowing itself, without the cost\n"+
		"             of the extra aggregates the input makes.\n",
		cfg.threads, wnStore, len(minuteRef))
	return []row{
		ratioRow(fmt.Sprintf("(w1 %s) tumbling-window vs key-value count", w.name), "records/s", runs[1], runs[0], 0.7),
		infoRow(fmt.Sprintf("(w1 %s) info: windowed vs key-value count by (key, minute)", w.name), "records/s", runs[1], spread{rate(nn, minute)}),
	}, nil
}

// refs are the expected counts of (w1): per key, per key and window start,
// and each key's latest window start.
type refs struct {
	kv     map[int]int64
	win    map[[2]int64]int64
	latest map[int]int64
}

// runWindowBenchApp runs one count over the input with application ID
// appID, times it from its first record until its committed offsets reach
// the input's end, and checks a sample of the counts. cpu is the process's
// CPU time from the start of the app until it caught up.
func runWindowBenchApp(ctx context.Context, cfg *config, addrs []string, adm *kadm.Client, appID, input string, windowed bool, n int, ref refs) (elapsed, cpu time.Duration, err error) {
	var first, seen atomic.Int64
	bld := topology.NewBuilder()
	grouped := topology.Stream(bld, input, serde.Bytes, serde.Bytes).Peek(func(_, _ []byte) {
		if seen.Add(1) == 1 {
			first.Store(time.Now().UnixNano())
		}
	}).GroupByKey(serde.Bytes, serde.Bytes)
	if windowed {
		w := topology.TumblingWindows(time.Minute)
		topology.WindowedBy(grouped, w).Count(wnStore).ToStream().
			To(wnWinOut, topology.TimeWindowedSerde(serde.Bytes, w.Size()), serde.Int64)
	} else {
		grouped.Count(wnStore).ToStream().To(wnKVOut, serde.Bytes, serde.Int64)
	}
	topo, err := bld.Build()
	if err != nil {
		return 0, 0, err
	}
	stopProf, err := profile(cfg.profileDir, appID)
	if err != nil {
		return 0, 0, err
	}
	c0 := processCPU()
	app, done, stop, err := runCaughtUp(ctx, cfg, adm, addrs, topo, appID, input)
	cpu = processCPU() - c0
	stopProf()
	if err != nil {
		return 0, 0, err
	}
	defer stop()
	elapsed = done.Sub(time.Unix(0, first.Load()))
	if s := seen.Load(); s != int64(n) {
		return 0, 0, fmt.Errorf("%d records went through the topology, want %d", s, n)
	}

	q := iq.NewQuerier(app.Queries())
	checkCtx, cancelCheck := context.WithTimeout(ctx, 30*time.Second)
	defer cancelCheck()
	// Without grace a window store keeps one window's length behind the
	// latest window start, so only the input's last window is still held
	// everywhere: keys with a record in it are the ones checked.
	final := ref.finalStart()
	checked := 0
	for k := 0; k < min(n, wnKeys); k++ {
		if windowed && ref.latest[k] != final {
			continue
		}
		if checked++; checked > 100 {
			break
		}
		var lastErr error
		err := waitFor(checkCtx, 10*time.Millisecond, func() (bool, error) {
			var got, want int64
			if windowed {
				start := ref.latest[k]
				want = ref.win[[2]int64{int64(k), start}]
				res, err := iq.WindowFetch(checkCtx, q, wnStore, benchKey(k), time.UnixMilli(start), time.UnixMilli(start), serde.Bytes, serde.Int64)
				if err != nil || len(res.Windows) != 1 {
					lastErr = fmt.Errorf("windows=%d err=%v", len(res.Windows), err)
					return false, nil
				}
				got = res.Windows[0].Value
			} else {
				want = ref.kv[k]
				v, found, _, err := activeGet(app, wnStore, benchKey(k))
				if err != nil || !found {
					lastErr = fmt.Errorf("found=%v err=%v", found, err)
					return false, nil
				}
				got, _ = serde.Int64.Decode(v)
			}
			if got != want {
				return false, fmt.Errorf("key %d counted %d, want %d", k, got, want)
			}
			return true, nil
		})
		if err != nil {
			return 0, 0, fmt.Errorf("key %d: %w (last read: %v)", k, err, lastErr)
		}
	}
	if checked == 0 {
		return 0, 0, fmt.Errorf("no key to check")
	}
	return elapsed, cpu, app.Close(ctx)
}

// finalStart is the start of the input's last window.
func (r refs) finalStart() int64 {
	var s int64
	for _, t := range r.latest {
		s = max(s, t)
	}
	return s
}

// windowStoreKey is key's window starting at start as statestore's window
// stores, their caches and changelogs lay keys out (see
// statestore/window.go): key | 00 01 | start, without the segment, which
// only the store's files hold. benchKey has no 00 byte, so nothing needs
// escaping; (w2) and (w3) read records back through
// statestore.WindowStore, which fails if this layout drifts from the
// store's.
func windowStoreKey(key []byte, start int64) []byte {
	b := make([]byte, 0, len(key)+2+8)
	b = append(append(b, key...), 0, 1)
	return appendBig(b, start)
}

func appendBig(b []byte, v int64) []byte {
	return append(b, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

// benchWindowRestore is (w2): the restore of (b) into a window store. The
// records are wnKeys keys' consecutive one-minute windows, all within
// retention, so the store keeps every one.
func benchWindowRestore(ctx context.Context, cfg *config) ([]row, error) {
	n := cfg.windowRecords
	perKey := (n + wnKeys - 1) / wnKeys
	opts := statestore.WindowOptions{Retention: int64(perKey+1) * wnWindow, WindowSize: wnWindow}
	interval := statestore.DefaultSegmentInterval(opts.Retention)
	fmt.Fprintf(cfg.out, "\n(w2) window-store restore: %d records (%d keys × up to %d one-minute windows, 8-byte values), in-process broker\n",
		n, min(n, wnKeys), perKey)
	b, err := broker.Start(broker.Config{Partitions: 1})
	if err != nil {
		return nil, err
	}
	defer b.Close()
	addrs := b.Addrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	// Compacted only: the delete half of a window changelog's policy
	// would judge these synthetic times, not the benchmark.
	if err := createCompacted(ctx, adm, 1, wnRestoreTopic); err != nil {
		return nil, err
	}
	entries := make([]statestore.Entry, n)
	for i := range entries {
		entries[i] = statestore.Entry{Key: windowStoreKey(benchKey(i%wnKeys), int64(i/wnKeys)*wnWindow), Value: benchValue(i)}
	}
	p := &producer{cl: cl}
	for _, e := range entries {
		p.send(ctx, &kgo.Record{Topic: wnRestoreTopic, Partition: 0, Key: e.Key, Value: e.Value})
	}
	if acked, err := p.flush(ctx); err != nil || acked != int64(n) {
		return nil, fmt.Errorf("loading changelog: %d of %d acknowledged: %v", acked, n, err)
	}
	root, err := os.MkdirTemp("", "eddybench-window-restore-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)

	nn := int64(n)
	runs, err := alternate(cfg,
		side{"runtime.RestoreStore → NewSegmentedStore(OpenBadger)", func(i int) (float64, error) {
			dir := filepath.Join(root, fmt.Sprintf("window-%d", i))
			defer os.RemoveAll(dir)
			d, err := restoreWindowStore(ctx, addrs, dir, opts, nn, cfg.restoreBatch)
			return rate(nn, d), err
		}},
		side{"bare badger WriteBatch", func(i int) (float64, error) {
			dir := filepath.Join(root, fmt.Sprintf("bare-%d", i))
			defer os.RemoveAll(dir)
			d, err := bareBadgerWrite(dir, entries)
			return rate(nn, d), err
		}})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.out, "  eddy     = as (b), into a SegmentedStore (retention %s, segment interval %s) over a badger\n"+
		"             store with DefaultBadgerOptions; the last record is then read back through a WindowStore.\n"+
		"  baseline = (b)'s: one badger WriteBatch of the same keys and values.\n",
		time.Duration(opts.Retention)*time.Millisecond, time.Duration(interval)*time.Millisecond)
	return []row{ratioRow("(w2) window-store restore", "records/s", runs[0], runs[1], 0.8)}, nil
}

// restoreWindowStore restores the changelog of (w2) into a fresh window
// store and checks its last record through a WindowStore.
func restoreWindowStore(ctx context.Context, addrs []string, dir string, opts statestore.WindowOptions, want int64, batch int) (time.Duration, error) {
	inner, err := statestore.OpenBadger(dir, statestore.DefaultBadgerOptions())
	if err != nil {
		return 0, err
	}
	store, err := statestore.NewSegmentedStore(inner, opts)
	if err != nil {
		inner.Close()
		return 0, err
	}
	defer store.Close()
	d, err := restoreInto(ctx, addrs, wnRestoreTopic, store, want, batch)
	if err != nil {
		return 0, err
	}
	ws, err := statestore.NewWindowStore(store, opts)
	if err != nil {
		return 0, err
	}
	last := int(want) - 1
	v, found, err := ws.Get(benchKey(last%wnKeys), int64(last/wnKeys)*wnWindow)
	if err != nil || !found || string(v) != string(benchValue(last)) {
		return 0, fmt.Errorf("restored window store lacks record %d: found=%v err=%v", last, found, err)
	}
	return d, nil
}

// benchWindowRetention is (w3): a window store written directly, by
// batches of wnBatch records with advancing times, for wnRetentions
// retention periods. The event time is synthetic: one retention period
// is cfg.windowRecords/wnRetentions records, however long they take.
func benchWindowRetention(ctx context.Context, cfg *config) ([]row, error) {
	n := cfg.windowRecords
	// wnKeys keys × 10 one-minute windows live at a time.
	opts := statestore.WindowOptions{Retention: 10 * wnWindow, WindowSize: wnWindow}
	span := wnRetentions * opts.Retention
	fmt.Fprintf(cfg.out, "\n(w3) window store under a steady stream: %d records, %d keys, one-minute windows, retention %s (segments of %s), %d retention periods\n",
		n, min(n, wnKeys), time.Duration(opts.Retention)*time.Millisecond,
		time.Duration(statestore.DefaultSegmentInterval(opts.Retention))*time.Millisecond, wnRetentions)
	dir, err := os.MkdirTemp("", "eddybench-window-retention-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	inner, err := statestore.OpenBadger(dir, statestore.DefaultBadgerOptions())
	if err != nil {
		return nil, err
	}
	store, err := statestore.NewSegmentedStore(inner, opts)
	if err != nil {
		inner.Close()
		return nil, err
	}
	defer store.Close()

	type sample struct {
		at         int64 // event time, in retention periods × wnSamplesPer
		disk, heap int64
	}
	var samples []sample
	take := func(step int64) error {
		disk, err := diskUse(dir)
		if err != nil {
			return err
		}
		// A collection first, so the figure is the live heap, not
		// garbage the collector has not reached yet.
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		samples = append(samples, sample{at: step, disk: disk, heap: int64(ms.HeapAlloc)})
		return nil
	}
	start := time.Now()
	step := span / (wnRetentions * wnSamplesPer)
	next := step
	batch := make([]statestore.Entry, 0, wnBatch)
	for i := range n {
		ts := int64(i) * span / int64(n)
		for ts >= next {
			if len(batch) > 0 {
				if err := store.Write(batch, int64(i-1)); err != nil {
					return nil, err
				}
				batch = batch[:0]
			}
			if err := take(next / step); err != nil {
				return nil, err
			}
			next += step
		}
		batch = append(batch, statestore.Entry{Key: windowStoreKey(benchKey(i%wnKeys), ts-ts%wnWindow), Value: benchValue(i)})
		if len(batch) == wnBatch || i == n-1 {
			if err := store.Write(batch, int64(i)); err != nil {
				return nil, err
			}
			batch = batch[:0]
		}
		if i%wnBatch == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	if err := take(next / step); err != nil {
		return nil, err
	}
	elapsed := time.Since(start)

	// The latest record is held; a window a whole retention older is not.
	ws, err := statestore.NewWindowStore(store, opts)
	if err != nil {
		return nil, err
	}
	lastTS := int64(n-1) * span / int64(n)
	if v, found, err := ws.Get(benchKey((n-1)%wnKeys), lastTS-lastTS%wnWindow); err != nil || !found || string(v) != string(benchValue(n-1)) {
		return nil, fmt.Errorf("latest window not read back: found=%v err=%v", found, err)
	}
	if _, found, err := ws.Get(benchKey(0), 0); err != nil || found {
		return nil, fmt.Errorf("window at time 0 still held after %d retention periods (err %v)", wnRetentions, err)
	}

	var ref sample
	var series []string
	for _, s := range samples {
		if s.at == wnSamplesPer {
			ref = s
		}
		series = append(series, fmt.Sprintf("%.1f/%.1f", float64(s.disk)/(1<<20), float64(s.heap)/(1<<20)))
	}
	last := samples[len(samples)-1]
	fmt.Fprintf(cfg.out, "  %d records written in %s (%s records/s), %d per Write\n", n, elapsed.Round(time.Millisecond), fmtNum(rate(int64(n), elapsed)), wnBatch)
	fmt.Fprintf(cfg.out, "  disk/heap MiB every retention/%d of event time:\n", wnSamplesPer)
	for i := 0; i < len(series); i += 2 * wnSamplesPer {
		fmt.Fprintf(cfg.out, "    %s\n", strings.Join(series[i:min(i+2*wnSamplesPer, len(series))], "  "))
	}
	fmt.Fprintf(cfg.out, "  method   = statestore.NewSegmentedStore over OpenBadger(DefaultBadgerOptions); disk is the blocks\n"+
		"             allocated to the store's directory (du), heap the Go heap after a collection (the whole\n"+
		"             process, which holds nothing else). Disk: the last sample against the sample after\n"+
		"             the first retention period (target ≤ %.2f×, i.e. flat). Heap: the last period's peak\n"+
		"             against the second's, since badger allocates its second memtable and its pooled\n"+
		"             table-build buffers (fixed sizes, from its options) at its first memtable flush, which\n"+
		"             comes when the memtable fills, not at a retention period; the last sample against the\n"+
		"             one after the first period is shown as info.\n", wnFlatTolerance)
	flat := func(name string, last, ref int64) row {
		return row{name: name, unit: "MiB", eddy: float64(last) / (1 << 20), base: float64(ref) / (1 << 20),
			target: fmt.Sprintf("≤ %.2f×", wnFlatTolerance), hasCheck: true,
			pass: ref > 0 && float64(last) <= wnFlatTolerance*float64(ref)}
	}
	// Memtable flushes and compactions make both series saw-toothed, so
	// one sample against another says little; each period's peak shows
	// whether the teeth grow.
	peaks := make([]sample, wnRetentions)
	for _, s := range samples[1:] {
		p := min(int((s.at-1)/wnSamplesPer), wnRetentions-1)
		peaks[p].disk, peaks[p].heap = max(peaks[p].disk, s.disk), max(peaks[p].heap, s.heap)
	}
	var pd, ph []string
	for _, p := range peaks {
		pd = append(pd, fmt.Sprintf("%.1f", float64(p.disk)/(1<<20)))
		ph = append(ph, fmt.Sprintf("%.1f", float64(p.heap)/(1<<20)))
	}
	fmt.Fprintf(cfg.out, "  peak per retention period, MiB: disk %s; heap %s\n", strings.Join(pd, " "), strings.Join(ph, " "))
	second, final := peaks[min(1, wnRetentions-1)], peaks[wnRetentions-1]
	info := func(name string, last, ref int64) row {
		return row{name: name, unit: "MiB", eddy: float64(last) / (1 << 20), base: float64(ref) / (1 << 20), target: "info"}
	}
	return []row{
		flat(fmt.Sprintf("(w3) window store disk, %d× retention", wnRetentions), last.disk, ref.disk),
		flat(fmt.Sprintf("(w3) Go heap, peak of period %d / 2nd", wnRetentions), final.heap, second.heap),
		info("(w3) … disk, peak of last / 2nd period", final.disk, second.disk),
		info("(w3) … heap, last / after 1st period", last.heap, ref.heap),
	}, nil
}

// diskUse is the space allocated to the files under dir, as du counts it:
// badger preallocates and truncates files, so their lengths would say
// less than the disk holds.
func diskUse(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil // removed by a compaction while walking
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		total += st.Blocks * 512
		return nil
	})
	return total, err
}

package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

const (
	restoreTopic = "bench-restore-changelog"
	restoreApp   = "bench-restore"
	restoreInput = "bench-restore-in"
	restoreStore = "counts"
)

// benchKey is the i-th key of a restore or RSS run: 10 bytes, distinct for
// i < 10^9.
func benchKey(i int) []byte { return fmt.Appendf(make([]byte, 0, 10), "k%09d", i) }

// benchValue is an 8-byte value, the size of a count.
func benchValue(i int) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(i)) }

// benchRestore is benchmark (b).
func benchRestore(ctx context.Context, cfg *config) ([]row, error) {
	n := cfg.records
	fmt.Fprintf(cfg.out, "\n(b) restore: %d records (10-byte keys, 8-byte values), in-process broker\n", n)
	if cfg.restoreBatch > 0 {
		fmt.Fprintf(cfg.out, "  experiment: RestoreConfig.MaxBatchRecords = %d\n", cfg.restoreBatch)
	}
	// The broker stands in for a Kafka cluster on other machines. Its
	// compaction (every 30 s by default) walks the whole changelog on the
	// goroutine that answers fetches, holding them up for 0.2 s on an idle
	// machine and seconds on a busy one, in whichever run it falls; the
	// changelog's keys are distinct, so it would remove nothing.
	b, err := broker.Start(broker.Config{Partitions: 1, CompactionInterval: time.Hour})
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
	if err := createCompacted(ctx, adm, 1, restoreTopic); err != nil {
		return nil, err
	}
	entries := make([]statestore.Entry, n)
	for i := range entries {
		entries[i] = statestore.Entry{Key: benchKey(i), Value: benchValue(i)}
	}
	loadStart := time.Now()
	p := &producer{cl: cl}
	for _, e := range entries {
		p.send(ctx, &kgo.Record{Topic: restoreTopic, Partition: 0, Key: e.Key, Value: e.Value})
	}
	if acked, err := p.flush(ctx); err != nil || acked != int64(n) {
		return nil, fmt.Errorf("loading changelog: %d of %d acknowledged: %v", acked, n, err)
	}
	cfg.logf("wrote %d records to %s[0] in %s", n, restoreTopic, time.Since(loadStart).Round(time.Millisecond))

	root, err := os.MkdirTemp("", "eddybench-restore-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)

	// Each side takes a second or two, so a burst of load from elsewhere
	// on the machine would skew a single pair: they alternate.
	var eddyCPU, bareCPU spread
	timed := func(prof string, i int, cpus *spread, f func() (time.Duration, error)) (float64, error) {
		stopProf, err := profile(cfg.profileDir, fmt.Sprintf("%s-%d", prof, i))
		if err != nil {
			return 0, err
		}
		c0 := processCPU()
		d, err := f()
		if i > 0 {
			*cpus = append(*cpus, (processCPU() - c0).Seconds())
		}
		stopProf()
		return rate(int64(n), d), err
	}
	sides := []side{
		{"runtime.RestoreStore", func(i int) (float64, error) {
			dir := filepath.Join(root, fmt.Sprintf("reader-%d", i))
			// The directories hold ~100 MiB each at the default size.
			defer os.RemoveAll(dir)
			return timed("restore-reader", i, &eddyCPU, func() (time.Duration, error) {
				return restoreWithReader(ctx, addrs, dir, int64(n), cfg.restoreBatch)
			})
		}},
		{"bare badger WriteBatch", func(i int) (float64, error) {
			dir := filepath.Join(root, fmt.Sprintf("bare-%d", i))
			defer os.RemoveAll(dir)
			return timed("restore-bare", i, &bareCPU, func() (time.Duration, error) { return bareBadgerWrite(dir, entries) })
		}},
	}
	if cfg.e2e {
		if err := loadAppChangelog(ctx, cfg, adm, cl); err != nil {
			return nil, fmt.Errorf("App restore: %w", err)
		}
		sides = append(sides, side{fmt.Sprintf("App, %d tasks", cfg.tasks), func(i int) (float64, error) {
			dir := filepath.Join(root, fmt.Sprintf("app-%d", i))
			defer os.RemoveAll(dir)
			d, restored, err := restoreWithApp(ctx, cfg, addrs, dir)
			return rate(restored, d), err
		}})
	}
	runs, err := alternate(cfg, sides...)
	if err != nil {
		return nil, err
	}
	entries = nil
	fmt.Fprintf(cfg.out, "  CPU time of the process (user+sys, for a loaded machine), medians: reader %.3f s, bare %.3f s; bare/reader %.3f×\n",
		eddyCPU.median(), bareCPU.median(), bareCPU.median()/eddyCPU.median())
	fmt.Fprintf(cfg.out, "  eddy     = runtime.RestoreStore on an opened store, timed as it reports (Duration)\n"+
		"             (end-offset listing, fetches from the broker, store writes of ≤ %d records + position).\n"+
		"  baseline = badger.Open with the options OpenBadger derives from DefaultBadgerOptions, then one\n"+
		"             NewWriteBatch: Set every record (already in memory), Flush. Opening and closing are untimed.\n",
		readerBatchRecords)
	rows := []row{ratioRow("(b) restore", "records/s", runs[0], runs[1], 0.8)}
	if cfg.e2e {
		fmt.Fprintf(cfg.out, "  App      = a fresh App restoring a wiped state dir, %d records over %d tasks, timed from\n"+
			"             App.Start to every task running; includes topic checks and the group join.\n", n, cfg.tasks)
		rows = append(rows, infoRow(fmt.Sprintf("(b) … App, %d tasks", cfg.tasks), "records/s", runs[2], runs[1]))
	}
	return rows, nil
}

// restoreWithReader restores the changelog into a fresh store with
// runtime.RestoreStore and returns how long that took.
func restoreWithReader(ctx context.Context, addrs []string, dir string, want int64, batch int) (time.Duration, error) {
	store, err := statestore.OpenBadger(dir, statestore.DefaultBadgerOptions())
	if err != nil {
		return 0, err
	}
	defer store.Close()
	return restoreInto(ctx, addrs, restoreTopic, store, want, batch)
}

// bareBadgerWrite writes entries into a new badger DB with one WriteBatch,
// using exactly the badger options a Store opened with the default options
// gets, and returns how long the writes took.
func bareBadgerWrite(dir string, entries []statestore.Entry) (time.Duration, error) {
	opts, err := storeBadgerOptions(dir + "-probe")
	if err != nil {
		return 0, err
	}
	return bareWriteBatch(opts, dir, entries)
}

// storeBadgerOptions returns the badger options OpenBadger uses with the
// default options. They are captured through the Tune hook rather than
// rebuilt here, so the baseline cannot drift from the store's settings.
func storeBadgerOptions(probeDir string) (badger.Options, error) {
	return badgerOptionsOf(statestore.DefaultBadgerOptions(), probeDir)
}

// loadAppChangelog fills the changelog of restoreWithApp's Count store
// directly: one record per key, as a store with one update per key would
// have logged it.
func loadAppChangelog(ctx context.Context, cfg *config, adm *kadm.Client, cl *kgo.Client) error {
	parts := int32(cfg.tasks)
	clTopic := changelogTopic(restoreApp, restoreStore)
	if err := createTopics(ctx, adm, parts, restoreInput); err != nil {
		return err
	}
	if err := createCompacted(ctx, adm, parts, clTopic); err != nil {
		return err
	}
	one, _ := serde.Int64.Encode(1)
	p := &producer{cl: cl}
	for i := range cfg.records {
		k := benchKey(i)
		p.send(ctx, &kgo.Record{Topic: clTopic, Partition: topology.Partition(k, parts), Key: k, Value: one})
	}
	if acked, err := p.flush(ctx); err != nil || acked != int64(cfg.records) {
		return fmt.Errorf("loading changelog: %d of %d acknowledged: %v", acked, cfg.records, err)
	}
	return nil
}

// restoreWithApp times a whole App restoring loadAppChangelog's changelog
// into the empty state directory dir, from Start to every task running.
func restoreWithApp(ctx context.Context, cfg *config, addrs []string, dir string) (time.Duration, int64, error) {
	parts := int32(cfg.tasks)
	bld := topology.NewBuilder()
	topology.Stream(bld, restoreInput, serde.Bytes, serde.Bytes).GroupByKey(serde.Bytes, serde.Bytes).Count(restoreStore)
	topo, err := bld.Build()
	if err != nil {
		return 0, 0, err
	}
	app, err := runtime.New(topo, runtime.Config{ApplicationID: restoreApp, Brokers: addrs, StateDir: dir, StoreLayout: cfg.layout, Logger: cfg.log})
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	if err := app.Start(ctx); err != nil {
		return 0, 0, err
	}
	defer app.Close(context.Background())
	err = waitFor(ctx, 5*time.Millisecond, func() (bool, error) {
		select {
		case <-app.Done():
			return false, fmt.Errorf("app stopped: %v", app.Err())
		default:
		}
		ts := app.Tasks()
		if len(ts) != int(parts) {
			return false, nil
		}
		for _, t := range ts {
			if t.State != task.Running {
				return false, nil
			}
		}
		return true, nil
	})
	elapsed := time.Since(start)
	if err != nil {
		return 0, 0, err
	}
	restored := app.Stats().RestoredRecords
	if restored != int64(cfg.records) {
		return 0, 0, fmt.Errorf("restored %d records, want %d", restored, cfg.records)
	}
	k := benchKey(cfg.records - 1)
	v, found, _, err := activeGet(app, restoreStore, k)
	if err != nil || !found {
		return 0, 0, fmt.Errorf("restored store lacks key %q: found=%v err=%v", k, found, err)
	}
	if got, _ := serde.Int64.Decode(v); got != 1 {
		return 0, 0, fmt.Errorf("restored key %q holds %d, want 1", k, got)
	}
	return elapsed, restored, app.Close(ctx)
}

// processCPU is the CPU time this process has used so far, user and
// system. On a machine shared with other work a side's wall-clock time
// depends on what else runs; its CPU time much less, so the two ratios
// together say whether a slow figure is the code's or the load's.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

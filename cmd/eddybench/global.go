package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/topology"
)

const (
	globalBenchTopic  = "bench-global-customers"
	globalBenchOrders = "bench-global-orders"
	globalBenchOut    = "bench-global-out"
	globalBenchStore  = "customers"
	globalBenchParts  = 4
)

// benchGlobalRestore is benchmark (r): an App's start-up restoration of a
// global table (every partition of its topic into one badger store, each
// batch written with its partition's position) against a bare badger
// WriteBatch of the same records with the same badger options.
func benchGlobalRestore(ctx context.Context, cfg *config) ([]row, error) {
	n := cfg.records
	fmt.Fprintf(cfg.out, "\n(r) global-table restore: %d records (10-byte keys, 8-byte values) over %d partitions, in-process broker\n", n, globalBenchParts)
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
	if err := createTopics(ctx, adm, globalBenchParts, globalBenchTopic); err != nil {
		return nil, err
	}
	if err := createTopics(ctx, adm, 1, globalBenchOrders, globalBenchOut); err != nil {
		return nil, err
	}
	entries := make([]statestore.Entry, n)
	p := &producer{cl: cl}
	for i := range entries {
		k := benchKey(i)
		entries[i] = statestore.Entry{Key: k, Value: benchValue(i)}
		p.send(ctx, &kgo.Record{Topic: globalBenchTopic, Partition: topology.Partition(k, globalBenchParts), Key: k, Value: entries[i].Value})
	}
	if acked, err := p.flush(ctx); err != nil || acked != int64(n) {
		return nil, fmt.Errorf("loading the global topic: %d of %d acknowledged: %v", acked, n, err)
	}
	opts, err := badgerOptionsOf(runtime.GlobalStoreBadgerOptions(), filepath.Join(os.TempDir(), fmt.Sprintf("eddybench-global-probe-%d", os.Getpid())))
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp("", "eddybench-global-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)

	// The sides alternate, as in (b).
	var starts spread
	runs, err := alternate(cfg,
		side{"global thread restoring the table", func(i int) (float64, error) {
			stopProf, err := profile(cfg.profileDir, fmt.Sprintf("global-restore-%d", i))
			if err != nil {
				return 0, err
			}
			dir := filepath.Join(root, fmt.Sprintf("app-%d", i))
			defer os.RemoveAll(dir)
			d, whole, err := globalRestoreWithApp(ctx, cfg, addrs, dir, i, int64(n))
			stopProf()
			if i > 0 {
				starts = append(starts, rate(int64(n), whole))
			}
			return rate(int64(n), d), err
		}},
		side{"bare badger WriteBatch", func(i int) (float64, error) {
			dir := filepath.Join(root, fmt.Sprintf("bare-%d", i))
			defer os.RemoveAll(dir)
			d, err := bareWriteBatch(opts, dir, entries)
			return rate(int64(n), d), err
		}})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.out, "  App.Start, restoration included: median %s records/s, %s\n", fmtNum(starts.median()), starts)
	fmt.Fprintf(cfg.out, "  eddy     = App.GlobalRestoreDuration of a fresh App on an empty state directory: from the registration\n"+
		"             of every partition to the last reaching its end offset (end-offset listing, fetches of every\n"+
		"             partition, store writes of each batch + its partition's position); App.Start adds its topic\n"+
		"             checks and round trips (info).\n"+
		"  baseline = badger.Open with runtime.GlobalStoreBadgerOptions, then one NewWriteBatch: Set every record\n"+
		"             (already in memory), Flush. Opening and closing are untimed.\n")
	return []row{
		ratioRow("(r) global-table restore", "records/s", runs[0], runs[1], 0.8),
		infoRow("(r) … App.Start", "records/s", starts, runs[1]),
	}, nil
}

// globalRestoreWithApp starts a fresh instance of a topology joining a
// stream with the global table, checks what it restored, and returns how
// long the restoration and the whole Start took.
func globalRestoreWithApp(ctx context.Context, cfg *config, addrs []string, dir string, run int, want int64) (restore, whole time.Duration, err error) {
	bld := topology.NewBuilder()
	g := topology.GlobalTable(bld, globalBenchTopic, serde.Bytes, serde.Bytes, globalBenchStore)
	orders := topology.Stream(bld, globalBenchOrders, serde.Bytes, serde.Bytes)
	topology.JoinGlobal(orders, g, func(_, v []byte) []byte { return v }, func(v, gv []byte) []byte { return gv }).To(globalBenchOut, serde.Bytes, serde.Bytes)
	topo, err := bld.Build()
	if err != nil {
		return 0, 0, err
	}
	app, err := runtime.New(topo, runtime.Config{ApplicationID: fmt.Sprintf("bench-global-%d", run), Brokers: addrs, StateDir: dir, Logger: cfg.log})
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	err = app.Start(ctx)
	whole = time.Since(start)
	if err != nil {
		return 0, 0, err
	}
	defer app.Close(context.Background())
	if got := app.Stats().GlobalRestoredRecords; got != want {
		return 0, 0, fmt.Errorf("restored %d records, want %d", got, want)
	}
	k := benchKey(int(want) - 1)
	v, found, _, err := activeGet(app, globalBenchStore, k)
	if err != nil || !found || string(v) != string(benchValue(int(want)-1)) {
		return 0, 0, fmt.Errorf("restored store lacks key %q: found=%v err=%v", k, found, err)
	}
	return app.Stats().GlobalRestoreDuration, whole, app.Close(ctx)
}

// badgerOptionsOf returns the badger options OpenBadger derives from bo,
// captured through its Tune hook.
func badgerOptionsOf(bo statestore.BadgerOptions, probeDir string) (badger.Options, error) {
	var got badger.Options
	bo.Tune = func(o badger.Options) badger.Options { got = o; return o }
	s, err := statestore.OpenBadger(probeDir, bo)
	if err != nil {
		return got, err
	}
	return got, errors.Join(s.Close(), statestore.DestroyBadger(probeDir))
}

// bareWriteBatch writes entries into a new badger DB opened with opts in
// one WriteBatch and returns how long the writes took.
func bareWriteBatch(opts badger.Options, dir string, entries []statestore.Entry) (time.Duration, error) {
	db, err := badger.Open(opts.WithDir(dir).WithValueDir(dir))
	if err != nil {
		return 0, err
	}
	defer db.Close()
	start := time.Now()
	wb := db.NewWriteBatch()
	defer wb.Cancel()
	for _, e := range entries {
		if err := wb.Set(e.Key, e.Value); err != nil {
			return 0, err
		}
	}
	if err := wb.Flush(); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

const (
	jnCustomers = "bench-join-customers"
	jnOrders    = "bench-join-orders"
	jnTable     = "customers"
	jnCounts    = "counts"
)

// jnCustomerN customers make the table; jnOrderN orders, each for a
// customer drawn uniformly, make the stream. Variables only so that the
// smoke test can shrink them.
var (
	jnCustomerN = 100_000
	jnOrderN    = 2_000_000
)

// jnCustomerKey and jnCustomerValue are customer i's key and table value;
// jnOrderValue is order i's value. The join's output for an order is
// jnJoined of the two values.
func jnCustomerKey(i int) string   { return fmt.Sprintf("customer-%06d", i) }
func jnCustomerValue(i int) string { return fmt.Sprintf("name-%06d|region-%d|tier-%d", i, i%17, i%3) }
func jnOrderValue(i int) string    { return fmt.Sprintf("order-%08d|amount-%d", i, i%9973) }
func jnJoined(order, customer string) string {
	return order + "|" + customer
}

// benchJoin is benchmark (j), not run by default: a stream–table Join of
// jnOrderN orders with a table of jnCustomerN customers against the
// key-value Count of the same orders by customer (target ≥ 0.7×). Both are
// Apps with the same configuration, timed from their first stream record
// until their group has committed the end of the orders topic; under
// at-least-once that commit comes only after every output is
// acknowledged. Each join App first loads the table in a run of its own
// before the orders exist (then stops cleanly), so that every order finds
// its customer whatever order the task reads its two partitions in, and
// the timed run measures the join rather than the table's loading. Count
// and join runs alternate (see alternate).
func benchJoin(ctx context.Context, cfg *config) ([]row, error) {
	fmt.Fprintf(cfg.out, "\n(j) stream–table join vs key-value count: %d orders, %d customers (uniform), %d partitions, in-process broker\n",
		jnOrderN, jnCustomerN, cfg.tasks)
	outs := []string{}
	for i := range cfg.runs + 1 {
		outs = append(outs, fmt.Sprintf("bench-join-enriched-%d", i), fmt.Sprintf("bench-join-counts-%d", i))
	}
	addrs, cl, adm, closeAll, err := startBenchBroker(ctx, int32(cfg.tasks), append([]string{jnCustomers, jnOrders}, outs...)...)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	root, err := os.MkdirTemp("", "eddybench-join-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)

	loadStart := time.Now()
	p := &producer{cl: cl}
	for i := range jnCustomerN {
		p.send(ctx, &kgo.Record{Topic: jnCustomers, Key: []byte(jnCustomerKey(i)), Value: []byte(jnCustomerValue(i))})
	}
	if acked, err := p.flush(ctx); err != nil || acked != int64(jnCustomerN) {
		return nil, fmt.Errorf("loading customers: %d of %d acknowledged: %v", acked, jnCustomerN, err)
	}
	cfg.logf("loaded %d customers into %s in %s", jnCustomerN, jnCustomers, time.Since(loadStart).Round(time.Millisecond))

	// Each join run's App loads the table now, while there are no orders.
	for i := range cfg.runs + 1 {
		start := time.Now()
		if err := jnPreload(ctx, cfg, adm, addrs, i, filepath.Join(root, fmt.Sprintf("join-%d", i))); err != nil {
			return nil, fmt.Errorf("loading the table of join run %d: %w", i, err)
		}
		cfg.logf("join run %d: table loaded in %s", i, time.Since(start).Round(time.Millisecond))
	}

	loadStart = time.Now()
	rng := rand.New(rand.NewPCG(cfg.seed, 0x6a6f696e))
	orderCustomer := make([]int32, jnOrderN)
	counts := make([]int64, jnCustomerN)
	for i := range jnOrderN {
		c := rng.IntN(jnCustomerN)
		orderCustomer[i] = int32(c)
		counts[c]++
		p.send(ctx, &kgo.Record{Topic: jnOrders, Key: []byte(jnCustomerKey(c)), Value: []byte(jnOrderValue(i))})
	}
	if acked, err := p.flush(ctx); err != nil || acked != int64(jnCustomerN+jnOrderN) {
		return nil, fmt.Errorf("loading orders: %d of %d acknowledged: %v", acked-int64(jnCustomerN), jnOrderN, err)
	}
	cfg.logf("loaded %d orders into %s in %s", jnOrderN, jnOrders, time.Since(loadStart).Round(time.Millisecond))

	n := int64(jnOrderN)
	runs, err := alternate(cfg,
		side{"key-value count", func(i int) (float64, error) {
			d, err := jnRunCount(ctx, cfg, adm, addrs, i, filepath.Join(root, fmt.Sprintf("count-%d", i)), counts)
			return rate(n, d), err
		}},
		side{"join", func(i int) (float64, error) {
			d, err := jnRunJoin(ctx, cfg, adm, addrs, i, filepath.Join(root, fmt.Sprintf("join-%d", i)), orderCustomer, i == 0)
			return rate(n, d), err
		}})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.out, "  both = runtime App, %d stream thread(s), at-least-once, commit interval %s, default cache, badger\n"+
		"         stores; string keys (15 bytes) and values (orders ~27 bytes, customers ~28 bytes).\n"+
		"  join  = Table(%s, store %q, loaded before the timed run) and\n"+
		"         Stream(%s) → Join → To (one output per order, checked: all of them,\n"+
		"         and every value in the warm-up run).\n"+
		"  count = Stream(%s) → GroupByKey → Count(%q) → ToStream → To (100 customers' counts checked).\n"+
		"  Timed from the first order processed until the group's committed offsets reach the end of %s.\n",
		cfg.threads, runtime.DefaultCommitInterval, jnCustomers, jnTable, jnOrders, jnOrders, jnCounts, jnOrders)
	return []row{ratioRow("(j) stream–table join vs key-value count", "records/s", runs[1], runs[0], 0.7)}, nil
}

// jnApp starts an App of topo with the benchmark's configuration in dir.
func jnApp(ctx context.Context, cfg *config, addrs []string, topo *topology.Topology, appID, dir string) (*runtime.App, error) {
	app, err := runtime.New(topo, runtime.Config{ApplicationID: appID, Brokers: addrs, StateDir: dir,
		NumStreamThreads: cfg.threads, Logger: cfg.log})
	if err != nil {
		return nil, err
	}
	if err := app.Start(ctx); err != nil {
		return nil, err
	}
	return app, nil
}

// jnWaitCaughtUp waits until app's group has committed the end of topic.
func jnWaitCaughtUp(ctx context.Context, adm *kadm.Client, app *runtime.App, appID, topic string) error {
	return waitFor(ctx, 20*time.Millisecond, func() (bool, error) {
		select {
		case <-app.Done():
			return false, fmt.Errorf("app stopped: %v", app.Err())
		default:
		}
		return groupCaughtUp(ctx, adm, appID, topic)
	})
}

// jnJoinTopology is the join of orders with customers; seen counts the
// orders that reach the join and first notes when the first did.
func jnJoinTopology(out string, seen, first *atomic.Int64) (*topology.Topology, error) {
	bld := topology.NewBuilder()
	customers := topology.Table(bld, jnCustomers, serde.String, serde.String, jnTable)
	orders := topology.Stream(bld, jnOrders, serde.String, serde.String).Peek(func(_, _ string) {
		if seen.Add(1) == 1 {
			first.Store(time.Now().UnixNano())
		}
	})
	topology.Join(orders, customers, jnJoined).To(out, serde.String, serde.String)
	return bld.Build()
}

// jnPreload runs join run's App until it has read the whole customers
// topic into its table, and closes it cleanly, leaving the table in dir.
func jnPreload(ctx context.Context, cfg *config, adm *kadm.Client, addrs []string, run int, dir string) error {
	var seen, first atomic.Int64
	appID := fmt.Sprintf("bench-join-%d", run)
	topo, err := jnJoinTopology(fmt.Sprintf("bench-join-enriched-%d", run), &seen, &first)
	if err != nil {
		return err
	}
	app, err := jnApp(ctx, cfg, addrs, topo, appID, dir)
	if err != nil {
		return err
	}
	err = jnWaitCaughtUp(ctx, adm, app, appID, jnCustomers)
	if cerr := app.Close(ctx); err == nil {
		err = cerr
	}
	if err == nil && seen.Load() != 0 {
		err = fmt.Errorf("%d orders joined before any were written", seen.Load())
	}
	return err
}

// jnRunJoin restarts join run's App on its loaded table and times it over
// the orders. Every order's customer exists, so the output must hold one
// record per order; with checkValues each is read back and compared.
func jnRunJoin(ctx context.Context, cfg *config, adm *kadm.Client, addrs []string, run int, dir string, orderCustomer []int32, checkValues bool) (time.Duration, error) {
	var seen, first atomic.Int64
	appID := fmt.Sprintf("bench-join-%d", run)
	out := fmt.Sprintf("bench-join-enriched-%d", run)
	topo, err := jnJoinTopology(out, &seen, &first)
	if err != nil {
		return 0, err
	}
	app, done, err := jnTimedRun(ctx, cfg, adm, addrs, topo, appID, dir, &seen)
	if err != nil {
		return 0, err
	}
	defer app.Close(context.Background())
	if dropped := droppedJoin(app); dropped != 0 {
		return 0, fmt.Errorf("%d orders dropped by the join", dropped)
	}
	written, err := endOffsetSum(ctx, adm, out)
	if err != nil {
		return 0, err
	}
	// At-least-once allows repeats after a rebalance, never losses.
	if written < int64(jnOrderN) {
		return 0, fmt.Errorf("%d joined orders written to %s, want %d", written, out, jnOrderN)
	}
	if checkValues {
		if err := jnCheckJoined(ctx, addrs, out, orderCustomer); err != nil {
			return 0, err
		}
	}
	return done.Sub(time.Unix(0, first.Load())), app.Close(ctx)
}

// jnTimedRun starts topo as appID under a CPU profile, waits until the
// group has committed the end of the orders, and checks that every order
// went through (seen). It returns the running App, for the caller to check
// and close, and when the wait ended.
func jnTimedRun(ctx context.Context, cfg *config, adm *kadm.Client, addrs []string, topo *topology.Topology, appID, dir string, seen *atomic.Int64) (*runtime.App, time.Time, error) {
	stopProf, err := profile(cfg.profileDir, appID)
	if err != nil {
		return nil, time.Time{}, err
	}
	app, err := jnApp(ctx, cfg, addrs, topo, appID, dir)
	if err != nil {
		stopProf()
		return nil, time.Time{}, err
	}
	err = jnWaitCaughtUp(ctx, adm, app, appID, jnOrders)
	done := time.Now()
	stopProf()
	if err == nil && seen.Load() != int64(jnOrderN) {
		err = fmt.Errorf("%d orders went through the topology, want %d", seen.Load(), jnOrderN)
	}
	if err != nil {
		app.Close(context.Background())
		return nil, time.Time{}, err
	}
	return app, done, nil
}

// jnCheckJoined reads topic back and checks that every order appears,
// under its customer's key, joined with that customer's value.
func jnCheckJoined(ctx context.Context, addrs []string, topic string, orderCustomer []int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	got := make([]bool, len(orderCustomer))
	missing := len(orderCustomer)
	for missing > 0 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return fmt.Errorf("reading %s back with %d orders missing: %w", topic, missing, err)
		}
		var bad error
		fs.EachRecord(func(r *kgo.Record) {
			if bad != nil {
				return
			}
			var i int
			if _, err := fmt.Sscanf(string(r.Value), "order-%08d|", &i); err != nil || i < 0 || i >= len(orderCustomer) {
				bad = fmt.Errorf("unexpected output %q", r.Value)
				return
			}
			c := int(orderCustomer[i])
			if string(r.Key) != jnCustomerKey(c) || string(r.Value) != jnJoined(jnOrderValue(i), jnCustomerValue(c)) {
				bad = fmt.Errorf("order %d: got %q → %q, want %q → %q", i, r.Key, r.Value, jnCustomerKey(c), jnJoined(jnOrderValue(i), jnCustomerValue(c)))
				return
			}
			if !got[i] {
				got[i] = true
				missing--
			}
		})
		if bad != nil {
			return bad
		}
	}
	return nil
}

// jnRunCount times the key-value count of the orders by customer in a
// fresh App and checks 100 customers' counts.
func jnRunCount(ctx context.Context, cfg *config, adm *kadm.Client, addrs []string, run int, dir string, counts []int64) (time.Duration, error) {
	var seen, first atomic.Int64
	appID := fmt.Sprintf("bench-join-count-%d", run)
	bld := topology.NewBuilder()
	topology.Stream(bld, jnOrders, serde.String, serde.String).Peek(func(_, _ string) {
		if seen.Add(1) == 1 {
			first.Store(time.Now().UnixNano())
		}
	}).GroupByKey(serde.String, serde.String).Count(jnCounts).ToStream().
		To(fmt.Sprintf("bench-join-counts-%d", run), serde.String, serde.Int64)
	topo, err := bld.Build()
	if err != nil {
		return 0, err
	}
	app, done, err := jnTimedRun(ctx, cfg, adm, addrs, topo, appID, dir, &seen)
	if err != nil {
		return 0, err
	}
	defer app.Close(context.Background())
	checkCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for c := 0; c < jnCustomerN; c += jnCustomerN / 100 {
		if counts[c] == 0 {
			continue // a customer without orders has no count
		}
		var lastErr error
		err := waitFor(checkCtx, 10*time.Millisecond, func() (bool, error) {
			v, found, _, err := activeGet(app, jnCounts, []byte(jnCustomerKey(c)))
			if err != nil || !found {
				lastErr = fmt.Errorf("found=%v err=%v", found, err)
				return false, nil
			}
			if got, _ := serde.Int64.Decode(v); got != counts[c] {
				return false, fmt.Errorf("customer %d counted %d, want %d", c, got, counts[c])
			}
			return true, nil
		})
		if err != nil {
			return 0, fmt.Errorf("customer %d: %w (last read: %v)", c, err, lastErr)
		}
	}
	return done.Sub(time.Unix(0, first.Load())), app.Close(ctx)
}

// droppedJoin sums the stream records the app's tasks dropped from their
// joins for a null key or value.
func droppedJoin(app *runtime.App) (n int64) {
	for _, t := range app.Tasks() {
		n += t.DroppedJoin
	}
	return n
}

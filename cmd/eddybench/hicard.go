package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/topology"
)

const (
	hcInput        = "bench-hicard-keys"
	hcBaseOut      = "bench-hicard-base"
	hcEddyOut      = "bench-hicard-counts"
	hcFloorOut     = "bench-hicard-floor"
	hcFloorLog     = "bench-hicard-floor-changelog"
	hcApp          = "bench-hicard"
	hcStore        = "counts"
	hcFloorStores  = "store-%02d"
	hcFloorGroupID = hcApp + "-floor"
)

// benchHighCardinality is benchmark (m): counting --keys distinct keys
// (one record each, so every record creates a key in a badger store)
// against a bare consume→produce loop over the same records, the two
// alternating (see alternate).
//
// A second, informational loop (runFloor) does the least any design with
// a durable local store and a changelog must do per record; its rate
// against the baseline says how much of the target is reachable at all.
func benchHighCardinality(ctx context.Context, cfg *config) ([]row, error) {
	n := int64(cfg.keys)
	fmt.Fprintf(cfg.out, "\n(m) high-cardinality count: %d distinct keys, %d partitions, in-process broker\n", n, cfg.tasks)
	addrs, cl, adm, closeAll, err := startBenchBroker(ctx, int32(cfg.tasks), hcInput, hcEddyOut)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	loadStart := time.Now()
	p := &producer{cl: cl}
	val := []byte("x")
	for i := range cfg.keys {
		p.send(ctx, &kgo.Record{Topic: hcInput, Key: benchKey(i), Value: val})
	}
	if acked, err := p.flush(ctx); err != nil || acked != n {
		return nil, fmt.Errorf("loading keys: %d of %d acknowledged: %v", acked, n, err)
	}
	cfg.logf("loaded %d keys into %s in %s", n, hcInput, time.Since(loadStart).Round(time.Millisecond))

	var baseCPU, eddyCPU spread
	runs, err := alternate(cfg,
		side{"baseline", func(i int) (float64, error) {
			stopProf, err := profile(cfg.profileDir, fmt.Sprintf("hicard-baseline-%d", i))
			if err != nil {
				return 0, err
			}
			c0 := processCPU()
			d, err := runBaselineCopy(ctx, cfg, adm, addrs, i, n)
			if i > 0 {
				baseCPU = append(baseCPU, (processCPU() - c0).Seconds())
			}
			stopProf()
			return rate(n, d), err
		}},
		side{"eddy", func(i int) (float64, error) {
			stopProf, err := profile(cfg.profileDir, fmt.Sprintf("hicard-eddy-%d", i))
			if err != nil {
				return 0, err
			}
			c0 := processCPU()
			d, c1, err := runEddyHighCardinality(ctx, cfg, addrs, adm, n, fmt.Sprintf("%s-%d", hcApp, i))
			if i > 0 {
				eddyCPU = append(eddyCPU, (c1 - c0).Seconds())
			}
			stopProf()
			return rate(n, d), err
		}})
	if err != nil {
		return nil, err
	}
	bases, eddys := runs[0], runs[1]
	stopProf, err := profile(cfg.profileDir, "hicard-floor")
	if err != nil {
		return nil, err
	}
	c0 := processCPU()
	floor, err := runFloor(ctx, cfg, adm, addrs, n, true)
	floorCPU := processCPU() - c0
	stopProf()
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	c0 = processCPU()
	kafkaFloor, err := runFloor(ctx, cfg, adm, addrs, n, false)
	kafkaFloorCPU := processCPU() - c0
	if err != nil {
		return nil, fmt.Errorf("floor without a store: %w", err)
	}
	if stopProf, err = profile(cfg.profileDir, "hicard-eddy-in-memory"); err != nil {
		return nil, err
	}
	c0 = processCPU()
	inMem, inMemCPU, err := runEddyHighCardinality(ctx, cfg, addrs, adm, n, hcApp+"-in-memory", topology.InMemory())
	inMemCPU -= c0
	stopProf()
	if err != nil {
		return nil, fmt.Errorf("eddy in memory: %w", err)
	}

	fmt.Fprintf(cfg.out, "  floor:    %s records/s (%s; informational, run after the measured runs)\n", fmtNum(rate(n, floor)), floor.Round(time.Millisecond))
	fmt.Fprintf(cfg.out, "  no store: %s records/s (%s; informational, the floor loop without its badger writes)\n", fmtNum(rate(n, kafkaFloor)), kafkaFloor.Round(time.Millisecond))
	fmt.Fprintf(cfg.out, "  eddy, in-memory store: %s records/s (%s; informational, run last; CPU %s)\n", fmtNum(rate(n, inMem)), inMem.Round(time.Millisecond), inMemCPU.Round(time.Millisecond))
	baseMedian := baseCPU.median()
	fmt.Fprintf(cfg.out, "  CPU time of the process (user+sys, for a loaded machine): baseline median %.3f s, eddy median %.3f s, floor %s, no store %s; baseline over eddy %.3f×, floor %.3f×, no store %.3f×\n",
		baseMedian, eddyCPU.median(), floorCPU.Round(time.Millisecond), kafkaFloorCPU.Round(time.Millisecond),
		baseMedian/eddyCPU.median(), baseMedian/floorCPU.Seconds(), baseMedian/kafkaFloorCPU.Seconds())
	fmt.Fprintf(cfg.out, "  baseline = one kgo group client: poll, produce key→value per record to a fresh topic (linger %s);\n"+
		"             every %s and at the end flush the producer, then commit. Timed from its first record to\n"+
		"             the final commit.\n"+
		"  eddy     = runtime App, %d stream thread(s), defaults; Stream → GroupByKey → Count(%q, badger) →\n"+
		"             ToStream → %s. Timed from its first record until the group's committed offsets reach\n"+
		"             the input's end (the runtime commits only after stores and outputs hold the records).\n",
		wcLinger, wcCommitPeriod, cfg.threads, hcStore, hcEddyOut)
	fmt.Fprintf(cfg.out, "  floor    = informational, not a target: one kgo group client and badger laid out as the stores are\n"+
		"             (--store-layout %s, %d partitions); per record Set key→count in its partition's WriteBatch, produce one\n"+
		"             changelog record and one output record; every %s and at the end flush the WriteBatches\n"+
		"             and the producer, then commit. No read of the key's old count, no cache, no position\n"+
		"             record. Timed like the baseline.\n"+
		"  no store = informational: the floor loop without badger, so only what Kafka must carry per record\n"+
		"             (one record in, a changelog record and an output record out); no durable store can beat it.\n"+
		"  eddy, in-memory store = informational: eddy's topology with Count(%q, InMemory()): changelogged\n"+
		"             like the badger store and restored from its changelog on every start, no local files.\n",
		cfg.layout, cfg.tasks, wcCommitPeriod, hcStore)
	return []row{
		ratioRow("(m) count, distinct keys", "records/s", eddys, bases, 0.35),
		infoRow("(m) info: floor loop vs baseline", "records/s", spread{rate(n, floor)}, bases),
		infoRow("(m) info: eddy vs floor loop", "records/s", eddys, spread{rate(n, floor)}),
		infoRow("(m) info: no-store loop vs baseline", "records/s", spread{rate(n, kafkaFloor)}, bases),
		infoRow("(m) info: eddy in-memory store vs baseline", "records/s", spread{rate(n, inMem)}, bases),
	}, nil
}

// runFloor is the informational floor of (m): the least any design with a
// durable local store and a changelog must do per record. It consumes the
// input with a group of its own; per record it sets the key in a badger
// WriteBatch of the record's partition and produces one changelog record
// and one output record; periodically, and at the end, it flushes the
// WriteBatches and the producer and commits. The partitions' keys go to one
// DB opened with the shared layout's options, each under a prefix of its
// own, or with --store-layout per-store to a DB per partition opened with
// a store's options, as Eddy's stores are laid out. It returns the time
// from the first record to the final commit. Without withStore it opens no
// badger DB and writes nothing locally: what is left is the Kafka traffic a
// changelogged count cannot avoid.
func runFloor(ctx context.Context, cfg *config, adm *kadm.Client, addrs []string, n int64, withStore bool) (time.Duration, error) {
	if err := createTopics(ctx, adm, int32(cfg.tasks), hcFloorLog, hcFloorOut); err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp("", "eddybench-hicard-floor-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	shared := cfg.layout != runtime.StoreLayoutPerStore
	bo := statestore.DefaultBadgerOptions()
	if shared {
		bo = statestore.DefaultSharedBadgerOptions()
	}
	opts, err := badgerOptionsOf(bo, filepath.Join(dir, "probe"))
	if err != nil {
		return 0, err
	}
	// dbs[p] is partition p's DB: one for all of them when shared.
	dbs := make([]*badger.DB, cfg.tasks)
	defer func() {
		for i, db := range dbs {
			if db != nil && (i == 0 || !shared) {
				db.Close()
			}
		}
	}()
	for i := range dbs {
		if !withStore {
			break
		}
		if shared && i > 0 {
			dbs[i] = dbs[0]
			continue
		}
		d := filepath.Join(dir, fmt.Sprintf(hcFloorStores, i))
		if dbs[i], err = badger.Open(opts.WithDir(d).WithValueDir(d)); err != nil {
			return 0, err
		}
	}
	cl, err := loopClient(addrs, fmt.Sprintf("%s-store-%v", hcFloorGroupID, withStore), hcInput, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	p := &producer{cl: cl}
	count := binary.BigEndian.AppendUint64(nil, 1) // every key is counted once
	wbs := make([]*badger.WriteBatch, cfg.tasks)
	var (
		consumed int64
		first    time.Time
		setErr   error
	)
	lastCommit := time.Now()
	commit := func() error {
		for i, wb := range wbs {
			if wb == nil {
				continue
			}
			wbs[i] = nil
			if err := wb.Flush(); err != nil {
				return err
			}
		}
		if _, err := p.flush(ctx); err != nil {
			return err
		}
		lastCommit = time.Now()
		return cl.CommitUncommittedOffsets(ctx)
	}
	for consumed < n {
		fs, err := poll(ctx, cl)
		if err != nil {
			return 0, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			if consumed == 0 {
				first = time.Now()
			}
			consumed++
			if withStore {
				wb := wbs[r.Partition]
				if wb == nil {
					wb = dbs[r.Partition].NewWriteBatch()
					wbs[r.Partition] = wb
				}
				// The WriteBatch keeps the key until it commits; the
				// fetched record is never reused.
				key := r.Key
				if shared {
					key = binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(r.Key)), uint32(r.Partition))
					key = append(key, r.Key...)
				}
				if err := wb.Set(key, count); err != nil && setErr == nil {
					setErr = err
				}
			}
			p.send(ctx, &kgo.Record{Topic: hcFloorLog, Partition: r.Partition, Key: r.Key, Value: count})
			p.send(ctx, &kgo.Record{Topic: hcFloorOut, Partition: r.Partition, Key: r.Key, Value: count})
		})
		if setErr != nil {
			return 0, setErr
		}
		if time.Since(lastCommit) >= wcCommitPeriod {
			if err := commit(); err != nil {
				return 0, err
			}
		}
	}
	if err := commit(); err != nil {
		return 0, err
	}
	d := time.Since(first)
	if acked, _ := p.flush(ctx); acked != 2*n || consumed != n {
		return 0, fmt.Errorf("consumed %d records, %d acked, want %d and %d", consumed, acked, n, 2*n)
	}
	cfg.logf("floor run (store %v): %s", withStore, d.Round(time.Millisecond))
	_, err = adm.DeleteTopics(ctx, hcFloorLog, hcFloorOut)
	return d, err
}

// runBaselineCopy consumes the input with a group of its own and produces
// every record unchanged to a fresh topic, committing once what it
// produced is acknowledged; it returns the time from the first record to
// the final commit.
func runBaselineCopy(ctx context.Context, cfg *config, adm *kadm.Client, addrs []string, run int, n int64) (time.Duration, error) {
	out := fmt.Sprintf("%s-%d", hcBaseOut, run)
	if err := createTopics(ctx, adm, int32(cfg.tasks), out); err != nil {
		return 0, err
	}
	cl, err := loopClient(addrs, fmt.Sprintf("%s-base-%d", hcApp, run), hcInput, kgo.DefaultProduceTopic(out))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	p := &producer{cl: cl}
	var consumed int64
	var first time.Time
	lastCommit := time.Now()
	commit := func() error {
		if _, err := p.flush(ctx); err != nil {
			return err
		}
		lastCommit = time.Now()
		return cl.CommitUncommittedOffsets(ctx)
	}
	for consumed < n {
		fs, err := poll(ctx, cl)
		if err != nil {
			return 0, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			if consumed == 0 {
				first = time.Now()
			}
			consumed++
			p.send(ctx, &kgo.Record{Key: r.Key, Value: r.Value})
		})
		if time.Since(lastCommit) >= wcCommitPeriod {
			if err := commit(); err != nil {
				return 0, err
			}
		}
	}
	if err := commit(); err != nil {
		return 0, err
	}
	d := time.Since(first)
	if acked, _ := p.flush(ctx); acked != n || consumed != n {
		return 0, fmt.Errorf("consumed %d records, %d acked, want %d", consumed, acked, n)
	}
	cfg.logf("baseline run %d: %s", run, d.Round(time.Millisecond))
	_, err = adm.DeleteTopics(ctx, out)
	return d, err
}

// runEddyHighCardinality counts the input's keys with an App and returns
// the time from its first record until its group has committed the end of
// the input, and the process's CPU time then (see processCPU). It then
// checks a sample of counts and the output's size.
func runEddyHighCardinality(ctx context.Context, cfg *config, addrs []string, adm *kadm.Client, n int64, appID string, opts ...topology.Option) (d, cpu time.Duration, err error) {
	writtenBefore, err := endOffsetSum(ctx, adm, hcEddyOut)
	if err != nil {
		return 0, 0, err
	}
	// Timed from the first record, as the baseline is, so that the group
	// join counts against neither.
	var first, seen atomic.Int64
	bld := topology.NewBuilder()
	src := topology.Stream(bld, hcInput, serde.Bytes, serde.Bytes).Peek(func(_, _ []byte) {
		if seen.Add(1) == 1 {
			first.Store(time.Now().UnixNano())
		}
	})
	src.GroupByKey(serde.Bytes, serde.Bytes).Count(hcStore, opts...).ToStream().To(hcEddyOut, serde.Bytes, serde.Int64)
	topo, err := bld.Build()
	if err != nil {
		return 0, 0, err
	}
	app, done, stop, err := runCaughtUp(ctx, cfg, adm, addrs, topo, appID, hcInput)
	cpu = processCPU()
	if err != nil {
		return 0, 0, err
	}
	defer stop()
	start := time.Unix(0, first.Load())
	// A rebalance between the App's threads may still be moving tasks
	// (a task in transit is hosted nowhere for a moment), so a sampled
	// key that cannot be read yet is retried for a while.
	checkCtx, cancelCheck := context.WithTimeout(ctx, 30*time.Second)
	defer cancelCheck()
	for i := 0; i < int(n); i += max(1, int(n)/1000) {
		var lastErr error
		err := waitFor(checkCtx, 10*time.Millisecond, func() (bool, error) {
			v, found, _, err := activeGet(app, hcStore, benchKey(i))
			if err != nil || !found {
				lastErr = fmt.Errorf("found=%v err=%v", found, err)
				return false, nil
			}
			if c, _ := serde.Int64.Decode(v); c != 1 {
				return false, fmt.Errorf("key %d counted %d times, want 1", i, c)
			}
			return true, nil
		})
		if err != nil {
			return 0, 0, fmt.Errorf("key %d: %w (last read: %v)", i, err, lastErr)
		}
	}
	written, err := endOffsetSum(ctx, adm, hcEddyOut)
	if err != nil {
		return 0, 0, err
	}
	if written-writtenBefore < n {
		return 0, 0, fmt.Errorf("%d counts written to %s, want at least %d", written-writtenBefore, hcEddyOut, n)
	}
	if s := seen.Load(); s != n {
		return 0, 0, fmt.Errorf("%d records went through the topology, want %d", s, n)
	}
	return done.Sub(start), cpu, app.Close(ctx)
}

// runCaughtUp starts an App of topo in a temporary state directory and
// waits until its group has committed the end of every partition of input.
// It returns the App, still running, with when that was seen; stop closes
// the App and removes its directory.
func runCaughtUp(ctx context.Context, cfg *config, adm *kadm.Client, addrs []string, topo *topology.Topology, appID, input string) (app *runtime.App, done time.Time, stop func(), err error) {
	dir, err := os.MkdirTemp("", "eddybench-"+appID+"-")
	if err != nil {
		return nil, time.Time{}, nil, err
	}
	app, err = runtime.New(topo, runtime.Config{ApplicationID: appID, Brokers: addrs, StateDir: dir,
		NumStreamThreads: cfg.threads, StoreLayout: cfg.layout, Logger: cfg.log})
	if err == nil {
		err = app.Start(ctx)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, time.Time{}, nil, err
	}
	stop = func() {
		app.Close(context.Background())
		os.RemoveAll(dir)
	}
	err = waitFor(ctx, 20*time.Millisecond, func() (bool, error) {
		select {
		case <-app.Done():
			return false, fmt.Errorf("app stopped: %v", app.Err())
		default:
		}
		return groupCaughtUp(ctx, adm, appID, input)
	})
	done = time.Now()
	if err != nil {
		stop()
		return nil, time.Time{}, nil, err
	}
	return app, done, stop, nil
}

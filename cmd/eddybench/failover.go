package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// processedAt remembers, per partition, when an instance last processed a
// record: the benchmark's probe for "the new active processed a record".
type processedAt struct {
	mu   sync.Mutex
	last map[int32]time.Time
}

func (p *processedAt) mark(partition int32) {
	p.mu.Lock()
	p.last[partition] = time.Now()
	p.mu.Unlock()
}

func (p *processedAt) get(partition int32) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last[partition]
}

// failoverTopology counts keys of "fo-in", marking every processed record
// in probe. Each record's value names its partition, so a Peek (which keeps
// the key, and so needs no repartition) can tell where it came from.
func failoverTopology(probe *processedAt) (*topology.Topology, error) {
	b := topology.NewBuilder()
	s := topology.Stream(b, "fo-in", serde.String, serde.String)
	s.Peek(func(_, v string) {
		if p, err := strconv.Atoi(v); err == nil {
			probe.mark(int32(p))
		}
	}).GroupByKey(serde.String, serde.String).Count("fo-counts")
	return b.Build()
}

// benchFailover measures issue 3's failover: two instances with one standby
// each under steady input; the instance holding a partition's active is
// killed (network cut, no leave, no commit) and the time until the other
// instance processes a record of that partition is compared with the
// session timeout. It also compares the records the new active restored
// with the standby's lag at the moment of the kill. Each run starts a
// broker and both instances anew; a warm-up run is dropped (see
// alternate).
func benchFailover(ctx context.Context, cfg *config) ([]row, error) {
	fmt.Fprintf(cfg.out, "\n(d) failover: session timeout %s\n", cfg.sessionTimeout)
	var restored, lags spread
	runs, err := alternate(cfg, side{"failover time (ms)", func(i int) (float64, error) {
		took, rest, lag, err := failoverRun(ctx, cfg)
		if i > 0 {
			restored, lags = append(restored, float64(rest)), append(lags, float64(lag))
		}
		return float64(took.Milliseconds()), err
	}})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.out, "  method = two instances, one standby each, 1 record/ms/partition; Kill() cuts the instance's network\n"+
		"           (no leave-group, no commit); the new active's first processed record is seen by a probe processor.\n")
	limit := cfg.sessionTimeout + time.Second
	rest := infoRow("(d) records restored", "records", restored, lags)
	rest.target, rest.hasCheck, rest.pass = "≤ standby lag", true, true
	for i := range restored {
		rest.pass = rest.pass && lags[i] >= 0 && restored[i] <= lags[i]
	}
	return []row{
		runsRow("(d) failover time", "ms", runs[0], fmt.Sprintf("≤ %d ms", limit.Milliseconds()),
			func(s spread) bool { return s.median() <= float64(limit.Milliseconds()) }),
		rest,
	}, nil
}

// failoverRun is one run of (d): the time from the kill to the first
// record processed by the new active, the records it restored and the
// standby's lag at the kill.
func failoverRun(ctx context.Context, cfg *config) (took time.Duration, restored, lagAtKill int64, err error) {
	const partitions = 4
	b, err := broker.Start(broker.Config{Partitions: partitions, GroupMinSessionTimeout: 100 * time.Millisecond})
	if err != nil {
		return 0, 0, 0, err
	}
	defer b.Close()
	addrs := b.Addrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		return 0, 0, 0, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if err := createTopics(ctx, adm, partitions, "fo-in"); err != nil {
		return 0, 0, 0, err
	}
	dir, err := os.MkdirTemp("", "eddybench-failover-")
	if err != nil {
		return 0, 0, 0, err
	}
	defer os.RemoveAll(dir)

	type inst struct {
		app   *runtime.App
		probe *processedAt
	}
	start := func(name string) (*inst, error) {
		probe := &processedAt{last: make(map[int32]time.Time)}
		topo, err := failoverTopology(probe)
		if err != nil {
			return nil, err
		}
		app, err := runtime.New(topo, runtime.Config{
			ApplicationID:  "failover",
			Brokers:        addrs,
			StateDir:       dir + "/" + name,
			NumStandbys:    1,
			SessionTimeout: cfg.sessionTimeout,
			Endpoint:       "127.0.0.1:" + strconv.Itoa(20000+len(name)),
			Logger:         cfg.log.With("instance", name),
		})
		if err != nil {
			return nil, err
		}
		return &inst{app: app, probe: probe}, app.Start(ctx)
	}
	a, err := start("a")
	if err != nil {
		return 0, 0, 0, err
	}
	defer a.app.Close(context.Background())
	bb, err := start("bb")
	if err != nil {
		return 0, 0, 0, err
	}
	defer bb.app.Close(context.Background())

	// Steady input on every partition until the end.
	feedCtx, stopFeed := context.WithCancel(ctx)
	defer stopFeed()
	var feed sync.WaitGroup
	feed.Add(1)
	go func() {
		defer feed.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-feedCtx.Done():
				return
			case <-tick.C:
			}
			for p := range int32(partitions) {
				cl.Produce(feedCtx, &kgo.Record{Topic: "fo-in", Partition: p, Key: []byte("k" + strconv.Itoa(i%5000)), Value: []byte(strconv.Itoa(int(p)))}, nil)
			}
		}
	}()
	defer feed.Wait()

	// Settle: every partition has a running active and an updating standby
	// on the other instance, the standby close behind.
	counts := task.ID{SubTopology: 0}
	var victim *inst
	var survivor *inst
	var part int32
	err = waitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		roles := map[int32]map[*inst]runtime.ReplicaInfo{}
		for _, in := range []*inst{a, bb} {
			for _, ri := range in.app.Replicas() {
				if ri.Store != "fo-counts" {
					continue
				}
				if roles[ri.Partition] == nil {
					roles[ri.Partition] = map[*inst]runtime.ReplicaInfo{}
				}
				roles[ri.Partition][in] = ri
			}
		}
		for p := range int32(partitions) {
			ra, rb := roles[p][a], roles[p][bb]
			if ra.State == task.Running && rb.State == task.Standby && rb.Lag >= 0 && rb.Lag < 5000 {
				victim, survivor, part = a, bb, p
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return 0, 0, 0, fmt.Errorf("cluster did not settle: %w", err)
	}
	counts.Partition = part
	// Let the standby run in step for a moment, as it would in production.
	time.Sleep(2 * time.Second)
	lagAtKill = -1
	for _, ri := range survivor.app.Replicas() {
		if ri.Task == counts && ri.State == task.Standby {
			lagAtKill = ri.Lag
		}
	}
	killed := time.Now()
	victim.app.Kill()
	cfg.logf("killed the instance holding partition %d's active; standby lag at the kill %d records", part, lagAtKill)

	err = waitFor(ctx, 5*time.Millisecond, func() (bool, error) {
		if t := survivor.probe.get(part); t.After(killed) {
			took = t.Sub(killed)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return 0, 0, 0, fmt.Errorf("survivor never processed partition %d: %w", part, err)
	}
	for _, ri := range survivor.app.Replicas() {
		if ri.Task == counts {
			restored = ri.Restored
		}
	}
	stopFeed()
	cfg.logf("partition %d: standby lag at the kill %d, records restored by the new active %d", part, lagAtKill, restored)
	return took, restored, lagAtKill, nil
}

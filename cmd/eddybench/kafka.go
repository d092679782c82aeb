package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
)

// createTopics creates plain (delete-policy) topics and fails if any
// already exists: every benchmark starts on fresh topics.
func createTopics(ctx context.Context, adm *kadm.Client, partitions int32, names ...string) error {
	resp, err := adm.CreateTopics(ctx, partitions, -1, nil, names...)
	if err != nil {
		return fmt.Errorf("create topics %v: %w", names, err)
	}
	return resp.Error()
}

// createCompacted creates a compacted topic, as the runtime creates a
// changelog, and fails if it already exists.
func createCompacted(ctx context.Context, adm *kadm.Client, partitions int32, name string) error {
	compact := "compact"
	resp, err := adm.CreateTopics(ctx, partitions, -1, map[string]*string{"cleanup.policy": &compact}, name)
	if err != nil {
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	return resp.Error()
}

// changelogTopic names the changelog of a store of an application, as
// topology.StoreInfo documents it.
func changelogTopic(app, store string) string { return app + "-" + store + "-changelog" }

// producer sends records asynchronously and remembers the first failure.
type producer struct {
	cl    *kgo.Client
	mu    sync.Mutex
	acked int64
	err   error
}

func (p *producer) send(ctx context.Context, r *kgo.Record) {
	p.cl.Produce(ctx, r, p.done)
}

func (p *producer) done(_ *kgo.Record, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		if p.err == nil {
			p.err = err
		}
		return
	}
	p.acked++
}

// flush waits for every record sent so far and returns how many were
// acknowledged in all, or the first failure.
func (p *producer) flush(ctx context.Context) (int64, error) {
	err := p.cl.Flush(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.acked, errors.Join(err, p.err)
}

// endOffsetSum sums the end offsets of a topic's partitions: the number of
// records ever written to it.
func endOffsetSum(ctx context.Context, adm *kadm.Client, topic string) (int64, error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	if err := ends.Error(); err != nil {
		return 0, err
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n, nil
}

// profile starts a CPU profile and a block profile of one timed phase,
// written to dir as name.pprof and name-block.pprof, if dir is set, and
// returns the function that stops them. The block profile shows where
// goroutines wait (for a flush, a poll, a lock), which the CPU profile
// cannot.
func profile(dir, name string) (stop func(), err error) {
	if dir == "" {
		return func() {}, nil
	}
	f, err := os.Create(filepath.Join(dir, name+".pprof"))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	runtime.SetBlockProfileRate(int(10 * time.Microsecond))
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		if bf, err := os.Create(filepath.Join(dir, name+"-block.pprof")); err == nil {
			_ = pprof.Lookup("block").WriteTo(bf, 0)
			bf.Close()
		}
		// Allocations, like block events, accumulate over the process's
		// life, so a later phase's file includes earlier phases too: read
		// it against the previous phase's (pprof -base) or focused on the
		// phase's own goroutines (e.g. -focus 'thread\).iteration').
		if af, err := os.Create(filepath.Join(dir, name+"-allocs.pprof")); err == nil {
			_ = pprof.Lookup("allocs").WriteTo(af, 0)
			af.Close()
		}
		runtime.SetBlockProfileRate(0)
	}, nil
}

// startBenchBroker starts an embedded broker whose topics have partitions
// partitions, with a client and an admin client on it, and creates topics.
// closeAll closes the client and the broker.
func startBenchBroker(ctx context.Context, partitions int32, topics ...string) (addrs []string, cl *kgo.Client, adm *kadm.Client, closeAll func(), err error) {
	b, err := broker.Start(broker.Config{Partitions: partitions})
	if err != nil {
		return nil, nil, nil, nil, err
	}
	addrs = b.Addrs()
	cl, err = kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		b.Close()
		return nil, nil, nil, nil, err
	}
	closeAll = func() { cl.Close(); b.Close() }
	adm = kadm.NewClient(cl)
	if err := createTopics(ctx, adm, partitions, topics...); err != nil {
		closeAll()
		return nil, nil, nil, nil, err
	}
	return addrs, cl, adm, closeAll, nil
}

// loopClient is the client of a bare loop: a member of group consuming
// topic from its start with manual commits, producing with the stream
// threads' linger, plus opts.
func loopClient(addrs []string, group, topic string, opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(addrs...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.ProducerLinger(wcLinger),
	}, opts...)...)
}

// poll fetches once and returns the fetches, or the context's error or the
// fetch errors of every partition joined.
func poll(ctx context.Context, cl *kgo.Client) (kgo.Fetches, error) {
	fs := cl.PollFetches(ctx)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var ferr error
	fs.EachError(func(t string, part int32, err error) {
		ferr = errors.Join(ferr, fmt.Errorf("%s/%d: %w", t, part, err))
	})
	return fs, ferr
}

package runtimetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// A broker restart that lands on a commit is an ordinary fault: the stream
// thread cannot learn what became of the commit, so it drops its
// uncommitted work and starts again from the group's committed offsets
// once the broker is back, as Kafka Streams does on a task migration. The
// instance keeps running; under exactly-once every record is counted and
// sent exactly once, under at-least-once at least once and at most once
// more for each record that followed the last commit.
func TestBrokerRestartAtCommitKeepsTheInstance(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		guarantee runtime.ProcessingGuarantee
		// at is the request the broker goes down at.
		at kmsg.Key
	}{
		{runtime.AtLeastOnce, kmsg.OffsetCommit},
		// The broker goes down with the transaction open, its records
		// written: the restarted broker aborts it and bumps the
		// producer's epoch.
		{runtime.ExactlyOnce, kmsg.TxnOffsetCommit},
		{runtime.ExactlyOnce, kmsg.EndTxn},
	} {
		t.Run(tc.guarantee.String()+"/"+tc.at.Name(), func(t *testing.T) {
			t.Parallel() // each has a broker of its own, and mostly waits
			testBrokerRestartAtCommit(t, tc.guarantee, tc.at)
		})
	}
}

// brokerDownFor is how long the broker stays down, about what a restart
// takes.
const brokerDownFor = 1500 * time.Millisecond

func testBrokerRestartAtCommit(t *testing.T, guarantee runtime.ProcessingGuarantee, at kmsg.Key) {
	dataDir := t.TempDir()
	// The restarted broker runs on a copy of the data taken when the
	// commit's request arrived, as a broker killed at that moment would
	// find it: the request is never answered, and a transaction open then
	// is aborted at the restart.
	crashDir := t.TempDir()
	var mu sync.Mutex
	var b *broker.Broker
	current := func() *broker.Broker {
		mu.Lock()
		defer mu.Unlock()
		return b
	}
	start := func(listen, dir string) {
		nb, err := broker.Start(broker.Config{Listen: listen, DataDir: dir, Partitions: 2, CompactionInterval: time.Hour})
		require.NoError(t, err)
		mu.Lock()
		b = nb
		mu.Unlock()
	}
	start("", dataDir)
	t.Cleanup(func() { current().Close() })
	addr := current().Addrs()[0]

	admCl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	require.NoError(t, err)
	t.Cleanup(admCl.Close)
	_, err = kadm.NewClient(admCl).CreateTopics(context.Background(), 2, -1, nil, "in", "out")
	require.NoError(t, err)

	bld := topology.NewBuilder()
	s := topology.Stream(bld, "in", serde.String, serde.String)
	s.To("out", serde.String, serde.String)
	s.GroupByKey(serde.String, serde.String).Count("counts")
	topo, err := bld.Build()
	require.NoError(t, err)

	const keys = 10
	sent := make(map[string]int64)
	produce := func(n int) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("in"))
		require.NoError(t, err)
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		for i := range n {
			k := fmt.Sprintf("k%d", i%keys)
			sent[k]++
			cl.Produce(ctx, &kgo.Record{Key: []byte(k), Value: []byte("v")}, nil)
		}
		require.NoError(t, cl.Flush(ctx))
	}

	app, err := runtime.New(topo, runtime.Config{ApplicationID: "brokerrestart", Brokers: []string{addr}, StateDir: t.TempDir(),
		NumStreamThreads: 1, ProcessingGuarantee: guarantee, CommitInterval: 100 * time.Millisecond,
		// The restarted broker keeps the thread's member until its
		// session runs out, which a thread rejoining with a new member
		// waits for; the session still outlasts brokerDownFor.
		SessionTimeout: 3 * time.Second, HeartbeatInterval: 500 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	t.Cleanup(func() { app.Close(context.Background()) })
	q := iq.NewQuerier(app.Queries())
	counts := func() map[string]int64 {
		out := make(map[string]int64)
		for k := range sent {
			r, err := iq.Get[string, int64](context.Background(), q, "counts", k, serde.String, serde.Int64)
			if err == nil && r.Found {
				out[k] = r.Value
			}
		}
		return out
	}
	countedAll := func() bool {
		c := counts()
		for k, n := range sent {
			if c[k] < n {
				return false
			}
		}
		return true
	}

	produce(300)
	waitFor(t, 60*time.Second, "the first records counted", countedAll)
	atFirstRestart := make(map[string]int64)
	for k, n := range sent {
		atFirstRestart[k] = n
	}

	// The broker goes down at the commit's request; it comes back on its
	// data a moment later, as a restarted broker would.
	var once sync.Once
	down, up := make(chan struct{}), make(chan struct{})
	cluster := current().Cluster()
	cluster.ControlKey(int16(at), func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		once.Do(func() {
			// Control functions run on the broker's only goroutine
			// that writes its data: the copy is of a broker at rest.
			crashDir = filepath.Join(crashDir, "data")
			if err := os.CopyFS(crashDir, os.DirFS(dataDir)); err != nil {
				t.Errorf("copy the broker's data: %v", err)
			}
			go func() {
				current().Close()
				close(down)
				time.Sleep(brokerDownFor)
				start(addr, crashDir)
				close(up)
			}()
		})
		return nil, errors.New("broker going down"), true
	})
	produce(300)
	for _, ch := range []chan struct{}{down, up} {
		select {
		case <-ch:
		case <-time.After(60 * time.Second):
			t.Fatal("the broker was never restarted: no commit reached it")
		}
	}
	produce(300)
	waitFor(t, 120*time.Second, "every record counted after the restart", func() bool {
		return app.Err() != nil || (countedAll() && app.State() == runtime.StateRunning)
	})
	require.NoError(t, app.Err(), "the instance stopped")

	got := counts()
	for k, n := range sent {
		if guarantee == runtime.ExactlyOnce {
			require.Equal(t, n, got[k], "key %s counted exactly once", k)
			continue
		}
		// What followed the last commit before the restart may be
		// counted twice, nothing more.
		require.LessOrEqual(t, got[k], n+(n-atFirstRestart[k]), "key %s counted at most twice", k)
	}
	if guarantee != runtime.ExactlyOnce {
		return
	}
	// Read the whole of "out" as a read-committed consumer, markers
	// included, up to its end: the idle thread holds no open transaction.
	ends, err := kadm.NewClient(admCl).ListEndOffsets(context.Background(), "out")
	require.NoError(t, err)
	left := make(map[int32]int64)
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	rd, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("out"), kgo.KeepControlRecords(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	t.Cleanup(rd.Close)
	out := make(map[string]int64)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(left) > 0 {
		fs := rd.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "reading out, partitions left: %v", left)
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				out[string(r.Key)]++
			}
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
		})
	}
	require.Equal(t, sent, out, "the output holds every input record once")
}

// Under exactly-once, a producer that cannot begin a transaction — its
// producer ID request refused, as a broker restarted under a transaction
// answers an old epoch — is replaced by a new one, as Kafka Streams
// replaces a producer with a fatal error, and the instance keeps running:
// every record is still counted exactly once.
func TestExactlyOnceProducerThatCannotBeginIsReplaced(t *testing.T) {
	t.Parallel()
	b, _ := startBroker(t, "in")
	const keys, each = 10, 30
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic("in"))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			cl.Produce(context.Background(), &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%keys), Value: []byte("v")}, nil)
		}
		require.NoError(t, cl.Flush(context.Background()))
	}
	produce(0, keys*each/2)

	app, err := runtime.New(countTopology(t), runtime.Config{ApplicationID: "cannotbegin", Brokers: b.Addrs(), StateDir: t.TempDir(),
		NumStreamThreads: 1, ProcessingGuarantee: runtime.ExactlyOnce, CommitInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	t.Cleanup(func() { app.Close(context.Background()) })
	q := iq.NewQuerier(app.Queries())
	counted := func() (total, hi int64) {
		for k := range keys {
			r, err := iq.Get[string, int64](context.Background(), q, "counts", fmt.Sprintf("k%d", k), serde.String, serde.Int64)
			if err == nil && r.Found {
				total += r.Value
				hi = max(hi, r.Value)
			}
		}
		return total, hi
	}
	waitFor(t, 60*time.Second, "the first half counted", func() bool {
		n, _ := counted()
		return n == keys*each/2
	})

	// The next transaction cannot end, so the thread starts again with a
	// new producer; that producer's ID request is refused once.
	endTxn := b.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.InvalidTxnState})
	t.Cleanup(endTxn.Remove)
	initPID := b.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.InitProducerID}, Err: kerr.ProducerFenced, TopLevel: true})
	t.Cleanup(initPID.Remove)
	produce(keys*each/2, keys*each)
	waitFor(t, 60*time.Second, "every record counted after the producer was replaced", func() bool {
		n, _ := counted()
		return app.Err() != nil || initPID.Hits() >= 1 && n == keys*each && app.State() == runtime.StateRunning
	})
	require.NoError(t, app.Err(), "the instance stopped")
	_, hi := counted()
	require.Equal(t, int64(each), hi, "exactly once: no key counted more than it was sent")
}

package runtime

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/serde"
)

// eosCluster is a broker with an input topic of keys to count.
type eosCluster struct {
	b   *broker.Broker
	adm *kadm.Client
	cl  *kgo.Client
}

func newEOSCluster(t *testing.T) *eosCluster {
	b, err := broker.Start(broker.Config{Partitions: 2})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic("in"))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	_, err = adm.CreateTopics(context.Background(), 2, -1, nil, "in")
	require.NoError(t, err)
	return &eosCluster{b: b, adm: adm, cl: cl}
}

// produce sends n records over keys k0..k9 and returns the true count of
// each key.
func (c *eosCluster) produce(t *testing.T, n int, want map[string]int64) {
	for i := range n {
		k := "k" + strconv.Itoa(i%10)
		want[k]++
		c.cl.Produce(context.Background(), &kgo.Record{Key: []byte(k), Value: []byte("v")}, nil)
	}
	require.NoError(t, c.cl.Flush(context.Background()))
}

func (c *eosCluster) start(t *testing.T, dir string) *App {
	app, err := New(countTopology(t), Config{
		ApplicationID: "eos", Brokers: c.b.Addrs(), StateDir: dir,
		ProcessingGuarantee: ExactlyOnce, SessionTimeout: 2 * time.Second,
		NumStreamThreads: testThreads(t),
	})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	return app
}

func counts(app *App) map[string]int64 {
	out := map[string]int64{}
	for i := range 10 {
		k := "k" + strconv.Itoa(i)
		v, found, _, err := activeGet(app, "counts", []byte(k))
		if err != nil || !found {
			continue
		}
		n, _ := serde.Int64.Decode(v)
		out[k] = n
	}
	return out
}

func waitCounts(t *testing.T, app *App, want map[string]int64) {
	t.Helper()
	waitFor(t, 20*time.Second, fmt.Sprintf("counts %v", want), func() bool {
		got := counts(app)
		for k, n := range want {
			if got[k] != n {
				return false
			}
		}
		return true
	})
}

// A commit interrupted before its transaction commits, or after it commits
// but before the stores are written, loses nothing and repeats nothing; the
// restart keeps the local state and restores only the tail.
func TestExactlyOnceCrashDuringCommit(t *testing.T) {
	for _, step := range []string{"before-commit", "after-commit"} {
		t.Run(step, func(t *testing.T) {
			c := newEOSCluster(t)
			dir := t.TempDir()
			want := map[string]int64{}
			app := c.start(t, dir)
			c.produce(t, 200, want)
			waitCounts(t, app, want)

			var armed atomic.Bool
			crash := func(s string) bool { return s == step && armed.Load() }
			crashAt.Store(&crash)
			defer crashAt.Store(nil)
			armed.Store(true)
			c.produce(t, 50, want)
			waitFor(t, 20*time.Second, "the crash", func() bool {
				return !app.State().IsRunningOrRebalancing() || slices.ContainsFunc(app.threads, func(th *thread) bool { return th.killed.Load() })
			})
			app.Kill()
			crashAt.Store(nil)
			restoredBefore := int64(0)

			app = c.start(t, dir)
			defer app.Close(context.Background())
			waitCounts(t, app, want)
			for _, ti := range app.Tasks() {
				restoredBefore += ti.Restored
			}
			// The store kept its committed state: at most the crashed
			// commit's writes (one per key, ten keys) come back from the
			// changelog, never the whole history.
			require.LessOrEqual(t, restoredBefore, int64(10), "restart restores only the tail")
			c.produce(t, 30, want)
			waitCounts(t, app, want)
		})
	}
}

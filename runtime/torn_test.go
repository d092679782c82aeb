package runtime

import (
	"context"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// tearingStore, once armed, cuts a commit's store write short the way a
// crash between a torn Write's entries and its position does (see
// statestore/badgertorn.go): the first half of the entries lands under the
// store's old position, and the process dies.
type tearingStore struct {
	statestore.Store
	app   *App
	armed *atomic.Bool
	tore  *atomic.Bool
}

func (s tearingStore) Write(entries []statestore.Entry, position int64) error {
	if len(entries) < 2 || !s.armed.CompareAndSwap(true, false) {
		return s.Store.Write(entries, position)
	}
	old, err := s.Store.Position()
	if err != nil {
		return err
	}
	if err := s.Store.Write(entries[:len(entries)/2], old); err != nil {
		return err
	}
	s.app.net.sever()
	s.tore.Store(true)
	return errCrashed
}

// changelogReader follows a changelog as a restoration reading committed
// records does; poll folds what arrived into each key's latest count.
type changelogReader struct {
	cl     *kgo.Client
	counts map[string]int64
}

func newChangelogReader(t *testing.T, c *eosCluster, topic string) *changelogReader {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.b.Addrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return &changelogReader{cl: cl, counts: map[string]int64{}}
}

func (r *changelogReader) poll(t *testing.T) map[string]int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	r.cl.PollFetches(ctx).EachRecord(func(rec *kgo.Record) {
		if rec.Value == nil {
			delete(r.counts, string(rec.Key))
			return
		}
		v, _ := statestore.SplitTimestamped(rec.Value) // a count with its time
		n, err := serde.Int64.Decode(v)
		require.NoError(t, err)
		r.counts[string(rec.Key)] = n
	})
	return r.counts
}

// A commit's store write cut short between its entries and its position
// leaves the store holding part of the commit under its old position. The
// restart restores from that position over what is already there: the
// store ends up as its changelog says, under both guarantees, and under
// exactly-once the counts are exact.
func TestCrashBetweenStoreDataAndPosition(t *testing.T) {
	t.Parallel()
	for _, g := range []ProcessingGuarantee{AtLeastOnce, ExactlyOnce} {
		t.Run(g.String(), func(t *testing.T) {
			c := newEOSCluster(t)
			dir := t.TempDir()
			var armed, tore atomic.Bool
			start := func(tear bool) *App {
				app, err := New(countTopology(t), Config{
					ApplicationID: "torn", Brokers: c.b.Addrs(), StateDir: dir,
					ProcessingGuarantee: g, SessionTimeout: 2 * time.Second,
					NumStreamThreads: 1,
				})
				require.NoError(t, err)
				if tear {
					app.openStoreHook = func(_ task.ID, _ topology.StoreInfo, open func() (statestore.Store, error)) (statestore.Store, error) {
						s, err := open()
						if err != nil {
							return nil, err
						}
						return tearingStore{Store: s, app: app, armed: &armed, tore: &tore}, nil
					}
				}
				require.NoError(t, app.Start(context.Background()))
				return app
			}
			want := map[string]int64{}
			app := start(true)
			c.produce(t, 200, want)
			waitCounts(t, app, want)

			armed.Store(true)
			c.produce(t, 50, want)
			waitFor(t, 20*time.Second, "a torn store write", tore.Load)
			app.Kill()

			app = start(false)
			defer app.Close(context.Background())
			waitFor(t, 20*time.Second, "the counts", func() bool {
				got := counts(app)
				for k, n := range want {
					if got[k] < n {
						return false
					}
				}
				return true
			})
			// The stores agree with their changelog, key for key, once
			// the input is processed and committed.
			rd := newChangelogReader(t, c, changelog.TopicName("torn", "counts"))
			var got map[string]int64
			waitFor(t, 20*time.Second, "stores that agree with their changelog", func() bool {
				logged := rd.poll(t)
				got = counts(app)
				return maps.Equal(got, logged)
			})
			if g == ExactlyOnce {
				require.Equal(t, want, got, "exactly-once counts")
			}
			var restored int64
			for _, ti := range app.Tasks() {
				restored += ti.Restored
			}
			require.Positive(t, restored, "the restart restored the torn commit from the changelog")
		})
	}
}

package runtime

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// upgradeTopology is a table ("prices"), a count ("counts") and a
// one-minute tumbling count ("wcounts") of the stream "clicks". With bare
// its stores keep values without timestamps, byte for byte as builds
// before timestamped stores wrote them (Builder.BareStoreValues).
func upgradeTopology(t *testing.T, bare bool) *topology.Topology {
	t.Helper()
	b := topology.NewBuilder()
	if bare {
		b.BareStoreValues()
	}
	topology.Table(b, "prices", serde.String, serde.String, "prices")
	clicks := topology.Stream(b, "clicks", serde.String, serde.String)
	clicks.GroupByKey(serde.String, serde.String).Count("counts")
	topology.WindowedBy(clicks.GroupByKey(serde.String, serde.String), topology.TumblingWindows(time.Minute)).Count("wcounts")
	topo, err := b.Build()
	require.NoError(t, err)
	return topo
}

// upgradeState is what the upgrade test expects every store to answer.
type upgradeState struct {
	prices map[string]string
	counts map[string]int64
}

// checkUpgradeState waits until app answers every value of want from its
// active replicas: each price, each count, and each count again as the
// key's one window at time 0.
func checkUpgradeState(t *testing.T, app *App, want upgradeState, what string) {
	t.Helper()
	q := iq.NewQuerier(app.Queries())
	waitFor(t, 60*time.Second, what, func() bool {
		for k, v := range want.prices {
			got, found, _, err := activeGet(app, "prices", []byte(k))
			if err != nil || !found || string(got) != v {
				return false
			}
		}
		for k, n := range want.counts {
			got, found, _, err := activeGet(app, "counts", []byte(k))
			if err != nil || !found {
				return false
			}
			if c, err := serde.Int64.Decode(got); err != nil || c != n {
				return false
			}
			res, err := q.WindowFetchBytes(context.Background(), "wcounts", []byte(k), 0, 0)
			if err != nil || len(res.Windows) != 1 {
				return false
			}
			if c, err := serde.Int64.Decode(res.Windows[0].Value); err != nil || c != n {
				return false
			}
		}
		return true
	})
}

// readChangelog returns the latest value of each key of a changelog topic.
func readChangelog(t *testing.T, addrs []string, topic string, keys int) map[string][]byte {
	t.Helper()
	rd, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	require.NoError(t, err)
	defer rd.Close()
	latest := map[string][]byte{}
	waitFor(t, 30*time.Second, topic+" read", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		rd.PollFetches(ctx).EachRecord(func(r *kgo.Record) { latest[string(r.Key)] = r.Value })
		return len(latest) >= keys
	})
	return latest
}

// A state directory and changelogs as builds before timestamped stores
// wrote them (bare values) open under the current build with every value
// intact, whichever guarantee: the instance reopens the directory without
// restoring, reads and extends every table, count and window count, and
// an instance with an empty directory restores them all from the
// changelogs, whose older records are bare.
func TestPreTimestampStateOpensUnderTimestampedStores(t *testing.T) {
	t.Parallel()
	for _, g := range []ProcessingGuarantee{AtLeastOnce, ExactlyOnce} {
		t.Run(g.String(), func(t *testing.T) { testPreTimestampState(t, g) })
	}
}

func testPreTimestampState(t *testing.T, g ProcessingGuarantee) {
	b, _ := startBroker(t, "prices", "clicks")
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	require.NoError(t, err)
	defer cl.Close()
	produce := func(topic, key, value string, ms int64) {
		rec := &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(value), Timestamp: time.UnixMilli(ms)}
		require.NoError(t, cl.ProduceSync(context.Background(), rec).FirstErr())
	}
	want := upgradeState{prices: map[string]string{}, counts: map[string]int64{}}
	for i := range 20 {
		k := fmt.Sprintf("p%d", i)
		want.prices[k] = fmt.Sprintf("price-%d", i)
		produce("prices", k, want.prices[k], int64(100+i))
	}
	for i := range 10 {
		k := fmt.Sprintf("k%d", i)
		for j := range i + 1 {
			produce("clicks", k, "c", int64(1_000+j))
			want.counts[k]++
		}
	}
	id := "upgrade-" + g.String()
	dir := t.TempDir()
	start := func(bare bool, dir string) *App {
		app, err := New(upgradeTopology(t, bare), Config{ApplicationID: id, Brokers: b.Addrs(), StateDir: dir,
			ProcessingGuarantee: g, CommitInterval: 100 * time.Millisecond, SessionTimeout: 2 * time.Second})
		require.NoError(t, err)
		require.NoError(t, app.Start(context.Background()))
		return app
	}

	old := start(true, dir)
	checkUpgradeState(t, old, want, "the old build's state")
	require.NoError(t, old.Close(context.Background()))

	// What the old build left is the old format: bare serde bytes in the
	// changelogs and in the stores on disk.
	for store, n := range map[string]int{"prices": len(want.prices), "counts": len(want.counts)} {
		for k, v := range readChangelog(t, b.Addrs(), changelog.TopicName(id, store), n) {
			_, ts := statestore.SplitTimestamped(v)
			require.Equal(t, statestore.NoTimestamp, ts, "%s changelog, key %s: a bare value", store, k)
		}
	}
	onDisk := 0
	for _, sub := range graph.Of(upgradeTopology(t, true)).SubTopologies() {
		for _, info := range sub.Stores {
			store := info.Name
			if store != "prices" && store != "counts" {
				continue
			}
			for p := range int32(2) {
				onDisk += checkBareOnDisk(t, filepath.Join(dir, id), task.ID{SubTopology: sub.ID, Partition: p}, store, want)
			}
		}
	}
	require.Equal(t, len(want.prices)+len(want.counts), onDisk, "every value was on disk")

	// The current build opens the old directory: nothing to restore,
	// every value read as it was, and extended.
	app := start(false, dir)
	checkUpgradeState(t, app, want, "the old state read by the current build")
	require.Zero(t, app.Stats().RestoredRecords, "the old directory was opened, not rebuilt")
	produce("prices", "p0", "price-new", 5_000)
	want.prices["p0"] = "price-new"
	produce("clicks", "k0", "c", 2_000)
	want.counts["k0"]++
	checkUpgradeState(t, app, want, "the old state extended")
	res, err := iq.NewQuerier(app.Queries()).GetBytes(context.Background(), "prices", []byte("p0"))
	require.NoError(t, err)
	require.Equal(t, int64(5_000), res.Timestamp, "a value written by the current build carries its time")
	res, err = iq.NewQuerier(app.Queries()).GetBytes(context.Background(), "prices", []byte("p1"))
	require.NoError(t, err)
	require.Equal(t, "price-1", string(res.Value), "an old value is read as the old build wrote it")
	require.NoError(t, app.Close(context.Background()))

	// An empty directory is rebuilt from changelogs holding both formats.
	fresh := start(false, t.TempDir())
	defer fresh.Close(context.Background())
	checkUpgradeState(t, fresh, want, "the state restored from the mixed changelogs")
	require.Positive(t, fresh.Stats().RestoredRecords)
}

// checkBareOnDisk checks that every value of task id's store, as a closed
// instance left it in appDir (shared layout), is the bare serde encoding
// of what want expects, and returns how many values the store holds. It
// closes the database before it returns, for the next instance to open.
func checkBareOnDisk(t *testing.T, appDir string, id task.ID, store string, want upgradeState) int {
	t.Helper()
	db, err := statestore.OpenSharedBadger(filepath.Join(appDir, sharedDirName), statestore.BadgerOptions{})
	require.NoError(t, err)
	defer db.Close()
	s, err := db.Open(sharedName(id, store))
	require.NoError(t, err)
	defer s.Close()
	it, err := s.All()
	require.NoError(t, err)
	defer it.Close()
	n := 0
	for it.Next() {
		k, v := string(it.Key()), it.Value()
		if store == "prices" {
			require.Equal(t, want.prices[k], string(v), "prices on disk, key %s", k)
		} else {
			enc, err := serde.Int64.Encode(want.counts[k])
			require.NoError(t, err)
			require.Equal(t, enc, v, "counts on disk, key %s", k)
		}
		n++
	}
	require.NoError(t, it.Err())
	return n
}

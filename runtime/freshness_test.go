package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/task"
)

// While listings find nothing moved, each waits twice as long as the one
// before, up to the longest; anything moving brings the base back at once.
func TestFreshnessPaceBacksOffWhileNothingMoves(t *testing.T) {
	p := listPace{base: 500 * time.Millisecond, longest: 2 * time.Second}
	steps := []struct {
		moved bool
		want  time.Duration
	}{
		{false, 500 * time.Millisecond}, // the first wait is the base
		{false, time.Second},
		{false, 2 * time.Second},
		{false, 2 * time.Second},
		{true, 500 * time.Millisecond},
		{false, time.Second},
		{true, 500 * time.Millisecond},
		{true, 500 * time.Millisecond},
	}
	for i, s := range steps {
		require.Equal(t, s.want, p.next(s.moved), "step %d (moved %v)", i, s.moved)
	}
}

// startFreshnessApp starts a count over "in" that commits every interval
// and never early, and returns it with a producer to partition 0 of "in".
func startFreshnessApp(t *testing.T, appID string, interval time.Duration) (*App, func() int64) {
	t.Helper()
	b, _ := startBroker(t, "in")
	app, err := New(countTopology(t), Config{ApplicationID: appID, Brokers: b.Addrs(), StateDir: t.TempDir(),
		NumStreamThreads: 1, CommitInterval: interval, DrainedCommitDelay: interval})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	t.Cleanup(func() { app.Close(context.Background()) })
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic("in"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	produce := func() int64 {
		r, err := cl.ProduceSync(context.Background(), &kgo.Record{Partition: 0, Key: []byte("k"), Value: []byte("v")}).First()
		require.NoError(t, err)
		return r.Offset + 1
	}
	return app, produce
}

// A listing reports whether anything moved since the last one: the first
// sight of the partitions, an end, a commit; an idle topic's listing does
// not, which is what lets the tracker list less often.
func TestFreshnessRoundReportsWhatMoved(t *testing.T) {
	app, produce := startFreshnessApp(t, "freshmoved", 100*time.Millisecond)
	f := newFreshnessIdle(app, FreshnessInterval, FreshnessQuietInterval)
	ctx := context.Background()
	require.True(t, f.round(ctx), "the first listing sees every partition for the first time")
	waitFor(t, 30*time.Second, "a listing that finds nothing moved", func() bool { return !f.round(ctx) })

	end := produce()
	require.True(t, f.round(ctx), "the end moved")
	waitFor(t, 30*time.Second, "the record committed and seen so", func() bool {
		f.round(ctx)
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.watch(changelog.TopicPartition{Topic: "in", Partition: 0}).committed == end
	})
	require.False(t, f.round(ctx), "nothing moved since")
	at, ok := f.inputCommitted(task.ID{SubTopology: 0, Partition: 0})
	require.True(t, ok)
	require.WithinDuration(t, time.Now(), at, 5*time.Second)
}

// However far apart the listings, the time a partition's input is said to
// be committed by is never later than the truth: while a record is not
// committed, the input is covered at a time before the record came at the
// latest.
func TestFreshnessListingsApartNeverAgeShort(t *testing.T) {
	app, produce := startFreshnessApp(t, "freshhonest", 2*time.Second)
	f := newFreshnessIdle(app, FreshnessInterval, FreshnessQuietInterval)
	ctx := context.Background()
	id := task.ID{SubTopology: 0, Partition: 0}
	waitFor(t, 30*time.Second, "the partition's input covered", func() bool {
		f.round(ctx)
		_, ok := f.inputCommitted(id)
		return ok
	})

	came := time.Now()
	end := produce()
	for i := 0; ; i++ {
		if i%5 == 0 {
			f.round(ctx)
		}
		at, _ := f.inputCommitted(id)
		commits, err := app.admin.FetchOffsets(ctx, app.cfg.ApplicationID)
		require.NoError(t, err)
		if c, ok := commits.Lookup("in", 0); ok && c.At >= end {
			break
		}
		// Observed before the record was committed.
		require.True(t, at.Before(came), "input said committed by %v, the record came at %v and is not committed", at, came)
		require.Less(t, time.Since(came), 30*time.Second, "the record is never committed")
		time.Sleep(20 * time.Millisecond)
	}
	waitFor(t, 10*time.Second, "the record's commit seen", func() bool {
		f.round(ctx)
		at, _ := f.inputCommitted(id)
		return !at.Before(came)
	})
}

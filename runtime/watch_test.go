package runtime

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

// loggedChange is one committed changelog record of a key.
type loggedChange struct {
	pos   int64
	count int64
}

// committedChanges reads a key's records from a changelog partition with
// read-committed isolation, every one after position from through
// position through.
func committedChanges(t *testing.T, addrs []string, topic string, partition int32, key string, from, through int64) []loggedChange {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []loggedChange
	for {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "reading %s[%d] through %d", topic, partition, through)
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= through {
				done = true
			}
			if r.Offset <= from || r.Offset > through || r.Attrs.IsControl() || string(r.Key) != key {
				return
			}
			v, _ := statestore.SplitTimestamped(r.Value)
			n, err := serde.Int64.Decode(v)
			require.NoError(t, err)
			out = append(out, loggedChange{r.Offset, n})
		})
		if done {
			return out
		}
	}
}

// watchUntil reads updates until one carries count want, failing on any
// error.
func watchUntil(t *testing.T, w *iq.Watch, want int64) []iq.Update {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var got []iq.Update
	for {
		u, err := w.Next(ctx)
		require.NoError(t, err, "after %d updates", len(got))
		got = append(got, u)
		n, err := serde.Int64.Decode(u.Value)
		require.NoError(t, err)
		if n == want {
			return got
		}
	}
}

// requireSequence checks that updates are exactly the committed changes:
// same positions, same counts, in order.
func requireSequence(t *testing.T, got []iq.Update, want []loggedChange) {
	t.Helper()
	var seen []loggedChange
	for _, u := range got {
		n, err := serde.Int64.Decode(u.Value)
		require.NoError(t, err)
		seen = append(seen, loggedChange{u.Position, n})
	}
	require.Equal(t, want, seen)
}

// A watch of a key on its active, started from a past position, reads the
// changes its replica already holds back from the changelog, then follows
// the commits live: the delivered sequence is the key's committed
// changelog sequence after the start, with no gap and no duplicate, and
// each update names the active as its source.
func TestWatchActiveDeliversCommittedSequence(t *testing.T) {
	c := newEOSCluster(t)
	want := map[string]int64{}
	app := c.start(t, t.TempDir())
	defer app.Close(context.Background())
	for range 5 {
		c.produce(t, 40, want)
		waitCounts(t, app, want)
	}

	q := iq.NewQuerier(app.Queries())
	w, err := q.WatchBytes(context.Background(), "counts", []byte("k3"), iq.WatchOptions{From: 3})
	require.NoError(t, err)
	defer w.Close()
	// One commit per batch at least: each waits for the counts.
	for range 5 {
		c.produce(t, 100, want)
		waitCounts(t, app, want)
	}
	got := watchUntil(t, w, want["k3"])
	for _, u := range got {
		require.Equal(t, iq.RoleActive, u.Provenance.Role)
		require.Equal(t, []byte("k3"), u.Key)
	}
	p, err := app.Queries().KeyPartition("counts", []byte("k3"))
	require.NoError(t, err)
	logged := committedChanges(t, c.b.Addrs(), changelog.TopicName("eos", "counts"), p, "k3", 3, got[len(got)-1].Position)
	requireSequence(t, got, logged)
	require.GreaterOrEqual(t, len(got), 9, "changes read back and followed live")
}

// Watches receiving in a function, sharing their key's delivery
// goroutine, get what a watch read with Next gets: the changes read back,
// then those committed live, each once, in the changelog's order.
func TestWatchReceiveDeliversCommittedSequence(t *testing.T) {
	c := newEOSCluster(t)
	want := map[string]int64{}
	app := c.start(t, t.TempDir())
	defer app.Close(context.Background())
	for range 5 {
		c.produce(t, 40, want)
		waitCounts(t, app, want)
	}
	q := iq.NewQuerier(app.Queries())
	type received struct {
		mu   sync.Mutex
		got  []iq.Update
		errs []error
	}
	rs := make([]*received, 3)
	for i := range rs {
		w, err := q.WatchBytes(context.Background(), "counts", []byte("k3"), iq.WatchOptions{From: 3})
		require.NoError(t, err)
		defer w.Close()
		r := new(received)
		rs[i] = r
		w.Receive(func(u iq.Update, err error) bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			if err != nil {
				r.errs = append(r.errs, err)
			} else {
				r.got = append(r.got, u)
			}
			return true
		})
	}
	for range 5 {
		c.produce(t, 100, want)
		waitCounts(t, app, want)
	}
	p, err := app.Queries().KeyPartition("counts", []byte("k3"))
	require.NoError(t, err)
	for _, r := range rs {
		waitFor(t, 60*time.Second, "a receiving watch reaches the count", func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			if len(r.got) == 0 {
				return false
			}
			n, _ := serde.Int64.Decode(r.got[len(r.got)-1].Value)
			return n == want["k3"]
		})
		r.mu.Lock()
		got := slices.Clone(r.got)
		require.Empty(t, r.errs)
		r.mu.Unlock()
		logged := committedChanges(t, c.b.Addrs(), changelog.TopicName("eos", "counts"), p, "k3", 3, got[len(got)-1].Position)
		requireSequence(t, got, logged)
		require.GreaterOrEqual(t, len(got), 9, "changes read back and followed live")
	}
}

// A watch from now with the current value first starts with the value
// the replica holds, then every later change.
func TestWatchFromNowWithCurrentValue(t *testing.T) {
	c := newEOSCluster(t)
	want := map[string]int64{}
	app := c.start(t, t.TempDir())
	defer app.Close(context.Background())
	c.produce(t, 100, want)
	waitCounts(t, app, want)

	q := iq.NewQuerier(app.Queries())
	w, err := q.WatchBytes(context.Background(), "counts", []byte("k1"), iq.WatchOptions{From: iq.FromNow, Current: true})
	require.NoError(t, err)
	defer w.Close()
	first := watchUntil(t, w, want["k1"])
	require.Len(t, first, 1)
	require.True(t, first[0].Current)
	start := first[0].Position

	c.produce(t, 300, want)
	got := watchUntil(t, w, want["k1"])
	p, err := app.Queries().KeyPartition("counts", []byte("k1"))
	require.NoError(t, err)
	requireSequence(t, got, committedChanges(t, c.b.Addrs(), changelog.TopicName("eos", "counts"), p, "k1", start, got[len(got)-1].Position))
}

// A standby delivers the changes as it applies them from the changelog,
// in the same sequence the changelog holds, and says it is a standby.
func TestWatchStandbyDeliversAppliedChanges(t *testing.T) {
	c := newEOSCluster(t)
	want := map[string]int64{}
	start := func() *App {
		app, err := New(countTopology(t), Config{
			ApplicationID: "eos", Brokers: c.b.Addrs(), StateDir: t.TempDir(),
			ProcessingGuarantee: ExactlyOnce, SessionTimeout: 2 * time.Second,
			NumStreamThreads: 1, NumStandbys: 1,
		})
		require.NoError(t, err)
		require.NoError(t, app.Start(context.Background()))
		t.Cleanup(func() { app.Close(context.Background()) })
		return app
	}
	apps := []*App{start(), start()}
	c.produce(t, 100, want)
	key := []byte("k7")
	p, err := apps[0].Queries().KeyPartition("counts", key)
	require.NoError(t, err)
	var standby *App
	waitFor(t, 60*time.Second, "a caught-up standby of the key's partition", func() bool {
		for _, a := range apps {
			r, err := a.Queries().Replica("counts", p)
			if err != nil {
				continue
			}
			info := r.Info()
			if info.Role == iq.RoleStandby && info.Lag == 0 && info.Position > 0 {
				standby = a
				return true
			}
		}
		return false
	})
	q := iq.NewQuerier(standby.Queries())
	w, err := q.WatchBytes(context.Background(), "counts", key, iq.WatchOptions{From: iq.FromNow, Staleness: iq.MaxLag(100_000)})
	require.NoError(t, err)
	defer w.Close()
	from := w.Resume()
	for range 5 {
		c.produce(t, 100, want)
	}
	got := watchUntil(t, w, want["k7"])
	for _, u := range got {
		require.Equal(t, iq.RoleStandby, u.Provenance.Role)
	}
	requireSequence(t, got, committedChanges(t, c.b.Addrs(), changelog.TopicName("eos", "counts"), p, "k7", from, got[len(got)-1].Position))
}

// A watcher that stops reading past its buffer ends with ErrWatcherTooSlow
// and the position of its last update; a watch resumed from there goes on
// with no gap. A coalescing watcher instead skips to the latest change.
func TestWatchSlowWatcher(t *testing.T) {
	c := newEOSCluster(t)
	want := map[string]int64{}
	app := c.start(t, t.TempDir())
	defer app.Close(context.Background())
	c.produce(t, 10, want)
	waitCounts(t, app, want)
	key := []byte("k2")
	p, err := app.Queries().KeyPartition("counts", key)
	require.NoError(t, err)
	q := iq.NewQuerier(app.Queries())

	dropped, err := q.WatchBytes(context.Background(), "counts", key, iq.WatchOptions{From: iq.FromNow, Buffer: 2})
	require.NoError(t, err)
	defer dropped.Close()
	coalesced, err := q.WatchBytes(context.Background(), "counts", key, iq.WatchOptions{From: iq.FromNow, Buffer: 2, Coalesce: true})
	require.NoError(t, err)
	defer coalesced.Close()
	from := dropped.Resume()

	// One commit per batch: each waits for the counts before the next.
	for range 6 {
		c.produce(t, 10, want)
		waitCounts(t, app, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var delivered []iq.Update
	var ended *iq.WatchEndedError
	for {
		u, err := dropped.Next(ctx)
		if err != nil {
			require.ErrorAs(t, err, &ended)
			require.ErrorIs(t, err, iq.ErrWatcherTooSlow)
			break
		}
		delivered = append(delivered, u)
	}
	require.LessOrEqual(t, len(delivered), 2, "at most the buffer is delivered")
	last := from
	if len(delivered) > 0 {
		last = delivered[len(delivered)-1].Position
	}
	require.Equal(t, last, ended.Resume)

	resumed, err := q.WatchBytes(context.Background(), "counts", key, iq.WatchOptions{From: ended.Resume})
	require.NoError(t, err)
	defer resumed.Close()
	got := append(delivered, watchUntil(t, resumed, want["k2"])...)
	requireSequence(t, got, committedChanges(t, c.b.Addrs(), changelog.TopicName("eos", "counts"), p, "k2", from, got[len(got)-1].Position))

	u, err := coalesced.Next(ctx)
	require.NoError(t, err)
	require.True(t, u.Coalesced, "the first update after the overflow says changes were skipped")
	n, err := serde.Int64.Decode(u.Value)
	require.NoError(t, err)
	if n != want["k2"] {
		rest := watchUntil(t, coalesced, want["k2"])
		require.False(t, rest[len(rest)-1].Coalesced)
	}
	_, err = dropped.Next(ctx)
	require.True(t, errors.Is(err, iq.ErrWatcherTooSlow), "an ended watch stays ended")
}

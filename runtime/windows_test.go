package runtime

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/topology"
)

type sessionKey struct {
	key        string
	start, end int64
}

// sessionsOf merges each key's record times into sessions: a record joins
// every session within gap of it. No session closes in this test (grace
// exceeds the input's span), so stream time plays no part.
func sessionsOf(keys []string, times []int64, gap int64) map[sessionKey]int64 {
	type sess struct{ start, end, n int64 }
	byKey := make(map[string][]sess)
	for i, k := range keys {
		t := times[i]
		m := sess{t, t, 1}
		var keep []sess
		for _, s := range byKey[k] {
			if s.end >= t-gap && s.start <= t+gap {
				m = sess{min(m.start, s.start), max(m.end, s.end), m.n + s.n}
				continue
			}
			keep = append(keep, s)
		}
		byKey[k] = append(keep, m)
	}
	out := make(map[sessionKey]int64)
	for k, ss := range byKey {
		for _, s := range ss {
			out[sessionKey{k, s.start, s.end}] = s.n
		}
	}
	return out
}

// A session aggregation runs on session stores the runtime wraps in their
// segmented layout; its changelog is compacted and deleted by time; and a
// replacement instance with an empty state directory restores the sessions
// from the changelog and goes on merging into them.
func TestSessionCountRestoredFromChangelog(t *testing.T) {
	t.Parallel()
	const gap = 5_000
	b, adm := startBroker(t, "in", "out")
	build := func() *topology.Topology {
		tb := topology.NewBuilder()
		g := topology.Stream(tb, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
		topology.SessionWindowedBy(g, topology.NewSessionWindows(gap*time.Millisecond).Grace(time.Hour)).
			Count("sessions").ToStream().To("out", topology.SessionWindowedSerde(serde.String), serde.Int64)
		topo, err := tb.Build()
		require.NoError(t, err)
		return topo
	}
	start := func(dir string) *App {
		app, err := New(build(), Config{ApplicationID: "sessions", Brokers: b.Addrs(), StateDir: dir, CommitInterval: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		require.NoError(t, err)
		require.NoError(t, app.Start(context.Background()))
		return app
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()

	rng := rand.New(rand.NewPCG(5, 5))
	var keys []string
	var times []int64
	produce := func(n int) {
		var recs []*kgo.Record
		for range n {
			k := "k" + strconv.Itoa(rng.IntN(4))
			ts := 1_000_000 + rng.Int64N(600_000)
			keys, times = append(keys, k), append(times, ts)
			recs = append(recs, &kgo.Record{Topic: "in", Partition: 0, Key: []byte(k), Value: []byte("v"), Timestamp: time.UnixMilli(ts)})
		}
		require.NoError(t, cl.ProduceSync(context.Background(), recs...).FirstErr())
	}
	latest := make(map[sessionKey]int64)
	next := map[int32]int64{0: 0, 1: 0}
	ks := topology.SessionWindowedSerde(serde.String)
	caughtUp := func() bool {
		fetch, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"out": {0: kgo.NewOffset().At(next[0]), 1: kgo.NewOffset().At(next[1])}}),
			kgo.FetchMaxWait(100*time.Millisecond))
		require.NoError(t, err)
		defer fetch.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		fs := fetch.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			w, err := ks.Decode(r.Key)
			require.NoError(t, err)
			k := sessionKey{w.Key, w.Window.Start, w.Window.End}
			if r.Value == nil {
				delete(latest, k)
			} else {
				n, err := serde.Int64.Decode(r.Value)
				require.NoError(t, err)
				latest[k] = n
			}
			next[r.Partition] = r.Offset + 1
		})
		want := sessionsOf(keys, times, gap)
		if len(want) != len(latest) {
			if os.Getenv("DEBUG_SESS") != "" {
				for k, n := range want {
					if latest[k] != n {
						t.Logf("want %v=%d got %d", k, n, latest[k])
					}
				}
				for k, n := range latest {
					if _, ok := want[k]; !ok {
						t.Logf("extra %v=%d", k, n)
					}
				}
			}
			return false
		}
		for k, n := range want {
			if latest[k] != n {
				return false
			}
		}
		return true
	}

	a := start(t.TempDir())
	produce(400)
	waitFor(t, 60*time.Second, "the opening sessions", caughtUp)
	require.NoError(t, a.Close(context.Background()))

	// A new instance with nothing on disk restores the session store from
	// its changelog and merges into the restored sessions.
	a2 := start(t.TempDir())
	defer a2.Close(context.Background())
	produce(400)
	waitFor(t, 60*time.Second, "the merged sessions", caughtUp)

	cfgs, err := adm.DescribeTopicConfigs(context.Background(), changelog.TopicName("sessions", "sessions"))
	require.NoError(t, err)
	got := make(map[string]string)
	for _, c := range cfgs[0].Configs {
		if c.Value != nil {
			got[c.Key] = *c.Value
		}
	}
	require.Equal(t, "compact,delete", got["cleanup.policy"])
	require.Equal(t, strconv.FormatInt((time.Hour+gap*time.Millisecond+time.Millisecond+changelog.DefaultWindowedRetentionMargin).Milliseconds(), 10), got["retention.ms"])
}

// Emit-final state survives an instance: a replacement with an empty state
// directory restores the pending windows and the stream time, emits what
// the first instance left pending exactly once, and drops as late what the
// first instance's stream time had closed.
func TestEmitFinalRestoredFromChangelog(t *testing.T) {
	t.Parallel()
	b, _ := startBroker(t, "in", "out")
	ks := topology.TimeWindowedSerde(serde.String, 1000)
	build := func() *topology.Topology {
		tb := topology.NewBuilder()
		g := topology.Stream(tb, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String)
		topology.WindowedBy(g, topology.TumblingWindows(time.Second)).EmitFinal().
			Count("final").ToStream().To("out", ks, serde.Int64)
		topo, err := tb.Build()
		require.NoError(t, err)
		return topo
	}
	start := func(dir string) *App {
		app, err := New(build(), Config{ApplicationID: "final", Brokers: b.Addrs(), StateDir: dir, CommitInterval: 100 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, app.Start(context.Background()))
		return app
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	produce := func(key string, ms int64) {
		require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Topic: "in", Partition: 0, Key: []byte(key), Value: []byte("v"), Timestamp: time.UnixMilli(ms)}).FirstErr())
	}
	var got []string
	next := map[int32]int64{0: 0, 1: 0}
	read := func() {
		fetch, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"out": {0: kgo.NewOffset().At(next[0]), 1: kgo.NewOffset().At(next[1])}}),
			kgo.FetchMaxWait(100*time.Millisecond))
		require.NoError(t, err)
		defer fetch.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		fetch.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			w, err := ks.Decode(r.Key)
			require.NoError(t, err)
			n, err := serde.Int64.Decode(r.Value)
			require.NoError(t, err)
			got = append(got, w.Key+"@"+strconv.FormatInt(w.Window.Start, 10)+"="+strconv.FormatInt(n, 10))
			next[r.Partition] = r.Offset + 1
		})
	}
	a := start(t.TempDir())
	produce("a", 500)
	produce("a", 700)
	produce("b", 1_200) // closes [0,1000)
	waitFor(t, 30*time.Second, "a's window", func() bool { read(); return len(got) == 1 })
	require.Equal(t, []string{"a@0=2"}, got)
	require.NoError(t, a.Close(context.Background()))

	a2 := start(t.TempDir())
	defer a2.Close(context.Background())
	produce("a", 900)   // late: the restored stream time is 1200
	produce("c", 2_500) // closes [1000,2000)
	waitFor(t, 30*time.Second, "b's window", func() bool { read(); return len(got) >= 2 })
	waitFor(t, 30*time.Second, "the late record counted", func() bool { return droppedLate(a2) == 1 })
	produce("d", 3_500) // closes [2000,3000), which holds c
	waitFor(t, 30*time.Second, "c's window", func() bool { read(); return len(got) >= 3 })
	read()
	require.Equal(t, []string{"a@0=2", "b@1000=1", "c@2000=1"}, got)
}

// A suppression's held updates are restored from its changelog: an
// instance on an empty state directory releases what the first one held.
// Its stream time starts over, as in Kafka Streams: a record far behind
// the first instance's stream time is held until the new instance's
// stream time passes it.
func TestSuppressionRestoredFromChangelog(t *testing.T) {
	t.Parallel()
	testSuppressionRestored(t, false)
}

// With PersistStreamTime, a suppression's stream time is restored with
// its held updates: a record the first instance would have released at
// once is released at once.
func TestSuppressionRestoredFromChangelogWithStreamTime(t *testing.T) {
	t.Parallel()
	testSuppressionRestored(t, true)
}

func testSuppressionRestored(t *testing.T, keepTime bool) {
	b, _ := startBroker(t, "in", "out")
	s := topology.UntilTimeLimit(time.Second, topology.Unbounded())
	if keepTime {
		s = s.PersistStreamTime()
	}
	build := func() *topology.Topology {
		tb := topology.NewBuilder()
		topology.Stream(tb, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String).Count("counts").
			Suppress(s, "held").
			ToStream().To("out", serde.String, serde.Int64)
		topo, err := tb.Build()
		require.NoError(t, err)
		return topo
	}
	start := func(dir string) *App {
		app, err := New(build(), Config{ApplicationID: "suppress", Brokers: b.Addrs(), StateDir: dir, CommitInterval: 100 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, app.Start(context.Background()))
		return app
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	produce := func(key string, ms int64) {
		require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Topic: "in", Partition: 0, Key: []byte(key), Value: []byte("v"), Timestamp: time.UnixMilli(ms)}).FirstErr())
	}
	var got []string
	next := map[int32]int64{0: 0, 1: 0}
	read := func() {
		fetch, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"out": {0: kgo.NewOffset().At(next[0]), 1: kgo.NewOffset().At(next[1])}}),
			kgo.FetchMaxWait(100*time.Millisecond))
		require.NoError(t, err)
		defer fetch.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		fetch.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			n, err := serde.Int64.Decode(r.Value)
			require.NoError(t, err)
			got = append(got, string(r.Key)+"="+strconv.FormatInt(n, 10))
			next[r.Partition] = r.Offset + 1
		})
	}
	a := start(t.TempDir())
	produce("a", 500)
	produce("a", 700)
	produce("b", 1_200)
	produce("c", 1_800) // releases a
	waitFor(t, 30*time.Second, "a released", func() bool { read(); return len(got) == 1 })
	require.Equal(t, []string{"a=2"}, got)
	require.NoError(t, a.Close(context.Background()))

	a2 := start(t.TempDir())
	defer a2.Close(context.Background())
	if keepTime {
		produce("f", 100) // due at once: the restored stream time is 1800
		waitFor(t, 30*time.Second, "f released", func() bool { read(); return len(got) == 2 })
		produce("e", 2_300) // releases b
		waitFor(t, 30*time.Second, "b released", func() bool { read(); return len(got) == 3 })
		produce("g", 2_900) // releases c
		waitFor(t, 30*time.Second, "c released", func() bool { read(); return len(got) == 4 })
		read()
		require.Equal(t, []string{"a=2", "f=1", "b=1", "c=1"}, got)
		return
	}
	count := func(k string) int64 {
		v, found, _, err := activeGet(a2, "counts", []byte(k))
		if err != nil || !found {
			return -1
		}
		n, _ := serde.Int64.Decode(v)
		return n
	}
	// Stream time starts at i's 100, so i is held: its second count,
	// committed after the first reached the suppression, replaces it. (i
	// is a key of partition 0, where activeGet looks for it.)
	produce("i", 100)
	waitFor(t, 30*time.Second, "i's first count committed", func() bool { return count("i") == 1 })
	produce("i", 150)
	waitFor(t, 30*time.Second, "i's second count committed", func() bool { return count("i") == 2 })
	produce("e", 2_300) // releases i, then b
	waitFor(t, 30*time.Second, "i and b released", func() bool { read(); return len(got) >= 3 })
	produce("g", 2_900) // releases c
	waitFor(t, 30*time.Second, "c released", func() bool { read(); return len(got) >= 4 })
	read()
	require.Equal(t, []string{"a=2", "i=2", "b=1", "c=1"}, got)
}

// An application upgraded to stores that keep timestamps restores the
// changelogs its earlier builds wrote, bare values, and carries on from
// them: a count restored bare is read and extended, and written back with
// its time.
func TestBareChangelogRestoredAndExtended(t *testing.T) {
	t.Parallel()
	b, adm := startBroker(t, "in", "out")
	topic := changelog.TopicName("upgraded", "counts")
	_, err := adm.CreateTopics(context.Background(), 2, -1, nil, topic)
	require.NoError(t, err)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	produce := func(topic, key string, value []byte, ms int64) {
		rec := &kgo.Record{Topic: topic, Partition: topology.Partition([]byte(key), 2), Key: []byte(key), Value: value, Timestamp: time.UnixMilli(ms)}
		require.NoError(t, cl.ProduceSync(context.Background(), rec).FirstErr())
	}
	for k, n := range map[string]int64{"a": 5, "b": 3} {
		v, _ := serde.Int64.Encode(n)
		produce(topic, k, v, 100) // as a build without timestamps wrote it
	}

	tb := topology.NewBuilder()
	topology.Stream(tb, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String).Count("counts").
		ToStream().To("out", serde.String, serde.Int64)
	topo, err := tb.Build()
	require.NoError(t, err)
	app, err := New(topo, Config{ApplicationID: "upgraded", Brokers: b.Addrs(), StateDir: t.TempDir(), CommitInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	defer app.Close(context.Background())
	count := func(k string) int64 {
		v, found, _, err := activeGet(app, "counts", []byte(k))
		if err != nil || !found {
			return -1
		}
		n, _ := serde.Int64.Decode(v)
		return n
	}
	waitFor(t, 30*time.Second, "the bare counts restored", func() bool { return count("a") == 5 && count("b") == 3 })
	produce("in", "a", []byte("v"), 1_000)
	produce("in", "a", []byte("v"), 900)
	waitFor(t, 30*time.Second, "a counted on", func() bool { return count("a") == 7 })
	require.Equal(t, int64(3), count("b"))

	// The changelog's latest record of a is now timestamped with the
	// latest time counted.
	rd, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer rd.Close()
	var last []byte
	waitFor(t, 30*time.Second, "a's timestamped changelog record", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		rd.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			if string(r.Key) == "a" {
				last = r.Value
			}
		})
		v, ts := statestore.SplitTimestamped(last)
		n, err := serde.Int64.Decode(v)
		return err == nil && n == 7 && ts == 1_000
	})
}

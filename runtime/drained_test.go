package runtime

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/cache"
	"github.com/eddystreams/eddy/internal/threadcore"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/topology"
)

// With a commit interval far longer than the test, results through a
// repartition hop become committed state soon after input stops: each
// thread commits early once its input is drained, the upstream sub-topology
// first, then the downstream one once the repartition records reach it.
// An idle thread commits nothing further.
func TestDrainedThreadCommitsEarly(t *testing.T) {
	t.Parallel()
	const interval = 30 * time.Second
	for _, g := range []ProcessingGuarantee{AtLeastOnce, ExactlyOnce} {
		t.Run(g.String(), func(t *testing.T) {
			c := newEOSCluster(t)
			_, err := c.adm.CreateTopics(context.Background(), 2, -1, nil, "out")
			require.NoError(t, err)
			b := topology.NewBuilder()
			s := topology.Stream(b, "in", serde.String, serde.String)
			w := topology.FlatMapValues(s, func(_, v string) []string { return strings.Fields(v) })
			topology.GroupBy(w, func(_, v string) string { return v }, "words", serde.String, serde.String).
				Count("counts").ToStream().To("out", serde.String, serde.Int64)
			topo, err := b.Build()
			require.NoError(t, err)
			app, err := New(topo, Config{
				ApplicationID: "drained", Brokers: c.b.Addrs(), StateDir: t.TempDir(),
				ProcessingGuarantee: g, CommitInterval: interval,
				NumStreamThreads: testThreads(t),
			})
			require.NoError(t, err)
			started := time.Now()
			require.NoError(t, app.Start(context.Background()))
			defer app.Close(context.Background())
			waitFor(t, 20*time.Second, "running", func() bool { return app.State() == StateRunning })

			out := newCommittedReader(t, c.b.Addrs(), "out")
			want := map[string]int64{}
			for round := range 2 {
				for range 20 {
					c.cl.Produce(context.Background(), &kgo.Record{Value: []byte("k0 k1 k0")}, nil)
				}
				require.NoError(t, c.cl.Flush(context.Background()))
				want["k0"] += 40
				want["k1"] += 20
				// Every commit but a thread's first waits for the
				// interval, so without early commits nothing of the input
				// would be committed before started+interval.
				deadline := time.Until(started.Add(interval / 2))
				waitFor(t, deadline, "input and repartition offsets committed", func() bool {
					return committedToEnd(t, c.adm, "drained", "in", "drained-words-repartition")
				})
				waitCounts(t, app, want)
				waitFor(t, deadline, "read-committed output", func() bool { return out.latestEquals(want) })
				require.Less(t, time.Since(started), interval, "round %d: results committed only by the interval commit", round)

				// An idle second: nothing consumed, so no early commit.
				before := commitsOf(app)
				time.Sleep(time.Second)
				require.LessOrEqual(t, commitsOf(app)-before, int64(2), "round %d: commits of idle threads in a second", round)
			}
		})
	}
}

// commitsOf sums the commits the instance's threads began.
func commitsOf(app *App) int64 {
	var n int64
	for _, th := range app.threads {
		n += th.commits.Load()
	}
	return n
}

// committedToEnd reports whether group has committed the end offset of
// every non-empty partition of topics.
func committedToEnd(t *testing.T, adm *kadm.Client, group string, topics ...string) bool {
	t.Helper()
	ends, err := adm.ListEndOffsets(context.Background(), topics...)
	require.NoError(t, err)
	committed, err := adm.FetchOffsets(context.Background(), group)
	if err != nil {
		return false
	}
	ok := true
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset == 0 {
			return
		}
		if c, found := committed.Lookup(o.Topic, o.Partition); !found || c.At < o.Offset {
			ok = false
		}
	})
	return ok
}

// committedReader follows a topic of string keys and int64 values with
// read-committed isolation, keeping each key's latest value.
type committedReader struct {
	cl     *kgo.Client
	latest map[string]int64
}

func newCommittedReader(t *testing.T, addrs []string, topic string) *committedReader {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return &committedReader{cl: cl, latest: map[string]int64{}}
}

// latestEquals polls briefly and reports whether the latest values read
// equal want.
func (r *committedReader) latestEquals(want map[string]int64) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	r.cl.PollFetches(ctx).EachRecord(func(rec *kgo.Record) {
		if n, err := serde.Int64.Decode(rec.Value); err == nil {
			r.latest[string(rec.Key)] = n
		}
	})
	for k, n := range want {
		if r.latest[k] != n {
			return false
		}
	}
	return true
}

// A poll asks for no more records than the record cache's budget has room
// for, so that a poll of records that are each a new key cannot overrun the
// budget many times over before the commit it triggers; never fewer than
// threadcore.MinPollRecords, and MaxPollRecords while no budget bounds the cache. (The
// records here cost a microsecond each, so the poll time budget allows far
// more.)
func TestPollCapFollowsCacheBudget(t *testing.T) {
	const maxPoll = 100_000
	app := &App{cfg: Config{MaxPollRecords: maxPoll, RebalanceTimeout: DefaultRebalanceTimeout}}
	budget := cache.NewBudget(4 << 20)
	th := &thread{app: app, budget: budget, recordCost: time.Microsecond}
	left, _ := budget.EntriesLeft()
	require.Less(t, left, maxPoll)
	require.Equal(t, left, th.pollCap(), "an empty 4 MiB budget")

	c := cache.New(statestore.NewMemory(), budget)
	t.Cleanup(func() { _ = c.Inner().Close() })
	for i := 0; !budget.Full(); i++ {
		require.NoError(t, c.Put([]byte(strconv.Itoa(i)), []byte("v")))
		if i == 1000 {
			now, _ := budget.EntriesLeft()
			require.Equal(t, now, th.pollCap(), "a budget filling up")
			require.Less(t, th.pollCap(), left)
		}
	}
	require.Equal(t, threadcore.MinPollRecords, th.pollCap(), "a full budget")
	require.NoError(t, c.Commit(1))
	require.Equal(t, left, th.pollCap(), "after the commit")

	for _, b := range []*cache.Budget{nil, cache.NewBudget(0), cache.NewBudget(1 << 30)} {
		th := &thread{app: app, budget: b, recordCost: time.Microsecond}
		require.Equal(t, maxPoll, th.pollCap(), "budget %d", b.Max())
	}
}

// A poll asks for no more records than the thread can process in its poll
// time budget, a quarter of the transaction timeout under exactly-once (of
// the rebalance timeout if that is shorter, and under at-least-once), at
// what its records have cost lately: threadcore.FirstPollRecords before it knows, a
// dearer cost at once, a cheaper one halfway, one record at a time if one
// takes longer than the budget, and never more than MaxPollRecords.
func TestPollCapFollowsRecordCost(t *testing.T) {
	app := &App{cfg: Config{MaxPollRecords: 100_000, ProcessingGuarantee: ExactlyOnce,
		TransactionTimeout: 10 * time.Second, RebalanceTimeout: 30 * time.Second}}
	th := &thread{app: app}
	require.Equal(t, threadcore.FirstPollRecords, th.pollCap(), "before any poll")
	th.notePollCost(0, time.Second)
	require.Equal(t, threadcore.FirstPollRecords, th.pollCap(), "a poll that gave the tasks nothing")
	th.notePollCost(1000, time.Second)
	require.Equal(t, 2500, th.pollCap(), "1 ms a record in 2.5 s")
	th.notePollCost(1000, 2*time.Second)
	require.Equal(t, 1250, th.pollCap(), "2 ms a record, at once")
	th.notePollCost(1000, time.Second/2)
	require.Equal(t, 2000, th.pollCap(), "0.5 ms a record, halfway: 1.25 ms")
	th.notePollCost(10, time.Minute)
	require.Equal(t, 1, th.pollCap(), "a record slower than the budget")

	th.recordCost = time.Millisecond
	app.cfg.TransactionTimeout = time.Minute
	require.Equal(t, 7500, th.pollCap(), "the rebalance timeout, shorter")
	app.cfg.ProcessingGuarantee = AtLeastOnce
	app.cfg.TransactionTimeout = time.Second
	require.Equal(t, 7500, th.pollCap(), "at-least-once: the rebalance timeout alone")
	th.recordCost = time.Nanosecond
	require.Equal(t, 100_000, th.pollCap(), "never above MaxPollRecords")
}

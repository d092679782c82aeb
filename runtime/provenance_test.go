package runtime

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/groupproto"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// newStandbyRig is an instance that holds no active task and is told to
// keep a standby of task 0_0, whose changelog already holds records
// changelog records, rewriting the same 50 keys as a compacted changelog
// would.
func newStandbyRig(t *testing.T, records int) *App {
	t.Helper()
	b, _ := startBroker(t, "in")
	app, err := New(countTopology(t), Config{ApplicationID: "prov", Brokers: b.Addrs(), StateDir: t.TempDir(), NumStreamThreads: 1})
	require.NoError(t, err)
	require.NoError(t, app.prepare(context.Background()))
	app.state.Store(int32(StateRunning))
	app.serving.Store(true)
	t.Cleanup(app.releaseResources)

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	topic := changelog.TopicName("prov", "counts")
	for i := range records {
		v, err := serde.Int64.Encode(int64(i))
		require.NoError(t, err)
		cl.Produce(context.Background(), &kgo.Record{Topic: topic, Partition: 0, Key: fmt.Appendf(nil, "k%d", i%50), Value: v}, nil)
	}
	require.NoError(t, cl.Flush(context.Background()))

	app.registry.setShare(0, 0, groupproto.AssignmentInfo{Standby: []task.ID{task00}})
	return app
}

func standbyInfo(app *App) (iq.ReplicaInfo, bool) {
	r, err := app.Queries().Replica("counts", 0)
	if err != nil {
		return iq.ReplicaInfo{}, false
	}
	return r.Info(), true
}

// issue 10, test 2: a replica rebuilding from empty passes no lag or age
// bound before it reaches the end offset its restoration began with, even a
// lag bound larger than its whole changelog; it does once it has.
func TestRebuildingReplicaPassesNoLagOrAgeBound(t *testing.T) {
	const records = 30_000
	app := newStandbyRig(t, records)
	lag, age := iq.MaxLag(10*records), iq.MaxAge(time.Hour)
	rebuilding := 0
	deadline := time.Now().Add(60 * time.Second)
	for {
		info, ok := standbyInfo(app)
		require.True(t, time.Now().Before(deadline), "standby never caught up: %+v", info)
		if !ok {
			time.Sleep(time.Millisecond)
			continue
		}
		require.Equal(t, iq.RoleStandby, info.Role)
		if info.Position < records {
			require.False(t, lag.Allows(info), "short of the end it began with, the replica passed %s: %+v", lag, info)
			require.False(t, age.Allows(info), "short of the end it began with, the replica passed %s: %+v", age, info)
			if info.Rebuilding {
				require.Equal(t, int64(-1), info.Position, "a rebuilding replica has no position")
				require.Equal(t, int64(-1), info.Lag, "a rebuilding replica has no lag")
				rebuilding++
			}
		} else if lag.Allows(info) && age.Allows(info) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	require.Positive(t, rebuilding, "the replica was seen rebuilding")
	info, _ := standbyInfo(app)
	require.False(t, info.Rebuilding)
	require.Equal(t, int64(records), info.Position)
}

// issue 10, test 3: a standby cut off from the broker (not killed) stops
// passing lag bounds within a bounded time and reports its lag as unknown,
// with how long ago it was last confirmed; it recovers once reachable.
func TestCutOffStandbyReportsUnknownLag(t *testing.T) {
	t.Parallel()
	app := newStandbyRig(t, 100)
	bound := iq.MaxLag(1_000_000)
	waitFor(t, 20*time.Second, "standby caught up with a confirmed lag", func() bool {
		info, ok := standbyInfo(app)
		return ok && info.Lag == 0 && iq.MaxLag(0).Allows(info)
	})

	app.net.partition(true)
	cut := time.Now()
	waitFor(t, LagConfirmWindow+3*changelog.DefaultConfirmInterval, "lag reported unknown", func() bool {
		info, ok := standbyInfo(app)
		require.True(t, ok)
		return info.Lag == -1 && !bound.Allows(info)
	})
	info, _ := standbyInfo(app)
	require.Greater(t, info.LagConfirmedAgo, LagConfirmWindow)
	require.LessOrEqual(t, info.LagConfirmedAgo, time.Since(cut)+LagConfirmWindow, "the age of the last confirmation is reported")
	require.Equal(t, int64(100), info.End, "the end last confirmed is still reported")

	app.net.partition(false)
	waitFor(t, 20*time.Second, "lag confirmed again once reachable", func() bool {
		info, _ := standbyInfo(app)
		return info.Lag == 0 && bound.Allows(info)
	})
}

// A standby stops answering as one as soon as its thread's SyncGroup
// answers with an assignment that names it nowhere, even while the thread
// is busy (in a commit, say) and has not yet taken the assignment in to
// close the replica: from then on the group has given its role away.
func TestStandbyGivenAwayStopsAnsweringBeforeItCloses(t *testing.T) {
	app := newStandbyRig(t, 100)
	waitFor(t, 20*time.Second, "standby open", func() bool {
		_, ok := standbyInfo(app)
		return ok
	})
	th := &thread{idx: 0} // the rig runs no thread; only its index matters here
	app.assignmentReceived(th, groupproto.AssignmentInfo{Standby: []task.ID{{SubTopology: 0, Partition: 1}}})
	_, ok := standbyInfo(app)
	require.False(t, ok, "a standby the group gave away still answers as one")
	app.registry.mu.Lock()
	_, open := app.registry.core.Replica(task00)
	app.registry.mu.Unlock()
	require.True(t, open, "the replica is closed only once the thread takes the assignment in")

	app.assignmentReceived(th, groupproto.AssignmentInfo{Standby: []task.ID{task00}})
	_, ok = standbyInfo(app)
	require.True(t, ok, "a standby named again answers again")
}

// The same for an active still restoring: it writes nothing, so once its
// thread's SyncGroup answers with an assignment that names it nowhere, it
// stops answering at once, before the thread revokes it.
func TestRestoringActiveGivenAwayStopsAnswering(t *testing.T) {
	app := newStandbyRig(t, 100)
	waitFor(t, 20*time.Second, "replica open", func() bool {
		_, ok := standbyInfo(app)
		return ok
	})
	th := unconnectedThread(app, 0, nil)
	var err error
	th.rest, err = newRestorer(app, th.log)
	require.NoError(t, err)
	t.Cleanup(th.rest.close)
	stores, held := app.registry.claimActive(th, task00)
	require.False(t, held, "promote the standby")
	require.NotEmpty(t, stores)
	app.registry.mu.Lock()
	require.Equal(t, task.Restoring, app.registry.stateLocked(task00))
	app.registry.mu.Unlock()
	app.assignmentReceived(th, groupproto.AssignmentInfo{Active: []task.ID{task00}})
	info, ok := standbyInfo(app)
	require.True(t, ok, "a restoring active its assignment names answers")
	require.Equal(t, iq.RoleRestoring, info.Role)

	app.assignmentReceived(th, groupproto.AssignmentInfo{Active: []task.ID{{SubTopology: 0, Partition: 1}}})
	_, ok = standbyInfo(app)
	require.False(t, ok, "a restoring active the group gave away still answers as one")
}

// issue 10, test 4: a standby of a killed active stops passing age:D within
// D plus one commit interval of the active's last commit while input keeps
// arriving, though its changelog, no longer written, shows no lag; while the
// active lives and input flows, the standby passes age:D.
func TestStandbyOfKilledActiveAges(t *testing.T) {
	const (
		d        = 3 * time.Second
		interval = 100 * time.Millisecond
	)
	b, _ := startBroker(t, "in")
	start := func() *App {
		app, err := New(countTopology(t), Config{ApplicationID: "provk", Brokers: b.Addrs(), StateDir: t.TempDir(),
			NumStreamThreads: 1, NumStandbys: 1, CommitInterval: interval,
			// Long enough that the standby is still a standby when the
			// test has seen what it needs.
			SessionTimeout: 45 * time.Second, HeartbeatInterval: time.Second})
		require.NoError(t, err)
		require.NoError(t, app.Start(context.Background()))
		return app
	}
	victim := start()
	t.Cleanup(victim.Kill)
	survivor := start()
	t.Cleanup(func() { survivor.Close(context.Background()) })

	// Input flows for the whole test.
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic("in"), kgo.ProducerLinger(0))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			cl.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%20), Value: []byte("v")}, nil)
			time.Sleep(2 * time.Millisecond)
		}
	})

	// The survivor's standby of the victim's active.
	var part int32 = -1
	standby := func() (iq.ReplicaInfo, bool) {
		for _, info := range survivor.Queries().LocalReplicas() {
			if info.Store == "counts" && (part < 0 || info.Partition == part) && info.Role == iq.RoleStandby {
				return info, true
			}
		}
		return iq.ReplicaInfo{}, false
	}
	waitFor(t, 60*time.Second, "a standby of the victim's active passing "+iq.MaxAge(d).String(), func() bool {
		info, ok := standby()
		if ok && iq.MaxAge(d).Allows(info) {
			part = info.Partition
			return true
		}
		return false
	})
	// It keeps passing while the active lives: the age is not a fluke of
	// one moment.
	for range 10 {
		info, ok := standby()
		require.True(t, ok)
		require.True(t, iq.MaxAge(d).Allows(info), "a live active's standby fails %s: %+v", iq.MaxAge(d), info)
		time.Sleep(3 * interval)
	}

	victim.Kill()
	killed := time.Now() // the victim's last commit was before this
	for {
		info, ok := standby()
		require.True(t, ok, "the standby stays a standby until the session times out")
		if !iq.MaxAge(d).Allows(info) {
			require.Positive(t, info.InputCommittedAgo, "the input, not the changelog, tells the standby is stale: %+v", info)
			t.Logf("standby failed %s %v after the kill: %+v", iq.MaxAge(d), time.Since(killed), info)
			break
		}
		require.Less(t, time.Since(killed), d+interval+250*time.Millisecond,
			"still passing %s after the active's last commit: %+v", iq.MaxAge(d), info)
		time.Sleep(10 * time.Millisecond)
	}
	info, _ := standby()
	require.Equal(t, int64(0), info.Lag, "its changelog stopped: it shows no lag, yet is stale")
}

// Under exactly-once, a drained task commits its partitions' end offsets:
// transaction markers are consumed too, so the committed offset does not sit
// one below the last marker for ever.
func TestExactlyOnceCommitsPastMarkers(t *testing.T) {
	t.Parallel()
	c := newEOSCluster(t)
	b := topology.NewBuilder()
	s := topology.Stream(b, "in", serde.String, serde.String)
	w := topology.FlatMapValues(s, func(_, v string) []string { return strings.Fields(v) })
	topology.GroupBy(w, func(_, v string) string { return v }, "words", serde.String, serde.String).Count("counts")
	topo, err := b.Build()
	require.NoError(t, err)
	app, err := New(topo, Config{ApplicationID: "eosm", Brokers: c.b.Addrs(), StateDir: t.TempDir(), ProcessingGuarantee: ExactlyOnce,
		NumStreamThreads: testThreads(t)})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	defer app.Close(context.Background())

	// Input written in transactions as well, so that the source topic
	// holds markers too, not only the repartition topic Eddy writes.
	txn, err := kgo.NewClient(kgo.SeedBrokers(c.b.Addrs()...), kgo.DefaultProduceTopic("in"), kgo.TransactionalID("prov-input"))
	require.NoError(t, err)
	defer txn.Close()
	for range 5 {
		require.NoError(t, txn.BeginTransaction())
		for range 4 {
			txn.Produce(context.Background(), &kgo.Record{Value: []byte("k0 k1 k0")}, nil)
		}
		require.NoError(t, txn.Flush(context.Background()))
		require.NoError(t, txn.EndTransaction(context.Background(), kgo.TryCommit))
	}
	waitCounts(t, app, map[string]int64{"k0": 40, "k1": 20})

	topics := app.plan.sources
	require.Len(t, topics, 2, "the input and the repartition topic")
	var last string
	waitFor(t, 20*time.Second, "committed offsets at the end offsets", func() bool {
		ends, err := c.adm.ListCommittedOffsets(context.Background(), topics...)
		require.NoError(t, err)
		commits, err := c.adm.FetchOffsets(context.Background(), "eosm")
		require.NoError(t, err)
		ok := true
		var sb strings.Builder
		ends.Each(func(o kadm.ListedOffset) {
			got, _ := commits.Lookup(o.Topic, o.Partition)
			fmt.Fprintf(&sb, "%s[%d] end %d committed %d; ", o.Topic, o.Partition, o.Offset, got.At)
			if o.Offset > 0 && got.At != o.Offset {
				ok = false
			}
		})
		last = sb.String()
		return ok
	})
	t.Log(last)
	require.NotEmpty(t, last)
}

// toIQ turns last-known figures into what a replica vouches for.
func TestToIQReportsOnlyWhatIsVouchedFor(t *testing.T) {
	now := time.Now()
	base := ReplicaInfo{Store: "s", State: task.Standby, Position: 90, End: 100, Lag: 10, EndConfirmed: now.Add(-time.Second),
		CaughtUp: now.Add(-5 * time.Second), InputCommitted: now.Add(-2 * time.Second)}
	got := toIQAt(base, now, time.Second)
	require.Equal(t, iq.ReplicaInfo{Store: "s", Role: iq.RoleStandby, Position: 90, End: 100, Lag: 10, LagConfirmedAgo: time.Second,
		CaughtUpAgo: 5 * time.Second, InputCommittedAgo: 2 * time.Second, ContactAgo: iq.Unknown}, got)

	stale := base
	stale.EndConfirmed = now.Add(-LagConfirmWindow - time.Second)
	got = toIQAt(stale, now, time.Second)
	require.Equal(t, int64(-1), got.Lag, "a lag confirmed too long ago is unknown")
	require.Equal(t, LagConfirmWindow+time.Second, got.LagConfirmedAgo)
	require.Equal(t, int64(100), got.End)

	rebuilding := base
	rebuilding.Rebuilding = true
	got = toIQAt(rebuilding, now, time.Second)
	require.True(t, got.Rebuilding)
	require.Equal(t, int64(-1), got.Position)
	require.Equal(t, int64(-1), got.Lag)
	_, ok := got.Age()
	require.False(t, ok)

	never := base
	never.CaughtUp, never.InputCommitted, never.EndConfirmed, never.End, never.Lag = time.Time{}, time.Time{}, time.Time{}, -1, -1
	got = toIQAt(never, now, time.Second)
	require.Equal(t, iq.Unknown, got.CaughtUpAgo, "never caught up since opened")
	require.Equal(t, iq.Unknown, got.InputCommittedAgo)
	require.Equal(t, iq.Unknown, got.LagConfirmedAgo)
	require.Equal(t, int64(-1), got.Lag)

	caughtUp := base
	caughtUp.Position, caughtUp.Lag = 100, 0
	require.Equal(t, time.Second, toIQAt(caughtUp, now, time.Second).CaughtUpAgo,
		"a lag of 0 to an end confirmed a second ago is caught up as of then, not now")

	held := base
	held.Contact = now.Add(-2 * time.Second)
	require.Equal(t, 2*time.Second, toIQAt(held, now, time.Second).ContactAgo, "a standby says how recent its group contact is")

	active := ReplicaInfo{State: task.Running, Position: 7, End: 7, Contact: now.Add(-800 * time.Millisecond)}
	got = toIQAt(active, now, time.Second)
	require.Equal(t, iq.ReplicaInfo{Role: iq.RoleActive, Position: 7, End: 7, ContactAgo: 800 * time.Millisecond}, got)
}

// A running active vouches for itself as the partition's active only while
// the group confirmed its thread recently: past the contact window it is
// unconfirmed, with no lag and an age counted from its last contact, and it
// passes no active or lag bound, and an age bound only within its age.
func TestToIQActiveFreshnessIsEarned(t *testing.T) {
	now := time.Now()
	const window = 3 * time.Second
	active := ReplicaInfo{Store: "s", State: task.Running, Position: 7, End: 7, Lag: 0, Contact: now.Add(-5 * time.Second),
		EndConfirmed: now, CaughtUp: now, InputCommitted: now}
	got := toIQAt(active, now, window)
	require.Equal(t, iq.ReplicaInfo{Store: "s", Role: iq.RoleUnconfirmed, Position: 7, End: 7, Lag: -1, LagConfirmedAgo: 5 * time.Second,
		CaughtUpAgo: 5 * time.Second, InputCommittedAgo: 5 * time.Second, ContactAgo: 5 * time.Second}, got)
	age, ok := got.Age()
	require.True(t, ok)
	require.Equal(t, 5*time.Second, age)
	for _, b := range []iq.Staleness{iq.ActiveOnly(), iq.MaxLag(1 << 40), iq.MaxAge(4 * time.Second)} {
		require.ErrorIs(t, b.Check(got), iq.ErrTooStale, "an unconfirmed active passed %s", b)
	}
	require.True(t, iq.MaxAge(6*time.Second).Allows(got))
	require.True(t, iq.AnyStaleness().Allows(got))

	// Within the window it is the active, and says how recent its
	// contact is.
	active.Contact = now.Add(-window)
	got = toIQAt(active, now, window)
	require.Equal(t, iq.RoleActive, got.Role)
	require.Equal(t, window, got.ContactAgo)
	require.True(t, iq.ActiveOnly().Allows(got))

	// Never confirmed: unconfirmed, with nothing known.
	active.Contact = time.Time{}
	got = toIQAt(active, now, window)
	require.Equal(t, iq.RoleUnconfirmed, got.Role)
	require.Equal(t, iq.Unknown, got.ContactAgo)
	_, ok = got.Age()
	require.False(t, ok)
	require.False(t, iq.MaxAge(time.Hour).Allows(got))
}

// The time a partition's input was last covered is the latest time whose
// observed end the committed offset reaches.
func TestInputWatchCoveredTime(t *testing.T) {
	t0 := time.Now()
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var w inputWatch
	w.observe(at(0), 10, 5)
	require.True(t, w.covered.IsZero(), "never covered yet")
	w.observe(at(1), 20, 10)
	require.Equal(t, at(0), w.covered, "the commit reached the end seen at 0")
	w.observe(at(2), 20, 15)
	require.Equal(t, at(0), w.covered)
	w.observe(at(3), 20, 20)
	require.Equal(t, at(3), w.covered, "end 20 was still the end at 3")
	w.observe(at(4), 30, 20) // the active stops committing
	w.observe(at(5), 40, 20)
	require.Equal(t, at(3), w.covered)
	w.observe(at(6), 40, 35)
	require.Equal(t, at(4), w.covered)
	require.Len(t, w.samples, 1)
}

// A standby opened by a rebalance must not wait for a commit seen after it
// opened before it has an age: the instance watches every task's input from
// start-up, whether it holds the task or not, so the history is already
// there. Here one instance runs every task as active, and still knows when
// each task's active last covered its input.
func TestInputFreshnessKnownForTasksNotHeldAsStandby(t *testing.T) {
	b, _ := startBroker(t, "in")
	app, err := New(countTopology(t), Config{ApplicationID: "provall", Brokers: b.Addrs(), StateDir: t.TempDir(),
		NumStreamThreads: 1, CommitInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	t.Cleanup(func() { app.Close(context.Background()) })

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic("in"))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	for i := range 200 {
		cl.Produce(context.Background(), &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")}, nil)
	}
	require.NoError(t, cl.Flush(context.Background()))

	parts, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), "in")
	require.NoError(t, err)
	n := 0
	parts.Each(func(kadm.ListedOffset) { n++ })
	require.Positive(t, n)
	waitFor(t, 30*time.Second, "every task's input freshness known to an instance holding only actives", func() bool {
		for _, ri := range app.Replicas() {
			if ri.State != task.Running {
				return false
			}
		}
		for p := range int32(n) {
			at, ok := app.fresh.inputCommitted(task.ID{SubTopology: 0, Partition: p})
			if !ok || time.Since(at) > 5*time.Second {
				return false
			}
		}
		return true
	})
}

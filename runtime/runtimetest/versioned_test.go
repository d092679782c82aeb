package runtimetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/topology"
)

// versionedModel is what a versioned table should hold: each key's
// versions by time (a nil value a tombstone), and each partition's
// observed time, which cuts off what is older than the history.
type versionedModel struct {
	history    int64
	partitions int32
	versions   map[string]map[int64]*string
	observed   map[int32]int64
}

func (m *versionedModel) put(key string, value *string, ts int64) {
	p := topology.Partition([]byte(key), m.partitions)
	obs, seen := m.observed[p]
	if seen && ts < obs-m.history {
		return // too late: dropped
	}
	if !seen || ts > obs {
		m.observed[p] = ts
	}
	if m.versions[key] == nil {
		m.versions[key] = map[int64]*string{}
	}
	m.versions[key][ts] = value
}

// asOf renders key's version at t as "value[from,to)" ("-" for none), as
// versionedAnswer renders a query's answer; t math.MaxInt64 is the latest.
func (m *versionedModel) asOf(key string, t int64) string {
	if obs, seen := m.observed[topology.Partition([]byte(key), m.partitions)]; seen && t != math.MaxInt64 && t < obs-m.history {
		return "-"
	}
	var times []int64
	for ts := range m.versions[key] {
		times = append(times, ts)
	}
	slices.Sort(times)
	i, found := slices.BinarySearch(times, t)
	if !found {
		i--
	}
	if i < 0 || m.versions[key][times[i]] == nil {
		return "-"
	}
	to := statestore.OpenEnded
	if i+1 < len(times) {
		to = times[i+1]
	}
	return fmt.Sprintf("%s[%d,%d)", *m.versions[key][times[i]], times[i], to)
}

func versionedAnswer(res iq.Result[string]) string {
	if !res.Found {
		return "-"
	}
	return fmt.Sprintf("%s[%d,%d)", res.Value, res.ValidFrom, res.ValidTo)
}

// A table read Versioned keeps its history through everything a store
// goes through, in memory and in badger, under both guarantees: queries as of a time answer alike
// from the active and, within the bound, its standby, history cut off at
// the same time; the standby, made active when the active's instance dies,
// goes on from the same history; and an instance with an empty state
// directory restores it all from the changelog, out-of-order versions,
// tombstones and the cut-off included.
func TestVersionedTableFailoverAndRestore(t *testing.T) {
	t.Parallel()
	eachBackendAndGuarantee(t, testVersionedFailoverAndRestore)
}

// eachBackendAndGuarantee runs test as parallel subtests, one for each
// store backend (badger, or in memory when inMemory) and guarantee. Each
// starts a broker of its own and mostly waits on the group.
func eachBackendAndGuarantee(t *testing.T, test func(t *testing.T, g runtime.ProcessingGuarantee, inMemory bool)) {
	for _, inMemory := range []bool{false, true} {
		for _, g := range []runtime.ProcessingGuarantee{runtime.AtLeastOnce, runtime.ExactlyOnce} {
			name := "badger-" + g.String()
			if inMemory {
				name = "memory-" + g.String()
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				test(t, g, inMemory)
			})
		}
	}
}

func testVersionedFailoverAndRestore(t *testing.T, g runtime.ProcessingGuarantee, inMemory bool) {
	b, _ := startBroker(t, "prices")
	opts := []topology.Option{topology.Versioned(3 * time.Second)}
	if inMemory {
		opts = append(opts, topology.InMemory())
	}
	build := func() *topology.Topology {
		tb := topology.NewBuilder()
		topology.Table(tb, "prices", serde.String, serde.String, "prices", opts...)
		topo, err := tb.Build()
		require.NoError(t, err)
		return topo
	}
	start := func(dir string) *runtime.App {
		app, err := runtime.New(build(), runtime.Config{ApplicationID: "versioned", Brokers: b.Addrs(), StateDir: dir, NumStreamThreads: 1,
			NumStandbys: 1, ProcessingGuarantee: g, CommitInterval: 100 * time.Millisecond,
			// The takeover after a Kill waits out the killed
			// member's session, so it is short.
			SessionTimeout: 2 * time.Second, HeartbeatInterval: 500 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, app.Start(context.Background()))
		return app
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic("prices"))
	require.NoError(t, err)
	defer cl.Close()
	want := &versionedModel{history: 3000, partitions: 2, versions: map[string]map[int64]*string{}, observed: map[int32]int64{}}
	produce := func(key string, value *string, ts int64) {
		t.Helper()
		rec := &kgo.Record{Key: []byte(key), Timestamp: time.UnixMilli(ts)}
		if value != nil {
			rec.Value = []byte(*value)
		}
		require.NoError(t, cl.ProduceSync(context.Background(), rec).FirstErr())
		want.put(key, value, ts)
	}
	str := func(s string) *string { return &s }
	keys := []string{"a", "b", "c", "d", "e", "f"}
	for i, k := range keys {
		produce(k, str(k+"1"), 1000)
		produce(k, str(k+"2"), 2000)
		produce(k, str(k+"3"), 3000)
		produce(k, str(k+"-late"), 1500) // out of order: history only
		if i%2 == 0 {
			produce(k, nil, 4000)
			produce(k, str(k+"5"), 5000)
		}
	}
	times := []int64{999, 1000, 1499, 1500, 1999, 2500, 3000, 4500, 6000, 6999, 7000, math.MaxInt64}

	// mismatch is the first answer of app's replicas of the given role
	// that differs from want, "" if none: every key at every time, but a
	// key whose partition app holds in no such role is left to the other
	// instances, unless all is set.
	ctx := context.Background()
	mismatch := func(app *runtime.App, role iq.Role, all bool) string {
		q := iq.NewQuerier(app.Queries())
		bound := iq.WithStaleness(iq.ActiveOnly())
		if role != iq.RoleActive {
			bound = iq.WithStaleness(iq.MaxLag(0))
		}
		for _, k := range keys {
			for _, at := range times {
				opts := []iq.QueryOption{bound}
				if at != math.MaxInt64 {
					opts = append(opts, iq.AsOfMillis(at))
				}
				res, err := iq.Get(ctx, q, "prices", k, serde.String, serde.String, opts...)
				if err != nil {
					if !all && (errors.Is(err, iq.ErrNotHostedHere) || errors.Is(err, iq.ErrTooStale)) {
						break
					}
					return fmt.Sprintf("%s as of %d: %v", k, at, err)
				}
				if res.Provenance.Role != role && !all {
					break // the key's partition is held here in another role
				}
				if got := versionedAnswer(res); res.Provenance.Role != role || got != want.asOf(k, at) {
					return fmt.Sprintf("%s as of %d: %s from the %s, want %s from the %s", k, at, got, res.Provenance.Role, want.asOf(k, at), role)
				}
			}
		}
		return ""
	}
	// uncovered is a key not answered by exactly one instance's active and
	// one's standby, "" if none.
	uncovered := func(apps ...*runtime.App) string {
		for _, k := range keys {
			actives, standbys := 0, 0
			for _, app := range apps {
				q := iq.NewQuerier(app.Queries())
				if res, err := iq.Get(ctx, q, "prices", k, serde.String, serde.String); err == nil && res.Provenance.Role == iq.RoleActive {
					actives++
				}
				if res, err := iq.Get(ctx, q, "prices", k, serde.String, serde.String, iq.WithStaleness(iq.MaxLag(0))); err == nil && res.Provenance.Role == iq.RoleStandby {
					standbys++
				}
			}
			if actives != 1 || standbys != 1 {
				return fmt.Sprintf("%s: %d actives, %d standbys", k, actives, standbys)
			}
		}
		return ""
	}
	await := func(what string, check func() string) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			m := check()
			if m == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s: %s", what, m)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	first := start(t.TempDir())
	t.Cleanup(first.Kill)
	second := start(t.TempDir())
	t.Cleanup(func() { second.Close(context.Background()) })
	await("an active and a standby of every key, each answering as of every time", func() string {
		for _, m := range []string{uncovered(first, second),
			mismatch(first, iq.RoleActive, false), mismatch(second, iq.RoleActive, false),
			mismatch(first, iq.RoleStandby, false), mismatch(second, iq.RoleStandby, false)} {
			if m != "" {
				return m
			}
		}
		return ""
	})

	// The first instance dies; the second's standbys take over its
	// partitions, history and all, and go on.
	first.Kill()
	for _, k := range keys {
		produce(k, str(k+"7"), 7000)
	}
	await("the survivor answering every key as the active, new versions included", func() string {
		return mismatch(second, iq.RoleActive, true)
	})
	require.NoError(t, second.Close(ctx))

	// A new instance with nothing on disk restores every version.
	third := start(t.TempDir())
	t.Cleanup(func() { third.Close(context.Background()) })
	await("a new instance restoring every version from the changelog", func() string {
		return mismatch(third, iq.RoleActive, true)
	})
	require.Equal(t, "-", want.asOf("a", 4500), "the model keeps tombstones")
	v, found, _, err := activeGet(third, "prices", []byte("b"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "b7", string(v), "a key query reads a versioned store's latest values")
}

// A stream record waiting out a join's grace is in the join's buffer
// store, logged like any store: an instance that takes the task over with
// nothing on disk (the first one killed mid-wait) joins it when stream time
// passes it, with the table as it was at the record's time, a late table
// update included, under both guarantees.
func TestJoinGraceSurvivesTakeover(t *testing.T) {
	t.Parallel()
	for _, g := range []runtime.ProcessingGuarantee{runtime.AtLeastOnce, runtime.ExactlyOnce} {
		t.Run(g.String(), func(t *testing.T) {
			t.Parallel() // each has a broker of its own, and mostly waits
			testJoinGraceTakeover(t, g)
		})
	}
}

func testJoinGraceTakeover(t *testing.T, g runtime.ProcessingGuarantee) {
	b, adm := startBroker(t, "prices", "orders", "lines")
	build := func() *topology.Topology {
		tb := topology.NewBuilder()
		prices := topology.Table(tb, "prices", serde.String, serde.String, "prices", topology.Versioned(time.Hour))
		orders := topology.Stream(tb, "orders", serde.String, serde.String)
		topology.Join(orders, prices, func(o, p string) string { return o + "@" + p },
			topology.Named("lines"), topology.JoinGrace(10*time.Second), topology.JoinValueSerde(serde.String)).
			To("lines", serde.String, serde.String)
		topo, err := tb.Build()
		require.NoError(t, err)
		return topo
	}
	start := func() *runtime.App {
		app, err := runtime.New(build(), runtime.Config{ApplicationID: "grace", Brokers: b.Addrs(), StateDir: t.TempDir(), NumStreamThreads: 1,
			ProcessingGuarantee: g, CommitInterval: 100 * time.Millisecond,
			// The takeover after a Kill waits out the killed
			// member's session, so it is short.
			SessionTimeout: 2 * time.Second, HeartbeatInterval: 500 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, app.Start(context.Background()))
		return app
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	produce := func(topic, key, value string, ts int64) {
		t.Helper()
		require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Partition: 0, Key: []byte(key), Value: []byte(value), Timestamp: time.UnixMilli(ts)}).FirstErr())
	}
	out, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumeTopics("lines"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer out.Close()
	var lines []string
	read := func() []string {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		out.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			lines = append(lines, fmt.Sprintf("%s %s @%d", r.Key, r.Value, r.Timestamp.UnixMilli()))
		})
		return lines
	}

	first := start()
	t.Cleanup(first.Kill)
	produce("prices", "k", "p1", 1_000)
	produce("orders", "k", "o1", 5_000)
	produce("orders", "k", "o2", 16_000) // releases o1 (5 000 + 10 000 ≤ 16 000)
	waitFor(t, 60*time.Second, "the first order joined", func() bool { return slices.Contains(read(), "k o1@p1 @5000") })
	produce("prices", "k", "p2", 12_000) // late, but within o2's grace
	produce("orders", "k", "o3", 20_000)
	// o2 and o3 wait: the buffer, its clock and the table's history must
	// all be in the changelogs for another instance to finish the job,
	// which they are once the first instance committed past o3.
	waitFor(t, 60*time.Second, "the first instance to commit past the waiting orders", func() bool {
		return committedOffset(t, adm, "grace", "orders", 0) >= 3
	})
	first.Kill()

	second := start()
	t.Cleanup(func() { second.Close(context.Background()) })
	produce("orders", "k", "o4", 40_000) // releases o2 and o3
	waitFor(t, 90*time.Second, "the waiting orders joined by the new instance", func() bool {
		got := read()
		return slices.Contains(got, "k o2@p2 @16000") && slices.Contains(got, "k o3@p2 @20000")
	})
	require.NotContains(t, lines, "k o2@p1 @16000", "o2 waited for the late price")
	if g == runtime.ExactlyOnce {
		require.Equal(t, []string{"k o1@p1 @5000", "k o2@p2 @16000", "k o3@p2 @20000"}, lines, "each order joined once")
	}
}

// committedOffset is the offset group last committed for a partition, -1
// if none.
func committedOffset(t *testing.T, adm *kadm.Client, group, topic string, partition int32) int64 {
	t.Helper()
	offs, err := adm.FetchOffsets(context.Background(), group)
	if err != nil {
		return -1
	}
	o, ok := offs.Lookup(topic, partition)
	if !ok || o.Err != nil {
		return -1
	}
	return o.At
}

package runtimetest

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// A suppressed table's buffer goes through everything a store goes
// through, in memory and in badger, under both guarantees: while updates
// are held, the table it
// suppresses answers queries from its active and its standby alike; the
// standby, made active when the active's instance dies, releases the held
// updates when stream time passes them, each once; and an instance with an
// empty state directory restores what is still held, and releases it.
func TestSuppressedTableFailoverAndRestore(t *testing.T) {
	t.Parallel()
	eachBackendAndGuarantee(t, testSuppressedFailoverAndRestore)
}

func testSuppressedFailoverAndRestore(t *testing.T, g runtime.ProcessingGuarantee, inMemory bool) {
	b, adm := startBroker(t, "in", "out")
	id := "suppress-failover-" + g.String()
	var bufferOpts []topology.Option
	if inMemory {
		bufferOpts = append(bufferOpts, topology.InMemory())
	}
	build := func() *topology.Topology {
		tb := topology.NewBuilder()
		topology.Stream(tb, "in", serde.String, serde.String).GroupByKey(serde.String, serde.String).Count("counts").
			Suppress(topology.UntilTimeLimit(time.Second, topology.Unbounded()).PersistStreamTime(), "held", bufferOpts...).
			ToStream().To("out", serde.String, serde.Int64)
		topo, err := tb.Build()
		require.NoError(t, err)
		return topo
	}
	start := func() *runtime.App {
		app, err := runtime.New(build(), runtime.Config{ApplicationID: id, Brokers: b.Addrs(), StateDir: t.TempDir(), NumStreamThreads: 1,
			NumStandbys: 1, ProcessingGuarantee: g, CommitInterval: 100 * time.Millisecond,
			// The takeover after a Kill waits out the killed
			// member's session, so it is short.
			SessionTimeout: 2 * time.Second, HeartbeatInterval: 500 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, app.Start(context.Background()))
		return app
	}
	// Every record goes to partition 0, so that one stream time orders
	// every release; the keys queried are keys of partition 0, where
	// queries look for them.
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	produced := int64(0)
	produce := func(key string, ms int64) {
		t.Helper()
		rec := &kgo.Record{Topic: "in", Partition: 0, Key: []byte(key), Value: []byte("v"), Timestamp: time.UnixMilli(ms)}
		require.NoError(t, cl.ProduceSync(context.Background(), rec).FirstErr())
		produced++
	}
	// allConsumed waits for the group to have committed every record
	// produced, so that no record is processed again after a kill (which
	// at-least-once would count twice).
	allConsumed := func() {
		t.Helper()
		waitFor(t, 60*time.Second, "every input record committed", func() bool {
			o, err := adm.FetchOffsets(context.Background(), id)
			if err != nil {
				return false
			}
			c, ok := o.Lookup("in", 0)
			return ok && c.At == produced
		})
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumeTopics("out"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	require.NoError(t, err)
	defer rd.Close()
	var released []string
	awaitReleased := func(what string, want ...string) {
		t.Helper()
		waitFor(t, 60*time.Second, what, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			rd.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				n, err := serde.Int64.Decode(r.Value)
				require.NoError(t, err)
				released = append(released, string(r.Key)+"="+strconv.FormatInt(n, 10))
			})
			return len(released) >= len(want)
		})
		require.Equal(t, want, released, "releases in order, each once")
	}
	// count is key's count as the replica of app in role answers it, -1
	// when it does not.
	ctx := context.Background()
	count := func(app *runtime.App, role iq.Role, key string) int64 {
		bound := iq.WithStaleness(iq.ActiveOnly())
		if role == iq.RoleStandby {
			bound = iq.WithStaleness(iq.MaxLag(0))
		}
		res, err := iq.Get(ctx, iq.NewQuerier(app.Queries()), "counts", key, serde.String, serde.Int64, bound)
		if err != nil || !res.Found || res.Provenance.Role != role {
			return -1
		}
		return res.Value
	}

	first, second := start(), start()
	t.Cleanup(first.Kill)
	t.Cleanup(second.Kill)
	produce("a", 500)
	produce("a", 700)
	produce("b", 1_200)
	produce("c", 1_800) // releases a; b and c are held
	awaitReleased("a released", "a=2")
	allConsumed()

	// Both replicas of partition 0 answer the counts the held updates
	// stand for.
	var active, standby *runtime.App
	waitFor(t, 60*time.Second, "an active and a standby answering every count", func() bool {
		active, standby = nil, nil
		for _, app := range []*runtime.App{first, second} {
			if count(app, iq.RoleActive, "a") == 2 {
				active = app
			}
			if count(app, iq.RoleStandby, "a") == 2 {
				standby = app
			}
		}
		if active == nil || standby == nil || active == standby {
			return false
		}
		for _, app := range []*runtime.App{active, standby} {
			role := iq.RoleActive
			if app == standby {
				role = iq.RoleStandby
			}
			if count(app, role, "b") != 1 || count(app, role, "c") != 1 {
				return false
			}
		}
		return true
	})

	// The active's instance dies; the standby takes the buffer over and
	// releases b, then c, as stream time passes them.
	active.Kill()
	produce("e", 2_300) // releases b
	produce("i", 2_900) // releases c; e and i are held
	awaitReleased("b and c released by the former standby", "a=2", "b=1", "c=1")
	waitFor(t, 60*time.Second, "the survivor answering as the active", func() bool {
		return count(standby, iq.RoleActive, "e") == 1 && count(standby, iq.RoleActive, "i") == 1
	})
	allConsumed()
	require.NoError(t, standby.Close(ctx))

	// A new instance with nothing on disk restores e and i, held, and the
	// stream time they wait against.
	third := start()
	t.Cleanup(third.Kill)
	waitFor(t, 60*time.Second, "the counts restored", func() bool {
		return count(third, iq.RoleActive, "a") == 2 && count(third, iq.RoleActive, "i") == 1
	})
	produce("j", 4_000) // releases e, then i
	awaitReleased("e and i released after restoration", "a=2", "b=1", "c=1", "e=1", "i=1")
	require.False(t, slices.Contains(released, "j=1"), "j is held")
	require.NoError(t, third.Close(ctx))
}

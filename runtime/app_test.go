package runtime

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/internal/instancecore"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// releaseResources closes what prepare opened, as a failed Start does, for
// tests that drive an App's parts without starting it.
func (a *App) releaseResources() {
	a.shutdown(context.Background(), instancecore.ShutdownFailedStart)
}

func countTopology(t testing.TB) *topology.Topology {
	b := topology.NewBuilder()
	s := topology.Stream(b, "in", serde.String, serde.String)
	s.GroupByKey(serde.String, serde.String).Count("counts")
	topo, err := b.Build()
	require.NoError(t, err)
	return topo
}

// startBroker starts a broker of the test's own with topics of two
// partitions.
//
// A test whose brokers and state directories are all its own, which mostly
// waits on them, calls t.Parallel. A test that sets a process-wide seam
// (crashAt, the open-file limit), counts the process's open files, or
// asserts a tight wall-clock bound does not: the testing package starts
// parallel tests only once every serial one has finished, so none of them
// runs while such a seam is set.
func startBroker(t *testing.T, topics ...string) (*broker.Broker, *kadm.Client) {
	b, err := broker.Start(broker.Config{Partitions: 2})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	_, err = adm.CreateTopics(context.Background(), 2, -1, nil, topics...)
	require.NoError(t, err)
	return b, adm
}

// testThreads is the stream threads the tests that count group members give
// each instance: EDDY_TEST_THREADS, as for the integration tests, or the
// default.
func testThreads(t *testing.T) int {
	t.Helper()
	s := os.Getenv("EDDY_TEST_THREADS")
	if s == "" {
		return DefaultNumStreamThreads
	}
	n, err := strconv.Atoi(s)
	require.NoError(t, err, "EDDY_TEST_THREADS")
	require.Positive(t, n, "EDDY_TEST_THREADS")
	return n
}

func groupMembers(t *testing.T, adm *kadm.Client, group string) int {
	d, err := adm.DescribeGroups(context.Background(), group)
	require.NoError(t, err)
	return len(d[group].Members)
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Close leaves the group at once; Kill leaves the member behind until the
// session timeout, as a crash would.
func TestCloseLeavesGroupKillDoesNot(t *testing.T) {
	b, adm := startBroker(t, "in")
	// Every stream thread is a member of the group.
	threads := testThreads(t)
	start := func() *App {
		app, err := New(countTopology(t), Config{ApplicationID: "g", Brokers: b.Addrs(), StateDir: t.TempDir(), SessionTimeout: 20 * time.Second,
			NumStreamThreads: threads})
		require.NoError(t, err)
		require.NoError(t, app.Start(context.Background()))
		waitFor(t, 10*time.Second, "ready", app.Ready)
		return app
	}
	app := start()
	require.Equal(t, threads, groupMembers(t, adm, "g"))
	require.NoError(t, app.Close(context.Background()))
	require.Equal(t, 0, groupMembers(t, adm, "g"), "a closed instance must have left the group")
	require.Equal(t, StateNotRunning, app.State())

	app = start()
	app.Kill()
	require.Equal(t, StateNotRunning, app.State())
	require.Equal(t, threads, groupMembers(t, adm, "g"), "a killed instance must not have left the group")
	require.NoError(t, app.Close(context.Background()), "Close after Kill is a no-op")
}

func TestStartFailsOnMissingSourceTopic(t *testing.T) {
	b, _ := startBroker(t, "other")
	app, err := New(countTopology(t), Config{ApplicationID: "g", Brokers: b.Addrs(), StateDir: t.TempDir()})
	require.NoError(t, err)
	err = app.Start(context.Background())
	require.ErrorContains(t, err, `source topic "in"`)
	var missing *MissingTopicsError
	require.ErrorAs(t, err, &missing)
	require.Equal(t, []string{"in"}, missing.Sources)
	require.Empty(t, missing.Sinks)
	require.Equal(t, StateFailed, app.State())
}

func TestSecondInstanceOnSameStateDirFails(t *testing.T) {
	b, _ := startBroker(t, "in")
	dir := t.TempDir()
	a1, err := New(countTopology(t), Config{ApplicationID: "g", Brokers: b.Addrs(), StateDir: dir})
	require.NoError(t, err)
	require.NoError(t, a1.Start(context.Background()))
	defer a1.Close(context.Background())
	a2, err := New(countTopology(t), Config{ApplicationID: "g", Brokers: b.Addrs(), StateDir: dir})
	require.NoError(t, err)
	require.ErrorIs(t, a2.Start(context.Background()), ErrStateDirLocked)
}

func TestMetricsCollector(t *testing.T) {
	b, adm := startBroker(t, "in")
	app, err := New(countTopology(t), Config{ApplicationID: "m", Brokers: b.Addrs(), StateDir: t.TempDir(), CommitInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	defer app.Close(context.Background())
	waitFor(t, 10*time.Second, "ready", app.Ready)
	_ = adm
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic("in"))
	require.NoError(t, err)
	defer cl.Close()
	for range 10 {
		cl.Produce(context.Background(), &kgo.Record{Key: []byte("k"), Value: []byte("v")}, nil)
	}
	require.NoError(t, cl.Flush(context.Background()))

	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(app.Metrics()))
	values := func() map[string]float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		out := map[string]float64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				switch {
				case m.GetCounter() != nil:
					out[mf.GetName()] += m.GetCounter().GetValue()
				case m.GetHistogram() != nil:
					out[mf.GetName()] += float64(m.GetHistogram().GetSampleCount())
				case m.GetGauge() != nil:
					out[mf.GetName()] += m.GetGauge().GetValue()
				}
			}
		}
		return out
	}
	waitFor(t, 10*time.Second, "10 records processed and committed", func() bool {
		v := values()
		return v["eddy_records_processed_total"] == 10 && v["eddy_commit_latency_seconds"] > 0
	})
	v := values()
	require.GreaterOrEqual(t, v["eddy_rebalances_total"], 1.0)
	require.Contains(t, v, "eddy_replica_position")
	require.Contains(t, v, "eddy_records_skipped_total")
	require.Contains(t, v, "eddy_store_resets_total")
	require.Zero(t, v["eddy_store_resets_total"])
}

// activeGet reads a key through the query path under the default bound, as
// an application does: from the running active of its partition on a.
func activeGet(a *App, store string, key []byte) (value []byte, found bool, partition int32, err error) {
	res, err := iq.NewQuerier(a.Queries()).GetBytes(context.Background(), store, key)
	return res.Value, res.Found, res.Provenance.Partition, err
}

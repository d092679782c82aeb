package runtime

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// documentedSeries is one row of the metrics table in docs/operations.md.
type documentedSeries struct {
	name, typ, present, from string
}

// documentedMetrics parses the Metrics section of docs/operations.md: the
// table of series, and the table of the labels whose values are fixed,
// each with its values.
func documentedMetrics(t *testing.T) ([]documentedSeries, map[string][]string) {
	t.Helper()
	f, err := os.Open("../docs/operations.md")
	require.NoError(t, err)
	defer f.Close()
	var series []documentedSeries
	labels := map[string][]string{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "## Metrics":
			in = true
		case strings.HasPrefix(line, "#"):
			in = false
		case in && strings.HasPrefix(line, "| `eddy_"):
			cols := strings.Split(strings.Trim(line, "|"), "|")
			require.Len(t, cols, 6, "metrics table row %q", line)
			for i := range cols {
				cols[i] = strings.Trim(cols[i], " `")
			}
			series = append(series, documentedSeries{name: cols[0], typ: cols[1], present: cols[3], from: cols[4]})
		case in && strings.HasPrefix(line, "| `"):
			cols := strings.Split(strings.Trim(line, "|"), "|")
			require.Len(t, cols, 2, "label table row %q", line)
			// Values are the code spans before any parenthesis, which
			// only explains them.
			vals, _, _ := strings.Cut(cols[1], " (")
			labels[strings.Trim(cols[0], " `")] = codeSpans(vals)
		}
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, series, "docs/operations.md's Metrics section has no table")
	require.NotEmpty(t, labels, "docs/operations.md's Metrics section has no label table")
	return series, labels
}

// codeSpans returns the texts between backquotes in s.
func codeSpans(s string) []string {
	var out []string
	for {
		_, rest, ok := strings.Cut(s, "`")
		if !ok {
			return out
		}
		v, after, ok := strings.Cut(rest, "`")
		if !ok {
			return out
		}
		out = append(out, v)
		s = after
	}
}

// TestMetricLabelValuesDocumented holds the documented values of the
// fixed labels to every value the code can give them: the App's states,
// the sources of processed records, and the roles a replica can report.
func TestMetricLabelValuesDocumented(t *testing.T) {
	_, labels := documentedMetrics(t)
	var states []string
	for _, s := range appStates() {
		states = append(states, s.String())
	}
	require.ElementsMatch(t, states, labels["state"], "state label values")
	require.ElementsMatch(t, []string{sourceInput, sourceRepartition}, labels["source"], "source label values")
	// The replicas' roles, and the one the query layer adds for an active
	// whose group contact is old, which the replica series and the demo's
	// query counter report.
	roles := map[string]bool{iq.RoleUnconfirmed.String(): true}
	for s := task.State(0); !strings.HasPrefix(s.String(), "State("); s++ {
		_, r := edgeRoles(s)
		roles[r.String()] = true
	}
	require.ElementsMatch(t, slices.Collect(maps.Keys(roles)), labels["role"], "role label values")
}

// gatekeeper forwards every record, except that a record valued "wait"
// holds its task until release is closed; it punctuates every 10 ms.
type gatekeeper struct {
	ctx     topology.ProcessorContext[string, string]
	release <-chan struct{}
}

func (g *gatekeeper) Init(ctx topology.ProcessorContext[string, string]) error {
	g.ctx = ctx
	_, err := ctx.Schedule(10*time.Millisecond, topology.WallClockTime, func(time.Time) error { return nil })
	return err
}

func (g *gatekeeper) Process(rec topology.Record[string, string]) error {
	if rec.Value == "wait" {
		<-g.release
	}
	return g.ctx.Forward(rec)
}

func (g *gatekeeper) Close() error { return nil }

// gatedCount counts values after a gatekeeper, re-keyed by value so that
// the topology has a repartition topic and two sub-topologies.
func gatedCount(t *testing.T, release <-chan struct{}) *topology.Topology {
	b := topology.NewBuilder()
	s := topology.Stream(b, "in", serde.String, serde.String)
	gated := topology.Process(s, "gate", func() topology.Processor[string, string, string, string] {
		return &gatekeeper{release: release}
	})
	// Without combining, every input record becomes one repartition
	// record, so the per-source counts are known.
	topology.GroupBy(gated, func(_, v string) string { return v }, "values", serde.String, serde.String).
		Count("counts")
	topo, err := b.Build()
	require.NoError(t, err)
	return topo
}

// scrape gathers reg: each family's type and its series, by label string.
type scrape map[string]struct {
	typ    dto.MetricType
	series map[string]float64
}

func gather(t *testing.T, reg *prometheus.Registry) scrape {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := scrape{}
	for _, mf := range mfs {
		fam := out[mf.GetName()]
		fam.typ, fam.series = mf.GetType(), map[string]float64{}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				if l.GetName() != "application" {
					labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
				}
			}
			var v float64
			switch {
			case m.GetCounter() != nil:
				v = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				v = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				v = float64(m.GetHistogram().GetSampleCount())
			}
			fam.series[strings.Join(labels, ",")] = v
		}
		out[mf.GetName()] = fam
	}
	return out
}

// sum adds the series of a family whose labels contain every filter.
func (s scrape) sum(name string, filters ...string) float64 {
	var n float64
	for labels, v := range s[name].series {
		if containsAll(labels, filters) {
			n += v
		}
	}
	return n
}

func containsAll(labels string, filters []string) bool {
	for _, f := range filters {
		if !strings.Contains(labels, f) {
			return false
		}
	}
	return true
}

// labelValues lists the values a family's series give one label.
func (s scrape) labelValues(name, label string) []string {
	seen := map[string]bool{}
	for labels := range s[name].series {
		for _, l := range strings.Split(labels, ",") {
			if v, ok := strings.CutPrefix(l, label+"="); ok {
				seen[strings.Trim(v, `"`)] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

var metricTypes = map[string]dto.MetricType{"counter": dto.MetricType_COUNTER, "gauge": dto.MetricType_GAUGE, "histogram": dto.MetricType_HISTOGRAM}

// TestMetricsDocumented checks App.Metrics against docs/operations.md's tables: right
// after Start every "always" series is there, once tasks run every runtime
// series is, and nothing undocumented ever is. It then checks the consumer
// lag (above 0 while a task holds its input, 0 once drained) and that a
// task's series leave with the task.
func TestMetricsDocumented(t *testing.T) {
	b, _ := startBroker(t, "in")
	release := make(chan struct{})
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	cfg := Config{ApplicationID: "m", Brokers: b.Addrs(), StateDir: t.TempDir(), CommitInterval: 50 * time.Millisecond}
	app, err := New(gatedCount(t, release), cfg)
	require.NoError(t, err)
	defer app.Close(context.Background())
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(app.Metrics()))

	docs, labels := documentedMetrics(t)
	documented := map[string]documentedSeries{}
	for _, d := range docs {
		documented[d.name] = d
	}
	check := func(s scrape, all bool) {
		t.Helper()
		for name, fam := range s {
			d, ok := documented[name]
			require.True(t, ok, "%s is not in docs/operations.md's metrics table", name)
			require.Equal(t, "runtime", d.from, "%s comes from App.Metrics", name)
			require.Equal(t, metricTypes[d.typ], fam.typ, "%s's type", name)
			for label, values := range labels {
				for _, v := range s.labelValues(name, label) {
					require.Contains(t, values, v, "%s's %s label value %q is not documented", name, label, v)
				}
			}
		}
		for _, d := range docs {
			// This topology has no global table: TestGlobalMetrics
			// checks the global series.
			if d.from == "runtime" && (all || d.present == "always") && !strings.HasPrefix(d.present, "per global") {
				require.Contains(t, s, d.name, "documented series missing from App.Metrics (present: %s)", d.present)
			}
		}
	}
	oneHot := func(s scrape, state State) {
		t.Helper()
		require.Equal(t, 1.0, s.sum("eddy_app_state"), "exactly one state is 1")
		require.Equal(t, 1.0, s.sum("eddy_app_state", fmt.Sprintf("state=%q", state)))
		require.Len(t, s["eddy_app_state"].series, len(appStates()), "one series per state")
	}

	s := gather(t, reg)
	check(s, false)
	oneHot(s, StateCreated)

	require.NoError(t, app.Start(context.Background()))
	s = gather(t, reg)
	check(s, false)
	require.Equal(t, 1.0, s.sum("eddy_app_state"), "exactly one state is 1")
	require.Equal(t, 1.0, s.sum("eddy_app_state", fmt.Sprintf("state=%q", StateRebalancing))+s.sum("eddy_app_state", fmt.Sprintf("state=%q", StateRunning)),
		"just started: rebalancing, or already running")
	waitFor(t, 30*time.Second, "running", func() bool { return app.State() == StateRunning })
	s = gather(t, reg)
	oneHot(s, StateRunning)
	require.Zero(t, s.sum("eddy_records_processed_total"))
	require.Equal(t, []string{"input", "repartition"}, s.labelValues("eddy_records_processed_total", "source"))
	require.Zero(t, s.sum("eddy_restore_remaining_records"))

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic("in"))
	require.NoError(t, err)
	defer cl.Close()
	produce := func(key, value string) {
		t.Helper()
		require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Key: []byte(key), Value: []byte(value)}).FirstErr())
	}
	for i := range 20 {
		produce(fmt.Sprint("k", i), fmt.Sprint("v", i%3))
	}
	repart := "m-values-repartition"
	// Labels come sorted by name.
	lagSeries := []string{`partition="0",topic="in"`, `partition="1",topic="in"`,
		fmt.Sprintf(`partition="0",topic=%q`, repart), fmt.Sprintf(`partition="1",topic=%q`, repart)}
	drained := func(s scrape) bool {
		for _, l := range lagSeries {
			v, ok := s["eddy_consumer_lag_records"].series[l]
			if !ok || v != 0 {
				return false
			}
		}
		return true
	}
	// The per-task series are as the thread last published them while it
	// commits (App.Tasks): they catch up with the thread's own counts.
	waitFor(t, 20*time.Second, "20 input and 20 repartition records processed, all lags 0, per task too", func() bool {
		s = gather(t, reg)
		return s.sum("eddy_records_processed_total", `source="input"`) == 20 &&
			s.sum("eddy_records_processed_total", `source="repartition"`) == 20 && drained(s) &&
			s.sum("eddy_task_records_processed_total") == 40
	})
	check(s, true)
	require.Equal(t, []string{"0_0", "0_1", "1_0", "1_1"}, s.labelValues("eddy_task_records_processed_total", "task"))
	waitFor(t, 10*time.Second, "punctuations counted", func() bool {
		return gather(t, reg).sum("eddy_task_punctuations_total", `task="0_0"`) > 0
	})
	require.Equal(t, []string{"0_0", "0_1", "1_0", "1_1"}, gather(t, reg).labelValues("eddy_task_restore_remaining_records", "task"))

	// A task held in a processor keeps its input uncommitted: its lag
	// grows while the others stay drained.
	produce("held", "wait")
	for i := range 5 {
		produce("held", fmt.Sprint("after", i))
	}
	waitFor(t, 20*time.Second, "input lag of 6 while the task waits", func() bool {
		s = gather(t, reg)
		return s.sum("eddy_consumer_lag_records", `topic="in"`) == 6
	})
	close(release)
	released = true
	waitFor(t, 20*time.Second, "input lag back to 0 after draining", func() bool {
		s = gather(t, reg)
		return drained(s) && s.sum("eddy_records_processed_total", `source="input"`) == 26
	})

	// A second instance takes tasks away: the first one's series of those
	// tasks and of their partitions go.
	cfg2 := cfg
	cfg2.StateDir = t.TempDir()
	app2, err := New(gatedCount(t, release), cfg2)
	require.NoError(t, err)
	defer app2.Close(context.Background())
	require.NoError(t, app2.Start(context.Background()))
	waitFor(t, 30*time.Second, "tasks shared between the instances", func() bool {
		return len(app.Tasks()) > 0 && len(app2.Tasks()) > 0 && len(app.Tasks())+len(app2.Tasks()) == 4
	})
	waitFor(t, 10*time.Second, "the first instance's task series to be those of its tasks", func() bool {
		s = gather(t, reg)
		var held []string
		for _, ti := range app.Tasks() {
			held = append(held, ti.ID.String())
		}
		for _, fam := range []string{"eddy_task_records_processed_total", "eddy_task_punctuations_total", "eddy_task_restore_remaining_records", "eddy_task_restored_records_total"} {
			if !slices.Equal(s.labelValues(fam, "task"), held) {
				return false
			}
		}
		return len(s["eddy_consumer_lag_records"].series) == len(held) // one source partition per task
	})
	require.Less(t, len(s.labelValues("eddy_task_records_processed_total", "task")), 4)
}

// countThirtyKeys runs the count topology with cfg until it has counted
// keys k0 to k29 once each, written to "in" on cfg's brokers, and closes
// it, leaving their counts in its stores and changelogs.
func countThirtyKeys(t *testing.T, cfg Config) {
	t.Helper()
	app, err := New(countTopology(t), cfg)
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.DefaultProduceTopic("in"))
	require.NoError(t, err)
	defer cl.Close()
	for i := range 30 {
		require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Key: []byte(fmt.Sprint("k", i)), Value: []byte("v")}).FirstErr())
	}
	waitFor(t, 20*time.Second, "30 keys counted", func() bool {
		n := 0
		for i := range 30 {
			if count(app, fmt.Sprint("k", i)) == 1 {
				n++
			}
		}
		return n == 30
	})
	require.NoError(t, app.Close(context.Background()))
}

// TestMetricsRestoreProgress restores a task's store on an instance with
// an empty state directory: the per-task and instance totals count the
// changelog records applied, and nothing remains once the tasks run.
func TestMetricsRestoreProgress(t *testing.T) {
	b, _ := startBroker(t, "in")
	cfg := Config{ApplicationID: "r", Brokers: b.Addrs(), StateDir: t.TempDir(), CommitInterval: 50 * time.Millisecond}
	countThirtyKeys(t, cfg)

	cfg.StateDir = t.TempDir()
	app, err := New(countTopology(t), cfg)
	require.NoError(t, err)
	defer app.Close(context.Background())
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(app.Metrics()))
	require.NoError(t, app.Start(context.Background()))
	waitFor(t, 20*time.Second, "the changelog restored", app.Ready)
	var s scrape
	waitFor(t, 10*time.Second, "30 changelog records counted as restored", func() bool {
		s = gather(t, reg)
		return s.sum("eddy_restored_records_total") == 30
	})
	require.Equal(t, 30.0, s.sum("eddy_task_restored_records_total"))
	require.Equal(t, []string{"0_0", "0_1"}, s.labelValues("eddy_task_restored_records_total", "task"))
	require.Zero(t, s.sum("eddy_restore_remaining_records"))
	require.Zero(t, s.sum("eddy_task_restore_remaining_records"))
}

// documentedSeriesOf returns the rows of the metrics table alone.
func documentedSeriesOf(t *testing.T) []documentedSeries {
	t.Helper()
	series, _ := documentedMetrics(t)
	return series
}

// TestRestoreRemainingFollowsRestoration holds a restoration's changelog
// fetches until the remaining records show, then keeps the stream thread
// busy (its lock held, as through a long batch of records) while the
// restoration finishes: eddy_restore_remaining_records and the task's own
// gauge fall to 0 as soon as the records are applied, not when the thread
// is next free.
func TestRestoreRemainingFollowsRestoration(t *testing.T) {
	b, adm := startBroker(t, "in")
	cfg := Config{ApplicationID: "rr", Brokers: b.Addrs(), StateDir: t.TempDir(), CommitInterval: 50 * time.Millisecond, NumStreamThreads: 1}
	countThirtyKeys(t, cfg)

	const changelogTopic = "rr-counts-changelog"
	topics, err := adm.ListTopics(context.Background(), changelogTopic)
	require.NoError(t, err)
	require.True(t, topics.Has(changelogTopic))
	id := topics[changelogTopic].ID
	release := make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	b.Cluster().ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster().KeepControl()
		for _, ft := range req.(*kmsg.FetchRequest).Topics {
			if ft.Topic == changelogTopic || ft.TopicID == id {
				b.Cluster().SleepControl(func() { <-release })
				break
			}
		}
		return nil, nil, false
	})

	cfg.StateDir = t.TempDir()
	app, err := New(countTopology(t), cfg)
	require.NoError(t, err)
	defer app.Close(context.Background())
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(app.Metrics()))
	require.NoError(t, app.Start(context.Background()))
	waitFor(t, 20*time.Second, "the changelog records to restore listed", func() bool {
		s := gather(t, reg)
		return s.sum("eddy_restore_remaining_records") == 30 && s.sum("eddy_task_restore_remaining_records") == 30
	})

	th := app.threads[0]
	th.mu.Lock()
	locked := true
	defer func() {
		if locked {
			th.mu.Unlock()
		}
	}()
	once.Do(func() { close(release) })
	waitFor(t, 20*time.Second, "nothing left to restore while the thread is busy", func() bool {
		s := gather(t, reg)
		return s.sum("eddy_restore_remaining_records") == 0 && s.sum("eddy_task_restore_remaining_records") == 0
	})
	th.mu.Unlock()
	locked = false
	waitFor(t, 20*time.Second, "the restored tasks running", app.Ready)
}

// TestStoreSizeMetrics: every store partition the instance holds has its
// size on disk and its key count, and the count follows the keys written
// once the measurement is old enough to be taken again.
func TestStoreSizeMetrics(t *testing.T) {
	b, _ := startBroker(t, "in")
	// A store's bytes on disk are exact only in a database of its own: in
	// the shared layout they leave out what it shares (statestore.Sizer).
	cfg := Config{ApplicationID: "sz", Brokers: b.Addrs(), StateDir: t.TempDir(), CommitInterval: 50 * time.Millisecond,
		StoreLayout: StoreLayoutPerStore}
	app, err := New(countTopology(t), cfg)
	require.NoError(t, err)
	defer app.Close(context.Background())
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(app.Metrics()))
	require.NoError(t, app.Start(context.Background()))
	waitFor(t, 30*time.Second, "running", func() bool { return app.State() == StateRunning })
	s := gather(t, reg)
	require.Equal(t, []string{"0_0", "0_1"}, s.labelValues("eddy_store_size_bytes", "task"))
	require.Equal(t, []string{"counts"}, s.labelValues("eddy_store_keys_approximate", "store"))
	require.Zero(t, s.sum("eddy_store_keys_approximate"))
	require.Positive(t, s.sum("eddy_store_size_bytes"), "a badger store has files from the start")

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.DefaultProduceTopic("in"))
	require.NoError(t, err)
	defer cl.Close()
	for i := range 40 {
		require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Key: []byte(fmt.Sprint("k", i)), Value: []byte("v")}).FirstErr())
	}
	waitFor(t, 20*time.Second, "40 keys counted", func() bool { return count(app, "k39") == 1 && count(app, "k0") == 1 })
	// The measurement is reused for storeSizeMaxAge; forget it rather
	// than wait.
	waitFor(t, 20*time.Second, "40 keys in the key count", func() bool {
		app.metrics.sizes.mu.Lock()
		clear(app.metrics.sizes.known)
		app.metrics.sizes.mu.Unlock()
		return gather(t, reg).sum("eddy_store_keys_approximate") == 40
	})
}

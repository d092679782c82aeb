package runtime

import (
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/task"
)

// metrics are the App's Prometheus metrics. Counters and histograms are
// updated as things happen; everything that describes what the instance
// holds now (its state, tasks, replicas, consumer lag) is read at scrape
// time, so it costs nothing between scrapes and a task that leaves takes
// its series with it. Every series without a task, replica or partition
// label is there from New on, zero until something happens.
type metrics struct {
	app *App
	// repartition holds the full names of the repartition topics, which
	// eddy_records_processed_total tells apart from the user's input.
	repartition map[string]bool
	states      []State
	// sizes is shared with the inspection of tasks (App.StoreSize).
	sizes storeSizes

	input, repartitioned prometheus.Counter
	processed            *prometheus.CounterVec
	skipped              prometheus.CounterFunc
	failed               prometheus.CounterFunc
	replaced             prometheus.CounterFunc
	resets               prometheus.CounterFunc
	wiped                prometheus.CounterFunc
	restored             prometheus.CounterFunc
	commitLatency        prometheus.Histogram
	rebalances           prometheus.Counter

	state, consumerLag, restoreRemaining                                                           *prometheus.Desc
	replicaPosition, replicaLag, storeBytes, storeKeys                                             *prometheus.Desc
	globalPosition, globalLag, globalRead                                                          *prometheus.Desc
	taskProcessed, taskPunctuations, taskDroppedLate, taskDroppedJoin, taskRemaining, taskRestored *prometheus.Desc
}

// Label values of eddy_records_processed_total's source label.
const (
	sourceInput       = "input"
	sourceRepartition = "repartition"
)

// appStates lists the App's states, found by asking State.String about each
// small value in turn: a state added to the type shows up in eddy_app_state
// without this file knowing of it.
func appStates() []State {
	var out []State
	for s := State(0); s < 64; s++ {
		if !strings.HasPrefix(s.String(), "State(") {
			out = append(out, s)
		}
	}
	return out
}

// newMetrics makes the App's metrics; they read the App at scrape time.
func newMetrics(a *App) *metrics {
	constLabels := prometheus.Labels{"application": a.cfg.ApplicationID}
	m := &metrics{
		app:         a,
		repartition: make(map[string]bool),
		states:      appStates(),
	}
	m.newCounters(constLabels)
	m.newDescs(constLabels)
	m.input = m.processed.WithLabelValues(sourceInput)
	m.repartitioned = m.processed.WithLabelValues(sourceRepartition)
	for _, st := range graph.Of(a.topo).SubTopologies() {
		for _, r := range st.Sources {
			if r.Internal {
				m.repartition[r.FullName(a.cfg.ApplicationID)] = true
			}
		}
	}
	return m
}

// newCounters makes the counters and the histogram, updated as things
// happen or read from the App's own counts.
func (m *metrics) newCounters(constLabels prometheus.Labels) {
	a := m.app
	counterFunc := func(name, help string, f func() int64) prometheus.CounterFunc {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "eddy", Name: name, Help: help, ConstLabels: constLabels},
			func() float64 { return float64(f()) })
	}
	m.processed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "eddy", Name: "records_processed_total",
		Help:        `Records this instance's stream threads processed, by source: "input" (the user's source topics) or "repartition" (the application's repartition topics).`,
		ConstLabels: constLabels,
	}, []string{"source"})
	m.skipped = counterFunc("records_skipped_total", "Records skipped because they could not be deserialized.",
		a.skipped.Load)
	m.failed = counterFunc("processing_errors_total", "Records skipped because a processor failed on them (ProcessingLogAndContinue).",
		a.processingErrors.Load)
	m.replaced = counterFunc("stream_threads_replaced_total", "Stream threads replaced after an error (ReplaceThread).",
		a.replaced.Load)
	m.resets = counterFunc("store_resets_total", "Stores emptied and rebuilt from their changelogs because their position no longer fitted the changelog.",
		a.storeResets)
	m.wiped = counterFunc("stores_wiped_total", "Persistent stores whose files were damaged (or of another window layout), deleted and rebuilt from their changelogs.",
		a.storesWiped.Load)
	m.restored = counterFunc("restored_records_total", "Changelog records applied by the restorations that finished since this instance started.",
		a.restored.total)
	m.commitLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "eddy", Name: "commit_latency_seconds",
		Help:        "Time a stream thread takes to commit: flush, changelog acknowledgements, store writes, offsets.",
		ConstLabels: constLabels,
		Buckets:     prometheus.ExponentialBuckets(0.001, 2, 14),
	})
	m.rebalances = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "eddy", Name: "rebalances_total",
		Help:        "Assignments received by this instance's stream threads.",
		ConstLabels: constLabels,
	})
}

// newDescs describes the series read at scrape time.
func (m *metrics) newDescs(constLabels prometheus.Labels) {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("eddy_"+name, help, labels, constLabels)
	}
	m.state = desc("app_state", "1 for the state the App is in, 0 for the others.", "state")
	m.consumerLag = desc("consumer_lag_records",
		"Records on a source partition of this instance's active tasks beyond the group's committed offset (end offset, the last stable offset under exactly-once, minus committed), as listed at most 3 s ago.",
		"topic", "partition")
	m.restoreRemaining = desc("restore_remaining_records", "Changelog records this instance's restoring tasks still have to apply.")
	m.replicaPosition = desc("replica_position", "Changelog offset of the next record a store partition would apply.",
		"store", "partition", "role")
	m.replicaLag = desc("replica_lag_records", "Changelog records a store partition lacks (restoring actives, standbys, warmups) behind the end the broker confirmed lately; 0 for running actives the group confirmed lately.",
		"store", "partition", "role")
	m.storeBytes = desc("store_size_bytes", "Bytes a store partition's files take on disk, as measured at most 10 s ago (0 for an in-memory store; an underestimate for a store in a shared database, see statestore.Sizer).",
		"store", "task")
	m.storeKeys = desc("store_keys_approximate", "Approximate key count of a store partition, as counted at most 10 s ago.",
		"store", "task")
	m.globalPosition = desc("global_store_position", "Offset of the next record of a global store's topic partition the global thread would apply.",
		"store", "partition")
	m.globalLag = desc("global_store_lag_records", "Records of a global store's topic partition the global store lacks (end offset, the last stable offset under exactly-once, minus position).",
		"store", "partition")
	m.globalRead = desc("global_store_records_read_total", "Records of a global store's topic partition the global thread applied since this instance started, restoring and following.",
		"store", "partition")
	m.taskProcessed = desc("task_records_processed_total", "Records an active task processed since this instance last opened it.",
		"task")
	m.taskPunctuations = desc("task_punctuations_total", "Punctuator calls an active task made since this instance last opened it.",
		"task")
	m.taskDroppedLate = desc("task_dropped_late_records_total", "Records an active task's windowed aggregations left out of closed windows since this instance last opened it.",
		"task")
	m.taskDroppedJoin = desc("task_dropped_join_records_total", "Stream records an active task's stream-table joins dropped for a null key or value since this instance last opened it.",
		"task")
	m.taskRemaining = desc("task_restore_remaining_records", "Changelog records an active task still has to restore; 0 once it runs.",
		"task")
	m.taskRestored = desc("task_restored_records_total", "Changelog records restoration applied to an active task's stores since this instance started.",
		"task")
}

// processedFrom counts n records processed from a source topic.
func (m *metrics) processedFrom(topic string, n int) {
	if n == 0 {
		return
	}
	if m.repartition[topic] {
		m.repartitioned.Add(float64(n))
	} else {
		m.input.Add(float64(n))
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.processed, m.skipped, m.failed, m.replaced, m.resets, m.wiped, m.restored, m.commitLatency, m.rebalances}
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
	for _, d := range []*prometheus.Desc{m.state, m.consumerLag, m.restoreRemaining, m.replicaPosition, m.replicaLag, m.storeBytes, m.storeKeys,
		m.globalPosition, m.globalLag, m.globalRead,
		m.taskProcessed, m.taskPunctuations, m.taskDroppedLate, m.taskDroppedJoin, m.taskRemaining, m.taskRestored} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
	a := m.app
	m.collectState(ch)
	// Start opens and starts the global thread before it sets serving.
	if a.serving.Load() && a.global != nil {
		m.collectGlobal(ch)
	}
	// Start sets up the threads, the registry and the freshness tracker
	// before it sets threadsUp; until then they must not be read.
	started := a.threadsUp.Load()
	var replicas []ReplicaInfo
	if started {
		replicas = a.Replicas()
	}
	// What is left to restore comes from the replicas, which read the
	// restorations' progress as it is, not from the tasks, which show
	// it as it was at the end of their thread's last poll.
	remaining := restoreRemaining(replicas)
	var total int64
	for _, n := range remaining {
		total += n
	}
	ch <- prometheus.MustNewConstMetric(m.restoreRemaining, prometheus.GaugeValue, float64(total))
	if !started {
		return
	}
	m.collectTasks(ch, remaining)
	m.collectReplicas(ch, replicas)
	m.collectConsumerLag(ch)
}

// collectState sends eddy_app_state: 1 for the App's state, 0 for the
// others.
func (m *metrics) collectState(ch chan<- prometheus.Metric) {
	now := m.app.State()
	for _, s := range m.states {
		v := 0.0
		if s == now {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(m.state, prometheus.GaugeValue, v, s.String())
	}
}

// collectGlobal sends the global stores' positions, lags and records read.
func (m *metrics) collectGlobal(ch chan<- prometheus.Metric) {
	for _, gp := range m.app.global.partitions() {
		part := strconv.Itoa(int(gp.partition))
		if gp.position >= 0 {
			ch <- prometheus.MustNewConstMetric(m.globalPosition, prometheus.GaugeValue, float64(gp.position), gp.store, part)
		}
		if gp.lag >= 0 {
			ch <- prometheus.MustNewConstMetric(m.globalLag, prometheus.GaugeValue, float64(gp.lag), gp.store, part)
		}
		ch <- prometheus.MustNewConstMetric(m.globalRead, prometheus.CounterValue, float64(gp.read), gp.store, part)
	}
}

// collectTasks sends each active task's series, as its thread published
// them: a thread stuck in a processor does not stop the metrics that show
// it stuck.
func (m *metrics) collectTasks(ch chan<- prometheus.Metric, remaining map[task.ID]int64) {
	for _, ti := range m.app.Tasks() {
		id := ti.ID.String()
		ch <- prometheus.MustNewConstMetric(m.taskProcessed, prometheus.CounterValue, float64(ti.Processed), id)
		ch <- prometheus.MustNewConstMetric(m.taskPunctuations, prometheus.CounterValue, float64(ti.Punctuations), id)
		ch <- prometheus.MustNewConstMetric(m.taskDroppedLate, prometheus.CounterValue, float64(ti.DroppedLate), id)
		ch <- prometheus.MustNewConstMetric(m.taskDroppedJoin, prometheus.CounterValue, float64(ti.DroppedJoin), id)
		ch <- prometheus.MustNewConstMetric(m.taskRemaining, prometheus.GaugeValue, float64(remaining[ti.ID]), id)
		ch <- prometheus.MustNewConstMetric(m.taskRestored, prometheus.CounterValue, float64(ti.Restored), id)
	}
}

// collectReplicas sends each store partition's position, lag and size.
func (m *metrics) collectReplicas(ch chan<- prometheus.Metric, replicas []ReplicaInfo) {
	for _, ri := range replicas {
		part := strconv.Itoa(int(ri.Partition))
		// The role and lag queries vouch for: a running active the group
		// has not confirmed lately is unconfirmed, its lag unknown, and
		// a lag the broker has not confirmed lately is unknown too.
		info := m.app.toIQ(ri)
		role := info.Role.String()
		ch <- prometheus.MustNewConstMetric(m.replicaPosition, prometheus.GaugeValue, float64(ri.Position), ri.Store, part, role)
		if info.Lag >= 0 {
			ch <- prometheus.MustNewConstMetric(m.replicaLag, prometheus.GaugeValue, float64(info.Lag), ri.Store, part, role)
		}
		if size, ok := m.sizes.of(ri, time.Now()); ok {
			id := ri.Task.String()
			ch <- prometheus.MustNewConstMetric(m.storeBytes, prometheus.GaugeValue, float64(size.Bytes), ri.Store, id)
			ch <- prometheus.MustNewConstMetric(m.storeKeys, prometheus.GaugeValue, float64(size.Keys), ri.Store, id)
		}
	}
}

// collectConsumerLag sends the consumer lag of the active tasks' source
// partitions.
func (m *metrics) collectConsumerLag(ch chan<- prometheus.Metric) {
	a := m.app
	info, ok := a.Assignment()
	if !ok || a.fresh == nil {
		return
	}
	var tps []changelog.TopicPartition
	for _, id := range info.Active {
		tps = append(tps, a.sourcePartitions(id)...)
	}
	for tp, lag := range a.fresh.consumerLags(tps, LagConfirmWindow) {
		ch <- prometheus.MustNewConstMetric(m.consumerLag, prometheus.GaugeValue, float64(lag), tp.Topic, strconv.Itoa(int(tp.Partition)))
	}
}

// restoreRemaining sums, per task, the changelog records its restoring
// stores lack.
func restoreRemaining(replicas []ReplicaInfo) map[task.ID]int64 {
	out := make(map[task.ID]int64)
	for _, ri := range replicas {
		if ri.State == task.Restoring && ri.Lag > 0 {
			out[ri.Task] += ri.Lag
		}
	}
	return out
}

// Metrics returns the App's metrics as a Prometheus collector; the
// Metrics section of docs/operations.md lists every series. Register it with any
// prometheus.Registerer; the App does not register it anywhere itself.
func (a *App) Metrics() prometheus.Collector { return a.metrics }

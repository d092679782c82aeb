package runtime

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the App's Prometheus metrics. Counters and histograms are
// updated as things happen; per-replica gauges (restoration progress,
// standby lag) are read from the registry at scrape time, so they cost
// nothing between scrapes.
type metrics struct {
	app           *App
	processed     prometheus.Counter
	skipped       prometheus.CounterFunc
	failed        prometheus.CounterFunc
	replaced      prometheus.CounterFunc
	resets        prometheus.CounterFunc
	wiped         prometheus.CounterFunc
	commitLatency prometheus.Histogram
	rebalances    prometheus.Counter
	replicaDesc   map[string]*prometheus.Desc
}

func newMetrics(a *App) *metrics {
	constLabels := prometheus.Labels{"application": a.cfg.ApplicationID}
	m := &metrics{
		app: a,
		processed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "eddy", Name: "records_processed_total",
			Help:        "Input records processed by this instance's stream threads.",
			ConstLabels: constLabels,
		}),
		skipped: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "eddy", Name: "records_skipped_total",
			Help:        "Input records skipped because they could not be deserialized.",
			ConstLabels: constLabels,
		}, func() float64 { return float64(a.skipped.Load()) }),
		failed: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "eddy", Name: "processing_errors_total",
			Help:        "Input records skipped because a processor failed on them (ProcessingLogAndContinue).",
			ConstLabels: constLabels,
		}, func() float64 { return float64(a.processingErrors.Load()) }),
		replaced: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "eddy", Name: "stream_threads_replaced_total",
			Help:        "Stream threads replaced after an error (ReplaceThread).",
			ConstLabels: constLabels,
		}, func() float64 { return float64(a.replaced.Load()) }),
		resets: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "eddy", Name: "store_resets_total",
			Help:        "Stores emptied and rebuilt from their changelogs because their position no longer fitted the changelog.",
			ConstLabels: constLabels,
		}, func() float64 { return float64(a.StoreResets()) }),
		wiped: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "eddy", Name: "stores_wiped_total",
			Help:        "Persistent stores whose files could not be opened, deleted and rebuilt from their changelogs.",
			ConstLabels: constLabels,
		}, func() float64 { return float64(a.storesWiped.Load()) }),
		commitLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "eddy", Name: "commit_latency_seconds",
			Help:        "Time a stream thread takes to commit: flush, changelog acknowledgements, store writes, offsets.",
			ConstLabels: constLabels,
			Buckets:     prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		rebalances: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "eddy", Name: "rebalances_total",
			Help:        "Assignments received by this instance's stream threads.",
			ConstLabels: constLabels,
		}),
		replicaDesc: map[string]*prometheus.Desc{
			"position": prometheus.NewDesc("eddy_replica_position", "Changelog offset of the next record a store partition would apply.",
				[]string{"store", "partition", "role"}, constLabels),
			"lag": prometheus.NewDesc("eddy_replica_lag", "Changelog records a store partition lacks (restoring actives, standbys, warmups); 0 for running actives.",
				[]string{"store", "partition", "role"}, constLabels),
			"restore_remaining": prometheus.NewDesc("eddy_restore_remaining_records", "Changelog records a restoring active task still has to apply.",
				[]string{"store", "partition"}, constLabels),
			"restored": prometheus.NewDesc("eddy_restored_records_total", "Changelog records restoration applied to a store partition since this instance started.",
				[]string{"store", "partition"}, constLabels),
		},
	}
	return m
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	m.processed.Describe(ch)
	m.skipped.Describe(ch)
	m.failed.Describe(ch)
	m.replaced.Describe(ch)
	m.resets.Describe(ch)
	m.wiped.Describe(ch)
	m.commitLatency.Describe(ch)
	m.rebalances.Describe(ch)
	for _, d := range m.replicaDesc {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.processed.Collect(ch)
	m.skipped.Collect(ch)
	m.failed.Collect(ch)
	m.replaced.Collect(ch)
	m.resets.Collect(ch)
	m.wiped.Collect(ch)
	m.commitLatency.Collect(ch)
	m.rebalances.Collect(ch)
	for _, ri := range m.app.Replicas() {
		part := strconv.Itoa(int(ri.Partition))
		role := ri.Role.String()
		ch <- prometheus.MustNewConstMetric(m.replicaDesc["position"], prometheus.GaugeValue, float64(ri.Position), ri.Store, part, role)
		if ri.Lag >= 0 {
			ch <- prometheus.MustNewConstMetric(m.replicaDesc["lag"], prometheus.GaugeValue, float64(ri.Lag), ri.Store, part, role)
		}
		if ri.Role == RoleRestoring && ri.Lag >= 0 {
			ch <- prometheus.MustNewConstMetric(m.replicaDesc["restore_remaining"], prometheus.GaugeValue, float64(ri.Lag), ri.Store, part)
		}
		if ri.Role == RoleRestoring || ri.Role == RoleActive {
			ch <- prometheus.MustNewConstMetric(m.replicaDesc["restored"], prometheus.CounterValue, float64(ri.Restored), ri.Store, part)
		}
	}
}

// Metrics returns the App's metrics as a Prometheus collector: records
// processed and skipped, stores reset, commit latency, rebalances, and per store
// partition its role, position, lag, restoration remaining and records
// restored. Register it with any prometheus.Registerer; the App does not
// register it anywhere itself.
func (a *App) Metrics() prometheus.Collector { return a.metrics }

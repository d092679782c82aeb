package main

import (
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/runtime"
)

// instanceMetrics is one instance's Prometheus registry: the runtime's own
// collector, the query counters fed by the query server's Observe hook, and
// the Go and process collectors. Each instance has its own registry rather
// than the global one, so that several instances in one process (the
// no-argument demo, tests) do not collide.
type instanceMetrics struct {
	reg *prometheus.Registry
	// appReg holds only the runtime's collector, for the status page's
	// samples, which need none of the rest.
	appReg   *prometheus.Registry
	served   *prometheus.CounterVec
	refused  *prometheus.CounterVec
	duration *prometheus.HistogramVec

	// Totals for the terminal view, which should not have to parse its
	// own exposition.
	local, forwarded, refusals atomic.Int64
}

// Label values of the "via" label of eddy_queries_served_total.
const (
	viaLocal     = "local"
	viaForwarded = "forwarded"
)

func newInstanceMetrics(app *runtime.App, appID string) (*instanceMetrics, error) {
	constLabels := prometheus.Labels{"application": appID}
	m := &instanceMetrics{
		reg:    prometheus.NewRegistry(),
		appReg: prometheus.NewRegistry(),
		served: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "eddy", Name: "queries_served_total",
			Help: "Key queries this instance answered, by the role of the replica that answered; " +
				`via="forwarded" when another instance answered and this one passed the answer on ` +
				`(sum via="local" over all instances to count each answer once).`,
			ConstLabels: constLabels,
		}, []string{"store", "role", "via"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "eddy", Name: "queries_refused_total",
			Help:        "Key queries this instance refused, by the reason code of the error answer (too_stale, not_available, rebalancing, ...).",
			ConstLabels: constLabels,
		}, []string{"store", "reason"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "eddy", Name: "query_duration_seconds",
			Help: "Time the query server took to answer a request, by endpoint kind, the role of the replica that answered " +
				`a key lookup ("none" for other requests and refusals) and outcome ("ok", or the error answer's reason).`,
			ConstLabels: constLabels,
			// 100 µs (a local lookup) to 6.5 s (a forward that times out).
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 17),
		}, []string{"endpoint", "served_role", "outcome"}),
	}
	for _, c := range []prometheus.Collector{
		app.Metrics(), m.served, m.refused, m.duration,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := m.reg.Register(c); err != nil {
			return nil, err
		}
	}
	if err := m.appReg.Register(app.Metrics()); err != nil {
		return nil, err
	}
	// Every series of the counts store is there from the start, at 0, so
	// that a rate over the first refusal of a kind is a rate, not a gap.
	for _, role := range []iq.Role{iq.RoleActive, iq.RoleRestoring, iq.RoleStandby, iq.RoleWarmup, iq.RoleUnconfirmed} {
		for _, via := range []string{viaLocal, viaForwarded} {
			m.served.WithLabelValues(countsStore, role.String(), via)
		}
	}
	for _, reason := range queryRefusalCodes {
		m.refused.WithLabelValues(countsStore, reason)
	}
	return m, nil
}

// servedRoleNone is the served_role of eddy_query_duration_seconds for a
// request no replica answered.
const servedRoleNone = "none"

// observeRequest times one request of the query API; it is the query
// server's ObserveRequest hook.
func (m *instanceMetrics) observeRequest(r iq.Request) {
	role := servedRoleNone
	if r.Role != 0 {
		role = r.Role.String()
	}
	m.duration.WithLabelValues(r.Endpoint, role, r.Outcome).Observe(r.Elapsed.Seconds())
}

// queryRefusalCodes are the reason codes iq's server gives a refused key
// query (iq keeps its list unexported): the ones
// eddy_queries_refused_total starts with.
var queryRefusalCodes = []string{
	"invalid_query", "unknown_store", "unknown_partition", "not_started", "shutting_down", "not_running",
	"rebalancing", "not_hosted_here", "too_stale", "behind", "not_available", "overloaded", "internal",
}

// inputSample reads the figures the status page charts: input records
// processed so far and the consumer lag summed over the instance's source
// partitions.
func (m *instanceMetrics) inputSample() (records, lag float64, err error) {
	mfs, err := m.appReg.Gather()
	if err != nil {
		return 0, 0, err
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "eddy_records_processed_total":
			for _, s := range mf.GetMetric() {
				for _, l := range s.GetLabel() {
					if l.GetName() == "source" && l.GetValue() == "input" {
						records += s.GetCounter().GetValue()
					}
				}
			}
		case "eddy_consumer_lag_records":
			for _, s := range mf.GetMetric() {
				lag += s.GetGauge().GetValue()
			}
		}
	}
	return records, lag, nil
}

// observe counts one key query; it is the query server's Observe hook.
func (m *instanceMetrics) observe(q iq.KeyQuery) {
	// Store names come from URLs: anything the demo does not serve is
	// lumped together, so that clients cannot mint label values.
	store := q.Store
	if store != countsStore {
		store = "other"
	}
	if q.Err != nil {
		m.refusals.Add(1)
		m.refused.WithLabelValues(store, q.Reason).Inc()
		return
	}
	via := viaLocal
	if q.Forwarded {
		via = viaForwarded
		m.forwarded.Add(1)
	} else {
		m.local.Add(1)
	}
	m.served.WithLabelValues(store, q.ServedBy.Role.String(), via).Inc()
}

// queryCounts is what an instance's query server has done so far.
type queryCounts struct {
	// Local counts answers from this instance's own replicas; Forwarded
	// those it fetched from another instance.
	Local, Forwarded int64
	Refused          int64
}

func (m *instanceMetrics) counts() queryCounts {
	return queryCounts{Local: m.local.Load(), Forwarded: m.forwarded.Load(), Refused: m.refusals.Load()}
}

// handler serves the registry in the Prometheus exposition format.
func (m *instanceMetrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

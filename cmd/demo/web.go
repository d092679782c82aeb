package main

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// indexHTML is the status page. It is plain HTML and JavaScript, embedded
// so that the binary needs nothing beside it and there is no build step.
//
//go:embed web/index.html
var indexHTML []byte

// The page draws the cluster from /cluster.json, which this instance puts
// together by asking the others (the same view `demo status` prints), and
// queries words through this instance's own query API, which routes them.
// Everything the page fetches is therefore same-origin: no CORS headers,
// and the page works when the browser can reach only this instance (a
// port forward, a container), as long as the instances reach each other.

// pageCell is one instance's replica of one store partition, as the page
// colours it.
type pageCell struct {
	// Role is active, restoring, standby, warmup, or "" for none.
	Role string `json:"role"`
	// Lag is nil when the instance did not report the replica, or
	// reported its lag as unknown.
	Lag *int64 `json:"lag"`
	// Unconfirmed is set when the assignment names the replica but the
	// instance did not report it (unreachable, or still opening it).
	Unconfirmed bool   `json:"unconfirmed,omitempty"`
	Text        string `json:"text"`
}

type pageRow struct {
	Store     string     `json:"store"`
	Partition int32      `json:"partition"`
	Cells     []pageCell `json:"cells"`
}

type pageInstance struct {
	Host  string `json:"host"`
	Error string `json:"error,omitempty"`
	// Actives, Standbys and Warmups count the instance's assignment.
	Actives  int `json:"actives"`
	Standbys int `json:"standbys"`
	Warmups  int `json:"warmups"`
}

// pageView is /cluster.json: the cluster view arranged as the page's grid.
type pageView struct {
	From      string         `json:"from"`
	Taken     int64          `json:"taken_ms"`
	Instances []pageInstance `json:"instances"`
	Rows      []pageRow      `json:"rows"`
}

func (v clusterView) page() pageView {
	pv := pageView{From: v.From, Taken: v.Taken, Instances: []pageInstance{}, Rows: []pageRow{}}
	for _, in := range v.Instances {
		pv.Instances = append(pv.Instances, pageInstance{Host: in.Host, Error: in.Error,
			Actives: len(in.Active), Standbys: len(in.Standby), Warmups: len(in.Warmup)})
	}
	rows, cells := v.grid()
	for _, sp := range rows {
		r := pageRow{Store: sp.Store, Partition: sp.Partition, Cells: []pageCell{}}
		for i, c := range cells[sp] {
			pc := pageCell{Role: c.assigned, Text: c.text(v.Instances[i].Error != "")}
			if c.lag != nil {
				pc.Role = c.lag.Role
				if c.lag.Lag >= 0 {
					pc.Lag = &c.lag.Lag
				}
			} else if c.assigned != "" {
				pc.Unconfirmed = true
			}
			if pc.Role == "" {
				pc.Text = ""
			}
			r.Cells = append(r.Cells, pc)
		}
		pv.Rows = append(pv.Rows, r)
	}
	return pv
}

// webUI serves the status page and the cluster view behind it.
type webUI struct {
	self string
	hc   *http.Client
	// hist is this instance's input history, sampled every historyEvery
	// while the instance runs.
	hist       *history
	stop       chan struct{}
	samplerRan sync.WaitGroup
	closeOnce  sync.Once

	// others is the last history each instance gave, so that an instance
	// that stops answering keeps its chart (cut off where it died) for
	// the window's length.
	othersMu sync.Mutex
	others   map[string]seenHistory
}

type seenHistory struct {
	samples []sample
	at      time.Time
}

// newWebUI serves the page of the instance at self, asking the query
// servers with hc; with m it samples the instance's input for the charts.
func newWebUI(self string, hc *http.Client, m *instanceMetrics) *webUI {
	u := &webUI{self: self, hc: hc,
		hist: newHistory(historyLen), stop: make(chan struct{}), others: make(map[string]seenHistory)}
	if m != nil {
		u.samplerRan.Go(func() { u.sample(m, historyEvery) })
	}
	return u
}

func (u *webUI) close() {
	u.closeOnce.Do(func() { close(u.stop) })
	u.samplerRan.Wait()
	u.hc.CloseIdleConnections()
}

// othersEvery is how often an instance refreshes what it knows of the
// others' histories without a page asking, so that one that dies before
// anyone opens the page is still drawn, up to where it stopped.
const othersEvery = 5

// sample records the instance's input every interval until close, and
// every othersEvery intervals the other instances' histories.
func (u *webUI) sample(m *instanceMetrics, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-u.stop
		cancel()
	}()
	for n := 0; ; n++ {
		if records, lag, err := m.inputSample(); err == nil {
			u.hist.add(time.Now(), records, lag)
		}
		if n%othersEvery == othersEvery-1 {
			u.clusterHistory(ctx)
		}
		select {
		case <-u.stop:
			return
		case <-tick.C:
		}
	}
}

func serveIndex(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Write(indexHTML)
}

// serveCluster answers /cluster.json. Each instance gets a second: the
// page asks again every second anyway, and one dead instance must not
// hold up the picture of the others.
func (u *webUI) serveCluster(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	v, err := fetchCluster(r.Context(), u.hc, u.self, time.Second)
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		return
	}
	json.NewEncoder(w).Encode(v.of(countsStore).page())
}

// handler is an instance's HTTP API: the query server under /v1/ and
// /healthz, the status page at /, its data at /cluster.json,
// /history.json and /cluster-history.json, and Prometheus metrics at
// /metrics.
func (in *instance) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v1/", in.iq)
	mux.Handle("/healthz", in.iq)
	mux.HandleFunc("GET /{$}", serveIndex)
	mux.HandleFunc("GET /cluster.json", in.web.serveCluster)
	mux.HandleFunc("GET /history.json", in.web.serveHistory)
	mux.HandleFunc("GET /cluster-history.json", in.web.serveClusterHistory)
	mux.Handle("GET /metrics", in.metrics.handler())
	// The query API gets its requests as sent: ServeMux would redirect a
	// path such as /v1/stores/s/keys/../windows to its cleaned form, which
	// asks another question, where the query server refuses it.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.EscapedPath(), "/v1/") {
			in.iq.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// The charts beside the grid: each instance samples its own input every
// historyEvery and keeps the last historyLen samples, so a page opened (or
// reloaded) late still shows the last few minutes; the page gets every
// instance's through the one it was loaded from (/cluster-history.json).
const (
	historyEvery = time.Second
	historyLen   = 300
)

// sample is one point of an instance's input history.
type sample struct {
	At int64 `json:"t_ms"`
	// Rate is input records processed per second since the previous
	// sample.
	Rate float64 `json:"rate"`
	// Lag is the consumer lag summed over the instance's source
	// partitions (input and repartition topics), in records.
	Lag float64 `json:"lag"`
}

// history is a ring of samples.
type history struct {
	mu      sync.Mutex
	ring    []sample
	next    int
	full    bool
	prev    float64 // the records counter at prevAt
	prevAt  time.Time
	started bool
}

func newHistory(n int) *history { return &history{ring: make([]sample, n)} }

// add records the records counter and the lag at a time. The first call
// only sets the base of the rate.
func (h *history) add(at time.Time, records, lag float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	prev, prevAt, started := h.prev, h.prevAt, h.started
	h.prev, h.prevAt, h.started = records, at, true
	if !started || !at.After(prevAt) {
		return
	}
	if records < prev {
		// A new App (a restart in the same process) counts from 0.
		prev = 0
	}
	h.ring[h.next] = sample{At: at.UnixMilli(), Rate: (records - prev) / at.Sub(prevAt).Seconds(), Lag: lag}
	h.next = (h.next + 1) % len(h.ring)
	h.full = h.full || h.next == 0
}

// samples returns the samples held, oldest first.
func (h *history) samples() []sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.full {
		return slices.Clone(h.ring[:h.next])
	}
	return append(slices.Clone(h.ring[h.next:]), h.ring[:h.next]...)
}

// historyAnswer is /history.json: this instance's samples.
type historyAnswer struct {
	Host       string   `json:"host"`
	IntervalMs int64    `json:"interval_ms"`
	Samples    []sample `json:"samples"`
}

// clusterHistory is /cluster-history.json: every instance's samples, as
// the instance asked gathered them.
type clusterHistory struct {
	Taken     int64         `json:"taken_ms"`
	WindowMs  int64         `json:"window_ms"`
	Instances []hostHistory `json:"instances"`
}

type hostHistory struct {
	Host string `json:"host"`
	// Error is set when the instance did not answer; Samples are then
	// the last it gave.
	Error   string   `json:"error,omitempty"`
	Samples []sample `json:"samples"`
}

func (u *webUI) serveHistory(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(historyAnswer{Host: u.self, IntervalMs: historyEvery.Milliseconds(), Samples: u.hist.samples()})
}

// serveClusterHistory asks every instance in the routing table for its
// history, each within a second. An instance that does not answer, or
// that left the routing table, is shown with the last history it gave
// until that is older than the window.
func (u *webUI) serveClusterHistory(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	ch, err := u.clusterHistory(r.Context())
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		return
	}
	json.NewEncoder(w).Encode(ch)
}

// clusterHistory gathers every instance's history; it fails only when this
// instance gives no routing table.
func (u *webUI) clusterHistory(ctx context.Context) (clusterHistory, error) {
	window := historyEvery * historyLen
	var md metadataAnswer
	mctx, cancel := context.WithTimeout(ctx, time.Second)
	err := getJSON(mctx, u.hc, u.self, "/v1/metadata", &md)
	cancel()
	if err != nil {
		return clusterHistory{}, explainFetch(err)
	}
	hosts := make(map[string]bool)
	for _, h := range md.Instances {
		hosts[h.Host] = true
	}
	now := time.Now()
	u.othersMu.Lock()
	maps.DeleteFunc(u.others, func(_ string, s seenHistory) bool { return now.Sub(s.at) > window })
	for h := range u.others {
		hosts[h] = true
	}
	u.othersMu.Unlock()

	out := clusterHistory{Taken: now.UnixMilli(), WindowMs: window.Milliseconds(), Instances: []hostHistory{}}
	results := make(chan hostHistory, len(hosts))
	var wg sync.WaitGroup
	for h := range hosts {
		wg.Go(func() {
			hctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			var a historyAnswer
			if err := getJSON(hctx, u.hc, h, "/history.json", &a); err != nil {
				results <- hostHistory{Host: h, Error: explainFetch(err).Error()}
				return
			}
			results <- hostHistory{Host: h, Samples: a.Samples}
		})
	}
	wg.Wait()
	close(results)
	u.othersMu.Lock()
	for hh := range results {
		if hh.Error == "" {
			u.others[hh.Host] = seenHistory{samples: hh.Samples, at: now}
		} else if seen, ok := u.others[hh.Host]; ok {
			hh.Samples = seen.samples
		}
		if hh.Samples == nil {
			hh.Samples = []sample{}
		}
		out.Instances = append(out.Instances, hh)
	}
	u.othersMu.Unlock()
	slices.SortFunc(out.Instances, func(a, b hostHistory) int { return cmp.Compare(a.Host, b.Host) })
	return out, nil
}

package main

import (
	_ "embed"
	"encoding/json"
	"net/http"
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
}

func newWebUI(self string) *webUI {
	return &webUI{self: self, hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second}}}
}

func (u *webUI) close() { u.hc.CloseIdleConnections() }

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
	json.NewEncoder(w).Encode(v.page())
}

// handler is an instance's HTTP API: the query server under /v1/ and
// /healthz, the status page at /, its data at /cluster.json, and
// Prometheus metrics at /metrics.
func (in *instance) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v1/", in.iq)
	mux.Handle("/healthz", in.iq)
	mux.HandleFunc("GET /{$}", serveIndex)
	mux.HandleFunc("GET /cluster.json", in.web.serveCluster)
	mux.Handle("GET /metrics", in.metrics.handler())
	return mux
}

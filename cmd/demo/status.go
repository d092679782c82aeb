package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/eddystreams/eddy/iq"
)

// The JSON the status command and the status page read from instances.
// They mirror the shapes iq's server writes (iq keeps its own types
// unexported); unknown fields are ignored, so a newer server still reads.

type metadataAnswer struct {
	Instances  []hostAssignment `json:"instances"`
	Partitions map[string]int32 `json:"partitions"`
}

type hostAssignment struct {
	Host    string              `json:"host"`
	Active  []iq.StorePartition `json:"active"`
	Standby []iq.StorePartition `json:"standby"`
	Warmup  []iq.StorePartition `json:"warmup"`
}

// replicaLag is one replica in /v1/lags. Figures the replica cannot vouch
// for come as null and are kept as -1.
type replicaLag struct {
	Store           string `json:"store"`
	Partition       int32  `json:"partition"`
	Role            string `json:"role"`
	Position        int64  `json:"position"`
	End             int64  `json:"end"`
	Lag             int64  `json:"lag"`
	Rebuilding      bool   `json:"rebuilding"`
	Restored        int64  `json:"restored"`
	SinceCaughtUpMs int64  `json:"since_caught_up_ms"`
}

// UnmarshalJSON reads null figures as -1 (unknown).
func (l *replicaLag) UnmarshalJSON(b []byte) error {
	type plain replicaLag
	p := plain{Position: -1, End: -1, Lag: -1, SinceCaughtUpMs: -1}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*l = replicaLag(p)
	return nil
}

// errorAnswer is an error answer of the query API.
type errorAnswer struct {
	Error  string `json:"error"`
	Reason string `json:"reason"`
	Tried  []struct {
		Host   string `json:"host"`
		Error  string `json:"error"`
		Reason string `json:"reason"`
	} `json:"tried"`
}

// clusterView is the cluster as one instance sees it: its routing table,
// and what every instance in it says about its own replicas. It is what
// `demo status` prints and what the status page draws (as JSON), each
// narrowed to the counts store.
type clusterView struct {
	// From is the instance asked for the routing table.
	From       string           `json:"from"`
	Partitions map[string]int32 `json:"partitions"`
	Instances  []instanceView   `json:"instances"`
	// Taken is when the view was put together, in Unix milliseconds.
	Taken int64 `json:"taken_ms"`
	// Others names the stores a view narrowed to one store left out.
	Others []string `json:"other_stores,omitempty"`
}

// of narrows the view to one store's partitions and replicas. The word
// count's stores all belong to the tasks after the "words" repartition,
// so the replicas of "counts" show where every task is, one row per
// partition, and the window stores would only repeat them.
func (v clusterView) of(store string) clusterView {
	keep := func(sps []iq.StorePartition) []iq.StorePartition {
		var out []iq.StorePartition
		for _, sp := range sps {
			if sp.Store == store {
				out = append(out, sp)
			}
		}
		return out
	}
	n := v
	n.Partitions = map[string]int32{}
	n.Others = nil
	for s, p := range v.Partitions {
		if s == store {
			n.Partitions[s] = p
		} else {
			n.Others = append(n.Others, s)
		}
	}
	slices.Sort(n.Others)
	n.Instances = make([]instanceView, len(v.Instances))
	for i, in := range v.Instances {
		ni := instanceView{Error: in.Error}
		ni.Host = in.Host
		ni.Active, ni.Standby, ni.Warmup = keep(in.Active), keep(in.Standby), keep(in.Warmup)
		for _, l := range in.Lags {
			if l.Store == store {
				ni.Lags = append(ni.Lags, l)
			}
		}
		n.Instances[i] = ni
	}
	return n
}

// instanceView is one instance: what the assignment gave it, and what it
// reports about its replicas, or why it could not be asked.
type instanceView struct {
	hostAssignment
	Lags []replicaLag `json:"lags"`
	// Error is set when the instance did not answer /v1/lags.
	Error string `json:"error,omitempty"`
}

// httpError is a non-2xx answer, with the message of its error body.
type httpError struct {
	status int
	body   errorAnswer
	raw    string
}

func (e *httpError) Error() string {
	msg := e.body.Error
	if msg == "" {
		msg = e.raw
	}
	if msg == "" {
		msg = http.StatusText(e.status)
	}
	return fmt.Sprintf("HTTP %d: %s", e.status, msg)
}

// getJSON fetches http://addr+path into out. A non-2xx answer is an
// *httpError; no answer at all is the transport's error.
func getJSON(ctx context.Context, hc *http.Client, addr, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("reading the answer of %s: %w", addr, err)
	}
	if resp.StatusCode/100 != 2 {
		he := &httpError{status: resp.StatusCode, raw: strings.TrimSpace(string(body))}
		json.Unmarshal(body, &he.body)
		return he
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s answered %s with something other than the query API's JSON: %w", addr, path, err)
	}
	return nil
}

// fetchCluster asks addr for the routing table, then every instance in it
// for its lags, in parallel and each within perHost. Only the first step
// must succeed: instances that do not answer are marked, not fatal.
func fetchCluster(ctx context.Context, hc *http.Client, addr string, perHost time.Duration) (clusterView, error) {
	var md metadataAnswer
	mctx, cancel := context.WithTimeout(ctx, perHost)
	err := getJSON(mctx, hc, addr, "/v1/metadata", &md)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return clusterView{}, ctx.Err()
		}
		return clusterView{}, fmt.Errorf("asking %s for the routing table: %w", addr, explainFetch(err))
	}
	v := clusterView{From: addr, Partitions: md.Partitions, Instances: make([]instanceView, len(md.Instances)), Taken: time.Now().UnixMilli()}
	if v.Partitions == nil {
		v.Partitions = map[string]int32{}
	}
	var wg sync.WaitGroup
	for i, h := range md.Instances {
		v.Instances[i].hostAssignment = h
		wg.Go(func() {
			hctx, cancel := context.WithTimeout(ctx, perHost)
			defer cancel()
			var lags []replicaLag
			if err := getJSON(hctx, hc, h.Host, "/v1/lags", &lags); err != nil {
				v.Instances[i].Error = explainFetch(err).Error()
				return
			}
			v.Instances[i].Lags = lags
		})
	}
	wg.Wait()
	slices.SortFunc(v.Instances, func(a, b instanceView) int { return cmp.Compare(a.Host, b.Host) })
	return v, nil
}

// explainFetch words a failed request for a person: why an instance did
// not answer, or what it answered.
func explainFetch(err error) error {
	var he *httpError
	var ue *url.Error
	switch {
	case errors.As(err, &he):
		return err
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("unreachable: no answer in time")
	case errors.As(err, &ue):
		// The URL is known to the reader; the cause is what matters.
		return fmt.Errorf("unreachable: %w", ue.Err)
	default:
		return fmt.Errorf("unreachable: %w", err)
	}
}

// cell is what one instance holds of one store partition: its role by the
// assignment and, when the instance answered, by its own report.
type cell struct {
	assigned string // active, standby, warmup or ""
	lag      *replicaLag
}

// text renders a cell of the partitions × instances table.
func (c cell) text(unreachable bool) string {
	switch {
	case c.lag != nil:
		switch {
		case c.lag.Role == "active" && c.lag.Lag == 0:
			return "active"
		case c.lag.Rebuilding:
			return c.lag.Role + " rebuilding"
		case c.lag.Lag < 0:
			return c.lag.Role + " lag ?"
		}
		return fmt.Sprintf("%s lag %d", c.lag.Role, c.lag.Lag)
	case c.assigned == "":
		return "-"
	case unreachable:
		return c.assigned + " ?"
	default:
		// Assigned but not reported: the instance is between an
		// assignment and opening the replica.
		return c.assigned + " (opening)"
	}
}

// grid arranges the view as one row per store partition and one column
// per instance.
func (v clusterView) grid() (rows []iq.StorePartition, cells map[iq.StorePartition][]cell) {
	for _, s := range slices.Sorted(maps.Keys(v.Partitions)) {
		for p := int32(0); p < v.Partitions[s]; p++ {
			rows = append(rows, iq.StorePartition{Store: s, Partition: p})
		}
	}
	cells = make(map[iq.StorePartition][]cell, len(rows))
	at := func(sp iq.StorePartition, i int) *cell {
		cs, ok := cells[sp]
		if !ok {
			cs = make([]cell, len(v.Instances))
			cells[sp] = cs
			if _, known := v.Partitions[sp.Store]; !known || sp.Partition >= v.Partitions[sp.Store] {
				rows = append(rows, sp)
			}
		}
		return &cs[i]
	}
	for i, in := range v.Instances {
		for _, r := range []struct {
			name string
			sps  []iq.StorePartition
		}{{"active", in.Active}, {"standby", in.Standby}, {"warmup", in.Warmup}} {
			for _, sp := range r.sps {
				at(sp, i).assigned = r.name
			}
		}
		for j := range in.Lags {
			l := &in.Lags[j]
			at(iq.StorePartition{Store: l.Store, Partition: l.Partition}, i).lag = l
		}
	}
	for _, sp := range rows {
		if _, ok := cells[sp]; !ok {
			cells[sp] = make([]cell, len(v.Instances))
		}
	}
	return rows, cells
}

// partitionList renders the partitions of a role compactly: the numbers
// alone when the cluster has one store.
func (v clusterView) partitionList(sps []iq.StorePartition) string {
	if len(sps) == 0 {
		return "-"
	}
	var parts []string
	for _, sp := range sps {
		if len(v.Partitions) == 1 {
			parts = append(parts, strconv.Itoa(int(sp.Partition)))
		} else {
			parts = append(parts, fmt.Sprintf("%s/%d", sp.Store, sp.Partition))
		}
	}
	return strings.Join(parts, ",")
}

// print writes the view as two tables: instances with their partitions by
// role, then store partitions × instances with each replica's role and lag.
func (v clusterView) print(w io.Writer) {
	var stores []string
	for _, s := range slices.Sorted(maps.Keys(v.Partitions)) {
		stores = append(stores, fmt.Sprintf("%s (%d partitions)", s, v.Partitions[s]))
	}
	fmt.Fprintf(w, "cluster as seen from %s: %d instances; stores %s\n", v.From, len(v.Instances), strings.Join(stores, ", "))
	if len(v.Others) > 0 {
		fmt.Fprintf(w, "(not shown: %s, in the same tasks)\n", strings.Join(v.Others, ", "))
	}
	fmt.Fprintln(w)
	if len(v.Instances) == 0 {
		fmt.Fprintln(w, "no instances in the routing table yet")
		return
	}

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTANCE\tACTIVE\tSTANDBY\tWARMUP\tSTATUS")
	for _, in := range v.Instances {
		status := "ok"
		if in.Error != "" {
			status = in.Error
		} else {
			var restoring, lag int64
			for _, l := range in.Lags {
				if l.Role == "restoring" {
					restoring += max(l.Lag, 0)
				}
				if l.Role != "active" {
					lag += max(l.Lag, 0)
				}
			}
			if restoring > 0 {
				status = fmt.Sprintf("restoring, %d records to go", restoring)
			} else if lag > 0 {
				status = fmt.Sprintf("ok, replicas %d records behind in all", lag)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", in.Host, v.partitionList(in.Active), v.partitionList(in.Standby), v.partitionList(in.Warmup), status)
	}
	tw.Flush()
	fmt.Fprintln(w)

	rows, cells := v.grid()
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "PARTITION")
	for _, in := range v.Instances {
		fmt.Fprintf(tw, "\t%s", in.Host)
	}
	fmt.Fprintln(tw)
	for _, sp := range rows {
		fmt.Fprintf(tw, "%s/%d", sp.Store, sp.Partition)
		for i, c := range cells[sp] {
			fmt.Fprintf(tw, "\t%s", c.text(v.Instances[i].Error != ""))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// instanceClient parses the arguments of a command that asks one
// instance's query server (--http, whose value addr points to, with the
// query security flags qsec and a positive --timeout) and returns the
// server's address and an HTTP client for it.
func instanceClient(fs *flag.FlagSet, args []string, addr *string, qsec *queryFlags, timeout *time.Duration) (string, *http.Client, error) {
	if err := parseFlags(fs, args); err != nil {
		return "", nil, err
	}
	tlsCfg, token, err := qsec.client(strings.HasPrefix(strings.TrimSpace(*addr), "https://"))
	if err != nil {
		return "", nil, usageErrorf(fs, "%v", err)
	}
	a, err := normalizeHTTP(*addr)
	if err != nil {
		return "", nil, usageErrorf(fs, "--http: %v", err)
	}
	if *timeout <= 0 {
		return "", nil, usageErrorf(fs, "--timeout must be positive")
	}
	return a, peerClient(tlsCfg != nil, tlsCfg, token), nil
}

// statusSynopsis is the flags of `demo status`.
const statusSynopsis = "--http HOST:PORT [--timeout D] [--query-tls-ca FILE] [--query-token-file FILE]"

// runStatus is `demo status`: the whole cluster as one instance sees it,
// through the replicas of the counts store (see clusterView.of).
// It fails only when that instance gives no routing table; instances that
// do not answer are marked in the output.
func runStatus(ctx context.Context, args []string, s stdio) error {
	fs := newFlagSet("status", statusSynopsis, s)
	addr := fs.String("http", "", "`HOST:PORT` of any instance's query server (required)")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for each instance")
	qsec := addQueryClientFlags(fs)
	a, hc, err := instanceClient(fs, args, addr, qsec, timeout)
	if err != nil {
		return err
	}
	defer hc.CloseIdleConnections()
	v, err := fetchCluster(ctx, hc, a, *timeout)
	if err != nil {
		return err
	}
	v.of(countsStore).print(s.out)
	return nil
}

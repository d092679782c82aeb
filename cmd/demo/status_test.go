package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/iq"
)

// fakeHost is an instance's query API reduced to /v1/metadata and
// /v1/lags, answering what a test sets before the first request.
type fakeHost struct {
	srv        *httptest.Server
	metaStatus int
	meta       string
	lags       string
	tasks      string
}

// newFakeHost listens on ip (127.0.0.x), so that hosts sort in a known
// order.
func newFakeHost(t *testing.T, ip string) *fakeHost {
	f := &fakeHost{metaStatus: 200}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/metadata":
			w.WriteHeader(f.metaStatus)
			io.WriteString(w, f.meta)
		case "/v1/lags":
			io.WriteString(w, f.lags)
		case "/v1/tasks":
			io.WriteString(w, f.tasks)
		default:
			http.NotFound(w, r)
		}
	}))
	ln, err := net.Listen("tcp", ip+":0")
	require.NoError(t, err)
	f.srv.Listener = ln
	f.srv.Start()
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeHost) addr() string { return f.srv.Listener.Addr().String() }

// fakeCluster is three instances of a 3-partition store: a and b answer,
// c is dead. a runs 0 and 1 with a standby of 2 at lag 7; b restores 2,
// follows 0 and has just been given a warmup of 1 it does not report yet;
// c should hold a standby of 1. a also holds replicas of a window store,
// which the views leave out.
func fakeCluster(t *testing.T) (a, b *fakeHost, c string) {
	a, b = newFakeHost(t, "127.0.0.1"), newFakeHost(t, "127.0.0.2")
	c = deadAddr(t, "127.0.0.3")
	a.meta = `{"instances":[
		{"host":"` + c + `","active":[],"standby":[{"store":"counts","partition":1}],"warmup":[]},
		{"host":"` + a.addr() + `","active":[{"store":"counts","partition":0},{"store":"counts-per-minute","partition":0},{"store":"counts","partition":1}],"standby":[{"store":"counts","partition":2}],"warmup":[]},
		{"host":"` + b.addr() + `","active":[{"store":"counts","partition":2}],"standby":[{"store":"counts","partition":0}],"warmup":[{"store":"counts","partition":1}]}],
		"partitions":{"counts":3,"counts-per-minute":3}}`
	a.lags = `[{"store":"counts","partition":0,"role":"active","position":10,"end":10,"lag":0},
		{"store":"counts","partition":1,"role":"active","position":12,"end":12,"lag":0},
		{"store":"counts","partition":2,"role":"standby","position":3,"end":10,"lag":7},
		{"store":"counts-per-minute","partition":2,"role":"standby","position":3,"end":50,"lag":47}]`
	b.lags = `[{"store":"counts","partition":0,"role":"standby","position":10,"end":10,"lag":0},
		{"store":"counts","partition":2,"role":"restoring","position":0,"end":120,"lag":120,"restored":0}]`
	return a, b, c
}

// squash collapses runs of spaces, so that table rows compare regardless
// of column widths.
func squash(s string) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return strings.Join(lines, "\n")
}

func TestStatusCommand(t *testing.T) {
	ctx := testCtx(t)
	a, b, c := fakeCluster(t)
	stdout, stderr, err := runCmd(ctx, "", "status", "--http", a.addr(), "--timeout", "2s")
	require.NoError(t, err, stderr)
	out := squash(stdout)
	for _, want := range []string{
		// The window store is left out: it only repeats where the
		// tasks are (and its lag is not added to the instance's).
		"cluster as seen from " + a.addr() + ": 3 instances; stores counts (3 partitions)\n(not shown: counts-per-minute, in the same tasks)\n",
		"INSTANCE ACTIVE STANDBY WARMUP STATUS",
		a.addr() + " 0,1 2 - ok, replicas 7 records behind in all",
		b.addr() + " 2 0 1 restoring, 120 records to go",
		c + " - 1 - unreachable: ",
		"PARTITION " + a.addr() + " " + b.addr() + " " + c,
		"counts/0 active standby lag 0 -",
		"counts/1 active warmup (opening) standby ?",
		"counts/2 standby lag 7 restoring lag 120 -",
	} {
		require.Contains(t, out, want, stdout)
	}
	require.Contains(t, stdout, "connection refused")
	require.NotContains(t, stdout, "counts-per-minute/")
}

func TestStatusCommandErrors(t *testing.T) {
	ctx := testCtx(t)

	_, stderr, err := runCmd(ctx, "", "status")
	require.ErrorIs(t, err, errUsage)
	require.Contains(t, stderr, "--http: an instance's HOST:PORT is required")
	_, _, err = runCmd(ctx, "", "status", "--http", "a:1", "extra")
	require.ErrorIs(t, err, errUsage)

	dead := deadAddr(t, "127.0.0.1")
	_, _, err = runCmd(ctx, "", "status", "--http", dead)
	require.ErrorContains(t, err, "asking "+dead+" for the routing table: unreachable: ")
	require.Equal(t, 1, exitCode(err, io.Discard))

	early := newFakeHost(t, "127.0.0.1")
	early.metaStatus = 503
	early.meta = `{"error":"iq: instance has not received its first assignment yet (retry shortly or ask another instance)","reason":"not_started"}`
	_, _, err = runCmd(ctx, "", "status", "--http", early.addr())
	require.ErrorContains(t, err, "HTTP 503: iq: instance has not received its first assignment yet")

	empty := newFakeHost(t, "127.0.0.1")
	empty.meta = `{"instances":[],"partitions":{}}`
	stdout, _, err := runCmd(ctx, "", "status", "--http", empty.addr())
	require.NoError(t, err)
	require.Contains(t, stdout, "no instances in the routing table yet")
}

func TestClusterJSON(t *testing.T) {
	a, b, c := fakeCluster(t)
	u := newWebUI(a.addr(), peerClient(false, nil, ""), nil)
	defer u.close()
	srv := httptest.NewServer(http.HandlerFunc(u.serveCluster))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	var pv pageView
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&pv))

	require.Equal(t, a.addr(), pv.From)
	require.Len(t, pv.Instances, 3)
	require.Equal(t, pageInstance{Host: a.addr(), Actives: 2, Standbys: 1}, pv.Instances[0])
	require.Equal(t, pageInstance{Host: b.addr(), Actives: 1, Standbys: 1, Warmups: 1}, pv.Instances[1])
	require.Equal(t, c, pv.Instances[2].Host)
	require.Contains(t, pv.Instances[2].Error, "unreachable")

	lag := func(n int64) *int64 { return &n }
	require.Equal(t, []pageRow{
		{Store: "counts", Partition: 0, Cells: []pageCell{
			{Role: "active", Lag: lag(0), Text: "active"}, {Role: "standby", Lag: lag(0), Text: "standby lag 0"}, {}}},
		{Store: "counts", Partition: 1, Cells: []pageCell{
			{Role: "active", Lag: lag(0), Text: "active"},
			{Role: "warmup", Unconfirmed: true, Text: "warmup (opening)"},
			{Role: "standby", Unconfirmed: true, Text: "standby ?"}}},
		{Store: "counts", Partition: 2, Cells: []pageCell{
			{Role: "standby", Lag: lag(7), Text: "standby lag 7"}, {Role: "restoring", Lag: lag(120), Text: "restoring lag 120"}, {}}},
	}, pv.Rows)

	// The instance asked for the table not answering is an error answer.
	dead := newWebUI(deadAddr(t, "127.0.0.1"), peerClient(false, nil, ""), nil)
	defer dead.close()
	rec := httptest.NewRecorder()
	dead.serveCluster(rec, httptest.NewRequest("GET", "/cluster.json", nil))
	require.Equal(t, 503, rec.Code)
	require.Contains(t, rec.Body.String(), "unreachable")
}

func TestGridKeepsReplicasOutsideThePartitionCount(t *testing.T) {
	// A replica the instance reports of a store the routing table does
	// not list (an old store being cleaned up) still gets a row.
	v := clusterView{
		Partitions: map[string]int32{"counts": 1},
		Instances: []instanceView{{hostAssignment: hostAssignment{Host: "h:1", Active: []iq.StorePartition{{Store: "counts", Partition: 0}}},
			Lags: []replicaLag{{Store: "old", Partition: 4, Role: "standby", Lag: 2}}}},
	}
	rows, cells := v.grid()
	require.Equal(t, []iq.StorePartition{{Store: "counts", Partition: 0}, {Store: "old", Partition: 4}}, rows)
	require.Equal(t, "active ?", cells[rows[0]][0].text(true))
	require.Equal(t, "standby lag 2", cells[rows[1]][0].text(false))
}

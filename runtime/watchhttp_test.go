package runtime

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
)

// sseEvent is one event of a stream as a plain client reads it.
type sseEvent struct {
	name, id, data string
}

// readEvent reads the next event, skipping comments, from lines a plain
// HTTP client reads.
func readEvent(t *testing.T, br *bufio.Reader) sseEvent {
	t.Helper()
	var ev sseEvent
	for {
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev.name != "" {
				return ev
			}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			ev.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			ev.data += strings.TrimPrefix(line, "data: ")
		default:
			t.Fatalf("unexpected line %q in an event stream", line)
		}
	}
}

// The watch endpoint over TLS with a token: a plain HTTP client gets an
// event stream that starts with the start position and carries one update
// event per committed change, id its position, data its value and
// provenance; the same changes as the changelog holds. Without the token
// it is refused; a missing store or a bad parameter is a 400 with a
// reason.
func TestWatchHTTPStream(t *testing.T) {
	c := newEOSCluster(t)
	want := map[string]int64{}
	app := c.start(t, t.TempDir())
	defer app.Close(context.Background())
	c.produce(t, 50, want)
	waitCounts(t, app, want)

	const token = "s3cret"
	api := iq.NewServer(app.Queries(), iq.ServerConfig{Token: token}, iq.CodecFor("counts", serde.String, serde.Int64, nil))
	defer api.Close()
	srv := httptest.NewTLSServer(api)
	defer srv.Close()
	hc := srv.Client()
	get := func(path string, auth bool) *http.Response {
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		if auth {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		require.NoError(t, err)
		return resp
	}
	reason := func(resp *http.Response) string {
		defer resp.Body.Close()
		var body struct{ Reason string }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return body.Reason
	}

	resp := get("/v1/stores/counts/keys/k4/watch", false)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp.Body.Close()
	resp = get("/v1/stores/nope/keys/k4/watch", true)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "unknown_store", reason(resp))
	resp = get("/v1/stores/counts/keys/k4/watch?from=yesterday", true)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "invalid_query", reason(resp))

	resp = get("/v1/stores/counts/keys/k4/watch?from=now&current=true", true)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	br := bufio.NewReader(resp.Body)
	ev := readEvent(t, br)
	require.Equal(t, "start", ev.name)
	var start struct{ Position int64 }
	require.NoError(t, json.Unmarshal([]byte(ev.data), &start))

	type update struct {
		Key         string
		Value       *int64
		Position    int64
		Current     bool
		Partition   int32
		TimestampMs int64 `json:"timestamp_ms"`
		ServedBy    struct {
			Host string
			Role string
		} `json:"served_by"`
	}
	read := func() update {
		ev := readEvent(t, br)
		require.Equal(t, "update", ev.name, ev.data)
		var u update
		require.NoError(t, json.Unmarshal([]byte(ev.data), &u))
		require.Equal(t, strconv.FormatInt(u.Position, 10), ev.id, "the event id is the position")
		require.Equal(t, "active", u.ServedBy.Role)
		require.Equal(t, "k4", u.Key)
		require.NotNil(t, u.Value)
		return u
	}
	first := read()
	require.True(t, first.Current)
	require.Equal(t, want["k4"], *first.Value)
	require.Equal(t, start.Position, first.Position)

	var got []loggedChange
	for range 3 {
		c.produce(t, 30, want)
		waitCounts(t, app, want)
	}
	for len(got) == 0 || got[len(got)-1].count != want["k4"] {
		u := read()
		require.Positive(t, u.TimestampMs)
		got = append(got, loggedChange{u.Position, *u.Value})
	}
	require.Equal(t, committedChanges(t, c.b.Addrs(), changelog.TopicName("eos", "counts"), first.Partition, "k4", first.Position, got[len(got)-1].pos), got)
}

// A routed watch that the local replica cannot serve is relayed from the
// instance that can; iq.Client.Watch follows the same key from outside,
// and both carry the active's provenance.
func TestWatchRoutedAndClient(t *testing.T) {
	c := newEOSCluster(t)
	want := map[string]int64{}
	type node struct {
		app  *App
		addr string
		kill func()
	}
	start := func() node {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		app, err := New(countTopology(t), Config{
			ApplicationID: "eos", Brokers: c.b.Addrs(), StateDir: t.TempDir(),
			ProcessingGuarantee: ExactlyOnce, SessionTimeout: 2 * time.Second,
			NumStreamThreads: 1, Endpoint: ln.Addr().String(),
		})
		require.NoError(t, err)
		require.NoError(t, app.Start(context.Background()))
		api := iq.NewServer(app.Queries(), iq.ServerConfig{}, iq.CodecFor("counts", serde.String, serde.Int64, nil))
		srv := &http.Server{Handler: api, ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		t.Cleanup(func() {
			srv.Close()
			api.Close()
			app.Close(context.Background())
		})
		kill := func() {
			srv.Close()
			api.Close()
			app.Kill()
		}
		return node{app, ln.Addr().String(), kill}
	}
	nodes := []node{start(), start()}
	key := []byte("k5")
	var other node
	waitFor(t, 60*time.Second, "each instance running one active", func() bool {
		for i, n := range nodes {
			p, err := n.app.Queries().KeyPartition("counts", key)
			if err != nil {
				return false
			}
			r, err := nodes[1-i].app.Queries().Replica("counts", p)
			if err == nil && r.Info().Role == iq.RoleActive && n.app.Ready() && nodes[1-i].app.Ready() {
				if _, err := n.app.Queries().Replica("counts", p); err != nil {
					other = n
					return true
				}
			}
		}
		return false
	})
	c.produce(t, 20, want)

	cl, err := iq.NewClient([]string{other.addr}, iq.ClientOptions{})
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A routed watch whose first relay finds no replica to serve it (the
	// instances have just settled, and the routing table may lag) is
	// refused with a 503, as documented; a client asks again.
	var relayed *http.Response
	waitFor(t, 30*time.Second, "a routed watch of k5 from the instance without it", func() bool {
		resp, err := http.Get("http://" + other.addr + "/v1/stores/counts/keys/k5/watch?from=now")
		require.NoError(t, err)
		if resp.StatusCode == http.StatusOK {
			relayed = resp
			return true
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", body)
		t.Logf("routed watch refused: %s", body)
		return false
	})
	defer relayed.Body.Close()
	br := bufio.NewReader(relayed.Body)
	require.Equal(t, "start", readEvent(t, br).name)

	w, err := cl.Watch(ctx, "counts", "k5", key, iq.WatchOptions{From: iq.FromNow})
	require.NoError(t, err)
	defer w.Close()
	for range 3 {
		c.produce(t, 20, want)
		waitFor(t, 30*time.Second, "counts", func() bool {
			r, err := iq.Get(ctx, iq.NewQuerier(nodes[0].app.Queries()), "counts", "k5", serde.String, serde.Int64, iq.WithStaleness(iq.AnyStaleness()))
			if err != nil {
				r, err = iq.Get(ctx, iq.NewQuerier(nodes[1].app.Queries()), "counts", "k5", serde.String, serde.Int64, iq.WithStaleness(iq.AnyStaleness()))
			}
			return err == nil && r.Value == want["k5"]
		})
	}
	for {
		u, err := w.Next(ctx)
		require.NoError(t, err)
		require.Equal(t, iq.RoleActive, u.Provenance.Role)
		require.NotEqual(t, other.addr, u.Provenance.Host)
		if string(u.Value) == strconv.FormatInt(want["k5"], 10) {
			break
		}
	}
	for {
		ev := readEvent(t, br)
		require.Equal(t, "update", ev.name)
		var u struct {
			Value    int64
			ServedBy struct{ Host, Role string } `json:"served_by"`
		}
		require.NoError(t, json.Unmarshal([]byte(ev.data), &u))
		require.Equal(t, "active", u.ServedBy.Role)
		require.NotEqual(t, other.addr, u.ServedBy.Host, "relayed from the active's instance")
		if u.Value == want["k5"] {
			break
		}
	}

	// The active's instance dies: the partition's only replica left is
	// the relaying instance's own, once it has restored it, and the
	// routed watch goes on from there, with nothing skipped or repeated.
	w.Close()
	before := want["k5"]
	for _, n := range nodes {
		if n.addr != other.addr {
			n.kill()
		}
	}
	c.produce(t, 20, want)
	require.Greater(t, want["k5"], before)
	// A stream that never goes on fails the read below rather than
	// hanging the test.
	giveUp := time.AfterFunc(60*time.Second, func() { relayed.Body.Close() })
	defer giveUp.Stop()
	for {
		ev := readEvent(t, br)
		require.Equal(t, "update", ev.name, ev.data)
		var u struct {
			Value    int64
			ServedBy struct{ Host, Role string } `json:"served_by"`
		}
		require.NoError(t, json.Unmarshal([]byte(ev.data), &u))
		require.Greater(t, u.Value, before, "after the last count relayed before the kill")
		before = u.Value
		if u.Value == want["k5"] {
			require.Equal(t, other.addr, u.ServedBy.Host, "the survivor serves the watch")
			require.Equal(t, "active", u.ServedBy.Role)
			break
		}
	}
}

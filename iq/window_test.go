package iq

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

const (
	winStore  = "per-minute"
	sessStore = "sessions"
)

var (
	winOpts  = statestore.WindowOptions{Retention: 3_600_000, WindowSize: 60_000}
	sessOpts = statestore.WindowOptions{Retention: 3_600_000}
)

// windowCluster is three instances with the key-value store counts, the
// window store per-minute and the session store sessions, each of three
// partitions: instance i holds partition i of each as active and
// partition i+1 as standby.
func windowCluster(t *testing.T, cfg ServerConfig) (*cluster, map[[2]int]map[string]*fakeReplica) {
	c := newCluster(t, 3, 3, cfg)
	reps := map[[2]int]map[string]*fakeReplica{}
	for i, in := range c.ins {
		in.b.partitions = map[string]int32{testStore: 3, winStore: 3, sessStore: 3}
		in.b.layouts = map[string]StoreLayout{winStore: {Kind: KindWindow, Window: winOpts}, sessStore: {Kind: KindSession, Window: sessOpts}}
		in.srv = NewServer(in.b, cfg, countsCodec(), CodecFor(winStore, serde.String, serde.Int64, nil), CodecFor(sessStore, serde.String, serde.Int64, nil))
		t.Cleanup(in.srv.Close)
		for _, p := range []struct {
			part int
			role Role
		}{{i, RoleActive}, {(i + 1) % 3, RoleStandby}} {
			m := map[string]*fakeReplica{}
			for _, s := range []string{testStore, winStore, sessStore} {
				m[s] = in.b.add(s, int32(p.part), p.role)
			}
			reps[[2]int{i, p.part}] = m
		}
	}
	c.publish()
	return c, reps
}

// putWindow writes a window's count and moves the position, as a commit
// or restoration would.
func putWindow(t testing.TB, r *fakeReplica, key string, start, count int64) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	ws, err := statestore.NewWindowStore(r.store, winOpts)
	require.NoError(t, err)
	v, _ := serde.Int64.Encode(count)
	require.NoError(t, ws.Put([]byte(key), start, v))
	r.info.Position++
	r.info.End = max(r.info.End, r.info.Position)
	r.info.Lag = r.info.End - r.info.Position
}

func putSession(t testing.TB, r *fakeReplica, key string, start, end, count int64) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	ss, err := statestore.NewSessionStore(r.store, sessOpts)
	require.NoError(t, err)
	v, _ := serde.Int64.Encode(count)
	require.NoError(t, ss.Put([]byte(key), start, end, v))
	r.info.Position++
	r.info.End = max(r.info.End, r.info.Position)
	r.info.Lag = r.info.End - r.info.Position
}

func windowsURL(in *fakeInstance, store, key, q string) string {
	return in.http.URL + "/v1/stores/" + store + "/keys/" + url.PathEscape(key) + "/windows?" + q
}

// windowCounts reads a key-windows answer as start_ms -> count.
func windowCounts(t *testing.T, body map[string]any) map[int64]int64 {
	t.Helper()
	out := map[int64]int64{}
	for _, w := range body["windows"].([]any) {
		m := w.(map[string]any)
		out[int64(m["start_ms"].(float64))] = int64(m["value"].(float64))
		require.EqualValues(t, m["start_ms"].(float64)+60_000, m["end_ms"])
	}
	return out
}

func TestWindowQueriesOverHTTP(t *testing.T) {
	noLeaks(t)
	c, reps := windowCluster(t, ServerConfig{ForwardTimeout: time.Second, SuspectFor: time.Minute})
	k0 := keyIn(0, 3, "w")
	act, sb := reps[[2]int{0, 0}][winStore], reps[[2]int{2, 0}][winStore]
	for i, n := range []int64{3, 5, 7} {
		putWindow(t, act, k0, int64(i)*60_000, n)
	}
	// The standby is one record behind: the last window has an older
	// count.
	for i, n := range []int64{3, 5, 6} {
		putWindow(t, sb, k0, int64(i)*60_000, n)
	}
	sb.set(func(i *ReplicaInfo) { i.End = 4; i.CaughtUpAgo = time.Second; i.InputCommittedAgo = time.Second })
	a, b, s := c.ins[0], c.ins[1], c.ins[2] // active, no replica, standby of partition 0
	want := map[int64]int64{0: 3, 60_000: 5, 120_000: 7}

	t.Run("routed to the active from an instance without a replica", func(t *testing.T) {
		for _, u := range []string{
			windowsURL(b, winStore, k0, "from=0&to=120000"),
			windowsURL(b, winStore, k0, ""),
			b.http.URL + "/v1/stores/" + winStore + "/windows?key=" + k0 + "&from=1970-01-01T00:00:00Z&to=1970-01-01T00:02:00Z",
		} {
			status, body := getJSON(t, u)
			require.Equal(t, 200, status, "%s: %v", u, body)
			require.Equal(t, want, windowCounts(t, body))
			sbody := body["served_by"].(map[string]any)
			require.Equal(t, a.addr(), sbody["host"])
			require.Equal(t, "active", sbody["role"])
			require.EqualValues(t, 3, sbody["position"])
			require.EqualValues(t, 0, body["partition"])
		}
		status, body := getJSON(t, windowsURL(b, winStore, k0, "from=60000&to=60000"))
		require.Equal(t, 200, status)
		require.Equal(t, map[int64]int64{60_000: 5}, windowCounts(t, body))
		// Offsets in RFC 3339 times are read as such, even with the "+"
		// left unescaped.
		status, body = getJSON(t, windowsURL(b, winStore, k0, "from=1970-01-01T01:01:00+01:00"))
		require.Equal(t, 200, status, "%v", body)
		require.Equal(t, map[int64]int64{60_000: 5, 120_000: 7}, windowCounts(t, body))
	})
	t.Run("a standby within the bound gives way to the active, and answers unrouted", func(t *testing.T) {
		status, body := getJSON(t, windowsURL(s, winStore, k0, "staleness=lag:1"))
		require.Equal(t, 200, status)
		require.Equal(t, want, windowCounts(t, body))
		require.Equal(t, a.addr(), body["served_by"].(map[string]any)["host"])
		status, body = getJSON(t, windowsURL(s, winStore, k0, "staleness=lag:1&route=false"))
		require.Equal(t, 200, status)
		require.Equal(t, map[int64]int64{0: 3, 60_000: 5, 120_000: 6}, windowCounts(t, body))
		require.Equal(t, "standby", body["served_by"].(map[string]any)["role"])
		require.EqualValues(t, 1, body["served_by"].(map[string]any)["lag"])
	})
	t.Run("staleness refusals", func(t *testing.T) {
		for _, q := range []string{"route=false", "staleness=lag:0&route=false", "staleness=age:10ms&route=false"} {
			status, body := getJSON(t, windowsURL(s, winStore, k0, q))
			require.Equal(t, 503, status, q)
			require.Equal(t, "too_stale", body["reason"], q)
		}
		// With the active gone, lag:0 has nobody left to ask.
		c.kill(0)
		status, body := getJSON(t, windowsURL(b, winStore, k0, "staleness=lag:0"))
		require.Equal(t, 503, status)
		require.Equal(t, "not_available", body["reason"])
		status, body = getJSON(t, windowsURL(b, winStore, k0, "staleness=lag:1"))
		require.Equal(t, 200, status, "%v", body)
		require.Equal(t, s.addr(), body["served_by"].(map[string]any)["host"])
	})
}

func TestWindowQueryErrors(t *testing.T) {
	noLeaks(t)
	c, reps := windowCluster(t, ServerConfig{})
	k0 := keyIn(0, 3, "w")
	putWindow(t, reps[[2]int{0, 0}][winStore], k0, 60_000, 1)
	a := c.ins[0]
	for name, u := range map[string]string{
		"malformed from":                windowsURL(a, winStore, k0, "from=yesterday"),
		"malformed to":                  windowsURL(a, winStore, k0, "to=12:00"),
		"negative time":                 windowsURL(a, winStore, k0, "from=-5"),
		"from after to":                 windowsURL(a, winStore, k0, "from=2000&to=1000"),
		"all keys, malformed from":      a.http.URL + "/v1/stores/" + winStore + "/windows?from=x",
		"windows of a key-value store":  windowsURL(a, testStore, k0, ""),
		"sessions of a window store":    a.http.URL + "/v1/stores/" + winStore + "/keys/" + k0 + "/sessions",
		"windows of a session store":    windowsURL(a, sessStore, k0, ""),
		"all windows of key-value":      a.http.URL + "/v1/stores/" + testStore + "/windows",
		"key lookup of a window store":  a.http.URL + "/v1/stores/" + winStore + "/keys/" + k0,
		"range of a window store":       a.http.URL + "/v1/stores/" + winStore + "/range",
		"sessions without a key":        a.http.URL + "/v1/stores/" + sessStore + "/sessions",
		"range of a window, routed":     a.http.URL + "/v1/stores/" + winStore + "/range?route=true",
		"malformed staleness (windows)": windowsURL(a, winStore, k0, "staleness=soon"),
	} {
		status, body := getJSON(t, u)
		require.Equal(t, 400, status, "%s: %v", name, body)
		require.Equal(t, "invalid_query", body["reason"], name)
		require.NotEmpty(t, body["error"], name)
	}
	status, body := getJSON(t, windowsURL(a, "nope", k0, ""))
	require.Equal(t, 404, status)
	require.Equal(t, "unknown_store", body["reason"])

	// A key without windows in the range is a 404 with provenance, as an
	// absent key is.
	for _, q := range []string{"from=120000", ""} {
		key := k0
		if q == "" {
			key = keyIn(0, 3, "absent")
		}
		status, body = getJSON(t, windowsURL(c.ins[1], winStore, key, q))
		require.Equal(t, 404, status, "%v", body)
		require.Empty(t, body["windows"])
		require.Equal(t, a.addr(), body["served_by"].(map[string]any)["host"])
	}
}

func TestAllWindowsAndSessionsOverHTTP(t *testing.T) {
	noLeaks(t)
	c, reps := windowCluster(t, ServerConfig{})
	want := map[string]int64{}
	for p := 0; p < 3; p++ {
		for j := 0; j < 2; j++ {
			k := keyIn(int32(p), 3, "k"+string(rune('a'+j)))
			putWindow(t, reps[[2]int{p, p}][winStore], k, 60_000, int64(10*p+j))
			putWindow(t, reps[[2]int{p, p}][winStore], k, 600_000, 1) // outside the range asked
			want[k] = int64(10*p + j)
		}
	}
	status, body := getJSON(t, c.ins[1].http.URL+"/v1/stores/"+winStore+"/windows?from=0&to=120000&route=true")
	require.Equal(t, 200, status, "%v", body)
	got := map[string]int64{}
	for _, p := range body["partitions"].([]any) {
		pm := p.(map[string]any)
		require.Equal(t, "active", pm["served_by"].(map[string]any)["role"])
		for _, w := range pm["windows"].([]any) {
			wm := w.(map[string]any)
			require.EqualValues(t, 60_000, wm["start_ms"])
			require.Equal(t, "1970-01-01T00:01:00.000Z", wm["start"])
			got[wm["key"].(string)] = int64(wm["value"].(float64))
		}
	}
	require.Equal(t, want, got)
	require.Nil(t, body["failed"])

	// Unrouted, only the local actives answer (and standbys, with a
	// looser bound); limit truncates each partition.
	status, body = getJSON(t, c.ins[1].http.URL+"/v1/stores/"+winStore+"/windows?limit=1")
	require.Equal(t, 200, status, "%v", body)
	parts := body["partitions"].([]any)
	require.Len(t, parts, 1)
	require.Len(t, parts[0].(map[string]any)["windows"], 1)
	require.Equal(t, true, parts[0].(map[string]any)["truncated"])

	// Sessions, routed from an instance without a replica.
	k := keyIn(2, 3, "s")
	putSession(t, reps[[2]int{2, 2}][sessStore], k, 1_000, 5_000, 4)
	putSession(t, reps[[2]int{2, 2}][sessStore], k, 9_000, 9_000, 1)
	for _, u := range []string{
		c.ins[0].http.URL + "/v1/stores/" + sessStore + "/keys/" + k + "/sessions",
		c.ins[0].http.URL + "/v1/stores/" + sessStore + "/sessions?key=" + k,
	} {
		status, body = getJSON(t, u)
		require.Equal(t, 200, status, "%v", body)
		ws := body["windows"].([]any)
		require.Len(t, ws, 2)
		first := ws[0].(map[string]any)
		require.EqualValues(t, 1_000, first["start_ms"])
		require.EqualValues(t, 5_000, first["end_ms"])
		require.EqualValues(t, 4, first["value"])
		require.Equal(t, c.ins[2].addr(), body["served_by"].(map[string]any)["host"])
	}
}

func TestWindowQueriesInProcessAndThroughTheClient(t *testing.T) {
	noLeaks(t)
	c, reps := windowCluster(t, ServerConfig{})
	k1 := keyIn(1, 3, "w")
	putWindow(t, reps[[2]int{1, 1}][winStore], k1, 0, 2)
	putWindow(t, reps[[2]int{1, 1}][winStore], k1, 60_000, 9)
	putSession(t, reps[[2]int{1, 1}][sessStore], k1, 10, 20, 3)
	ctx := context.Background()

	q := c.ins[1].srv.Querier()
	res, err := WindowFetch(ctx, q, winStore, k1, time.UnixMilli(60_000), time.Time{}, serde.String, serde.Int64)
	require.NoError(t, err)
	require.Equal(t, []Window[string, int64]{{Key: k1, Start: 60_000, End: 120_000, Value: 9}}, res.Windows)
	require.Equal(t, RoleActive, res.Provenance.Role)
	require.EqualValues(t, 1, res.Provenance.Partition)
	all, err := WindowFetchAll(ctx, q, winStore, time.Time{}, time.Time{}, serde.String, serde.Int64)
	require.NoError(t, err)
	require.Len(t, all.Partitions, 1) // the active; the standby of partition 2 is refused under active
	require.Len(t, all.Partitions[0].Windows, 2)
	require.Len(t, all.Refused, 1)
	require.ErrorIs(t, all.Refused[0].Err, ErrTooStale)
	sres, err := SessionFetch(ctx, q, sessStore, k1, serde.String, serde.Int64)
	require.NoError(t, err)
	require.Equal(t, []Window[string, int64]{{Key: k1, Start: 10, End: 20, Value: 3}}, sres.Windows)

	// The standby of partition 1 (instance 0) refuses the default bound.
	_, err = WindowFetch(ctx, c.ins[0].srv.Querier(), winStore, k1, time.Time{}, time.Time{}, serde.String, serde.Int64)
	var se *StaleError
	require.ErrorAs(t, err, &se)
	// Kind mismatches are invalid queries, both ways.
	_, err = WindowFetch(ctx, q, testStore, k1, time.Time{}, time.Time{}, serde.String, serde.Int64)
	require.ErrorIs(t, err, ErrInvalidQuery)
	_, err = Get(ctx, q, winStore, k1, serde.String, serde.Int64)
	require.ErrorIs(t, err, ErrInvalidQuery)
	_, err = All(ctx, q, winStore, serde.String, serde.Int64)
	require.ErrorIs(t, err, ErrInvalidQuery)
	_, err = SessionFetch(ctx, q, winStore, k1, serde.String, serde.Int64)
	require.ErrorIs(t, err, ErrInvalidQuery)
	_, err = q.WindowFetchBytes(ctx, winStore, []byte(k1), 5, 4)
	require.ErrorIs(t, err, ErrInvalidQuery)

	cl, err := NewClient([]string{c.ins[2].addr()}, ClientOptions{})
	require.NoError(t, err)
	defer cl.Close()
	cres, err := ClientWindowFetch[string, int64](ctx, cl, winStore, k1, time.Time{}, time.Time{}, serde.String)
	require.NoError(t, err)
	require.Equal(t, []Window[string, int64]{{Key: k1, Start: 0, End: 60_000, Value: 2}, {Key: k1, Start: 60_000, End: 120_000, Value: 9}}, cres.Windows)
	require.Equal(t, c.ins[1].addr(), cres.Provenance.Host)
	require.Equal(t, RoleActive, cres.Provenance.Role)
	pos, ok := cl.LastPosition(winStore, 1)
	require.True(t, ok)
	require.EqualValues(t, 2, pos)
	csess, err := ClientSessionFetch[string, int64](ctx, cl, sessStore, k1, serde.String)
	require.NoError(t, err)
	require.Equal(t, []Window[string, int64]{{Key: k1, Start: 10, End: 20, Value: 3}}, csess.Windows)
	// An absent key has no windows, and that is no error.
	cres, err = ClientWindowFetch[string, int64](ctx, cl, winStore, "absent", time.Time{}, time.Time{}, serde.String)
	require.NoError(t, err)
	require.Empty(t, cres.Windows)
	// A kind mismatch comes back as the same value.
	_, err = ClientWindowFetch[string, int64](ctx, cl, testStore, k1, time.Time{}, time.Time{}, serde.String)
	require.ErrorIs(t, err, ErrInvalidQuery)
	_, err = ClientWindowFetch[string, int64](ctx, cl, winStore, k1, time.UnixMilli(5), time.UnixMilli(4), serde.String)
	require.True(t, errors.Is(err, ErrInvalidQuery))
	// Under lag:N with the active gone, the standby answers.
	sb := reps[[2]int{0, 1}][winStore]
	putWindow(t, sb, k1, 0, 2)
	putWindow(t, sb, k1, 60_000, 9)
	sb.set(func(i *ReplicaInfo) { i.CaughtUpAgo = 0 })
	c.kill(1)
	cres, err = ClientWindowFetch[string, int64](ctx, cl, winStore, k1, time.Time{}, time.Time{}, serde.String, WithStaleness(MaxLag(0)))
	require.NoError(t, err)
	require.Equal(t, RoleStandby, cres.Provenance.Role)
}

// clientWindowCounts reads a typed all-keys answer as key -> count of the
// window starting at 60s, and checks each partition's provenance.
func clientWindowCounts(t *testing.T, res WindowRangeResult[string, int64], hosts map[int32]string, role Role) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	for _, pw := range res.Partitions {
		require.Equal(t, hosts[pw.Provenance.Partition], pw.Provenance.Host, "partition %d", pw.Provenance.Partition)
		require.Equal(t, role, pw.Provenance.Role, "partition %d", pw.Provenance.Partition)
		for _, w := range pw.Windows {
			require.Equal(t, pw.Provenance.Partition, partitionOf(w.Key, 3), "key %q answered by partition %d", w.Key, pw.Provenance.Partition)
			require.Equal(t, int64(60_000), w.Start)
			require.Equal(t, int64(120_000), w.End)
			got[w.Key] = w.Value
		}
	}
	return got
}

func TestClientWindowFetchAll(t *testing.T) {
	noLeaks(t)
	c, reps := windowCluster(t, ServerConfig{})
	want := map[string]int64{}
	actives := map[int32]string{}
	for p := 0; p < 3; p++ {
		actives[int32(p)] = c.ins[p].addr()
		for j := 0; j < 3; j++ {
			k := keyIn(int32(p), 3, "k"+string(rune('a'+j)))
			for _, r := range []*fakeReplica{reps[[2]int{p, p}][winStore], reps[[2]int{(p + 2) % 3, p}][winStore]} {
				putWindow(t, r, k, 60_000, int64(10*p+j))
				putWindow(t, r, k, 600_000, 1) // outside the range asked
			}
			want[k] = int64(10*p + j)
		}
	}
	ctx := context.Background()
	cl, err := NewClient([]string{c.ins[1].addr()}, ClientOptions{FanOut: 2})
	require.NoError(t, err)
	defer cl.Close()

	// Every partition from its active, whichever instance the client
	// bootstraps from; each remembered for monotonic reads.
	res, err := ClientWindowFetchAll[string, int64](ctx, cl, winStore, time.UnixMilli(0), time.UnixMilli(120_000))
	require.NoError(t, err)
	require.Len(t, res.Partitions, 3)
	require.Empty(t, res.Refused)
	for i, pw := range res.Partitions {
		require.EqualValues(t, i, pw.Provenance.Partition, "partitions in order")
		require.EqualValues(t, 6, pw.Provenance.Position)
		require.False(t, pw.Truncated)
		pos, ok := cl.LastPosition(winStore, int32(i))
		require.True(t, ok)
		require.EqualValues(t, 6, pos)
	}
	require.Equal(t, want, clientWindowCounts(t, res, actives, RoleActive))

	// A limit truncates each partition; one partition asked alone.
	raw, err := cl.WindowFetchAll(ctx, winStore, MinTime, MaxTime, WithLimit(2))
	require.NoError(t, err)
	require.Len(t, raw.Partitions, 3)
	for _, pw := range raw.Partitions {
		require.Len(t, pw.Windows, 2)
		require.True(t, pw.Truncated)
	}
	one, err := ClientWindowFetchAll[string, int64](ctx, cl, winStore, time.Time{}, time.UnixMilli(60_000), WithPartition(2))
	require.NoError(t, err)
	require.Len(t, one.Partitions, 1)
	require.EqualValues(t, 2, one.Partitions[0].Provenance.Partition)
	require.Len(t, one.Partitions[0].Windows, 3)

	// Queries wrong everywhere fail the call.
	_, err = cl.WindowFetchAll(ctx, testStore, MinTime, MaxTime)
	require.ErrorIs(t, err, ErrInvalidQuery)
	_, err = cl.WindowFetchAll(ctx, winStore, 5, 4)
	require.ErrorIs(t, err, ErrInvalidQuery)
	_, err = cl.WindowFetchAll(ctx, "nope", MinTime, MaxTime)
	require.ErrorIs(t, err, ErrUnknownStore)
	_, err = cl.WindowFetchAll(ctx, winStore, MinTime, MaxTime, WithPartition(3))
	require.ErrorIs(t, err, ErrUnknownPartition)

	// With the active of partition 0 gone, the default bound refuses that
	// partition and answers the others; a lag bound lets its standby
	// answer, and asked alone the refusal fails the call.
	c.kill(0)
	res, err = ClientWindowFetchAll[string, int64](ctx, cl, winStore, time.Time{}, time.UnixMilli(120_000))
	require.NoError(t, err)
	require.Len(t, res.Partitions, 2)
	require.Len(t, res.Refused, 1)
	require.EqualValues(t, 0, res.Refused[0].Partition)
	var ue *UnavailableError
	require.ErrorAs(t, res.Refused[0].Err, &ue)
	_, err = cl.WindowFetchAll(ctx, winStore, MinTime, MaxTime, WithPartition(0))
	require.ErrorAs(t, err, &ue)
	for p := 0; p < 3; p++ {
		reps[[2]int{(p + 2) % 3, p}][winStore].set(func(i *ReplicaInfo) { i.CaughtUpAgo = 0 })
	}
	res, err = ClientWindowFetchAll[string, int64](ctx, cl, winStore, time.Time{}, time.UnixMilli(120_000), WithStaleness(MaxLag(0)))
	require.NoError(t, err)
	require.Empty(t, res.Refused)
	require.Len(t, res.Partitions, 3)
	require.Equal(t, c.ins[2].addr(), res.Partitions[0].Provenance.Host)
	require.Equal(t, RoleStandby, res.Partitions[0].Provenance.Role)
	got := map[string]int64{}
	for _, pw := range res.Partitions {
		if pw.Provenance.Partition > 0 {
			require.Equal(t, RoleActive, pw.Provenance.Role, "partition %d", pw.Provenance.Partition)
		}
		for _, w := range pw.Windows {
			got[w.Key] = w.Value
		}
	}
	require.Equal(t, want, got)
}

// A path with an empty, "." or ".." segment is refused, not redirected:
// ServeMux's cleaned path asks another question (/keys/../windows is every
// key's windows, /keys//windows the key "windows"). An escaped ".." is a
// key like any other, and a path no endpoint matches gets a JSON answer.
func TestPathsThatCleanToAnotherQueryAreRefused(t *testing.T) {
	noLeaks(t)
	c, reps := windowCluster(t, ServerConfig{})
	putWindow(t, reps[[2]int{0, 0}][winStore], keyIn(0, 3, "w"), 60_000, 1)
	a := c.ins[0]
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(noRedirect.CloseIdleConnections)
	get := func(path string) (int, map[string]any) {
		t.Helper()
		resp, err := noRedirect.Get(a.http.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"), "%s: %d %s", path, resp.StatusCode, b)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m), "%s: %s", path, b)
		return resp.StatusCode, m
	}
	for _, path := range []string{
		"/v1/stores/" + winStore + "/keys/../windows",
		"/v1/stores/" + winStore + "/keys/./windows",
		"/v1/stores/" + testStore + "/keys//windows",
		"/v1/stores/" + testStore + "/keys/",
		"/v1/stores/" + testStore + "/keys/..",
		"/v1/stores/" + testStore + "/keys/a/b",
		"/v1/metadata/",
	} {
		status, body := get(path)
		require.Equal(t, 400, status, "%s: %v", path, body)
		require.Equal(t, "invalid_query", body["reason"], path)
		require.NotEmpty(t, body["error"], path)
	}
	status, body := get("/v1/stores/" + testStore + "/keys/%2E%2E?staleness=any")
	require.Equal(t, 404, status, "%v", body)
	require.Equal(t, "..", body["key"])
	require.NotNil(t, body["served_by"])
}

// A range start finer than a millisecond is rounded up, in process and
// over HTTP: the window starting in the millisecond before it is not in
// the range. A range inside one millisecond holds no window start.
func TestSubMillisecondRangeStartRoundsUp(t *testing.T) {
	noLeaks(t)
	c, reps := windowCluster(t, ServerConfig{})
	k0 := keyIn(0, 3, "w")
	putWindow(t, reps[[2]int{0, 0}][winStore], k0, 60_000, 1)
	putWindow(t, reps[[2]int{0, 0}][winStore], k0, 120_000, 2)
	a := c.ins[0]

	res, err := WindowFetch(context.Background(), a.srv.Querier(), winStore, k0,
		time.UnixMilli(60_000).Add(500*time.Microsecond), time.Time{}, serde.String, serde.Int64)
	require.NoError(t, err)
	require.Equal(t, []Window[string, int64]{{Key: k0, Start: 120_000, End: 180_000, Value: 2}}, res.Windows)
	res, err = WindowFetch(context.Background(), a.srv.Querier(), winStore, k0,
		time.Time{}, time.UnixMilli(120_000).Add(500*time.Microsecond), serde.String, serde.Int64)
	require.NoError(t, err)
	require.Len(t, res.Windows, 2)

	status, body := getJSON(t, windowsURL(a, winStore, k0, "from=1970-01-01T00:01:00.0005Z"))
	require.Equal(t, 200, status, "%v", body)
	require.Equal(t, map[int64]int64{120_000: 2}, windowCounts(t, body))
	status, body = getJSON(t, windowsURL(a, winStore, k0, "from=1970-01-01T00:01:00.0005Z&to=1970-01-01T00:01:59.9999Z"))
	require.Equal(t, 404, status, "%v", body)
	require.Empty(t, body["windows"])
	status, body = getJSON(t, windowsURL(a, winStore, k0, "from=1970-01-01T00:01:00.0005Z&to=1970-01-01T00:01:00.0009Z"))
	require.Equal(t, 400, status, "%v", body)
	require.Equal(t, "invalid_query", body["reason"])
	status, body = getJSON(t, windowsURL(a, winStore, k0, "from=1970-01-01T00:01:00Z&to=1970-01-01T00:01:00.0009Z"))
	require.Equal(t, 200, status, "%v", body)
	require.Equal(t, map[int64]int64{60_000: 1}, windowCounts(t, body))
}

// RFC 3339 allows its "T" and "Z" in lower case.
func TestLowerCaseRFC3339Times(t *testing.T) {
	noLeaks(t)
	c, reps := windowCluster(t, ServerConfig{})
	k0 := keyIn(0, 3, "w")
	putWindow(t, reps[[2]int{0, 0}][winStore], k0, 60_000, 1)
	putWindow(t, reps[[2]int{0, 0}][winStore], k0, 120_000, 2)
	status, body := getJSON(t, windowsURL(c.ins[0], winStore, k0, "from=1970-01-01t00:02:00z&to=1970-01-01t00:02:00%2B00:00"))
	require.Equal(t, 200, status, "%v", body)
	require.Equal(t, map[int64]int64{120_000: 2}, windowCounts(t, body))
}

// A timestamped window store's values are answered without their
// timestamp, which the windows carry (0 for a value stored bare), in
// process and through the client alike.
func TestTimestampedWindowQueries(t *testing.T) {
	noLeaks(t)
	c, reps := windowCluster(t, ServerConfig{})
	for _, in := range c.ins {
		in.b.layouts[winStore] = StoreLayout{Kind: KindWindow, Window: winOpts, Timestamped: true}
	}
	k1 := keyIn(1, 3, "w")
	r := reps[[2]int{1, 1}][winStore]
	putWindow(t, r, k1, 0, 2) // bare, as written before values kept a time
	func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		ws, err := statestore.NewWindowStore(r.store, winOpts)
		require.NoError(t, err)
		v, _ := serde.Int64.Encode(9)
		require.NoError(t, ws.Put([]byte(k1), 60_000, statestore.AppendTimestamped(nil, 61_234, v)))
	}()
	want := []Window[string, int64]{{Key: k1, Start: 0, End: 60_000, Value: 2}, {Key: k1, Start: 60_000, End: 120_000, Value: 9, Timestamp: 61_234}}

	ctx := context.Background()
	res, err := WindowFetch(ctx, c.ins[1].srv.Querier(), winStore, k1, time.Time{}, time.Time{}, serde.String, serde.Int64)
	require.NoError(t, err)
	require.Equal(t, want, res.Windows)

	cl, err := NewClient([]string{c.ins[2].addr()}, ClientOptions{})
	require.NoError(t, err)
	defer cl.Close()
	cres, err := ClientWindowFetch[string, int64](ctx, cl, winStore, k1, time.Time{}, time.Time{}, serde.String)
	require.NoError(t, err)
	require.Equal(t, want, cres.Windows)
	all, err := ClientWindowFetchAll[string, int64](ctx, cl, winStore, time.Time{}, time.Time{}, WithPartition(1))
	require.NoError(t, err)
	require.Len(t, all.Partitions, 1)
	require.Equal(t, want, all.Partitions[0].Windows)
}

// A timestamped key-value store (a table's) answers its values without
// their timestamps, bare values included, to lookups and scans alike; the
// answers carry each value's timestamp beside it (0, and no timestamp_ms
// over HTTP, for a value stored bare), as window answers do.
func TestTimestampedKeyValueQueries(t *testing.T) {
	noLeaks(t)
	c, reps := windowCluster(t, ServerConfig{})
	for _, in := range c.ins {
		in.b.layouts[testStore] = StoreLayout{Kind: KindKeyValue, Timestamped: true}
	}
	k1, k2 := keyIn(1, 3, "a"), keyIn(1, 3, "b")
	r := reps[[2]int{1, 1}][testStore]
	r.put(t, k1, 4) // bare, as written before values kept a time
	func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		v, _ := serde.Int64.Encode(7)
		require.NoError(t, r.store.Put([]byte(k2), statestore.AppendTimestamped(nil, 1234, v)))
	}()
	values := map[string]int64{k1: 4, k2: 7}
	stamps := map[string]int64{k1: 0, k2: 1234}

	ctx := context.Background()
	q := c.ins[1].srv.Querier()
	for k, want := range values {
		res, err := Get(ctx, q, testStore, k, serde.String, serde.Int64)
		require.NoError(t, err)
		require.Equal(t, want, res.Value)
		require.Equal(t, stamps[k], res.Timestamp, k)
	}
	all, err := All(ctx, q, testStore, serde.String, serde.Int64, WithPartition(1))
	require.NoError(t, err)
	require.Len(t, all.Partitions, 1)
	require.Len(t, all.Partitions[0].Entries, 2)
	for _, e := range all.Partitions[0].Entries {
		require.Equal(t, values[e.Key], e.Value)
		require.Equal(t, stamps[e.Key], e.Timestamp, e.Key)
	}

	// Over HTTP, from the replica's host and routed through another.
	for _, in := range []*fakeInstance{c.ins[1], c.ins[2]} {
		status, body := getJSON(t, keyURL(in, k2, "route=true"))
		require.Equal(t, 200, status, "%v", body)
		require.EqualValues(t, 7, body["value"])
		require.EqualValues(t, 1234, body["timestamp_ms"])
		status, body = getJSON(t, keyURL(in, k1, "route=true"))
		require.Equal(t, 200, status, "%v", body)
		require.NotContains(t, body, "timestamp_ms")
	}
	status, body := getJSON(t, c.ins[1].http.URL+"/v1/stores/"+testStore+"/range?partition=1")
	require.Equal(t, 200, status, "%v", body)
	entries := body["partitions"].([]any)[0].(map[string]any)["entries"].([]any)
	require.Len(t, entries, 2)
	for _, e := range entries {
		m := e.(map[string]any)
		if k := m["key"].(string); stamps[k] == 0 {
			require.NotContains(t, m, "timestamp_ms", k)
		} else {
			require.EqualValues(t, stamps[k], m["timestamp_ms"], k)
		}
	}

	cl, err := NewClient([]string{c.ins[2].addr()}, ClientOptions{})
	require.NoError(t, err)
	defer cl.Close()
	for k, want := range values {
		res, err := ClientGet[string, int64](ctx, cl, testStore, k, serde.String)
		require.NoError(t, err)
		require.Equal(t, want, res.Value)
		require.Equal(t, stamps[k], res.Timestamp, k)
	}
}

package iq

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
)

// freshness is a one-partition cluster of four instances in which the
// word "w" has been counted 100 times:
//
//	0  active at 3000, w=100
//	1  standby opened empty, rebuilding (w absent)
//	2  standby at 2990, lag 10, w=99
//	3  standby at 2000, lag 1000, w=70
//
// Every replica but the rebuilding one is within lag:10000 and age:5s.
func freshness(t *testing.T, cfg ServerConfig) (*cluster, []*fakeReplica) {
	c := newCluster(t, 4, 1, cfg)
	reps := []*fakeReplica{
		c.ins[0].b.add(testStore, 0, RoleActive),
		c.ins[1].b.add(testStore, 0, RoleStandby),
		c.ins[2].b.add(testStore, 0, RoleStandby),
		c.ins[3].b.add(testStore, 0, RoleStandby),
	}
	for i, v := range []int64{100, 0, 99, 70} {
		if v != 0 {
			reps[i].put(t, "w", v)
		}
	}
	reps[0].set(func(i *ReplicaInfo) { i.Position, i.End = 3000, 3000 })
	reps[1].set(func(i *ReplicaInfo) {
		i.Position, i.End, i.Rebuilding, i.CaughtUpAgo = -1, 3000, true, Unknown
	})
	reps[2].set(func(i *ReplicaInfo) { i.Position, i.End, i.CaughtUpAgo = 2990, 3000, time.Second })
	reps[3].set(func(i *ReplicaInfo) { i.Position, i.End, i.CaughtUpAgo = 2000, 3000, 2*time.Second })
	c.publish()
	return c, reps
}

func servedBody(t *testing.T, body map[string]any) (host, role string) {
	t.Helper()
	sb, ok := body["served_by"].(map[string]any)
	require.True(t, ok, "no served_by in %v", body)
	return sb["host"].(string), sb["role"].(string)
}

// A replica that is not caught up gives way to the live active, through
// the server and through the Client; with the active gone, the freshest
// replica within the bound answers, never a staler one or the empty one.
func TestRoutingPrefersTheFreshest(t *testing.T) {
	noLeaks(t)
	c, reps := freshness(t, ServerConfig{ActiveFirstTimeout: 200 * time.Millisecond, ForwardTimeout: 2 * time.Second, SuspectFor: time.Minute})
	bounds := []string{"lag:10000", "age:5s", "any"}

	t.Run("server: the active answers for a standby behind or empty", func(t *testing.T) {
		for _, asked := range []int{1, 2, 3} {
			for _, b := range bounds {
				status, body := getJSON(t, keyURL(c.ins[asked], "w", "staleness="+b))
				require.Equal(t, 200, status, "asked %d staleness %s: %v", asked, b, body)
				host, role := servedBody(t, body)
				require.Equal(t, c.ins[0].addr(), host, "asked %d staleness %s", asked, b)
				require.Equal(t, "active", role)
				require.EqualValues(t, 100, body["value"])
			}
		}
	})
	t.Run("client: the active first", func(t *testing.T) {
		cl, err := NewClient([]string{c.ins[1].addr()}, ClientOptions{DisableMonotonic: true})
		require.NoError(t, err)
		defer cl.Close()
		for _, b := range []Staleness{MaxLag(10000), MaxAge(5 * time.Second), AnyStaleness()} {
			for range 5 {
				res, err := ClientGet[string, int64](context.Background(), cl, testStore, "w", serde.String, WithStaleness(b))
				require.NoError(t, err)
				require.Equal(t, int64(100), res.Value, b.String())
				require.Equal(t, RoleActive, res.Provenance.Role)
				require.Equal(t, c.ins[0].addr(), res.Provenance.Host)
			}
		}
	})

	c.kill(0)
	t.Run("server: active down, the freshest within the bound", func(t *testing.T) {
		for _, asked := range []int{1, 2, 3} {
			for _, b := range bounds {
				for range 3 {
					status, body := getJSON(t, keyURL(c.ins[asked], "w", "staleness="+b))
					require.Equal(t, 200, status, "asked %d staleness %s: %v", asked, b, body)
					host, role := servedBody(t, body)
					require.Equal(t, c.ins[2].addr(), host, "asked %d staleness %s", asked, b)
					require.Equal(t, "standby", role)
					require.EqualValues(t, 99, body["value"])
					require.EqualValues(t, 10, body["served_by"].(map[string]any)["lag"])
				}
			}
		}
		// A bound only the staler standby passes gets its answer.
		reps[2].set(func(i *ReplicaInfo) { i.CaughtUpAgo = time.Hour })
		status, body := getJSON(t, keyURL(c.ins[1], "w", "staleness=age:5s"))
		require.Equal(t, 200, status, "%v", body)
		host, _ := servedBody(t, body)
		require.Equal(t, c.ins[3].addr(), host)
		require.EqualValues(t, 70, body["value"])
		reps[2].set(func(i *ReplicaInfo) { i.CaughtUpAgo = time.Second })
	})
	t.Run("client: active down, the freshest within the bound", func(t *testing.T) {
		cl, err := NewClient([]string{c.ins[3].addr()}, ClientOptions{DisableMonotonic: true})
		require.NoError(t, err)
		defer cl.Close()
		for range 5 {
			res, err := ClientGet[string, int64](context.Background(), cl, testStore, "w", serde.String, WithStaleness(MaxLag(10000)))
			require.NoError(t, err)
			require.Equal(t, int64(99), res.Value)
			require.Equal(t, c.ins[2].addr(), res.Provenance.Host)
			require.Equal(t, int64(10), res.Provenance.Lag)
		}
	})
	t.Run("the rebuilding replica alone answers only any", func(t *testing.T) {
		c.kill(2)
		c.kill(3)
		status, body := getJSON(t, keyURL(c.ins[1], "w", "staleness=lag:10000"))
		require.Equal(t, 503, status, "%v", body)
		require.Equal(t, reasonNotAvailable, body["reason"])
		status, body = getJSON(t, keyURL(c.ins[1], "w", "staleness=any"))
		require.Equal(t, 404, status, "%v", body)
		sb := body["served_by"].(map[string]any)
		require.Equal(t, true, sb["rebuilding"])
		require.Nil(t, sb["position"])
		require.Nil(t, sb["lag"])
		require.Nil(t, sb["age_ms"])
	})
}

// A live active that does not answer within ActiveFirstTimeout is given up
// for the replicas that can answer within the bound.
func TestRoutingActiveFirstTimeout(t *testing.T) {
	noLeaks(t)
	c, _ := freshness(t, ServerConfig{ActiveFirstTimeout: 100 * time.Millisecond, ForwardTimeout: 10 * time.Second, SuspectFor: time.Minute})
	c.ins[0].hang.Store(true)
	start := time.Now()
	status, body := getJSON(t, keyURL(c.ins[3], "w", "staleness=lag:10000"))
	require.Equal(t, 200, status, "%v", body)
	host, _ := servedBody(t, body)
	require.Equal(t, c.ins[2].addr(), host)
	require.Less(t, time.Since(start), 5*time.Second, "waited for the whole forward timeout")
}

// A host suspected a moment ago is still asked when nobody else could
// answer: the active that was slow once (routed around for SuspectFor) is
// the only host an active-only lookup may use, and it answers now.
func TestRoutingAsksSuspectsWhenNobodyElseAnswers(t *testing.T) {
	noLeaks(t)
	c, _ := freshness(t, ServerConfig{ActiveFirstTimeout: 100 * time.Millisecond, ForwardTimeout: 10 * time.Second, SuspectFor: time.Minute})
	c.ins[0].hang.Store(true)
	status, body := getJSON(t, keyURL(c.ins[3], "w", "staleness=lag:10000"))
	require.Equal(t, 200, status, "%v", body)
	host, _ := servedBody(t, body)
	require.Equal(t, c.ins[2].addr(), host, "the slow active routed around")
	c.ins[0].hang.Store(false)

	hits := c.ins[0].hits.Load()
	status, body = getJSON(t, keyURL(c.ins[3], "w", "staleness=active"))
	require.Equal(t, 200, status, "the suspected active is asked when it alone may answer: %v", body)
	host, role := servedBody(t, body)
	require.Equal(t, c.ins[0].addr(), host)
	require.Equal(t, "active", role)
	require.Greater(t, c.ins[0].hits.Load(), hits)

	// The standbys gone too, a looser bound reaches the suspect active.
	c.kill(2)
	c.kill(1)
	status, body = getJSON(t, keyURL(c.ins[3], "w", "staleness=lag:10000"))
	require.Equal(t, 200, status, "%v", body)
	host, _ = servedBody(t, body)
	require.Contains(t, []string{c.ins[0].addr(), c.ins[3].addr()}, host)
}

// Under the active bound, an active the table names that is still
// restoring, on its way to running, is waited for (RebalanceWait) like a
// partition in transit, and so is an unreachable active while the asking
// instance holds only a standby, through the server and the Client.
func TestRoutingWaitsForARestoringActive(t *testing.T) {
	noLeaks(t)
	c, reps := freshness(t, ServerConfig{RebalanceWait: 5 * time.Second, SuspectFor: time.Minute})
	restoring := func() {
		reps[0].set(func(i *ReplicaInfo) { i.Role = RoleRestoring })
	}
	promoteSoon := func() {
		time.AfterFunc(100*time.Millisecond, func() { reps[0].set(func(i *ReplicaInfo) { i.Role = RoleActive }) })
	}

	restoring()
	promoteSoon()
	status, body := getJSON(t, keyURL(c.ins[2], "w", "staleness=active"))
	require.Equal(t, 200, status, "the restoring active is waited for: %v", body)
	host, role := servedBody(t, body)
	require.Equal(t, c.ins[0].addr(), host)
	require.Equal(t, "active", role)

	cl, err := NewClient([]string{c.ins[3].addr()}, ClientOptions{DisableMonotonic: true, RebalanceWait: 5 * time.Second})
	require.NoError(t, err)
	defer cl.Close()
	restoring()
	promoteSoon()
	res, err := ClientGet[string, int64](context.Background(), cl, testStore, "w", serde.String)
	require.NoError(t, err, "the Client waits for the restoring active too")
	require.Equal(t, RoleActive, res.Provenance.Role)
	require.Equal(t, int64(100), res.Value)

	// The active's replica gone for a moment (a hand-over in progress),
	// the standby here refusing the active bound does not end the wait.
	c.ins[0].b.remove(testStore, 0)
	time.AfterFunc(100*time.Millisecond, func() { c.ins[0].b.add(testStore, 0, RoleActive) })
	status, body = getJSON(t, keyURL(c.ins[2], "w", "staleness=active"))
	require.Contains(t, []int{200, 404}, status, "answered by the active once it is back: %v", body)
	host, role = servedBody(t, body)
	require.Equal(t, c.ins[0].addr(), host)
	require.Equal(t, "active", role)
}

// With a caught-up local replica, the instance answers at once.
func TestRoutingCaughtUpAnswersLocally(t *testing.T) {
	noLeaks(t)
	c, reps := freshness(t, ServerConfig{})
	reps[2].set(func(i *ReplicaInfo) { i.End = i.Position })
	hits := c.ins[0].hits.Load()
	status, body := getJSON(t, keyURL(c.ins[2], "w", "staleness=lag:0"))
	require.Equal(t, 200, status)
	host, _ := servedBody(t, body)
	require.Equal(t, c.ins[2].addr(), host)
	require.Equal(t, hits, c.ins[0].hits.Load(), "asked the active")
}

// Routed ranges choose each partition's replica as key lookups do.
func TestRoutedRangePrefersTheFreshest(t *testing.T) {
	noLeaks(t)
	c, _ := freshness(t, ServerConfig{})
	u := c.ins[1].http.URL + "/v1/stores/counts/range?route=true&staleness=lag:10000"
	status, body := getJSON(t, u)
	require.Equal(t, 200, status)
	parts := body["partitions"].([]any)
	require.Len(t, parts, 1)
	p := parts[0].(map[string]any)
	require.Equal(t, c.ins[0].addr(), p["served_by"].(map[string]any)["host"])
	require.Len(t, p["entries"], 1)
	require.EqualValues(t, 100, p["entries"].([]any)[0].(map[string]any)["value"])
}

// prefer=spread shares the reads among every replica within the bound.
func TestPreferSpread(t *testing.T) {
	noLeaks(t)
	c, reps := freshness(t, ServerConfig{})
	reps[1].set(func(i *ReplicaInfo) { i.Rebuilding, i.Position, i.CaughtUpAgo = false, 2995, 0 })

	hosts := map[string]int{}
	for range 60 {
		status, body := getJSON(t, keyURL(c.ins[1], "w", "staleness=lag:10000&prefer=spread"))
		require.Contains(t, []int{200, 404}, status)
		host, _ := servedBody(t, body)
		hosts[host]++
	}
	require.Greater(t, len(hosts), 1, "one host served every read: %v", hosts)
	require.Contains(t, hosts, c.ins[1].addr(), "the local replica is a candidate too")

	cl, err := NewClient([]string{c.ins[1].addr()}, ClientOptions{DisableMonotonic: true, Prefer: PreferSpread})
	require.NoError(t, err)
	defer cl.Close()
	clientHosts := map[string]int{}
	for range 60 {
		res, err := ClientGet[string, int64](context.Background(), cl, testStore, "w", serde.String, WithStaleness(MaxLag(10000)))
		require.NoError(t, err)
		clientHosts[res.Provenance.Host]++
	}
	require.Greater(t, len(clientHosts), 1, "one host served every read: %v", clientHosts)
	// The bound still holds: ActiveOnly spreads over the active alone.
	for range 10 {
		res, err := ClientGet[string, int64](context.Background(), cl, testStore, "w", serde.String, WithPreference(PreferSpread))
		require.NoError(t, err)
		require.Equal(t, RoleActive, res.Provenance.Role)
	}

	status, body := getJSON(t, keyURL(c.ins[1], "w", "prefer=nearest"))
	require.Equal(t, 400, status)
	require.Equal(t, reasonInvalid, body["reason"])
}

// Keys that are not clean path segments survive forwarding.
func TestKeysThatAreNotPathSegments(t *testing.T) {
	noLeaks(t)
	c := newCluster(t, 2, 1, ServerConfig{})
	act := c.ins[0].b.add(testStore, 0, RoleActive)
	keys := map[string]int64{"..": 1, "a/b": 2, ".": 3, "a b?c=d&e": 4, "/": 5}
	for k, v := range keys {
		act.put(t, k, v)
	}
	c.publish()
	for k, v := range keys {
		u := c.ins[1].http.URL + "/v1/stores/counts/keys?" + url.Values{"key": {k}}.Encode()
		status, body := getJSON(t, u)
		require.Equal(t, 200, status, "%q: %v", k, body)
		require.Equal(t, k, body["key"])
		require.EqualValues(t, v, body["value"], k)
		host, _ := servedBody(t, body)
		require.Equal(t, c.ins[0].addr(), host)
	}
	// The path form still serves keys that survive in a path, "/" escaped.
	status, body := getJSON(t, c.ins[1].http.URL+"/v1/stores/counts/keys/a%2Fb")
	require.Equal(t, 200, status, "%v", body)
	require.EqualValues(t, 2, body["value"])

	cl, err := NewClient([]string{c.ins[1].addr()}, ClientOptions{})
	require.NoError(t, err)
	defer cl.Close()
	for k, v := range keys {
		res, err := ClientGet[string, int64](context.Background(), cl, testStore, k, serde.String)
		require.NoError(t, err, k)
		require.True(t, res.Found, k)
		require.Equal(t, v, res.Value, k)
	}
	status, body = getJSON(t, c.ins[1].http.URL+"/v1/stores/counts/keys")
	require.Equal(t, 400, status)
	require.Equal(t, reasonInvalid, body["reason"])
	status, body = getJSON(t, c.ins[1].http.URL+"/v1/metadata/stores/counts/keys?key=..")
	require.Equal(t, 200, status)
	require.Equal(t, c.ins[0].addr(), body["active"])
}

func TestNegativeMinPosition(t *testing.T) {
	noLeaks(t)
	c, _ := threeInstances(t, ServerConfig{})
	for _, q := range []string{"min_position=-1", "min_position=-1&route=false"} {
		status, body := getJSON(t, keyURL(c.ins[0], keyIn(0, 3, "k"), q))
		require.Equal(t, 400, status, q)
		require.Equal(t, reasonInvalid, body["reason"])
		require.Contains(t, body["error"], "min_position")
	}
	status, body := getJSON(t, c.ins[0].http.URL+"/v1/stores/counts/range?partition=0&min_position=-1")
	require.Equal(t, 400, status)
	require.Equal(t, reasonInvalid, body["reason"])
}

// Past its concurrency limits the server answers 429 with Retry-After,
// and frees the slot when the work ends.
func TestConcurrencyLimits(t *testing.T) {
	noLeaks(t)
	c, _ := threeInstances(t, ServerConfig{MaxConcurrentRanges: 1, MaxConcurrentForwards: 1, ForwardTimeout: 10 * time.Second, RetryAfter: 2 * time.Second})
	a, b := c.ins[0], c.ins[1] // b holds nothing of partition 0, whose active is a
	a.hang.Store(true)

	// hold sends a request that hangs at a until its context ends.
	hold := func(u string) (release func()) {
		ctx, cancel := context.WithCancel(context.Background())
		hits := a.hits.Load()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		deadline := time.Now().Add(5 * time.Second)
		for a.hits.Load() == hits {
			require.True(t, time.Now().Before(deadline), "the held request never reached the hung host")
			time.Sleep(5 * time.Millisecond)
		}
		return func() { cancel(); wg.Wait() }
	}
	check429 := func(u string) {
		t.Helper()
		resp, err := http.Get(u)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		require.Equal(t, "2", resp.Header.Get("Retry-After"))
		var w wireError
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&w))
		require.Equal(t, reasonOverloaded, w.Reason)
		require.ErrorIs(t, fromWireError(resp.StatusCode, w), ErrOverloaded)
	}

	t.Run("ranges", func(t *testing.T) {
		rangeURL := b.http.URL + "/v1/stores/counts/range?route=true&staleness=any"
		release := hold(rangeURL)
		check429(rangeURL)
		check429(b.http.URL + "/v1/stores/counts/range") // local ones count too
		// Key lookups are not ranges.
		status, _ := getJSON(t, keyURL(b, keyIn(1, 3, "k"), ""))
		require.Equal(t, 404, status)
		release()
		// The slot frees once the held query's handler notices its
		// client left.
		require.Eventually(t, func() bool {
			status, _ := getJSON(t, b.http.URL+"/v1/stores/counts/range")
			return status == 200
		}, 5*time.Second, 10*time.Millisecond)
	})
	t.Run("forwarded lookups", func(t *testing.T) {
		k0 := keyIn(0, 3, "k")
		release := hold(keyURL(b, k0, ""))
		check429(keyURL(b, keyIn(0, 3, "j"), ""))
		// A lookup answered locally needs no slot.
		status, _ := getJSON(t, keyURL(b, keyIn(1, 3, "k"), ""))
		require.Equal(t, 404, status)
		release()
		a.hang.Store(false)
		require.Eventually(t, func() bool {
			status, _ := getJSON(t, keyURL(b, k0, ""))
			return status == 404
		}, 5*time.Second, 10*time.Millisecond)
	})
}

// serveWith serves s on a fresh listener through HTTPServer.
func serveWith(t *testing.T, s *Server) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := s.HTTPServer(ln.Addr().String())
	done := make(chan struct{})
	go func() { defer close(done); hs.Serve(ln) }()
	t.Cleanup(func() { hs.Close(); <-done })
	return ln.Addr().String()
}

// closedWithin reports whether the server closes conn within d, reading
// (and discarding) whatever it sends until then.
func closedWithin(conn net.Conn, d time.Duration) bool {
	conn.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, conn)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// trickle writes parts one by one, pausing between them, until they run
// out or a write fails (the server hung up).
func trickle(conn net.Conn, parts []string, pause time.Duration) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, p := range parts {
			if _, err := io.WriteString(conn, p); err != nil {
				return
			}
			time.Sleep(pause)
		}
	}()
	return &wg
}

func TestHTTPServerTimeouts(t *testing.T) {
	noLeaks(t)
	b, _ := oneInstance(t)
	s := NewServer(b, ServerConfig{ReadHeaderTimeout: 150 * time.Millisecond, ReadTimeout: 300 * time.Millisecond,
		WriteTimeout: time.Second, IdleTimeout: 300 * time.Millisecond}, countsCodec())
	defer s.Close()
	addr := serveWith(t, s)
	hs := s.HTTPServer("x:1")
	require.Equal(t, "x:1", hs.Addr)
	require.Equal(t, time.Second, hs.WriteTimeout)
	require.NotNil(t, hs.Handler)
	defaults := NewServer(b, ServerConfig{}).HTTPServer("")
	require.Positive(t, defaults.ReadHeaderTimeout)
	require.Positive(t, defaults.ReadTimeout)
	require.Positive(t, defaults.WriteTimeout)
	require.Positive(t, defaults.IdleTimeout)

	// Each trickle would last 10s at least; the server must hang up well
	// before.
	many := func(prefix string, n int, part string) []string {
		out := []string{prefix}
		for range n {
			out = append(out, part)
		}
		return out
	}
	t.Run("headers trickled", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer conn.Close()
		wg := trickle(conn, many("GET /healthz HTTP/1.1\r\nHost: x\r\n", 200, "X-Slow: 1\r\n"), 50*time.Millisecond)
		require.True(t, closedWithin(conn, 5*time.Second), "a client trickling its headers kept the connection")
		conn.Close()
		wg.Wait()
	})
	t.Run("body trickled", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer conn.Close()
		wg := trickle(conn, many("GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n", 200, "a"), 50*time.Millisecond)
		require.True(t, closedWithin(conn, 5*time.Second), "a client trickling its body kept the connection")
		conn.Close()
		wg.Wait()
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer conn.Close()
		_, err = io.WriteString(conn, "GET /v1/lags HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
		require.False(t, resp.Close, "the server should keep the connection alive at first")
		require.True(t, closedWithin(conn, 5*time.Second), "an idle keep-alive connection was kept")
	})
}

// Provenance survives the wire, unknowns included.
func TestProvenanceWireRoundTrip(t *testing.T) {
	for _, p := range []Provenance{
		{Host: "h:1", Partition: 3, Role: RoleActive, Position: 10},
		{Host: "h:1", Partition: 3, Role: RoleStandby, Position: 7, Lag: 3, LagConfirmedAgo: 40 * time.Millisecond, Age: 2 * time.Second, InputCommittedAgo: 2 * time.Second},
		{Host: "h:1", Partition: 0, Role: RoleStandby, Position: 7, Lag: -1, LagConfirmedAgo: 31 * time.Second, Age: Unknown, InputCommittedAgo: Unknown},
		{Host: "h:1", Partition: 1, Role: RoleRestoring, Position: -1, Lag: -1, Rebuilding: true, LagConfirmedAgo: Unknown, Age: Unknown, InputCommittedAgo: 5 * time.Millisecond},
		{Host: "h:1", Partition: 2, Role: RoleActive, Position: 12, LagConfirmedAgo: 0, ContactAgo: 800 * time.Millisecond},
		{Host: "h:1", Partition: 2, Role: RoleUnconfirmed, Position: 12, Lag: -1, LagConfirmedAgo: 4200 * time.Millisecond, Age: 4200 * time.Millisecond,
			InputCommittedAgo: time.Second, ContactAgo: 4200 * time.Millisecond},
	} {
		b, err := json.Marshal(wireKey{Key: "k", Partition: p.Partition, ServedBy: servedBy(p)})
		require.NoError(t, err)
		var k wireKey
		require.NoError(t, json.Unmarshal(b, &k))
		require.Equal(t, p, k.ServedBy.provenance(k.Partition), string(b))
		if p.Lag < 0 {
			require.Contains(t, string(b), `"lag":null`)
		}
		if p.Rebuilding {
			require.Contains(t, string(b), `"position":null`)
		}
		if p.Role == RoleUnconfirmed {
			require.Contains(t, string(b), `"role":"unconfirmed"`)
			require.Contains(t, string(b), `"contact_ms_ago":4200`)
		}
	}
	// An unconfirmed active is not caught up, and a confirmed active's
	// answer is fresher than its, whatever the positions.
	unconfirmed := Provenance{Role: RoleUnconfirmed, Position: 100, Lag: -1}
	require.False(t, unconfirmed.caughtUp())
	require.True(t, Provenance{Role: RoleActive, Position: 90}.fresher(unconfirmed))
	require.False(t, unconfirmed.fresher(Provenance{Role: RoleActive, Position: 90}))
	// Old readers that know only host, role, position and lag still find
	// them.
	var old struct {
		ServedBy struct {
			Host     string `json:"host"`
			Role     string `json:"role"`
			Position int64  `json:"position"`
			Lag      int64  `json:"lag"`
		} `json:"served_by"`
	}
	b, err := json.Marshal(wireKey{ServedBy: servedBy(Provenance{Host: "h:1", Role: RoleStandby, Position: 9, Lag: 2})})
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &old))
	require.Equal(t, "standby", old.ServedBy.Role)
	require.Equal(t, int64(9), old.ServedBy.Position)
	require.Equal(t, int64(2), old.ServedBy.Lag)
}

// A local replica routing settled on is checked again before it answers:
// here the freshest standby, chosen with the active unreachable, is
// promoted to a restoring active (lag unknown) while routing ran. The
// query then goes to the other replicas rather than being refused.
func TestRoutingAsksOthersWhenTheLocalReplicaChangedMeanwhile(t *testing.T) {
	noLeaks(t)
	c, reps := freshness(t, ServerConfig{RebalanceWait: time.Second, SuspectFor: time.Minute})
	c.kill(0)
	reps[2].mu.Lock()
	reps[2].onInfo = func(calls int, i *ReplicaInfo) {
		if calls > 1 {
			i.Role, i.Lag, i.LagConfirmedAgo = RoleRestoring, -1, Unknown
		}
	}
	reps[2].mu.Unlock()
	status, body := getJSON(t, keyURL(c.ins[2], "w", "staleness=lag:10000&prefer=freshest"))
	require.Equal(t, 200, status, "answered by another replica within the bound: %v", body)
	host, role := servedBody(t, body)
	require.Equal(t, c.ins[3].addr(), host)
	require.Equal(t, "standby", role)
	require.EqualValues(t, 70, body["value"])
}

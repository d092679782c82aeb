package iq

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

// getJSON fetches url and decodes the JSON answer into a generic map.
func getJSON(t testing.TB, u string) (int, map[string]any) {
	t.Helper()
	status, body := getBody(t, u)
	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m), "body: %s", body)
	return status, m
}

func getBody(t testing.TB, u string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	return resp.StatusCode, b
}

func TestStatusFor(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		reason string
	}{
		{fmt.Errorf("x: %w", ErrUnknownStore), 404, reasonUnknownStore},
		{fmt.Errorf("x: %w", ErrUnknownPartition), 400, reasonUnknownPartition},
		{invalidf("bad key"), 400, reasonInvalid},
		{fmt.Errorf("x: %w", ErrNotHostedHere), 421, reasonNotHosted},
		{ErrNotStarted, 503, reasonNotStarted},
		{ErrShuttingDown, 503, reasonShuttingDown},
		{ErrNotRunning, 503, reasonNotRunning},
		{fmt.Errorf("x: %w", ErrRebalancing), 503, reasonRebalancing},
		{&StaleError{Role: RoleStandby}, 503, reasonTooStale},
		{&BehindError{}, 409, reasonBehind},
		{&UnavailableError{Partition: -1}, 503, reasonNotAvailable},
		{errors.New("disk on fire"), 500, reasonInternal},
	} {
		status, reason := classify(tc.err)
		require.Equal(t, tc.status, status, tc.err.Error())
		require.Equal(t, tc.reason, reason, tc.err.Error())
		require.Equal(t, tc.status, StatusFor(tc.err))

		// What the server writes, a router reads back as the same error.
		st, w := toWireError(tc.err)
		back := fromWireError(st, w)
		for _, s := range []error{ErrUnknownStore, ErrUnknownPartition, ErrInvalidQuery, ErrNotHostedHere, ErrNotStarted,
			ErrShuttingDown, ErrNotRunning, ErrRebalancing, ErrTooStale, ErrBehind, ErrNotAvailable} {
			require.Equal(t, errors.Is(tc.err, s), errors.Is(back, s), "%v vs %v", tc.err, s)
		}
	}
}

// A too-stale refusal keeps, across the wire, the details its message
// explains itself with.
func TestStaleErrorRoundTripKeepsDetails(t *testing.T) {
	for _, in := range []*StaleError{
		{Store: "s", Partition: 3, Host: "h:1", Role: RoleRestoring, Position: 7, Lag: 500, LagConfirmedAgo: 20 * time.Millisecond,
			SinceCaughtUp: Unknown, InputCommittedAgo: time.Second, Bound: MaxLag(100)},
		{Store: "s", Partition: 3, Host: "h:1", Role: RoleStandby, Position: -1, Lag: -1, Rebuilding: true, LagConfirmedAgo: Unknown,
			SinceCaughtUp: Unknown, InputCommittedAgo: Unknown, Bound: MaxAge(time.Minute)},
		{Store: "s", Partition: 0, Host: "h:1", Role: RoleStandby, Position: 70, Lag: -1, LagConfirmedAgo: 12345 * time.Millisecond,
			SinceCaughtUp: 2 * time.Second, InputCommittedAgo: 9 * time.Second, Bound: MaxAge(5 * time.Second)},
		{Store: "s", Partition: 1, Host: "h:1", Role: RoleUnconfirmed, Position: 70, Lag: -1, LagConfirmedAgo: 4 * time.Second,
			SinceCaughtUp: 4 * time.Second, InputCommittedAgo: time.Second, ContactAgo: 4 * time.Second, Bound: ActiveOnly()},
	} {
		st, w := toWireError(in)
		var back *StaleError
		require.ErrorAs(t, fromWireError(st, w), &back)
		require.Equal(t, *in, *back)
		require.Equal(t, in.Error(), back.Error())
	}
}

// TestServerErrors covers every typed error end to end: the status, the
// reason code, and a message that says what to do.
func TestServerErrors(t *testing.T) {
	noLeaks(t)
	b, reps := oneInstance(t)
	reps[0].put(t, keyIn(0, 4, "a"), 1)
	reps[1].set(func(i *ReplicaInfo) { i.End = 30 })
	intCodec := CodecFor("ints", serde.Int64, serde.Int64, nil)
	srv := NewServer(b, ServerConfig{}, countsCodec(), intCodec)
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()
	b.partitions["ints"] = 4

	key := func(k string, q string) string {
		return hs.URL + "/v1/stores/" + testStore + "/keys/" + url.PathEscape(k) + "?route=false&" + q
	}
	for _, tc := range []struct {
		name   string
		url    string
		setup  func()
		status int
		reason string
		msg    string
	}{
		{name: "unknown store", url: hs.URL + "/v1/stores/nope/keys/a", status: 404, reason: reasonUnknownStore, msg: "check the store name"},
		{name: "malformed key", url: hs.URL + "/v1/stores/ints/keys/abc", status: 400, reason: reasonInvalid, msg: "malformed key"},
		{name: "bad staleness", url: key("a", "staleness=lag:-2"), status: 400, reason: reasonInvalid, msg: "lag:N"},
		{name: "bad route", url: hs.URL + "/v1/stores/counts/keys/a?route=maybe", status: 400, reason: reasonInvalid, msg: "route"},
		{name: "bad min position", url: key("a", "min_position=x"), status: 400, reason: reasonInvalid, msg: "min_position"},
		{name: "missing partition", url: key("a", "partition=17"), status: 400, reason: reasonUnknownPartition, msg: "which has 4"},
		{name: "not hosted", url: key(keyIn(3, 4, "a"), ""), status: 421, reason: reasonNotHosted, msg: "route=true"},
		{name: "too stale", url: key(keyIn(1, 4, "a"), ""), status: 503, reason: reasonTooStale, msg: "looser bound"},
		{name: "behind", url: key(keyIn(0, 4, "a"), "min_position=9"), status: 409, reason: reasonBehind, msg: "min_position 9"},
		{name: "rebalancing", url: key("a", ""), setup: func() { b.replicaErr = ErrRebalancing }, status: 503, reason: reasonRebalancing, msg: "retry shortly"},
		{name: "not started", url: key("a", ""), setup: func() { b.replicaErr = ErrNotStarted }, status: 503, reason: reasonNotStarted, msg: "first assignment"},
		{name: "shutting down", url: key("a", ""), setup: func() { b.replicaErr = ErrShuttingDown }, status: 503, reason: reasonShuttingDown, msg: "another instance"},
		{name: "key metadata before assignment", url: hs.URL + "/v1/metadata/stores/counts/keys/a", setup: func() { b.setMeta(Metadata{}, ErrNotStarted) },
			status: 503, reason: reasonNotAvailable, msg: "first assignment"},
		{name: "metadata before assignment", url: hs.URL + "/v1/metadata", setup: func() { b.setMeta(Metadata{}, ErrNotStarted) }, status: 503, reason: reasonNotStarted},
		{name: "range bad bound", url: hs.URL + "/v1/stores/ints/range?from=x", status: 400, reason: reasonInvalid, msg: "malformed from"},
		{name: "range bad limit", url: hs.URL + "/v1/stores/counts/range?limit=0", status: 400, reason: reasonInvalid, msg: "limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			meta, _ := b.Metadata()
			defer func() { b.replicaErr = nil; b.setMeta(meta, nil) }()
			if tc.setup != nil {
				tc.setup()
			}
			status, body := getJSON(t, tc.url)
			require.Equal(t, tc.status, status, "%v", body)
			require.Equal(t, tc.reason, body["reason"])
			require.Contains(t, body["error"], tc.msg)
		})
	}

	t.Run("too stale carries role and lag", func(t *testing.T) {
		_, body := getJSON(t, key(keyIn(1, 4, "a"), "staleness=lag:5"))
		require.Equal(t, "standby", body["role"])
		require.EqualValues(t, 30, body["lag"])
		require.EqualValues(t, 0, body["position"])
		require.Equal(t, "lag:5", body["staleness"])
	})
	t.Run("behind carries both positions", func(t *testing.T) {
		_, body := getJSON(t, key(keyIn(0, 4, "a"), "min_position=9"))
		require.EqualValues(t, 1, body["position"])
		require.EqualValues(t, 9, body["min_position"])
	})
}

func TestServerAnswersAndMetadata(t *testing.T) {
	noLeaks(t)
	b, reps := oneInstance(t)
	k0 := keyIn(0, 4, "a")
	reps[0].put(t, k0, 42)
	reps[1].set(func(i *ReplicaInfo) { i.End = 30; i.Restored = 12; i.CaughtUpAgo = 1500 * time.Millisecond })
	srv := NewServer(b, ServerConfig{}, countsCodec())
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()

	status, body := getBody(t, hs.URL+"/v1/stores/counts/keys/"+k0)
	require.Equal(t, 200, status)
	require.JSONEq(t, fmt.Sprintf(`{"key":%q,"value":42,"partition":0,"served_by":{"host":"self:1","role":"active","position":1,"lag":0,"rebuilding":false,"lag_confirmed_ms_ago":0,"age_ms":0,"input_committed_ms_ago":0,"contact_ms_ago":0}}`, k0), string(body))

	absent := keyIn(0, 4, "zz")
	status, body = getBody(t, hs.URL+"/v1/stores/counts/keys/"+absent)
	require.Equal(t, 404, status)
	require.JSONEq(t, fmt.Sprintf(`{"key":%q,"partition":0,"error":"key not found","served_by":{"host":"self:1","role":"active","position":1,"lag":0,"rebuilding":false,"lag_confirmed_ms_ago":0,"age_ms":0,"input_committed_ms_ago":0,"contact_ms_ago":0}}`, absent), string(body))

	status, body = getBody(t, hs.URL+"/v1/metadata/stores/counts/keys/"+k0)
	require.Equal(t, 200, status)
	require.JSONEq(t, `{"partition":0,"active":"self:1","standbys":["other:1"],"warmups":[]}`, string(body))

	// No active for partition 1 once other:1 is gone: active is null.
	m, _ := b.Metadata()
	b.setMeta(Metadata{Hosts: m.Hosts[1:], Partitions: m.Partitions}, nil)
	status, body = getBody(t, hs.URL+"/v1/metadata/stores/counts/keys/"+keyIn(1, 4, "a"))
	require.Equal(t, 200, status)
	require.JSONEq(t, `{"partition":1,"active":null,"standbys":["self:1"],"warmups":["third:1"]}`, string(body))
	b.setMeta(m, nil)

	status, body = getBody(t, hs.URL+"/v1/metadata")
	require.Equal(t, 200, status)
	require.JSONEq(t, `{"instances":[
		{"host":"other:1","active":[{"store":"counts","partition":1}],"standby":[{"store":"counts","partition":0}],"warmup":[]},
		{"host":"self:1","active":[{"store":"counts","partition":0},{"store":"counts","partition":2}],"standby":[{"store":"counts","partition":1}],"warmup":[]},
		{"host":"third:1","active":[],"standby":[{"store":"other","partition":0}],"warmup":[{"store":"counts","partition":1}]}],
		"partitions":{"counts":4,"other":1}}`, string(body))

	status, body = getBody(t, hs.URL+"/v1/metadata/stores/other")
	require.Equal(t, 200, status)
	require.JSONEq(t, `{"store":"other","partitions":1,"instances":[{"host":"third:1","active":[],"standby":[{"store":"other","partition":0}],"warmup":[]}]}`, string(body))

	// What a replica cannot vouch for is null.
	reps[1].set(func(i *ReplicaInfo) { i.LagConfirmedAgo, i.InputCommittedAgo = 250*time.Millisecond, 4*time.Second })
	reps[2].set(func(i *ReplicaInfo) {
		i.Rebuilding, i.Position, i.End, i.LagConfirmedAgo, i.CaughtUpAgo, i.InputCommittedAgo = true, -1, -1, Unknown, Unknown, Unknown
	})
	status, body = getBody(t, hs.URL+"/v1/lags")
	require.Equal(t, 200, status)
	require.JSONEq(t, `[
		{"store":"counts","partition":0,"role":"active","position":1,"end":1,"lag":0,"rebuilding":false,"restored":0,
		 "lag_confirmed_ms_ago":0,"since_caught_up_ms":0,"input_committed_ms_ago":0,"age_ms":0,"contact_ms_ago":0},
		{"store":"counts","partition":1,"role":"standby","position":0,"end":30,"lag":30,"rebuilding":false,"restored":12,
		 "lag_confirmed_ms_ago":250,"since_caught_up_ms":1500,"input_committed_ms_ago":4000,"age_ms":4000,"contact_ms_ago":null},
		{"store":"counts","partition":2,"role":"restoring","position":null,"end":null,"lag":null,"rebuilding":true,"restored":0,
		 "lag_confirmed_ms_ago":null,"since_caught_up_ms":null,"input_committed_ms_ago":null,"age_ms":null,"contact_ms_ago":null}]`, string(body))
	var lags []wireLag
	require.NoError(t, json.Unmarshal(body, &lags))
	for i, l := range lags {
		require.Equal(t, reps[int32(i)].Info(), l.info(), "partition %d round trip", i)
	}

	// Healthy only with the routing table known and nothing restoring.
	status, h := getJSON(t, hs.URL+"/healthz")
	require.Equal(t, 503, status)
	require.Contains(t, h["error"], "partition 2 is restoring")
	b.remove(testStore, 2)
	status, h = getJSON(t, hs.URL+"/healthz")
	require.Equal(t, 200, status)
	require.Equal(t, "ok", h["status"])
	// An instance whose every active is unconfirmed (cut off, or
	// resumed from a pause) is not ready; one with some confirmed is
	// degraded.
	reps[0].set(func(i *ReplicaInfo) { i.Role, i.ContactAgo = RoleUnconfirmed, 5*time.Second })
	status, h = getJSON(t, hs.URL+"/healthz")
	require.Equal(t, 503, status)
	require.Equal(t, reasonRebalancing, h["reason"])
	require.Contains(t, h["error"], "1 active store partitions are unconfirmed")
	b.add("other", 0, RoleActive)
	status, h = getJSON(t, hs.URL+"/healthz")
	require.Equal(t, 200, status)
	require.Equal(t, "degraded", h["status"])
	b.remove("other", 0)
	reps[0].set(func(i *ReplicaInfo) { i.Role, i.ContactAgo = RoleActive, 0 })
	b.setMeta(Metadata{}, ErrNotStarted)
	status, h = getJSON(t, hs.URL+"/healthz")
	require.Equal(t, 503, status)
	require.Equal(t, reasonNotStarted, h["reason"])
	b.setMeta(m, nil)

	// Local range: the replicas here within the bound, the others listed.
	reps[0].put(t, "b", 2)
	reps[1].put(t, "x", 3)
	status, body = getBody(t, hs.URL+"/v1/stores/counts/range?to=zz")
	require.Equal(t, 200, status)
	var wr wireRange
	require.NoError(t, json.Unmarshal(body, &wr))
	require.Len(t, wr.Partitions, 1)
	require.Equal(t, int32(0), wr.Partitions[0].Partition)
	require.Equal(t, RoleActive, wr.Partitions[0].ServedBy.Role)
	require.Len(t, wr.Partitions[0].Entries, 2)
	require.Len(t, wr.Failed, 1)
	require.Equal(t, int32(1), wr.Failed[0].Partition)
	require.Equal(t, reasonTooStale, wr.Failed[0].Reason)

	status, body = getBody(t, hs.URL+"/v1/stores/counts/range?from=a&staleness=any&limit=1")
	require.Equal(t, 200, status)
	require.JSONEq(t, `{"store":"counts","partitions":[
		{"partition":0,"served_by":{"host":"self:1","role":"active","position":2,"lag":0,"rebuilding":false,"lag_confirmed_ms_ago":0,"age_ms":0,"input_committed_ms_ago":0,"contact_ms_ago":0},"entries":[{"key":"`+k0+`","value":42}],"truncated":true},
		{"partition":1,"served_by":{"host":"self:1","role":"standby","position":1,"lag":29,"rebuilding":false,"lag_confirmed_ms_ago":250,"age_ms":4000,"input_committed_ms_ago":4000,"contact_ms_ago":null},"entries":[{"key":"x","value":3}]}]}`, string(body))
}

// threeInstances is a 3-instance, 3-partition cluster: instance i is
// active for partition i and standby for partition i+1 (mod 3), so
// instance i holds nothing of partition i+2.
func threeInstances(t *testing.T, cfg ServerConfig) (*cluster, map[[2]int]*fakeReplica) {
	c := newCluster(t, 3, 3, cfg)
	reps := map[[2]int]*fakeReplica{}
	for i, in := range c.ins {
		reps[[2]int{i, i}] = in.b.add(testStore, int32(i), RoleActive)
		reps[[2]int{i, (i + 1) % 3}] = in.b.add(testStore, int32((i+1)%3), RoleStandby)
	}
	c.publish()
	return c, reps
}

func keyURL(in *fakeInstance, key, q string) string {
	return in.http.URL + "/v1/stores/" + testStore + "/keys/" + url.PathEscape(key) + "?" + q
}

func TestRouting(t *testing.T) {
	noLeaks(t)
	c, reps := threeInstances(t, ServerConfig{ForwardTimeout: time.Second, SuspectFor: time.Minute})
	k0 := keyIn(0, 3, "k")
	reps[[2]int{0, 0}].put(t, k0, 5)
	reps[[2]int{2, 0}].put(t, k0, 4) // the standby of partition 0, one record behind
	reps[[2]int{2, 0}].set(func(i *ReplicaInfo) { i.End = 2; i.CaughtUpAgo = time.Second })
	a, b, s := c.ins[0], c.ins[1], c.ins[2] // active, no replica, standby of partition 0

	served := func(body map[string]any) (string, string) {
		sb := body["served_by"].(map[string]any)
		return sb["host"].(string), sb["role"].(string)
	}

	t.Run("local answer", func(t *testing.T) {
		before := b.hits.Load() + s.hits.Load()
		status, body := getJSON(t, keyURL(a, k0, ""))
		require.Equal(t, 200, status)
		host, role := served(body)
		require.Equal(t, a.addr(), host)
		require.Equal(t, "active", role)
		require.Equal(t, before, b.hits.Load()+s.hits.Load(), "a local answer forwards nothing")
	})
	t.Run("local standby behind within the bound gives way to the active", func(t *testing.T) {
		status, body := getJSON(t, keyURL(s, k0, "staleness=lag:1"))
		require.Equal(t, 200, status)
		host, role := served(body)
		require.Equal(t, a.addr(), host)
		require.Equal(t, "active", role)
		require.EqualValues(t, 5, body["value"])
		// Unrouted, the local standby answers.
		status, body = getJSON(t, keyURL(s, k0, "staleness=lag:1&route=false"))
		require.Equal(t, 200, status)
		host, role = served(body)
		require.Equal(t, s.addr(), host)
		require.Equal(t, "standby", role)
		require.EqualValues(t, 4, body["value"])
	})
	t.Run("forward to the active", func(t *testing.T) {
		hits := a.hits.Load()
		status, body := getJSON(t, keyURL(b, k0, ""))
		require.Equal(t, 200, status)
		require.EqualValues(t, 5, body["value"])
		host, _ := served(body)
		require.Equal(t, a.addr(), host)
		require.Equal(t, hits+1, a.hits.Load())
		// The standby is passed over for the default bound too.
		status, body = getJSON(t, keyURL(s, k0, ""))
		require.Equal(t, 200, status)
		host, _ = served(body)
		require.Equal(t, a.addr(), host)
	})
	t.Run("absent key forwarded keeps provenance", func(t *testing.T) {
		status, body := getJSON(t, keyURL(b, keyIn(0, 3, "absent"), ""))
		require.Equal(t, 404, status)
		host, _ := served(body)
		require.Equal(t, a.addr(), host)
	})
	t.Run("min_position: behind replica refuses, the next answers", func(t *testing.T) {
		// The local standby is at 1, behind 2: it refuses and the active
		// (at 1 too) refuses as well; at min 1 the standby answers.
		status, body := getJSON(t, keyURL(s, k0, "staleness=any&min_position=2"))
		require.Equal(t, 503, status)
		tried := body["tried"].([]any)
		require.Len(t, tried, 2)
		require.Equal(t, reasonBehind, tried[0].(map[string]any)["reason"])
		require.Equal(t, s.addr(), tried[0].(map[string]any)["host"])
		require.Equal(t, reasonBehind, tried[1].(map[string]any)["reason"])
		require.Equal(t, a.addr(), tried[1].(map[string]any)["host"])

		reps[[2]int{0, 0}].put(t, k0, 6) // the active moves to 2
		status, body = getJSON(t, keyURL(s, k0, "staleness=any&min_position=2"))
		require.Equal(t, 200, status)
		host, _ := served(body)
		require.Equal(t, a.addr(), host)
		require.EqualValues(t, 6, body["value"])

		status, body = getJSON(t, keyURL(s, k0, "staleness=any&min_position=2&route=false"))
		require.Equal(t, 409, status)
		require.Equal(t, reasonBehind, body["reason"])
	})
	t.Run("active down: standby within the bound, then suspect", func(t *testing.T) {
		c.kill(0)
		status, body := getJSON(t, keyURL(b, k0, "staleness=lag:10"))
		require.Equal(t, 200, status)
		host, role := served(body)
		require.Equal(t, s.addr(), host)
		require.Equal(t, "standby", role)

		// The default bound has nobody left: 503 with the candidates.
		status, body = getJSON(t, keyURL(b, k0, ""))
		require.Equal(t, 503, status)
		require.Equal(t, reasonNotAvailable, body["reason"])
		tried := body["tried"].([]any)
		require.Len(t, tried, 1)
		require.Equal(t, a.addr(), tried[0].(map[string]any)["host"])
		require.Equal(t, reasonUnreachable, tried[0].(map[string]any)["reason"], "the dead host, suspect but the only candidate, is asked again")
		require.Contains(t, body["error"], "retry")
	})
	t.Run("all refused: 503 with every candidate", func(t *testing.T) {
		status, body := getJSON(t, keyURL(b, k0, "staleness=lag:0"))
		require.Equal(t, 503, status)
		require.Equal(t, reasonNotAvailable, body["reason"])
		require.EqualValues(t, 0, body["partition"])
		require.Equal(t, "lag:0", body["staleness"])
		tried := body["tried"].([]any)
		require.Len(t, tried, 2)
		require.Equal(t, reasonUnreachable, tried[0].(map[string]any)["reason"], "the suspect asked again")
		require.Equal(t, s.addr(), tried[1].(map[string]any)["host"])
		require.Equal(t, reasonTooStale, tried[1].(map[string]any)["reason"])
	})
	t.Run("a new assignment ends suspicion", func(t *testing.T) {
		// The routing table changes (partition 2's standby moves to the
		// dead host's old slot is irrelevant; any change will do).
		c.ins[1].b.remove(testStore, 2)
		c.publish()
		status, body := getJSON(t, keyURL(b, k0, ""))
		require.Equal(t, 503, status)
		tried := body["tried"].([]any)
		require.Equal(t, reasonUnreachable, tried[0].(map[string]any)["reason"], "asked again after the table changed")
	})
	t.Run("route=false never forwards", func(t *testing.T) {
		status, body := getJSON(t, keyURL(b, k0, "route=false&staleness=any"))
		require.Equal(t, 421, status)
		require.Equal(t, reasonNotHosted, body["reason"])
	})
}

func TestRoutedRange(t *testing.T) {
	noLeaks(t)
	c, reps := threeInstances(t, ServerConfig{})
	want := map[int32][]string{}
	for p := int32(0); p < 3; p++ {
		for j := 0; j < 3; j++ {
			k := keyIn(p, 3, fmt.Sprintf("r%d-", j))
			reps[[2]int{int(p), int(p)}].put(t, k, int64(p))
			want[p] = append(want[p], k)
		}
	}
	status, body := getBody(t, c.ins[1].http.URL+"/v1/stores/counts/range?route=true")
	require.Equal(t, 200, status, string(body))
	var wr wireRange
	require.NoError(t, json.Unmarshal(body, &wr))
	require.Empty(t, wr.Failed)
	require.Len(t, wr.Partitions, 3)
	for i, pr := range wr.Partitions {
		require.Equal(t, int32(i), pr.Partition)
		require.Equal(t, c.ins[i].addr(), pr.ServedBy.Host)
		require.Equal(t, RoleActive, pr.ServedBy.Role)
		var keys []string
		for _, e := range pr.Entries {
			var k string
			require.NoError(t, json.Unmarshal(e.Key, &k))
			keys = append(keys, k)
		}
		require.ElementsMatch(t, want[int32(i)], keys)
	}

	// With the active of partition 0 down, a bounded range reports it
	// failed and answers the rest; with lag allowed, its standby answers.
	c.kill(0)
	status, body = getBody(t, c.ins[1].http.URL+"/v1/stores/counts/range?route=true")
	require.Equal(t, 200, status)
	wr = wireRange{}
	require.NoError(t, json.Unmarshal(body, &wr))
	require.Len(t, wr.Partitions, 2)
	require.Len(t, wr.Failed, 1)
	require.Equal(t, int32(0), wr.Failed[0].Partition)
	require.Equal(t, reasonNotAvailable, wr.Failed[0].Reason)
	require.NotEmpty(t, wr.Failed[0].Tried)

	status, body = getBody(t, c.ins[1].http.URL+"/v1/stores/counts/range?route=true&staleness=any&partition=0")
	require.Equal(t, 200, status)
	wr = wireRange{}
	require.NoError(t, json.Unmarshal(body, &wr))
	require.Len(t, wr.Partitions, 1)
	require.Equal(t, c.ins[2].addr(), wr.Partitions[0].ServedBy.Host)
	require.Equal(t, RoleStandby, wr.Partitions[0].ServedBy.Role)
}

func TestSuspects(t *testing.T) {
	now := time.Unix(0, 0)
	s := newSuspects(time.Second)
	s.now = func() time.Time { return now }
	fp := func(v uint64) func() uint64 { return func() uint64 { return v } }
	require.False(t, s.suspect("a", fp(1)))
	s.mark("a", 1)
	require.True(t, s.suspect("a", fp(1)))
	require.False(t, s.suspect("b", fp(1)))
	now = now.Add(999 * time.Millisecond)
	require.True(t, s.suspect("a", fp(1)))
	now = now.Add(time.Millisecond)
	require.False(t, s.suspect("a", fp(1)), "suspicion expires")
	s.mark("a", 1)
	require.False(t, s.suspect("a", fp(2)), "a new routing table ends suspicion")
	require.False(t, s.suspect("a", fp(1)))

	m := Metadata{Hosts: []HostMetadata{{Host: "a", Active: []StorePartition{{"s", 0}}}}, Partitions: map[string]int32{"s": 1}}
	m2 := Metadata{Hosts: []HostMetadata{{Host: "a", Standby: []StorePartition{{"s", 0}}}}, Partitions: map[string]int32{"s": 1}}
	require.Equal(t, fingerprint(m), fingerprint(m))
	require.NotEqual(t, fingerprint(m), fingerprint(m2))
}

func TestRoutingAroundAHungHost(t *testing.T) {
	noLeaks(t)
	c, reps := threeInstances(t, ServerConfig{ForwardTimeout: 200 * time.Millisecond, SuspectFor: time.Minute})
	k0 := keyIn(0, 3, "k")
	reps[[2]int{0, 0}].put(t, k0, 5)
	reps[[2]int{2, 0}].put(t, k0, 5)
	c.ins[0].hang.Store(true)

	start := time.Now()
	status, body := getJSON(t, keyURL(c.ins[1], k0, "staleness=lag:100"))
	require.Equal(t, 200, status, "%v", body)
	require.Equal(t, c.ins[2].addr(), body["served_by"].(map[string]any)["host"])
	require.Less(t, time.Since(start), 5*time.Second)

	// Now suspect: the next lookup does not wait on the hung host at all.
	hits := c.ins[0].hits.Load()
	status, _ = getJSON(t, keyURL(c.ins[1], k0, "staleness=lag:100"))
	require.Equal(t, 200, status)
	require.Equal(t, hits, c.ins[0].hits.Load())
}

func TestCodecFor(t *testing.T) {
	c := CodecFor("n", serde.Int64, serde.String, nil)
	kb, err := c.EncodeKey("-42")
	require.NoError(t, err)
	k, err := c.DecodeKey(kb)
	require.NoError(t, err)
	require.Equal(t, int64(-42), k)
	_, err = c.EncodeKey("4x")
	require.Error(t, err)
	c32 := CodecFor("n", serde.Funcs[int32]{EncodeFn: func(v int32) ([]byte, error) { return []byte{byte(v)}, nil }}, serde.String, nil)
	_, err = c32.EncodeKey("99999999999")
	require.Error(t, err)
	cb := CodecFor("b", serde.Bytes, serde.String, nil)
	_, err = cb.EncodeKey("x")
	require.ErrorContains(t, err, "give CodecFor a parseKey")
	cp := CodecFor("b", serde.Bytes, serde.String, func(s string) ([]byte, error) { return []byte(s), nil })
	kb, err = cp.EncodeKey("x")
	require.NoError(t, err)
	require.Equal(t, []byte("x"), kb)
}

// A routed lookup whose partition nobody holds at the moment (a rebalance
// moving it: the table names nobody, or a host that does not host it yet)
// rereads the table and asks again for up to RebalanceWait instead of
// refusing at once; a replica refusing for staleness ends the wait.
func TestRoutingWaitsForAMovingPartition(t *testing.T) {
	noLeaks(t)
	k := keyIn(0, 1, "k")
	named := func(c *cluster, role Role) Metadata {
		hm := HostMetadata{Host: c.ins[1].addr()}
		if role == RoleStandby {
			hm.Standby = []StorePartition{{testStore, 0}}
		}
		m := Metadata{Partitions: map[string]int32{testStore: 1}, Hosts: []HostMetadata{{Host: c.ins[0].addr()}, hm}}
		for _, in := range c.ins {
			in.b.setMeta(m, nil)
		}
		return m
	}
	arrive := func(c *cluster, after time.Duration, publish bool) chan struct{} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			time.Sleep(after)
			c.ins[1].b.add(testStore, 0, RoleStandby).put(t, k, 7)
			if publish {
				named(c, RoleStandby)
			}
		}()
		return done
	}
	for _, tc := range []struct {
		name    string
		tabled  bool // the table names instance 1 before its replica is open
		publish bool
	}{
		{name: "table names a host still opening the replica", tabled: true},
		{name: "table names nobody until the next one", publish: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 2, 1, ServerConfig{ForwardTimeout: time.Second, RebalanceWait: 10 * time.Second})
			if tc.tabled {
				named(c, RoleStandby)
			} else {
				named(c, 0)
			}
			done := arrive(c, 100*time.Millisecond, tc.publish)
			status, body := getJSON(t, keyURL(c.ins[0], k, "staleness=lag:10"))
			<-done
			require.Equal(t, 200, status, "body: %v", body)
			require.EqualValues(t, 7, body["value"])
			require.Equal(t, c.ins[1].addr(), body["served_by"].(map[string]any)["host"])
		})
	}
	t.Run("a stale replica is refused at once", func(t *testing.T) {
		c := newCluster(t, 2, 1, ServerConfig{ForwardTimeout: time.Second, RebalanceWait: 10 * time.Second})
		rep := c.ins[1].b.add(testStore, 0, RoleStandby)
		rep.put(t, k, 7)
		rep.set(func(i *ReplicaInfo) { i.End = 100 })
		named(c, RoleStandby)
		hits := c.ins[1].hits.Load()
		status, body := getJSON(t, keyURL(c.ins[0], k, "staleness=lag:10"))
		require.Equal(t, 503, status, "body: %v", body)
		require.Equal(t, "not_available", body["reason"])
		require.Equal(t, hits+1, c.ins[1].hits.Load(), "the stale replica was asked again")
	})
}

// panickyStore panics when iterated, as badger does when a read reaches a
// table block damaged on disk after the store was opened.
type panickyStore struct{ statestore.Store }

func (panickyStore) Range(from, to []byte) (statestore.Iterator, error) {
	panic("runtime error: slice bounds out of range [105:62]")
}

// A partition whose store panics while a range is read fails that
// partition of the answer; the others are answered and the process lives
// (the partitions are read on goroutines of the server's own, where a
// panic is nobody's to recover).
func TestRangePartitionPanicFailsThatPartition(t *testing.T) {
	b := newFakeBackend("self:1", map[string]int32{testStore: 3})
	for p := int32(0); p < 3; p++ {
		r := b.add(testStore, p, RoleActive)
		r.put(t, keyIn(p, 3, "k"), int64(p))
	}
	b.replicas[StorePartition{testStore, 1}].store = panickyStore{statestore.NewMemory()}
	b.setMeta(Metadata{Hosts: []HostMetadata{{Host: "self:1", Active: []StorePartition{{testStore, 0}, {testStore, 1}, {testStore, 2}}}},
		Partitions: map[string]int32{testStore: 3}}, nil)
	srv := NewServer(b, ServerConfig{}, countsCodec())
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()
	status, body := getBody(t, hs.URL+"/v1/stores/counts/range?route=true")
	require.Equal(t, 200, status, string(body))
	var wr wireRange
	require.NoError(t, json.Unmarshal(body, &wr))
	require.Len(t, wr.Partitions, 2)
	require.Len(t, wr.Failed, 1)
	require.Equal(t, int32(1), wr.Failed[0].Partition)
	require.Contains(t, wr.Failed[0].Error, "panicked")
}

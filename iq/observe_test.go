package iq

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
)

// observed records what one server's Observe hook saw.
type observed struct {
	mu sync.Mutex
	qs []KeyQuery
}

func (o *observed) add(q KeyQuery) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.qs = append(o.qs, q)
}

// take returns what was observed since the last take.
func (o *observed) take() []KeyQuery {
	o.mu.Lock()
	defer o.mu.Unlock()
	qs := o.qs
	o.qs = nil
	return qs
}

// observedCluster is threeInstances with an Observe hook on every server.
func observedCluster(t *testing.T) (*cluster, map[[2]int]*fakeReplica, []*observed) {
	c, reps := threeInstances(t, ServerConfig{ForwardTimeout: time.Second, SuspectFor: time.Minute})
	obs := make([]*observed, len(c.ins))
	for i, in := range c.ins {
		o := &observed{}
		obs[i] = o
		// No request has reached the servers yet, so they can be swapped.
		in.srv.Close()
		in.srv = NewServer(in.b, ServerConfig{ForwardTimeout: time.Second, SuspectFor: time.Minute, Observe: o.add},
			countsCodec(), CodecFor("ints", serde.Int64, serde.Int64, nil))
	}
	return c, reps, obs
}

func TestObserveKeyQueries(t *testing.T) {
	noLeaks(t)
	c, reps, obs := observedCluster(t)
	k0 := keyIn(0, 3, "k")
	reps[[2]int{0, 0}].put(t, k0, 5)
	reps[[2]int{2, 0}].put(t, k0, 5)
	a, b, s := c.ins[0], c.ins[1], c.ins[2] // active, no replica, standby of partition 0
	absent := keyIn(0, 3, "absent")

	// want is what one server observed for one request.
	type want struct {
		reason    string // "" for an answer
		host      string // ServedBy.Host of an answer
		role      Role
		found     bool
		forwarded bool
	}
	answered := func(host string, role Role, found, forwarded bool) []want {
		return []want{{host: host, role: role, found: found, forwarded: forwarded}}
	}
	refused := func(reason string) []want { return []want{{reason: reason}} }

	tests := []struct {
		name   string
		url    string
		status int
		// per instance (a, b, s): what each observed
		want [3][]want
	}{
		{name: "local active answer", url: keyURL(a, k0, ""), status: 200,
			want: [3][]want{answered(a.addr(), RoleActive, true, false), nil, nil}},
		{name: "local absent key", url: keyURL(a, absent, ""), status: 404,
			want: [3][]want{answered(a.addr(), RoleActive, false, false), nil, nil}},
		{name: "local standby within the bound", url: keyURL(s, k0, "staleness=lag:5"), status: 200,
			want: [3][]want{nil, nil, answered(s.addr(), RoleStandby, true, false)}},
		{name: "forwarded: both servers observe, only the router marks it",
			url: keyURL(b, k0, ""), status: 200,
			want: [3][]want{answered(a.addr(), RoleActive, true, false), answered(a.addr(), RoleActive, true, true), nil}},
		{name: "forwarded absent key", url: keyURL(b, absent, ""), status: 404,
			want: [3][]want{answered(a.addr(), RoleActive, false, false), answered(a.addr(), RoleActive, false, true), nil}},
		{name: "not hosted without routing", url: keyURL(b, k0, "route=false"), status: 421,
			want: [3][]want{nil, refused(reasonNotHosted), nil}},
		{name: "too stale without routing", url: keyURL(s, k0, "route=false"), status: 503,
			want: [3][]want{nil, nil, refused(reasonTooStale)}},
		{name: "invalid staleness", url: keyURL(a, k0, "staleness=soon"), status: 400,
			want: [3][]want{refused(reasonInvalid), nil, nil}},
		{name: "unknown store", url: a.http.URL + "/v1/stores/nope/keys/x", status: 404,
			want: [3][]want{refused(reasonUnknownStore), nil, nil}},
		{name: "malformed key", url: a.http.URL + "/v1/stores/ints/keys/x", status: 400,
			want: [3][]want{refused(reasonInvalid), nil, nil}},
		{name: "min_position nobody reached: refusals everywhere",
			url: keyURL(s, k0, "staleness=any&min_position=9"), status: 503,
			want: [3][]want{refused(reasonBehind), nil, refused(reasonNotAvailable)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := getJSON(t, tt.url)
			require.Equal(t, tt.status, status, "%v", body)
			// Observe runs before the answer is written, so it is
			// complete by now.
			for i, o := range obs {
				got := o.take()
				require.Len(t, got, len(tt.want[i]), "instance %d observed %+v", i, got)
				for j, w := range tt.want[i] {
					q := got[j]
					require.NotEmpty(t, q.Store)
					require.Equal(t, w.reason, q.Reason, "instance %d", i)
					if w.reason != "" {
						require.Error(t, q.Err)
						require.Equal(t, Provenance{}, q.ServedBy)
						require.False(t, q.Found)
						continue
					}
					require.NoError(t, q.Err)
					require.Equal(t, w.host, q.ServedBy.Host, "instance %d", i)
					require.Equal(t, w.role, q.ServedBy.Role, "instance %d", i)
					require.Equal(t, int32(0), q.ServedBy.Partition)
					require.Equal(t, w.found, q.Found, "instance %d", i)
					require.Equal(t, w.forwarded, q.Forwarded, "instance %d", i)
				}
			}
		})
	}

	t.Run("store name is reported", func(t *testing.T) {
		getJSON(t, a.http.URL+"/v1/stores/nope/keys/x")
		require.Equal(t, "nope", obs[0].take()[0].Store)
		getJSON(t, keyURL(a, k0, ""))
		require.Equal(t, testStore, obs[0].take()[0].Store)
	})
	t.Run("ranges and metadata are not observed", func(t *testing.T) {
		for _, u := range []string{"/v1/stores/counts/range?route=true", "/v1/metadata", "/v1/lags", "/healthz",
			"/v1/metadata/stores/counts/keys/" + k0} {
			getBody(t, b.http.URL+u)
		}
		for i, o := range obs {
			require.Empty(t, o.take(), "instance %d", i)
		}
	})
}

// TestObserveNil checks that a server without a hook answers as before.
func TestObserveNil(t *testing.T) {
	noLeaks(t)
	c, reps := threeInstances(t, ServerConfig{})
	k0 := keyIn(0, 3, "k")
	reps[[2]int{0, 0}].put(t, k0, 5)
	status, body := getJSON(t, keyURL(c.ins[1], k0, ""))
	require.Equal(t, 200, status, "%v", body)
	status, _ = getJSON(t, keyURL(c.ins[1], k0, "route=false"))
	require.Equal(t, 421, status)
}

// requests records what one server's ObserveRequest hook saw.
type requests struct {
	mu sync.Mutex
	rs []Request
}

func (o *requests) add(r Request) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rs = append(o.rs, r)
}

func (o *requests) take() []Request {
	o.mu.Lock()
	defer o.mu.Unlock()
	rs := o.rs
	o.rs = nil
	return rs
}

// TestObserveRequests: every request is reported once, with its kind of
// endpoint, the role that answered a key lookup and the outcome, on the
// server that answered it and on the one that forwarded it.
func TestObserveRequests(t *testing.T) {
	noLeaks(t)
	c, reps := threeInstances(t, ServerConfig{ForwardTimeout: time.Second, SuspectFor: time.Minute})
	obs := make([]*requests, len(c.ins))
	for i, in := range c.ins {
		obs[i] = &requests{}
		in.srv.Close()
		in.srv = NewServer(in.b, ServerConfig{ForwardTimeout: time.Second, SuspectFor: time.Minute, ObserveRequest: obs[i].add},
			countsCodec(), CodecFor("ints", serde.Int64, serde.Int64, nil))
	}
	k0 := keyIn(0, 3, "k")
	reps[[2]int{0, 0}].put(t, k0, 5)
	reps[[2]int{2, 0}].put(t, k0, 5)
	a, b, s := c.ins[0], c.ins[1], c.ins[2] // active, no replica, standby of partition 0

	type want struct {
		endpoint, outcome string
		role              Role
	}
	tests := []struct {
		name string
		url  string
		want [3][]want
	}{
		{"local active", keyURL(a, k0, ""), [3][]want{{{EndpointKey, OutcomeOK, RoleActive}}, nil, nil}},
		{"absent key", keyURL(a, keyIn(0, 3, "absent"), ""), [3][]want{{{EndpointKey, OutcomeOK, RoleActive}}, nil, nil}},
		{"key in the query string", a.http.URL + "/v1/stores/" + testStore + "/keys?key=" + k0, [3][]want{{{EndpointKey, OutcomeOK, RoleActive}}, nil, nil}},
		{"standby", keyURL(s, k0, "staleness=any&route=false"), [3][]want{nil, nil, {{EndpointKey, OutcomeOK, RoleStandby}}}},
		{"forwarded", keyURL(b, k0, ""), [3][]want{{{EndpointKey, OutcomeOK, RoleActive}}, {{EndpointKey, OutcomeOK, RoleActive}}, nil}},
		{"refused", keyURL(b, k0, "route=false"), [3][]want{nil, {{EndpointKey, reasonNotHosted, 0}}, nil}},
		{"unknown store", a.http.URL + "/v1/stores/nope/keys/x", [3][]want{{{EndpointKey, reasonUnknownStore, 0}}, nil, nil}},
		{"range", a.http.URL + "/v1/stores/" + testStore + "/range?route=false", [3][]want{{{EndpointRange, OutcomeOK, 0}}, nil, nil}},
		{"metadata", a.http.URL + "/v1/metadata", [3][]want{{{EndpointMetadata, OutcomeOK, 0}}, nil, nil}},
		{"key metadata", a.http.URL + "/v1/metadata/stores/" + testStore + "/keys/" + k0, [3][]want{{{EndpointMetadata, OutcomeOK, 0}}, nil, nil}},
		{"lags", a.http.URL + "/v1/lags", [3][]want{{{EndpointLags, OutcomeOK, 0}}, nil, nil}},
		{"tasks, of a backend that lists none", a.http.URL + "/v1/tasks", [3][]want{{{EndpointTasks, reasonInvalid, 0}}, nil, nil}},
		{"health", a.http.URL + "/healthz", [3][]want{{{EndpointHealth, OutcomeOK, 0}}, nil, nil}},
		{"no endpoint", a.http.URL + "/v2/x", [3][]want{{{EndpointOther, reasonInvalid, 0}}, nil, nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getBody(t, tt.url)
			for i, o := range obs {
				got := o.take()
				require.Len(t, got, len(tt.want[i]), "instance %d observed %+v", i, got)
				for j, w := range tt.want[i] {
					require.Equal(t, w.endpoint, got[j].Endpoint, "instance %d", i)
					require.Equal(t, w.outcome, got[j].Outcome, "instance %d", i)
					require.Equal(t, w.role, got[j].Role, "instance %d", i)
					require.Positive(t, got[j].Elapsed, "instance %d", i)
				}
			}
		})
	}
}

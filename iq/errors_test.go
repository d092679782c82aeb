package iq

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// speaksGo fails if an in-process error speaks the HTTP API's language:
// status codes, URL parameters or paths belong to the HTTP layer.
func speaksGo(t *testing.T, err error) {
	t.Helper()
	for _, http := range []string{"HTTP", "route=", "/v1/", "staleness=", "min_position", "Retry-After", "prefer="} {
		require.NotContains(t, err.Error(), http, "an in-process error speaks HTTP")
	}
}

// issue 12, test 4: the in-process Querier and the HTTP Client report the
// same conditions with the same sentinels and typed errors, so a caller
// branches on errors.Is and errors.As alike whichever it uses.
func TestQuerierAndClientErrorsMatch(t *testing.T) {
	noLeaks(t)
	// One partition: instance 0 holds its active, instance 1 a standby
	// five records behind.
	c := newCluster(t, 2, 1, ServerConfig{})
	active := c.ins[0].b.add(testStore, 0, RoleActive)
	for i := range 3 {
		active.put(t, "k", int64(i))
	}
	standby := c.ins[1].b.add(testStore, 0, RoleStandby)
	standby.set(func(i *ReplicaInfo) {
		i.Position, i.End, i.LagConfirmedAgo, i.CaughtUpAgo, i.InputCommittedAgo = 3, 8, 0, time.Hour, 0
	})
	c.publish()
	q0, q1 := NewQuerier(c.ins[0].b), NewQuerier(c.ins[1].b)
	ctx := context.Background()
	newClient := func() *Client {
		cl, err := NewClient([]string{c.ins[1].addr()}, ClientOptions{BehindWait: 50 * time.Millisecond, DisableMonotonic: true})
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		return cl
	}
	cl := newClient()
	key := []byte("k")

	t.Run("unknown store", func(t *testing.T) {
		_, qerr := q1.GetBytes(ctx, "nope", key)
		_, cerr := cl.Get(ctx, "nope", "k", key)
		for _, err := range []error{qerr, cerr} {
			require.ErrorIs(t, err, ErrUnknownStore)
			require.NotErrorIs(t, err, ErrNotAvailable)
		}
		speaksGo(t, qerr)
	})

	t.Run("invalid query", func(t *testing.T) {
		_, qerr := q0.GetBytes(ctx, testStore, key, WithMinPosition(-1))
		_, cerr := cl.Get(ctx, testStore, "k", key, WithMinPosition(-1))
		for _, err := range []error{qerr, cerr} {
			require.ErrorIs(t, err, ErrInvalidQuery)
		}
		speaksGo(t, qerr)
	})

	t.Run("too stale", func(t *testing.T) {
		// The active is moving, so the client falls back to the standby,
		// which is outside the bound.
		c.ins[0].b.mu.Lock()
		c.ins[0].b.replicaErr = ErrRebalancing
		c.ins[0].b.mu.Unlock()
		defer func() {
			c.ins[0].b.mu.Lock()
			c.ins[0].b.replicaErr = nil
			c.ins[0].b.mu.Unlock()
		}()
		bound := MaxLag(1)
		_, qerr := q1.GetBytes(ctx, testStore, key, WithStaleness(bound))
		_, cerr := cl.Get(ctx, testStore, "k", key, WithStaleness(bound))
		var qse, cse *StaleError
		require.ErrorAs(t, qerr, &qse)
		require.ErrorAs(t, cerr, &cse)
		for _, se := range []*StaleError{qse, cse} {
			require.Equal(t, testStore, se.Store)
			require.EqualValues(t, 0, se.Partition)
			require.Equal(t, c.ins[1].addr(), se.Host)
			require.Equal(t, RoleStandby, se.Role)
			require.EqualValues(t, 3, se.Position)
			require.EqualValues(t, 5, se.Lag)
			require.Equal(t, bound.String(), se.Bound.String())
		}
		require.ErrorIs(t, qerr, ErrTooStale)
		require.ErrorIs(t, cerr, ErrTooStale)
		// The client says more: no replica could answer, and the active
		// was moving.
		var ue *UnavailableError
		require.ErrorAs(t, cerr, &ue)
		require.ErrorIs(t, cerr, ErrNotAvailable)
		require.ErrorIs(t, cerr, ErrRebalancing)
		require.Equal(t, 503, StatusFor(cerr), "routed, the refusals add up to no replica available")
		speaksGo(t, qerr)
	})

	t.Run("rebalancing", func(t *testing.T) {
		c.ins[0].b.mu.Lock()
		c.ins[0].b.replicaErr = ErrRebalancing
		c.ins[0].b.mu.Unlock()
		defer func() {
			c.ins[0].b.mu.Lock()
			c.ins[0].b.replicaErr = nil
			c.ins[0].b.mu.Unlock()
		}()
		_, qerr := q0.GetBytes(ctx, testStore, key)
		_, cerr := cl.Get(ctx, testStore, "k", key)
		for _, err := range []error{qerr, cerr} {
			require.ErrorIs(t, err, ErrRebalancing)
			require.NotErrorIs(t, err, ErrNotRunning)
		}
		speaksGo(t, qerr)
	})

	t.Run("behind", func(t *testing.T) {
		_, qerr := q0.GetBytes(ctx, testStore, key, WithMinPosition(100))
		_, cerr := cl.Get(ctx, testStore, "k", key, WithMinPosition(100))
		var qbe, cbe *BehindError
		require.ErrorAs(t, qerr, &qbe)
		require.ErrorAs(t, cerr, &cbe)
		for _, be := range []*BehindError{qbe, cbe} {
			require.Equal(t, c.ins[0].addr(), be.Host)
			require.Equal(t, RoleActive, be.Role)
			require.EqualValues(t, 3, be.Position)
			require.EqualValues(t, 100, be.MinPosition)
		}
		require.ErrorIs(t, qerr, ErrBehind)
		require.ErrorIs(t, cerr, ErrBehind)
		speaksGo(t, qerr)
	})

	t.Run("not hosted here", func(t *testing.T) {
		// Only the Querier can meet it: a Client routes to a host that
		// holds the partition. An answer without a reason (a proxy's)
		// still maps back to the sentinel.
		q := NewQuerier(newFakeBackend("elsewhere:1", map[string]int32{testStore: 1}))
		_, qerr := q.GetBytes(ctx, testStore, key)
		require.ErrorIs(t, qerr, ErrNotHostedHere)
		speaksGo(t, qerr)
		require.ErrorIs(t, decodeErrorAnswer(421, []byte("<html>misdirected</html>")), ErrNotHostedHere)
		require.ErrorIs(t, decodeErrorAnswer(503, nil), ErrNotAvailable)
		require.NotErrorIs(t, decodeErrorAnswer(404, []byte("404 page not found")), ErrUnknownStore,
			"a bare 404 is any web server's answer, not an unknown store")
	})

	// Last: no instance has an assignment any more.
	t.Run("not started", func(t *testing.T) {
		for _, in := range c.ins {
			in.b.setMeta(Metadata{}, ErrNotStarted)
			in.b.mu.Lock()
			in.b.replicaErr = ErrNotStarted
			in.b.mu.Unlock()
		}
		_, qerr := q1.GetBytes(ctx, testStore, key)
		_, cerr := newClient().Get(ctx, testStore, "k", key)
		for _, err := range []error{qerr, cerr} {
			require.ErrorIs(t, err, ErrNotStarted)
			require.ErrorIs(t, err, ErrNotRunning)
		}
		speaksGo(t, qerr)
	})
}

// The HTTP layer adds what to do next in HTTP terms to the Go errors' own
// messages; the reasons and statuses are the wire format's, and the Client
// maps them back to the same sentinels.
func TestHTTPHints(t *testing.T) {
	for _, tc := range []struct {
		err    error
		is     error
		status int
		hint   string
	}{
		{ErrNotHostedHere, ErrNotHostedHere, 421, "route=true"},
		{&StaleError{Bound: MaxLag(1)}, ErrTooStale, 503, "staleness=any"},
		{&BehindError{MinPosition: 9}, ErrBehind, 409, "min_position 9"},
		{ErrOverloaded, ErrOverloaded, 429, "Retry-After"},
		{ErrUnknownStore, ErrUnknownStore, 404, "/v1/metadata"},
	} {
		status, w := toWireError(tc.err)
		require.Equal(t, tc.status, status)
		require.True(t, strings.HasPrefix(w.Error, tc.err.Error()), "the wire error starts with the Go error: %q", w.Error)
		require.Contains(t, w.Error, tc.hint)
		require.NotContains(t, tc.err.Error(), tc.hint)
		require.ErrorIs(t, fromWireError(status, w), tc.is)
	}
}

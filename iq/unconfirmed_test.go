package iq

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/serde"
)

// justRestarted is a one-partition cluster of two instances right after
// instance 1 restarted: instance 0 holds the running active (w=100 at
// 3000); instance 1 a standby reopened from its state directory at 2990
// (w=99) whose changelog end the broker has not confirmed yet, so its lag
// is unknown, and it routes on its own share of the new balance, a table
// naming only itself. complete is the group's table, which instance 0
// already routes on.
func justRestarted(t *testing.T, cfg ServerConfig) (c *cluster, active, standby *fakeReplica, complete Metadata) {
	c = newCluster(t, 2, 1, cfg)
	active = c.ins[0].b.add(testStore, 0, RoleActive)
	standby = c.ins[1].b.add(testStore, 0, RoleStandby)
	active.put(t, "w", 100)
	standby.put(t, "w", 99)
	active.set(func(i *ReplicaInfo) { i.Position, i.End = 3000, 3000 })
	standby.set(func(i *ReplicaInfo) {
		i.Position, i.End, i.LagConfirmedAgo, i.CaughtUpAgo = 2990, 2990, Unknown, Unknown
	})
	complete = c.publish()
	c.ins[1].b.setMeta(Metadata{Partitions: complete.Partitions,
		Hosts: []HostMetadata{{Host: c.ins[1].addr(), Standby: []StorePartition{{testStore, 0}}}}}, nil)
	return c, active, standby, complete
}

// describedAfter hands in the complete table once rep has described
// itself n times (the instance has read the group's table by then), and
// stops waiting when the test ends.
func describedAfter(t *testing.T, in *fakeInstance, rep *fakeReplica, n int, complete Metadata) {
	asked := make(chan struct{})
	var once sync.Once
	rep.mu.Lock()
	base := rep.calls
	rep.onInfo = func(calls int, _ *ReplicaInfo) {
		if calls-base >= n {
			once.Do(func() { close(asked) })
		}
	}
	rep.mu.Unlock()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-asked:
			in.b.setMeta(complete, nil)
		case <-done:
		}
	})
	t.Cleanup(func() { close(done); wg.Wait() })
}

// A standby whose lag the broker has not confirmed since it reopened
// refuses a lag bound, honestly; the instance asked through it does not
// refuse the query on that alone but asks the partition's other replicas,
// which its table names once it has read the group's, and serves the
// active's answer, which says it came from the active. When every replica
// refuses, the refusal names what each said.
func TestRoutingAsksOthersWhenTheLocalLagIsUnconfirmed(t *testing.T) {
	noLeaks(t)
	cfg := ServerConfig{RebalanceWait: 10 * time.Second, SuspectFor: time.Minute}

	t.Run("the active answers", func(t *testing.T) {
		c, _, standby, complete := justRestarted(t, cfg)
		// The second look at the standby is a router's that did not
		// refuse at the first.
		describedAfter(t, c.ins[1], standby, 2, complete)
		status, body := getJSON(t, keyURL(c.ins[1], "w", "staleness=lag:10000"))
		require.Equal(t, 200, status, "%v", body)
		host, role := servedBody(t, body)
		require.Equal(t, c.ins[0].addr(), host)
		require.Equal(t, "active", role)
		require.EqualValues(t, 0, body["served_by"].(map[string]any)["lag"])
		require.EqualValues(t, 100, body["value"])
	})

	t.Run("every replica refuses", func(t *testing.T) {
		c, active, standby, complete := justRestarted(t, cfg)
		// The active, restoring, knows itself 50,000 records behind.
		active.set(func(i *ReplicaInfo) { i.Role, i.End = RoleRestoring, 53000 })
		describedAfter(t, c.ins[1], standby, 2, complete)
		status, body := getJSON(t, keyURL(c.ins[1], "w", "staleness=lag:10000"))
		require.Equal(t, 503, status, "%v", body)
		require.Equal(t, reasonNotAvailable, body["reason"])
		said := map[string]string{}
		for _, a := range body["tried"].([]any) {
			a := a.(map[string]any)
			said[a["host"].(string)] = a["error"].(string)
			require.Equal(t, reasonTooStale, a["reason"], "%v", a)
		}
		require.Len(t, said, 2, "%v", body)
		require.Contains(t, said[c.ins[1].addr()], "the broker never confirmed its changelog's end")
		require.Contains(t, said[c.ins[0].addr()], "its lag 50000 exceeds 10000")
	})
}

// The Client behaves alike: given an instance whose table is its own share
// of a new balance, it is refused by the only replica that table names,
// whose lag is unconfirmed, and rather than refuse it reads the table again
// and asks the replicas the group's names.
func TestClientAsksOthersWhenALagIsUnconfirmed(t *testing.T) {
	noLeaks(t)
	cfg := ServerConfig{SuspectFor: time.Minute}
	opts := ClientOptions{DisableMonotonic: true, RebalanceWait: 10 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	t.Run("the active answers", func(t *testing.T) {
		c, _, standby, complete := justRestarted(t, cfg)
		describedAfter(t, c.ins[1], standby, 1, complete)
		cl, err := NewClient([]string{c.ins[1].addr()}, opts)
		require.NoError(t, err)
		defer cl.Close()
		res, err := ClientGet[string, int64](ctx, cl, testStore, "w", serde.String, WithStaleness(MaxLag(10000)))
		require.NoError(t, err)
		require.Equal(t, int64(100), res.Value)
		require.Equal(t, c.ins[0].addr(), res.Provenance.Host)
		require.Equal(t, RoleActive, res.Provenance.Role)
		require.Equal(t, int64(0), res.Provenance.Lag)
	})

	t.Run("every replica refuses", func(t *testing.T) {
		c, active, standby, complete := justRestarted(t, cfg)
		active.set(func(i *ReplicaInfo) { i.Role, i.End = RoleRestoring, 53000 })
		describedAfter(t, c.ins[1], standby, 1, complete)
		cl, err := NewClient([]string{c.ins[1].addr()}, opts)
		require.NoError(t, err)
		defer cl.Close()
		_, err = ClientGet[string, int64](ctx, cl, testStore, "w", serde.String, WithStaleness(MaxLag(10000)))
		var ue *UnavailableError
		require.ErrorAs(t, err, &ue)
		said := map[string]*StaleError{}
		for _, a := range ue.Tried {
			var se *StaleError
			require.True(t, errors.As(a.Err, &se), "%s: %v", a.Host, a.Err)
			said[a.Host] = se
		}
		require.Len(t, said, 2, "%v", err)
		require.Equal(t, int64(-1), said[c.ins[1].addr()].Lag)
		require.Equal(t, RoleStandby, said[c.ins[1].addr()].Role)
		require.Equal(t, int64(50000), said[c.ins[0].addr()].Lag)
		require.Equal(t, RoleRestoring, said[c.ins[0].addr()].Role)
	})
}

// Only a replica not yet confirmed since it opened, or whose confirmation
// lapsed a moment ago, keeps a router waiting: one whose confirmations
// stopped (cut off from the broker), or rebuilding, refuses for good, and a
// refusal of the active bound says nothing about the lag.
func TestLagUnconfirmedForNow(t *testing.T) {
	lag := MaxLag(10)
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"standby never confirmed", &StaleError{Role: RoleStandby, Lag: -1, LagConfirmedAgo: Unknown, Bound: lag}, true},
		{"restoring never confirmed, age bound", &StaleError{Role: RoleRestoring, Lag: -1, LagConfirmedAgo: Unknown, SinceCaughtUp: Unknown, Bound: MaxAge(time.Second)}, true},
		{"confirmation a moment late", &StaleError{Role: RoleStandby, Lag: -1, LagConfirmedAgo: 3100 * time.Millisecond, Bound: lag}, true},
		{"confirmations stopped", &StaleError{Role: RoleStandby, Lag: -1, LagConfirmedAgo: 10 * time.Second, Bound: lag}, false},
		{"known lag beyond the bound", &StaleError{Role: RoleStandby, Lag: 50, LagConfirmedAgo: time.Second, Bound: lag}, false},
		{"rebuilding", &StaleError{Role: RoleStandby, Lag: -1, Position: -1, Rebuilding: true, LagConfirmedAgo: Unknown, Bound: lag}, false},
		{"unconfirmed active", &StaleError{Role: RoleUnconfirmed, Lag: -1, LagConfirmedAgo: Unknown, Bound: lag}, false},
		{"active bound", &StaleError{Role: RoleStandby, Lag: -1, LagConfirmedAgo: Unknown, Bound: ActiveOnly()}, false},
		{"not a staleness refusal", ErrRebalancing, false},
	} {
		require.Equal(t, tc.want, lagUnconfirmedForNow(tc.err), tc.name)
	}
}

// A standby whose last confirmation of its changelog's end is a moment past
// its window (a listing running late on a loaded machine) refuses a lag
// bound, honestly; the active is gone (killed, not yet noticed by the
// group). The instance asked does not refuse at once: it asks again, and
// serves the standby's answer once its confirmation came.
func TestRoutingWaitsForALateConfirmation(t *testing.T) {
	noLeaks(t)
	cfg := ServerConfig{RebalanceWait: 10 * time.Second, SuspectFor: time.Minute}
	c := newCluster(t, 2, 1, cfg)
	active := c.ins[0].b.add(testStore, 0, RoleActive)
	standby := c.ins[1].b.add(testStore, 0, RoleStandby)
	active.put(t, "w", 100)
	standby.put(t, "w", 100)
	active.set(func(i *ReplicaInfo) { i.Position, i.End = 3000, 3000 })
	standby.set(func(i *ReplicaInfo) { i.Position, i.End = 3000, 3000 })
	c.publish()
	c.kill(0)
	// The standby's lag is unknown, its last confirmation past its
	// window, until it has described itself a few times: by then it has
	// refused once.
	standby.mu.Lock()
	standby.onInfo = func(calls int, i *ReplicaInfo) {
		i.Lag, i.LagConfirmedAgo = -1, 3100*time.Millisecond
		if calls > 3 {
			i.Lag, i.LagConfirmedAgo = 0, 10*time.Millisecond
		}
	}
	standby.mu.Unlock()
	status, body := getJSON(t, keyURL(c.ins[1], "w", "staleness=lag:10000"))
	require.Equal(t, 200, status, "%v", body)
	host, role := servedBody(t, body)
	require.Equal(t, c.ins[1].addr(), host)
	require.Equal(t, "standby", role)
	require.EqualValues(t, 100, body["value"])
}

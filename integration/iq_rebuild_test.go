package integration

// Queries of replicas that hold no consistent snapshot: a store rebuilt
// from its changelog, and a partition whose replicas were all lost.

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
)

// TestIQRebuildingReplicaAnswersOnlyAny restarts an instance on a wiped
// state directory and holds its restoration back: the rebuilding replica is
// no snapshot of any changelog offset until it reaches the end it began
// with, so it has no position and no lag to vouch for, refuses every
// bounded query, however loose, and answers staleness any as restoring and
// rebuilding.
func TestIQRebuildingReplicaAnswersOnlyAny(t *testing.T) {
	const acceptable = 50
	c := newCluster(t, 2)
	dir := t.TempDir()
	cfg := instanceConfig{stateDir: dir, acceptableLag: acceptable}
	first := c.startIQNode(t, "run1", cfg)
	want := make(map[string]int64)
	c.produceLines(t, newCorpus(24, 400).Lines(4000, want))
	c.waitCaughtUp(t, "wc")
	requireStore(t, want, first.instance)
	first.close(t)

	cl := changelogTopic("wc")
	ends := c.endOffsets(t, cl)[cl]
	const p = int32(1)
	require.Greater(t, ends[p], int64(acceptable), "changelog partition %d must outgrow the acceptable lag", p)
	require.NoError(t, os.RemoveAll(dir))

	gate := c.iqCloseGate(t, p)
	n := c.startIQNode(t, "run2", cfg)
	iqWaitReplica(t, n, p, settleTimeout, fmt.Sprintf("rebuilding towards %d", ends[p]), func(ri iq.ReplicaInfo) bool {
		return ri.Role == iq.RoleRestoring && ri.Rebuilding && ri.Position == -1 && ri.Lag == -1 && ri.End == ends[p]
	})
	// The other partition restores unhindered.
	iqWaitReplica(t, n, 1-p, settleTimeout, "running active", func(ri iq.ReplicaInfo) bool { return ri.Role == iq.RoleActive })

	hc := newIQHTTP(t)
	for _, w := range iqWordsIn(want, c.partitions, p, 3) {
		for _, bound := range []iq.Staleness{iq.ActiveOnly(), iq.MaxLag(acceptable), iq.MaxLag(ends[p]), iq.MaxLag(1 << 40), iq.MaxAge(time.Hour)} {
			_, err := n.get(w, iq.WithStaleness(bound))
			var se *iq.StaleError
			require.ErrorAs(t, err, &se, "%q staleness %s", w, bound)
			require.Equal(t, iq.RoleRestoring, se.Role)
			require.EqualValues(t, -1, se.Lag)
			require.EqualValues(t, -1, se.Position)
			require.True(t, se.Rebuilding)
			if bound.AllowsNonActive() {
				require.Contains(t, err.Error(), "rebuilding", "%q staleness %s", w, bound)
			}
		}
		res, err := n.get(w, iq.WithStaleness(iq.AnyStaleness()))
		require.NoError(t, err, w)
		require.False(t, res.Found, "%q read from a replica that has restored nothing", w)
		require.Equal(t, iq.Provenance{Host: n.addr, Partition: p, Role: iq.RoleRestoring, Position: -1, Lag: -1, Rebuilding: true}, stable(res.Provenance))

		a, err := hc.key(n.addr, w, "staleness", "lag:"+strconv.FormatInt(ends[p], 10))
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, a.Status, a.String())
		a, err = hc.key(n.addr, w, "route", "false", "staleness", "lag:"+strconv.FormatInt(ends[p], 10))
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, a.Status, a.String())
		require.Equal(t, "too_stale", a.Reason)
		require.Nil(t, a.Lag, "a rebuilding replica has no lag to vouch for: %s", a.String())
		require.Equal(t, "restoring", *a.Role)
		a, err = hc.key(n.addr, w, "staleness", "any")
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, a.Status, a.String())
		require.Equal(t, "restoring", a.ServedBy.Role)
		require.True(t, a.ServedBy.Rebuilding, a.String())
		require.Nil(t, a.ServedBy.Lag, a.String())
		require.Nil(t, a.ServedBy.Position, a.String())
	}

	gate.open()
	iqWaitReplica(t, n, p, settleTimeout, "running active", func(ri iq.ReplicaInfo) bool { return ri.Role == iq.RoleActive })
	requireStore(t, want, n.instance)
	for _, w := range iqWordsIn(want, c.partitions, p, 3) {
		res, err := n.get(w)
		require.NoError(t, err, w)
		require.Equal(t, want[w], res.Value, w)
		require.Equal(t, iq.Provenance{Host: n.addr, Partition: p, Role: iq.RoleActive, Position: ends[p]}, stable(res.Provenance), w)
	}
}

// TestIQAllReplicasLost kills both instances holding a partition (its active
// and its standby) and holds back the rebuild on the instance that inherits
// it: queries within a bound are refused with the replica's lag rather than
// answered from the empty store, and once restoration completes they are
// answered again, never by a replica outside the bound.
func TestIQAllReplicasLost(t *testing.T) {
	const (
		acceptable = 50
		tight      = 10
	)
	c := newCluster(t, 3)
	cfg := instanceConfig{standbys: 1, sessionTimeout: failoverSession, acceptableLag: acceptable, probing: time.Second}
	nodes := []*iqNode{c.startIQNode(t, "a", cfg), c.startIQNode(t, "b", cfg), c.startIQNode(t, "c", cfg)}
	c.iqWaitLayout(t, nodes, 1)
	want := make(map[string]int64)
	c.produceLines(t, newCorpus(25, 400).Lines(6000, want))
	c.waitCaughtUp(t, "wc")
	lay := c.iqWaitCurrent(t, nodes, 1)

	const p = int32(0)
	cl := changelogTopic("wc")
	end := c.endOffsets(t, cl)[cl][p]
	require.Greater(t, end, int64(acceptable))
	lost := []*iqNode{lay[p].active, lay[p].standbys[0]}
	var heir *iqNode
	for _, n := range nodes {
		if !slices.Contains(lost, n) {
			heir = n
		}
	}
	_, held := heir.replica(p)
	require.False(t, held, "%s holds partition %d before the kill", heir.name, p)

	gate := c.iqCloseGate(t, p)
	for _, n := range lost {
		n.kill()
	}
	killed := time.Now()
	iqWaitReplica(t, heir, p, 2*failoverSession+settleTimeout, fmt.Sprintf("rebuilding towards %d", end), func(ri iq.ReplicaInfo) bool {
		return ri.Role == iq.RoleRestoring && ri.Rebuilding && ri.Position == -1 && ri.Lag == -1 && ri.End == end
	})
	t.Logf("%s rebuilds partition %d %s after the kill", heir.name, p, time.Since(killed).Round(time.Millisecond))

	words := iqWordsIn(want, c.partitions, p, 4)
	hc := newIQHTTP(t)
	qc, err := iq.NewClient([]string{heir.addr}, iq.ClientOptions{Timeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(qc.Close)
	for _, w := range words {
		_, err := heir.get(w, iq.WithStaleness(iq.MaxLag(boundLag)))
		var se *iq.StaleError
		require.ErrorAs(t, err, &se, w)
		require.True(t, se.Rebuilding, w)

		// Routed, through the heir's instance: refused as rebuilding.
		a, err := hc.key(heir.addr, w, "staleness", "lag:"+strconv.Itoa(boundLag))
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, a.Status, a.String())
		require.Equal(t, "not_available", a.Reason, a.String())
		require.NotEmpty(t, a.Tried, a.String())
		require.Equal(t, "too_stale", a.Tried[0].Reason, a.String())
		require.Contains(t, a.Tried[0].Error, "rebuilding", a.String())

		// Through the routing client: typed, with the lag.
		_, err = iq.ClientGet[string, int64](ctx(t), qc, countsStore, w, serde.String, iq.WithStaleness(iq.MaxLag(boundLag)))
		require.ErrorIs(t, err, iq.ErrNotAvailable, w)
		var ue *iq.UnavailableError
		require.ErrorAs(t, err, &ue)
		var stale *iq.StaleError
		for _, at := range ue.Tried {
			if errors.As(at.Err, &stale) {
				break
			}
		}
		require.NotNil(t, stale, "no attempt refused as too stale: %v", err)
		require.True(t, stale.Rebuilding)
		require.Equal(t, iq.RoleRestoring, stale.Role)

		// Staleness any: the empty store, said to be restoring and
		// rebuilding.
		a, err = hc.key(heir.addr, w, "staleness", "any")
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, a.Status, a.String())
		require.Equal(t, "restoring", a.ServedBy.Role)
		require.True(t, a.ServedBy.Rebuilding, a.String())
	}

	// Let the restoration through and query with a tight bound until the
	// replica answers: every answer on the way is within the bound.
	gate.open()
	answered := make(map[string]bool)
	waitFor(t, settleTimeout, "answers from the rebuilt partition", func() (bool, string) {
		for _, w := range words {
			a, err := hc.key(heir.addr, w, "staleness", "lag:"+strconv.Itoa(tight))
			require.NoError(t, err)
			switch a.Status {
			case http.StatusOK:
				require.NotNil(t, a.ServedBy.Lag, "an answer under a lag bound has a known lag: %s", a.String())
				require.LessOrEqual(t, *a.ServedBy.Lag, int64(tight), a.String())
				n, err := a.count()
				require.NoError(t, err)
				require.LessOrEqual(t, n, want[w], a.String())
				if a.ServedBy.Role == "active" {
					require.Equal(t, want[w], n, a.String())
					answered[w] = true
				}
			case http.StatusServiceUnavailable:
				require.NotEmpty(t, a.Tried, a.String())
				require.Equal(t, "too_stale", a.Tried[0].Reason, a.String())
			default:
				t.Fatalf("%q: %s", w, a)
			}
		}
		return len(answered) == len(words), fmt.Sprintf("answered by an active: %v", answered)
	})
	requireStore(t, want, heir.instance)
}

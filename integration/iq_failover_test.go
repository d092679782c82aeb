package integration

// Queries while an active dies: standbys answering, a promoted standby
// restoring its tail, and monotonic reads across the failover.

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
)

// TestIQStandbyAnswersThroughActiveKill kills the instance that is active
// for a partition while clients keep querying with lag:10000: the standby
// answers every query until it is promoted, and after promotion and
// restoration the answers come from an active with lag 0. Metadata names
// the active first, then the standbys.
func TestIQStandbyAnswersThroughActiveKill(t *testing.T) {
	c := newCluster(t, 2)
	cfg := instanceConfig{standbys: 1, sessionTimeout: failoverSession, probing: time.Second}
	nodes := []*iqNode{c.startIQNode(t, "a", cfg), c.startIQNode(t, "b", cfg)}
	c.iqWaitLayout(t, nodes, 1)
	want := make(map[string]int64)
	c.produceLines(t, newCorpus(22, 300).Lines(5000, want))
	c.waitCaughtUp(t, "wc")
	lay := c.iqWaitCurrent(t, nodes, 1)

	victim, survivor := lay[0].active, lay[0].standbys[0]
	var victimParts []int32
	var sample []string
	for p := range c.partitions {
		if lay[p].active == victim {
			victimParts = append(victimParts, p)
		}
		sample = append(sample, iqWordsIn(want, c.partitions, p, 8)...)
	}

	cl, err := iq.NewClient([]string{nodes[0].addr, nodes[1].addr}, iq.ClientOptions{Timeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	hc := newIQHTTP(t)

	// Metadata: the active host first, then the standbys, from every
	// instance and from the client.
	for p := range c.partitions {
		w := iqWordsIn(want, c.partitions, p, 1)[0]
		kb, _ := serde.String.Encode(w)
		wantMeta := iq.KeyQueryMetadata{Partition: p, Active: lay[p].active.addr, Standbys: []string{lay[p].standbys[0].addr}}
		km, err := cl.KeyMetadata(ctx(t), countsStore, kb)
		require.NoError(t, err)
		require.Equal(t, wantMeta, km, "client metadata of %q", w)
		for _, n := range nodes {
			km, err := n.q.KeyMetadata(countsStore, kb)
			require.NoError(t, err)
			require.Equal(t, wantMeta, km, "metadata of %q on %s", w, n.name)
			a, err := hc.get(n.addr, "/v1/metadata/stores/"+countsStore+"/keys/"+url.PathEscape(w), nil)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, a.Status, a.String())
			require.Equal(t, p, *a.Partition)
			require.NotNil(t, a.Active, a.String())
			require.Equal(t, lay[p].active.addr, *a.Active)
			require.Equal(t, []string{lay[p].standbys[0].addr}, a.Standbys)
		}
	}

	// No input arrives from here on, so every answer, from whichever
	// replica, must be the reference count.
	check := func(w string, o iqObs) string {
		if !o.found || o.value != want[w] {
			return fmt.Sprintf("found %v count %d from %s %s, want %d", o.found, o.value, o.role, o.host, want[w])
		}
		if o.role != "active" && (o.lag < 0 || o.lag > boundLag) {
			return fmt.Sprintf("lag %d (-1: unknown) outside the bound", o.lag)
		}
		return ""
	}
	bound := iq.WithStaleness(iq.MaxLag(boundLag))
	pollers := []*iqPoller{
		startIQPoller("routing client", sample, func(w string) (iqObs, error) {
			qctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return clientObs(iq.ClientGet[string, int64](qctx, cl, countsStore, w, serde.String, bound))
		}, check),
		startIQPoller("survivor HTTP route=true", sample, func(w string) (iqObs, error) {
			return httpObs(hc.key(survivor.addr, w, "staleness", "lag:"+strconv.Itoa(boundLag)))
		}, check),
	}
	defer func() {
		for _, p := range pollers {
			select {
			case <-p.stop:
			default:
				p.halt()
			}
		}
	}()
	for _, p := range pollers {
		p.waitAnswers(t, 0, 2*len(sample))
	}

	victim.kill()
	killed := time.Now()
	for _, p := range pollers {
		p.setPhase(1)
	}
	for p := range c.partitions {
		iqWaitReplica(t, survivor, p, failoverSession+settleTimeout, "running active", func(ri iq.ReplicaInfo) bool {
			return ri.Role == iq.RoleActive && ri.Lag == 0
		})
		waitFor(t, settleTimeout, fmt.Sprintf("%s routing partition %d to itself", survivor.name, p), func() (bool, string) {
			km, err := survivor.q.PartitionMetadata(countsStore, p)
			return err == nil && km.Active == survivor.addr, fmt.Sprintf("%+v %v", km, err)
		})
	}
	t.Logf("%s took every partition over %s after the kill (session timeout %s)", survivor.name, time.Since(killed).Round(time.Millisecond), failoverSession)
	for _, p := range pollers {
		p.setPhase(2)
	}
	for _, p := range pollers {
		p.waitAnswers(t, 2, 2*len(sample))
		p.halt()
		t.Log(p)
	}

	for _, p := range pollers {
		require.Empty(t, p.wrong, p.name)
		require.Positive(t, p.answers[1], "%s answered nothing between the kill and the promotion", p.name)
		for _, vp := range victimParts {
			after := p.rolesIn(2, vp)
			require.Equal(t, map[string]int{"active": after["active"]}, after, "%s: roles answering partition %d after the promotion", p.name, vp)
		}
	}
	// The killed active's partitions were served by their standby while
	// the group had not yet moved them (the routing client reaches it after
	// the active fails; the survivor's own instance reads it locally).
	for _, vp := range victimParts {
		for _, p := range pollers {
			require.Positive(t, p.rolesIn(1, vp)["standby"], "%s: standby answers for partition %d after the kill: %v", p.name, vp, p.rolesIn(1, vp))
		}
	}

	// After the promotion, the default bound is answered by the new
	// active with lag 0; the client finds it after refreshing its table.
	for _, w := range sample {
		p := iqWordPartition(w, c.partitions)
		res, err := iq.ClientGet[string, int64](ctx(t), cl, countsStore, w, serde.String)
		require.NoError(t, err, w)
		require.Equal(t, iq.Provenance{Host: survivor.addr, Partition: p, Role: iq.RoleActive, Position: res.Provenance.Position}, stable(res.Provenance), w)
		require.Equal(t, want[w], res.Value, w)
		a, err := hc.key(survivor.addr, w, "route", "false")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, a.Status, a.String())
		require.Equal(t, "active", a.ServedBy.Role)
		require.Zero(t, orMinus1(a.ServedBy.Lag))
	}

	// Last, as it is what the test is for: not one query failed.
	for _, p := range pollers {
		require.Zero(t, p.failures[1]+p.failures[2], "%s: failed queries after the kill: %v", p, p.firstFailures)
	}
}

// TestIQPromotedStandbyRestoringTail holds back the standby's changelog
// while its active writes a short tail, then kills the active: the promoted
// standby restores the tail, and while it does it answers bounds that allow
// its lag (within the acceptable recovery lag) with role restoring, and
// refuses tighter ones.
func TestIQPromotedStandbyRestoringTail(t *testing.T) {
	const acceptable = 50
	c := newCluster(t, 2)
	cfg := instanceConfig{standbys: 1, sessionTimeout: failoverSession, acceptableLag: acceptable, probing: time.Second}
	nodes := []*iqNode{c.startIQNode(t, "a", cfg), c.startIQNode(t, "b", cfg)}
	c.iqWaitLayout(t, nodes, 1)
	want := make(map[string]int64)
	c.produceLines(t, newCorpus(23, 300).Lines(3000, want))
	c.waitCaughtUp(t, "wc")
	lay := c.iqWaitCurrent(t, nodes, 1)
	const p = int32(0)
	victim, heir := lay[p].active, lay[p].standbys[0]
	cl := changelogTopic("wc")
	before := c.endOffsets(t, cl)[cl][p]

	// The tail: new words of partition p, written by the active while the
	// standby cannot read them.
	gate := c.iqCloseGate(t, p)
	var tail []string
	for i := 0; len(tail) < 20; i++ {
		if w := "tail" + strconv.Itoa(i); iqWordPartition(w, c.partitions) == p {
			tail = append(tail, w)
			want[w] = 1
		}
	}
	c.produceLines(t, tail)
	c.waitCaughtUp(t, "wc")
	end := c.endOffsets(t, cl)[cl][p]
	lag := end - before
	require.Positive(t, lag)
	require.LessOrEqual(t, lag, int64(acceptable), "the tail must be within the acceptable recovery lag")
	sbInfo, ok := heir.replica(p)
	require.True(t, ok)
	require.Equal(t, iq.RoleStandby, sbInfo.Role)
	require.Equal(t, before, sbInfo.Position, "the standby read past the gate")

	victim.kill()
	ri := iqWaitReplica(t, heir, p, failoverSession+settleTimeout, fmt.Sprintf("restoring with lag %d", lag), func(ri iq.ReplicaInfo) bool {
		return ri.Role == iq.RoleRestoring && ri.Lag == lag
	})
	require.Equal(t, before, ri.Position)
	require.Equal(t, end, ri.End)

	old := iqWordsIn(want, c.partitions, p, 3)
	for _, w := range append(old, tail[0]) {
		// Within the acceptable lag: answered, from the restoring replica,
		// with what it has so far.
		for _, bound := range []iq.Staleness{iq.MaxLag(lag), iq.MaxLag(acceptable), iq.MaxAge(time.Hour), iq.AnyStaleness()} {
			res, err := heir.get(w, iq.WithStaleness(bound))
			require.NoError(t, err, "%q staleness %s", w, bound)
			require.Equal(t, iq.Provenance{Host: heir.addr, Partition: p, Role: iq.RoleRestoring, Position: before, Lag: lag}, stable(res.Provenance), "%q staleness %s", w, bound)
			if slices.Contains(tail, w) {
				require.False(t, res.Found, "%q is in the tail not yet restored", w)
			} else {
				require.True(t, res.Found, w)
				require.Equal(t, want[w], res.Value, w)
			}
		}
		// Tighter than its lag, or active only: refused with its lag.
		for _, bound := range []iq.Staleness{iq.ActiveOnly(), iq.MaxLag(lag - 1)} {
			_, err := heir.get(w, iq.WithStaleness(bound))
			var se *iq.StaleError
			require.ErrorAs(t, err, &se, "%q staleness %s", w, bound)
			require.Equal(t, iq.RoleRestoring, se.Role)
			require.Equal(t, lag, se.Lag)
			require.Equal(t, before, se.Position)
		}
	}
	hc := newIQHTTP(t)
	a, err := hc.key(heir.addr, old[0], "route", "false", "staleness", "lag:"+strconv.Itoa(acceptable))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, a.Status, a.String())
	require.Equal(t, "restoring", a.ServedBy.Role)
	require.Equal(t, lag, orMinus1(a.ServedBy.Lag))
	a, err = hc.key(heir.addr, old[0], "staleness", "lag:"+strconv.FormatInt(lag-1, 10))
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, a.Status, a.String())

	gate.open()
	iqWaitReplica(t, heir, p, settleTimeout, "running active", func(ri iq.ReplicaInfo) bool { return ri.Role == iq.RoleActive })
	for _, w := range append(old, tail...) {
		res, err := heir.get(w)
		require.NoError(t, err, w)
		require.True(t, res.Found, w)
		require.Equal(t, want[w], res.Value, w)
		require.Equal(t, iq.Provenance{Host: heir.addr, Partition: p, Role: iq.RoleActive, Position: end}, stable(res.Provenance), w)
	}
}

// TestIQMonotonicReadsAcrossFailover kills an active while input flows and
// a routing client (monotonic by default) and an HTTP caller passing its
// last position as min_position keep reading: neither ever sees a word's
// count go down.
func TestIQMonotonicReadsAcrossFailover(t *testing.T) {
	c := newCluster(t, 2)
	cfg := instanceConfig{standbys: 1, sessionTimeout: failoverSession, probing: time.Second}
	nodes := []*iqNode{c.startIQNode(t, "a", cfg), c.startIQNode(t, "b", cfg)}
	lay := c.iqWaitLayout(t, nodes, 1)
	victim, survivor := lay[0].active, lay[0].standbys[0]

	// Two words per partition, counted up by every batch.
	perPart := make(map[int32]int)
	var words []string
	for i := 0; len(words) < 2*int(c.partitions); i++ {
		w := "mono" + strconv.Itoa(i)
		if p := iqWordPartition(w, c.partitions); perPart[p] < 2 {
			perPart[p]++
			words = append(words, w)
		}
	}
	feed := c.iqFeed(words, 20*time.Millisecond)
	defer func() {
		select {
		case <-feed.stop:
		default:
			feed.halt(t)
		}
	}()
	feed.waitBatches(t, 10)

	cl, err := iq.NewClient([]string{nodes[0].addr, nodes[1].addr}, iq.ClientOptions{Timeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	hc := newIQHTTP(t)

	// check flags a count below the last one seen for the word. Each
	// poller has its own memory, as each is a caller of its own.
	monotonic := func() func(string, iqObs) string {
		last := make(map[string]iqObs)
		return func(w string, o iqObs) string {
			prev, seen := last[w]
			if o.found {
				last[w] = o
			}
			if seen && (!o.found || o.value < prev.value) {
				return fmt.Sprintf("count went from %d (%s %s at %d) to %d (found %v, %s %s at %d)",
					prev.value, prev.role, prev.host, prev.position, o.value, o.found, o.role, o.host, o.position)
			}
			return ""
		}
	}
	bound := iq.WithStaleness(iq.MaxLag(boundLag))
	positions := make(map[int32]int64)
	pollers := []*iqPoller{
		startIQPoller("routing client", words, func(w string) (iqObs, error) {
			qctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return clientObs(iq.ClientGet[string, int64](qctx, cl, countsStore, w, serde.String, bound))
		}, monotonic()),
		startIQPoller("HTTP with min_position", words, func(w string) (iqObs, error) {
			// Only this poller's goroutine touches positions.
			p := iqWordPartition(w, c.partitions)
			params := []string{"staleness", "lag:" + strconv.Itoa(boundLag)}
			if pos, ok := positions[p]; ok {
				params = append(params, "min_position", strconv.FormatInt(pos, 10))
			}
			o, err := httpObs(hc.key(survivor.addr, w, params...))
			if err == nil && o.position > positions[p] {
				positions[p] = o.position
			}
			return o, err
		}, monotonic()),
	}
	defer func() {
		for _, p := range pollers {
			select {
			case <-p.stop:
			default:
				p.halt()
			}
		}
	}()
	for _, p := range pollers {
		p.waitAnswers(t, 0, 4*len(words))
	}

	victim.kill()
	for _, p := range pollers {
		p.setPhase(1)
	}
	for p := range c.partitions {
		iqWaitReplica(t, survivor, p, failoverSession+settleTimeout, "running active", func(ri iq.ReplicaInfo) bool { return ri.Role == iq.RoleActive })
	}
	for _, p := range pollers {
		p.setPhase(2)
	}
	feed.waitBatches(t, feed.batchCount()+20)
	for _, p := range pollers {
		p.waitAnswers(t, 2, 4*len(words))
	}
	final := feed.halt(t)
	c.waitCaughtUp(t, "wc")
	for _, p := range pollers {
		p.halt()
		t.Log(p)
		require.Empty(t, p.wrong, "%s saw counts go backwards", p.name)
	}
	// The client followed the victim's partition from one replica to the
	// next: it read it before the kill and after the promotion.
	require.Positive(t, pollers[0].rolesIn(0, 0)["active"], "client reads of partition 0 from its first active")
	require.Positive(t, pollers[0].rolesIn(2, 0)["active"], "client reads of partition 0 from its new active")
	// At least once: nothing produced is missing from the final counts.
	for _, w := range words {
		res, err := iq.ClientGet[string, int64](ctx(t), cl, countsStore, w, serde.String)
		require.NoError(t, err, w)
		require.GreaterOrEqual(t, res.Value, final[w], w)
	}
}

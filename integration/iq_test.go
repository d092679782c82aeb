package integration

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
)

// These tests query running word-count groups through the query layer: in
// process (iq.Querier over App.Queries), over each instance's HTTP API, and
// through the routing client, while replicas are active, standby, restoring
// and lost.

// failoverSession is the session timeout of instances that tests kill: the
// group moves a killed instance's tasks this long after its death.
const failoverSession = 3 * time.Second

// boundLag is the staleness bound the failover tests query with.
const boundLag = 10_000

// settled is the configuration of instances that only need to settle into
// a layout: a new instance may first receive warmups, and the probing
// rebalance that moves actives to it after they catch up comes soon.
var settled = instanceConfig{probing: time.Second}

// TestIQOnlyRunningActiveAnswersByDefault reads every counts partition from
// its active and its standby: with the default staleness only the running
// active answers and the standby refuses with a typed error naming its role;
// with staleness any (or a lag bound it meets) the standby answers and says
// it is a standby.
func TestIQOnlyRunningActiveAnswersByDefault(t *testing.T) {
	c := newCluster(t, 2)
	cfg := instanceConfig{standbys: 1, probing: time.Second}
	nodes := []*iqNode{c.startIQNode(t, "a", cfg), c.startIQNode(t, "b", cfg)}
	c.iqWaitLayout(t, nodes, 1)
	want := make(map[string]int64)
	c.produceLines(t, newCorpus(21, 300).Lines(5000, want))
	c.waitCaughtUp(t, "wc")
	lay := c.iqWaitCurrent(t, nodes, 1)
	ends := c.endOffsets(t, changelogTopic("wc"))[changelogTopic("wc")]
	hc := newIQHTTP(t)

	for p := range c.partitions {
		act, sb := lay[p].active, lay[p].standbys[0]
		words := iqWordsIn(want, c.partitions, p, 5)
		require.NotEmpty(t, words, "words in partition %d", p)
		for _, w := range words {
			// In process.
			res, err := act.get(w)
			require.NoError(t, err, "%q on its active %s", w, act.name)
			require.True(t, res.Found, w)
			require.Equal(t, want[w], res.Value, w)
			require.Equal(t, iq.Provenance{Host: act.addr, Partition: p, Role: iq.RoleActive, Position: ends[p]}, stable(res.Provenance), w)

			_, err = sb.get(w)
			require.ErrorIs(t, err, iq.ErrTooStale, "%q on its standby %s with the default staleness", w, sb.name)
			var se *iq.StaleError
			require.ErrorAs(t, err, &se)
			require.Equal(t, iq.RoleStandby, se.Role)
			require.Equal(t, p, se.Partition)
			require.Equal(t, sb.addr, se.Host)
			require.Equal(t, ends[p], se.Position)
			require.Contains(t, err.Error(), "standby")
			require.Contains(t, err.Error(), "only a running active may answer")

			for _, bound := range []iq.Staleness{iq.AnyStaleness(), iq.MaxLag(0), iq.MaxAge(time.Minute)} {
				res, err = sb.get(w, iq.WithStaleness(bound))
				require.NoError(t, err, "%q on its standby with staleness %s", w, bound)
				require.True(t, res.Found, w)
				require.Equal(t, want[w], res.Value, w)
				require.Equal(t, iq.Provenance{Host: sb.addr, Partition: p, Role: iq.RoleStandby, Position: ends[p]}, stable(res.Provenance), "%q staleness %s", w, bound)
			}

			// Over HTTP, unrouted.
			a, err := hc.key(act.addr, w, "route", "false")
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, a.Status, a.String())
			require.Equal(t, act.addr, a.ServedBy.Host)
			require.Equal(t, "active", a.ServedBy.Role)
			n, err := a.count()
			require.NoError(t, err)
			require.Equal(t, want[w], n)

			a, err = hc.key(sb.addr, w, "route", "false")
			require.NoError(t, err)
			require.Equal(t, http.StatusServiceUnavailable, a.Status, a.String())
			require.Equal(t, "too_stale", a.Reason, a.String())
			require.NotNil(t, a.Role, a.String())
			require.Equal(t, "standby", *a.Role)
			require.Contains(t, a.Error, "staleness=any", "the refusal says what to do next")

			a, err = hc.key(sb.addr, w, "route", "false", "staleness", "any")
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, a.Status, a.String())
			require.Equal(t, sb.addr, a.ServedBy.Host)
			require.Equal(t, "standby", a.ServedBy.Role)
			require.Equal(t, ends[p], orMinus1(a.ServedBy.Position))
			require.Zero(t, orMinus1(a.ServedBy.Lag))
			n, err = a.count()
			require.NoError(t, err)
			require.Equal(t, want[w], n)

			// Routed, the standby's instance forwards the default
			// bound to the active.
			a, err = hc.key(sb.addr, w)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, a.Status, a.String())
			require.Equal(t, act.addr, a.ServedBy.Host)
			require.Equal(t, "active", a.ServedBy.Role)
		}
	}
}

// TestIQMalformedQueries sends queries for an unknown store, with a
// malformed key or parameter, for a partition that does not exist and for
// one hosted elsewhere: each gets its typed error in process and its 4xx
// with a message that says what to do over HTTP.
func TestIQMalformedQueries(t *testing.T) {
	// One counts partition per stream thread of the two nodes: balance per
	// thread then leaves each node some partitions and not all of them.
	c := newCluster(t, int32(2*streamThreads(t)))
	nodes := []*iqNode{c.startIQNode(t, "a", settled), c.startIQNode(t, "b", settled)}
	want := make(map[string]int64)
	c.produceLines(t, newCorpus(26, 200).Lines(2000, want))
	c.waitCaughtUp(t, "wc")
	lay := c.iqWaitLayout(t, nodes, 0)
	a := nodes[0]
	var mine, elsewhere string
	for p := range c.partitions {
		w := iqWordsIn(want, c.partitions, p, 1)[0]
		if lay[p].active == a {
			mine = w
		} else {
			elsewhere = w
		}
	}
	require.NotEmpty(t, mine, "a hosts no partition")
	require.NotEmpty(t, elsewhere, "a hosts every partition")

	t.Run("http", func(t *testing.T) {
		hc := newIQHTTP(t)
		for _, tc := range []struct {
			name   string
			path   string
			params []string
			status int
			reason string
			says   string
		}{
			{"unknown store", "/v1/stores/nope/keys/" + mine, nil, http.StatusNotFound, "unknown_store", `"nope"`},
			{"unknown store metadata", "/v1/metadata/stores/nope/keys/" + mine, nil, http.StatusNotFound, "unknown_store", "check the store name"},
			{"unknown store range", "/v1/stores/nope/range", nil, http.StatusNotFound, "unknown_store", `"nope"`},
			{"malformed key", "/v1/stores/counts/keys/Not%20a%20word", nil, http.StatusBadRequest, "invalid_query", "malformed key"},
			{"malformed key metadata", "/v1/metadata/stores/counts/keys/UPPER", nil, http.StatusBadRequest, "invalid_query", "not a word"},
			{"malformed range bound", "/v1/stores/counts/range", []string{"from", "a,b"}, http.StatusBadRequest, "invalid_query", "malformed from"},
			{"malformed staleness", "/v1/stores/counts/keys/" + mine, []string{"staleness", "fresh"}, http.StatusBadRequest, "invalid_query", "want active, any, lag:N or age:DURATION"},
			{"negative lag", "/v1/stores/counts/keys/" + mine, []string{"staleness", "lag:-3"}, http.StatusBadRequest, "invalid_query", "non-negative"},
			{"malformed min_position", "/v1/stores/counts/keys/" + mine, []string{"min_position", "soon"}, http.StatusBadRequest, "invalid_query", "min_position"},
			{"malformed route", "/v1/stores/counts/keys/" + mine, []string{"route", "maybe"}, http.StatusBadRequest, "invalid_query", "true or false"},
			{"malformed partition", "/v1/stores/counts/keys/" + mine, []string{"partition", "first"}, http.StatusBadRequest, "invalid_query", "partition"},
			{"negative partition", "/v1/stores/counts/keys/" + mine, []string{"partition", "-1"}, http.StatusBadRequest, "invalid_query", "non-negative"},
			{"missing partition", "/v1/stores/counts/keys/" + mine, []string{"partition", "99"}, http.StatusBadRequest, "unknown_partition", "99"},
			{"missing partition unrouted", "/v1/stores/counts/keys/" + mine, []string{"partition", "99", "route", "false"}, http.StatusBadRequest, "unknown_partition", "/v1/metadata"},
			{"missing partition range", "/v1/stores/counts/range", []string{"partition", "99"}, http.StatusBadRequest, "unknown_partition", "99"},
			{"missing partition routed range", "/v1/stores/counts/range", []string{"partition", "99", "route", "true"}, http.StatusBadRequest, "unknown_partition", "99"},
			{"hosted elsewhere unrouted", "/v1/stores/counts/keys/" + elsewhere, []string{"route", "false"}, http.StatusMisdirectedRequest, "not_hosted_here", "route=true"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ans, err := hc.get(a.addr, tc.path, iqParams(tc.params...))
				require.NoError(t, err)
				require.Equal(t, tc.status, ans.Status, ans.String())
				if tc.status == http.StatusOK {
					return
				}
				require.Equal(t, tc.reason, ans.Reason, ans.String())
				require.Contains(t, ans.Error, tc.says, ans.String())
				require.Regexp(t, `\(.+\)`, ans.Error, "the message ends with what to do next")
			})
		}
	})

	t.Run("in-process", func(t *testing.T) {
		failing := serde.Funcs[string]{
			EncodeFn: func(string) ([]byte, error) { return nil, errors.New("cannot encode") },
			DecodeFn: func(b []byte) (string, error) { return string(b), nil },
		}
		bg := context.Background()
		for _, tc := range []struct {
			name string
			err  func() error
			is   error
		}{
			{"unknown store", func() error {
				_, err := iq.Get(bg, a.q, "nope", mine, serde.String, serde.Int64)
				return err
			}, iq.ErrUnknownStore},
			{"unknown store metadata", func() error {
				_, err := iq.KeyMetadataFor(a.q, "nope", mine, serde.String)
				return err
			}, iq.ErrUnknownStore},
			{"unknown store range", func() error {
				_, err := iq.All(bg, a.q, "nope", serde.String, serde.Int64)
				return err
			}, iq.ErrUnknownStore},
			{"malformed key", func() error {
				_, err := iq.Get(bg, a.q, countsStore, mine, failing, serde.Int64)
				return err
			}, iq.ErrInvalidQuery},
			{"malformed staleness", func() error {
				_, err := iq.ParseStaleness("fresh")
				return err
			}, iq.ErrInvalidQuery},
			{"missing partition", func() error {
				_, err := iq.Get(bg, a.q, countsStore, mine, serde.String, serde.Int64, iq.WithPartition(99))
				return err
			}, iq.ErrUnknownPartition},
			{"missing partition metadata", func() error {
				_, err := a.q.PartitionMetadata(countsStore, 99)
				return err
			}, iq.ErrUnknownPartition},
			{"min position over all partitions", func() error {
				_, err := iq.All(bg, a.q, countsStore, serde.String, serde.Int64, iq.WithMinPosition(1))
				return err
			}, iq.ErrInvalidQuery},
			{"hosted elsewhere", func() error {
				_, err := a.get(elsewhere)
				return err
			}, iq.ErrNotHostedHere},
		} {
			t.Run(tc.name, func(t *testing.T) {
				err := tc.err()
				require.ErrorIs(t, err, tc.is)
				require.Regexp(t, `\(.+\)`, err.Error(), "the message says what to do next")
			})
		}
	})

	t.Run("client", func(t *testing.T) {
		qc, err := iq.NewClient([]string{a.addr}, iq.ClientOptions{})
		require.NoError(t, err)
		defer qc.Close()
		_, err = iq.ClientGet[string, int64](ctx(t), qc, "nope", mine, serde.String)
		require.ErrorIs(t, err, iq.ErrUnknownStore)
		kb, _ := serde.String.Encode("Not a word")
		_, err = qc.Get(ctx(t), countsStore, "Not a word", kb)
		require.ErrorIs(t, err, iq.ErrInvalidQuery)
		_, err = iq.ClientGet[string, int64](ctx(t), qc, countsStore, mine, serde.String, iq.WithPartition(99))
		require.ErrorIs(t, err, iq.ErrUnknownPartition)
		res, err := iq.ClientGet[string, int64](ctx(t), qc, countsStore, elsewhere, serde.String)
		require.NoError(t, err, "the client routes a key hosted elsewhere to its host")
		require.Equal(t, want[elsewhere], res.Value)
	})
}

// TestIQClientReachesEveryKeyFromOneInstance points a routing client, and
// plain HTTP callers, at one instance of three: every key of the store is
// answered by its active, whichever instance hosts it.
func TestIQClientReachesEveryKeyFromOneInstance(t *testing.T) {
	c := newCluster(t, 6)
	nodes := []*iqNode{c.startIQNode(t, "a", settled), c.startIQNode(t, "b", settled), c.startIQNode(t, "c", settled)}
	c.iqWaitLayout(t, nodes, 0)
	want := make(map[string]int64)
	c.produceLines(t, newCorpus(27, 600).Lines(8000, want))
	c.waitCaughtUp(t, "wc")
	lay := c.iqWaitLayout(t, nodes, 0)
	seed := nodes[0]

	qc, err := iq.NewClient([]string{seed.addr}, iq.ClientOptions{})
	require.NoError(t, err)
	t.Cleanup(qc.Close)
	hc := newIQHTTP(t)
	byClient := make(map[string]int)
	byHTTP := make(map[string]int)
	for _, w := range slices.Sorted(maps.Keys(want)) {
		p := iqWordPartition(w, c.partitions)
		owner := lay[p].active.addr
		res, err := iq.ClientGet[string, int64](ctx(t), qc, countsStore, w, serde.String)
		require.NoError(t, err, w)
		require.True(t, res.Found, w)
		require.Equal(t, want[w], res.Value, w)
		require.Equal(t, owner, res.Provenance.Host, w)
		require.Equal(t, p, res.Provenance.Partition, w)
		require.Equal(t, iq.RoleActive, res.Provenance.Role, w)
		byClient[res.Provenance.Host]++

		a, err := hc.key(seed.addr, w)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, a.Status, a.String())
		n, err := a.count()
		require.NoError(t, err)
		require.Equal(t, want[w], n, w)
		require.Equal(t, owner, a.ServedBy.Host, w)
		byHTTP[a.ServedBy.Host]++
	}
	require.Len(t, byClient, 3, "hosts that answered the client: %v", byClient)
	require.Len(t, byHTTP, 3, "hosts that answered through %s: %v", seed.name, byHTTP)
	t.Logf("%d words; answered by host: client %v, routed HTTP %v", len(want), byClient, byHTTP)

	// A word no one counted is absent, said by its partition's active.
	res, err := iq.ClientGet[string, int64](ctx(t), qc, countsStore, "neverseen", serde.String)
	require.NoError(t, err)
	require.False(t, res.Found)
	require.Equal(t, lay[iqWordPartition("neverseen", c.partitions)].active.addr, res.Provenance.Host)

	// A routed range from the one instance fans out over every partition.
	var rng struct {
		Partitions []struct {
			Partition int32 `json:"partition"`
			ServedBy  struct {
				Host string `json:"host"`
				Role string `json:"role"`
			} `json:"served_by"`
			Entries []struct {
				Key   string `json:"key"`
				Value int64  `json:"value"`
			} `json:"entries"`
			Truncated bool `json:"truncated"`
		} `json:"partitions"`
		Failed []any `json:"failed"`
	}
	resp, err := hc.hc.Get("http://" + seed.addr + "/v1/stores/counts/range?route=true")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&rng))
	require.Empty(t, rng.Failed)
	require.Len(t, rng.Partitions, int(c.partitions))
	got := make(map[string]int64)
	for _, pr := range rng.Partitions {
		require.False(t, pr.Truncated)
		require.Equal(t, lay[pr.Partition].active.addr, pr.ServedBy.Host, "partition %d", pr.Partition)
		require.Equal(t, "active", pr.ServedBy.Role)
		for _, e := range pr.Entries {
			require.Equal(t, pr.Partition, iqWordPartition(e.Key, c.partitions), e.Key)
			got[e.Key] = e.Value
		}
	}
	requireCounts(t, want, got, "routed range")
}

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

const (
	iqwApp     = "iqwin"
	iqwIn      = "iqw-text"
	iqwGroupBy = "iqw-words"
	iqwStore   = "iqw-minutes"
	// iqwWindows is how many minutes the corpus spreads over; the grace
	// is long enough that none of them expires during the test.
	iqwWindows = 8
)

// iqwNode is one instance of the windowed count, serving the query API.
type iqwNode struct {
	*runtime.App
	addr string
	srv  *http.Server
}

func startIQWindows(t *testing.T, c *cluster, name, dir string) *iqwNode {
	t.Helper()
	b := topology.NewBuilder()
	lines := topology.Stream(b, iqwIn, serde.String, serde.String)
	words := topology.FlatMapValues(lines, func(_, line string) []string { return tokenize(line) })
	g := topology.GroupBy(words, func(_, w string) string { return w }, iqwGroupBy, serde.String, serde.String)
	topology.WindowedBy(g, topology.TumblingWindows(time.Minute).Grace(24*time.Hour)).Count(iqwStore)
	topo, err := b.Build()
	require.NoError(t, err)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	logs := new(logBuffer)
	app, err := runtime.New(topo, runtime.Config{
		ApplicationID:       iqwApp,
		Brokers:             c.b.Addrs(),
		StateDir:            dir,
		Endpoint:            ln.Addr().String(),
		ProcessingGuarantee: runtime.ExactlyOnce,
		NumStandbys:         1,
		NumStreamThreads:    streamThreads(t),
		SessionTimeout:      3 * time.Second,
		CommitInterval:      200 * time.Millisecond,
		Logger:              slog.New(slog.NewTextHandler(logs, nil)).With("instance", name),
	})
	if err != nil {
		ln.Close()
	}
	require.NoError(t, err)
	require.NoError(t, app.Start(ctx(t)))
	n := &iqwNode{App: app, addr: ln.Addr().String()}
	api := iq.NewServer(app.Queries(), iq.ServerConfig{}, iq.CodecFor(iqwStore, serde.String, serde.Int64, nil))
	n.srv = &http.Server{Handler: api, ReadHeaderTimeout: 5 * time.Second}
	go n.srv.Serve(ln)
	t.Cleanup(func() {
		n.srv.Close()
		api.Close()
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		app.Close(cctx)
		if t.Failed() {
			t.Logf("logs of instance %s:\n%s", name, logs.String())
		}
	})
	return n
}

// iqwAnswer is a key-windows answer as the test reads it.
type iqwAnswer struct {
	status  int
	counts  map[int64]int64 // start -> count
	host    string
	role    string
	errBody string
}

func iqwGet(hc *http.Client, addr, word, staleness string) (iqwAnswer, error) {
	u := "http://" + addr + "/v1/stores/" + iqwStore + "/windows?" + url.Values{"key": {word}, "staleness": {staleness}}.Encode()
	resp, err := hc.Get(u)
	if err != nil {
		return iqwAnswer{}, err
	}
	defer resp.Body.Close()
	var body struct {
		Windows []struct {
			StartMs int64 `json:"start_ms"`
			Value   int64 `json:"value"`
		} `json:"windows"`
		ServedBy *struct {
			Host string `json:"host"`
			Role string `json:"role"`
		} `json:"served_by"`
		Reason string `json:"reason"`
	}
	a := iqwAnswer{status: resp.StatusCode}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return a, fmt.Errorf("HTTP %d: undecodable answer: %w", resp.StatusCode, err)
	}
	a.errBody = body.Reason
	if body.ServedBy != nil {
		a.host, a.role = body.ServedBy.Host, body.ServedBy.Role
		a.counts = map[int64]int64{}
		for _, w := range body.Windows {
			a.counts[w.StartMs] = w.Value
		}
	}
	return a, nil
}

// TestWindowQueriesAcrossInstances runs a windowed count on three
// instances with standbys and checks that a word's windows, asked of an
// instance holding no replica of its partition, match a reference under
// both active and lag:N bounds, also while an instance is killed.
func TestWindowQueriesAcrossInstances(t *testing.T) {
	const partitions = 3
	c := newCluster(t, partitions)
	resp, err := c.adm.CreateTopics(ctx(t), partitions, -1, nil, iqwIn)
	require.NoError(t, err)
	require.NoError(t, resp.Error())

	// The reference: every word's count per minute.
	const base int64 = 1_700_000_040_000
	want := map[string]map[int64]int64{}
	rng := rand.New(rand.NewPCG(11, 5))
	var recs []*kgo.Record
	for _, l := range newCorpus(11, 200).Lines(6_000, map[string]int64{}) {
		ts := base + rng.Int64N(iqwWindows*60_000)
		start := ts - (ts-base)%60_000
		for _, w := range tokenize(l) {
			if want[w] == nil {
				want[w] = map[int64]int64{}
			}
			want[w][start]++
		}
		recs = append(recs, &kgo.Record{Topic: iqwIn, Value: []byte(l), Timestamp: time.UnixMilli(ts)})
	}
	dir := t.TempDir()
	nodes := []*iqwNode{
		startIQWindows(t, c, "a", dir+"/a"),
		startIQWindows(t, c, "b", dir+"/b"),
		startIQWindows(t, c, "c", dir+"/c"),
	}
	for _, r := range recs {
		r.Partition = c.next
		c.next = (c.next + 1) % c.partitions
	}
	c.produce(t, recs...)

	c.waitCommitted(t, 2*settleTimeout, iqwApp, iqwIn, iqwApp+"-"+iqwGroupBy+"-repartition")

	var sample []string
	for w := range want {
		sample = append(sample, w)
	}
	slices.Sort(sample)
	sample = sample[:min(len(sample), 40)]
	absent := []string{"zzabsent1", "zzabsent2", "zzabsent3"}

	hc := &http.Client{Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	// nonOwner is an instance holding no replica of the word's partition
	// in every instance's routing table, its own included: the tables
	// change at slightly different moments while the group moves a
	// replica, and an instance named by any of them may rightly answer
	// itself.
	nonOwner := func(word string) (*iqwNode, error) {
		held := map[string]bool{}
		for _, n := range nodes {
			km, err := iq.KeyMetadataFor(iq.NewQuerier(n.Queries()), iqwStore, word, serde.String)
			if err != nil {
				return nil, err
			}
			held[km.Active] = true
			for _, h := range append(slices.Clone(km.Standbys), km.Warmups...) {
				held[h] = true
			}
		}
		for _, n := range nodes {
			if !held[n.addr] {
				return n, nil
			}
		}
		return nil, fmt.Errorf("every instance holds the partition of %q", word)
	}
	check := func(word string, a iqwAnswer) string {
		w := want[word]
		switch {
		case a.status == http.StatusOK && w != nil:
			if fmt.Sprint(a.counts) != fmt.Sprint(w) {
				return fmt.Sprintf("%q: got %v from %s %s, want %v", word, a.counts, a.role, a.host, w)
			}
		case a.status == http.StatusNotFound && w == nil:
		case a.status == http.StatusOK || a.status == http.StatusNotFound:
			return fmt.Sprintf("%q: HTTP %d with %v from %s, want %v", word, a.status, a.counts, a.host, w)
		}
		return ""
	}

	for _, staleness := range []string{"active", "lag:100"} {
		for _, word := range append(slices.Clone(sample), absent...) {
			// The group may still be moving an active when the counts are
			// committed: a 503 (no replica within the bound) is an honest
			// answer a client asks again after, asking a non-owner of the
			// latest routing table; a wrong count or a 404 for a word that
			// exists is not.
			var n *iqwNode
			var a iqwAnswer
			waitFor(t, settleTimeout, word+" answered under "+staleness+" by a non-owning instance", func() (bool, string) {
				var err error
				if n, err = nonOwner(word); err != nil {
					return false, err.Error()
				}
				a, err = iqwGet(hc, n.addr, word, staleness)
				require.NoError(t, err)
				require.Contains(t, []int{200, 404, 503}, a.status, "%s %s: %s", word, staleness, a.errBody)
				if a.status == 503 {
					return false, a.errBody
				}
				if a.host == n.addr {
					// Answering itself is wrong only if it still holds
					// no replica: the group may have given it one
					// between the lookup and the query.
					again, err := nonOwner(word)
					if err != nil || again != n {
						return false, "the partition moved to the instance asked"
					}
					t.Fatalf("%s: the non-owning instance %s answered itself", word, n.addr)
				}
				return true, ""
			})
			require.Empty(t, check(word, a), staleness)
		}
	}
	// The typed Client agrees.
	cl, err := iq.NewClient([]string{nodes[1].addr}, iq.ClientOptions{})
	require.NoError(t, err)
	defer cl.Close()
	res, err := iq.ClientWindowFetch[string, int64](ctx(t), cl, iqwStore, sample[0], time.Time{}, time.Time{}, serde.String)
	require.NoError(t, err)
	got := map[int64]int64{}
	for _, w := range res.Windows {
		require.Equal(t, w.Start+60_000, w.End)
		got[w.Start] = w.Value
	}
	require.Equal(t, want[sample[0]], got)
	// Every key's windows, one answer per partition, each from its
	// active.
	all, err := iq.ClientWindowFetchAll[string, int64](ctx(t), cl, iqwStore, time.Time{}, time.Time{})
	require.NoError(t, err)
	require.Empty(t, all.Refused)
	require.Len(t, all.Partitions, partitions)
	require.Equal(t, want, iqwAllCounts(t, all, "active"))

	// Kill an instance and keep asking the survivors: every answer given
	// is the reference; refusals are allowed while partitions move, but
	// every word is answered again once the group settles.
	nodes[0].Kill()
	nodes[0].srv.Close()
	survivors := nodes[1:]
	for _, staleness := range []string{"lag:100", "active"} {
		for i, word := range append(slices.Clone(sample), absent...) {
			waitFor(t, 2*settleTimeout, word+" answered under "+staleness+" after the kill", func() (bool, string) {
				a, err := iqwGet(hc, survivors[i%2].addr, word, staleness)
				if err != nil {
					return false, err.Error()
				}
				if bad := check(word, a); bad != "" {
					t.Fatalf("wrong answer after the kill: %s", bad)
				}
				return a.status == 200 || a.status == 404, fmt.Sprintf("HTTP %d %s", a.status, a.errBody)
			})
		}
	}
	// The all-keys fetch through a client that knew the killed instance:
	// once every partition answers again, the new actives hold every
	// window exactly.
	waitFor(t, 2*settleTimeout, "every partition's windows after the kill", func() (bool, string) {
		all, err = iq.ClientWindowFetchAll[string, int64](ctx(t), cl, iqwStore, time.Time{}, time.Time{})
		if err != nil {
			return false, err.Error()
		}
		return len(all.Refused) == 0, fmt.Sprint(all.Refused)
	})
	require.Len(t, all.Partitions, partitions)
	for _, pw := range all.Partitions {
		require.NotEqual(t, nodes[0].addr, pw.Provenance.Host, "partition %d answered by the killed instance", pw.Provenance.Partition)
	}
	require.Equal(t, want, iqwAllCounts(t, all, "active"))
}

// iqwAllCounts reads an all-keys answer as word -> start -> count, checking
// that each partition answered from the role given and holds only its own
// keys.
func iqwAllCounts(t *testing.T, res iq.WindowRangeResult[string, int64], role string) map[string]map[int64]int64 {
	t.Helper()
	got := map[string]map[int64]int64{}
	for i, pw := range res.Partitions {
		require.EqualValues(t, i, pw.Provenance.Partition, "partitions in order")
		require.Equal(t, role, pw.Provenance.Role.String(), "partition %d", i)
		require.False(t, pw.Truncated, "partition %d", i)
		for _, w := range pw.Windows {
			key, _ := serde.String.Encode(w.Key)
			require.Equal(t, pw.Provenance.Partition, topology.Partition(key, int32(len(res.Partitions))), "word %q", w.Key)
			require.Equal(t, w.Start+60_000, w.End)
			if got[w.Key] == nil {
				got[w.Key] = map[int64]int64{}
			}
			got[w.Key][w.Start] = w.Value
		}
	}
	return got
}

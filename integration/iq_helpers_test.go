package integration

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// Helpers of the query-layer tests (iq_*_test.go): instances serving the HTTP
// query API, the replica layout they settle into, a gate that holds a
// changelog partition's fetches so restoring and standby replicas can be
// caught mid-way, and decoding of HTTP answers.

// iqNode is an instance that serves the query API over HTTP on a loopback
// port, which it advertises as its endpoint.
type iqNode struct {
	*instance
	addr string
	q    *iq.Querier
	srv  *http.Server
	api  *iq.Server
}

// iqParseWord reads a key of the counts store as written in a URL. The store
// holds tokenizer output only, so anything the tokenizer would not produce
// unchanged is a malformed key rather than a lookup that finds nothing.
func iqParseWord(s string) (string, error) {
	if ws := tokenize(s); len(ws) != 1 || ws[0] != s {
		return "", fmt.Errorf("%q is not a word as the word count stores it (lowercase letters and digits only)", s)
	}
	return s, nil
}

func iqCountsCodec() iq.StoreCodec {
	return iq.CodecFor(countsStore, serde.String, serde.Int64, iqParseWord)
}

// startIQNode starts an instance whose endpoint is a listener bound before
// the instance starts (the routing table names hosts by endpoint), then
// serves the query API on it. The listener takes cfg.endpoint when set (an
// instance restarted where it was), else a free port. The HTTP server
// stops before the instance closes at cleanup.
func (c *cluster) startIQNode(t *testing.T, name string, cfg instanceConfig) *iqNode {
	t.Helper()
	ln, err := net.Listen("tcp", cmp.Or(cfg.endpoint, "127.0.0.1:0"))
	require.NoError(t, err)
	if cfg.stateDir == "" {
		cfg.stateDir = t.TempDir()
	}
	cfg.endpoint = ln.Addr().String()
	var in *instance
	func() {
		defer func() {
			if in == nil {
				ln.Close()
			}
		}()
		in = c.start(t, name, cfg)
	}()
	n := &iqNode{instance: in, addr: cfg.endpoint, q: iq.NewQuerier(in.Queries()), api: iq.NewServer(in.Queries(), iq.ServerConfig{}, iqCountsCodec())}
	n.srv = &http.Server{Handler: n.api, ReadHeaderTimeout: 5 * time.Second}
	go n.srv.Serve(ln)
	t.Cleanup(func() {
		n.srv.Close()
		n.api.Close()
	})
	return n
}

// kill stops the node as a crash would: its HTTP listener and connections
// go away, and the instance is killed (no commit, no leave).
func (n *iqNode) kill() {
	n.srv.Close()
	n.Kill()
}

// get looks a word up in the node's local replicas, in-process.
func (n *iqNode) get(word string, opts ...iq.QueryOption) (iq.Result[int64], error) {
	return iq.Get(context.Background(), n.q, countsStore, word, serde.String, serde.Int64, opts...)
}

// replica describes the node's local replica of a counts partition.
func (n *iqNode) replica(p int32) (iq.ReplicaInfo, bool) {
	for _, ri := range n.Queries().LocalReplicas() {
		if ri.Store == countsStore && ri.Partition == p {
			return ri, true
		}
	}
	return iq.ReplicaInfo{}, false
}

// iqWordPartition is the counts partition holding a word.
func iqWordPartition(w string, partitions int32) int32 {
	kb, _ := serde.String.Encode(w)
	return topology.Partition(kb, partitions)
}

// iqWordsIn returns up to n words of counts, sorted, that live in partition p.
func iqWordsIn(counts map[string]int64, partitions, p int32, n int) []string {
	var out []string
	for w := range counts {
		if iqWordPartition(w, partitions) == p {
			out = append(out, w)
		}
	}
	slices.Sort(out)
	return out[:min(n, len(out))]
}

// iqPart is where one counts partition lives: its running active and its
// standbys.
type iqPart struct {
	active   *iqNode
	standbys []*iqNode
}

// iqLayout is every counts partition's iqPart.
type iqLayout map[int32]iqPart

// iqLayoutProblems says what keeps the nodes from a settled layout: every
// node running all its tasks under an assignment that plans no further
// (probing) rebalance, each counts partition with one running active
// and k standbys (no restoring or warmup replicas), and every node's routing
// table naming exactly those hosts.
func (c *cluster) iqLayoutProblems(nodes []*iqNode, k int) (iqLayout, []string) {
	var probs []string
	lay := make(iqLayout, c.partitions)
	tasks := 0
	for _, n := range nodes {
		if err := n.Err(); err != nil {
			probs = append(probs, fmt.Sprintf("%s failed: %v", n.name, err))
		}
		ids, all := n.runningTasks()
		if !all {
			probs = append(probs, fmt.Sprintf("%s: tasks %v", n.name, n.Tasks()))
		}
		tasks += len(ids)
		// A pending probing rebalance (or warmups, which bring one) means
		// the layout is about to change.
		if a, ok := n.Assignment(); !ok {
			probs = append(probs, n.name+" has no assignment")
		} else if len(a.Warmup) > 0 || a.NextProbingRebalanceMs != 0 {
			probs = append(probs, fmt.Sprintf("%s: warmups %v, probing rebalance at %d", n.name, a.Warmup, a.NextProbingRebalanceMs))
		}
		for _, ri := range n.Queries().LocalReplicas() {
			if ri.Store != countsStore {
				continue
			}
			pl := lay[ri.Partition]
			switch ri.Role {
			case iq.RoleActive:
				if pl.active != nil {
					probs = append(probs, fmt.Sprintf("partition %d active on %s and %s", ri.Partition, pl.active.name, n.name))
				}
				pl.active = n
			case iq.RoleStandby:
				pl.standbys = append(pl.standbys, n)
			default:
				probs = append(probs, fmt.Sprintf("partition %d: %s replica on %s", ri.Partition, ri.Role, n.name))
			}
			lay[ri.Partition] = pl
		}
	}
	if tasks != c.allTasks() {
		probs = append(probs, fmt.Sprintf("%d of %d tasks running", tasks, c.allTasks()))
	}
	for p := range c.partitions {
		pl := lay[p]
		if pl.active == nil || len(pl.standbys) != k {
			probs = append(probs, fmt.Sprintf("partition %d: active %v, %d standbys, want %d", p, pl.active != nil, len(pl.standbys), k))
			continue
		}
		var sb []string
		for _, s := range pl.standbys {
			sb = append(sb, s.addr)
		}
		slices.Sort(sb)
		for _, n := range nodes {
			km, err := n.q.PartitionMetadata(countsStore, p)
			if err != nil {
				probs = append(probs, fmt.Sprintf("%s: metadata of partition %d: %v", n.name, p, err))
				continue
			}
			got := slices.Sorted(slices.Values(km.Standbys))
			if km.Active != pl.active.addr || !slices.Equal(got, sb) || len(km.Warmups) > 0 {
				probs = append(probs, fmt.Sprintf("%s routes partition %d to %+v, replicas are active %s standbys %v", n.name, p, km, pl.active.addr, sb))
			}
		}
	}
	return lay, probs
}

// iqWaitLayout waits for the settled layout with k standbys per partition.
func (c *cluster) iqWaitLayout(t *testing.T, nodes []*iqNode, k int) iqLayout {
	t.Helper()
	var lay iqLayout
	waitFor(t, settleTimeout, fmt.Sprintf("one active and %d standbys per counts partition", k), func() (bool, string) {
		var probs []string
		lay, probs = c.iqLayoutProblems(nodes, k)
		return len(probs) == 0, strings.Join(probs, "; ")
	})
	return lay
}

// iqWaitCurrent waits until, in the settled layout, every replica of every
// counts partition is at the end of its changelog.
func (c *cluster) iqWaitCurrent(t *testing.T, nodes []*iqNode, k int) iqLayout {
	t.Helper()
	var lay iqLayout
	cl := changelogTopic("wc")
	waitFor(t, settleTimeout, "every counts replica at its changelog's end, with a known age", func() (bool, string) {
		var probs []string
		if lay, probs = c.iqLayoutProblems(nodes, k); len(probs) > 0 {
			return false, strings.Join(probs, "; ")
		}
		ends := c.endOffsets(t, cl)[cl]
		for p, pl := range lay {
			for _, n := range append([]*iqNode{pl.active}, pl.standbys...) {
				ri, _ := n.replica(p)
				if ri.Position != ends[p] || ri.Lag != 0 {
					return false, fmt.Sprintf("partition %d on %s: %s at %d lag %d, changelog end %d", p, n.name, ri.Role, ri.Position, ri.Lag, ends[p])
				}
				// Current means able to vouch for its age too: a standby
				// knows it once its instance has seen the active's commits.
				if _, known := ri.Age(); !known {
					return false, fmt.Sprintf("partition %d on %s: %s age not known yet (input committed %s ago)", p, n.name, ri.Role, ri.InputCommittedAgo)
				}
			}
		}
		return true, ""
	})
	return lay
}

// iqWaitReplica waits until the node holds partition p in a state ok accepts,
// and returns it.
func iqWaitReplica(t *testing.T, n *iqNode, p int32, timeout time.Duration, what string, ok func(iq.ReplicaInfo) bool) iq.ReplicaInfo {
	t.Helper()
	var ri iq.ReplicaInfo
	waitFor(t, timeout, fmt.Sprintf("%s: partition %d %s", n.name, p, what), func() (bool, string) {
		var held bool
		ri, held = n.replica(p)
		return held && ok(ri), fmt.Sprintf("held %v: %+v", held, ri)
	})
	return ri
}

// iqChangelogGate holds back every fetch of one changelog partition: standbys
// stop following it and restorations stop reading it, while writes, offset
// listings and the group go on. The broker answers the held fetches with a
// retriable error, which the readers retry after a back-off, as they would
// against a partition whose leader is moving.
type iqChangelogGate struct {
	h    *kfake.FaultHandle
	once sync.Once
}

func (c *cluster) iqCloseGate(t *testing.T, p int32) *iqChangelogGate {
	t.Helper()
	g := &iqChangelogGate{h: c.b.Cluster().Fault(kfake.Fault{
		Keys:       []kmsg.Key{kmsg.Fetch},
		Topic:      changelogTopic("wc"),
		Partitions: []int32{p},
		Err:        kerr.OffsetNotAvailable,
		Count:      -1,
	})}
	t.Cleanup(g.open)
	return g
}

// open lets fetches through again.
func (g *iqChangelogGate) open() { g.once.Do(g.h.Remove) }

// hits counts the fetches held back so far.
func (g *iqChangelogGate) hits() int { return g.h.Hits() }

// iqAnswer is any answer of the query API, decoded loosely enough to hold
// the success and the error shapes.
type iqAnswer struct {
	Status    int             `json:"-"`
	Raw       string          `json:"-"`
	Key       string          `json:"key"`
	Value     json.RawMessage `json:"value"`
	Partition *int32          `json:"partition"`
	ServedBy  *struct {
		Host string `json:"host"`
		Role string `json:"role"`
		// Position and Lag are null (nil) when the replica cannot vouch
		// for them: rebuilding, or a lag the broker has not confirmed.
		Position   *int64 `json:"position"`
		Lag        *int64 `json:"lag"`
		Rebuilding bool   `json:"rebuilding"`
	} `json:"served_by"`
	Error  string  `json:"error"`
	Reason string  `json:"reason"`
	Role   *string `json:"role"`
	Lag    *int64  `json:"lag"`
	Tried  []struct {
		Host   string `json:"host"`
		Error  string `json:"error"`
		Reason string `json:"reason"`
	} `json:"tried"`
	// Metadata answers.
	Active   *string  `json:"active"`
	Standbys []string `json:"standbys"`
}

// orMinus1 is *p, or -1 (unknown, as iq.ReplicaInfo says it) for null.
func orMinus1(p *int64) int64 {
	if p == nil {
		return -1
	}
	return *p
}

// stable is p without the figures that move with the clock (how long ago
// the lag was confirmed, the age, how long ago the input was committed and
// the group last confirmed an active), so that tests can compare the rest
// exactly.
func stable(p iq.Provenance) iq.Provenance {
	p.LagConfirmedAgo, p.Age, p.InputCommittedAgo, p.ContactAgo = 0, 0, 0, 0
	return p
}

// count decodes the value of a key answer.
func (a iqAnswer) count() (int64, error) {
	var n int64
	err := json.Unmarshal(a.Value, &n)
	return n, err
}

func (a iqAnswer) String() string { return fmt.Sprintf("HTTP %d %s", a.Status, a.Raw) }

// iqHTTP sends query API requests; it is safe for concurrent use.
type iqHTTP struct{ hc *http.Client }

func newIQHTTP(t *testing.T) *iqHTTP {
	tr := &http.Transport{DialContext: (&net.Dialer{Timeout: time.Second}).DialContext, MaxIdleConnsPerHost: 8}
	t.Cleanup(tr.CloseIdleConnections)
	return &iqHTTP{hc: &http.Client{Transport: tr, Timeout: 5 * time.Second}}
}

// get requests path (with query parameters q) from addr. An error means no
// well-formed answer came back.
func (g *iqHTTP) get(addr, path string, q url.Values) (iqAnswer, error) {
	u := "http://" + addr + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	resp, err := g.hc.Get(u)
	if err != nil {
		return iqAnswer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return iqAnswer{}, err
	}
	a := iqAnswer{Status: resp.StatusCode, Raw: strings.TrimSpace(string(body))}
	if err := json.Unmarshal(body, &a); err != nil {
		return a, fmt.Errorf("GET %s: HTTP %d, undecodable body %q: %w", u, resp.StatusCode, body, err)
	}
	a.Status, a.Raw = resp.StatusCode, strings.TrimSpace(string(body))
	return a, nil
}

// key looks a word up over HTTP.
func (g *iqHTTP) key(addr, word string, params ...string) (iqAnswer, error) {
	return g.get(addr, "/v1/stores/"+countsStore+"/keys/"+url.PathEscape(word), iqParams(params...))
}

func iqParams(kv ...string) url.Values {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	return q
}

// iqFeeder produces lines made of a fixed set of words in the background,
// spread over the input partitions, and counts what it produced.
type iqFeeder struct {
	c      *cluster
	words  []string
	stop   chan struct{}
	exited chan struct{}

	mu       sync.Mutex
	produced map[string]int64
	batches  int
	err      error
}

func (c *cluster) iqFeed(words []string, every time.Duration) *iqFeeder {
	f := &iqFeeder{c: c, words: words, stop: make(chan struct{}), exited: make(chan struct{}), produced: make(map[string]int64)}
	go f.run(every)
	return f
}

func (f *iqFeeder) run(every time.Duration) {
	defer close(f.exited)
	tick := time.NewTicker(every)
	defer tick.Stop()
	var part int32
	for {
		select {
		case <-f.stop:
			return
		case <-tick.C:
		}
		recs := make([]*kgo.Record, 0, f.c.partitions)
		for range f.c.partitions {
			recs = append(recs, &kgo.Record{Topic: inputTopic, Partition: part, Value: []byte(strings.Join(f.words, " "))})
			part = (part + 1) % f.c.partitions
		}
		pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := f.c.cl.ProduceSync(pctx, recs...).FirstErr()
		cancel()
		f.mu.Lock()
		if err != nil {
			f.err = errors.Join(f.err, err)
		} else {
			f.batches++
			for _, w := range f.words {
				f.produced[w] += int64(len(recs))
			}
		}
		f.mu.Unlock()
	}
}

// waitBatches waits until the feeder has produced n batches since it began.
func (f *iqFeeder) waitBatches(t *testing.T, n int) {
	t.Helper()
	waitFor(t, settleTimeout, fmt.Sprintf("%d batches of input", n), func() (bool, string) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.batches >= n, fmt.Sprintf("%d batches, err %v", f.batches, f.err)
	})
}

// batchCount returns how many batches the feeder has produced.
func (f *iqFeeder) batchCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.batches
}

// halt stops the feeder and returns how often it produced each word.
func (f *iqFeeder) halt(t testing.TB) map[string]int64 {
	t.Helper()
	close(f.stop)
	<-f.exited
	f.mu.Lock()
	defer f.mu.Unlock()
	require.NoError(t, f.err)
	return f.produced
}

// iqObs is one answered query, from whichever API carried it.
type iqObs struct {
	partition int32
	host      string
	role      string
	position  int64
	lag       int64
	found     bool
	value     int64
}

// iqPoller runs a query over a list of words in a loop until halted, and
// tallies the answers and failures by phase (the test moves the phase on as
// it kills and promotes). check may flag an answer as wrong.
type iqPoller struct {
	name   string
	words  []string
	query  func(w string) (iqObs, error)
	check  func(w string, o iqObs) string
	phase  atomic.Int32
	stop   chan struct{}
	exited chan struct{}

	mu       sync.Mutex
	answers  [3]int
	failures [3]int
	// firstFailures keeps a few failures with their phase and word.
	firstFailures []string
	// roles counts answers by phase, partition and role: "1/p0/standby".
	roles map[string]int
	wrong []string
	// causes counts failures by what the replicas tried said.
	causes map[string]int
	// failSpan is when the first and the last failure of each phase
	// happened.
	failSpan [3][2]time.Time
}

func startIQPoller(name string, words []string, query func(string) (iqObs, error), check func(string, iqObs) string) *iqPoller {
	p := &iqPoller{name: name, words: words, query: query, check: check, stop: make(chan struct{}), exited: make(chan struct{}), roles: make(map[string]int), causes: make(map[string]int)}
	go p.run()
	return p
}

func (p *iqPoller) run() {
	defer close(p.exited)
	// Pacing keeps the pollers from starving the instances of the two
	// cores; a few hundred queries per second is plenty to see a gap.
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
		w := p.words[i%len(p.words)]
		ph := p.phase.Load()
		o, err := p.query(w)
		p.mu.Lock()
		if err != nil {
			p.failures[ph]++
			now := time.Now()
			if p.failSpan[ph][0].IsZero() {
				p.failSpan[ph][0] = now
			}
			p.failSpan[ph][1] = now
			p.causes[failureCause(err)]++
			if len(p.firstFailures) < 10 {
				p.firstFailures = append(p.firstFailures, fmt.Sprintf("phase %d %q: %v", ph, w, err))
			}
		} else {
			p.answers[ph]++
			p.roles[fmt.Sprintf("%d/p%d/%s", ph, o.partition, o.role)]++
			if p.check != nil {
				if msg := p.check(w, o); msg != "" && len(p.wrong) < 10 {
					p.wrong = append(p.wrong, fmt.Sprintf("phase %d %q: %s", ph, w, msg))
				}
			}
		}
		p.mu.Unlock()
	}
}

// failureCause names what made a query fail, from the attempts its error
// lists: the replicas' refusals are what tell one failover gap from another.
func failureCause(err error) string {
	msg := err.Error()
	var causes []string
	for _, c := range []struct{ needle, name string }{
		{"moving in a rebalance", "rebalancing"},
		{"not hosted here", "not hosted"},
		{"lag " + strconv.FormatInt(math.MaxInt64, 10), "restoring with unknown lag"},
		{"too stale", "too stale"},
		{"behind", "behind"},
		{"unreachable", "unreachable"},
		{"no host within staleness", "no candidate"},
	} {
		if strings.Contains(msg, c.needle) {
			causes = append(causes, c.name)
		}
	}
	if len(causes) == 0 {
		return "other"
	}
	return strings.Join(causes, "+")
}

// setPhase moves the poller on to phase ph (0, 1 or 2).
func (p *iqPoller) setPhase(ph int32) { p.phase.Store(ph) }

// waitAnswers waits until the poller has answered n queries in phase ph.
func (p *iqPoller) waitAnswers(t *testing.T, ph int32, n int) {
	t.Helper()
	waitFor(t, settleTimeout, fmt.Sprintf("%s: %d answers in phase %d", p.name, n, ph), func() (bool, string) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.answers[ph] >= n, fmt.Sprintf("answers %v, failures %v: %v", p.answers, p.failures, p.firstFailures)
	})
}

// halt stops the poller.
func (p *iqPoller) halt() {
	close(p.stop)
	<-p.exited
}

// rolesIn sums the answers of phase ph for partition part by role.
func (p *iqPoller) rolesIn(ph int32, part int32) map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int)
	prefix := fmt.Sprintf("%d/p%d/", ph, part)
	for k, n := range p.roles {
		if role, ok := strings.CutPrefix(k, prefix); ok {
			out[role] += n
		}
	}
	return out
}

func (p *iqPoller) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var spans []string
	for ph, sp := range p.failSpan {
		if !sp[0].IsZero() {
			spans = append(spans, fmt.Sprintf("phase %d: %s", ph, sp[1].Sub(sp[0]).Round(time.Millisecond)))
		}
	}
	return fmt.Sprintf("%s: answers by phase %v, failures by phase %v over %v, by cause %v, first failures %v, wrong %v", p.name, p.answers, p.failures, spans, p.causes, p.firstFailures, p.wrong)
}

// clientObs turns a routing client's answer into an observation.
func clientObs(res iq.Result[int64], err error) (iqObs, error) {
	if err != nil {
		return iqObs{}, err
	}
	pv := res.Provenance
	return iqObs{partition: pv.Partition, host: pv.Host, role: pv.Role.String(), position: pv.Position, lag: pv.Lag, found: res.Found, value: res.Value}, nil
}

// httpObs turns an HTTP key answer into an observation; anything but a 200
// or a 404 with its provenance is a failure.
func httpObs(a iqAnswer, err error) (iqObs, error) {
	if err != nil {
		return iqObs{}, err
	}
	if (a.Status != http.StatusOK && a.Status != http.StatusNotFound) || a.ServedBy == nil || a.Partition == nil {
		return iqObs{}, errors.New(a.String())
	}
	o := iqObs{partition: *a.Partition, host: a.ServedBy.Host, role: a.ServedBy.Role, position: orMinus1(a.ServedBy.Position), lag: orMinus1(a.ServedBy.Lag), found: a.Status == http.StatusOK}
	if o.found {
		n, err := a.count()
		if err != nil {
			return iqObs{}, fmt.Errorf("%s: value: %w", a, err)
		}
		o.value = n
	}
	return o, nil
}

package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/broker"
	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// Benchmarks (g) and (h) measure queries through failures and rebalances on
// in-process word-count clusters, each instance serving the HTTP query API
// on a loopback port it advertises as its endpoint:
//
//	(g) availability through the hard stop of each of three instances in
//	    turn, queried continuously under age:5s: the share of answers that
//	    are correct (a count equal to the input's, a 404 only for a word the
//	    input does not contain) and the share of queries answered;
//	(h) p99 of local point queries (the in-process Querier of one instance)
//	    while a rebalance moves tasks, against the p99 of the same cluster
//	    steady, in the same run.

const (
	avPartitions = 6
	avInput      = "av-text"
	avCounts     = "counts"
)

// avNode is one word-count instance and its query server. A killed node
// keeps its state directory and address, and starts again on them.
type avNode struct {
	name string
	dir  string
	addr string // host:port, fixed after the first start
	app  *runtime.App
	api  *iq.Server
	srv  *http.Server
	q    *iq.Querier
}

// avCluster is an embedded broker and the nodes of one application on it.
type avCluster struct {
	cfg     *config
	b       *broker.Broker
	cl      *kgo.Client
	adm     *kadm.Client
	dir     string
	appID   string
	rcfg    runtime.Config // the settings every node shares
	mu      sync.Mutex
	next    int32 // round-robin input partition
	nodes   []*avNode
	created []*avNode // every node ever started, closed at the end
}

func newAVCluster(ctx context.Context, cfg *config, appID string, rcfg runtime.Config) (*avCluster, error) {
	b, err := broker.Start(broker.Config{Partitions: avPartitions})
	if err != nil {
		return nil, err
	}
	c := &avCluster{cfg: cfg, b: b, appID: appID, rcfg: rcfg}
	c.cl, err = kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond))
	if err == nil {
		c.adm = kadm.NewClient(c.cl)
		err = createTopics(ctx, c.adm, avPartitions, avInput)
	}
	if err == nil {
		c.dir, err = os.MkdirTemp("", "eddybench-"+appID+"-")
	}
	if err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// close stops every node still running, then the broker.
func (c *avCluster) close() {
	for _, n := range c.created {
		n.stop()
	}
	if c.cl != nil {
		c.cl.Close()
	}
	c.b.Close()
	if c.dir != "" {
		os.RemoveAll(c.dir)
	}
}

func avTopology() (*topology.Topology, error) {
	bld := topology.NewBuilder()
	text := topology.Stream(bld, avInput, serde.String, serde.String)
	words := topology.FlatMapValues(text, func(_, line string) []string { return appendWords(nil, line) })
	topology.GroupBy(words, func(_, w string) string { return w }, "words", serde.String, serde.String).Count(avCounts)
	return bld.Build()
}

// start starts a new node or, given a stopped one, the same node again on
// its state directory and address.
// startSettled starts n instances and waits for their first settled
// layout, one standby per task.
func (c *avCluster) startSettled(ctx context.Context, n int) ([]*avNode, error) {
	nodes := make([]*avNode, n)
	for i := range nodes {
		var err error
		if nodes[i], err = c.start(ctx, nil); err != nil {
			return nil, err
		}
	}
	if err := c.waitSettled(ctx, nodes, 1, 2*time.Minute, "first layout"); err != nil {
		return nil, err
	}
	return nodes, nil
}

func (c *avCluster) start(ctx context.Context, n *avNode) (*avNode, error) {
	if n == nil {
		n = &avNode{name: fmt.Sprintf("i%d", len(c.created)+1), addr: "127.0.0.1:0"}
		n.dir = filepath.Join(c.dir, n.name)
		c.created = append(c.created, n)
	}
	ln, err := net.Listen("tcp", n.addr)
	if err != nil {
		return nil, err
	}
	n.addr = ln.Addr().String()
	topo, err := avTopology()
	if err != nil {
		ln.Close()
		return nil, err
	}
	rc := c.rcfg
	rc.ApplicationID, rc.Brokers, rc.StateDir, rc.Endpoint = c.appID, c.b.Addrs(), n.dir, n.addr
	rc.Logger = c.cfg.log.With("instance", n.name)
	app, err := runtime.New(topo, rc)
	if err == nil {
		err = app.Start(ctx)
	}
	if err != nil {
		ln.Close()
		return nil, err
	}
	n.app, n.q = app, iq.NewQuerier(app.Queries())
	n.api = iq.NewServer(app.Queries(), iq.ServerConfig{}, iq.CodecFor(avCounts, serde.String, serde.Int64, nil))
	n.srv = &http.Server{Handler: n.api, ReadHeaderTimeout: 5 * time.Second}
	go n.srv.Serve(ln)
	return n, nil
}

// kill stops n as a crash would: its listener and connections go away and
// the instance is killed (network cut, no commit, no leave-group).
func (n *avNode) kill() {
	n.srv.Close()
	n.api.Close()
	n.app.Kill()
	n.app = nil
}

// stop closes n cleanly, leaving the group, if it runs.
func (n *avNode) stop() {
	if n.app == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n.srv.Shutdown(ctx)
	n.api.Close()
	n.app.Close(ctx)
	n.app = nil
}

// produce sends lines round-robin over the input partitions and waits for
// their acknowledgement.
func (c *avCluster) produce(ctx context.Context, lines []string) error {
	p := &producer{cl: c.cl}
	c.mu.Lock()
	for _, l := range lines {
		p.send(ctx, &kgo.Record{Topic: avInput, Partition: c.next, Value: []byte(l)})
		c.next = (c.next + 1) % avPartitions
	}
	c.mu.Unlock()
	_, err := p.flush(ctx)
	return err
}

// settledProblem returns why the live nodes are not settled, or "": each
// running every task it holds under an assignment that plans no further
// rebalance, each counts partition with one active and standbys standbys,
// all at lag 0, and every node routing each partition to its active.
func (c *avCluster) settledProblem(live []*avNode, standbys int) string {
	active := make(map[int32]string)
	nStandby := make(map[int32]int)
	for _, n := range live {
		if err := n.app.Err(); err != nil {
			return fmt.Sprintf("%s failed: %v", n.name, err)
		}
		a, ok := n.app.Assignment()
		if !ok {
			return n.name + " has no assignment"
		}
		if len(a.Warmup) > 0 || a.NextProbingRebalanceMs != 0 {
			return fmt.Sprintf("%s: warmups %v, probing rebalance planned", n.name, a.Warmup)
		}
		for _, t := range n.app.Tasks() {
			if t.State != task.Running {
				return fmt.Sprintf("%s: task %v %v", n.name, t.ID, t.State)
			}
		}
		for _, ri := range n.q.LocalReplicas() {
			if ri.Store != avCounts {
				continue
			}
			if ri.Lag != 0 {
				return fmt.Sprintf("%s: %s of partition %d at lag %d", n.name, ri.Role, ri.Partition, ri.Lag)
			}
			switch ri.Role {
			case iq.RoleActive:
				if active[ri.Partition] != "" {
					return fmt.Sprintf("partition %d active twice", ri.Partition)
				}
				active[ri.Partition] = n.addr
			case iq.RoleStandby:
				nStandby[ri.Partition]++
			default:
				return fmt.Sprintf("%s: %s replica of partition %d", n.name, ri.Role, ri.Partition)
			}
		}
	}
	for p := range int32(avPartitions) {
		if active[p] == "" || nStandby[p] != standbys {
			return fmt.Sprintf("partition %d: active %q, %d standbys", p, active[p], nStandby[p])
		}
		for _, n := range live {
			km, err := n.q.PartitionMetadata(avCounts, p)
			if err != nil {
				return err.Error()
			}
			if km.Active != active[p] {
				return fmt.Sprintf("%s routes partition %d to %q, active on %s", n.name, p, km.Active, active[p])
			}
		}
	}
	return ""
}

// waitSettled waits for settledProblem to be "", at most limit.
func (c *avCluster) waitSettled(ctx context.Context, live []*avNode, standbys int, limit time.Duration, what string) error {
	wctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var last string
	err := waitFor(wctx, 50*time.Millisecond, func() (bool, error) {
		last = c.settledProblem(live, standbys)
		return last == "", nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w (last: %s)", what, err, last)
	}
	return nil
}

// avCorpus generates n lines and their reference word counts.
func avCorpus(seed uint64, n int, extra func(i int) string) ([]string, map[string]int64) {
	gen := newLineGen(seed)
	ref := make(map[string]int64)
	lines := make([]string, n)
	var ws []string
	for i := range lines {
		lines[i] = gen.line()
		if extra != nil {
			lines[i] += " " + extra(i)
		}
		ws = appendWords(ws[:0], lines[i])
		for _, w := range ws {
			ref[w]++
		}
	}
	return lines, ref
}

// avAnswer is a key lookup's HTTP answer.
type avAnswer struct {
	status   int
	Value    *int64    `json:"value"`
	ServedBy *struct{} `json:"served_by"`
	Reason   string    `json:"reason"`
	Error    string    `json:"error"`
	Tried    []struct {
		Reason string `json:"reason"`
	} `json:"tried"`
}

// reasons is the refusal's reason and those of the hosts it tried, such as
// "not_available[unreachable too_stale]".
func (a avAnswer) reasons() string {
	var rs []string
	for _, t := range a.Tried {
		rs = append(rs, t.Reason)
	}
	return fmt.Sprintf("%s%v", a.Reason, rs)
}

func avLookup(hc *http.Client, addr, word, staleness string) (avAnswer, error) {
	resp, err := hc.Get("http://" + addr + "/v1/stores/" + avCounts + "/keys/" + url.PathEscape(word) +
		"?staleness=" + url.QueryEscape(staleness) + "&route=true")
	if err != nil {
		return avAnswer{}, err
	}
	defer resp.Body.Close()
	a := avAnswer{status: resp.StatusCode}
	body, err := io.ReadAll(resp.Body)
	if err == nil {
		err = json.Unmarshal(body, &a)
	}
	return a, err
}

// avTally counts the outcomes of the availability load.
type avTally struct {
	mu             sync.Mutex
	asked, correct int
	wrong          int
	refused        map[string]int // "HTTP 503 too_stale" → count
	// refusedAs is one refusal of each kind: the instance asked and the
	// error it gave.
	refusedAs map[string]string
	transport int
	examples  []string // of wrong answers
	lastOK    map[string]time.Time
	maxGap    time.Duration
}

// forget drops what the tally remembers of answers through via, whose
// downtime is not a gap in availability: it was not asked meanwhile.
func (t *avTally) forget(via string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.lastOK {
		if strings.HasPrefix(k, via+"/") {
			delete(t.lastOK, k)
		}
	}
}

func (t *avTally) record(via, word string, ref map[string]int64, a avAnswer, err error) {
	now := time.Now()
	want, present := ref[word]
	t.mu.Lock()
	defer t.mu.Unlock()
	t.asked++
	wrong := func(what string) {
		t.wrong++
		if len(t.examples) < 5 {
			t.examples = append(t.examples, fmt.Sprintf("%q via %s: %s", word, via, what))
		}
	}
	switch {
	case err != nil && a.status == 0:
		t.transport++
		return
	case a.status == http.StatusOK && a.Value != nil && present && *a.Value == want,
		a.status == http.StatusNotFound && a.ServedBy != nil && !present:
		t.correct++
	case a.status == http.StatusOK && a.Value != nil:
		wrong(fmt.Sprintf("count %d, the input has %d", *a.Value, want))
	case a.status == http.StatusNotFound && a.ServedBy != nil:
		wrong(fmt.Sprintf("not found, the input has %d", want))
	case a.status == http.StatusServiceUnavailable || a.status == http.StatusConflict || a.status == http.StatusTooManyRequests:
		kind := fmt.Sprintf("HTTP %d %s", a.status, a.reasons())
		t.refused[kind]++
		if _, seen := t.refusedAs[kind]; !seen {
			t.refusedAs[kind] = via + ": " + a.Error
		}
		return
	default:
		wrong(fmt.Sprintf("HTTP %d %s (%v)", a.status, a.Reason, err))
	}
	k := via + "/" + word
	if prev, ok := t.lastOK[k]; ok {
		t.maxGap = max(t.maxGap, now.Sub(prev))
	}
	t.lastOK[k] = now
}

// avClientTally counts the routing client's answers under age:5s.
type avClientTally struct {
	mu                     sync.Mutex
	asked, answered, wrong int
	refusal                string
}

func (t *avClientTally) record(word string, ref map[string]int64, res iq.Result[int64], err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.asked++
	if err != nil {
		if t.refusal == "" {
			t.refusal = err.Error()
		}
		return
	}
	t.answered++
	want, present := ref[word]
	if res.Found != present || (present && res.Value != want) {
		t.wrong++
	}
}

// benchAvailability is (g).
func benchAvailability(ctx context.Context, cfg *config) ([]row, error) {
	c, err := newAVCluster(ctx, cfg, "avail", runtime.Config{
		NumStandbys:         1,
		SessionTimeout:      cfg.sessionTimeout,
		ProcessingGuarantee: runtime.ExactlyOnce,
	})
	if err != nil {
		return nil, err
	}
	defer c.close()
	nodes, err := c.startSettled(ctx, 3)
	if err != nil {
		return nil, err
	}
	lines, ref := avCorpus(cfg.seed, 20_000, nil)
	if err := c.produce(ctx, lines); err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	defer hc.CloseIdleConnections()
	words := slices.Sorted(maps.Keys(ref))
	err = waitFor(ctx, 200*time.Millisecond, func() (bool, error) {
		for _, w := range words {
			a, err := avLookup(hc, nodes[0].addr, w, "active")
			if err != nil || a.status != http.StatusOK || a.Value == nil || *a.Value != ref[w] {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("the input was not counted: %w", err)
	}
	if err := c.waitSettled(ctx, nodes, 1, time.Minute, "replicas current"); err != nil {
		return nil, err
	}
	cfg.logf("%d lines, %d words, %d distinct, counted; every replica current", len(lines), sumRef(ref), len(ref))

	// The sample: the forty most frequent words, forty others and twenty
	// the input does not contain.
	rng := rand.New(rand.NewPCG(cfg.seed, 0xa7a11))
	byCount := slices.SortedFunc(maps.Keys(ref), func(a, b string) int { return cmp.Or(cmp.Compare(ref[b], ref[a]), strings.Compare(a, b)) })
	sample := slices.Clone(byCount[:40])
	for _, i := range rng.Perm(len(byCount) - 40)[:40] {
		sample = append(sample, byCount[40+i])
	}
	for i := 0; len(sample) < 100; i++ {
		if w := "zq" + strconv.Itoa(i); ref[w] == 0 {
			sample = append(sample, w)
		}
	}

	// age:5s is the bound the issue holds to its targets; lag:10000 is
	// asked alongside, for information, in alternate queries.
	bounds := []string{"age:5s", "lag:10000"}
	tallies := make(map[string]*avTally)
	for _, b := range bounds {
		tallies[b] = &avTally{refused: make(map[string]int), refusedAs: make(map[string]string), lastOK: make(map[string]time.Time)}
	}
	// gate is held shared by each query from choosing its instance to its
	// answer, so that setLive returns only once no query to a dropped
	// instance is in flight: the instance may be killed right after.
	var gate sync.RWMutex
	var live atomic.Pointer[[]*avNode]
	setLive := func(ns []*avNode) {
		gate.Lock()
		live.Store(&ns)
		gate.Unlock()
	}
	setLive(nodes)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var seq atomic.Uint64
	// About 300 queries a second, through every live instance in turn.
	for range 3 {
		wg.Go(func() {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				gate.RLock()
				i := int(seq.Add(1))
				ns := *live.Load()
				b := bounds[i%len(bounds)]
				n := ns[i/len(bounds)%len(ns)]
				w := sample[i/(len(bounds)*len(ns))%len(sample)]
				a, err := avLookup(hc, n.addr, w, b)
				tallies[b].record(n.name, w, ref, a, err)
				gate.RUnlock()
			}
		})
	}
	// And as an application would query the cluster: through the routing
	// client, which knows every instance and asks another when one cannot
	// answer (a starting instance without an assignment refuses at once).
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.addr
	}
	qc, err := iq.NewClient(addrs, iq.ClientOptions{Timeout: 2 * time.Second})
	if err != nil {
		return nil, err
	}
	defer qc.Close()
	var client avClientTally
	wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			w := sample[i%len(sample)]
			qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			res, err := iq.ClientGet[string, int64](qctx, qc, avCounts, w, serde.String, iq.WithStaleness(iq.MaxAge(5*time.Second)))
			cancel()
			client.record(w, ref, res, err)
		}
	})
	halt := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer halt()

	var takeovers []time.Duration
	for i, victim := range nodes {
		// Let the load run on the settled cluster between kills.
		time.Sleep(2 * time.Second)
		survivors := slices.Delete(slices.Clone(nodes), i, i+1)
		setLive(survivors)
		killed := time.Now()
		victim.kill()
		if err := c.waitSettled(ctx, survivors, 1, 2*time.Minute, "take-over after killing "+victim.name); err != nil {
			return nil, err
		}
		takeovers = append(takeovers, time.Since(killed))
		if _, err := c.start(ctx, victim); err != nil {
			return nil, err
		}
		for _, t := range tallies {
			t.forget(victim.name)
		}
		setLive(nodes)
		if err := c.waitSettled(ctx, nodes, 1, 2*time.Minute, "layout after restarting "+victim.name); err != nil {
			return nil, err
		}
		cfg.logf("killed %s: survivors settled and current after %s; restarted, settled after %s",
			victim.name, takeovers[i].Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
	}
	time.Sleep(2 * time.Second)
	halt()

	fmt.Fprintf(cfg.out, "(g) availability through kill -9 of each of 3 instances in turn (standbys 1, session timeout %s):\n", cfg.sessionTimeout)
	var rows []row
	for _, b := range bounds {
		t := tallies[b]
		t.mu.Lock()
		answers := t.correct + t.wrong
		correctPct := 100 * float64(t.correct) / float64(max(answers, 1))
		answeredPct := 100 * float64(answers) / float64(max(t.asked, 1))
		fmt.Fprintf(cfg.out, "  %s: %d queries: %d answers, %d correct (%.3f%%), %d wrong; %d refused %v; %d without an HTTP answer\n",
			b, t.asked, answers, t.correct, correctPct, t.wrong, sumInts(t.refused), sortedTally(t.refused), t.transport)
		for _, kind := range slices.Sorted(maps.Keys(t.refusedAs)) {
			fmt.Fprintf(cfg.out, "    e.g. %s from %s\n", kind, t.refusedAs[kind])
		}
		for _, e := range t.examples {
			fmt.Fprintf(cfg.out, "    wrong: %s\n", e)
		}
		fmt.Fprintf(cfg.out, "    longest a word went without a correct answer through one instance: %s\n", t.maxGap.Round(time.Millisecond))
		rows = append(rows, row{name: "(g) answers correct, " + b, unit: "%", eddy: correctPct, target: "100%", hasCheck: true, pass: t.wrong == 0 && answers > 0})
		rows = append(rows, row{name: "(g) answered via each instance, " + b, unit: "%", eddy: answeredPct, target: "info"})
		t.mu.Unlock()
	}
	client.mu.Lock()
	clientPct := 100 * float64(client.answered) / float64(max(client.asked, 1))
	fmt.Fprintf(cfg.out, "  routing client, age:5s: %d queries: %d answers (%.3f%%), %d wrong\n", client.asked, client.answered, clientPct, client.wrong)
	if client.refusal != "" {
		fmt.Fprintf(cfg.out, "    e.g. refused: %s\n", client.refusal)
	}
	rows = append(rows,
		row{name: "(g) client answers correct, age:5s", unit: "%", eddy: 100 * float64(client.answered-client.wrong) / float64(max(client.answered, 1)), target: "100%", hasCheck: true, pass: client.wrong == 0 && client.answered > 0},
		row{name: "(g) client queries answered, age:5s", unit: "%", eddy: clientPct, target: "≥ 99.9%", hasCheck: true, pass: clientPct >= 99.9})
	client.mu.Unlock()
	fmt.Fprintf(cfg.out, "  kill → survivors settled, every replica current: %v\n", roundAll(takeovers))
	fmt.Fprintf(cfg.out, "  method = three in-process instances (exactly-once), %d-word sample (%d absent) queried over HTTP\n"+
		"           through every live instance with route=true, ~300 queries/s alternating the bounds; Kill() cuts the\n"+
		"           instance's network and its query server; each victim restarts on its state directory once the\n"+
		"           survivors have settled. A 404 is correct only for an absent word; refusals (503/409/429) are not answers.\n"+
		"           Asked directly, a restarted instance refuses (503, Retry-After) until its first assignment; the\n"+
		"           routing client (iq.Client over all three addresses, ~100 queries/s) asks another instance then.\n",
		len(sample), 20)
	return rows, nil
}

func sumRef(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

func sumInts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func sortedTally(m map[string]int) string {
	ks := slices.SortedFunc(maps.Keys(m), func(a, b string) int { return cmp.Or(cmp.Compare(m[b], m[a]), strings.Compare(a, b)) })
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// latencies collects query latencies by phase.
type latencies struct {
	mu     sync.Mutex
	phase  int
	byPh   [2][]time.Duration
	errsBy [2]int
}

func (l *latencies) add(d time.Duration, err error) {
	l.mu.Lock()
	l.byPh[l.phase] = append(l.byPh[l.phase], d)
	if err != nil {
		l.errsBy[l.phase]++
	}
	l.mu.Unlock()
}

// begin drops the latencies gathered so far and files those to come under
// phase ph.
func (l *latencies) begin(ph int) {
	l.mu.Lock()
	l.phase, l.byPh, l.errsBy = ph, [2][]time.Duration{}, [2]int{}
	l.mu.Unlock()
}

// took returns the latencies gathered in phase ph since begin, and the
// errors among them.
func (l *latencies) took(ph int) ([]time.Duration, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.byPh[ph]), l.errsBy[ph]
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// benchRebalanceLatency is (h).
func benchRebalanceLatency(ctx context.Context, cfg *config) ([]row, error) {
	const steadyFor = 10 * time.Second
	fmt.Fprintf(cfg.out, "\n(h) local point-query latency while a rebalance moves tasks: steady windows of %s against\n"+
		"  rebalancing windows in which a fourth instance joins and settles, then leaves cleanly and the three settle\n", steadyFor)
	c, err := newAVCluster(ctx, cfg, "rebal", runtime.Config{
		NumStandbys:              1,
		SessionTimeout:           cfg.sessionTimeout,
		ProbingRebalanceInterval: 2 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	defer c.close()
	nodes, err := c.startSettled(ctx, 3)
	if err != nil {
		return nil, err
	}
	// Distinct keys beyond the vocabulary, so that a moving task has a
	// store worth restoring.
	lines, ref := avCorpus(cfg.seed, 100_000, func(i int) string { return "k" + strconv.Itoa(i) })
	if err := c.produce(ctx, lines); err != nil {
		return nil, err
	}
	repart := c.appID + "-words-repartition"
	err = waitFor(ctx, 200*time.Millisecond, func() (bool, error) {
		for _, topic := range []string{avInput, repart} {
			if ok, err := groupCaughtUp(ctx, c.adm, c.appID, topic); !ok || err != nil {
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("the input was not counted: %w", err)
	}
	if err := c.waitSettled(ctx, nodes, 1, time.Minute, "replicas current"); err != nil {
		return nil, err
	}
	cfg.logf("%d lines, %d distinct keys counted; every replica current", len(lines), len(ref))
	keys := slices.Sorted(maps.Keys(ref))

	// Input keeps arriving throughout, so that commits write the stores in
	// both phases alike.
	feedCtx, stopFeed := context.WithCancel(ctx)
	defer stopFeed()
	var feed sync.WaitGroup
	feed.Go(func() {
		gen := newLineGen(cfg.seed + 1)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		p := &producer{cl: c.cl}
		for {
			select {
			case <-feedCtx.Done():
				return
			case <-tick.C:
			}
			for range 10 {
				c.mu.Lock()
				part := c.next
				c.next = (c.next + 1) % avPartitions
				c.mu.Unlock()
				p.send(feedCtx, &kgo.Record{Topic: avInput, Partition: part, Value: []byte(gen.line())})
			}
		}
	})
	defer feed.Wait()

	// One query a millisecond against node 0's own replicas, whatever
	// their role, so that the figure is the local path's latency and not
	// a saturated machine's.
	lat := &latencies{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	q := nodes[0].q
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(cfg.seed, 0x9))
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			k := keys[rng.IntN(len(keys))]
			start := time.Now()
			_, err := iq.Get(ctx, q, avCounts, k, serde.String, serde.Int64, iq.WithStaleness(iq.AnyStaleness()))
			if errors.Is(err, iq.ErrNotHostedHere) {
				err = nil // not an error of the local path: the key lives elsewhere
			}
			lat.add(time.Since(start), err)
		}
	})
	halt := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer halt()

	// Steady and rebalancing windows alternate (see alternate); each
	// side's figure is the p99 of its window.
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) }
	var p999s, p999r spread
	window := func(ph int, i int, name string, during func() error) (float64, error) {
		lat.begin(ph)
		began := time.Now()
		if err := during(); err != nil {
			return 0, err
		}
		ds, errs := lat.took(ph)
		cfg.logf("%s run %d: %s, %d queries (%d errors), p50 %s p99 %s p99.9 %s max %s", name, i, time.Since(began).Round(time.Millisecond),
			len(ds), errs, quantile(ds, 0.5), quantile(ds, 0.99), quantile(ds, 0.999), quantile(ds, 1))
		if i > 0 {
			if ph == 0 {
				p999s = append(p999s, us(quantile(ds, 0.999)))
			} else {
				p999r = append(p999r, us(quantile(ds, 0.999)))
			}
		}
		return us(quantile(ds, 0.99)), nil
	}
	runs, err := alternate(cfg,
		side{"steady p99 (µs)", func(i int) (float64, error) {
			return window(0, i, "steady", func() error { time.Sleep(steadyFor); return nil })
		}},
		side{"rebalancing p99 (µs)", func(i int) (float64, error) {
			return window(1, i, "rebalancing", func() error {
				fourth, err := c.start(ctx, nil)
				if err != nil {
					return err
				}
				four := append(slices.Clone(nodes), fourth)
				if err := c.waitSettled(ctx, four, 1, 3*time.Minute, "layout with a fourth instance"); err != nil {
					return err
				}
				fourth.stop()
				return c.waitSettled(ctx, nodes, 1, 3*time.Minute, "layout after the fourth left")
			})
		}})
	halt()
	stopFeed()
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.out, "  method = three in-process instances (standbys 1, probing rebalances every 2 s) under 1,000 lines/s of input;\n"+
		"           one query a millisecond through instance i1's in-process Querier (staleness any) for a random key of %d;\n"+
		"           a key not hosted on i1 is a fast refusal, timed like an answer.\n", len(keys))
	p99 := ratioRow("(h) query p99 rebalancing", "µs", runs[1], runs[0], 0)
	p99.target, p99.pass = "≤ 2.0×", p99.eddy <= 2*max(p99.base, 1)
	p999 := infoRow("(h) query p99.9 rebalancing", "µs", p999r, p999s)
	p999.target = "-"
	return []row{p99, p999}, nil
}

package procs

// Helpers of the availability test (availability_test.go): demo instances
// with a short session timeout, a query load that checks every answer
// against a fixed reference, and the replicas' lags as /v1/lags reports them.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eddystreams/eddy/integration/fixture"

	"github.com/stretchr/testify/require"
)

// availAnswer is the query API's answer to a key lookup, with the
// provenance the availability test reports.
type availAnswer struct {
	status    int
	Value     *int64 `json:"value"`
	Partition int32  `json:"partition"`
	ServedBy  *struct {
		Host string `json:"host"`
		Role string `json:"role"`
		// Position and Lag are null when the replica cannot vouch for
		// them (rebuilding, lag not confirmed).
		Position *int64 `json:"position"`
		Lag      *int64 `json:"lag"`
	} `json:"served_by"`
	Error  string `json:"error"`
	Reason string `json:"reason"`
	Tried  []struct {
		Reason string `json:"reason"`
	} `json:"tried"`
}

// reasons is the refusal's reason and those of the hosts it tried, such as
// "not_available[unreachable too_stale]".
func (a availAnswer) reasons() string {
	var rs []string
	for _, t := range a.Tried {
		rs = append(rs, t.Reason)
	}
	return fmt.Sprintf("%s%v", a.Reason, rs)
}

func (a availAnswer) provenance() string {
	if a.ServedBy == nil {
		return "no served_by"
	}
	return fmt.Sprintf("%s %s of partition %d at position %s, lag %s",
		a.ServedBy.Role, a.ServedBy.Host, a.Partition, orUnknown(a.ServedBy.Position), orUnknown(a.ServedBy.Lag))
}

func orUnknown(p *int64) string {
	if p == nil {
		return "unknown"
	}
	return fmt.Sprint(*p)
}

// lookup asks addr for word under the staleness bound, routing on.
func (h *procHTTP) lookup(addr, word, staleness string) (availAnswer, error) {
	u := "http://" + addr + "/v1/stores/" + fixture.CountsStore + "/keys/" + url.PathEscape(word) +
		"?staleness=" + url.QueryEscape(staleness) + "&route=true"
	resp, err := h.hc.Get(u)
	if err != nil {
		return availAnswer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return availAnswer{}, err
	}
	a := availAnswer{status: resp.StatusCode}
	if err := json.Unmarshal(body, &a); err != nil {
		return a, fmt.Errorf("HTTP %d, undecodable %q: %w", resp.StatusCode, body, err)
	}
	return a, nil
}

// replicaLag is one entry of an instance's /v1/lags.
type replicaLag struct {
	Store     string `json:"store"`
	Partition int32  `json:"partition"`
	Role      string `json:"role"`
	Position  *int64 `json:"position"`
	End       int64  `json:"end"`
	Lag       *int64 `json:"lag"` // null: unknown
}

func (h *procHTTP) lags(addr string) ([]replicaLag, error) {
	resp, err := h.hc.Get("http://" + addr + "/v1/lags")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s /v1/lags: HTTP %d", addr, resp.StatusCode)
	}
	var ls []replicaLag
	return ls, json.NewDecoder(resp.Body).Decode(&ls)
}

// replicasCurrentProblem returns why the instances' counts replicas are not
// all current, or "": each partition has one active and `standbys`
// standbys, every one at lag 0.
func replicasCurrentProblem(h *procHTTP, partitions, standbys int, insts ...*procInstance) string {
	roles := make(map[int32]map[string]int)
	for _, in := range insts {
		ls, err := h.lags(in.http)
		if err != nil {
			return err.Error()
		}
		for _, l := range ls {
			if l.Store != fixture.CountsStore {
				continue
			}
			if l.Lag == nil || *l.Lag != 0 {
				return fmt.Sprintf("%s: %s of partition %d at %s of %d, lag %s", in.name, l.Role, l.Partition, orUnknown(l.Position), l.End, orUnknown(l.Lag))
			}
			if roles[l.Partition] == nil {
				roles[l.Partition] = make(map[string]int)
			}
			roles[l.Partition][l.Role]++
		}
	}
	for p := range int32(partitions) {
		if r := roles[p]; r["active"] != 1 || r["standby"] != standbys || len(r) != 2 {
			return fmt.Sprintf("partition %d replicas %v", p, r)
		}
	}
	return ""
}

// availModes are the staleness bounds the availability load asks under.
var availModes = []string{"lag:10000", "age:5s", "active"}

// availLoad queries a sample of words, present and absent, through a
// changing set of instances under every availModes bound, and checks each
// answer against the reference counts.
type availLoad struct {
	h       *procHTTP
	want    map[string]int64 // the reference; absent words are not in it
	words   []string         // present and absent words asked
	workers int
	every   time.Duration // pause between one worker's queries

	// gate is held shared by each query from choosing its instance to its
	// answer, so that setTargets returns only once no query to a dropped
	// instance is in flight: the instance may be killed right after.
	gate    sync.RWMutex
	mu      sync.Mutex
	targets []*procInstance // instances queried
	stats   map[string]*availStats
	wrong   []string // answers contradicting the reference
	// refusals describes the first refusals under each bound, with their
	// times.
	refusals map[string][]string
	lastOK   map[string]time.Time
	maxGap   time.Duration
	gapAt    string

	next atomic.Uint64
	stop chan struct{}
	wg   sync.WaitGroup
}

// availStats are the outcomes under one staleness bound.
type availStats struct {
	asked, ok, notFound int
	refused             map[string]int // "HTTP 503 too_stale" → count
	roles               map[string]int // served_by role of answers
	transport           int            // no HTTP answer from a live instance
	example             string         // first transport error
}

func newAvailLoad(h *procHTTP, want map[string]int64, words []string, workers int, every time.Duration) *availLoad {
	l := &availLoad{h: h, want: want, words: words, workers: workers, every: every,
		stats: make(map[string]*availStats), refusals: make(map[string][]string), lastOK: make(map[string]time.Time), stop: make(chan struct{})}
	for _, m := range availModes {
		l.stats[m] = &availStats{refused: make(map[string]int), roles: make(map[string]int)}
	}
	return l
}

// setTargets replaces the instances queried. An instance that comes back
// starts afresh in the gap figures: its downtime was not a gap in answers,
// since nobody asked it meanwhile.
func (l *availLoad) setTargets(insts ...*procInstance) {
	l.gate.Lock()
	defer l.gate.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, in := range insts {
		if !slices.Contains(l.targets, in) {
			for k := range l.lastOK {
				if strings.HasPrefix(k, in.name+"/") {
					delete(l.lastOK, k)
				}
			}
		}
	}
	l.targets = slices.Clone(insts)
}

func (l *availLoad) start() {
	for range l.workers {
		l.wg.Go(func() {
			tick := time.NewTicker(l.every)
			defer tick.Stop()
			for {
				select {
				case <-l.stop:
					return
				case <-tick.C:
				}
				l.one()
			}
		})
	}
}

// halt stops the load and waits for the queries in flight.
func (l *availLoad) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// one asks the next (instance, word, bound) of a fixed rotation: the
// numbers of words, bounds and instances decide the order, not chance.
func (l *availLoad) one() {
	l.gate.RLock()
	defer l.gate.RUnlock()
	i := l.next.Add(1) - 1
	l.mu.Lock()
	if len(l.targets) == 0 {
		l.mu.Unlock()
		return
	}
	n := len(l.targets)
	in := l.targets[int(i/uint64(len(availModes)))%n]
	l.mu.Unlock()
	mode := availModes[i%uint64(len(availModes))]
	word := l.words[int(i/uint64(len(availModes)*n))%len(l.words)]
	a, err := l.h.lookup(in.http, word, mode)
	l.record(in.name, word, mode, a, err)
}

func (l *availLoad) record(via, word, mode string, a availAnswer, err error) {
	now := time.Now()
	want, present := l.want[word]
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats[mode]
	s.asked++
	bad := func(format string, args ...any) {
		l.wrong = append(l.wrong, fmt.Sprintf("%s %q via %s under %s: ", now.Format("15:04:05.000"), word, via, mode)+fmt.Sprintf(format, args...))
	}
	answered := false
	switch {
	case err != nil && a.status == 0:
		s.transport++
		if s.example == "" {
			s.example = fmt.Sprintf("%q via %s: %v", word, via, err)
		}
	case err != nil:
		bad("HTTP %d, %v", a.status, err)
	case a.status == http.StatusOK:
		switch {
		case a.Value == nil || a.ServedBy == nil:
			bad("HTTP 200 without a value or provenance")
		case !present:
			bad("count %d for a word the input does not contain, from %s", *a.Value, a.provenance())
		case *a.Value != want:
			bad("count %d, the input has %d, from %s", *a.Value, want, a.provenance())
		default:
			s.ok++
			s.roles[a.ServedBy.Role]++
			answered = true
		}
	case a.status == http.StatusNotFound && a.ServedBy != nil:
		if present {
			// Never a count of 0: the input holds the word.
			bad("404 not found, the input has %d, from %s", want, a.provenance())
		} else {
			s.notFound++
			s.roles[a.ServedBy.Role]++
			answered = true
		}
	case a.status == http.StatusServiceUnavailable || a.status == http.StatusConflict || a.status == http.StatusTooManyRequests:
		s.refused[fmt.Sprintf("HTTP %d %s", a.status, a.reasons())]++
		if len(l.refusals[mode]) < 20 {
			l.refusals[mode] = append(l.refusals[mode], fmt.Sprintf("%s %q via %s under %s: HTTP %d %s: %s", now.Format("15:04:05.000"), word, via, mode, a.status, a.reasons(), a.Error))
		}
	default:
		bad("HTTP %d %s: %s", a.status, a.Reason, a.Error)
	}
	if answered {
		k := via + "/" + mode + "/" + word
		if prev, ok := l.lastOK[k]; ok && now.Sub(prev) > l.maxGap {
			l.maxGap, l.gapAt = now.Sub(prev), fmt.Sprintf("%q via %s under %s, until %s", word, via, mode, now.Format("15:04:05.000"))
		}
		l.lastOK[k] = now
	}
}

// answered returns how many queries under mode had a correct answer.
func (l *availLoad) answered(mode string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats[mode]
	return s.ok + s.notFound
}

// waitAnswers waits until n more queries under every bound were answered.
func (l *availLoad) waitAnswers(t *testing.T, n int) {
	t.Helper()
	target := make(map[string]int)
	for _, m := range availModes {
		target[m] = l.answered(m) + n
	}
	fixture.WaitFor(t, fixture.SettleTimeout, fmt.Sprintf("%d more answers under every bound", n), func() (bool, string) {
		var short []string
		for _, m := range availModes {
			if got := l.answered(m); got < target[m] {
				short = append(short, fmt.Sprintf("%s %d of %d", m, got, target[m]))
			}
		}
		return len(short) == 0, strings.Join(short, ", ")
	})
}

// report logs the figures of the load and returns the answers contradicting
// the reference and the share of queries answered under each bound.
func (l *availLoad) report(t *testing.T) (wrong []string, answeredShare map[string]float64) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	answeredShare = make(map[string]float64)
	for _, m := range availModes {
		s := l.stats[m]
		answeredShare[m] = float64(s.ok+s.notFound) / float64(max(s.asked, 1))
		refused := 0
		for _, n := range s.refused {
			refused += n
		}
		t.Logf("%-9s: %6d queries, %.2f%% answered (%d counts, %d not found; served by %v), %d refused %v, %d without answer, %d wrong",
			m, s.asked, 100*answeredShare[m], s.ok, s.notFound, s.roles, refused, sortedCounts(s.refused), s.transport, countWrong(l.wrong, m))
		if s.example != "" {
			t.Logf("%9s  first query without answer: %s", "", s.example)
		}
	}
	t.Logf("longest a word went unanswered through an instance under one bound: %s (%s)", l.maxGap.Round(time.Millisecond), l.gapAt)
	return slices.Clone(l.wrong), answeredShare
}

func countWrong(wrong []string, mode string) int {
	n := 0
	for _, w := range wrong {
		if strings.Contains(w, " under "+mode+": ") {
			n++
		}
	}
	return n
}

// sortedCounts prints a count map with its largest entries first.
func sortedCounts(m map[string]int) string {
	ks := slices.SortedFunc(maps.Keys(m), func(a, b string) int { return cmp.Or(cmp.Compare(m[b], m[a]), strings.Compare(a, b)) })
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// countedCluster starts a broker and three exactly-once instances (one
// standby per task, session timeout availSession), produces a generated
// text of the given number of lines over a 3,000-word Zipf vocabulary, and
// waits until every word is counted and every replica is current. It
// returns the reference counts.
func countedCluster(t *testing.T, seed uint64, lines int) (*procCluster, *procHTTP, []*procInstance, map[string]int64) {
	t.Helper()
	c := newProcCluster(t, procPartitions)
	h := newProcHTTP(t)
	session := "--session-timeout=" + availSession.String()
	var insts []*procInstance
	for i := range 3 {
		insts = append(insts, c.startInstanceWith(fmt.Sprintf("i%d", i+1), "exactly-once", session))
	}
	waitSettled(t, h, fixture.SettleTimeout, procPartitions, insts...)
	want := make(map[string]int64)
	ctx, cancel := context.WithTimeout(context.Background(), fixture.SettleTimeout)
	defer cancel()
	require.NoError(t, c.produceFile(ctx, c.writeLines("text.txt", fixture.NewCorpus(seed, 3000).Lines(lines, want))))
	words := slices.Sorted(maps.Keys(want))
	fixture.WaitFor(t, fixture.SettleTimeout, "the whole text counted", func() (bool, string) {
		requireAlive(t, insts...)
		got, failed := snapshotCounts(h, words, "active", insts...)
		return len(failed) == 0 && maps.Equal(got, want), fixture.CountDiff(want, got, failed)
	})
	fixture.WaitFor(t, fixture.SettleTimeout, "every replica current", func() (bool, string) {
		msg := replicasCurrentProblem(h, procPartitions, 1, insts...)
		return msg == "", msg
	})
	return c, h, insts, want
}

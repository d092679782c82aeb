package chaos

import (
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// stalenesses are the bounds the query loop asks with; active twice as
// often as the others.
var stalenesses = []string{"active", "active", "age:5s", "lag:1000", "any"}

// servedBy is an answer's provenance as the query API gives it.
type servedBy struct {
	Host     string `json:"host"`
	Role     string `json:"role"`
	Position *int64 `json:"position"`
	Lag      *int64 `json:"lag"`
	AgeMs    *int64 `json:"age_ms"`
}

// answer is one query and what came back.
type answer struct {
	sent, recv time.Time
	word       string
	staleness  string
	via        string // the instance asked
	status     int    // 0: no HTTP answer
	value      int64
	partition  int32
	servedBy   *servedBy
	reason     string
}

// ok reports whether the answer gives a value: 200, or 404 from a replica
// (the word not counted yet).
func (a answer) ok() bool {
	return a.servedBy != nil && (a.status == http.StatusOK || a.status == http.StatusNotFound)
}

// queryLoop asks random words of random instances at a steady rate, with
// random staleness bounds, and keeps every answer.
type queryLoop struct {
	c     *cluster
	rng   *rand.Rand
	vocab []string
	rate  int
	hc    *http.Client

	mu      sync.Mutex
	answers []answer
	skipped int // ticks with too many queries in flight
}

func newQueryLoop(seed uint64, c *cluster, vocab []string, rate int) *queryLoop {
	tr := &http.Transport{DialContext: (&net.Dialer{Timeout: time.Second}).DialContext, MaxIdleConnsPerHost: 8}
	return &queryLoop{c: c, rng: rand.New(rand.NewPCG(seed, 0x9e7)), vocab: vocab, rate: rate,
		hc: &http.Client{Transport: tr, Timeout: 3 * time.Second}}
}

func (q *queryLoop) run(ctx context.Context) {
	defer q.hc.CloseIdleConnections()
	tick := time.NewTicker(time.Second / time.Duration(q.rate))
	defer tick.Stop()
	const inFlight = 8
	sem := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		word, st, in := pick(q.rng, q.vocab), pick(q.rng, stalenesses), pick(q.rng, q.c.insts)
		select {
		case sem <- struct{}{}:
		default:
			q.mu.Lock()
			q.skipped++
			q.mu.Unlock()
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			a := q.ask(ctx, in.http, word, st)
			if ctx.Err() != nil {
				return
			}
			q.mu.Lock()
			q.answers = append(q.answers, a)
			q.mu.Unlock()
		})
	}
}

// ask queries word through addr, routed to whichever replica the bound
// allows.
func (q *queryLoop) ask(ctx context.Context, addr, word, staleness string) answer {
	a := answer{word: word, staleness: staleness, via: addr, sent: time.Now()}
	u := "http://" + addr + "/v1/stores/" + countsStore + "/keys/" + url.PathEscape(word) +
		"?staleness=" + url.QueryEscape(staleness) + "&route=true"
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := q.hc.Do(req)
	if err != nil {
		a.recv, a.reason = time.Now(), "unreachable"
		return a
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	a.recv, a.status = time.Now(), resp.StatusCode
	var w struct {
		Value     *int64    `json:"value"`
		Partition int32     `json:"partition"`
		ServedBy  *servedBy `json:"served_by"`
		Reason    string    `json:"reason"`
	}
	if err != nil || json.Unmarshal(body, &w) != nil {
		a.reason = "undecodable"
		return a
	}
	a.partition, a.servedBy, a.reason = w.Partition, w.ServedBy, w.Reason
	if w.Value != nil {
		a.value = *w.Value
	}
	return a
}

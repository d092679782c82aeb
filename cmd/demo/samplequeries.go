package main

// The sample words the demo keeps querying through the routing client while
// it runs, and the figures of their answers and refusals.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/topology"
)

// querySample picks the words the demo keeps querying: the most frequent
// words of the corpus, at most samplePerPartition per partition of the
// store, until every partition has that many, so that every partition's
// failover shows in the answers.
func querySample(vocab []string, partitions int32) []string {
	perPart := make([]int, partitions)
	full := 0
	var out []string
	for _, w := range append([]string{possessive}, vocab...) {
		p := topology.Partition([]byte(w), partitions)
		if perPart[p] == samplePerPartition {
			continue
		}
		out = append(out, w)
		if perPart[p]++; perPart[p] == samplePerPartition {
			if full++; int32(full) == partitions {
				break
			}
		}
	}
	return out
}

// queryStats is what the demo's sample queries saw.
type queryStats struct {
	mu          sync.Mutex
	answered    int64
	refused     int64
	byRole      map[string]int64
	reasons     map[string]int64 // refusals by answer.reasons
	maxLag      int64            // -1 before any answer
	maxLagSeen  answer
	latest      map[string]int64 // word → count last answered
	regressions int64            // answers lower than an earlier one
	recent      []answer         // newest last
	seq         int64            // answers and refusals recorded
	watch       *answerWatch
}

// answerWatch records, after a kill, when each partition the killed
// instance ran was first answered by a new active.
type answerWatch struct {
	victim string // its query endpoint
	since  time.Time
	first  map[int32]time.Time
	parts  map[int32]bool
}

func newQueryStats() *queryStats {
	return &queryStats{byRole: make(map[string]int64), reasons: make(map[string]int64), latest: make(map[string]int64), maxLag: -1}
}

// record adds one query's outcome.
func (q *queryStats) record(a answer, at time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.seq++
	a.seq = q.seq
	q.recent = append(q.recent, a)
	if len(q.recent) > 4*maxRecent {
		q.recent = slices.Clone(q.recent[len(q.recent)-maxRecent:])
	}
	if a.refusal != "" {
		q.refused++
		q.reasons[a.reasons]++
		return
	}
	q.answered++
	q.byRole[a.role]++
	if a.lag > q.maxLag {
		q.maxLag, q.maxLagSeen = a.lag, a
	}
	if old, ok := q.latest[a.word]; ok && a.count < old {
		q.regressions++
	}
	q.latest[a.word] = max(a.count, q.latest[a.word])
	if w := q.watch; w != nil && w.parts[a.partition] && a.role == iq.RoleActive.String() && a.host != w.victim {
		if _, seen := w.first[a.partition]; !seen {
			w.first[a.partition] = at
		}
	}
}

// watchFailover starts recording answers from new actives of parts.
func (q *queryStats) watchFailover(victim string, parts []int32, since time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w := &answerWatch{victim: victim, since: since, first: make(map[int32]time.Time), parts: make(map[int32]bool)}
	for _, p := range parts {
		w.parts[p] = true
	}
	q.watch = w
}

// failoverAnswers returns when the first and the last of the watched
// partitions were first answered by a new active, as offsets from the
// kill; all says whether every watched partition was.
func (q *queryStats) failoverAnswers() (first, last time.Duration, all bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w := q.watch
	if w == nil || len(w.first) == 0 {
		return 0, 0, false
	}
	first = time.Duration(1<<63 - 1)
	for _, t := range w.first {
		first = min(first, t.Sub(w.since))
		last = max(last, t.Sub(w.since))
	}
	return first, last, len(w.first) == len(w.parts)
}

// queryTotals is a consistent reading of the counters.
type queryTotals struct {
	answered, refused, maxLag, regressions int64
	maxLagSeen                             answer
	byRole, reasons                        map[string]int64
}

func (q *queryStats) totals() queryTotals {
	q.mu.Lock()
	defer q.mu.Unlock()
	return queryTotals{answered: q.answered, refused: q.refused, maxLag: q.maxLag, regressions: q.regressions,
		maxLagSeen: q.maxLagSeen, byRole: maps.Clone(q.byRole), reasons: maps.Clone(q.reasons)}
}

// top returns the n words with the highest counts answered so far.
func (q *queryStats) top(n int) []topWord {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]topWord, 0, len(q.latest))
	for w, c := range q.latest {
		out = append(out, topWord{w, c})
	}
	slices.SortFunc(out, func(a, b topWord) int { return cmp.Or(cmp.Compare(b.count, a.count), cmp.Compare(a.word, b.word)) })
	return out[:min(n, len(out))]
}

// lastAnswers returns the newest n outcomes, oldest first.
func (q *queryStats) lastAnswers(n int) []answer {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(q.recent[max(0, len(q.recent)-n):])
}

// startQueries keeps querying the sample words, one after another, through
// the routing client with staleness lag:demoLagBound, until stopped.
func (d *demo) startQueries(ctx context.Context, sample []string) {
	ctx, d.stopQueries = context.WithCancel(context.WithoutCancel(ctx))
	d.queriesDone = make(chan struct{})
	go func() {
		defer close(d.queriesDone)
		tick := time.NewTicker(queryInterval)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			w := sample[i%len(sample)]
			a, err := d.query(ctx, d.client, w, iq.WithStaleness(iq.MaxLag(demoLagBound)))
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				a = answer{word: w, refusal: shortRefusal(err), reasons: refusalReasons(err)}
			}
			now := time.Now()
			a.at = now.Sub(d.start)
			d.queries.record(a, now)
		}
	}()
}

// query asks the cluster for a word's count through a routing client.
func (d *demo) query(ctx context.Context, c *iq.Client, word string, opts ...iq.QueryOption) (answer, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := c.Get(qctx, countsStore, word, []byte(word), opts...)
	if err != nil {
		return answer{}, err
	}
	a := answer{word: word, host: res.Provenance.Host, instance: d.hostName(res.Provenance.Host),
		partition: res.Provenance.Partition, role: res.Provenance.Role.String(), lag: res.Provenance.Lag}
	if res.Found {
		if err := json.Unmarshal(res.Value, &a.count); err != nil {
			return answer{}, fmt.Errorf("decode the count of %q: %w", word, err)
		}
	}
	return a, nil
}

// queryMinutes asks the cluster for a word's counts of the minutes
// starting at from or later, by window start.
func (d *demo) queryMinutes(ctx context.Context, c *iq.Client, word string, from int64) (map[int64]int64, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := c.WindowFetch(qctx, minuteStore, word, []byte(word), from, iq.MaxTime)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]int64, len(res.Windows))
	for _, w := range res.Windows {
		var n int64
		if err := json.Unmarshal(w.Value, &n); err != nil {
			return nil, fmt.Errorf("decode the count of %q in the minute from %d: %w", word, w.Start, err)
		}
		out[w.Start] = n
	}
	return out, nil
}

// minuteList renders counts per minute as "[15:04 n, ...]", oldest first.
func minuteList(m map[int64]int64) string {
	var parts []string
	for _, start := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", time.UnixMilli(start).UTC().Format("15:04"), m[start]))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// shortRefusal says in a few words why a query got no answer.
func shortRefusal(err error) string {
	var ue *iq.UnavailableError
	if errors.As(err, &ue) {
		msg := "no replica could answer"
		if ue.Partition >= 0 {
			msg = fmt.Sprintf("no replica of partition %d could answer", ue.Partition)
		}
		return msg + " (" + refusalReasons(err) + ")"
	}
	msg := err.Error()
	if len(msg) > 80 {
		msg = msg[:80] + "…"
	}
	return msg
}

// refusalReasons lists the kinds of refusal behind a failed query: each
// replica's the client tried, or the error's own.
func refusalReasons(err error) string {
	kind := func(err error) string {
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return "timed out"
		case errors.Is(err, iq.ErrTooStale):
			return "too stale"
		case errors.Is(err, iq.ErrBehind):
			return "behind a position already read"
		case errors.Is(err, iq.ErrRebalancing):
			return "rebalancing"
		case errors.Is(err, iq.ErrNotHostedHere):
			return "not hosted"
		case errors.Is(err, iq.ErrNotRunning):
			return "not running"
		case errors.Is(err, iq.ErrNotAvailable):
			return "no replica"
		}
		return "unreachable"
	}
	var ue *iq.UnavailableError
	if !errors.As(err, &ue) || len(ue.Tried) == 0 {
		return kind(err)
	}
	var list []string
	for _, a := range ue.Tried {
		if k := kind(a.Err); !slices.Contains(list, k) {
			list = append(list, k)
		}
	}
	return strings.Join(list, ", ")
}

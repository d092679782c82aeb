package chaos

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

const (
	// ageSlack is what an answer's claimed age is allowed beyond itself:
	// a replica knows it caught up only from an end offset listed a
	// moment before (every 500 ms), and the committed values are seen
	// by the harness's changelog reader a moment after they commit.
	ageSlack = 2 * time.Second
	// roleSlack is how long a member may keep a role after the group's
	// coordinator stored a balance that takes it away: the time for the
	// member to hear of it, over a network without a delay fault (see
	// roleSlackAt).
	roleSlack = time.Second
	// examples is how many examples of each kind of finding are kept.
	examples = 10
)

// Result is what one run found. The checks:
//
//   - no acknowledged input lost: every line the producer had
//     acknowledged is in the input topic, none twice;
//   - the counts, asked of each word's active once everything is healed
//     and processed, and the latest of each word in the output topic read
//     committed: under exactly-once equal to the input's; under
//     at-least-once none below it and none above it by more than the
//     faults' redo windows allow (see overcountBound);
//   - every answer during the run is true to what it claims. Its value is
//     at least what the application had committed its claimed age plus
//     ageSlack before it was asked: under exactly-once the word's value
//     last seen on the store's changelog read committed by then; under
//     at-least-once, whose changelog a zombie may write to, the count of
//     the word in the repartition records below the group's committed
//     offset seen by then. An answer without an age (a rebuilding
//     replica, under staleness any) gets no lower bound. Its value is at
//     most the count of the text produced by its reception (plus, under
//     at-least-once, the redo bound). The role it claims is not refuted
//     by the group's coordinator: no one balance, observed from roleSlack
//     (more under a delay fault, roleSlackAt) before the query to after
//     its answer, that gave the partition's
//     active to another instance (a claimed active) or no replica of it
//     to this one (any other role). Lag bounds are not checked, only the
//     age each answer reports along with its lag;
//   - live watches of a hot and a cold word (through iq.Client on the
//     active and spread over replicas, and as routed event streams),
//     followed from outside through every fault, receive
//     their word's committed changelog records only, each once and in
//     order, up to the last (checkWatches);
//   - no store wiped that was not damaged;
//   - no process exits unless asked.
type Result struct {
	Seed      uint64
	Guarantee string
	Duration  time.Duration
	Schedule  Schedule

	Faults    map[Kind]int   // injected, by kind
	Answers   map[string]int // checked, by the role they claim
	Refusals  map[string]int // queries refused, by reason ("unreachable": no HTTP answer)
	Dishonest map[string]int // answers failing a check, by check
	NoAge     int            // answers without an age, checked for value and role only

	AckedLines, TextLines int
	UnackedBatches        int // batches the producer gave up on (their lines may or may not be in the input)
	LostLines, DupLines   int
	Words                 int   // distinct
	TotalWords            int64 // in the input
	Overcount, Bound      int64 // at-least-once: counts above the input's, and the redo bound
	WrongWords            int   // words whose final count fails the check

	LongestUnavailable time.Duration // longest a partition gave no active answer
	UnavailableWhere   string
	Converged          time.Duration // from healing to counts checked
	WatchUpdates       int           // updates the live watches received
	WatchMissed        int           // changelog records of their words the watches did not receive (compacted before a resume read them back, the update after each marked truncated)
	Rereads            int           // times the changelog was read from its start and compared
	Damaged, Wiped     int
	Refused            []string // instances that refused damaged state
	UnaskedExits       int
	StartFailures      int // starts that failed and were tried again

	Notes    []string
	Findings []string
}

// Failed reports whether any check failed.
func (r *Result) Failed() bool { return len(r.Findings) > 0 }

// Summary prints the run's figures.
func (r *Result) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, %s, schedule %s: ", r.Seed, r.Guarantee, r.Duration)
	if r.Failed() {
		fmt.Fprintf(&b, "FAILED, %d findings\n", len(r.Findings))
	} else {
		b.WriteString("passed\n")
	}
	var fs []string
	for _, k := range AllKinds {
		if n := r.Faults[k]; n > 0 {
			fs = append(fs, fmt.Sprintf("%s %d", k, n))
		}
	}
	fmt.Fprintf(&b, "  faults injected: %s\n", strings.Join(fs, ", "))
	fmt.Fprintf(&b, "  answers checked: %s (%d without an age); refused: %s\n", countsString(r.Answers), r.NoAge, countsString(r.Refusals))
	fmt.Fprintf(&b, "  dishonest answers: %s\n", countsString(r.Dishonest))
	fmt.Fprintf(&b, "  text: %d lines acknowledged (%d batches not), %d in the topic; acknowledged lost %d, duplicated %d; %d words, %d distinct\n",
		r.AckedLines, r.UnackedBatches, r.TextLines, r.LostLines, r.DupLines, r.TotalWords, r.Words)
	if r.Guarantee == "at-least-once" {
		fmt.Fprintf(&b, "  final counts: %d words wrong; over-count %d, redo bound %d\n", r.WrongWords, r.Overcount, r.Bound)
	} else {
		fmt.Fprintf(&b, "  final counts: %d words wrong\n", r.WrongWords)
	}
	fmt.Fprintf(&b, "  longest a partition had no active answer: %s (%s); counts checked %s after healing\n",
		r.LongestUnavailable.Round(time.Millisecond), r.UnavailableWhere, r.Converged.Round(time.Millisecond))
	fmt.Fprintf(&b, "  live watches: %d updates; %d changelog records not delivered (compacted before a resume read them back; the update after each marked truncated)\n", r.WatchUpdates, r.WatchMissed)
	fmt.Fprintf(&b, "  stores damaged %d, wiped %d; refusals on damaged state %d; unasked exits %d; failed starts %d; changelog rereads %d\n",
		r.Damaged, r.Wiped, len(r.Refused), r.UnaskedExits, r.StartFailures, r.Rereads)
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	for _, f := range r.Findings {
		fmt.Fprintf(&b, "  FINDING: %s\n", f)
	}
	if r.Failed() {
		fmt.Fprintf(&b, "  schedule (replay with --seed %d):\n%s", r.Seed, indent(r.Schedule.String()))
	}
	return b.String()
}

func countsString(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// readTopic reads every record of topic below ends, by partition and
// offset. The topic must not be written transactionally: the offsets of
// transaction markers are never read.
func readTopic(ctx context.Context, seeds, topic string, ends map[int32]int64) (map[int32]map[int64]*kgo.Record, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	out := make(map[int32]map[int64]*kgo.Record)
	next := make(map[int32]int64)
	done := func() bool {
		for p, end := range ends {
			if next[p] < end {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("reading %s to %v: %w", topic, ends, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if out[r.Partition] == nil {
				out[r.Partition] = make(map[int64]*kgo.Record)
			}
			out[r.Partition][r.Offset] = r
			next[r.Partition] = max(next[r.Partition], r.Offset+1)
		})
	}
	return out, nil
}

// latestCommitted reads topic read-committed to its end and returns the
// latest value per key. The end is found by writing a sentinel record to
// every partition: a read-committed reader reaches it only once every
// transaction before it has ended.
func latestCommitted(ctx context.Context, seeds, topic string, partitions int) (map[string]int64, error) {
	sentinel := fmt.Sprintf("\x00end-%d", rand.Uint64())
	pcl, err := kgo.NewClient(kgo.SeedBrokers(seeds), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return nil, err
	}
	defer pcl.Close()
	for p := range partitions {
		if err := pcl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: int32(p), Key: []byte(sentinel)}).FirstErr(); err != nil {
			return nil, err
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	latest := make(map[string]int64)
	seen := make(map[int32]bool)
	for len(seen) < partitions {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("reading %s read-committed: %w", topic, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if seen[r.Partition] {
				return
			}
			if string(r.Key) == sentinel {
				seen[r.Partition] = true
				return
			}
			if n, err := serde.Int64.Decode(r.Value); err == nil {
				latest[string(r.Key)] = n
			}
		})
	}
	return latest, nil
}

// settleAndCheck checks the input against what was acknowledged, waits
// for the application to process all of it, and checks the final counts.
func (r *run) settleAndCheck(ctx context.Context, res *Result) {
	healed := time.Now()
	// The wait for the application has its bound; reading the topics
	// and the final answers have their own, so that a run that did not
	// settle still shows how far it got.
	readCtx, cancelRead := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelRead()
	waitCtx, cancelWait := context.WithTimeout(ctx, r.o.SettleTimeout)
	defer cancelWait()
	ends := r.offsets(readCtx, false)
	if ends == nil {
		r.finding("the broker does not list end offsets after healing")
		return
	}
	texts, err := readTopic(readCtx, r.c.addr, inputTopic, ends[inputTopic])
	if err != nil {
		r.finding("reading the input back: %v", err)
		return
	}
	want := make(map[string]int64)
	seen := make(map[int64]int)
	for _, recs := range texts {
		for _, rec := range recs {
			res.TextLines++
			for _, w := range strings.Fields(string(rec.Value)) {
				want[w]++
				res.TotalWords++
			}
			for _, h := range rec.Headers {
				if h.Key == lineIDHeader {
					id, _ := strconv.ParseInt(string(h.Value), 10, 64)
					seen[id]++
				}
			}
		}
	}
	res.Words = len(want)
	r.prod.mu.Lock()
	res.UnackedBatches = r.prod.failed
	var lost []int64
	for _, b := range r.prod.batches {
		if b.acked.IsZero() {
			continue
		}
		for id := b.ids[0]; id < b.ids[1]; id++ {
			res.AckedLines++
			if seen[id] == 0 {
				lost = append(lost, id)
			}
		}
	}
	r.prod.mu.Unlock()
	for _, n := range seen {
		if n > 1 {
			res.DupLines++
		}
	}
	res.LostLines = len(lost)
	if len(lost) > 0 {
		r.finding("%d acknowledged lines are not in %s, e.g. line %d", len(lost), inputTopic, lost[0])
	}
	if res.DupLines > 0 {
		r.finding("%d lines are in %s more than once (the producer is idempotent)", res.DupLines, inputTopic)
	}
	words := slices.Sorted(maps.Keys(want))

	alo := r.o.Guarantee == "at-least-once"
	var got map[string]int64
	var failed map[string]string
	for {
		var behind string
		if alo {
			behind = r.uncommitted(waitCtx)
		}
		if behind == "" {
			got, failed = r.snapshot(waitCtx, words)
			if len(failed) == 0 && (alo || maps.Equal(got, want)) {
				break
			}
		}
		if waitCtx.Err() != nil {
			if behind != "" {
				r.finding("the application did not commit all its input within %s of healing: %s", r.o.SettleTimeout, behind)
			}
			if sick := r.unhealthy(); sick != "" {
				r.finding("%s after healing: %s", r.o.SettleTimeout, sick)
			}
			lastCtx, cancel := context.WithTimeout(ctx, time.Minute)
			got, failed = r.snapshot(lastCtx, words)
			cancel()
			break
		}
		r.sleep(waitCtx, 500*time.Millisecond)
	}
	res.Converged = time.Since(healed)
	r.logf("settled %s after healing", res.Converged.Round(time.Millisecond))
	bound := map[string]int64{}
	if alo {
		boundCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		bound, err = r.overcountBound(boundCtx)
		cancel()
		if err != nil {
			r.finding("computing the at-least-once bound: %v", err)
		}
	}
	r.compare("the stores (asked with staleness=active)", want, got, failed, bound, res)
	r.traceLow(want, got, failed)
	rereadCtx, cancelReread := context.WithTimeout(ctx, time.Minute)
	r.checkReread(rereadCtx, true)
	cancelReread()
	r.mu.Lock()
	res.Rereads = r.rereads
	r.mu.Unlock()
	outCtx, cancelOut := context.WithTimeout(ctx, time.Minute)
	defer cancelOut()
	out, err := latestCommitted(outCtx, r.c.addr, outputTopic, r.o.Partitions)
	if err != nil {
		r.finding("reading %s: %v", outputTopic, err)
	} else {
		var ignore Result
		r.compare("topic "+outputTopic+" read committed", want, out, nil, bound, &ignore)
	}
	r.bound = bound
	for _, n := range bound {
		res.Bound += n
	}
}

// traceLow adds, for the first few words whose final count is below the
// input's, their changelog history: whether the count was once right and
// then went back, or never reached the changelog.
func (r *run) traceLow(want, got map[string]int64, failed map[string]string) {
	n := 0
	for _, w := range slices.Sorted(maps.Keys(want)) {
		if _, ok := failed[w]; ok || got[w] >= want[w] {
			continue
		}
		if n++; n > 3 {
			return
		}
		r.finding("changelog of %q (input %d, final %d): %s", w, want[w], got[w], r.watch.trace(w))
	}
}

// unhealthy describes the instances whose /healthz fails, or "".
func (r *run) unhealthy() string {
	var sick []string
	for _, in := range r.c.insts {
		resp, err := r.queries.hc.Get("http://" + in.http + "/healthz")
		if err != nil {
			sick = append(sick, fmt.Sprintf("%s: %v", in.name, err))
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			sick = append(sick, fmt.Sprintf("%s not healthy: HTTP %d %s", in.name, resp.StatusCode, strings.TrimSpace(string(body))))
		}
	}
	return strings.Join(sick, "; ")
}

// compare checks final counts against the input's: equal under
// exactly-once; under at-least-once none below and none above by more
// than bound.
func (r *run) compare(what string, want, got map[string]int64, failed map[string]string, bound map[string]int64, res *Result) {
	var bad []string
	for _, w := range slices.Sorted(maps.Keys(want)) {
		if why, ok := failed[w]; ok {
			bad = append(bad, fmt.Sprintf("%q not answered: %s", w, why))
			continue
		}
		d := got[w] - want[w]
		if d > 0 {
			res.Overcount += d
		}
		if d < 0 || d > bound[w] {
			bad = append(bad, fmt.Sprintf("%q %d, input %d (%+d, bound +%d)", w, got[w], want[w], d, bound[w]))
		}
	}
	for w, n := range got {
		if _, ok := want[w]; !ok && n != 0 {
			bad = append(bad, fmt.Sprintf("%q counted %d, not in the input", w, n))
		}
	}
	res.WrongWords = len(bad)
	if len(bad) > 0 {
		r.finding("%s: %d words wrong: %s", what, len(bad), strings.Join(bad[:min(len(bad), examples)], "; "))
	}
}

// uncommitted returns what the group has not committed of its input and
// repartition topics, or "".
func (r *run) uncommitted(ctx context.Context) string {
	com, ends := r.offsets(ctx, true), r.offsets(ctx, false)
	if com == nil || ends == nil {
		return "offsets not listed"
	}
	var behind []string
	for topic, ps := range ends {
		for p, end := range ps {
			if at := com[topic][p]; at < end {
				behind = append(behind, fmt.Sprintf("%s/%d committed %d of %d", topic, p, at, end))
			}
		}
	}
	slices.Sort(behind)
	return strings.Join(behind, ", ")
}

// snapshot asks every word of its active, through the instances in turn.
func (r *run) snapshot(ctx context.Context, words []string) (map[string]int64, map[string]string) {
	got := make(map[string]int64, len(words))
	failed := make(map[string]string)
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				a := r.queries.ask(ctx, r.c.insts[i%len(r.c.insts)].http, words[i], "active")
				mu.Lock()
				if a.ok() {
					got[words[i]] = a.value
				} else {
					failed[words[i]] = fmt.Sprintf("HTTP %d %s", a.status, a.reason)
				}
				mu.Unlock()
			}
		})
	}
	for i := range words {
		next <- i
	}
	close(next)
	wg.Wait()
	return got, failed
}

// overcountBound returns, per word, how many extra counts the faults can
// explain under at-least-once. A task commits its input offsets only once
// its store's changelog records and its output are written, so a fault
// leaves behind at most the work on records past the group's committed
// offsets, which whoever runs the task next does again. Work is redone at
// two stages: lines of the input topic (each redone line writes its words
// to the repartition topic again) and words of the repartition topic
// (each redone word counted again, a combined partial count by its
// value). Each fault's window runs from the committed offsets when it
// began (commits only move forward) to the end offsets a while after it
// ended (see redoAfter); summed over faults and stages, per word, that
// bounds the over-count. Overlapping faults are counted each in full, so
// the bound is loose, never too tight.
func (r *run) overcountBound(ctx context.Context) (map[string]int64, error) {
	r.redo.Wait()
	r.mu.Lock()
	windows := slices.Clone(r.windows)
	r.mu.Unlock()
	bound := make(map[string]int64)
	ends := r.offsets(ctx, false)
	if ends == nil {
		return bound, fmt.Errorf("end offsets not listed")
	}
	lines, err := readTopic(ctx, r.c.addr, inputTopic, ends[inputTopic])
	if err != nil {
		return bound, err
	}
	words, err := readTopic(ctx, r.c.addr, repartition, ends[repartition])
	if err != nil {
		return bound, err
	}
	r.counted = make(map[int32]map[string]*offsetCounts)
	for p, recs := range words {
		r.counted[p] = make(map[string]*offsetCounts)
		for _, off := range slices.Sorted(maps.Keys(recs)) {
			rec := recs[off]
			oc := r.counted[p][string(rec.Key)]
			if oc == nil {
				oc = &offsetCounts{}
				r.counted[p][string(rec.Key)] = oc
			}
			oc.add(off, repartitionWords(rec))
		}
	}
	for _, w := range windows {
		// A fault whose offsets the broker never listed (it was down)
		// gets the widest window: from 0, to the end.
		to := w.to
		if to == nil {
			to = ends
		}
		for p, to := range to[inputTopic] {
			for off := w.from[inputTopic][p]; off < to; off++ {
				if rec := lines[p][off]; rec != nil {
					for _, word := range strings.Fields(string(rec.Value)) {
						bound[word]++
					}
				}
			}
		}
		for p, to := range to[repartition] {
			for off := w.from[repartition][p]; off < to; off++ {
				if rec := words[p][off]; rec != nil {
					bound[string(rec.Key)] += repartitionWords(rec)
				}
			}
		}
	}
	return bound, nil
}

// offsetCounts is a word's running count over a repartition partition's
// offsets.
type offsetCounts struct {
	offs []int64
	cum  []int64
}

func (o *offsetCounts) add(off, n int64) {
	prev := int64(0)
	if len(o.cum) > 0 {
		prev = o.cum[len(o.cum)-1]
	}
	o.offs = append(o.offs, off)
	o.cum = append(o.cum, prev+n)
}

// below is the word's count in the records below off.
func (o *offsetCounts) below(off int64) int64 {
	if o == nil {
		return 0
	}
	i, _ := slices.BinarySearch(o.offs, off)
	if i == 0 {
		return 0
	}
	return o.cum[i-1]
}

// repartitionWords is how many words a repartition record stands for: one
// for a raw word, the partial count for a combined one.
func repartitionWords(r *kgo.Record) int64 {
	for _, h := range r.Headers {
		if h.Key == topology.CombinedHeader {
			if n, err := serde.Int64.Decode(r.Value); err == nil {
				return n
			}
		}
	}
	return 1
}

// checkAnswers checks every answer of the run against the reference and
// the group's history, and measures availability.
func (r *run) checkAnswers(res *Result, faultsEnd time.Time) {
	issued := r.prod.issuedTimelines()
	res.Answers, res.Refusals, res.Dishonest = map[string]int{}, map[string]int{}, map[string]int{}
	kept := map[string]int{}
	report := func(check string, a answer, detail string) {
		res.Dishonest[check]++
		if kept[check] >= examples {
			return
		}
		kept[check]++
		r.finding("dishonest answer (%s): %q via %s, staleness %s, asked %s, answered %s: value %d from %s %s of partition %d (age %s): %s",
			check, a.word, r.c.nameOf(a.via), a.staleness, a.sent.Format("15:04:05.000"), a.recv.Format("15:04:05.000"),
			a.value, r.c.nameOf(a.servedBy.Host), a.servedBy.Role, a.partition, ageString(a.servedBy.AgeMs), r.c.names(detail))
	}
	r.queries.mu.Lock()
	answers := slices.Clone(r.queries.answers)
	r.queries.mu.Unlock()
	slices.SortFunc(answers, func(a, b answer) int { return a.recv.Compare(b.recv) })
	lastActive := make(map[int32]time.Time)
	var longest time.Duration
	where := "none"
	for _, a := range answers {
		if !a.ok() {
			reason := a.reason
			if reason == "" {
				reason = fmt.Sprintf("HTTP %d", a.status)
			}
			res.Refusals[reason]++
			continue
		}
		sb := a.servedBy
		res.Answers[sb.Role]++
		var up int64
		if tl := issued[a.word]; tl != nil {
			up = tl.by(a.recv)
		}
		up += r.bound[a.word]
		if a.value > up {
			report("above the input", a, fmt.Sprintf("only %d were produced by then", up))
		}
		if sb.AgeMs == nil {
			res.NoAge++
		} else {
			age := time.Duration(*sb.AgeMs) * time.Millisecond
			at := a.sent.Add(-age - ageSlack)
			if r.counted == nil {
				if low := r.watch.committedBy(a.word, at); a.value < low {
					report("older than its age", a, fmt.Sprintf("%d was committed to the changelog by %s", low, at.Format("15:04:05.000")))
				}
			} else {
				off := r.committedAt(a.partition, at)
				if low := r.counted[a.partition][a.word].below(off); a.value < low {
					report("older than its age", a, fmt.Sprintf("the group had committed %d of its words (repartition offset %d) by %s",
						low, off, at.Format("15:04:05.000")))
				}
			}
		}
		if bad, why := r.group.roleFalse(sb.Host, a.partition, sb.Role, a.sent.Add(-r.roleSlackAt(sb.Host, a.sent)), a.recv); bad {
			if sb.Role == "active" {
				report("role", a, why)
			} else {
				report("replica role", a, why)
			}
		}
		if a.staleness == "active" && !a.recv.After(faultsEnd) {
			from, ok := lastActive[a.partition]
			if !ok {
				from = r.start
			}
			if d := a.recv.Sub(from); d > longest {
				longest, where = d, fmt.Sprintf("partition %d, until %s", a.partition, a.recv.Format("15:04:05.000"))
			}
			lastActive[a.partition] = a.recv
		}
	}
	for p := range int32(r.o.Partitions) {
		from, ok := lastActive[p]
		if !ok {
			from = r.start
		}
		if d := faultsEnd.Sub(from); d > longest {
			longest, where = d, fmt.Sprintf("partition %d, until the faults ended", p)
		}
	}
	res.LongestUnavailable, res.UnavailableWhere = longest, where
}

func ageString(ms *int64) string {
	if ms == nil {
		return "unknown"
	}
	return (time.Duration(*ms) * time.Millisecond).String()
}

// checkWipes checks that no instance deleted a store that was not
// damaged: each store directory is wiped at most as often as it was
// damaged.
func (r *run) checkWipes(res *Result) {
	r.mu.Lock()
	damaged := maps.Clone(r.damaged)
	r.mu.Unlock()
	for _, n := range damaged {
		res.Damaged += n
	}
	for _, in := range r.c.insts {
		wiped := in.wipedDirs()
		for _, dir := range slices.SortedFunc(maps.Keys(wiped), cmp.Compare) {
			res.Wiped += wiped[dir]
			if wiped[dir] > damaged[dir] {
				r.finding("%s wiped store %s %d times; it was damaged %d times", in.name, dir, wiped[dir], damaged[dir])
			}
		}
	}
}

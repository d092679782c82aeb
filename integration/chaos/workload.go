package chaos

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddystreams/eddy/internal/groupproto"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
)

// Names of the demo's word count (cmd/demo) and of the harness's header.
const (
	app          = "wordcount"
	inputTopic   = "text"
	outputTopic  = "word-counts"
	countsStore  = "counts"
	changelog    = app + "-" + countsStore + "-changelog"
	repartition  = app + "-words-repartition"
	lineIDHeader = "chaos-line"
	// countsSubTopology is the sub-topology whose tasks hold the counts
	// store: the one after the repartition by word.
	countsSubTopology = 1
)

// batch is a few lines produced together: when they were handed to the
// producer, when the broker acknowledged them (zero if it never did), and
// the words they hold.
type batch struct {
	issued, acked time.Time
	ids           [2]int64 // line IDs, [from, to)
	counts        map[string]int64
}

// producer writes generated text, a Zipf distribution over a fixed
// vocabulary of lowercase words, to the input topic with an idempotent,
// acks=all producer, and records every batch.
type producer struct {
	cl    *kgo.Client
	rng   *rand.Rand
	zipf  *rand.Zipf
	vocab []string

	mu      sync.Mutex
	batches []batch
	failed  int // batches the producer gave up on
}

func newProducer(seed uint64, seeds string) (*producer, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(seeds), kgo.DefaultProduceTopic(inputTopic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordDeliveryTimeout(30 * time.Second)}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, 0x7e47))
	vocab := make([]string, 0, 300)
	seen := make(map[string]bool)
	for len(vocab) < cap(vocab) {
		b := make([]byte, 2+rng.IntN(7))
		for i := range b {
			b[i] = byte('a' + rng.IntN(26))
		}
		if w := string(b); !seen[w] {
			seen[w] = true
			vocab = append(vocab, w)
		}
	}
	return &producer{cl: cl, rng: rng, zipf: rand.NewZipf(rng, 1.1, 2, uint64(len(vocab)-1)), vocab: vocab}, nil
}

// run produces a batch of lines every period until ctx ends.
func (p *producer) run(ctx context.Context, period time.Duration, linesPerBatch int) {
	var next int64
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		b := batch{counts: make(map[string]int64)}
		b.ids[0] = next
		var recs []*kgo.Record
		for range linesPerBatch {
			words := make([]string, 1+p.rng.IntN(12))
			for i := range words {
				words[i] = p.vocab[p.zipf.Uint64()]
				b.counts[words[i]]++
			}
			recs = append(recs, &kgo.Record{Value: []byte(strings.Join(words, " ")),
				Headers: []kgo.RecordHeader{{Key: lineIDHeader, Value: []byte(strconv.FormatInt(next, 10))}}})
			next++
		}
		b.ids[1] = next
		b.issued = time.Now()
		// Not ctx: a batch handed over is seen through to its answer.
		pctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		err := p.cl.ProduceSync(pctx, recs...).FirstErr()
		cancel()
		if err == nil {
			b.acked = time.Now()
		}
		p.mu.Lock()
		p.batches = append(p.batches, b)
		if err != nil {
			p.failed++
		}
		p.mu.Unlock()
	}
}

// timeline is a word's running count over time.
type timeline struct {
	at []time.Time
	n  []int64
}

// by returns the last value at or before t, 0 if none.
func (tl timeline) by(t time.Time) int64 {
	i, _ := slices.BinarySearchFunc(tl.at, t, func(a, t time.Time) int {
		if a.After(t) {
			return 1
		}
		return -1
	})
	if i == 0 {
		return 0
	}
	return tl.n[i-1]
}

// issuedTimelines returns, per word, its running count over the batches in
// the order they were issued, failed ones included: an upper bound on what
// any replica can have counted by each time.
func (p *producer) issuedTimelines() map[string]*timeline {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]*timeline)
	for _, b := range p.batches {
		for w, n := range b.counts {
			tl := out[w]
			if tl == nil {
				tl = &timeline{}
				out[w] = tl
			}
			prev := int64(0)
			if len(tl.n) > 0 {
				prev = tl.n[len(tl.n)-1]
			}
			tl.at = append(tl.at, b.issued)
			tl.n = append(tl.n, prev+n)
		}
	}
	return out
}

// committedWatcher follows the counts store's changelog with
// read-committed isolation and records, per word, when each value was
// first seen: once a value is seen, every replica caught up since holds it
// or a later one.
type committedWatcher struct {
	cl *kgo.Client

	mu   sync.Mutex
	seen map[string]*timeline
	// hist is every changelog record of each word as read, regressions
	// included: what a final count below the input's is traced through.
	hist map[string][]changelogRecord
	// next is, per partition, the offset after the last record read.
	next map[int32]int64
}

// changelogRecord is one changelog record of a word as the watcher read it.
type changelogRecord struct {
	at        time.Time
	partition int32
	offset    int64
	value     int64
}

func newCommittedWatcher(seeds string) (*committedWatcher, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds), kgo.ConsumeTopics(changelog),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), kgo.FetchMaxWait(100*time.Millisecond), kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		return nil, err
	}
	return &committedWatcher{cl: cl, seen: make(map[string]*timeline), hist: make(map[string][]changelogRecord), next: make(map[int32]int64)}, nil
}

func (c *committedWatcher) run(ctx context.Context) {
	for ctx.Err() == nil {
		fs := c.cl.PollFetches(ctx)
		now := time.Now()
		c.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			c.next[r.Partition] = r.Offset + 1
			if r.Attrs.IsControl() {
				return // kept to know how far the partition was read
			}
			// The store keeps each count with its time.
			cv, _ := statestore.SplitTimestamped(r.Value)
			v, err := serde.Int64.Decode(cv)
			if err != nil {
				return
			}
			c.hist[string(r.Key)] = append(c.hist[string(r.Key)], changelogRecord{at: now, partition: r.Partition, offset: r.Offset, value: v})
			tl := c.seen[string(r.Key)]
			if tl == nil {
				tl = &timeline{}
				c.seen[string(r.Key)] = tl
			}
			if len(tl.n) > 0 && tl.n[len(tl.n)-1] >= v {
				return // not newer than what was seen
			}
			tl.at = append(tl.at, now)
			tl.n = append(tl.n, v)
		})
		c.mu.Unlock()
	}
}

// readTo reports whether the watcher has read, in every partition, the
// record at the given offset.
func (c *committedWatcher) readTo(last map[int32]int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, o := range last {
		if c.next[p] <= o {
			return false
		}
	}
	return true
}

// lastTo returns, per word, the last record the watcher read at or below
// the given offset of its partition.
func (c *committedWatcher) lastTo(last map[int32]int64) map[string]changelogRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]changelogRecord)
	for w, h := range c.hist {
		for i := len(h) - 1; i >= 0; i-- {
			if h[i].offset <= last[h[i].partition] {
				out[w] = h[i]
				break
			}
		}
	}
	return out
}

// committedBy returns the highest value of word seen by t.
func (c *committedWatcher) committedBy(word string, t time.Time) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	tl := c.seen[word]
	if tl == nil {
		return 0
	}
	return tl.by(t)
}

// trace describes word's changelog history for a final count below the
// input's: its highest value and, if a later record went below it, the
// first such regression, the mark of a writer that started from a store
// behind the changelog (a zombie's late records, or an active that did
// not restore to the end).
func (c *committedWatcher) trace(word string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.hist[word]
	if len(h) == 0 {
		return "no changelog record read"
	}
	top := 0
	for i, rec := range h {
		if rec.value > h[top].value {
			top = i
		}
		if rec.value < h[top].value {
			return fmt.Sprintf("%d records; regressed from %d (offset %d, read %s) to %d (offset %d, read %s); last %d at offset %d",
				len(h), h[top].value, h[top].offset, h[top].at.Format("15:04:05.000"), rec.value, rec.offset,
				rec.at.Format("15:04:05.000"), h[len(h)-1].value, h[len(h)-1].offset)
		}
	}
	last := h[len(h)-1]
	return fmt.Sprintf("%d records, never regressed; last %d at offset %d, read %s", len(h), last.value, last.offset, last.at.Format("15:04:05.000"))
}

// groupObs is one observation of the group: its routing table if it was
// settled on one balance.
type groupObs struct {
	at       time.Time
	settled  bool
	epoch    int64
	active   map[int32]string          // counts partition → host
	replicas map[int32]map[string]bool // counts partition → hosts with any replica
}

// groupWatcher describes the group every period and keeps what the
// coordinator said: the truth an answer's claimed role is checked against.
type groupWatcher struct {
	cl *kgo.Client

	mu  sync.Mutex
	obs []groupObs
}

func newGroupWatcher(seeds string) (*groupWatcher, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds), kgo.RequestTimeoutOverhead(time.Second), kgo.RetryTimeout(time.Second))
	if err != nil {
		return nil, err
	}
	return &groupWatcher{cl: cl}, nil
}

func (g *groupWatcher) run(ctx context.Context, period time.Duration) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		o := g.describe(ctx)
		g.mu.Lock()
		g.obs = append(g.obs, o)
		g.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (g *groupWatcher) describe(ctx context.Context) groupObs {
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{app}
	resp, err := req.RequestWith(dctx, g.cl)
	if err != nil || len(resp.Groups) != 1 {
		return groupObs{at: time.Now()}
	}
	r, err := groupproto.GroupRouting(resp.Groups[0])
	if err != nil {
		return groupObs{at: time.Now()}
	}
	o := groupObs{at: time.Now(), settled: true, epoch: r.Epoch, active: make(map[int32]string), replicas: make(map[int32]map[string]bool)}
	add := func(p int32, host string) {
		if o.replicas[p] == nil {
			o.replicas[p] = make(map[string]bool)
		}
		o.replicas[p][host] = true
	}
	for host, ts := range r.Active {
		for _, id := range ts {
			if id.SubTopology == countsSubTopology {
				o.active[id.Partition] = host
				add(id.Partition, host)
			}
		}
	}
	for _, m := range []map[string][]task.ID{r.Standby, r.Warmup} {
		for host, ts := range m {
			for _, id := range ts {
				if id.SubTopology == countsSubTopology {
					add(id.Partition, host)
				}
			}
		}
	}
	return o
}

// roleFalse reports whether the group's routing shows that host did not
// hold partition in the claimed role throughout [from, to]: one balance
// (the same epoch observed settled at or before from and at or after to,
// and no other in between) in which the claim was false. A claimed active
// must be that balance's active, if it names one; any other role must be
// one of its replicas. Without such a balance the claim cannot be refuted.
func (g *groupWatcher) roleFalse(host string, partition int32, role string, from, to time.Time) (bool, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	i, _ := slices.BinarySearchFunc(g.obs, from, func(o groupObs, t time.Time) int {
		if o.at.After(t) {
			return 1
		}
		return -1
	})
	// i is the first observation after from; the one before is the
	// last at or before it.
	if i == 0 || !g.obs[i-1].settled {
		return false, ""
	}
	first := g.obs[i-1]
	found := false
	for _, o := range g.obs[i:] {
		if !o.settled || o.epoch != first.epoch {
			return false, ""
		}
		if !o.at.Before(to) {
			found = true
			break
		}
	}
	if !found {
		return false, ""
	}
	if role == "active" {
		// A balance with no active for the partition holds it back while
		// its last owner, the one writer until then, revokes it
		// (cooperative rebalancing): it refutes no claim.
		if a, ok := first.active[partition]; ok && a != host {
			return true, fmt.Sprintf("balance %d had the active of partition %d on %s from %s to after %s",
				first.epoch, partition, a, first.at.Format("15:04:05.000"), to.Format("15:04:05.000"))
		}
		return false, ""
	}
	if !first.replicas[partition][host] {
		return true, fmt.Sprintf("balance %d had no replica of partition %d on %s from %s to after %s",
			first.epoch, partition, host, first.at.Format("15:04:05.000"), to.Format("15:04:05.000"))
	}
	return false, ""
}

// checkReread reads the counts changelog from its start up to its
// committed end, as a replica rebuilt from nothing restores it, and
// compares each word's last value there with the last one the watcher
// read, up to the same offset, while the records were being written. A
// difference is the log changing under its readers (a compaction or a
// broker restart losing or reviving records), which every store rebuilt
// from it inherits, and not an application's fault. Run while the
// schedule goes on, it catches a loss that later writes of the same words
// would hide from a check at the end.
//
// Only the final check (final) reports failing to read: while faults go on
// the broker may be down, and a check that cannot finish is skipped.
func (r *run) checkReread(ctx context.Context, final bool) {
	fresh, last, err := readFromStart(ctx, r.c.addr, r.adm)
	if err != nil {
		if final {
			r.finding("reading %s from its start: %v", changelog, err)
		}
		return
	}
	for !r.watch.readTo(last) {
		if ctx.Err() != nil {
			if final {
				r.finding("the changelog watcher did not reach the offsets read from the start (%v)", last)
			}
			return
		}
		r.sleep(ctx, 100*time.Millisecond)
	}
	live := r.watch.lastTo(last)
	var diffs []string
	for _, w := range slices.Sorted(maps.Keys(live)) {
		l := live[w]
		if f, ok := fresh[w]; !ok {
			diffs = append(diffs, fmt.Sprintf("%q written %d at %d[%d], absent", w, l.value, l.partition, l.offset))
		} else if f.value != l.value || f.offset != l.offset {
			diffs = append(diffs, fmt.Sprintf("%q written %d at %d[%d], read %d at %d[%d]", w, l.value, l.partition, l.offset, f.value, f.partition, f.offset))
		}
	}
	for _, w := range slices.Sorted(maps.Keys(fresh)) {
		if _, ok := live[w]; !ok {
			f := fresh[w]
			diffs = append(diffs, fmt.Sprintf("%q never read as written, read %d at %d[%d]", w, f.value, f.partition, f.offset))
		}
	}
	r.mu.Lock()
	r.rereads++
	r.mu.Unlock()
	if len(diffs) > 0 {
		r.finding("%d words of %s read from its start to offsets %v differ from the records read as they were written, e.g. %s",
			len(diffs), changelog, last, strings.Join(diffs[:min(3, len(diffs))], "; "))
	}
}

// rereadEvery runs checkReread every period until ctx ends, each given
// at most a period.
func (r *run) rereadEvery(ctx context.Context, period time.Duration) {
	for {
		r.sleep(ctx, period)
		if ctx.Err() != nil {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, period)
		r.checkReread(cctx, false)
		cancel()
	}
}

// readFromStart reads the counts changelog read-committed from its start
// to its committed end as listed first, and returns each word's last
// record and the offset each partition was read to. Transaction markers
// are kept, so that a partition is known to be read to its end even when
// its last records are markers.
func readFromStart(ctx context.Context, seeds string, adm *kadm.Client) (map[string]changelogRecord, map[int32]int64, error) {
	ends, err := adm.ListCommittedOffsets(ctx, changelog)
	if err != nil {
		return nil, nil, err
	}
	until := make(map[int32]int64)
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			until[o.Partition] = o.Offset - 1
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds), kgo.ConsumeTopics(changelog),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		return nil, nil, err
	}
	defer cl.Close()
	words := make(map[string]changelogRecord)
	last := make(map[int32]int64)
	for done := 0; done < len(until); {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		fs.EachRecord(func(rec *kgo.Record) {
			end, ok := until[rec.Partition]
			if !ok || rec.Offset > end {
				return
			}
			last[rec.Partition] = rec.Offset
			if rec.Offset == end {
				done++
			}
			if rec.Attrs.IsControl() {
				return
			}
			cv, _ := statestore.SplitTimestamped(rec.Value)
			if v, err := serde.Int64.Decode(cv); err == nil {
				words[string(rec.Key)] = changelogRecord{partition: rec.Partition, offset: rec.Offset, value: v}
			}
		})
	}
	return words, last, nil
}

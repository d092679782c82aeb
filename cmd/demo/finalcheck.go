package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// The check of word-counts-per-minute, the emit-final output: after the
// feed stops and the counts are exact, the topic is read with a plain
// read-committed consumer and must hold exactly one record for each word
// and minute that has closed, with the minute's count, and nothing else.
//
// Except around a kill or a restart: while the killed instance's input
// partitions wait for the survivors to take them over (or move back to it),
// the other partitions' words advance the counting tasks' stream time, and
// the held-back words of a minute that closes meanwhile arrive later than
// the grace and are dropped, by design. A minute that closed during such a
// stall, with a margin either side, must have at most one record, counting
// no more than was fed.

// stallMargin widens each stall: the words the killed instance had not
// processed or committed when it died are older than the kill, and the
// taken-over partitions need a moment to catch up.
const stallMargin = 5 * time.Second

// stall is a time during which part of the input was held back.
type stall struct{ from, to time.Time }

// stalls lists the scenario's kills (until the failover completed) and
// restarts (until the restarted instance caught up, which is when the
// stateless tasks it got back have run again), open ones ending at now.
func (sc *scenario) stalls(now time.Time) []stall {
	or := func(t time.Time) time.Time {
		if t.IsZero() {
			return now
		}
		return t
	}
	var out []stall
	for _, r := range sc.rounds {
		out = append(out, stall{r.killAt, or(r.failoverAt)})
		if !r.restartAt.IsZero() {
			out = append(out, stall{r.restartAt, or(r.caughtUpAt)})
		}
	}
	return out
}

// closedDuring reports whether a minute closed (its end plus minuteGrace)
// within a stall, widened by stallMargin.
func closedDuring(stalls []stall, start int64) bool {
	closed := time.UnixMilli(start).Add(time.Minute + minuteGrace)
	for _, s := range stalls {
		if !closed.Before(s.from.Add(-stallMargin)) && !closed.After(s.to.Add(stallMargin)) {
			return true
		}
	}
	return false
}

// minuteKey is one word's one-minute window, by its start (Unix ms).
type minuteKey struct {
	word  string
	start int64
}

func (k minuteKey) String() string {
	return fmt.Sprintf("%q at %s", k.word, time.UnixMilli(k.start).UTC().Format("15:04"))
}

// closedMinutes returns the reference count of every word's minute that has
// closed: the minute's counting task (the word's partition of the
// repartition topic) has seen a record at or past the minute's end plus
// minuteGrace. A task's stream time is the latest time of the words it
// counts, which the feeder knows from the records the broker acknowledged.
func (f *feeder) closedMinutes(partitions int32) map[minuteKey]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	streamTime := make([]int64, partitions)
	for w, t := range f.latest {
		p := topology.Partition([]byte(w), partitions)
		streamTime[p] = max(streamTime[p], t)
	}
	out := make(map[minuteKey]int64)
	for w, ms := range f.minutes {
		st := streamTime[topology.Partition([]byte(w), partitions)]
		for start, n := range ms {
			if st >= start+time.Minute.Milliseconds()+minuteGrace.Milliseconds() {
				out[minuteKey{w, start}] = n
			}
		}
	}
	return out
}

// finalRecord is one record of word-counts-per-minute.
type finalRecord struct {
	key   minuteKey
	end   int64
	count int64
}

// readFinalMinutes reads every committed record of word-counts-per-minute,
// up to the end offsets listed when it starts, with a plain read-committed
// consumer. Control records are kept (and skipped) so that each
// partition's position reaches its end even when the last records are
// transaction markers.
func readFinalMinutes(ctx context.Context, brokers []string, opts ...kgo.Opt) ([]finalRecord, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(minuteTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.FetchMaxWait(200 * time.Millisecond),
	}, opts...)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, minuteTopic)
	if err != nil {
		return nil, fmt.Errorf("list the end offsets of %s: %w", minuteTopic, err)
	}
	if err := ends.Error(); err != nil {
		return nil, fmt.Errorf("list the end offsets of %s: %w", minuteTopic, err)
	}
	pending := make(map[int32]int64)
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			pending[o.Partition] = o.Offset
		}
	})
	ks := topology.TimeWindowedSerde(serde.String, time.Minute.Milliseconds())
	var out []finalRecord
	for len(pending) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reading %s: %d partitions short of their end: %w", minuteTopic, len(pending), err)
		}
		if err := fs.Err0(); err != nil {
			return nil, fmt.Errorf("reading %s: %w", minuteTopic, err)
		}
		var bad error
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := pending[r.Partition]; ok && r.Offset+1 >= end {
				delete(pending, r.Partition)
			}
			if r.Attrs.IsControl() || bad != nil {
				return
			}
			k, err := ks.Decode(r.Key)
			if err != nil {
				bad = fmt.Errorf("%s partition %d offset %d: key: %w", minuteTopic, r.Partition, r.Offset, err)
				return
			}
			n, err := serde.Int64.Decode(r.Value)
			if err != nil {
				bad = fmt.Errorf("%s partition %d offset %d: value: %w", minuteTopic, r.Partition, r.Offset, err)
				return
			}
			out = append(out, finalRecord{key: minuteKey{k.Key, k.Window.Start}, end: k.Window.End, count: n})
		})
		if bad != nil {
			return nil, bad
		}
	}
	return out, nil
}

// compareFinalMinutes lists how the records of word-counts-per-minute
// differ from the closed minutes' reference counts: a minute emitted twice,
// with another count, not closed (or never fed), or missing. For a minute
// atRisk only a count above the reference is wrong, and a missing one is
// not.
func compareFinalMinutes(want map[minuteKey]int64, got []finalRecord, atRisk func(minuteKey) bool) (diffs []string, exact int) {
	seen := make(map[minuteKey]int64, len(got))
	for _, r := range got {
		n, ok := want[r.key]
		switch prev, dup := seen[r.key]; {
		case dup:
			diffs = append(diffs, fmt.Sprintf("%s: final count emitted twice (%d, then %d)", r.key, prev, r.count))
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s: final count %d for a minute that has not closed or had no such word", r.key, r.count))
		case r.count > n || r.count < n && !atRisk(r.key):
			diffs = append(diffs, fmt.Sprintf("%s: final count %d, produced %d", r.key, r.count, n))
		case r.end-r.key.start != time.Minute.Milliseconds():
			diffs = append(diffs, fmt.Sprintf("%s: window ends %dms after it starts", r.key, r.end-r.key.start))
		case r.count == n:
			exact++
		}
		seen[r.key] = r.count
	}
	for _, k := range slices.SortedFunc(maps.Keys(want), func(a, b minuteKey) int {
		return cmp.Or(cmp.Compare(a.start, b.start), strings.Compare(a.word, b.word))
	}) {
		if _, ok := seen[k]; !ok && !atRisk(k) {
			diffs = append(diffs, fmt.Sprintf("%s: no final count (produced %d)", k, want[k]))
		}
	}
	return diffs, exact
}

// finalCheck is what the check of word-counts-per-minute found.
type finalCheck struct {
	closed  int // word-minutes closed
	minutes int // distinct minutes among them
	atRisk  int // word-minutes closed during a stall
	exact   int // word-minutes with one record holding the reference count
	diffs   []string
}

// checkFinalMinutes reads word-counts-per-minute and compares it with the
// closed minutes.
func (d *demo) checkFinalMinutes(ctx context.Context, partitions int32, stalls []stall) finalCheck {
	want := d.feed.closedMinutes(partitions)
	fc := finalCheck{closed: len(want)}
	starts := make(map[int64]bool)
	for k := range want {
		starts[k.start] = true
		if closedDuring(stalls, k.start) {
			fc.atRisk++
		}
	}
	fc.minutes = len(starts)
	got, err := readFinalMinutes(ctx, d.broker.Addrs())
	if err != nil {
		fc.diffs = []string{err.Error()}
		return fc
	}
	fc.diffs, fc.exact = compareFinalMinutes(want, got, func(k minuteKey) bool { return closedDuring(stalls, k.start) })
	return fc
}

package procs

// Helpers for the kill-loop tests: instances started with extra flags, a
// monitor of which partitions have a running active, and the bound on
// at-least-once over-counting derived from committed and end offsets taken
// around each kill.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eddystreams/eddy/integration/fixture"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// activeMonitor polls every instance's /v1/lags and keeps, for each
// partition of the counts store, since when no instance has reported a
// running active for it (role "active": restoring actives do not count).
// An instance that does not answer within the poll's timeout counts as
// running nothing.
type activeMonitor struct {
	hc         *http.Client
	insts      []*procInstance
	partitions int32
	every      time.Duration

	mu       sync.Mutex
	lacking  map[int32]time.Time // partition → since when it lacks a running active
	longest  time.Duration       // longest period a partition lacked one
	longestP int32
	longestT time.Time // when that period ended
	allSince time.Time // since when every partition has had one; zero if not now
	samples  int

	stop chan struct{}
	done chan struct{}
}

func newActiveMonitor(insts []*procInstance, partitions int32) *activeMonitor {
	tr := &http.Transport{DialContext: (&net.Dialer{Timeout: 300 * time.Millisecond}).DialContext, MaxIdleConnsPerHost: 4}
	m := &activeMonitor{
		hc:    &http.Client{Transport: tr, Timeout: time.Second},
		insts: insts, partitions: partitions, every: 100 * time.Millisecond,
		lacking: make(map[int32]time.Time), stop: make(chan struct{}), done: make(chan struct{}),
	}
	go m.run()
	return m
}

// running returns the partitions of the counts store addr runs an active
// for.
func (m *activeMonitor) running(addr string) []int32 {
	resp, err := m.hc.Get("http://" + addr + "/v1/lags")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var lags []struct {
		Store     string `json:"store"`
		Partition int32  `json:"partition"`
		Role      string `json:"role"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&lags) != nil {
		return nil
	}
	var out []int32
	for _, l := range lags {
		if l.Store == fixture.CountsStore && l.Role == "active" {
			out = append(out, l.Partition)
		}
	}
	return out
}

func (m *activeMonitor) run() {
	defer close(m.done)
	defer m.hc.CloseIdleConnections()
	tick := time.NewTicker(m.every)
	defer tick.Stop()
	for {
		// The instances are asked together; the sample's time is when
		// the slowest answered, so a partition counts as lacking an
		// active from the first sample that found none.
		var mu sync.Mutex
		covered := make(map[int32]bool)
		var wg sync.WaitGroup
		for _, in := range m.insts {
			wg.Go(func() {
				ps := m.running(in.http)
				mu.Lock()
				for _, p := range ps {
					covered[p] = true
				}
				mu.Unlock()
			})
		}
		wg.Wait()
		m.observe(time.Now(), covered)
		select {
		case <-m.stop:
			return
		case <-tick.C:
		}
	}
}

func (m *activeMonitor) observe(now time.Time, covered map[int32]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.samples++
	all := true
	for p := range m.partitions {
		since, lacked := m.lacking[p]
		switch {
		case covered[p] && lacked:
			if d := now.Sub(since); d > m.longest {
				m.longest, m.longestP, m.longestT = d, p, now
			}
			delete(m.lacking, p)
		case !covered[p] && !lacked:
			m.lacking[p] = now
		}
		if !covered[p] {
			all = false
		}
	}
	switch {
	case !all:
		m.allSince = time.Time{}
	case m.allSince.IsZero():
		m.allSince = now
	}
}

// allRunningSince returns since when every partition has had a running
// active, or false if one lacks it now.
func (m *activeMonitor) allRunningSince() (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.allSince, !m.allSince.IsZero()
}

// longestLack returns the longest period a partition lacked a running
// active, counting one that still lacks it up to now, and a description.
func (m *activeMonitor) longestLack() (time.Duration, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, what := m.longest, fmt.Sprintf("partition %d, until %s", m.longestP, m.longestT.Format("15:04:05.000"))
	for p, since := range m.lacking {
		if now := time.Since(since); now > d {
			d, what = now, fmt.Sprintf("partition %d, still lacking", p)
		}
	}
	if d == 0 {
		what = "never"
	}
	return d, what
}

func (m *activeMonitor) close() {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
}

// topicOffsets are offsets by topic and partition.
type topicOffsets map[string]map[int32]int64

// redoWindow is what one kill may make the application process again under
// at-least-once: on every partition of the input and repartition topics,
// the records from the group's committed offset, read just before the kill,
// to the partition's end, read just after it.
type redoWindow struct{ from, to topicOffsets }

// offsetProbe reads a group's committed offsets and the topics' end
// offsets.
type offsetProbe struct {
	adm    *kadm.Client
	group  string
	topics []string
}

func newOffsetProbe(t *testing.T, broker, group string, topics ...string) *offsetProbe {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return &offsetProbe{adm: kadm.NewClient(cl), group: group, topics: topics}
}

// committed returns the group's committed offsets on the topics; a
// partition without a commit is at 0.
func (o *offsetProbe) committed(t *testing.T) topicOffsets {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := o.adm.FetchOffsetsForTopics(ctx, o.group, o.topics...)
	require.NoError(t, err, "committed offsets of %s", o.group)
	out := make(topicOffsets)
	resp.Each(func(r kadm.OffsetResponse) {
		if out[r.Topic] == nil {
			out[r.Topic] = make(map[int32]int64)
		}
		if r.Err == nil && r.At > 0 {
			out[r.Topic][r.Partition] = r.At
		} else {
			out[r.Topic][r.Partition] = 0
		}
	})
	return out
}

// ends returns the topics' end offsets.
func (o *offsetProbe) ends(t *testing.T) topicOffsets {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := o.adm.ListEndOffsets(ctx, o.topics...)
	require.NoError(t, err, "end offsets")
	out := make(topicOffsets)
	resp.Each(func(l kadm.ListedOffset) {
		require.NoError(t, l.Err, "end offset of %s/%d", l.Topic, l.Partition)
		if out[l.Topic] == nil {
			out[l.Topic] = make(map[int32]int64)
		}
		out[l.Topic][l.Partition] = l.Offset
	})
	return out
}

// readWhole reads every record of topic up to its current end, without
// read-committed isolation, and returns them by partition and offset.
func readWhole(t *testing.T, broker, topic string, ends map[int32]int64) map[int32]map[int64]*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out := make(map[int32]map[int64]*kgo.Record)
	done := func() bool {
		for p, end := range ends {
			// Offsets past the last record are transaction markers or
			// nothing; what matters is having seen everything below end.
			if end > 0 && next(out[p]) < end {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "reading %s to its end %v", topic, ends)
		fs.EachError(func(_ string, _ int32, err error) { require.NoError(t, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if out[r.Partition] == nil {
				out[r.Partition] = make(map[int64]*kgo.Record)
			}
			out[r.Partition][r.Offset] = r
		})
	}
	return out
}

// next is one past the highest offset in recs, or 0.
func next(recs map[int64]*kgo.Record) int64 {
	var n int64
	for off := range recs {
		n = max(n, off+1)
	}
	return n
}

// overcountBound returns, for each word, how many extra counts the kills
// can explain under at-least-once. At-least-once commits a task's input
// offsets only once its stores' changelog records and its output are
// written, so a killed instance leaves behind, at most, work on records
// past the group's committed offsets that was written but not committed,
// and whoever runs the task next does that work again. Work is redone at
// two stages of the word count: lines of the input topic (each redone line
// writes its words to the repartition topic again, so each of its words
// is counted once more) and words of the repartition topic (each redone
// word is counted once more, each redone partial count by its value). The committed offset read before the kill is
// at most the one in force when the victim died (commits only move
// forward), and the end read after the kill is at least as far as the
// victim could have read, so each window holds every record the kill can
// make the application process again. Summed over the kills and both
// stages, per word, that is an upper bound on the over-count; it holds for
// redone work only, so a count above it is a bug.
func overcountBound(t *testing.T, broker string, windows []redoWindow) map[string]int64 {
	t.Helper()
	bound := make(map[string]int64)
	if len(windows) == 0 {
		return bound
	}
	last := windows[len(windows)-1].to
	repart := fixture.RepartitionTopic(procApp)
	lines := readWhole(t, broker, fixture.InputTopic, last[fixture.InputTopic])
	words := readWhole(t, broker, repart, last[repart])
	for _, w := range windows {
		for p, to := range w.to[fixture.InputTopic] {
			for off := w.from[fixture.InputTopic][p]; off < to; off++ {
				if r := lines[p][off]; r != nil {
					for _, word := range fixture.Tokenize(string(r.Value)) {
						bound[word]++
					}
				}
			}
		}
		for p, to := range w.to[repart] {
			for off := w.from[repart][p]; off < to; off++ {
				if r := words[p][off]; r != nil {
					bound[string(r.Key)] += repartitionWords(t, r)
				}
			}
		}
	}
	return bound
}

// repartitionWords is how many words a repartition record stands for: one
// for a raw word, the partial count for a combined one.
func repartitionWords(t *testing.T, r *kgo.Record) int64 {
	t.Helper()
	for _, h := range r.Headers {
		if h.Key == topology.CombinedHeader {
			n, err := serde.Int64.Decode(r.Value)
			require.NoError(t, err, "partial count of %q at %s/%d@%d", r.Key, r.Topic, r.Partition, r.Offset)
			return n
		}
	}
	return 1
}

// checkOvercount compares counts against the reference and the bound: no
// word below its reference (input lost), none above reference + bound. It
// returns the total over-count and the number of words over-counted.
func checkOvercount(t *testing.T, want, got, bound map[string]int64) (excess int64, words int) {
	t.Helper()
	var below, beyond []string
	for _, w := range slices.Sorted(maps.Keys(want)) {
		d := got[w] - want[w]
		switch {
		case d < 0:
			below = append(below, fmt.Sprintf("%q: %d of %d", w, got[w], want[w]))
		case d > 0:
			excess += d
			words++
			if d > bound[w] {
				beyond = append(beyond, fmt.Sprintf("%q: %d over, bound %d", w, d, bound[w]))
			}
		}
	}
	for w, n := range got {
		if _, ok := want[w]; !ok && n != 0 {
			beyond = append(beyond, fmt.Sprintf("%q: counted %d, not in the text", w, n))
		}
	}
	require.Empty(t, below, "counts below the text's: input was lost")
	require.Empty(t, beyond, "over-counts beyond what redone work since the victims' last commits explains")
	return excess, words
}

// waitAllCommitted waits until the group has committed every record of the
// probe's topics: under at-least-once that means the stores, changelogs
// and output hold all the work on them.
func waitAllCommitted(t *testing.T, o *offsetProbe, timeout time.Duration, insts ...*procInstance) {
	t.Helper()
	fixture.WaitFor(t, timeout, "the application to commit all its input", func() (bool, string) {
		requireAlive(t, insts...)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		com, err := o.adm.FetchOffsetsForTopics(ctx, o.group, o.topics...)
		if err != nil {
			return false, err.Error()
		}
		ends, err := o.adm.ListEndOffsets(ctx, o.topics...)
		if err != nil {
			return false, err.Error()
		}
		var behind []string
		ends.Each(func(l kadm.ListedOffset) {
			at := int64(0) // an empty partition needs no commit
			if r, ok := com.Lookup(l.Topic, l.Partition); ok && r.Err == nil && r.At >= 0 {
				at = r.At
			}
			if at != l.Offset {
				behind = append(behind, fmt.Sprintf("%s/%d committed %d of %d", l.Topic, l.Partition, at, l.Offset))
			}
		})
		if len(behind) > 0 || len(ends) != len(o.topics) {
			return false, strings.Join(behind, ", ")
		}
		return true, ""
	})
}

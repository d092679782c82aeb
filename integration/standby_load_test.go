package integration

// Load the standby tests keep up while instances come and go: a producer of
// live input and a reader checking that answers never go backwards.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/topology"
)

// liveProducer feeds the input topic from a goroutine while a test does
// something else, and keeps the reference count of what was acknowledged.
type liveProducer struct {
	c       *cluster
	gen     *corpus
	mu      sync.Mutex
	want    map[string]int64
	err     error
	batches atomic.Int64
	stop    chan struct{}
	done    chan struct{}
}

// startProducing sends batches of lines holding wordsPerBatch words, one
// batch each interval, until stopped. The corpus and want belong to the
// producer until stopProducing returns.
func (c *cluster) startProducing(gen *corpus, want map[string]int64, wordsPerBatch int, interval time.Duration) *liveProducer {
	lp := &liveProducer{c: c, gen: gen, want: want, stop: make(chan struct{}), done: make(chan struct{})}
	go lp.run(wordsPerBatch, interval)
	return lp
}

func (lp *liveProducer) run(wordsPerBatch int, interval time.Duration) {
	defer close(lp.done)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-lp.stop:
			return
		case <-tick.C:
		}
		counts := make(map[string]int64)
		lines := lp.gen.Lines(wordsPerBatch, counts)
		recs := make([]*kgo.Record, len(lines))
		for i, l := range lines {
			recs[i] = &kgo.Record{Topic: inputTopic, Partition: lp.c.next, Value: []byte(l)}
			lp.c.next = (lp.c.next + 1) % lp.c.partitions
		}
		pctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
		err := lp.c.cl.ProduceSync(pctx, recs...).FirstErr()
		cancel()
		lp.mu.Lock()
		if err != nil {
			lp.err = err
			lp.mu.Unlock()
			return
		}
		for w, n := range counts {
			lp.want[w] += n
		}
		lp.mu.Unlock()
		lp.batches.Add(1)
	}
}

// waitBatches waits until n more batches than now were acknowledged.
func (lp *liveProducer) waitBatches(t *testing.T, n int64) {
	t.Helper()
	target := lp.batches.Load() + n
	waitFor(t, settleTimeout, fmt.Sprintf("%d more batches of input", n), func() (bool, string) {
		lp.mu.Lock()
		err := lp.err
		lp.mu.Unlock()
		require.NoError(t, err, "producing input")
		got := lp.batches.Load()
		return got >= target, fmt.Sprintf("%d of %d batches", got, target)
	})
}

// stopProducing stops the producer and requires that every batch was
// acknowledged.
func (lp *liveProducer) stopProducing(t *testing.T) {
	t.Helper()
	close(lp.stop)
	<-lp.done
	require.NoError(t, lp.err, "producing input")
}

// monotonicReader reads sample words from every instance in a loop and
// records any count that is lower than one read before it.
type monotonicReader struct {
	insts []*instance
	words []string
	keys  [][]byte

	mu         sync.Mutex
	last       map[string]int64
	reads      map[string][2]int // per word: reads before and after the phase flips
	violations []string
	phase      atomic.Int32

	stop chan struct{}
	done chan struct{}
}

func startMonotonicReader(t *testing.T, insts []*instance, words []string) *monotonicReader {
	m := &monotonicReader{
		insts: insts, words: words,
		last: make(map[string]int64), reads: make(map[string][2]int),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	for _, w := range words {
		key, err := serde.String.Encode(w)
		require.NoError(t, err)
		m.keys = append(m.keys, key)
	}
	go m.run()
	return m
}

func (m *monotonicReader) run() {
	defer close(m.done)
	for {
		select {
		case <-m.stop:
			return
		default:
		}
		for i, w := range m.words {
			for _, in := range m.insts {
				val, found, _, err := activeGet(in, countsStore, m.keys[i])
				if err != nil || !found {
					continue
				}
				n, err := serde.Int64.Decode(val)
				m.mu.Lock()
				switch {
				case err != nil:
					m.violations = append(m.violations, fmt.Sprintf("%q on %s: undecodable %x", w, in.name, val))
				case n < m.last[w]:
					m.violations = append(m.violations, fmt.Sprintf("%q on %s: %d after %d", w, in.name, n, m.last[w]))
				default:
					m.last[w] = n
				}
				r := m.reads[w]
				r[m.phase.Load()]++
				m.reads[w] = r
				m.mu.Unlock()
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (m *monotonicReader) stopReading() {
	close(m.stop)
	<-m.done
}

// readRange returns the records of one partition at offsets [from, to).
func (c *cluster) readRange(t *testing.T, topic string, p int32, from, to int64) []*kgo.Record {
	t.Helper()
	if from >= to {
		return nil
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.b.Addrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(from)}}),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	require.NoError(t, err)
	defer cl.Close()
	var out []*kgo.Record
	next := from
	rctx := ctx(t)
	for next < to {
		fs := cl.PollFetches(rctx)
		require.NoError(t, rctx.Err(), "reading %s/%d: got to %d of [%d, %d)", topic, p, next, from, to)
		fs.EachError(func(_ string, _ int32, err error) { require.NoError(t, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= next && r.Offset < to {
				out = append(out, r)
				next = r.Offset + 1
			}
		})
	}
	return out
}

// storeCounts reads every word of words from whichever running instance
// hosts its partition as a running active.
func storeCounts(t *testing.T, words []string, insts ...*instance) map[string]int64 {
	t.Helper()
	got := make(map[string]int64, len(words))
	for _, w := range words {
		key, err := serde.String.Encode(w)
		require.NoError(t, err)
		hosted := false
		for _, in := range insts {
			v, found, _, err := activeGet(in, countsStore, key)
			if errors.Is(err, iq.ErrNotHostedHere) || errors.Is(err, iq.ErrNotRunning) {
				continue
			}
			require.NoError(t, err, "activeGet(%q) on %s", w, in.name)
			hosted = true
			if found {
				got[w], err = serde.Int64.Decode(v)
				require.NoError(t, err)
			}
			break
		}
		require.True(t, hosted, "no instance hosts the partition of %q", w)
	}
	return got
}

// topWords returns the n most frequent words of each counts partition.
func topWords(counts map[string]int64, partitions int32, n int) []string {
	byPart := make(map[int32][]string)
	for w := range counts {
		key, _ := serde.String.Encode(w)
		p := topology.Partition(key, partitions)
		byPart[p] = append(byPart[p], w)
	}
	var out []string
	for _, ws := range byPart {
		sort.Slice(ws, func(i, j int) bool {
			if counts[ws[i]] != counts[ws[j]] {
				return counts[ws[i]] > counts[ws[j]]
			}
			return ws[i] < ws[j]
		})
		out = append(out, ws[:min(n, len(ws))]...)
	}
	slices.Sort(out)
	return out
}

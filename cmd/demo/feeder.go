package main

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// feeder produces demo text at a steady rate and keeps the reference count:
// the words of every line the broker acknowledged.
type feeder struct {
	cl *kgo.Client

	mu   sync.Mutex
	want map[string]int64
	// minutes counts the words per minute of the records' times (the
	// producer's clock, the time counts-per-minute windows them by on
	// topics with the default CreateTime), by window start.
	minutes map[string]map[int64]int64
	// latest is each word's latest record time, from which the check
	// tells which minutes have closed.
	latest   map[string]int64
	lines    int64 // acknowledged
	words    int64
	failed   int64
	firstErr error
}

// run produces rate lines a second until ctx ends. Records are produced
// with a context that does not end with ctx: a record cancelled after it
// reached the broker would be counted by the cluster but not by the
// reference. Flush waits for the ones in flight.
func (f *feeder) run(ctx context.Context, rate int, c *corpus) {
	produceCtx := context.WithoutCancel(ctx)
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var sent int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// After a stall, catch up at most a tenth of a second's worth
		// at once, so that the rate stays steady.
		due := min(int64(time.Since(start).Seconds()*float64(rate))-sent, max(int64(rate/10), 1))
		for range due {
			line := c.line()
			ws := words(line)
			f.cl.Produce(produceCtx, &kgo.Record{Value: []byte(line)}, func(r *kgo.Record, err error) { f.acked(r, ws, err) })
			sent++
		}
	}
}

func (f *feeder) acked(r *kgo.Record, ws []string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.failed++
		if f.firstErr == nil {
			f.firstErr = err
		}
		return
	}
	f.lines++
	f.words += int64(len(ws))
	ts := r.Timestamp.UnixMilli()
	start := minuteOf(ts)
	for _, w := range ws {
		f.want[w]++
		f.latest[w] = max(f.latest[w], ts)
		if f.minutes[w] == nil {
			f.minutes[w] = make(map[int64]int64)
		}
		f.minutes[w][start]++
	}
}

// minuteOf is the start of the one-minute window holding ms.
func minuteOf(ms int64) int64 {
	return ms - ms%time.Minute.Milliseconds()
}

// fed returns the lines and words acknowledged so far.
func (f *feeder) fed() (lines, words int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lines, f.words
}

// minuteReference returns every word's reference counts of the minutes
// starting at from or later.
func (f *feeder) minuteReference(from int64) map[string]map[int64]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]map[int64]int64)
	for w, ms := range f.minutes {
		for start, n := range ms {
			if start >= from {
				if out[w] == nil {
					out[w] = make(map[int64]int64)
				}
				out[w][start] = n
			}
		}
	}
	return out
}

// reference returns a copy of the reference count.
func (f *feeder) reference() map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int64, len(f.want))
	for w, n := range f.want {
		out[w] = n
	}
	return out
}

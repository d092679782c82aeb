package main

// The check that ends the run: every word's count, and its counts per
// minute, read through the routing client until they equal the reference.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/eddystreams/eddy/iq"
	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/serde"
)

// checkCounts queries every word of want through a routing client, from
// running actives only, until each count equals want, and each word's
// counts per minute (the windows of counts-per-minute starting at from or
// later) equal wantMin, or ctx ends; it returns the words that still
// differ. progress reports how many words match so far.
//
// The check has a client of its own, without monotonic reads: the sample
// queries' client remembers positions read from standbys, and under
// exactly-once a standby's position counts the last commit marker while
// its active's does not, so that client would find an idle active
// forever "behind" what it read.
func (d *demo) checkCounts(ctx context.Context, want map[string]int64, wantMin map[string]map[int64]int64, from int64, progress func(exact int)) []string {
	var addrs []string
	for _, sl := range d.slots {
		addrs = append(addrs, sl.addr)
	}
	c, err := iq.NewClient(addrs, iq.ClientOptions{DisableMonotonic: true})
	if err != nil {
		return []string{err.Error()}
	}
	defer c.Close()
	pending := slices.Sorted(func(yield func(string) bool) {
		for w := range want {
			if !yield(w) {
				return
			}
		}
	})
	diffs := make(map[string]string)
	for {
		next := d.checkPass(ctx, c, pending, want, wantMin, from, diffs)
		progress(len(want) - len(next))
		if len(next) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			out := make([]string, 0, len(diffs))
			for _, w := range next {
				out = append(out, diffs[w])
			}
			slices.Sort(out)
			return out
		case <-time.After(500 * time.Millisecond):
		}
		slices.Sort(next)
		pending = next
	}
}

// checkPass queries each word of pending once, checkWorkers at a time, and
// returns the words whose counts still differ from want or wantMin. diffs
// says how each word differs: the pass records the differences it finds
// and drops the words that now match.
func (d *demo) checkPass(ctx context.Context, c *iq.Client, pending []string, want map[string]int64, wantMin map[string]map[int64]int64, from int64, diffs map[string]string) []string {
	var mu sync.Mutex
	var next []string
	work := make(chan string)
	var wg sync.WaitGroup
	for range checkWorkers {
		wg.Go(func() {
			for w := range work {
				a, err := d.query(ctx, c, w)
				var got map[int64]int64
				if err == nil && a.count == want[w] {
					got, err = d.queryMinutes(ctx, c, w, from)
				}
				mu.Lock()
				switch {
				case err != nil:
					diffs[w] = fmt.Sprintf("%s: %s", w, shortRefusal(err))
					next = append(next, w)
				case a.count != want[w]:
					diffs[w] = fmt.Sprintf("%s: counted %d, produced %d", w, a.count, want[w])
					next = append(next, w)
				case !maps.Equal(got, wantMin[w]):
					diffs[w] = fmt.Sprintf("%s: counted per minute %s, produced %s", w, minuteList(got), minuteList(wantMin[w]))
					next = append(next, w)
				default:
					delete(diffs, w)
				}
				mu.Unlock()
			}
		})
	}
	for _, w := range pending {
		work <- w
	}
	close(work)
	wg.Wait()
	return next
}

// lookup reads a word's count from an instance's running active of the
// word's partition; -1 when the word is not there.
func lookup(in *instance, word string) (int64, error) {
	k, _ := serde.String.Encode(word)
	v, found, _, err := activeGet(in.app, countsStore, k)
	if err != nil || !found {
		return -1, err
	}
	return serde.Int64.Decode(v)
}

// activeGet reads a key through the query path under the default bound, as
// an application does: from the running active of its partition on app.
func activeGet(app *runtime.App, store string, key []byte) (value []byte, found bool, partition int32, err error) {
	res, err := iq.NewQuerier(app.Queries()).GetBytes(context.Background(), store, key)
	return res.Value, res.Found, res.Provenance.Partition, err
}

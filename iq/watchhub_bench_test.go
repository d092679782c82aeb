package iq

import (
	"strconv"
	"sync"
	"testing"
	"time"
)

// BenchmarkHubWriterCost measures what publishing one commit's changes
// costs the writer (a stream thread at commit) with 10,000 watches over
// 1,000 keys, each drained by a reader goroutine of its own: the commit
// changes every key once. "inline" fans out on the writer's goroutine,
// "queued" is Publish, which leaves the fan-out to the hub's dispatcher.
// Both wait for every reader to have its change before the next commit,
// so that they do the same work; writer-us/commit is the writer's part.
func BenchmarkHubWriterCost(b *testing.B) {
	const keys, watchers = 1000, 10_000
	for _, mode := range []string{"inline", "queued"} {
		b.Run(mode, func(b *testing.B) {
			var h Hub
			r := &fakeReplica{info: ReplicaInfo{Store: "s", Role: RoleActive, Position: 1 << 40}}
			var got sync.WaitGroup
			stop := make(chan struct{})
			var readers sync.WaitGroup
			for i := range watchers {
				f := newFeed(partKey{"s", 0}, []byte("key"+strconv.Itoa(i%keys)), nil, WatchOptions{Buffer: 16, Coalesce: true})
				h.subscribe(f, r)
				defer h.unsubscribe(f)
				readers.Go(func() {
					var spare []buffered
					for {
						select {
						case <-stop:
							return
						case <-f.notify:
						}
						changes, _, _, _ := f.take(spare)
						for range changes {
							got.Done()
						}
						spare = changes
					}
				})
			}
			changes := make([]Change, keys)
			for i := range changes {
				changes[i] = Change{Key: []byte("key" + strconv.Itoa(i)), Value: []byte("v")}
			}
			var writer time.Duration
			pos := int64(0)
			for b.Loop() {
				batch := make([]Change, keys)
				for i, c := range changes {
					c.Position = pos
					pos++
					batch[i] = c
				}
				got.Add(watchers)
				start := time.Now()
				if mode == "inline" {
					h.deliver([]published{{partKey{"s", 0}, batch}})
				} else {
					h.Publish("s", 0, batch)
				}
				writer += time.Since(start)
				got.Wait()
			}
			b.ReportMetric(float64(writer.Microseconds())/float64(b.N), "writer-us/commit")
			close(stop)
			readers.Wait()
		})
	}
}

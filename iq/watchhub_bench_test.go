package iq

import (
	"context"
	"strconv"
	"sync"
	"syscall"
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
					var spare []*Update
					for {
						select {
						case <-stop:
							return
						case <-f.notify:
						}
						updates, _, _, _ := f.takeUpdates(spare)
						for range updates {
							got.Done()
						}
						spare = updates
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

// watchingBackend is a fakeBackend with a hub, whose changelog holds
// nothing to read back.
type watchingBackend struct {
	*fakeBackend
	hub Hub
}

func (b *watchingBackend) Hub() *Hub { return &b.hub }

func (b *watchingBackend) ReadChangelog(context.Context, string, int32, func([]byte) bool, int64, int64) ([]Change, int64, error) {
	return nil, 0, nil
}

// BenchmarkWatchRound measures a round of delivery as a benchmark of
// processing with watchers sees it: a commit changes each of 1,000 keys
// once, and each of 10,000 watches of those keys, read through Watch.Next
// on a goroutine of its own under one context ("next") or receiving in a
// function (Watch.Receive, "receive"), takes its update. ns/op is the
// whole round, from Publish to the last watch's update; cpu-ns/update the
// CPU time the process spent on it.
func BenchmarkWatchRound(b *testing.B) {
	for _, mode := range []string{"next", "receive"} {
		b.Run(mode, func(b *testing.B) { watchRound(b, mode == "receive") })
	}
}

func watchRound(b *testing.B, receive bool) {
	const keys, watchers = 1000, 10_000
	fb := &watchingBackend{fakeBackend: newFakeBackend("h", map[string]int32{"s": 1})}
	fb.add("s", 0, RoleActive).set(func(i *ReplicaInfo) { i.Position, i.End = 1<<40, 1<<40 })
	q := NewQuerier(fb)
	ctx, cancel := context.WithCancel(context.Background())
	var got sync.WaitGroup
	var readers sync.WaitGroup
	for i := range watchers {
		w, err := q.WatchBytes(ctx, "s", []byte("key"+strconv.Itoa(i%keys)), WatchOptions{From: FromNow, Coalesce: true, Buffer: 16})
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		if receive {
			w.Receive(func(_ Update, err error) bool {
				if err == nil {
					got.Done()
				}
				return err == nil
			})
			continue
		}
		readers.Go(func() {
			for {
				if _, err := w.Next(ctx); err != nil {
					return
				}
				got.Done()
			}
		})
	}
	pos := int64(1 << 40)
	cpu := processCPU()
	for b.Loop() {
		batch := make([]Change, keys)
		for i := range batch {
			batch[i] = Change{Key: []byte("key" + strconv.Itoa(i)), Value: []byte("v"), Position: pos}
			pos++
		}
		got.Add(watchers)
		fb.hub.Publish("s", 0, batch)
		got.Wait()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*watchers), "ns/update")
	b.ReportMetric(float64((processCPU()-cpu).Nanoseconds())/float64(b.N*watchers), "cpu-ns/update")
	cancel()
	readers.Wait()
}

// processCPU is the CPU time the process has used, user and system: what
// delivery takes from the processing beside it, however loaded the
// machine is otherwise.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

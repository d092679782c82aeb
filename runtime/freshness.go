package runtime

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/task"
)

// FreshnessInterval is how often an instance lists its topology's source
// partitions' end offsets and the group's committed offsets, to tell how
// long ago each task's active last covered its input
// (ReplicaInfo.InputCommitted), while any of them moves. While listings
// find nothing moved, each waits twice as long as the one before, up to
// FreshnessQuietInterval.
const FreshnessInterval = 500 * time.Millisecond

// FreshnessQuietInterval is the longest wait between two freshness
// listings, reached while no source partition's end or committed offset
// moves. A listing dates what it finds, so waiting longer never makes an
// age short: an idle partition's InputCommitted is then at most this much
// (and a listing's time) older than the truth, where it would be
// FreshnessInterval older. It stays under LagConfirmWindow, so the active
// tasks' consumer lags, taken from the same listings, stay confirmed.
const FreshnessQuietInterval = 4 * FreshnessInterval

// freshnessHistory caps the end offsets remembered per source partition
// that its committed offset has not reached yet: at FreshnessInterval, two
// minutes of an active that commits nothing. Older ones are forgotten, and
// a partition whose commit then passes them is taken as covered only at
// the last time known to be covered, which makes its age err long, never
// short.
const freshnessHistory = 240

// freshness watches whether each task's active keeps committing the input
// that arrives. A standby follows the changelog its active writes; when the
// active dies the changelog stops, and the standby shows no lag while input
// piles up unprocessed. What does not stop is the source partitions' end, so
// the freshness of a replica is measured there: the latest time t at which
// the end offset of every source partition was covered by the group's
// committed offset. The same listings give the consumer lag of the
// instance's active tasks (eddy_consumer_lag_records).
//
// Every source partition of the topology is watched from start-up, not only
// those of the replicas held now: a standby opened by a rebalance then finds
// its partition's history already known, rather than being refused every
// age bound until a commit is first seen to cover an end seen after it
// opened, which on a busy partition takes a commit interval or more.
//
// The end is what the stream threads read up to: the last stable offset
// under exactly-once, the high watermark otherwise. A drained task commits
// exactly its partition's end, markers included (see thread.passControl).
//
// Listings are spaced by a listPace: an idle instance of thousands of
// tasks would otherwise spend a share of a core listing thousands of
// unchanged offsets twice a second.
type freshness struct {
	a      *App
	pace   listPace
	cancel context.CancelFunc
	exited chan struct{}
	// topics are the topology's source topics, fixed for the App's life.
	topics []string

	mu sync.Mutex
	// watches holds each source topic's partitions, indexed by partition.
	watches map[string][]*inputWatch
	// rounds counts the listings made.
	rounds int
}

// inputWatch is what is known of one source partition.
type inputWatch struct {
	// samples are end offsets observed and not yet covered, oldest first;
	// each carries the latest time its end was observed.
	samples []endSample
	// covered is the latest time whose end the committed offset is known
	// to cover; zero if never.
	covered time.Time
	// end and committed are what the last listing found, at listed; lag
	// is the end minus the committed offset then.
	end, committed int64
	lag            int64
	listed         time.Time
	// fetched is the committed offset the listing round fetchedRound
	// fetched (fetchErr: it failed for this partition), for the same
	// round's ends to be compared with.
	fetchedRound int
	fetched      int64
	fetchErr     bool
}

type endSample struct {
	at  time.Time
	end int64
}

// newFreshness starts a freshness tracker listing every, and up to quiet
// while nothing moves.
func newFreshness(a *App, every, quiet time.Duration) *freshness {
	ctx, cancel := context.WithCancel(context.Background())
	f := newFreshnessIdle(a, every, quiet)
	f.cancel = cancel
	go f.run(ctx)
	return f
}

// newFreshnessIdle returns a freshness tracker that lists nothing until
// round is called.
func newFreshnessIdle(a *App, every, quiet time.Duration) *freshness {
	f := &freshness{a: a, pace: listPace{base: every, longest: quiet}, exited: make(chan struct{}),
		topics: a.sourceTopics(), watches: make(map[string][]*inputWatch)}
	for _, t := range f.topics {
		f.watches[t] = nil
	}
	return f
}

func (f *freshness) close() {
	f.cancel()
	<-f.exited
}

func (f *freshness) run(ctx context.Context) {
	defer close(f.exited)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		began := time.Now()
		moved := f.round(ctx)
		timer.Reset(f.pace.next(moved) - time.Since(began))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
	}
}

// listPace is the wait before the next freshness listing: the base while
// listings find ends or commits moving, and while they find nothing moved,
// twice the last wait, up to longest.
type listPace struct {
	base, longest time.Duration
	wait          time.Duration
}

// next returns the wait after a listing that found something moved, or
// not.
func (p *listPace) next(moved bool) time.Duration {
	if moved || p.wait == 0 {
		p.wait = p.base
	} else {
		p.wait = min(2*p.wait, p.longest)
	}
	return p.wait
}

// sourceTopics lists the full names of the topology's source topics, user
// and repartition alike.
func (a *App) sourceTopics() []string {
	topics := make(map[string]bool)
	for _, st := range graph.Of(a.topo).SubTopologies() {
		for _, r := range st.Sources {
			topics[r.FullName(a.cfg.ApplicationID)] = true
		}
	}
	return slices.Sorted(maps.Keys(topics))
}

// sourcePartitions lists a task's source partitions.
func (a *App) sourcePartitions(id task.ID) []changelog.TopicPartition {
	var out []changelog.TopicPartition
	for _, r := range graph.Of(a.topo).SubTopologies()[id.SubTopology].Sources {
		out = append(out, changelog.TopicPartition{Topic: r.FullName(a.cfg.ApplicationID), Partition: id.Partition})
	}
	return out
}

// consumerLags returns, for each of the given source partitions listed in
// the last lagWindow, its end minus the group's committed offset.
func (f *freshness) consumerLags(tps []changelog.TopicPartition, lagWindow time.Duration) map[changelog.TopicPartition]int64 {
	out := make(map[changelog.TopicPartition]int64, len(tps))
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, tp := range tps {
		if w := f.watch(tp); w != nil && !w.listed.IsZero() && time.Since(w.listed) <= lagWindow {
			out[tp] = w.lag
		}
	}
	return out
}

// watch returns what is known of a source partition, nil if nothing. It
// is called with mu held.
func (f *freshness) watch(tp changelog.TopicPartition) *inputWatch {
	ws := f.watches[tp.Topic]
	if tp.Partition < 0 || int(tp.Partition) >= len(ws) {
		return nil
	}
	return ws[tp.Partition]
}

// observe records the end seen at a time and the committed offset seen
// after it.
func (w *inputWatch) observe(at time.Time, end, committed int64) {
	if n := len(w.samples); n > 0 && w.samples[n-1].end >= end {
		// Ends only grow (a smaller one is a recreated topic: start
		// again from it).
		if w.samples[n-1].end == end {
			w.samples[n-1].at = at
		} else {
			w.samples = append(w.samples[:0], endSample{at, end})
		}
	} else {
		w.samples = append(w.samples, endSample{at, end})
	}
	if len(w.samples) > freshnessHistory {
		w.samples = slices.Delete(w.samples, 0, len(w.samples)-freshnessHistory)
	}
	last := -1
	for i, s := range w.samples {
		if s.end <= committed {
			last = i
		}
	}
	if last >= 0 {
		if w.samples[last].at.After(w.covered) {
			w.covered = w.samples[last].at
		}
		w.samples = slices.Delete(w.samples, 0, last+1)
	}
}

// inputCommitted returns the latest time by which the task's active had
// committed all the input then present on every source partition, and
// false if that was never observed. It is a listing's time, so it errs
// early, never late: by up to a listing's wait (FreshnessQuietInterval
// while nothing moves) for input that was committed since.
func (f *freshness) inputCommitted(id task.ID) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var oldest time.Time
	for _, tp := range f.a.sourcePartitions(id) {
		w := f.watch(tp)
		if w == nil || w.covered.IsZero() {
			return time.Time{}, false
		}
		if oldest.IsZero() || w.covered.Before(oldest) {
			oldest = w.covered
		}
	}
	return oldest, !oldest.IsZero()
}

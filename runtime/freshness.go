package runtime

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/task"
)

// FreshnessInterval is how often an instance lists its topology's source
// partitions' end offsets and the group's committed offsets, to tell how
// long ago each task's active last covered its input
// (ReplicaInfo.InputCommitted).
const FreshnessInterval = 500 * time.Millisecond

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
type freshness struct {
	a      *App
	every  time.Duration
	cancel context.CancelFunc
	exited chan struct{}

	mu    sync.Mutex
	parts map[changelog.TopicPartition]*inputWatch
}

// inputWatch is what is known of one source partition.
type inputWatch struct {
	// samples are end offsets observed and not yet covered, oldest first;
	// each carries the latest time its end was observed.
	samples []endSample
	// covered is the latest time whose end the committed offset is known
	// to cover; zero if never.
	covered time.Time
	// lag is the end minus the committed offset at the last listing, at
	// listed.
	lag    int64
	listed time.Time
}

type endSample struct {
	at  time.Time
	end int64
}

func newFreshness(a *App, every time.Duration) *freshness {
	ctx, cancel := context.WithCancel(context.Background())
	f := &freshness{a: a, every: every, cancel: cancel, exited: make(chan struct{}),
		parts: make(map[changelog.TopicPartition]*inputWatch)}
	go f.run(ctx)
	return f
}

func (f *freshness) close() {
	f.cancel()
	<-f.exited
}

func (f *freshness) run(ctx context.Context) {
	defer close(f.exited)
	tick := time.NewTicker(f.every)
	defer tick.Stop()
	for {
		f.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
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

// round lists ends and commits once and updates what each source partition
// has covered.
func (f *freshness) round(ctx context.Context) {
	names := f.a.sourceTopics()
	if len(names) == 0 {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, f.every*4)
	defer cancel()
	// Taken before the request: the ends listed were reached by then at
	// the latest, so covering them covers the input present at this time.
	at := time.Now()
	var ends kadm.ListedOffsets
	var err error
	if f.a.cfg.ProcessingGuarantee == ExactlyOnce {
		ends, err = f.a.admin.ListCommittedOffsets(lctx, names...)
	} else {
		ends, err = f.a.admin.ListEndOffsets(lctx, names...)
	}
	if err != nil && len(ends) == 0 {
		return
	}
	commits, err := f.a.admin.FetchOffsets(lctx, f.a.cfg.ApplicationID)
	switch {
	case errors.Is(err, kerr.GroupIDNotFound):
		// Some brokers answer so for a group that never committed;
		// Kafka lists no offsets. Either way nothing was committed.
		commits = nil
	case err != nil:
		return
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	ends.Each(func(lo kadm.ListedOffset) {
		if lo.Err != nil {
			return
		}
		committed := int64(0) // never committed: the group starts at the log's start
		if c, ok := commits.Lookup(lo.Topic, lo.Partition); ok {
			if c.Err != nil {
				return
			}
			committed = max(c.At, 0)
		}
		tp := changelog.TopicPartition{Topic: lo.Topic, Partition: lo.Partition}
		w := f.parts[tp]
		if w == nil {
			w = &inputWatch{}
			f.parts[tp] = w
		}
		w.observe(at, lo.Offset, committed)
		w.lag, w.listed = max(lo.Offset-committed, 0), at
	})
}

// consumerLags returns, for each of the given source partitions listed in
// the last lagWindow, its end minus the group's committed offset.
func (f *freshness) consumerLags(tps []changelog.TopicPartition, lagWindow time.Duration) map[changelog.TopicPartition]int64 {
	out := make(map[changelog.TopicPartition]int64, len(tps))
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, tp := range tps {
		if w := f.parts[tp]; w != nil && !w.listed.IsZero() && time.Since(w.listed) <= lagWindow {
			out[tp] = w.lag
		}
	}
	return out
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
// false if that was never observed.
func (f *freshness) inputCommitted(id task.ID) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var oldest time.Time
	for _, tp := range f.a.sourcePartitions(id) {
		w := f.parts[tp]
		if w == nil || w.covered.IsZero() {
			return time.Time{}, false
		}
		if oldest.IsZero() || w.covered.Before(oldest) {
			oldest = w.covered
		}
	}
	return oldest, !oldest.IsZero()
}

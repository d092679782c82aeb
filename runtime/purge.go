package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// purger deletes the records of repartition topics that the group has
// committed past. Repartition topics keep records for ever (retention.ms=-1)
// so that nothing is lost however long an application stops; once a task
// has committed its input offset in a repartition partition, the records
// below it are never read again, and a DeleteRecords moves the partition's
// log start up to it.
//
// Each stream thread asks after its commits, at most once per
// RepartitionPurgeInterval, and names the offsets its own client knows to be
// committed: under at-least-once those of acknowledged OffsetCommits, under
// exactly-once those of committed transactions (franz-go records a
// transaction's offsets only once EndTxn committed it), each bounded by the
// group's committed offset (see purge). The requests run in the
// background; a failure is logged and the offsets are tried again at the
// next interval, never stopping the thread.
type purger struct {
	adm      *kadm.Client
	group    string
	topics   map[string]bool
	interval time.Duration
	log      *slog.Logger
	// ctx ends when the instance is killed; close waits for requests in
	// flight before the admin client goes.
	ctx context.Context
	wg  sync.WaitGroup

	mu      sync.Mutex
	threads map[int]*threadPurge
	closed  bool
}

// threadPurge is one stream thread's purging state.
type threadPurge struct {
	last     time.Time // when the last request was sent
	inFlight bool
	// purged holds the offsets the last successful requests deleted up
	// to, so that an idle partition is not asked again. Only equality
	// skips a partition: a repartition topic recreated after a broker
	// wipe starts again from 0.
	purged map[string]map[int32]int64
}

func newPurger(ctx context.Context, adm *kadm.Client, group string, topics []string, interval time.Duration, log *slog.Logger) *purger {
	p := &purger{adm: adm, group: group, topics: make(map[string]bool), interval: interval, log: log, ctx: ctx, threads: make(map[int]*threadPurge)}
	for _, t := range topics {
		p.topics[t] = true
	}
	return p
}

// afterCommit purges the repartition partitions whose committed offsets
// thread idx's client cl knows, unless the thread purged less than an
// interval ago or its last request has not finished.
func (p *purger) afterCommit(idx int, cl *kgo.Client) {
	if p == nil || len(p.topics) == 0 || p.interval < 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	tp := p.threads[idx]
	if tp == nil {
		tp = &threadPurge{purged: make(map[string]map[int32]int64)}
		p.threads[idx] = tp
	}
	if p.closed || tp.inFlight || time.Since(tp.last) < p.interval {
		return
	}
	tp.last = time.Now()
	offsets := make(kadm.Offsets)
	for topic, parts := range cl.CommittedOffsets() {
		if !p.topics[topic] {
			continue
		}
		for part, eo := range parts {
			if eo.Offset <= 0 {
				continue
			}
			if done, ok := tp.purged[topic][part]; ok && done == eo.Offset {
				continue
			}
			offsets.Add(kadm.Offset{Topic: topic, Partition: part, At: eo.Offset, LeaderEpoch: -1})
		}
	}
	if len(offsets) == 0 {
		return
	}
	tp.inFlight = true
	p.wg.Go(func() { p.purge(tp, offsets) })
}

// purge sends one DeleteRecords and records what it deleted. A thread's
// client knows the offsets it committed itself or fetched when it was
// assigned a partition; the group's own offsets, fetched just before,
// bound them: nothing above what the group holds as committed now is
// deleted, whatever the client's view. (A plain OffsetFetch answers the
// last committed offsets, never a transaction's pending ones.)
func (p *purger) purge(tp *threadPurge, offsets kadm.Offsets) {
	ctx, cancel := context.WithTimeout(p.ctx, max(p.interval, 10*time.Second))
	defer cancel()
	group, err := p.adm.FetchOffsets(ctx, p.group)
	if err == nil {
		err = group.Error()
	}
	if err != nil {
		p.mu.Lock()
		tp.inFlight = false
		p.mu.Unlock()
		p.log.Warn("purging repartition topics: fetching the group's offsets failed; trying again at the next interval", "err", err)
		return
	}
	offsets = boundByGroup(offsets, group)
	if len(offsets) == 0 {
		p.mu.Lock()
		tp.inFlight = false
		p.mu.Unlock()
		return
	}
	resp, err := p.adm.DeleteRecords(ctx, offsets)
	if err != nil {
		p.mu.Lock()
		tp.inFlight = false
		p.mu.Unlock()
		p.log.Warn("purging repartition topics failed; trying again at the next interval", "err", err)
		return
	}
	var failed int
	var firstErr error
	p.mu.Lock()
	tp.inFlight = false
	resp.Each(func(r kadm.DeleteRecordsResponse) {
		if r.Err != nil {
			failed++
			firstErr = r.Err
			return
		}
		if tp.purged[r.Topic] == nil {
			tp.purged[r.Topic] = make(map[int32]int64)
		}
		at, _ := offsets.Lookup(r.Topic, r.Partition)
		tp.purged[r.Topic][r.Partition] = at.At
	})
	p.mu.Unlock()
	// The logger is user code: it runs with mu released.
	if failed > 0 {
		p.log.Warn("purging repartition partitions failed; trying again at the next interval", "partitions", failed, "err", firstErr)
	}
}

// boundByGroup lowers each offset to the group's committed offset of its
// partition, dropping partitions the group has no commit for.
func boundByGroup(offsets kadm.Offsets, group kadm.OffsetResponses) kadm.Offsets {
	out := make(kadm.Offsets)
	offsets.Each(func(o kadm.Offset) {
		g, ok := group.Lookup(o.Topic, o.Partition)
		if !ok || g.Err != nil || g.At <= 0 {
			return
		}
		o.At = min(o.At, g.At)
		out.Add(o)
	})
	return out
}

// close waits for the requests in flight and refuses new ones.
func (p *purger) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
}

// deletedUnread fails the thread when a repartition partition it reads has
// lost records it has not committed past: the partition's log start is
// above the offset the thread's group client knows as committed, so the
// records in between were deleted unread, and the consumer, finding its
// position below the log start, moved up to it without a word (franz-go
// resets to the log start). Purging never deletes above a committed
// offset, and nothing else deletes repartition records, so this is data
// loss, reported rather than carried on from.
func (th *thread) deletedUnread(parts []kgo.FetchTopicPartition) error {
	var committed map[string]map[int32]kgo.EpochOffset
	for _, p := range parts {
		if p.LogStartOffset <= 0 || !slices.Contains(th.app.plan.repartitions, p.Topic) {
			continue
		}
		if committed == nil {
			committed = th.cl.CommittedOffsets()
		}
		c, ok := committed[p.Topic][p.Partition]
		if !ok || c.Offset >= p.LogStartOffset {
			continue
		}
		return fmt.Errorf("runtime: repartition topic %s partition %d: records %d to %d were deleted before they were processed (committed offset %d, log start %d)",
			p.Topic, p.Partition, c.Offset, p.LogStartOffset-1, c.Offset, p.LogStartOffset)
	}
	return nil
}

package runtime

// The input a task reading several partitions holds across polls, and when
// it may process it (Kafka Streams' PartitionGroup and max.task.idle.ms).

import (
	"context"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/internal/taskrun"
	"github.com/eddystreams/eddy/internal/threadcore"
	"github.com/eddystreams/eddy/task"
)

// lookupInterval spaces the end-offset lookups of a partition whose lag the
// thread does not know: a fetch that finds nothing new answers nothing the
// client passes on, so a partition with nothing to fetch would otherwise stay
// unknown, and its task waiting, for ever.
const lookupInterval = 200 * time.Millisecond

// taskInput is what a task reading several partitions has been given but not
// yet processed, one partInput per input partition, in the order of the
// sub-topology's sources (which breaks timestamp ties). It belongs to one
// task handle on one client: a task claimed again, or a client replaced,
// starts afresh.
type taskInput struct {
	t     *taskrun.Active
	cl    *kgo.Client
	parts []*partInput
}

// partInput is one partition of a taskInput.
type partInput struct {
	topic     string
	partition int32
	// recs[head:] are the records received and not yet processed, in
	// offset order.
	recs []*kgo.Record
	head int
	// next is the offset after the last record received, and end the
	// partition's end (high watermark, or last stable offset under
	// exactly-once) as last heard; -1 while unknown.
	next, end int64
	// idleUntil is when the task stops waiting for this empty, caught-up
	// partition (TaskIdleTime); zero when it is not waiting for it.
	idleUntil time.Time
	// paused is set while the thread holds the partition's fetches off
	// because it holds more than BufferedRecordsPerPartition records.
	paused bool
	// askedAt is when the end offset was last looked up.
	askedAt time.Time
}

func (p *partInput) len() int { return len(p.recs) - p.head }

// holds reports whether any of the task's partitions holds records.
func (in *taskInput) holds() bool {
	for _, p := range in.parts {
		if p.len() > 0 {
			return true
		}
	}
	return false
}

// lag is how far the partition's end lies past the records received, and
// whether that is known.
func (p *partInput) lag() (int64, bool) {
	if p.next < 0 || p.end < 0 {
		return 0, false
	}
	return max(p.end-p.next, 0), true
}

// add appends records a poll returned, and the end the fetch saw. Records at
// or below offsets already received mean the consumer was rewound (an abort,
// a rejoin) without the thread dropping the partition's records: those it
// holds from there on are dropped, as they come again.
func (p *partInput) add(recs []*kgo.Record, end int64) {
	first := recs[0].Offset
	if p.next >= 0 && first < p.next {
		keep := p.head
		for keep < len(p.recs) && p.recs[keep].Offset < first {
			keep++
		}
		clear(p.recs[keep:])
		p.recs = p.recs[:keep]
	}
	if p.len() == 0 {
		clear(p.recs)
		p.recs, p.head = p.recs[:0], 0
	}
	p.recs = append(p.recs, recs...)
	p.next = recs[len(recs)-1].Offset + 1
	p.end = end
}

// take removes the n records at the head.
func (p *partInput) take(n int) {
	clear(p.recs[p.head : p.head+n])
	p.head += n
	if p.head == len(p.recs) {
		p.recs, p.head = p.recs[:0], 0
	}
}

// ready says whether the task may process its next record now, as Kafka
// Streams' PartitionGroup.readyToProcess decides: every partition holds
// records, or each empty one is known to be at its end and has been waited
// for idle (enforced). It waits while an empty partition's lag is unknown or
// positive.
func (in *taskInput) ready(now time.Time, idle time.Duration) (ready, enforced bool) {
	queued := false
	for _, p := range in.parts {
		if p.len() > 0 {
			p.idleUntil = time.Time{}
			queued = true
			continue
		}
		if lag, known := p.lag(); !known || lag > 0 {
			p.idleUntil = time.Time{}
			return false, false
		}
		if p.idleUntil.IsZero() {
			p.idleUntil = now.Add(idle)
		}
		if now.Before(p.idleUntil) {
			return false, false
		}
		enforced = true
	}
	return queued, queued && enforced
}

// run returns the partition whose records go next and how many of its
// records go before any other partition's: those stamped earlier than every
// other partition's next record, and those stamped the same as the next
// records of partitions after it (ties go to the earlier source). It returns
// nil when nothing is held.
func (in *taskInput) run() (*partInput, int) {
	var first *partInput
	at := 0
	for i, p := range in.parts {
		if p.len() > 0 && (first == nil || p.recs[p.head].Timestamp.Before(first.recs[first.head].Timestamp)) {
			first, at = p, i
		}
	}
	if first == nil {
		return nil, 0
	}
	end := len(first.recs)
	for i, q := range in.parts {
		if q == first || q.len() == 0 {
			continue
		}
		qt := q.recs[q.head].Timestamp
		for k := first.head; k < end; k++ {
			if ts := first.recs[k].Timestamp; ts.After(qt) || (i < at && ts.Equal(qt)) {
				end = k
				break
			}
		}
	}
	return first, end - first.head
}

// waitsForInput reports whether tasks reading several partitions hold their
// input across polls; with NeverWaitForInput they process each poll's
// records at once, merged by timestamp.
func (th *thread) waitsForInput() bool {
	return th.app.cfg.TaskIdleTime != NeverWaitForInput
}

// inputOf returns the taskInput of a running task, made on first use.
func (th *thread) inputOf(id task.ID, t *taskrun.Active) *taskInput {
	in := th.inputs[id]
	if in != nil && in.t == t && in.cl == th.cl {
		return in
	}
	if in != nil {
		th.dropInput(id)
	}
	in = &taskInput{t: t, cl: th.cl}
	for _, r := range graph.Of(th.app.topo).SubTopologies()[id.SubTopology].Sources {
		in.parts = append(in.parts, &partInput{topic: r.FullName(th.app.cfg.ApplicationID), partition: id.Partition, next: -1, end: -1})
	}
	if th.inputs == nil {
		th.inputs = make(map[task.ID]*taskInput)
	}
	th.inputs[id] = in
	return in
}

// bufferInput adds the records one poll returned for one task's partitions
// to what the task holds (processInput bounds it). Records of a task that is
// not running are left alone, as processTask leaves them.
func (th *thread) bufferInput(parts []kgo.FetchTopicPartition) {
	id := task.ID{SubTopology: th.app.plan.topicSub[parts[0].Topic], Partition: parts[0].Partition}
	for _, fp := range parts {
		th.noteFetched(fp)
	}
	t := th.running(id)
	if t == nil {
		return
	}
	in := th.inputOf(id, t)
	for _, fp := range parts {
		for _, p := range in.parts {
			if p.topic != fp.Topic {
				continue
			}
			p.add(fp.Records, th.fetchEnd(fp))
		}
	}
}

// fetchEnd is the end of a fetched partition as the fetch saw it: where a
// read-committed fetch stops under exactly-once, the high watermark
// otherwise.
func (th *thread) fetchEnd(p kgo.FetchTopicPartition) int64 {
	if th.sess != nil {
		return p.LastStableOffset
	}
	return p.HighWatermark
}

// noteEnds takes the ends a poll reported for partitions it returned no
// records of, where the thread knows what it received last: a partition a
// task waits for may turn out to be at its end.
func (th *thread) noteEnds() {
	if len(th.inputs) == 0 {
		return
	}
	th.fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		if len(fp.Records) > 0 || fp.Err != nil {
			return
		}
		in := th.inputs[task.ID{SubTopology: th.app.plan.topicSub[fp.Topic], Partition: fp.Partition}]
		if in == nil {
			return
		}
		for _, p := range in.parts {
			if p.topic == fp.Topic && p.next >= 0 {
				p.end = th.fetchEnd(fp)
			}
		}
	})
}

// processInputs processes what every task reading several partitions holds,
// as far as each is ready, and adds the records running tasks took to taken.
func (th *thread) processInputs(doomed *bool, taken *int) error {
	if len(th.inputs) == 0 {
		return nil
	}
	th.lookUpEnds()
	now := time.Now()
	for _, id := range th.inputIDs() {
		in := th.inputs[id]
		if th.running(id) != in.t || in.cl != th.cl {
			th.dropInput(id)
			continue
		}
		if err := th.processInput(id, in, now, doomed, taken); err != nil || *doomed {
			return err
		}
	}
	return nil
}

// inputIDs lists the tasks holding input, sorted, so that tasks are processed
// in the same order every time.
func (th *thread) inputIDs() []task.ID {
	ids := th.inputOrder[:0]
	for id := range th.inputs {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, task.ID.Compare)
	th.inputOrder = ids
	return ids
}

// processInput runs one task's held records through it while it is ready.
func (th *thread) processInput(id task.ID, in *taskInput, now time.Time, doomed *bool, taken *int) error {
	var fatal error
	consumed := 0
	idle := max(th.app.cfg.TaskIdleTime, 0)
	for fatal == nil && !*doomed {
		ready, enforced := in.ready(now, idle)
		if !ready {
			break
		}
		p, n := in.run()
		done, processed := 0, 0
		for _, r := range p.recs[p.head : p.head+n] {
			if fatal != nil || *doomed {
				break
			}
			done++
			var took bool
			if r.Attrs.IsControl() {
				took = th.passControl(r)
			} else {
				took, fatal = th.process(r)
				processed++
				if fatal != nil && th.produceFailed() != nil && (th.sess != nil || sessionLost(fatal)) {
					// As in processTask: the iteration's end aborts.
					*doomed, fatal = true, nil
				}
			}
			if took {
				consumed++
			}
		}
		p.take(done)
		th.app.metrics.processedFrom(p.topic, processed)
		if enforced {
			th.app.enforced.Add(int64(processed))
		}
	}
	th.bound(in)
	*taken += consumed
	if consumed > 0 {
		th.processed = append(th.processed, threadcore.Event{Kind: threadcore.EvProcessed, Task: id, N: consumed})
		th.tookInput(id)
	}
	return fatal
}

// bound pauses the fetches of a task's partitions that still hold more than
// BufferedRecordsPerPartition records once the task has processed what it
// could, and resumes those back within it. Deciding after processing rather
// than as records arrive leaves alone a partition whose whole poll the task
// took at once: pausing it would drop what the client had fetched ahead for
// it, to be fetched again.
func (th *thread) bound(in *taskInput) {
	limit := th.app.cfg.BufferedRecordsPerPartition
	for _, p := range in.parts {
		switch {
		case !p.paused && p.len() > limit:
			p.paused = true
			th.fullPauses.Add(1)
			in.cl.PauseFetchPartitions(map[string][]int32{p.topic: {p.partition}})
		case p.paused && p.len() <= limit:
			p.paused = false
			in.cl.ResumeFetchPartitions(map[string][]int32{p.topic: {p.partition}})
		}
	}
}

// lookUpEnds asks the brokers for the ends of the empty partitions whose lag
// the thread does not know and whose tasks hold records of other partitions,
// at most every lookupInterval per partition. A partition nothing was
// received from yet is consumed from its committed offset, or from its log
// start when it has none; it is known to be caught up only when that is its
// end, and otherwise left unknown until records come.
func (th *thread) lookUpEnds() {
	now := time.Now()
	var want []*partInput
	topics := map[string]bool{}
	for _, in := range th.inputs {
		if !in.holds() {
			continue
		}
		for _, p := range in.parts {
			if _, known := p.lag(); !known && p.len() == 0 && now.Sub(p.askedAt) >= lookupInterval {
				p.askedAt = now
				want = append(want, p)
				topics[p.topic] = true
			}
		}
	}
	if len(want) == 0 {
		return
	}
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	// The loop waits for the answer: a broker that does not answer
	// holds it no longer than a poll that brings nothing would.
	ctx, cancel := context.WithTimeout(th.ctx, time.Second)
	defer cancel()
	adm := kadm.NewClient(th.cl)
	list := adm.ListEndOffsets
	if th.sess != nil {
		list = adm.ListCommittedOffsets
	}
	ends, err := list(ctx, names...)
	if err != nil {
		th.log.Debug("end offset lookup failed", "err", err)
		return
	}
	var starts kadm.ListedOffsets
	committed := th.cl.CommittedOffsets()
	for _, p := range want {
		end, ok := ends.Lookup(p.topic, p.partition)
		if !ok || end.Err != nil {
			continue
		}
		if p.next >= 0 {
			p.end = end.Offset
			continue
		}
		pos := int64(-1)
		if c, ok := committed[p.topic][p.partition]; ok {
			pos = c.Offset
		} else {
			if starts == nil {
				if starts, err = adm.ListStartOffsets(ctx, names...); err != nil {
					th.log.Debug("start offset lookup failed", "err", err)
					return
				}
			}
			if s, ok := starts.Lookup(p.topic, p.partition); ok && s.Err == nil {
				pos = s.Offset
			}
		}
		if pos >= 0 && end.Offset <= pos {
			p.next, p.end = pos, pos
		}
	}
}

// inputWaits reports whether a task holding records waits for a partition
// whose end the thread is to look up, and the earliest time a task stops
// waiting for a caught-up partition (zero if none): both bound the next
// poll.
func (th *thread) inputWaits() (lookupPending bool, idleUntil time.Time) {
	for _, in := range th.inputs {
		held := in.holds()
		for _, p := range in.parts {
			if p.len() > 0 {
				continue
			}
			if _, known := p.lag(); !known && held {
				lookupPending = true
			}
			if !p.idleUntil.IsZero() && (idleUntil.IsZero() || p.idleUntil.Before(idleUntil)) {
				idleUntil = p.idleUntil
			}
		}
	}
	return lookupPending, idleUntil
}

// dropInput forgets what a task holds unprocessed: it is released, lost,
// claimed again or rewound, and whoever processes its partitions next
// fetches the records again. Partitions held off for being full are fetched
// again, unless the task's handle now restores, which holds them off itself.
func (th *thread) dropInput(id task.ID) {
	in := th.inputs[id]
	if in == nil {
		return
	}
	delete(th.inputs, id)
	if t := th.task(id); t != nil && t != in.t && th.running(id) == nil {
		return
	}
	for _, p := range in.parts {
		if p.paused {
			in.cl.ResumeFetchPartitions(map[string][]int32{p.topic: {p.partition}})
		}
	}
}

// dropInputs drops what every task holds (dropInput).
func (th *thread) dropInputs() {
	for id := range th.inputs {
		th.dropInput(id)
	}
}

// returnInput rewinds the consumer to the first record each task holds
// unprocessed and empties what they hold. The transactional session commits
// the consumer's position, past every record polled, so under exactly-once
// a commit must not find records polled and not processed: they would count
// as consumed without their results. They are fetched again.
func (th *thread) returnInput() {
	var rewind map[string]map[int32]kgo.EpochOffset
	for id, in := range th.inputs {
		if in.cl != th.cl {
			th.dropInput(id)
			continue
		}
		for _, p := range in.parts {
			if p.len() == 0 {
				continue
			}
			r := p.recs[p.head]
			if rewind == nil {
				rewind = make(map[string]map[int32]kgo.EpochOffset)
			}
			if rewind[p.topic] == nil {
				rewind[p.topic] = make(map[int32]kgo.EpochOffset)
			}
			rewind[p.topic][p.partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset}
			p.take(p.len())
			p.next = r.Offset
			if p.paused {
				p.paused = false
				in.cl.ResumeFetchPartitions(map[string][]int32{p.topic: {p.partition}})
			}
		}
	}
	if rewind != nil {
		th.cl.SetOffsets(rewind)
	}
}

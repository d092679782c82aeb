package runtime

// How a stream thread runs a poll's records through its tasks, and skips the records that fail.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/internal/taskrun"
	"github.com/eddystreams/eddy/internal/threadcore"
	"github.com/eddystreams/eddy/task"
	"github.com/eddystreams/eddy/topology"
)

// processPolled runs the records of the last poll through their tasks
// (ActProcess).
func (th *thread) processPolled() error {
	start := time.Now()
	th.processed = th.processed[:0]
	th.lastTask = nil
	var fatal error
	doomed := false
	taken := 0
	th.fetches.EachError(func(topic string, p int32, err error) {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return
		}
		if errors.Is(err, kerr.UnknownServerError) {
			// What a Kafka coordinator answers a SyncGroup whose group
			// record exceeds its message.max.bytes.
			th.log.Error("group error UNKNOWN_SERVER_ERROR: if the brokers' message.max.bytes is below MaxGroupMetadataBytes, the group's metadata does not fit; lower MaxGroupMetadataBytes to the brokers' limit to get the sizes, or raise the limit", "err", err, "max_group_metadata_bytes", th.app.cfg.MaxGroupMetadataBytes)
			return
		}
		th.log.Warn("fetch error", "topic", topic, "partition", p, "err", err)
	})
	parts := th.parts[:0]
	th.fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) > 0 {
			parts = append(parts, p)
		}
	})
	if err := th.deletedUnread(parts); err != nil {
		clear(parts)
		th.parts = parts[:0]
		return err
	}
	wait := th.waitsForInput()
	for i := 0; i < len(parts) && fatal == nil; {
		// A task reading several topics takes the records of all its
		// partitions in this poll together; they need not be next to
		// each other in the fetch. It holds them until it is ready to
		// process them (bufferInput), or with NeverWaitForInput merges
		// them at once (processTask).
		j := i + 1
		sub := th.app.plan.topicSub[parts[i].Topic]
		several := th.app.plan.subSources[sub] > 1
		if several {
			for k := j; k < len(parts); k++ {
				if th.app.plan.topicSub[parts[k].Topic] == sub && parts[k].Partition == parts[i].Partition {
					parts[j], parts[k] = parts[k], parts[j]
					j++
				}
			}
		}
		if several && wait {
			th.bufferInput(parts[i:j])
		} else {
			fatal = th.processTask(parts[i:j], &doomed, &taken)
		}
		i = j
	}
	clear(parts)
	th.parts = parts[:0]
	if fatal == nil && wait {
		th.noteEnds()
		fatal = th.processInputs(&doomed, &taken)
	}
	th.notePollCost(taken, time.Since(start))
	return fatal
}

// processTask runs the records one poll returned for one task's partitions
// through the task, in the order of a timestampMerge, and adds those a
// running task took to taken.
func (th *thread) processTask(parts []kgo.FetchTopicPartition, doomed *bool, taken *int) error {
	var fatal error
	m := timestampMerge{parts: parts, next: th.partNext[:0]}
	defer func() { th.partNext = m.next[:0] }()
	consumed := 0
	for fatal == nil && !*doomed {
		pi, end := m.run()
		if pi < 0 {
			break
		}
		p, n := parts[pi], 0
		for _, r := range p.Records[m.next[pi]:end] {
			if fatal != nil || *doomed {
				break
			}
			m.next[pi]++
			var took bool
			if r.Attrs.IsControl() {
				took = th.passControl(r)
			} else {
				took, fatal = th.process(r)
				n++
				if fatal != nil && th.produceFailed() != nil && (th.sess != nil || sessionLost(fatal)) {
					// The transaction is doomed: stop here, and the
					// iteration's end aborts it (commitClock), which
					// rewinds to the committed offsets.
					*doomed, fatal = true, nil
				}
			}
			if took {
				consumed++
			}
		}
		th.app.metrics.processedFrom(p.Topic, n)
	}
	*taken += consumed
	if consumed > 0 {
		id := task.ID{SubTopology: th.app.plan.topicSub[parts[0].Topic], Partition: parts[0].Partition}
		th.processed = append(th.processed, threadcore.Event{Kind: threadcore.EvProcessed, Task: id, N: consumed})
		th.tookInput(id)
	}
	for _, p := range parts {
		th.noteFetched(p)
	}
	return fatal
}

// timestampMerge orders the records one poll returned for one task's
// partitions with NeverWaitForInput: of the partitions' next records the
// earliest goes first, the first partition's on a tie. Only the records of
// one poll are merged: a partition that returned none does not hold the
// others back, as Kafka Streams' max.task.idle.ms of -1. Otherwise a task
// reading several partitions holds its records across polls (taskInput).
type timestampMerge struct {
	parts []kgo.FetchTopicPartition
	// next[i] is the index of parts[i]'s next record; the caller advances
	// it over the records it takes.
	next []int
}

// run returns the partition whose records go next and the end of the run
// of its records that go before any other partition's: records stamped
// earlier than every other partition's next record, and those stamped the
// same as the next records of partitions after it. It returns -1 when no
// records are left.
func (m *timestampMerge) run() (part, end int) {
	for len(m.next) < len(m.parts) {
		m.next = append(m.next, 0)
	}
	part = -1
	for k, p := range m.parts {
		if m.next[k] < len(p.Records) && (part < 0 || p.Records[m.next[k]].Timestamp.Before(m.parts[part].Records[m.next[part]].Timestamp)) {
			part = k
		}
	}
	if part < 0 {
		return -1, 0
	}
	recs := m.parts[part].Records
	end = len(recs)
	for k, q := range m.parts {
		if k == part || m.next[k] >= len(q.Records) {
			continue
		}
		at := q.Records[m.next[k]].Timestamp
		for i := m.next[part]; i < end; i++ {
			if ts := recs[i].Timestamp; ts.After(at) || (k < part && ts.Equal(at)) {
				end = i
				break
			}
		}
	}
	return part, end
}

// taskOf returns the running task that owns an input record, or nil.
func (th *thread) taskOf(r *kgo.Record) (task.ID, *taskrun.Active) {
	if r.Topic != th.srcTopic {
		th.srcTopic, th.srcSub = r.Topic, th.app.plan.topicSub[r.Topic]
	}
	id := task.ID{SubTopology: th.srcSub, Partition: r.Partition}
	t := th.lastTask
	if t == nil || id != th.lastID {
		t = th.running(id)
		th.lastID, th.lastTask = id, t
	}
	if t == nil {
		// Partitions of tasks that are not running are paused, so this
		// is a record fetched before the pause; it will be fetched again.
		return id, nil
	}
	return id, t
}

// passControl moves a task's consumed offset past a transaction marker
// without processing it, as Kafka Streams commits the consumer's position:
// the next commit then covers the marker, even when it is the only thing
// the task consumed since the last one.
// It reports whether a running task took the marker.
func (th *thread) passControl(r *kgo.Record) bool {
	_, t := th.taskOf(r)
	if t != nil {
		t.Skip(graph.InputRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset})
	}
	return t != nil
}

// process runs a record through its task. It reports whether a running
// task took it.
func (th *thread) process(r *kgo.Record) (bool, error) {
	id, t := th.taskOf(r)
	if t == nil {
		return false, nil
	}
	in := graph.InputRecord{
		Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp,
		Key: r.Key, Value: r.Value,
	}
	if len(r.Headers) > 0 {
		in.Headers = make([]topology.Header, len(r.Headers))
		for i, h := range r.Headers {
			in.Headers[i] = topology.Header{Key: h.Key, Value: h.Value}
		}
	}
	err := t.Process(in)
	if err == nil {
		return true, nil
	}
	if perr := th.produceFailed(); perr != nil {
		// The record's output could not be sent because an earlier one
		// failed: not the record's fault, so no error policy applies.
		return true, perr
	}
	// Declared only here: errors.As makes its target escape, and it would
	// otherwise be allocated for every record.
	var de *topology.DeserializationError
	if errors.As(err, &de) {
		if th.app.cfg.DeserializationErrors != DeserializationLogAndSkip {
			return true, fmt.Errorf("runtime: task %s: %w", id, err)
		}
		th.app.skipped.Add(1)
		return true, th.skip(t, in, "", "skipping record that cannot be deserialized", de.Err)
	}
	pe := &ProcessingError{Task: id, Topic: in.Topic, Partition: in.Partition, Offset: in.Offset, Err: err}
	var ne *topology.NodeError
	if errors.As(err, &ne) {
		pe.Node = ne.Node
	}
	// A store in the wrong layout fails every record alike: skipping them
	// would only empty the input.
	var le *topology.StoreLayoutError
	if th.app.cfg.ProcessingErrors != ProcessingLogAndContinue || errors.As(err, &le) {
		return true, pe
	}
	th.app.processingErrors.Add(1)
	return true, th.skip(t, in, pe.Node, "skipping record a processor failed on", pe.Unwrap())
}

// skip carries on past a record a handler chose to skip: it logs why (a
// few lines a second at most), sends the record to the dead-letter topic if
// there is one, and marks it consumed.
func (th *thread) skip(t *taskrun.Active, in graph.InputRecord, node, msg string, cause error) error {
	if ok, suppressed := th.app.errLogs.allow(time.Now()); ok {
		attrs := []any{"task", t.ID(), "topic", in.Topic, "partition", in.Partition, "offset", in.Offset, "err", cause}
		if node != "" {
			attrs = append(attrs, "node", node)
		}
		if suppressed > 0 {
			attrs = append(attrs, "similar_lines_suppressed", suppressed)
		}
		var pe *topology.PanicError
		if errors.As(cause, &pe) {
			attrs = append(attrs, "stack", string(pe.Stack))
		}
		th.log.Warn(msg, attrs...)
	}
	if dlq := th.app.cfg.DeadLetterTopic; dlq != "" {
		dl := deadLetter(dlq, t.ID(), in, node, cause)
		if th.maxBatchBytes > 0 && batchBytes(dl) > th.maxBatchBytes {
			// A record Kafka took may still be too large for this
			// producer once headers are added (its limit may be below
			// the broker's): the dead letter then names the record
			// without carrying it whole.
			if small, ok := shrinkDeadLetter(dl, th.maxBatchBytes); ok {
				dl = small
			}
		}
		if err := th.Send(dl); err != nil {
			return fmt.Errorf("runtime: task %s: send record %s/%d@%d to the dead-letter topic %q: %w", t.ID(), in.Topic, in.Partition, in.Offset, dlq, err)
		}
	}
	t.Skip(in)
	return nil
}

package changelog

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/statestore"
)

// TopicPartition names one partition of one topic.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// Offsets collects the outcome of Send calls: the highest acknowledged
// offset of every partition sent to, and the first error. Produce
// callbacks run concurrently, so every method is safe for concurrent use.
// The zero value is ready to use.
//
// One commit uses it like this: Send for each dirty store, Flush the
// producer, check Err, then write each store with position Last+1.
type Offsets struct {
	mu      sync.Mutex
	parts   map[TopicPartition]*acked
	err     error
	pending int
}

// acked is what Offsets knows of one partition. Send finds it once per
// call, so acknowledgements need no map lookup.
type acked struct {
	last int64
	any  bool // last is set
	// sent holds the records of each Send call, whose offsets the
	// acknowledgements fill in; Records hands them to live queries.
	sent [][]kgo.Record
}

// Last returns the highest acknowledged offset for the partition, and false
// if no record sent to it has been acknowledged.
func (o *Offsets) Last(topic string, partition int32) (int64, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if p := o.parts[TopicPartition{topic, partition}]; p != nil && p.any {
		return p.last, true
	}
	return 0, false
}

// Err returns the first produce error, if any. After an error the
// changelog may hold some of the batch and not the rest, so the caller must
// not record a position for it.
func (o *Offsets) Err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// Pending returns how many sent records have not been acknowledged or
// failed yet. It is 0 after a successful Flush of the producer.
func (o *Offsets) Pending() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.pending
}

// Empty reports whether no record was sent through o since it was made or
// last reset.
func (o *Offsets) Empty() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.parts) == 0
}

// Records calls each with the records sent to every partition, in the
// order they were sent. It must be called only once none is pending; each
// record then carries the offset the broker gave it.
func (o *Offsets) Records(each func(topic string, partition int32, recs []kgo.Record)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for tp, p := range o.parts {
		for _, recs := range p.sent {
			each(tp.Topic, tp.Partition, recs)
		}
	}
}

// Reset forgets all offsets and the error, for reuse by the next commit.
// It must not be called while records are pending.
func (o *Offsets) Reset() {
	o.mu.Lock()
	defer o.mu.Unlock()
	clear(o.parts)
	o.err = nil
	o.pending = 0
}

// sent counts n records about to be produced to tp and returns tp's
// tally.
func (o *Offsets) sent(tp TopicPartition, n int) *acked {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pending += n
	p := o.parts[tp]
	if p == nil {
		if o.parts == nil {
			o.parts = make(map[TopicPartition]*acked)
		}
		p = new(acked)
		o.parts[tp] = p
	}
	return p
}

func (o *Offsets) acked(p *acked, r *kgo.Record, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pending--
	if err != nil {
		if o.err == nil {
			o.err = fmt.Errorf("changelog: producing to %s[%d]: %w", r.Topic, r.Partition, err)
		}
		return
	}
	if !p.any || r.Offset > p.last {
		p.last, p.any = r.Offset, true
	}
}

// Send produces entries, in order, to one changelog partition through cl
// and returns without waiting for acknowledgements; the outcome lands in
// track. An entry with a nil value becomes a tombstone; a timed one
// (statestore.TimedRecord) is stamped with its time and TimedHeader.
//
// cl must be configured with kgo.RecordPartitioner(kgo.ManualPartitioner())
// so that each record goes to the partition named here (the task's
// partition) rather than one picked by key hash. The entries' key and value
// slices are handed to the producer without copying and must not change
// until the producer has been flushed.
//
// The records of one call are allocated together, and so are freed
// together once track is dropped: a commit sends thousands of small
// records, and one allocation apiece showed up in profiles of counting
// distinct keys. track keeps them so that the commit can hand them, with
// their offsets, to live queries (Offsets.Records).
func Send(ctx context.Context, cl *kgo.Client, topic string, partition int32, entries []statestore.Entry, track *Offsets) {
	if len(entries) == 0 {
		return
	}
	p := track.sent(TopicPartition{topic, partition}, len(entries))
	done := func(r *kgo.Record, err error) { track.acked(p, r, err) }
	recs := make([]kgo.Record, len(entries))
	track.mu.Lock()
	p.sent = append(p.sent, recs)
	track.mu.Unlock()
	for i, e := range entries {
		r := &recs[i]
		r.Topic, r.Partition, r.Key, r.Value = topic, partition, e.Key, e.Value
		if e.Origin == statestore.TimedRecord {
			r.Timestamp = time.UnixMilli(e.Time)
			r.Headers = timedHeaders
		}
		cl.Produce(ctx, r, done)
	}
}

// TimedHeader marks a record whose timestamp is its value's time, not when
// it was produced: a versioned store's puts (statestore.TimedRecord), which
// a restoration needs to date even when they are tombstones.
const TimedHeader = "eddy.timed"

// timedHeaders is shared by every timed record: the producer only reads
// headers.
var timedHeaders = []kgo.RecordHeader{{Key: TimedHeader}}

// entryOf is the store entry of a changelog record.
func entryOf(rec *kgo.Record) statestore.Entry {
	e := statestore.Entry{Key: rec.Key, Value: rec.Value, Time: rec.Timestamp.UnixMilli(), Origin: statestore.LoggedRecord}
	for _, h := range rec.Headers {
		if h.Key == TimedHeader {
			e.Origin = statestore.TimedRecord
		}
	}
	return e
}

package runtime

// The sender of a stream thread: sink records on their way to the producer
// through the outbox, and produce failures.

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/topology"
)

// recBlock is how many producer records Send allocates at once: about
// 40 KiB, a few milliseconds of sends at full speed.
const recBlock = 256

// Send implements taskrun.Sender: it partitions a sink record as Kafka's default
// partitioner would and hands it to the producer.
func (th *thread) Send(rec graph.OutputRecord) error {
	if err := th.produceFailed(); err != nil {
		return err
	}
	n := th.sendParts
	if rec.Topic != th.sendTopic || n <= 0 {
		var ok bool
		n, ok = th.app.plan.partitions[rec.Topic]
		if !ok || n <= 0 {
			return fmt.Errorf("runtime: sink topic %q has no known partition count", rec.Topic)
		}
		th.sendTopic, th.sendParts = rec.Topic, n
	}
	if size := batchBytes(rec); size > th.maxBatchBytes && th.maxBatchBytes > 0 {
		// The producer would fail it on its own goroutine, and the
		// failure would doom every commit that carries it: refused here,
		// it fails the record that made it.
		return &RecordTooLargeError{Topic: rec.Topic, Bytes: size, Max: th.maxBatchBytes}
	}
	var part int32
	if rec.Key != nil {
		part = topology.Partition(rec.Key, n)
	} else {
		part = th.rr[rec.Topic] % n
		th.rr[rec.Topic] = part + 1
	}
	if len(th.recs) == 0 {
		th.recs = make([]kgo.Record, recBlock)
	}
	kr := &th.recs[0]
	th.recs = th.recs[1:]
	*kr = kgo.Record{Topic: rec.Topic, Partition: part, Key: rec.Key, Value: rec.Value, Timestamp: rec.Timestamp, Context: th.sendCtx}
	if len(rec.Headers) > 0 {
		kr.Headers = make([]kgo.RecordHeader, len(rec.Headers))
		for i, h := range rec.Headers {
			kr.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
		}
	}
	// The open transaction holds work now; the core hears it (EvSent)
	// with its next event, since Send runs inside an action, without mu.
	if !th.sent.Load() {
		th.sent.Store(true)
	}
	th.out.send(kr)
	return nil
}

// batchOverhead is the size of a record batch's own fields (offset,
// length, epoch, magic, CRC, attributes, offset delta, timestamps,
// producer ID, epoch and sequence, record count) plus the 4-byte length of
// the batch in a produce request, as the client counts it; flexibleSlack
// covers the longer framing of flexible request versions.
const (
	batchOverhead = 61
	flexibleSlack = 8
)

// batchBytes is the size of a record batch holding rec alone, the size the
// producer compares with its ProducerBatchMaxBytes.
func batchBytes(rec graph.OutputRecord) int {
	n := 1 + 1 + 1 + // attributes, timestamp delta 0, offset delta 0
		varintLen(len(rec.Key)) + len(rec.Key) +
		varintLen(len(rec.Value)) + len(rec.Value) +
		varintLen(len(rec.Headers))
	for _, h := range rec.Headers {
		n += varintLen(len(h.Key)) + len(h.Key) + varintLen(len(h.Value)) + len(h.Value)
	}
	return batchOverhead + flexibleSlack + varintLen(n) + n
}

func varintLen(n int) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutVarint(b[:], int64(n))
}

// permanentProduceError reports whether a produce failure is the record's
// own (too large, invalid, not allowed to be written there), so that
// producing it again, after an abort, fails the same way.
func permanentProduceError(err error) bool {
	var tooLarge *RecordTooLargeError
	return errors.As(err, &tooLarge) ||
		errors.Is(err, kerr.MessageTooLarge) ||
		errors.Is(err, kerr.RecordListTooLarge) ||
		errors.Is(err, kerr.InvalidRecord) ||
		errors.Is(err, kerr.TopicAuthorizationFailed) ||
		errors.Is(err, kerr.InvalidTopicException)
}

// produceFailure is a produce failure and the client it happened on. A
// client being replaced fails the records it still holds, sometimes after
// its successor is attached; those failures concern no one.
type produceFailure struct {
	cl  *kgo.Client
	err error
}

func (th *thread) onProduced(cl *kgo.Client, r *kgo.Record, err error) {
	if err == nil || cl != th.group.Load() {
		return
	}
	f := &produceFailure{cl: cl, err: fmt.Errorf("runtime: produce to %s/%d: %w", r.Topic, r.Partition, err)}
	for {
		old := th.produceErr.Load()
		if old != nil && old.cl == cl {
			return // the first failure is the one to report
		}
		if th.produceErr.CompareAndSwap(old, f) {
			return
		}
	}
}

// produceFailed returns the current client's first produce failure since
// the last commit, if any.
func (th *thread) produceFailed() error {
	if f := th.produceErr.Load(); f != nil && f.cl == th.group.Load() {
		return f.err
	}
	return nil
}

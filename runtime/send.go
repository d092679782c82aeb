package runtime

// The sender of a stream thread: sink records on their way to the producer
// through the outbox, and produce failures.

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/internal/threadcore"
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
	*kr = kgo.Record{Topic: rec.Topic, Partition: part, Key: rec.Key, Value: rec.Value, Timestamp: rec.Timestamp}
	if len(rec.Headers) > 0 {
		kr.Headers = make([]kgo.RecordHeader, len(rec.Headers))
		for i, h := range rec.Headers {
			kr.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
		}
	}
	// The open transaction holds work now; the core's hot path.
	th.core.Step(threadcore.Event{Kind: threadcore.EvSent})
	th.out.send(kr)
	return nil
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

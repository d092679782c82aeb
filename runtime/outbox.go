package runtime

import (
	"context"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// outbox hands a stream thread's sink records to the producer from a
// goroutine of its own. The client's per-record work on Produce (finding
// the partition's buffer, appending under its locks) is a sixth of a word
// count's processing; done beside the thread rather than inside it, it
// overlaps with the next records. One goroutine produces the records in the
// order the thread sent them, so per-partition order is kept.
//
// The thread sends into a batch and hands full batches over; flush hands
// over the partial one and waits until every record handed over is in the
// producer's buffer, after which the producer's own Flush (or a transaction's
// end) covers all the thread has sent. Batches are bounded in number, so a
// producer that cannot keep up (its buffer full) stalls the thread, as a
// blocking Produce would.
type outbox struct {
	cl      *kgo.Client
	promise func(*kgo.Record, error)

	// filling belongs to the thread; full batches travel to the goroutine
	// on queue and come back empty on free.
	filling []*kgo.Record
	queue   chan []*kgo.Record
	free    chan []*kgo.Record
	pending sync.WaitGroup // batches handed over and not yet produced
	done    chan struct{}
	closed  bool
	// sent is set by send and cleared by takeSent: whether the thread
	// sent a record since it last asked.
	sent bool
}

const (
	// outboxBatch records make one hand-over: the channel operations cost
	// about as much as producing a few records, so they are amortised.
	outboxBatch = 256
	// outboxBatches bounds the batches queued at once.
	outboxBatches = 8
)

func newOutbox(cl *kgo.Client, promise func(*kgo.Record, error)) *outbox {
	o := &outbox{
		cl:      cl,
		promise: promise,
		queue:   make(chan []*kgo.Record, outboxBatches),
		free:    make(chan []*kgo.Record, outboxBatches+1),
		done:    make(chan struct{}),
	}
	go o.run()
	return o
}

func (o *outbox) run() {
	defer close(o.done)
	for batch := range o.queue {
		for i, r := range batch {
			// Background: a produce that started must finish for a clean
			// commit; a closed client fails it at once.
			o.cl.Produce(context.Background(), r, o.promise)
			batch[i] = nil
		}
		o.pending.Done()
		select {
		case o.free <- batch[:0]:
		default:
		}
	}
}

// send queues r for the producer.
func (o *outbox) send(r *kgo.Record) {
	if o.filling == nil {
		select {
		case o.filling = <-o.free:
		default:
			o.filling = make([]*kgo.Record, 0, outboxBatch)
		}
	}
	o.sent = true
	o.filling = append(o.filling, r)
	if len(o.filling) == outboxBatch {
		o.handOver()
	}
}

func (o *outbox) handOver() {
	if len(o.filling) == 0 {
		return
	}
	o.pending.Add(1)
	o.queue <- o.filling
	o.filling = nil
}

// takeSent reports whether a record was sent since it was last called.
func (o *outbox) takeSent() bool {
	sent := o.sent
	o.sent = false
	return sent
}

// flush returns once every record sent so far has been given to the
// producer.
func (o *outbox) flush() {
	o.handOver()
	o.pending.Wait()
}

// close flushes and stops the goroutine; later calls do nothing. It may run
// before or after the client is closed: records given to a closed client
// fail through their promise.
func (o *outbox) close() {
	if o.closed {
		return
	}
	o.closed = true
	o.flush()
	close(o.queue)
	<-o.done
}

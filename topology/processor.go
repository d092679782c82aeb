package topology

import (
	"fmt"
	"time"

	"github.com/eddystreams/eddy/statestore"
)

// Record is a typed record as a Processor sees it.
type Record[K, V any] struct {
	Key       K
	Value     V
	Timestamp time.Time
	Headers   []Header
}

// RecordMetadata describes the input record a task is processing: where it
// was read from and what it carried besides its key and value.
type RecordMetadata struct {
	// Topic is the full topic name (internal topics carry the application
	// prefix).
	Topic     string
	Partition int32
	Offset    int64
	Timestamp time.Time
	Headers   []Header
}

// Processor is a user-written processing step with access to state stores
// and punctuation. Process receives records of the stream it is attached to
// and forwards records of types KOut and VOut through its context; a
// processor that forwards nothing can use any types, such as struct{}.
//
// Each task gets its own instance from the supplier given to Process, and
// calls it from one goroutine at a time.
type Processor[KIn, VIn, KOut, VOut any] interface {
	// Init is called once before the first record. The context stays
	// valid until Close: keep it to forward records, open stores and
	// schedule punctuators.
	Init(ctx ProcessorContext[KOut, VOut]) error
	// Process handles one record. Returning an error fails the task.
	Process(rec Record[KIn, VIn]) error
	// Close releases what Init acquired. Stores are closed by the
	// runtime, not by processors.
	Close() error
}

// PunctuationType says which clock drives a punctuator.
type PunctuationType int

const (
	// StreamTime punctuators fire as the task's stream time (the largest
	// input timestamp it has seen) passes multiples of the interval. They
	// do not fire while no input arrives, and fire once, not once per
	// interval, when stream time jumps ahead.
	StreamTime PunctuationType = iota
	// WallClockTime punctuators fire every interval of wall-clock time,
	// counted from when they were scheduled, whether or not input arrives.
	// A late punctuation fires once and the schedule skips ahead.
	WallClockTime
)

func (t PunctuationType) String() string {
	switch t {
	case StreamTime:
		return "stream-time"
	case WallClockTime:
		return "wall-clock"
	}
	return fmt.Sprintf("PunctuationType(%d)", int(t))
}

// Punctuator is a scheduled callback. ts is the stream time or wall-clock
// time that triggered it.
type Punctuator func(ts time.Time) error

// Cancellable cancels a scheduled punctuator.
type Cancellable interface {
	Cancel()
}

// ProcessorContext is a Processor's view of its task.
type ProcessorContext[K, V any] interface {
	// AppID is the application ID.
	AppID() string
	// TaskID is the task's "<subtopology>_<partition>" name.
	TaskID() string
	// Partition is the task's partition.
	Partition() int32
	// NodeName is the name the processor was added under.
	NodeName() string
	// Forward sends rec to every child node. A zero Timestamp is replaced
	// by the timestamp of the record being processed or, in a punctuator,
	// by the time that triggered it.
	Forward(rec Record[K, V]) error
	// ForwardTo sends rec to the child node named child only.
	ForwardTo(child string, rec Record[K, V]) error
	// RecordMetadata describes the input record being processed. It
	// reports false in Init and in punctuators.
	RecordMetadata() (RecordMetadata, bool)
	// StreamTime is the largest input timestamp the task has seen, or the
	// zero time before the first record.
	StreamTime() time.Time
	// Now is the wall clock.
	Now() time.Time
	// Schedule runs fn every interval of the given clock until cancelled.
	Schedule(interval time.Duration, typ PunctuationType, fn Punctuator) (Cancellable, error)
	// Store returns a store the processor declared, byte-level; wrap it
	// with GetKeyValueStore for typed access.
	Store(name string) (statestore.ReadWriter, error)
}

// Process attaches a Processor to s. supplier must return a new instance on
// every call: each task runs its own. stores names the stores the processor
// uses; declare them with Builder.AddStore (or use the store of a DSL
// aggregation in the same sub-topology), or name a global table's store
// (GlobalKTable.StoreName) to read it with GlobalKTable.Open. An empty
// name generates one.
//
// The processor may change keys, so grouping its output by key
// repartitions it.
func Process[KIn, VIn, KOut, VOut any](s KStream[KIn, VIn], name string, supplier func() Processor[KIn, VIn, KOut, VOut], stores ...string) KStream[KOut, VOut] {
	b := s.builder()
	n := b.addNode(kindProcessor, "process", options{name: name}, s.n)
	n.stores = append([]string(nil), stores...)
	n.readsMeta = true
	b.checkFunc(n, supplier == nil, "processor supplier")
	n.newProc = func() (procImpl, error) {
		p := supplier()
		if p == nil {
			return nil, fmt.Errorf("topology: %s: supplier returned a nil processor", n.label())
		}
		return &userProc[KIn, VIn, KOut, VOut]{p: p}, nil
	}
	return KStream[KOut, VOut]{b: b, n: n, keyChanged: true}
}

// userProc adapts a typed Processor to the untyped graph.
type userProc[KIn, VIn, KOut, VOut any] struct {
	p Processor[KIn, VIn, KOut, VOut]
}

func (u *userProc[KIn, VIn, KOut, VOut]) init(c *nodeInstance) error {
	return u.p.Init(&procContext[KOut, VOut]{in: c})
}

func (u *userProc[KIn, VIn, KOut, VOut]) process(c *nodeInstance, r record) error {
	return u.p.Process(Record[KIn, VIn]{
		Key: as[KIn](r.key), Value: as[VIn](r.value), Timestamp: r.ts, Headers: r.headers,
	})
}

func (u *userProc[KIn, VIn, KOut, VOut]) close() error { return u.p.Close() }

type procContext[K, V any] struct {
	in *nodeInstance
}

func (c *procContext[K, V]) AppID() string    { return c.in.task.app }
func (c *procContext[K, V]) TaskID() string   { return c.in.task.env.TaskID() }
func (c *procContext[K, V]) Partition() int32 { return c.in.task.env.Partition() }
func (c *procContext[K, V]) NodeName() string { return c.in.node.name }
func (c *procContext[K, V]) Now() time.Time   { return c.in.task.env.Now() }

func (c *procContext[K, V]) StreamTime() time.Time { return c.in.task.streamTime }

func (c *procContext[K, V]) RecordMetadata() (RecordMetadata, bool) {
	return c.in.task.meta, c.in.task.hasMeta
}

func (c *procContext[K, V]) toRecord(rec Record[K, V]) record {
	ts := rec.Timestamp
	if ts.IsZero() {
		ts = c.in.ts
	}
	return record{key: rec.Key, value: rec.Value, ts: ts, headers: rec.Headers}
}

func (c *procContext[K, V]) Forward(rec Record[K, V]) error {
	return c.in.forward(c.toRecord(rec))
}

func (c *procContext[K, V]) ForwardTo(child string, rec Record[K, V]) error {
	return c.in.forwardTo(child, c.toRecord(rec))
}

func (c *procContext[K, V]) Schedule(interval time.Duration, typ PunctuationType, fn Punctuator) (Cancellable, error) {
	return c.in.task.schedule(c.in, interval, typ, fn)
}

func (c *procContext[K, V]) Store(name string) (statestore.ReadWriter, error) {
	rw, err := c.in.store(name)
	if err == nil && c.in.task.timestamped[name] {
		// A DSL table's store: the processor reads and writes values as
		// the table's serde encodes them.
		rw = statestore.BareValues(rw)
	}
	return rw, err
}

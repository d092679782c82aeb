// Package topologytest runs an Eddy topology without Kafka, for tests.
//
// A Driver instantiates every sub-topology of a topology as one task
// (partition 0) with in-memory stores and a manual wall clock. Records
// piped into a source topic run through the graph at once; records its sinks
// write are captured for reading, and those written to topics the topology
// itself reads (repartition topics) are fed straight back in, so a whole
// multi-stage application runs synchronously within one Pipe call.
//
//	d, err := topologytest.New(topo, topologytest.Config{})
//	in := topologytest.NewInputTopic(d, "lines", serde.String, serde.String)
//	out := topologytest.NewOutputTopic(d, "word-counts", serde.String, serde.Int64)
//	err = in.PipeValue("a rose is a rose")
//	kvs, err := out.ReadKeyValues()
//
// With Config.Commits the driver holds table updates and combined partials
// (see topology.WithCombining) until Commit, as the runtime does until
// its commits; without it they pass at once.
//
// Stream-time punctuators run after every record a task processes;
// wall-clock punctuators run when AdvanceWallClock moves the clock past
// their schedule. A Driver is not safe for concurrent use.
package topologytest

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/topology"
)

// Config configures a Driver. The zero value is usable.
type Config struct {
	// AppID prefixes internal topic names. Default "test-app".
	AppID string
	// StartTime is the initial wall-clock time. Default 2024-01-01 UTC.
	StartTime time.Time
	// Commits makes the driver behave like the runtime with its record
	// cache on: tables forward each key's latest value, and aggregations
	// of re-keyed streams send their combined partials, only when Commit
	// is called. Without it every update is forwarded at once.
	Commits bool
}

// Driver runs a topology in-process. See the package documentation.
type Driver struct {
	app     string
	commits bool
	now     time.Time
	tasks   []graph.TaskGraph
	// taskStores holds each task's stores, which its flush commits.
	taskStores [][]*memStore
	stores     map[string]*memStore
	// timestamped names the stores of timestamped values (see Store).
	timestamped map[string]bool
	readers     map[string]int // full topic name -> sub-topology
	// globals maps a global table's topic to its store, which records
	// piped into the topic update directly, as the runtime's global
	// thread does.
	globals map[string]*memStore
	offsets map[string]int64
	outputs map[string][]graph.OutputRecord
	queue   []graph.OutputRecord
	closed  bool
}

// New starts one task per sub-topology of topo.
func New(topo *topology.Topology, cfg Config) (*Driver, error) {
	if cfg.AppID == "" {
		cfg.AppID = "test-app"
	}
	if cfg.StartTime.IsZero() {
		cfg.StartTime = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	d := &Driver{
		app:         cfg.AppID,
		commits:     cfg.Commits,
		now:         cfg.StartTime,
		stores:      make(map[string]*memStore),
		timestamped: make(map[string]bool),
		readers:     make(map[string]int),
		globals:     make(map[string]*memStore),
		offsets:     make(map[string]int64),
		outputs:     make(map[string][]graph.OutputRecord),
	}
	for _, gs := range graph.Of(topo).GlobalStores() {
		s := newMemStore(false)
		d.stores[gs.Store.Name] = s
		d.globals[gs.Topic] = s
	}
	for _, st := range graph.Of(topo).SubTopologies() {
		for _, src := range st.Sources {
			d.readers[src.FullName(d.app)] = st.ID
		}
		var own []*memStore
		for _, s := range st.Stores {
			ms := newMemStore(cfg.Commits)
			d.stores[s.Name] = ms
			own = append(own, ms)
			if s.Timestamped {
				d.timestamped[s.Name] = true
			}
		}
		g, err := graph.Of(topo).NewTaskGraph(st.ID, &env{d: d, sub: st.ID})
		if err != nil {
			return nil, errors.Join(err, d.Close())
		}
		d.tasks = append(d.tasks, g)
		d.taskStores = append(d.taskStores, own)
	}
	return d, nil
}

// env is the TaskEnv of one task.
type env struct {
	d   *Driver
	sub int
}

func (e *env) AppID() string    { return e.d.app }
func (e *env) TaskID() string   { return strconv.Itoa(e.sub) + "_0" }
func (e *env) Partition() int32 { return 0 }
func (e *env) Now() time.Time   { return e.d.now }

// BufferTableUpdates implements graph.TableBuffering.
func (e *env) BufferTableUpdates() bool { return e.d.commits }

func (e *env) Store(name string) (statestore.ReadWriter, error) {
	s, ok := e.d.stores[name]
	if !ok {
		return nil, fmt.Errorf("topologytest: no store %q", name)
	}
	return s, nil
}

func (e *env) Send(rec graph.OutputRecord) error {
	e.d.outputs[rec.Topic] = append(e.d.outputs[rec.Topic], rec)
	if _, ok := e.d.readers[rec.Topic]; ok {
		e.d.queue = append(e.d.queue, rec)
	}
	return nil
}

// DroppedLate counts the records windowed aggregations left out of
// windows that had closed, over every task.
func (d *Driver) DroppedLate() int64 {
	var n int64
	for _, g := range d.tasks {
		if lc, ok := g.(graph.LateCounter); ok {
			n += lc.DroppedLate()
		}
	}
	return n
}

// DroppedJoinRecords counts the records stream-table joins dropped for a
// null key or value, over every task.
func (d *Driver) DroppedJoinRecords() int64 {
	var n int64
	for _, g := range d.tasks {
		if jc, ok := g.(graph.JoinDropCounter); ok {
			n += jc.DroppedJoinRecords()
		}
	}
	return n
}

// Now returns the driver's wall-clock time.
func (d *Driver) Now() time.Time { return d.now }

// AppID returns the application ID internal topic names are prefixed with.
func (d *Driver) AppID() string { return d.app }

// Store returns the store named name, whichever task owns it. The stores
// of DSL tables and windowed aggregations, which keep each value with a
// timestamp, are returned as their values alone (statestore.BareValues),
// as a Processor sees them.
func (d *Driver) Store(name string) (statestore.ReadWriter, error) {
	s, ok := d.stores[name]
	if !ok {
		return nil, fmt.Errorf("topologytest: no store %q", name)
	}
	if d.timestamped[name] {
		return statestore.BareValues(s), nil
	}
	return s, nil
}

// Pipe feeds one raw record into topic (a full topic name) at partition 0
// with the next offset, then runs everything it causes: records written to
// topics the topology reads, and stream-time punctuators. A nil key or value
// is a Kafka null. After an error the driver's state is unspecified.
func (d *Driver) Pipe(topic string, key, value []byte, ts time.Time, headers ...topology.Header) error {
	if d.closed {
		return errors.New("topologytest: driver is closed")
	}
	if err := d.process(topic, key, value, ts, headers); err != nil {
		d.queue = nil
		return err
	}
	return d.drain()
}

// drain processes the records the topology wrote to topics it reads itself
// (repartition topics), and what they cause in turn.
func (d *Driver) drain() error {
	for len(d.queue) > 0 {
		rec := d.queue[0]
		d.queue = d.queue[1:]
		if err := d.process(rec.Topic, rec.Key, rec.Value, rec.Timestamp, rec.Headers); err != nil {
			d.queue = nil
			return err
		}
	}
	return nil
}

func (d *Driver) process(topic string, key, value []byte, ts time.Time, headers []topology.Header) error {
	if gs, ok := d.globals[topic]; ok {
		d.offsets[topic]++
		switch {
		case key == nil:
			return nil
		case value == nil:
			return gs.Delete(key)
		default:
			return gs.Put(key, value)
		}
	}
	sub, ok := d.readers[topic]
	if !ok {
		return fmt.Errorf("topologytest: no source reads topic %q", topic)
	}
	off := d.offsets[topic]
	d.offsets[topic] = off + 1
	g := d.tasks[sub]
	err := g.Process(graph.InputRecord{
		Topic: topic, Partition: 0, Offset: off, Timestamp: ts, Headers: headers, Key: key, Value: value,
	})
	if err != nil {
		return err
	}
	return g.Punctuate(d.now)
}

// Commit does what a commit of the runtime does to the task graphs: each
// task forwards what it held since the last commit (table updates,
// combined partials), and what that causes downstream runs, until nothing
// is held. It matters only with Config.Commits.
func (d *Driver) Commit() error {
	if d.closed {
		return errors.New("topologytest: driver is closed")
	}
	// A task's flush may feed a task of a later stage, whose own flush
	// then has something to forward: one round per task reaches the end
	// of the longest chain.
	for range d.tasks {
		for i, g := range d.tasks {
			if err := g.Flush(); err != nil {
				d.queue = nil
				return err
			}
			for _, s := range d.taskStores[i] {
				s.commit()
			}
			if err := d.drain(); err != nil {
				return err
			}
		}
	}
	return nil
}

// AdvanceWallClock moves the wall clock forward by dt and runs the
// punctuators that became due, then everything they caused.
func (d *Driver) AdvanceWallClock(dt time.Duration) error {
	if d.closed {
		return errors.New("topologytest: driver is closed")
	}
	d.now = d.now.Add(dt)
	for _, g := range d.tasks {
		if err := g.Punctuate(d.now); err != nil {
			d.queue = nil
			return err
		}
	}
	return d.drain()
}

// ReadOutput removes and returns the records written to topic (a full topic
// name) so far, oldest first, as the bytes on the topic: a nil key or value
// is a null. Records written to topics the topology reads are captured too,
// besides being fed back in.
func (d *Driver) ReadOutput(topic string) []topology.Record[[]byte, []byte] {
	recs := d.outputs[topic]
	delete(d.outputs, topic)
	out := make([]topology.Record[[]byte, []byte], len(recs))
	for i, r := range recs {
		// Copies: a sink's bytes may be a string's own (graph.OutputRecord),
		// and the caller may write to these.
		out[i] = topology.Record[[]byte, []byte]{Key: bytes.Clone(r.Key), Value: bytes.Clone(r.Value), Timestamp: r.Timestamp, Headers: r.Headers}
	}
	return out
}

// Close closes every task. Closing twice is a no-op.
func (d *Driver) Close() error {
	if d.closed {
		return nil
	}
	d.closed = true
	var errs []error
	for _, g := range d.tasks {
		errs = append(errs, g.Close())
	}
	return errors.Join(errs...)
}

// InputTopic pipes typed records into a topic.
type InputTopic[K, V any] struct {
	d          *Driver
	topic      string
	keySerde   serde.Serde[K]
	valueSerde serde.Serde[V]
}

// NewInputTopic returns an InputTopic writing to topic (a full topic name)
// with the given serdes.
func NewInputTopic[K, V any](d *Driver, topic string, keySerde serde.Serde[K], valueSerde serde.Serde[V]) *InputTopic[K, V] {
	return &InputTopic[K, V]{d: d, topic: topic, keySerde: keySerde, valueSerde: valueSerde}
}

// Pipe pipes (k, v) stamped with the driver's wall-clock time.
func (t *InputTopic[K, V]) Pipe(k K, v V) error {
	return t.PipeRecord(topology.Record[K, V]{Key: k, Value: v})
}

// PipeAt pipes (k, v) with timestamp ts.
func (t *InputTopic[K, V]) PipeAt(k K, v V, ts time.Time) error {
	return t.PipeRecord(topology.Record[K, V]{Key: k, Value: v, Timestamp: ts})
}

// PipeRecord pipes rec; a zero Timestamp means the driver's wall-clock time.
// A key or value that its serde encodes to nil (serde.Bytes of nil) is sent
// as a Kafka null.
func (t *InputTopic[K, V]) PipeRecord(rec topology.Record[K, V]) error {
	kb, err := t.keySerde.Encode(rec.Key)
	if err != nil {
		return fmt.Errorf("topologytest: encode key: %w", err)
	}
	return t.pipeValue(kb, rec.Value, rec.Timestamp, rec.Headers)
}

// PipeValue pipes v with a null key, stamped with the wall-clock time.
func (t *InputTopic[K, V]) PipeValue(v V) error {
	return t.pipeValue(nil, v, time.Time{}, nil)
}

func (t *InputTopic[K, V]) pipeValue(kb []byte, v V, ts time.Time, headers []topology.Header) error {
	vb, err := t.valueSerde.Encode(v)
	if err != nil {
		return fmt.Errorf("topologytest: encode value: %w", err)
	}
	if ts.IsZero() {
		ts = t.d.now
	}
	return t.d.Pipe(t.topic, kb, vb, ts, headers...)
}

// PipeTombstone pipes k with a null value, stamped with the wall-clock time.
func (t *InputTopic[K, V]) PipeTombstone(k K) error {
	kb, err := t.keySerde.Encode(k)
	if err != nil {
		return fmt.Errorf("topologytest: encode key: %w", err)
	}
	return t.d.Pipe(t.topic, kb, nil, t.d.now)
}

// OutputTopic reads typed records a topology wrote to a topic.
type OutputTopic[K, V any] struct {
	d          *Driver
	topic      string
	keySerde   serde.Serde[K]
	valueSerde serde.Serde[V]
}

// NewOutputTopic returns an OutputTopic reading topic (a full topic name)
// with the given serdes.
func NewOutputTopic[K, V any](d *Driver, topic string, keySerde serde.Serde[K], valueSerde serde.Serde[V]) *OutputTopic[K, V] {
	return &OutputTopic[K, V]{d: d, topic: topic, keySerde: keySerde, valueSerde: valueSerde}
}

// ReadRecords removes and decodes the records written so far, oldest first.
// Null keys and values decode to zero values.
func (t *OutputTopic[K, V]) ReadRecords() ([]topology.Record[K, V], error) {
	raw := t.d.ReadOutput(t.topic)
	out := make([]topology.Record[K, V], 0, len(raw))
	for _, r := range raw {
		rec := topology.Record[K, V]{Timestamp: r.Timestamp, Headers: r.Headers}
		var err error
		if r.Key != nil {
			if rec.Key, err = t.keySerde.Decode(r.Key); err != nil {
				return nil, fmt.Errorf("topologytest: decode key from %q: %w", t.topic, err)
			}
		}
		if r.Value != nil {
			if rec.Value, err = t.valueSerde.Decode(r.Value); err != nil {
				return nil, fmt.Errorf("topologytest: decode value from %q: %w", t.topic, err)
			}
		}
		out = append(out, rec)
	}
	return out, nil
}

// ReadKeyValues is ReadRecords without timestamps and headers.
func (t *OutputTopic[K, V]) ReadKeyValues() ([]topology.KeyValue[K, V], error) {
	recs, err := t.ReadRecords()
	if err != nil {
		return nil, err
	}
	out := make([]topology.KeyValue[K, V], len(recs))
	for i, r := range recs {
		out[i] = topology.KV(r.Key, r.Value)
	}
	return out, nil
}

package topology

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"
	"unsafe"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

// TimeWindowedKStream is a grouped stream cut into time windows (tumbling
// or hopping), ready to be aggregated per key and window. Create it with
// WindowedBy.
//
// Windows use event time: a record's timestamp (or what the source's
// TimestampExtractor says) places it in its windows, and the task's stream
// time, the largest timestamp it has read, closes them. A record arriving
// for a window that closed (stream time at or past window end plus grace)
// is left out of it and counted (runtime.TaskInfo.DroppedLate); a record
// without a timestamp (the zero time.Time) fails as a processing error.
type TimeWindowedKStream[K, V any] struct {
	g     *grouping[K, V]
	w     TimeWindows
	final bool
}

// WindowedBy cuts the grouped stream g into the time windows w. It is a
// function rather than a method of KGroupedStream because its results are
// keyed by Windowed[K], which Go's generics cannot have a method of
// KGroupedStream[K] lead back to.
func WindowedBy[K, V any](g KGroupedStream[K, V], w TimeWindows) TimeWindowedKStream[K, V] {
	gr := g.grouping()
	if w.size <= 0 {
		gr.b.errorf("WindowedBy: zero TimeWindows; use TumblingWindows or HoppingWindows")
	}
	return TimeWindowedKStream[K, V]{g: gr, w: w}
}

// EmitFinal makes the aggregation emit one result per key and window, once
// the window closes (stream time reaches its end plus grace), instead of
// one per update. The windows awaiting their result are kept in a second
// store, "<store>-pending" (logged and persistent as the aggregation's
// store is), so that a restart or a failover neither loses nor, under
// exactly-once, repeats a result. A result carries the largest timestamp
// of its window's records. Results are emitted when a record advances
// stream time past the close, so an idle partition holds them back.
func (s TimeWindowedKStream[K, V]) EmitFinal() TimeWindowedKStream[K, V] {
	s.final = true
	return s
}

func (s TimeWindowedKStream[K, V]) grouping() *grouping[K, V] {
	if s.g == nil {
		panic("topology: use of a zero TimeWindowedKStream; create one with WindowedBy")
	}
	return s.g
}

// Count counts the records of each key in each window into the window
// store named store (values encoded with serde.Int64). The result is a
// table keyed by Windowed[K], encoded by TimeWindowedSerde over the
// grouping's key serde. Named, InMemory and WithoutLogging apply.
func (s TimeWindowedKStream[K, V]) Count(store string, opts ...Option) KTable[Windowed[K], int64] {
	return windowedAggregate(s, "windowed-count", store, serde.Int64, collect(opts), "",
		countInitial, func(_ K, _ V, n int64, _ bool) int64 { return n + 1 })
}

// Reduce combines the values of each key in each window with fn, starting
// from the window's first value (see Count for the store and result).
func (s TimeWindowedKStream[K, V]) Reduce(fn func(agg, v V) V, store string, opts ...Option) KTable[Windowed[K], V] {
	gr := s.grouping()
	var missing string
	if fn == nil {
		missing = "reducer"
	}
	return windowedAggregate(s, "windowed-reduce", store, gr.valueSerde, collect(opts), missing, nil, reduceStep[K](fn))
}

// WindowedAggregate folds the values of each key in each window into an
// aggregate: init gives a window's starting aggregate and adder folds in
// one value. Aggregates are encoded with aggSerde (see Count for the
// store and result).
func WindowedAggregate[K, V, A any](s TimeWindowedKStream[K, V], init func() A, adder func(K, V, A) A, store string, aggSerde serde.Serde[A], opts ...Option) KTable[Windowed[K], A] {
	var missing string
	switch {
	case init == nil:
		missing = "initializer"
	case adder == nil:
		missing = "adder"
	}
	return windowedAggregate(s, "windowed-aggregate", store, aggSerde, collect(opts), missing, initialOf(init), aggregateStep(init, adder))
}

// PendingStoreName is the name of the store in which an EmitFinal
// aggregation into store keeps the windows whose result is still due.
func PendingStoreName(store string) string { return store + "-pending" }

// declarePending gives node n of an EmitFinal aggregation into store its
// pending store, logged and persistent as the aggregation's store is.
func declarePending(b *Builder, n *node, store string, o options) {
	pending := PendingStoreName(store)
	n.stores = append(n.stores, pending)
	b.declareStore(StoreInfo{Name: pending, Persistent: !o.inMemory, Logged: !o.unlogged}, n.label())
}

// reduceStep is the step of a Reduce, windowed or not: the first value of
// a key (or window) is its aggregate, which fn combines with each later one.
func reduceStep[K, V any](fn func(agg, v V) V) func(K, V, V, bool) V {
	return func(_ K, v V, agg V, found bool) V {
		if !found {
			return v
		}
		return fn(agg, v)
	}
}

// initialOf is the initial value of a key or window an Aggregate with
// init creates: the old value Kafka Streams' KStreamAggregate and
// KStreamWindowAggregate send with its first result, as they start it
// from that value.
func initialOf[A any](init func() A) func() (A, bool) {
	if init == nil {
		return nil
	}
	return func() (A, bool) { return init(), true }
}

// aggregateStep is the step of an Aggregate, windowed or not: init gives
// a key's (or window's) starting aggregate and adder folds in each value.
func aggregateStep[K, V, A any](init func() A, adder func(K, V, A) A) func(K, V, A, bool) A {
	return func(k K, v V, agg A, found bool) A {
		if !found {
			agg = init()
		}
		return adder(k, v, agg)
	}
}

func windowedAggregate[K, V, A any](s TimeWindowedKStream[K, V], op, store string, aggSerde serde.Serde[A], o options, missingFunc string, initial func() (A, bool), step func(K, V, A, bool) A) KTable[Windowed[K], A] {
	g := s.grouping()
	var missing []string
	if missingFunc != "" {
		missing = []string{missingFunc}
	}
	return timeWindowAggregate(g.b, op, store, s.w, s.final, g.keySerde, aggSerde, o, missing, initial, step, nil, g.input(store))
}

// timeWindowAggregate adds the processor of a time-windowed aggregation
// reading parents. inputOf, given with several parents, tells which parent
// a value came from: each parent has a stream time of its own. initial,
// nil for a Reduce, gives the old value sent with a new window's first
// result (see windowAggProc.initial).
func timeWindowAggregate[K, V, A any](b *Builder, op, store string, w TimeWindows, final bool, keySerde serde.Serde[K], aggSerde serde.Serde[A], o options, missing []string, initial func() (A, bool), step func(K, V, A, bool) A, inputOf func(V) int, parents ...*node) KTable[Windowed[K], A] {
	info := StoreInfo{
		Name: store, Persistent: !o.inMemory, Logged: !o.unlogged,
		Kind: graph.Window, Retention: max(w.MinRetention(), 1), WindowSize: w.size,
		Timestamped: !b.bareValues,
	}
	wopts := info.WindowOptions()
	// The node's tasks share one pool of update chunks (windowUpdates).
	pool := new(sync.Pool)
	n := b.addProcessor(op, o, func() procImpl {
		return &windowAggProc[K, V, A]{
			store: store, w: w, wopts: wopts, final: final,
			keySerde: keySerde, aggSerde: aggSerde, step: step, initial: initial,
			updates: windowUpdates[K, A]{held: chunked[windowUpdate[K, A]]{pool: pool}},
			clock:   newInputClocks(len(parents)), inputOf: inputOf,
		}
	}, parents...)
	n.stores = []string{store}
	b.declareStore(info, n.label())
	// Each update reads its window's aggregate before folding in the
	// record, so it knows the old value, as Kafka Streams'
	// KStreamWindowAggregate forwards it when asked; a final result goes
	// out with a null old value, as Kafka Streams sends it (emitFinal).
	n.olds = ownOldValues
	if final {
		declarePending(b, n, store, o)
	}
	if aggSerde == nil {
		b.errorf("%s: store %q: value serde is nil", n.label(), store)
	}
	for _, m := range missing {
		b.errorf("%s: %s is nil", n.label(), m)
	}
	return KTable[Windowed[K], A]{b: b, n: n, store: store, keySerde: TimeWindowedSerde(keySerde, w.size), valueSerde: aggSerde, windows: &windowClose{grace: w.grace}}
}

// windowAggProc aggregates records into time windows.
type windowAggProc[K, V, A any] struct {
	store    string
	w        TimeWindows
	wopts    statestore.WindowOptions
	final    bool
	keySerde serde.Serde[K]
	aggSerde serde.Serde[A]
	step     func(K, V, A, bool) A
	// initial is the old value a new window's first result carries
	// without the record cache, the aggregate Kafka Streams starts it
	// from (its initializer's; none for a Reduce, nil). Under the cache
	// the old value is the store's, as Kafka Streams' caching window
	// store reads it from its underlying store: none for a new window.
	initial func() (A, bool)

	ws      *statestore.WindowStore
	updates windowUpdates[K, A]
	clock   inputClocks
	inputOf func(V) int // a co-grouped value's input; nil with one input
	log     lateLog

	// Each window a record falls in is one WindowStore.Update with
	// updateFn, a method value made once; key, value and ts carry its
	// input, next and nextTs its result (the aggregate and the window's
	// largest record time), and decodeCopies says whether aggSerde's
	// decode copies its input, so that the store's bytes need no defensive
	// copy. wins is a buffer reused from record to record.
	updateFn     func(old []byte, found bool) ([]byte, error)
	key          K
	value        V
	ts           int64
	next         A
	nextTs       int64
	decodeCopies bool
	// timestamped: the store keeps timestamps (not BareStoreValues).
	timestamped bool
	wins        []Window
	// prev and prevFound are, when the node sends old values, the
	// window's aggregate before update's step (see node.sendOld).
	prev      A
	prevFound bool
	// sendOld and fullOld are the node's (see node.fullOld): without
	// fullOld an old value need only tell whether the window existed.
	sendOld, fullOld bool
}

func (p *windowAggProc[K, V, A]) init(c *nodeInstance) error {
	var err error
	if p.ws, err = openWindowStore(c, p.store, p.wopts); err != nil {
		return err
	}
	p.log.node = c.node.name
	p.updateFn = p.update
	p.decodeCopies, _ = serdeCopies(p.aggSerde)
	p.timestamped = c.timestamped(p.store)
	// Final results read no old value: they carry none (emitFinal).
	p.sendOld, p.fullOld = c.node.sendOld && !p.final, c.node.fullOld
	return p.clock.open(c, p.store, p.final, p.ws.ObservedTime)
}

func (p *windowAggProc[K, V, A]) process(c *nodeInstance, r record) error {
	if r.keyNull || r.valueNull {
		return nil
	}
	v := as[V](r.value)
	t, st, err := inputClock(&p.clock, v, p.inputOf).advance(c, r, p.emit)
	if err != nil {
		return err
	}
	k := as[K](r.key)
	kb, err := p.keySerde.Encode(k)
	if err != nil {
		return fmt.Errorf("encode key for store %q: %w", p.store, err)
	}
	late := false
	p.wins = p.w.appendWindowsFor(p.wins[:0], t)
	for _, win := range p.wins {
		if p.w.IsClosed(win, st) {
			late = true
			continue
		}
		if err := p.add(c, k, kb, v, win, r); err != nil {
			return err
		}
	}
	if late {
		c.task.droppedLate++
		p.log.dropped(c.task, t, st)
	}
	return nil
}

// add folds v into k's window win and emits the update, or records the
// window as pending its final result.
func (p *windowAggProc[K, V, A]) add(c *nodeInstance, k K, kb []byte, v V, win Window, r record) error {
	p.key, p.value, p.ts = k, v, r.ts.UnixMilli()
	slot, stored, err := p.ws.UpdateAt(kb, win.Start, p.updateFn)
	next, ts := p.next, stamp(r.ts, p.nextTs)
	var old *prior
	if p.sendOld {
		old = &prior{value: p.prev, null: !p.prevFound}
		if !p.prevFound && p.initial != nil && !c.holds() {
			v, ok := p.initial()
			old = &prior{value: v, null: !ok}
		}
	}
	p.key, p.value, p.next, p.prev = zero[K](), zero[V](), zero[A](), zero[A]()
	if err != nil {
		return err
	}
	if !p.final {
		if !c.holds() {
			return c.forward(record{key: Windowed[K]{Key: k, Window: win}, value: next, ts: ts, headers: r.headers, old: old})
		}
		p.updates.add(slot, stored, kb, k, win, next, old, ts, r.headers)
		return nil
	}
	return p.clock.pending.add(p.w.CloseTime(win), win.Start, kb, r.ts.UnixMilli())
}

// update is updateFn: one aggregation step on the window's stored bytes,
// a timestamped value (statestore.AppendTimestamped) whose timestamp is
// the largest time of the window's records, as Kafka Streams' timestamped
// window store keeps it. A bare value, written before aggregates carried
// their time, has none (statestore.NoTimestamp): the result then takes the
// updating record's time, which is what was emitted for the window before
// and is never later than a record of the window (its end would be).
func (p *windowAggProc[K, V, A]) update(old []byte, found bool) ([]byte, error) {
	var cur A
	p.nextTs = p.ts
	if found {
		var ts int64
		old, ts = statestore.SplitTimestamped(old)
		p.nextTs = max(ts, p.ts)
		if !p.decodeCopies {
			old = bytes.Clone(old)
		}
		var err error
		if cur, err = p.aggSerde.Decode(old); err != nil {
			return nil, fmt.Errorf("decode aggregate in store %q: %w", p.store, err)
		}
	}
	p.prevFound = found
	if p.sendOld && p.fullOld && found {
		// The step may change cur in place (an adder appending to a
		// slice or filling a map), so the old value is decoded apart.
		prev, err := p.aggSerde.Decode(bytes.Clone(old))
		if err != nil {
			return nil, fmt.Errorf("decode aggregate in store %q: %w", p.store, err)
		}
		p.prev = prev
	}
	p.next = p.step(p.key, p.value, cur, found)
	return encodeTimestamped(p.aggSerde, p.next, p.nextTs, p.timestamped)
}

// openWindowStore opens the task's window store named store.
func openWindowStore(c *nodeInstance, store string, opts statestore.WindowOptions) (*statestore.WindowStore, error) {
	rw, err := c.store(store)
	if err != nil {
		return nil, err
	}
	return statestore.NewWindowStore(rw, opts)
}

// emit forwards the final result of a closed window.
func (p *windowAggProc[K, V, A]) emit(c *nodeInstance, d pendingWindow) error {
	vb, found, err := p.ws.Get(d.kb, d.start)
	if err != nil || !found {
		return err
	}
	win := Window{Start: d.start, End: addSat(d.start, p.w.size)}
	vb, _ = statestore.SplitTimestamped(vb)
	return emitFinal(c, p.store, p.keySerde, p.aggSerde, d, win, vb)
}

// emitFinal decodes a closed window's key and aggregate and forwards them,
// stamped with the window's latest record time. When the node sends old
// values the result's is null, as Kafka Streams forwards a final result
// (Change(aggregate, null)): a window's result goes out once, so nothing
// downstream holds an earlier one to retract.
func emitFinal[K, A any](c *nodeInstance, store string, ks serde.Serde[K], as serde.Serde[A], d pendingWindow, win Window, vb []byte) error {
	k, err := ks.Decode(bytes.Clone(d.kb))
	if err != nil {
		return fmt.Errorf("decode key in store %q: %w", PendingStoreName(store), err)
	}
	agg, err := as.Decode(bytes.Clone(vb))
	if err != nil {
		return fmt.Errorf("decode aggregate in store %q: %w", store, err)
	}
	out := record{key: Windowed[K]{Key: k, Window: win}, value: agg, ts: time.UnixMilli(d.ts)}
	if c.node.sendOld {
		out.old = &prior{null: true}
	}
	return c.forward(out)
}

// eventClock is a windowed processor's view of stream time and, with
// emit-final, its pending windows.
type eventClock struct {
	// streamTime is the largest stream time the processor has acted on,
	// in milliseconds; math.MinInt64 before the first record.
	streamTime int64
	pending    *pendingStore // nil unless emit-final
	observed   func() (int64, error)
	started    bool
	// committedTime and committedStarted are streamTime and started when
	// the last commit completed, where an abort takes them back.
	committedTime    int64
	committedStarted bool
}

// inputClocks are a windowed processor's stream times: its input's, the
// embedded eventClock, and for a co-grouped aggregation one more for each
// further grouped stream, so that each closes windows by its own records'
// times, as Kafka Streams' window processor per co-grouped stream does.
// Only the embedded clock has emit-final's pending windows: co-grouped
// aggregations do not emit final results. The zero value serves one input.
type inputClocks struct {
	eventClock
	others []eventClock
}

// newInputClocks returns the clocks of n inputs.
func newInputClocks(n int) inputClocks {
	return inputClocks{others: make([]eventClock, max(n-1, 0))}
}

// inputClock returns the clock of the input value v came from, which
// inputOf names (nil for a processor of one input).
func inputClock[V any](c *inputClocks, v V, inputOf func(V) int) *eventClock {
	if inputOf == nil {
		return &c.eventClock
	}
	if i := inputOf(v); i > 0 {
		return &c.others[i-1]
	}
	return &c.eventClock
}

// open prepares every clock. Each starts, at its first record, from where
// the store stood before this task wrote to it, not from what the other
// inputs have written since.
func (c *inputClocks) open(nc *nodeInstance, store string, final bool, observed func() (int64, error)) error {
	if len(c.others) > 0 {
		observed = sync.OnceValues(observed)
	}
	if err := c.eventClock.open(nc, store, final, observed); err != nil {
		return err
	}
	for i := range c.others {
		if err := c.others[i].open(nc, store, false, observed); err != nil {
			return err
		}
	}
	return nil
}

func (c *inputClocks) committed() {
	c.eventClock.committed()
	for i := range c.others {
		c.others[i].committed()
	}
}

func (c *inputClocks) rewind() {
	c.eventClock.rewind()
	for i := range c.others {
		c.others[i].rewind()
	}
}

// rewinder is a procImpl with a clock of its own, which an abort takes
// back to where it stood at the last commit (graph.Discarder): committed
// marks that point, rewind returns to it. Its stores' caches drop their
// writes after rewind, so rewind must read nothing from them.
type rewinder interface {
	committed()
	rewind()
}

func (e *eventClock) committed() {
	e.committedTime, e.committedStarted = e.streamTime, e.started
}

func (e *eventClock) rewind() {
	e.streamTime, e.started = e.committedTime, e.committedStarted
	if e.pending != nil {
		// The windows emitted since the commit are pending again: the
		// next advance scans for them.
		e.pending.nextClose = math.MinInt64
	}
}

// errNoTimestamp fails a record that reaches a windowed operation without
// an event time.
var errNoTimestamp = errors.New("record has no timestamp; windows need event time (set it, or use a TimestampExtractor)")

// open prepares the clock. It reads nothing yet: a task graph is built
// before its stores are restored, so the stores are read at the first
// record (start).
func (e *eventClock) open(c *nodeInstance, store string, final bool, observed func() (int64, error)) error {
	e.streamTime, e.observed = math.MinInt64, observed
	if !final {
		return nil
	}
	rw, err := c.store(PendingStoreName(store))
	if err != nil {
		return err
	}
	e.pending = &pendingStore{rw: rw}
	return nil
}

// start sets the clock from the restored stores: from the pending store's
// stream time with emit-final, else from the latest window time the store
// holds (a lower bound of the stream time it was written at), so that a
// restarted task does not accept into closed windows what it dropped
// before, for want of a stream time.
func (e *eventClock) start() error {
	e.started = true
	if e.pending != nil {
		st, err := e.pending.open()
		e.streamTime = st
		return err
	}
	st, err := e.observed()
	e.streamTime = st
	return err
}

// advance takes r's time t into stream time st and, with emit-final, emits
// (through emit) and forgets every pending window st has closed.
func (e *eventClock) advance(c *nodeInstance, r record, emit func(*nodeInstance, pendingWindow) error) (t, st int64, err error) {
	if r.ts.IsZero() || r.ts.UnixMilli() < 0 {
		return 0, 0, errNoTimestamp
	}
	if !e.started {
		if err := e.start(); err != nil {
			return 0, 0, err
		}
	}
	t = r.ts.UnixMilli()
	// Stream time is the processor's own, the latest time of the records
	// that reached it, as in Kafka Streams: a task that also reads a table
	// or another stream does not close this processor's windows with their
	// times (a table record stamped with the wall clock would close them
	// all).
	st = max(e.streamTime, t)
	if st <= e.streamTime {
		return t, st, nil
	}
	e.streamTime = st
	if e.pending == nil {
		return t, st, nil
	}
	if err := e.pending.setStreamTime(st); err != nil {
		return 0, 0, err
	}
	due, err := e.pending.due(st)
	if err != nil {
		return 0, 0, err
	}
	for _, d := range due {
		if err := emit(c, d); err != nil {
			return 0, 0, err
		}
		if err := e.pending.rw.Delete(d.key); err != nil {
			return 0, 0, err
		}
	}
	return t, st, nil
}

// pendingStore is the store of an emit-final aggregation's windows whose
// result is still due, keyed
//
//	close time (8, big-endian) | window start (8) | encoded key
//
// holding the window's largest record time (8), so the windows due at a
// stream time are one range from the start of the store, in close-time
// order. It also keeps the stream time the processor has reached under
// streamTimeKey (ff sorts after every entry, whose first byte is that of a
// non-negative time), so that after a restart or a failover a record
// already late before is still late, and a window already emitted is never
// reopened and emitted again.
type pendingStore struct {
	rw statestore.ReadWriter
	// nextClose is the earliest close time in the store (math.MaxInt64
	// when empty), so that a record that closes no window costs no range
	// scan.
	nextClose int64
}

// pendingWindow is one entry of a pendingStore.
type pendingWindow struct {
	key          []byte // the whole entry key
	close, start int64
	kb           []byte // the record key, encoded
	ts           int64
}

var streamTimeKey = []byte{0xff}

// open returns the stored stream time (math.MinInt64 if none).
func (p *pendingStore) open() (int64, error) {
	st := int64(math.MinInt64)
	v, found, err := p.rw.Get(streamTimeKey)
	if err != nil {
		return st, err
	}
	if found && len(v) == 8 {
		st = int64(binary.BigEndian.Uint64(v))
	}
	p.nextClose, err = p.firstClose(nil)
	return st, err
}

func (p *pendingStore) firstClose(from []byte) (int64, error) {
	it, err := p.rw.Range(from, streamTimeKey)
	if err != nil {
		return math.MaxInt64, err
	}
	next := int64(math.MaxInt64)
	if it.Next() && len(it.Key()) >= 16 {
		next = int64(binary.BigEndian.Uint64(it.Key()))
	}
	return next, errors.Join(it.Err(), it.Close())
}

func (p *pendingStore) setStreamTime(st int64) error {
	return p.rw.Put(streamTimeKey, binary.BigEndian.AppendUint64(nil, uint64(st)))
}

func pendingKey(closeAt, start int64, kb []byte) []byte {
	k := make([]byte, 0, 16+len(kb))
	k = binary.BigEndian.AppendUint64(k, uint64(closeAt))
	k = binary.BigEndian.AppendUint64(k, uint64(start))
	return append(k, kb...)
}

// add records a window updated by a record at ts.
func (p *pendingStore) add(closeAt, start int64, kb []byte, ts int64) error {
	pk := pendingKey(closeAt, start, kb)
	if prev, ok, err := p.rw.Get(pk); err != nil {
		return err
	} else if ok && len(prev) == 8 {
		ts = max(ts, int64(binary.BigEndian.Uint64(prev)))
	}
	if err := p.rw.Put(pk, binary.BigEndian.AppendUint64(nil, uint64(ts))); err != nil {
		return err
	}
	p.nextClose = min(p.nextClose, closeAt)
	return nil
}

// remove forgets a window that will have no result of its own (a session
// merged into another), returning its largest record time.
func (p *pendingStore) remove(closeAt, start int64, kb []byte) (int64, error) {
	pk := pendingKey(closeAt, start, kb)
	prev, ok, err := p.rw.Get(pk)
	if err != nil || !ok {
		return math.MinInt64, err
	}
	var ts int64 = math.MinInt64
	if len(prev) == 8 {
		ts = int64(binary.BigEndian.Uint64(prev))
	}
	return ts, p.rw.Delete(pk)
}

// due lists the windows closed at stream time st, in close-time order.
func (p *pendingStore) due(st int64) ([]pendingWindow, error) {
	if st < p.nextClose {
		return nil, nil
	}
	upTo := binary.BigEndian.AppendUint64(nil, uint64(st)+1)
	it, err := p.rw.Range(nil, upTo)
	if err != nil {
		return nil, err
	}
	var out []pendingWindow
	for it.Next() {
		k := it.Key()
		if len(k) < 16 || len(it.Value()) != 8 {
			continue
		}
		k = bytes.Clone(k)
		out = append(out, pendingWindow{
			key: k, close: int64(binary.BigEndian.Uint64(k)), start: int64(binary.BigEndian.Uint64(k[8:16])),
			kb: k[16:], ts: int64(binary.BigEndian.Uint64(it.Value())),
		})
	}
	if err := errors.Join(it.Err(), it.Close()); err != nil {
		return nil, err
	}
	// Whatever remains closes later than st.
	p.nextClose, err = p.firstClose(upTo)
	return out, err
}

func (p *windowAggProc[K, V, A]) flush(c *nodeInstance) error { return p.updates.flush(c) }

func (p *windowAggProc[K, V, A]) discard() { p.updates.discard() }

func (p *windowAggProc[K, V, A]) committed() { p.clock.committed() }

func (p *windowAggProc[K, V, A]) rewind() {
	p.clock.rewind()
	p.ws.Rewind()
}

// windowUpdates holds a windowed aggregation's updates until Flush, the
// latest of each window, as tableUpdates does for a table. A window's
// pending update is found by the slot of the window's entry in the record
// cache (statestore.SlotUpdater), which the store's update reports, so
// that a record costs no hashing and no key copy beyond the cache's own.
// The cache renumbers its slots at every commit and discard, as the task
// graph flushes or discards these updates; each pending update keeps the
// identity of its entry's key (the cache's copy, never modified), so a
// slot that names another entry all the same (the two fell out of step)
// only costs a second update of the window in the next flush. Windows
// without a slot (a store that reports none) are found by key and start.
// Values stay unboxed until Flush.
//
// The updates are kept in fixed-size chunks, so that a growing buffer is
// never copied, and the chunks go back to a pool shared by the node's
// tasks at every flush: a commit interval of a spread input holds
// thousands of updates, whose buffer would otherwise be allocated (and
// cleared) again at every commit, while the pool keeps nothing for long
// once no task uses it.
type windowUpdates[K, A any] struct {
	bySlot   slotIndex
	byWindow map[windowID]int32
	held     chunked[windowUpdate[K, A]]
}

// windowID names a window without a cache slot: its encoded key and start.
type windowID struct {
	kb    string
	start int64
}

type windowUpdate[K, A any] struct {
	key K
	// entry is the first byte of the cache's copy of the window's key, or
	// nil for a window without a slot. Held here, that copy cannot be
	// freed and its address reused by another entry's.
	entry *byte
	win   Window
	value A
	// old is the window's old value at its first update since the last
	// flush, which the flushed update replaces (nil without old values).
	old     *prior
	ts      time.Time
	headers []Header
}

// maxRetainedSlots bounds the slot index kept between flushes.
const maxRetainedSlots = 1 << 14

// add records value as window win's pending update for key (kb encoded),
// whose cache entry has slot and stored key stored (slot -1 if none), old
// its old value. A window already pending keeps the old value it had then.
func (u *windowUpdates[K, A]) add(slot int, stored []byte, kb []byte, k K, win Window, value A, old *prior, ts time.Time, headers []Header) {
	var entry *byte
	if slot >= 0 && len(stored) > 0 {
		entry = unsafe.SliceData(stored)
		if i, ok := u.bySlot.lookup(slot); ok && i < u.held.n {
			if p := u.held.at(i); p.entry == entry {
				p.value, p.ts, p.headers = value, ts, headers
				return
			}
		}
		u.bySlot.set(slot, u.held.n)
	} else {
		id := windowID{kb: string(kb), start: win.Start}
		if i, ok := u.byWindow[id]; ok {
			p := u.held.at(int(i))
			p.value, p.ts, p.headers = value, ts, headers
			return
		}
		if u.byWindow == nil {
			u.byWindow = make(map[windowID]int32)
		}
		u.byWindow[id] = int32(u.held.n)
	}
	u.held.push(windowUpdate[K, A]{key: k, entry: entry, win: win, value: value, old: old, ts: ts, headers: headers})
}

// discard drops the pending updates: the input that made them is to be
// processed again (graph.Discarder).
func (u *windowUpdates[K, A]) discard() {
	u.resetIndex()
	u.held.empty()
}

// resetIndex forgets where the pending updates are, as the cache renumbers
// its slots at the commit or discard that follows a flush or discard.
func (u *windowUpdates[K, A]) resetIndex() {
	u.bySlot.reset(maxRetainedSlots)
	clear(u.byWindow)
}

// flush forwards the pending updates in the order their windows were first
// updated.
func (u *windowUpdates[K, A]) flush(c *nodeInstance) error {
	u.resetIndex()
	return u.held.drain(func(p *windowUpdate[K, A]) error {
		return c.forward(record{key: Windowed[K]{Key: p.key, Window: p.win}, value: p.value, old: p.old, ts: p.ts, headers: p.headers})
	})
}

func (p *windowAggProc[K, V, A]) close() error { return nil }

// lateLog logs dropped late records at most once per lateLogEvery per
// node instance, with how many were dropped since the last line.
type lateLog struct {
	node    string
	last    time.Time
	skipped int64
}

const lateLogEvery = 10 * time.Second

func (l *lateLog) dropped(g *taskGraph, t, streamTime int64) {
	now := time.Now()
	if now.Sub(l.last) < lateLogEvery {
		l.skipped++
		return
	}
	log := slog.Default().With("task", g.env.TaskID())
	if tl, ok := g.env.(graph.TaskLogger); ok {
		log = tl.Logger() // names the task already
	}
	log.Warn("dropping late record from closed windows",
		"node", l.node, "timestamp_ms", t, "stream_time_ms", streamTime,
		"dropped_since_last_log", l.skipped)
	l.last, l.skipped = now, 0
}

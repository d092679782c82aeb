package topology

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

// SlidingWindowedKStream is a grouped stream cut into sliding windows
// (SlidingWindows), ready to be aggregated per key and window. Create it
// with SlidingWindowedBy. Event time, stream time and late records are as
// for TimeWindowedKStream; a record is late when its right window, the
// last window it can fall into, has closed (SlidingWindows.IsLate).
//
// A record updates every open window of its key that contains it, and
// creates the windows it defines (SlidingWindows.WindowsOf): its left
// window, its right window if a later record lies within MaxDiff, and the
// right window of the record before it if it lies within MaxDiff of that
// record. A window that is created, or would be updated, after it closed
// is left alone: a closed window is final. Results are stamped with their
// window's latest record time.
//
// As in Kafka Streams, a new window's aggregate is derived from a
// neighbouring window's, and each window's latest record time is kept in
// a second window store, "<store>-times" (logged and persistent as the
// aggregation's store is); results, their order and their timestamps are
// Kafka Streams'. With FoldKeptRecords the aggregation computes a new
// window from the records themselves instead.
type SlidingWindowedKStream[K, V any] struct {
	g     *grouping[K, V]
	w     SlidingWindows
	final bool
	fold  bool
}

// SlidingWindowedBy cuts the grouped stream g into the sliding windows w.
func SlidingWindowedBy[K, V any](g KGroupedStream[K, V], w SlidingWindows) SlidingWindowedKStream[K, V] {
	gr := g.grouping()
	if w.diff <= 0 {
		gr.b.errorf("SlidingWindowedBy: zero SlidingWindows; use NewSlidingWindows")
	}
	return SlidingWindowedKStream[K, V]{g: gr, w: w}
}

// EmitFinal emits one result per key and window, once the window closes,
// instead of one per update (see TimeWindowedKStream.EmitFinal). A result
// carries the largest timestamp of its window's records.
func (s SlidingWindowedKStream[K, V]) EmitFinal() SlidingWindowedKStream[K, V] {
	s.final = true
	return s
}

// FoldKeptRecords makes the aggregation compute a new window's aggregate
// from the window's records, kept for MaxDiff plus grace in a second
// window store, "<store>-records" (logged and persistent as the
// aggregation's store is, instead of "<store>-times"), keyed by record
// time: a new window folds the records it holds in time order (records
// with equal times in arrival order), and an existing window folds a
// record in when it arrives. A window's aggregate then holds exactly the
// records that fall into it and arrived while it was open, whatever their
// order, where Kafka Streams' derived aggregates may fold them in another
// order; the price is storing the values of the last MaxDiff plus grace
// (Count stores no values, only how many records share a time), and
// results emitted in another order than Kafka Streams'.
func (s SlidingWindowedKStream[K, V]) FoldKeptRecords() SlidingWindowedKStream[K, V] {
	s.fold = true
	return s
}

func (s SlidingWindowedKStream[K, V]) grouping() *grouping[K, V] {
	if s.g == nil {
		panic("topology: use of a zero SlidingWindowedKStream; create one with SlidingWindowedBy")
	}
	return s.g
}

// Count counts the records of each key in each sliding window into the
// window store named store (values encoded with serde.Int64). The result
// is a table keyed by Windowed[K], encoded by TimeWindowedSerde over the
// grouping's key serde with window size MaxDiff (windows are [Start,
// Start+MaxDiff], both ends included). Named, InMemory and WithoutLogging
// apply, to both stores.
func (s SlidingWindowedKStream[K, V]) Count(store string, opts ...Option) KTable[Windowed[K], int64] {
	return slidingAggregate(s, "sliding-count", store, serde.Int64, nil, collect(opts), "", countInitial,
		func(_ K, _ V, n int64, _ bool) int64 { return n + 1 })
}

// Reduce combines the values of each key in each sliding window with fn,
// starting from the window's earliest value (see Count for the stores and
// result). The grouping's value serde encodes the kept records.
func (s SlidingWindowedKStream[K, V]) Reduce(fn func(agg, v V) V, store string, opts ...Option) KTable[Windowed[K], V] {
	gr := s.grouping()
	var missing string
	if fn == nil {
		missing = "reducer"
	}
	return slidingAggregate(s, "sliding-reduce", store, gr.valueSerde, gr.valueSerde, collect(opts), missing, nil, reduceStep[K](fn))
}

// SlidingAggregate folds the values of each key in each sliding window into
// an aggregate: init gives a window's starting aggregate and adder folds
// in one value. Aggregates are encoded with aggSerde (see Count and Reduce
// for the stores and result).
func SlidingAggregate[K, V, A any](s SlidingWindowedKStream[K, V], init func() A, adder func(K, V, A) A, store string, aggSerde serde.Serde[A], opts ...Option) KTable[Windowed[K], A] {
	var missing string
	switch {
	case init == nil:
		missing = "initializer"
	case adder == nil:
		missing = "adder"
	}
	return slidingAggregate(s, "sliding-aggregate", store, aggSerde, s.grouping().valueSerde, collect(opts), missing, initialOf(init), aggregateStep(init, adder))
}

// RecordStoreName is the name of the store in which a sliding-window
// aggregation into store keeps the records of its open windows.
func RecordStoreName(store string) string { return store + "-records" }

// slidingAggregate builds the processor. valueSerde encodes the kept
// records; nil keeps only their number (the step ignores values).
// initial, nil for a Reduce, is a window's initial aggregate
// (slidingResults.initial).
func slidingAggregate[K, V, A any](s SlidingWindowedKStream[K, V], op, store string, aggSerde serde.Serde[A], valueSerde serde.Serde[V], o options, missingFunc string, initial func() (A, bool), step func(K, V, A, bool) A) KTable[Windowed[K], A] {
	g := s.grouping()
	b := g.b
	in := g.input(store)
	w := s.w
	final := s.final
	var n *node
	if s.fold {
		n = foldSlidingNode(s, op, store, aggSerde, valueSerde, o, initial, step, in)
	} else {
		n = derivedSlidingNode(b, op, store, w, final, g.keySerde, aggSerde, o, initial, step, nil, in)
	}
	if final {
		declarePending(b, n, store, o)
	}
	if aggSerde == nil {
		b.errorf("%s: store %q: value serde is nil", n.label(), store)
	}
	if s.fold && op != "sliding-count" && valueSerde == nil {
		b.errorf("%s: store %q: the grouping's value serde is nil", n.label(), RecordStoreName(store))
	}
	if missingFunc != "" {
		b.errorf("%s: %s is nil", n.label(), missingFunc)
	}
	return KTable[Windowed[K], A]{b: b, n: n, store: store, keySerde: TimeWindowedSerde(g.keySerde, w.diff), valueSerde: aggSerde, windows: &windowClose{grace: w.grace}}
}

// derivedSlidingNode adds the processor of an aggregation computing its
// windows as Kafka Streams does, reading parents, and declares its stores.
// inputOf, given with several parents, tells which parent a value came
// from: each parent has a stream time of its own (inputClocks).
func derivedSlidingNode[K, V, A any](b *Builder, op, store string, w SlidingWindows, final bool, keySerde serde.Serde[K], aggSerde serde.Serde[A], o options, initial func() (A, bool), step func(K, V, A, bool) A, inputOf func(V) int, parents ...*node) *node {
	// One past Kafka Streams' retention: the window a record closes
	// must still be there to emit with EmitFinal, while lookups keep
	// to Kafka Streams' (derivedSlidingProc.neighbours).
	info := StoreInfo{
		Name: store, Persistent: !o.inMemory, Logged: !o.unlogged,
		Kind: graph.Window, Retention: addSat(w.derivedRetention(), 1), WindowSize: w.diff,
	}
	timesInfo := info
	timesInfo.Name = TimesStoreName(store)
	wopts := info.WindowOptions()
	n := b.addProcessor(op, o, func() procImpl {
		return &derivedSlidingProc[K, V, A]{
			slidingResults: slidingResults[K, A]{store: store, w: w, final: final, keySerde: keySerde, aggSerde: aggSerde, initial: initial, clock: newInputClocks(len(parents))},
			wopts:          wopts,
			step:           step,
			inputOf:        inputOf,
		}
	}, parents...)
	n.stores = []string{store, timesInfo.Name}
	n.olds = ownOldValues
	b.declareStore(info, n.label())
	b.declareStore(timesInfo, n.label())
	return n
}

// foldSlidingNode adds the processor of an aggregation with
// FoldKeptRecords and declares its stores.
func foldSlidingNode[K, V, A any](s SlidingWindowedKStream[K, V], op, store string, aggSerde serde.Serde[A], valueSerde serde.Serde[V], o options, initial func() (A, bool), step func(K, V, A, bool) A, in *node) *node {
	g, w := s.grouping(), s.w
	b := g.b
	// The store's observed time is the latest window start written, which
	// for a right window is one past stream time.
	info := StoreInfo{
		Name: store, Persistent: !o.inMemory, Logged: !o.unlogged,
		Kind: graph.Window, Retention: addSat(w.MinRetention(), 1), WindowSize: w.diff,
	}
	// Records are needed while a window holding them may still be created:
	// a window starting after stream time minus MaxDiff plus grace.
	recInfo := StoreInfo{
		Name: RecordStoreName(store), Persistent: !o.inMemory, Logged: !o.unlogged,
		Kind: graph.Window, Retention: addSat(w.MinRetention(), 1),
	}
	wopts, ropts := info.WindowOptions(), recInfo.WindowOptions()
	final := s.final
	n := b.addProcessor(op, o, func() procImpl {
		return &slidingAggProc[K, V, A]{
			slidingResults: slidingResults[K, A]{store: store, w: w, final: final, keySerde: g.keySerde, aggSerde: aggSerde, initial: initial},
			wopts:          wopts,
			ropts:          ropts,
			valueSerde:     valueSerde,
			step:           step,
		}
	}, in)
	n.stores = []string{store, recInfo.Name}
	n.olds = ownOldValues
	b.declareStore(info, n.label())
	b.declareStore(recInfo, n.label())
	return n
}

// slidingAggProc aggregates records into sliding windows by folding kept
// records (FoldKeptRecords).
type slidingAggProc[K, V, A any] struct {
	slidingResults[K, A]
	wopts, ropts statestore.WindowOptions
	valueSerde   serde.Serde[V] // nil: records are kept as a count
	step         func(K, V, A, bool) A

	rs *statestore.WindowStore // kept records by record time
}

// slidingResults is what both sliding-window processors
// (derivedSlidingProc, slidingAggProc) keep of a window's result: its
// aggregate in the store by window start, and its way out, an update now
// or, with EmitFinal, a pending window emitted when it closes.
type slidingResults[K, A any] struct {
	store    string
	w        SlidingWindows
	final    bool
	keySerde serde.Serde[K]
	aggSerde serde.Serde[A]
	// initial is the aggregate Kafka Streams starts a window from when
	// it derives it from no neighbour (its initializer's; none for a
	// Reduce, nil), which the window's first update carries as its old
	// value without the record cache (initialOld).
	initial func() (A, bool)

	ws      *statestore.WindowStore // aggregates by window start
	updates tableUpdates
	clock   inputClocks
	log     lateLog
	// sendOld and fullOld are the node's (see node.fullOld), sendOld
	// false with EmitFinal, whose results carry a null old value
	// (emitFinal) and whose updates read none.
	sendOld, fullOld bool
}

// putAggregate stores win's aggregate for key kb.
func (p *slidingResults[K, A]) putAggregate(kb []byte, win Window, agg A) error {
	vb, err := encodeStoreValue(p.aggSerde, agg)
	if err != nil {
		return err
	}
	return p.ws.Put(kb, win.Start, bytes.Clone(vb))
}

// result emits win's aggregate for k (kb encoded), stamped with maxTs, the
// window's latest record time, with the old value old (nil when the node
// sends none), or records the window as pending its final result.
func (p *slidingResults[K, A]) result(c *nodeInstance, k K, kb []byte, win Window, agg A, maxTs int64, headers []Header, old *prior) error {
	if !p.final {
		id := binary.BigEndian.AppendUint64(bytes.Clone(kb), uint64(win.Start))
		return p.updates.emit(c, id, record{key: Windowed[K]{Key: k, Window: win}, value: agg, ts: time.UnixMilli(maxTs), headers: headers, old: old})
	}
	return p.clock.pending.add(p.w.CloseTime(win), win.Start, kb, maxTs)
}

// emit forwards the final result of a closed window.
func (p *slidingResults[K, A]) emit(c *nodeInstance, d pendingWindow) error {
	vb, found, err := p.ws.Get(d.kb, d.start)
	if err != nil || !found {
		return err
	}
	return emitFinal(c, p.store, p.keySerde, p.aggSerde, d, Window{Start: d.start, End: addSat(d.start, p.w.diff)}, vb)
}

func (p *slidingResults[K, A]) flush(c *nodeInstance) error { return p.updates.flush(c) }

func (p *slidingResults[K, A]) committed() { p.clock.committed() }

func (p *slidingResults[K, A]) close() error { return nil }

func (p *slidingAggProc[K, V, A]) init(c *nodeInstance) error {
	var err error
	if p.ws, err = openWindowStore(c, p.store, p.wopts); err != nil {
		return err
	}
	if p.rs, err = openWindowStore(c, RecordStoreName(p.store), p.ropts); err != nil {
		return err
	}
	p.openOlds(c)
	p.log.node = c.node.name
	return p.clock.open(c, p.store, p.final, p.ws.ObservedTime)
}

// keptRecords are a key's kept records at one time, in arrival order.
type keptRecords[V any] struct {
	ts     int64
	values []V
}

func (p *slidingAggProc[K, V, A]) process(c *nodeInstance, r record) error {
	if r.keyNull || r.valueNull {
		return nil
	}
	t, st, err := p.clock.advance(c, r, p.emit)
	if err != nil {
		return err
	}
	if p.w.IsLate(t, st) {
		c.task.droppedLate++
		p.log.dropped(c.task, t, st)
		return nil
	}
	k := as[K](r.key)
	kb, err := p.keySerde.Encode(k)
	if err != nil {
		return fmt.Errorf("encode key for store %q: %w", p.store, err)
	}
	v := as[V](r.value)
	if err := p.keep(kb, t, v); err != nil {
		return err
	}
	d := p.w.diff
	// The records that can lie in a window this record updates or
	// creates: from its left window's start to its right window's end.
	recs, err := p.kept(kb, max(0, t-d), addSat(t, 1+d))
	if err != nil {
		return err
	}
	existing, err := p.existing(kb, max(0, t-d), t+1)
	if err != nil {
		return err
	}
	// Every existing window starting at or before t ends at or after it.
	for _, start := range slices.Sorted(maps.Keys(existing)) {
		old := existing[start]
		win := Window{Start: start, End: addSat(start, d)}
		if start > t || p.w.IsClosed(win, st) {
			continue
		}
		cur, err := p.aggSerde.Decode(old)
		if err != nil {
			return fmt.Errorf("decode aggregate in store %q: %w", p.store, err)
		}
		prev, err := p.storedOld(old)
		if err != nil {
			return err
		}
		if err := p.put(c, k, kb, win, p.step(k, v, cur, true), latest(recs, win, t), r, prev); err != nil {
			return err
		}
	}
	create := []Window{p.w.LeftWindow(t)}
	var pred, succ bool
	var q int64
	for _, kr := range recs {
		if kr.ts < t {
			pred, q = true, kr.ts
		}
		if kr.ts > t && kr.ts-t <= d {
			succ = true
		}
	}
	if succ {
		create = append(create, p.w.RightWindow(t))
	}
	if pred {
		create = append(create, p.w.RightWindow(q))
	}
	slices.SortFunc(create, func(a, b Window) int { return cmpInt64(a.Start, b.Start) })
	for _, win := range create {
		if _, ok := existing[win.Start]; ok || p.w.IsClosed(win, st) {
			continue
		}
		agg, _ := p.fold(k, recs, win, false, t)
		if err := p.put(c, k, kb, win, agg, latest(recs, win, math.MinInt64), r, p.createdOld(c, k, recs, win, t)); err != nil {
			return err
		}
	}
	return nil
}

// fold folds the kept records in win in time order; without leaves out
// the record being processed, the last one kept at t. have is false when
// no record was folded.
func (p *slidingAggProc[K, V, A]) fold(k K, recs []keptRecords[V], win Window, without bool, t int64) (agg A, have bool) {
	for _, kr := range recs {
		if !p.w.Contains(win, kr.ts) {
			continue
		}
		values := kr.values
		if without && kr.ts == t {
			values = values[:len(values)-1]
		}
		for _, kv := range values {
			agg, have = p.step(k, kv, agg, have), true
		}
	}
	return agg, have
}

// createdOld is the old value of a window created by the record at t:
// the window without the record, as Kafka Streams derives a new window
// from the aggregate before the record (a neighbour's, or the initial
// one when it holds no other record), and null for a window not holding
// it (the record's right window), which Kafka Streams sends with none.
func (p *slidingAggProc[K, V, A]) createdOld(c *nodeInstance, k K, recs []keptRecords[V], win Window, t int64) *prior {
	if !p.sendOld || c.holds() || !p.w.Contains(win, t) {
		return p.newOld()
	}
	agg, have := p.fold(k, recs, win, true, t)
	if !have {
		return p.initialOld(c)
	}
	return &prior{value: agg}
}

// latest is the latest time of the kept records in win, or at least
// floor: the timestamp of win's result, as Kafka Streams stamps it.
func latest[V any](recs []keptRecords[V], win Window, floor int64) int64 {
	ts := floor
	for _, kr := range recs {
		if win.Start <= kr.ts && kr.ts <= win.End {
			ts = max(ts, kr.ts)
		}
	}
	return ts
}

// put stores win's aggregate and emits it, stamped with maxTs, the
// window's latest record time, or records the window as pending its final
// result.
func (p *slidingAggProc[K, V, A]) put(c *nodeInstance, k K, kb []byte, win Window, agg A, maxTs int64, r record, old *prior) error {
	if err := p.putAggregate(kb, win, agg); err != nil {
		return err
	}
	return p.result(c, k, kb, win, agg, maxTs, r.headers, old)
}

// existing reads k's windows starting in [from, to], raw aggregates by
// start.
func (p *slidingAggProc[K, V, A]) existing(kb []byte, from, to int64) (map[int64][]byte, error) {
	it, err := p.ws.Fetch(kb, from, to)
	if err != nil {
		return nil, err
	}
	out := make(map[int64][]byte)
	for it.Next() {
		out[it.Start()] = bytes.Clone(it.Value())
	}
	err = it.Err()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	return out, err
}

// The record store holds, for a key and a time, the records at that time
// in arrival order, each as its encoded value's length (uvarint) and the
// value. Without a value serde (Count) a record is an empty value.

// keep appends v to k's records at t.
func (p *slidingAggProc[K, V, A]) keep(kb []byte, t int64, v V) error {
	var vb []byte
	if p.valueSerde != nil {
		var err error
		if vb, err = p.valueSerde.Encode(v); err != nil {
			return fmt.Errorf("encode value for store %q: %w", RecordStoreName(p.store), err)
		}
	}
	old, _, err := p.rs.Get(kb, t)
	if err != nil {
		return err
	}
	buf := binary.AppendUvarint(bytes.Clone(old), uint64(len(vb)))
	return p.rs.Put(kb, t, append(buf, vb...))
}

// kept reads k's records at times in [from, to], by time.
func (p *slidingAggProc[K, V, A]) kept(kb []byte, from, to int64) ([]keptRecords[V], error) {
	it, err := p.rs.Fetch(kb, from, to)
	if err != nil {
		return nil, err
	}
	var out []keptRecords[V]
	for it.Next() {
		kr := keptRecords[V]{ts: it.Start()}
		for b := it.Value(); len(b) > 0; {
			n, w := binary.Uvarint(b)
			if w <= 0 || uint64(len(b)-w) < n {
				err = fmt.Errorf("corrupt entry in store %q", RecordStoreName(p.store))
				break
			}
			var v V
			if p.valueSerde != nil {
				if v, err = p.valueSerde.Decode(bytes.Clone(b[w : w+int(n)])); err != nil {
					err = fmt.Errorf("decode value in store %q: %w", RecordStoreName(p.store), err)
					break
				}
			}
			kr.values = append(kr.values, v)
			b = b[w+int(n):]
		}
		if err != nil {
			break
		}
		out = append(out, kr)
	}
	if err == nil {
		err = it.Err()
	}
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	return out, err
}

func (p *slidingAggProc[K, V, A]) rewind() {
	p.clock.rewind()
	p.ws.Rewind()
	p.rs.Rewind()
}

package topology

import (
	"bytes"
	"time"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

// KGroupedStream is a stream grouped by key, ready to be aggregated. Records
// with a null key or value are dropped by every aggregation (as Kafka
// Streams does): they cannot be assigned to a group or added to it.
type KGroupedStream[K, V any] struct {
	g *grouping[K, V]
}

// grouping is shared by copies of a KGroupedStream so that several
// aggregations of one grouping share one repartition topic.
type grouping[K, V any] struct {
	b          *Builder
	parent     *node
	keySerde   serde.Serde[K]
	valueSerde serde.Serde[V]
	// repartition is set when records must be re-keyed through a topic
	// before they can be aggregated.
	repartition bool
	name        string
	partitions  int32
	// source reads the repartition topic once it has been created.
	source *node
	// merging is the grouping's only aggregation while it reads partial
	// aggregates (see combine.go).
	merging *merging
}

// GroupByKey groups s by its current key. If an upstream operator may have
// changed the key (Map, SelectKey, FlatMap, Process), records are first
// written through a repartition topic named "<app>-<store>-repartition"
// after the store of the first aggregation, so that every key is aggregated
// by one task. The serdes encode the records in that topic; they are also
// the key serde of the aggregation's store and, for Reduce, its value serde.
// NumPartitions applies.
func (s KStream[K, V]) GroupByKey(keySerde serde.Serde[K], valueSerde serde.Serde[V], opts ...Option) KGroupedStream[K, V] {
	b := s.builder()
	o := collect(opts)
	if keySerde == nil || valueSerde == nil {
		b.errorf("GroupByKey after %s: key and value serdes must not be nil", s.n.label())
	}
	return KGroupedStream[K, V]{g: &grouping[K, V]{
		b: b, parent: s.n, keySerde: keySerde, valueSerde: valueSerde,
		repartition: s.keyChanged, partitions: o.partitions,
	}}
}

// GroupBy groups s by the key selector returns. The re-keyed records are
// written to the repartition topic "<app>-<name>-repartition" and read back
// by a new sub-topology, so each key is aggregated by exactly one task. An
// empty name uses the store name of the first aggregation instead. The
// serdes encode the repartition topic, as for GroupByKey. Named names the
// key-selecting node; NumPartitions applies.
func GroupBy[K, V, K2 any](s KStream[K, V], selector func(K, V) K2, name string, keySerde serde.Serde[K2], valueSerde serde.Serde[V], opts ...Option) KGroupedStream[K2, V] {
	b := s.builder()
	o := collect(opts)
	sel := selectKey(s, "groupby", selector, o)
	if name != "" {
		b.checkName("GroupBy", name)
	}
	if keySerde == nil || valueSerde == nil {
		b.errorf("GroupBy %q after %s: key and value serdes must not be nil", name, s.n.label())
	}
	return KGroupedStream[K2, V]{g: &grouping[K2, V]{
		b: b, parent: sel.n, keySerde: keySerde, valueSerde: valueSerde,
		repartition: true, name: name, partitions: o.partitions,
	}}
}

// topic is the repartition topic of the grouping, named after the
// grouping or, unnamed, after the store of its first aggregation.
func (g *grouping[K, V]) topic(store string) TopicRef {
	name := g.name
	if name == "" {
		name = store
	}
	return TopicRef{Name: name + "-repartition", Internal: true}
}

// input returns the node an aggregation reads from, creating the
// repartition sink and source the first time it is needed. A mergeable
// aggregation already reading the topic is made to read raw records only,
// as the records now go to two aggregations.
func (g *grouping[K, V]) input(store string) *node {
	if !g.repartition {
		return g.parent
	}
	if g.merging != nil {
		g.merging.undo()
		g.merging = nil
	}
	if g.source == nil {
		topic := g.topic(store)
		sink := addSink(g.b, g.parent, topic, g.keySerde, g.valueSerde, options{name: topic.Name + "-sink", derived: true})
		sink.partitions = g.partitions
		if g.partitions < 0 {
			g.b.errorf("%s: partition count %d is negative", sink.label(), g.partitions)
		}
		g.source = addSource(g.b, topic, g.keySerde, g.valueSerde, options{name: topic.Name + "-source", derived: true})
		g.source.decode = refusePartials(topic.Name, g.source.decode)
		if kd := keyOnlyDecode(g.keySerde, g.valueSerde); kd != nil {
			g.source.keyOnlyDecode = refusePartials(topic.Name, kd)
		}
	}
	return g.source
}

func (g KGroupedStream[K, V]) grouping() *grouping[K, V] {
	if g.g == nil {
		panic("topology: use of a zero KGroupedStream; create one with GroupByKey or GroupBy")
	}
	return g.g
}

// Count counts the records of each key into the store named store
// (persistent and logged unless InMemory or WithoutLogging is given; values
// are encoded with serde.Int64). Named names the node. After GroupBy, or
// GroupByKey of a re-keyed stream, every record crosses the repartition
// topic, as in Kafka Streams, unless WithCombining is given.
func (g KGroupedStream[K, V]) Count(store string, opts ...Option) KTable[K, int64] {
	return aggregate(g.grouping(), "count", store, serde.Int64, collect(opts), "", countInitial,
		countStep[K, V],
		func(_ K, n, partial int64) int64 { return n + partial })
}

// countInitial is the initial value of a count, a key's or a window's:
// the old value Kafka Streams sends with its first update, as its counts
// are aggregations starting from 0.
func countInitial() (int64, bool) { return 0, true }

// countStep is Count's step. It reads neither key nor value, which lets a
// plain count read its repartition topic without decoding either
// (keyOnlyDecode; aggregate knows a count by its op).
func countStep[K, V any](_ K, _ V, n int64, _ bool) int64 { return n + 1 }

// Reduce combines the values of each key with fn, starting from the key's
// first value, into the store named store (persistent and logged unless
// InMemory or WithoutLogging is given; values encoded with the grouping's
// value serde). Named names the node. After GroupBy, or GroupByKey of a
// re-keyed stream, every record crosses the repartition topic, as in Kafka
// Streams, unless WithCombining is given: fn must then be associative,
// fn(fn(a, b), c) == fn(a, fn(b, c)), as sums, minimums, maximums and
// "keep the latest" are.
func (g KGroupedStream[K, V]) Reduce(fn func(agg, v V) V, store string, opts ...Option) KTable[K, V] {
	gr := g.grouping()
	var missing string
	var merge func(K, V, V) V
	if fn == nil {
		missing = "reducer"
	} else {
		merge = func(_ K, agg, partial V) V { return fn(agg, partial) }
	}
	return aggregate(gr, "reduce", store, gr.valueSerde, collect(opts), missing, nil, reduceStep[K](fn), merge)
}

// Aggregate folds the values of each key into an aggregate: init gives a
// key's starting aggregate and adder folds in one value. Aggregates live in
// the store named store (persistent and logged unless InMemory or
// WithoutLogging is given), encoded with aggSerde. Named names the node.
// Given WithMerger and WithCombining, after GroupBy or GroupByKey of a
// re-keyed stream, it combines before the repartition.
func Aggregate[K, V, A any](g KGroupedStream[K, V], init func() A, adder func(K, V, A) A, store string, aggSerde serde.Serde[A], opts ...Option) KTable[K, A] {
	o := collect(opts)
	var missing string
	switch {
	case init == nil:
		missing = "initializer"
	case adder == nil:
		missing = "adder"
	}
	merge, ok := o.merger.(func(K, A, A) A)
	if o.merger != nil && (!ok || merge == nil) {
		g.grouping().b.errorf("Aggregate into store %q: merger is %T, want a non-nil func(%T, %T, %T) %T", store, o.merger, zero[K](), zero[A](), zero[A](), zero[A]())
	}
	return aggregate(g.grouping(), "aggregate", store, aggSerde, o, missing, initialOf(init), aggregateStep(init, adder), merge)
}

// aggregate adds a node that applies step to each record and its key's
// current aggregate (found is false for a new key) and forwards the result.
// initial, nil for a Reduce, gives the old value sent with a key's first
// update (see aggProc.initial). With merge, which merges two aggregates,
// the first aggregation of a re-keyed stream's grouping also reads partial
// aggregates from its repartition topic, and combines before it given
// WithCombining (combine.go).
func aggregate[K, V, A any](g *grouping[K, V], op, store string, aggSerde serde.Serde[A], o options, missingFunc string, initial func() (A, bool), step func(K, V, A, bool) A, merge func(K, A, A) A) KTable[K, A] {
	b := g.b
	// Records read back from the repartition topic carry their key encoded
	// with g.keySerde, the store's key serde.
	srcKey := g.repartition
	// A count with a string key takes records whose key its repartition
	// source left undecoded (see keyOnlyDecode): its step needs neither key
	// nor value, and the key of a table update is made from the record
	// cache's copy only for the first update of the key in a commit.
	keyOnly := srcKey && op == "count" && isStringSerde(g.keySerde)
	newProc := func(merge func(K, A, A) A) func() procImpl {
		return func() procImpl {
			return &aggProc[K, V, A]{store: store, keySerde: g.keySerde, aggSerde: aggSerde, initial: initial, step: step, merge: merge, srcKey: srcKey, keyOnly: keyOnly}
		}
	}
	// shared: another aggregation of the grouping already reads the
	// topic, which must then carry raw records for both.
	shared := g.repartition && g.source != nil
	var n *node
	if merge != nil && !o.versioned && g.repartition && !shared && missingFunc == "" && aggSerde != nil {
		in := mergingInput(g, store, aggSerde, o.combine, step)
		n = b.addProcessor(op, o, newProc(merge), in)
		g.merging.agg = n
		plain := newProc(nil)
		g.merging.rawNewProc = func() (procImpl, error) { return plain(), nil }
	} else {
		n = b.addProcessor(op, o, newProc(nil), g.input(store))
	}
	n.keyOnly = keyOnly
	if o.combine && g.repartition {
		switch {
		case merge == nil && missingFunc == "":
			b.errorf("%s: WithCombining needs WithMerger", n.label())
		case o.versioned:
			b.errorf("%s: WithCombining does not apply to a versioned result", n.label())
		case shared:
			b.errorf("%s: WithCombining: the grouping is aggregated more than once, and its aggregations share one repartition topic of raw records", n.label())
		}
	}
	n.stores = []string{store}
	n.olds = ownOldValues
	b.declareResultStore(n, store, o)
	if aggSerde == nil {
		b.errorf("%s: store %q: value serde is nil", n.label(), store)
	}
	if missingFunc != "" {
		b.errorf("%s: %s is nil", n.label(), missingFunc)
	}
	return versionedResult(KTable[K, A]{b: b, n: n, store: store, keySerde: g.keySerde, valueSerde: aggSerde}, o)
}

type aggProc[K, V, A any] struct {
	store    string
	keySerde serde.Serde[K]
	aggSerde serde.Serde[A]
	step     func(K, V, A, bool) A
	// merge, set on a mergeable aggregation whose source accepts partial
	// aggregates, merges a partial into the key's aggregate.
	merge func(K, A, A) A
	// initial is the old value a key's first update carries without the
	// record cache, the aggregate Kafka Streams' KStreamAggregate starts
	// the key from (its initializer's; none for a Reduce, nil, as
	// KStreamReduce starts from the first value). Under the cache the old
	// value is the store's, as Kafka Streams' caching store reads it from
	// its underlying store: none for a new key.
	initial func() (A, bool)
	// srcKey: the aggregation reads its repartition topic's source
	// directly, so a record's srcKey is its store key.
	srcKey bool
	// keyOnly: K is string and the step reads neither key nor value, so
	// the aggregation accepts records whose key and value its source did
	// not decode (a nil key that is not null; see keyOnlyDecode).
	keyOnly bool
	kv      *KeyValueStore[K, A]
	updates tableUpdates

	// With a store that can update a key in place (the runtime's record
	// cache), each record is one Update with updateFn, a method value made
	// once; key, value, partial and ts carry its input (value a V, or an
	// A when partial: see fold), next and nextTs its result
	// (the aggregate and the latest time of its records, as Kafka Streams
	// stamps an aggregate), and decodeCopies says whether aggSerde's
	// decode copies its input, so that the store's bytes need no defensive
	// copy.
	up           statestore.SlotUpdater // the record cache: see tableUpdates.emitAt
	values       *valueBuf[A]           // with up: updates.values
	updateFn     func(old []byte, found bool) ([]byte, error)
	key          K
	value        any
	partial      bool
	ts           int64
	next         A
	nextTs       int64
	prev         A
	prevFound    bool
	decodeCopies bool
}

func (p *aggProc[K, V, A]) init(c *nodeInstance) error {
	rw, err := c.store(p.store)
	if err != nil {
		return err
	}
	p.kv = newTableStore(rw, p.keySerde, p.aggSerde, c.timestamped(p.store))
	if up, ok := rw.(statestore.SlotUpdater); ok {
		p.up, p.updateFn = up, p.update
		p.decodeCopies, _ = serdeCopies(p.aggSerde)
		p.values = new(valueBuf[A])
		p.updates.values = p.values
	}
	return nil
}

// serdeCopies reports, for the serdes of package serde whose behaviour is
// known, whether Decode copies its input and whether Encode returns new
// bytes. For any other serde both are false.
func serdeCopies[T any](s serde.Serde[T]) (decodeCopies, encodeFresh bool) {
	switch v := any(s).(type) {
	case serde.Serde[int64]:
		return v == serde.Int64, v == serde.Int64
	case serde.Serde[string]:
		return v == serde.String, v == serde.String
	case serde.Serde[[]byte]:
		return v == serde.Bytes, false // Encode returns its argument
	}
	return false, false
}

// update is updateFn: one aggregation step on the key's stored bytes. A
// value stored before aggregates kept their time has none
// (statestore.NoTimestamp), so its next result takes the record's time.
func (p *aggProc[K, V, A]) update(old []byte, found bool) ([]byte, error) {
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
		if cur, err = p.kv.decodeValue(old); err != nil {
			return nil, err
		}
	}
	p.next = p.fold(p.key, p.value, p.partial, cur, found)
	p.prev, p.prevFound = cur, found
	return encodeTimestamped(p.aggSerde, p.next, p.nextTs, p.kv.timestamped)
}

func (p *aggProc[K, V, A]) process(c *nodeInstance, r record) error {
	if r.keyNull || r.valueNull {
		return nil
	}
	// An undecoded key (keyOnly): the step ignores it, and the table
	// update gets it from the key's bytes when it goes out or is first
	// held.
	lazy := p.keyOnly && r.key == nil
	k := as[K](r.key)
	// Encoded at most once for both the read and the write: stores do not
	// modify the keys they are given.
	kb := r.srcKey
	if !p.srcKey || kb == nil {
		var err error
		if kb, err = p.kv.encodeKey(k); err != nil {
			return err
		}
	}
	if p.up == nil {
		if lazy {
			r.key = string(kb)
		}
		cur, ts, found, err := p.kv.getEncodedAt(kb)
		if err != nil {
			return err
		}
		next := p.fold(k, r.value, r.partial, cur, found)
		ts = max(ts, r.ts.UnixMilli())
		if err := p.kv.putEncodedAt(kb, next, ts); err != nil {
			return err
		}
		out := p.output(c, r, cur, found)
		out.value, out.ts = next, stamp(r.ts, ts)
		return p.updates.emit(c, kb, out)
	}
	p.key, p.value, p.partial, p.ts = k, r.value, r.partial, r.ts.UnixMilli()
	slot, stored, err := p.up.UpdateAt(kb, p.updateFn)
	next, prev, prevFound := p.next, p.prev, p.prevFound
	p.key, p.value, p.next, p.prev = zero[K](), nil, zero[A](), zero[A]()
	if err != nil {
		return err
	}
	out := p.output(c, r, prev, prevFound)
	out.ts = stamp(r.ts, p.nextTs)
	if !c.holds() {
		out.value = next
	}
	i, err := p.updates.emitAt(c, slot, stored, lazy, out)
	if i >= 0 {
		p.values.set(i, next)
	}
	return err
}

// fold applies one record to the key's aggregate cur: a partial aggregate
// is merged into it, or becomes it for a new key; a raw value is folded in
// with the step.
func (p *aggProc[K, V, A]) fold(k K, v any, partial bool, cur A, found bool) A {
	if !partial {
		return p.step(k, as[V](v), cur, found)
	}
	if !found {
		return as[A](v)
	}
	return p.merge(k, cur, as[A](v))
}

// output is the table update for r, but for its value, the key's new
// aggregate: with its previous one when the node sends old values.
func (p *aggProc[K, V, A]) output(c *nodeInstance, r record, prev A, prevFound bool) record {
	out := record{key: r.key, ts: r.ts, headers: r.headers}
	if c.node.sendOld {
		out.old = &prior{value: prev, null: !prevFound}
		if !prevFound && p.initial != nil && !c.holds() {
			v, ok := p.initial()
			out.old = &prior{value: v, null: !ok}
		}
	}
	return out
}

func (p *aggProc[K, V, A]) flush(c *nodeInstance) error { return p.updates.flush(c) }

func (p *aggProc[K, V, A]) close() error { return nil }

// KTable is a changelog stream viewed as a table: the latest value of each
// key, materialized in a named store. Under the runtime, with its record
// cache on (the default), a table forwards the latest value of each updated
// key at every commit, so repeated updates of one key between commits reach
// downstream once; with the cache off (and in topologytest) every update is
// forwarded as soon as it is applied, as is every update of a versioned
// table (see Versioned).
type KTable[K, V any] struct {
	b          *Builder
	n          *node
	store      string
	keySerde   serde.Serde[K]
	valueSerde serde.Serde[V]
	// lookup, for a derived table without a store of its own, reads its
	// values from lookupStores, the stores of the table it derives from
	// (see view); nil for a materialized table.
	lookup       tableLookup[K, V]
	lookupStores []string
	// windows is set on a windowed table: what UntilWindowCloses needs.
	windows *windowClose
	// versioned is set on a table read with Versioned, whose store keeps
	// history milliseconds of history. asOf reads values as of a time: set
	// on such a table, and on a table derived from it without a store of
	// its own (which keeps its history too).
	versioned bool
	history   int64
	asOf      asOfLookup[K, V]
}

// Table reads topic into the store named store (persistent and logged
// unless InMemory or WithoutLogging is given) using keySerde and valueSerde
// for both the topic and the store. A record with a null value deletes its
// key and is forwarded downstream as a null (a tombstone); a record with a
// null key is dropped. Named names the table's processor node, and its
// source "<name>-source"; WithTimestampExtractor applies to the source.
func Table[K, V any](b *Builder, topic string, keySerde serde.Serde[K], valueSerde serde.Serde[V], store string, opts ...Option) KTable[K, V] {
	o := collect(opts)
	srcOpts := options{extractor: o.extractor}
	if o.name != "" {
		srcOpts.name, srcOpts.derived = o.name+"-source", true
	}
	src := addSource(b, TopicRef{Name: topic}, keySerde, valueSerde, srcOpts)
	n := b.addProcessor("table", o, func() procImpl {
		return &tableProc[K, V]{store: store, keySerde: keySerde, valueSerde: valueSerde, versioned: o.versioned, history: o.history,
			layout: layoutCheck{store: store, versioned: o.versioned}}
	}, src)
	n.stores = []string{store}
	n.olds = ownOldValues
	var info StoreInfo
	if o.versioned {
		info = b.versionedStoreInfo(store, o)
	} else {
		info = b.tableStoreInfo(store, o)
	}
	b.declareStore(info, n.label())
	out := KTable[K, V]{b: b, n: n, store: store, keySerde: keySerde, valueSerde: valueSerde, versioned: o.versioned, history: info.Retention}
	if o.versioned {
		out.asOf = out.valuesAsOf
	}
	return out
}

type tableProc[K, V any] struct {
	store      string
	keySerde   serde.Serde[K]
	valueSerde serde.Serde[V]
	kv         *KeyValueStore[K, V]
	updates    tableUpdates
	// versions is the store of a versioned table, which kv is not.
	versioned bool
	history   int64
	versions  *statestore.VersionedStore
	layout    layoutCheck
}

func (p *tableProc[K, V]) init(c *nodeInstance) error {
	rw, err := c.store(p.store)
	if err != nil {
		return err
	}
	p.kv = newTableStore(rw, p.keySerde, p.valueSerde, c.timestamped(p.store))
	p.updates.committed = readsCommitted(rw)
	if p.versioned {
		p.versions, err = statestore.NewVersionedStore(rw, statestore.VersionedOptions{HistoryRetention: p.history})
	}
	return err
}

func (p *tableProc[K, V]) process(c *nodeInstance, r record) error {
	if err := p.layout.check(p.kv.rw); err != nil {
		return err
	}
	if r.keyNull {
		return nil
	}
	k := as[K](r.key)
	kb, err := p.kv.encodeKey(k)
	if err != nil {
		return err
	}
	if p.versions != nil {
		return p.processVersioned(c, kb, r)
	}
	if c.node.sendOld && c.node.fullOld {
		r.old, err = p.kv.prior(kb)
	} else if c.node.sendOld {
		r.old, err = p.kv.priorPresence(kb)
	}
	if err != nil {
		return err
	}
	if skip, err := p.updates.unheldTombstone(c, p.kv.rw, kb, r); skip || err != nil {
		return err
	}
	if r.valueNull {
		err = p.kv.rw.Delete(kb)
	} else {
		err = p.kv.putEncodedAt(kb, as[V](r.value), r.ts.UnixMilli())
	}
	if err != nil {
		return err
	}
	return p.updates.emit(c, kb, r)
}

func (p *tableProc[K, V]) flush(c *nodeInstance) error { return p.updates.flush(c) }

func (p *tableProc[K, V]) close() error { return nil }

// ToStream returns the stream of the table's updates: one record per update,
// carrying the key and its new value (a null after a delete).
func (t KTable[K, V]) ToStream() KStream[K, V] {
	if t.b == nil {
		panic("topology: use of a zero KTable")
	}
	return KStream[K, V]{b: t.b, n: t.n}
}

// StoreName returns the name of the store the table is materialized in,
// or "" for a table derived without Materialized, which has none.
func (t KTable[K, V]) StoreName() string { return t.store }

// TypedStore wraps rw, the byte-level store named StoreName (as a task or
// interactive query opened it), with the table's serdes. Only a
// materialized table has a store, and that of a versioned table is read
// with GetVersionedStore instead.
func (t KTable[K, V]) TypedStore(rw statestore.ReadWriter) *KeyValueStore[K, V] {
	return newTableStore(rw, t.keySerde, t.valueSerde, true)
}

// stamp returns the time ts, in milliseconds, as a record timestamp: t
// itself when it is that time, so that a record's own time is passed on
// unchanged (monotonic reading and location included).
func stamp(t time.Time, ts int64) time.Time {
	if t.UnixMilli() == ts {
		return t
	}
	return time.UnixMilli(ts)
}

package topology

import (
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

// Materialized gives the table that Filter, FilterNot or MapTableValues
// derives a store of its own named store, so that it can be queried
// (persistent and logged unless InMemory or WithoutLogging is given). A
// derived table without it keeps no state: joins and later operators look
// its values up through the store of the nearest materialized table it
// derives from, applying the operators on the way. With Versioned the
// store keeps the table's versions.
func Materialized(store string) Option { return func(o *options) { o.store = store } }

// TableValueSerde gives the value serde of the store MapTableValues
// materializes its result in (with Materialized); V must be the new value
// type. Filter and FilterNot use the table's own value serde.
func TableValueSerde[V any](s serde.Serde[V]) Option {
	return func(o *options) { o.tableValueSerde = s }
}

// tableLookup reads one key of a table: made once per task from the
// stores the table's values are derived from (see KTable.view), which it
// opens with open, it returns the key's current value, its timestamp
// (statestore.NoTimestamp if the store holds none) and whether the table
// holds the key.
type tableLookup[K, V any] func(open func(store string) (statestore.ReadWriter, error)) (func(k K) (V, int64, bool, error), error)

// view returns the stores a table's values are read from and how to read
// them: its own store when it is materialized, else its parent's view with
// the table's operator applied (or, suppressed, its held updates' old
// values first).
func (t KTable[K, V]) view() ([]string, tableLookup[K, V]) {
	if t.lookup != nil {
		return t.lookupStores, t.lookup
	}
	if t.versioned {
		return []string{t.store}, t.latestValues
	}
	store, ks, vs := t.store, t.keySerde, t.valueSerde
	return []string{store}, func(open func(string) (statestore.ReadWriter, error)) (func(K) (V, int64, bool, error), error) {
		rw, err := open(store)
		if err != nil {
			return nil, err
		}
		return newTableStore(rw, ks, vs, true).getAt, nil
	}
}

// Filter returns the table of t's keys whose current value keep accepts.
// Every update of t is forwarded: unchanged when keep accepts the new
// value, else as a tombstone (as is a tombstone of t), so that a table or
// aggregation downstream deletes a key whose value stopped passing. keep
// is not called for tombstones. When an operator downstream needs old
// values (GroupTableBy, a join, Suppress), a tombstone for a key the
// result did not hold either is not forwarded, unless t is versioned or
// derives from a versioned table without a store, as in Kafka Streams. Named names the node; Materialized (with
// InMemory, WithoutLogging) gives the result a queryable store.
func (t KTable[K, V]) Filter(keep func(K, V) bool, opts ...Option) KTable[K, V] {
	return filterTable(t, "table-filter", keep, false, collect(opts))
}

// FilterNot is Filter with the predicate negated: keys whose value drop
// accepts are left out (forwarded as tombstones).
func (t KTable[K, V]) FilterNot(drop func(K, V) bool, opts ...Option) KTable[K, V] {
	return filterTable(t, "table-filternot", drop, true, collect(opts))
}

func filterTable[K, V any](t KTable[K, V], op string, pred func(K, V) bool, negate bool, o options) KTable[K, V] {
	var fn func(K, V) (V, bool)
	if pred != nil {
		fn = func(k K, v V) (V, bool) { return v, pred(k, v) != negate }
	}
	return deriveTable(t, op, fn, true, t.valueSerde, o)
}

// MapTableValues returns the table of t's keys with each value replaced by
// fn(key, value). Tombstones of t pass through as tombstones without
// calling fn. Named names the node; Materialized (with TableValueSerde,
// required then, and InMemory, WithoutLogging) gives the result a
// queryable store.
func MapTableValues[K, V, V2 any](t KTable[K, V], fn func(K, V) V2, opts ...Option) KTable[K, V2] {
	o := collect(opts)
	var f func(K, V) (V2, bool)
	if fn != nil {
		f = func(k K, v V) (V2, bool) { return fn(k, v), true }
	}
	var vs serde.Serde[V2]
	if o.tableValueSerde != nil {
		var ok bool
		if vs, ok = o.tableValueSerde.(serde.Serde[V2]); !ok {
			t.builder().errorf("MapTableValues after %s: TableValueSerde is %T, want a serde.Serde[%T]", t.n.label(), o.tableValueSerde, zero[V2]())
		}
	}
	return deriveTable(t, "table-mapvalues", f, false, vs, o)
}

func (t KTable[K, V]) builder() *Builder {
	if t.b == nil {
		panic("topology: use of a zero KTable")
	}
	return t.b
}

// deriveTable adds the node of a table whose value for each key is fn of
// t's value (absent when fn reports false or t has none), materialized in
// o.store when it is set; filters says fn is a filter's.
func deriveTable[K, V, V2 any](t KTable[K, V], op string, fn func(K, V) (V2, bool), filters bool, vs serde.Serde[V2], o options) KTable[K, V2] {
	b := t.builder()
	n := b.addNode(kindProcessor, op, o, t.n)
	n.olds = parentOldValues
	b.checkFunc(n, fn == nil, "function")
	out := KTable[K, V2]{b: b, n: n, store: o.store, keySerde: t.keySerde, valueSerde: vs, windows: t.windows}
	if o.versioned && o.store == "" {
		b.errorf("%s: Versioned needs Materialized, the store the versions are kept in", n.label())
	}
	if o.versioned && t.windows != nil {
		b.errorf("%s: a windowed table cannot be Versioned", n.label())
	}
	if o.store != "" {
		n.stores = []string{o.store}
		if o.versioned {
			info := b.versionedStoreInfo(o.store, o)
			out.versioned, out.history = true, info.Retention
			out.asOf = out.valuesAsOf
			b.declareStore(info, n.label())
		} else {
			b.declareStore(b.tableStoreInfo(o.store, o), n.label())
		}
		if vs == nil {
			b.errorf("%s: store %q: value serde is nil (give it with TableValueSerde)", n.label(), o.store)
		}
	} else {
		parentStores, parent := t.view()
		out.lookupStores = parentStores
		out.lookup = func(open func(string) (statestore.ReadWriter, error)) (func(K) (V2, int64, bool, error), error) {
			get, err := parent(open)
			if err != nil {
				return nil, err
			}
			return func(k K) (V2, int64, bool, error) {
				v, ts, found, err := get(k)
				if err != nil || !found {
					return zero[V2](), ts, false, err
				}
				v2, ok := fn(k, v)
				return v2, ts, ok, nil
			}, nil
		}
		if t.asOf != nil {
			parentAsOf := t.asOf
			out.history = t.history
			out.asOf = func(open func(string) (statestore.ReadWriter, error)) (func(K, int64) (V2, int64, bool, error), error) {
				get, err := parentAsOf(open)
				if err != nil {
					return nil, err
				}
				return func(k K, at int64) (V2, int64, bool, error) {
					v, ts, found, err := get(k, at)
					if err != nil || !found {
						return zero[V2](), ts, false, err
					}
					v2, ok := fn(k, v)
					return v2, ts, ok, nil
				}, nil
			}
		}
	}
	store, ks, fromVersioned := o.store, t.keySerde, t.asOf != nil
	versioned, history := out.versioned, out.history
	n.newProc = func() (procImpl, error) {
		return &derivedTableProc[K, V, V2]{store: store, keySerde: ks, valueSerde: vs, fn: fn, fromVersioned: fromVersioned,
			filters: filters, versioned: versioned, history: history, layout: layoutCheck{store: store, versioned: versioned}}, nil
	}
	return out
}

// derivedTableProc applies a table operator to each update of its parent
// table, keeping the result in its store when it has one.
type derivedTableProc[K, V, V2 any] struct {
	store      string
	keySerde   serde.Serde[K]
	valueSerde serde.Serde[V2]
	fn         func(K, V) (V2, bool)
	kv         *KeyValueStore[K, V2]
	updates    tableUpdates
	// fromVersioned: the parent is a versioned table, or derives from one
	// without a store, and so forwards out-of-order updates too.
	fromVersioned bool
	// filters: the operator is Filter or FilterNot.
	filters bool
	// versioned: the store, given Versioned, keeps history milliseconds
	// of versions, in versions.
	versioned bool
	history   int64
	versions  *statestore.VersionedStore
	layout    layoutCheck
}

func (p *derivedTableProc[K, V, V2]) init(c *nodeInstance) error {
	if p.store == "" {
		return nil
	}
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

func (p *derivedTableProc[K, V, V2]) process(c *nodeInstance, r record) error {
	if r.keyNull {
		return nil
	}
	k := as[K](r.key)
	out := record{key: r.key, value: zero[V2](), valueNull: true, ts: r.ts, headers: r.headers, notLatest: r.notLatest}
	if !r.valueNull {
		if v, ok := p.fn(k, as[V](r.value)); ok {
			out.value, out.valueNull = v, false
		}
	}
	if c.node.sendOld && r.old != nil {
		// The parent sends old values too (requireOldValues): this
		// table's old value is the operator applied to the parent's.
		out.old = &prior{value: zero[V2](), null: true}
		if !r.old.null {
			if v, ok := p.fn(k, as[V](r.old.value)); ok {
				out.old.value, out.old.null = v, false
			}
		}
	}
	if p.filters && c.node.sendOld && !p.fromVersioned && out.valueNull && (out.old == nil || out.old.null) {
		// Kafka Streams' KTableFilter sends nothing for a key that
		// neither held nor holds a value once old values are sent: the
		// operators that asked for them have nothing to retract. A
		// versioned parent's tombstones all go on, since an
		// out-of-order one may end a version the result still serves.
		return nil
	}
	if p.kv == nil {
		// The parent table already holds back its updates until the
		// task flushes (a versioned one forwards each, as Kafka Streams
		// does), so there is nothing to deduplicate here.
		return c.forward(out)
	}
	if err := p.layout.check(p.kv.rw); err != nil {
		return err
	}
	kb, err := p.kv.encodeKey(k)
	if err != nil {
		return err
	}
	if p.versions != nil {
		return p.processVersioned(c, kb, out)
	}
	if p.fromVersioned {
		// A plain store keeps the last update it was given, out of order
		// or not, as Kafka Streams' does: the update becomes this table's
		// latest, and the old value is what the store held, which an
		// earlier out-of-order update may have replaced.
		out.notLatest = false
		if c.node.sendOld {
			if out.old, err = p.kv.prior(kb); err != nil {
				return err
			}
		}
	}
	if skip, err := p.updates.unheldTombstone(c, p.kv.rw, kb, out); skip || err != nil {
		return err
	}
	if out.valueNull {
		err = p.kv.rw.Delete(kb)
	} else {
		err = p.kv.putEncodedAt(kb, as[V2](out.value), r.ts.UnixMilli())
	}
	if err != nil {
		return err
	}
	return p.updates.emit(c, kb, out)
}

func (p *derivedTableProc[K, V, V2]) flush(c *nodeInstance) error { return p.updates.flush(c) }

func (p *derivedTableProc[K, V, V2]) close() error { return nil }

// processVersioned puts out, the result of one update, as a version of
// its key in the table's versioned store and forwards it as a versioned
// table's source does (tableProc.processVersioned): at once, unless too
// late to be put, marked notLatest when it went into the history, with
// the key's latest value before it as its old value.
func (p *derivedTableProc[K, V, V2]) processVersioned(c *nodeInstance, kb []byte, out record) error {
	if c.node.sendOld {
		v, found, err := p.versions.Get(kb)
		if err != nil {
			return err
		}
		out.old = &prior{value: zero[V2](), null: !found}
		if found {
			if out.old.value, err = p.kv.decodeValue(v.Value); err != nil {
				return err
			}
		}
	}
	var vb []byte
	if !out.valueNull {
		var err error
		if vb, err = encodeStoreValue(p.valueSerde, as[V2](out.value)); err != nil {
			return err
		}
	}
	validTo, put, err := p.versions.Put(kb, vb, out.ts.UnixMilli())
	if err != nil || !put {
		return err
	}
	out.notLatest = validTo != statestore.OpenEnded
	return c.forward(out)
}

package topology

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/eddystreams/eddy/serde"
)

// KGroupedTable is a table re-grouped by GroupTableBy, ready to be
// aggregated with retraction: each update of the table subtracts the key's
// old value from its old group's aggregate and adds the new value to its
// new group's.
type KGroupedTable[K, V any] struct {
	g *tableGrouping[K, V]
}

// tableGrouping is shared by copies of a KGroupedTable, so that several
// aggregations of one grouping share one repartition topic.
type tableGrouping[K, V any] struct {
	b          *Builder
	parent     *node
	keySerde   serde.Serde[K]
	valueSerde serde.Serde[V]
	name       string
	partitions int32
	source     *node
}

// GroupTableBy groups the table t by the key and value selector returns
// for each of its entries. Every update of t is sent through the
// repartition topic "<app>-<name>-repartition" (an empty name uses the
// store name of the first aggregation) as a change carrying the entry's
// old and new selected values: one record when the old and new group are
// the same, else a retraction to the old group followed by an addition to
// the new one; a tombstone is a retraction alone. keySerde and valueSerde
// encode the selected key and value in that topic; keySerde is also the
// aggregation store's key serde. Named names the selecting node;
// NumPartitions applies.
//
// The table, and the tables it derives from, send their old values for
// this (a source table reads its store before each write), a windowed
// table as Kafka Streams' windowed aggregations send them (a result
// emitted with EmitFinal carries a null one, so it is only added).
func GroupTableBy[K, V, K2, V2 any](t KTable[K, V], selector func(K, V) (K2, V2), name string, keySerde serde.Serde[K2], valueSerde serde.Serde[V2], opts ...Option) KGroupedTable[K2, V2] {
	b := t.builder()
	o := collect(opts)
	n := b.addStateless("table-groupby", o, func(c *nodeInstance, r record) error {
		return groupTableUpdate(c, r, selector)
	}, t.n)
	b.checkFunc(n, selector == nil, "selector")
	b.requireOldValues(t.n, n.label())
	if name != "" {
		b.checkName("GroupTableBy", name)
	}
	if keySerde == nil || valueSerde == nil {
		b.errorf("GroupTableBy %q after %s: key and value serdes must not be nil", name, t.n.label())
	}
	return KGroupedTable[K2, V2]{g: &tableGrouping[K2, V2]{
		b: b, parent: n, keySerde: keySerde, valueSerde: valueSerde, name: name, partitions: o.partitions,
	}}
}

// change is a grouped table update: the value to retract from the group
// (hasOld) and the value to add to it (hasNew).
type change[V any] struct {
	newValue, oldValue V
	hasNew, hasOld     bool
}

func groupTableUpdate[K, V, K2, V2 any](c *nodeInstance, r record, selector func(K, V) (K2, V2)) error {
	// An out-of-order update of a versioned table changed its history,
	// not its latest value, which is all an aggregate of it counts.
	if r.keyNull || r.notLatest {
		return nil
	}
	k := as[K](r.key)
	var (
		newKey, oldKey K2
		ch             change[V2]
	)
	if !r.valueNull {
		newKey, ch.newValue = selector(k, as[V](r.value))
		ch.hasNew = true
	}
	if r.old != nil && !r.old.null {
		oldKey, ch.oldValue = selector(k, as[V](r.old.value))
		ch.hasOld = true
	}
	switch {
	case !ch.hasNew && !ch.hasOld:
		return nil
	case ch.hasNew && ch.hasOld && !sameKey(newKey, oldKey):
		// Retract first, so that a group never counts the entry twice.
		if err := c.forward(record{key: oldKey, value: change[V2]{oldValue: ch.oldValue, hasOld: true}, ts: r.ts, headers: r.headers}); err != nil {
			return err
		}
		return c.forward(record{key: newKey, value: change[V2]{newValue: ch.newValue, hasNew: true}, ts: r.ts, headers: r.headers})
	case ch.hasNew:
		return c.forward(record{key: newKey, value: ch, ts: r.ts, headers: r.headers})
	default:
		return c.forward(record{key: oldKey, value: ch, ts: r.ts, headers: r.headers})
	}
}

// sameKey compares two selected keys. Keys of types Go cannot compare
// (slices) are taken as different, which costs an extra record, never a
// wrong result: the retraction and addition then travel separately.
func sameKey[K any](a, b K) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return any(a) == any(b)
}

// changeSerde encodes a change in a repartition topic: a flags byte (1:
// new value, 2: old value), then the new value's length as a uvarint and
// its bytes, then the old value's bytes.
type changeSerde[V any] struct{ s serde.Serde[V] }

func (cs changeSerde[V]) Encode(ch change[V]) ([]byte, error) {
	var flags byte
	var nb, ob []byte
	var err error
	if ch.hasNew {
		flags |= 1
		if nb, err = cs.s.Encode(ch.newValue); err != nil {
			return nil, err
		}
	}
	if ch.hasOld {
		flags |= 2
		if ob, err = cs.s.Encode(ch.oldValue); err != nil {
			return nil, err
		}
	}
	out := make([]byte, 0, 1+binary.MaxVarintLen64+len(nb)+len(ob))
	out = append(out, flags)
	if ch.hasNew {
		out = binary.AppendUvarint(out, uint64(len(nb)))
		out = append(out, nb...)
	}
	return append(out, ob...), nil
}

var errBadChange = errors.New("topology: malformed table change in a repartition topic")

func (cs changeSerde[V]) Decode(b []byte) (change[V], error) {
	var ch change[V]
	if len(b) == 0 || b[0]&^3 != 0 {
		return ch, errBadChange
	}
	flags, rest := b[0], b[1:]
	var err error
	if flags&1 != 0 {
		n, w := binary.Uvarint(rest)
		if w <= 0 || n > uint64(len(rest)-w) {
			return ch, errBadChange
		}
		if ch.newValue, err = cs.s.Decode(rest[w : w+int(n)]); err != nil {
			return ch, fmt.Errorf("new value: %w", err)
		}
		ch.hasNew, rest = true, rest[w+int(n):]
	}
	if flags&2 != 0 {
		if ch.oldValue, err = cs.s.Decode(rest); err != nil {
			return ch, fmt.Errorf("old value: %w", err)
		}
		ch.hasOld = true
	} else if len(rest) != 0 {
		return ch, errBadChange
	}
	return ch, nil
}

func (g KGroupedTable[K, V]) grouping() *tableGrouping[K, V] {
	if g.g == nil {
		panic("topology: use of a zero KGroupedTable; create one with GroupTableBy")
	}
	return g.g
}

// input returns the source of the grouping's repartition topic, creating
// it and its sink the first time.
func (g *tableGrouping[K, V]) input(store string) *node {
	if g.source == nil {
		name := g.name
		if name == "" {
			name = store
		}
		topic := TopicRef{Name: name + "-repartition", Internal: true}
		var cs serde.Serde[change[V]]
		if g.valueSerde != nil {
			cs = changeSerde[V]{g.valueSerde}
		}
		sink := addSink(g.b, g.parent, topic, g.keySerde, cs, options{name: topic.Name + "-sink", derived: true})
		sink.partitions = g.partitions
		if g.partitions < 0 {
			g.b.errorf("%s: partition count %d is negative", sink.label(), g.partitions)
		}
		g.source = addSource(g.b, topic, g.keySerde, cs, options{name: topic.Name + "-source", derived: true})
	}
	return g.source
}

// Count counts the entries of the table in each group, in the store named
// store (persistent and logged unless InMemory or WithoutLogging is given;
// values encoded with serde.Int64). A group whose entries all left keeps a
// count of 0. Named names the node.
func (g KGroupedTable[K, V]) Count(store string, opts ...Option) KTable[K, int64] {
	return tableAggregate(g.grouping(), "table-count", store, serde.Int64, collect(opts), "",
		func(_ K, ch change[V], n int64, found bool) int64 {
			if ch.hasOld && found {
				n--
			}
			if ch.hasNew {
				n++
			}
			return n
		})
}

// Reduce combines the values of each group: adder folds a value entering
// the group into the aggregate (the group's first value is its aggregate)
// and subtractor takes out a value leaving it. The aggregate lives in the
// store named store, encoded with the grouping's value serde. Named names
// the node.
func (g KGroupedTable[K, V]) Reduce(adder, subtractor func(agg, v V) V, store string, opts ...Option) KTable[K, V] {
	gr := g.grouping()
	var missing string
	switch {
	case adder == nil:
		missing = "adder"
	case subtractor == nil:
		missing = "subtractor"
	}
	return tableAggregate(gr, "table-reduce", store, gr.valueSerde, collect(opts), missing,
		func(_ K, ch change[V], agg V, found bool) V {
			if !found {
				// The group starts with the value entering it.
				return ch.newValue
			}
			if ch.hasOld {
				agg = subtractor(agg, ch.oldValue)
			}
			if ch.hasNew {
				agg = adder(agg, ch.newValue)
			}
			return agg
		})
}

// TableAggregate folds the values of each group into an aggregate: init
// gives a group's starting aggregate, adder folds in a value entering the
// group and subtractor takes out one leaving it (for a key moving between
// groups, from the old group, before adder adds it to the new). Aggregates
// live in the store named store (persistent and logged unless InMemory or
// WithoutLogging is given), encoded with aggSerde; a group whose entries
// all left keeps the aggregate the subtractions leave. Named names the
// node.
func TableAggregate[K, V, A any](g KGroupedTable[K, V], init func() A, adder, subtractor func(K, V, A) A, store string, aggSerde serde.Serde[A], opts ...Option) KTable[K, A] {
	var missing string
	switch {
	case init == nil:
		missing = "initializer"
	case adder == nil:
		missing = "adder"
	case subtractor == nil:
		missing = "subtractor"
	}
	return tableAggregate(g.grouping(), "table-aggregate", store, aggSerde, collect(opts), missing,
		func(k K, ch change[V], agg A, found bool) A {
			if !found {
				agg = init()
			} else if ch.hasOld {
				agg = subtractor(k, ch.oldValue, agg)
			}
			if ch.hasNew {
				agg = adder(k, ch.newValue, agg)
			}
			return agg
		})
}

// tableAggregate adds the aggregation node reading the grouping's
// repartition topic: it applies step to each change and the group's
// current aggregate (found false for a new group) and forwards the result.
func tableAggregate[K, V, A any](g *tableGrouping[K, V], op, store string, aggSerde serde.Serde[A], o options, missingFunc string, step func(K, change[V], A, bool) A) KTable[K, A] {
	b := g.b
	in := g.input(store)
	n := b.addProcessor(op, o, func() procImpl {
		return &tableAggProc[K, V, A]{store: store, keySerde: g.keySerde, aggSerde: aggSerde, step: step}
	}, in)
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

type tableAggProc[K, V, A any] struct {
	store    string
	keySerde serde.Serde[K]
	aggSerde serde.Serde[A]
	step     func(K, change[V], A, bool) A
	kv       *KeyValueStore[K, A]
	updates  tableUpdates
}

func (p *tableAggProc[K, V, A]) init(c *nodeInstance) error {
	rw, err := c.store(p.store)
	if err != nil {
		return err
	}
	p.kv = newTableStore(rw, p.keySerde, p.aggSerde, c.timestamped(p.store))
	p.updates.committed = readsCommitted(rw)
	return nil
}

func (p *tableAggProc[K, V, A]) process(c *nodeInstance, r record) error {
	if r.keyNull || r.valueNull {
		return nil
	}
	k := as[K](r.key)
	// The source read the key encoded with keySerde, the store's.
	kb := r.srcKey
	if kb == nil {
		var err error
		if kb, err = p.kv.encodeKey(k); err != nil {
			return err
		}
	}
	cur, ts, found, err := p.kv.getEncodedAt(kb)
	if err != nil {
		return err
	}
	ch := as[change[V]](r.value)
	if !found && !ch.hasNew {
		return p.retractUnheld(c, kb, r)
	}
	next := p.step(k, ch, cur, found)
	// Stamped, as Kafka Streams stamps it, with the latest time of the
	// updates folded in.
	ts = max(ts, r.ts.UnixMilli())
	if err := p.kv.putEncodedAt(kb, next, ts); err != nil {
		return err
	}
	out := record{key: r.key, value: next, ts: stamp(r.ts, ts), headers: r.headers}
	if c.node.sendOld {
		out.old = &prior{value: cur, null: !found}
	}
	return p.updates.emit(c, kb, out)
}

// retractUnheld handles a retraction from a group with no aggregate, which
// arrives when the store lost the group (an unlogged in-memory store after
// a restart, say) or when the old value retracted was never added (a new
// window's initial aggregate, regrouped by value). Kafka Streams'
// KTableAggregate and KTableReduce subtract nothing then but still put the
// null aggregate and forward it: a tombstone of the group stamped with the
// record's time, with no old value. Under the record cache their caching
// store neither writes nor forwards the delete of a key it never held,
// which tableUpdates.flush matches by checking the tombstone against the
// committed store.
func (p *tableAggProc[K, V, A]) retractUnheld(c *nodeInstance, kb []byte, r record) error {
	if err := p.kv.rw.Delete(kb); err != nil {
		return err
	}
	out := record{key: r.key, value: zero[A](), valueNull: true, ts: r.ts, headers: r.headers}
	if c.node.sendOld {
		out.old = &prior{null: true}
	}
	return p.updates.emit(c, kb, out)
}

func (p *tableAggProc[K, V, A]) flush(c *nodeInstance) error { return p.updates.flush(c) }

func (p *tableAggProc[K, V, A]) close() error { return nil }

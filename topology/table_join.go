package topology

import (
	"github.com/eddystreams/eddy/serde"
)

// JoinTables joins the tables l and r on their keys into a table holding,
// for each key both hold, joiner(lv, rv). It is kept in the store named
// store (persistent and logged unless InMemory or WithoutLogging is given),
// its values encoded with valueSerde, so it can be queried, and it is
// updated on every update of either side: an update of l looks up r's
// current value for the key, and the other way round. When a key's result
// goes away (a tombstone on either side, or for Filter'ed tables a value
// that stops passing) the result table deletes it and forwards a
// tombstone; a side update that leaves the key absent from a result that
// never held it forwards nothing.
//
// l and r must be co-partitioned, as for a stream-table Join: the join
// runs in the task of their partition, and the runtime checks their
// topics' partition counts at start-up. Named names the result's node
// (default "table-join-<n>"); the nodes that receive each side's updates
// are named "<name>-left" and "<name>-right".
func JoinTables[K, LV, RV, VR any](l KTable[K, LV], r KTable[K, RV], joiner func(lv LV, rv RV) VR, store string, valueSerde serde.Serde[VR], opts ...Option) KTable[K, VR] {
	var fn func(LV, bool, RV, bool) (VR, bool)
	if joiner != nil {
		fn = func(lv LV, lok bool, rv RV, rok bool) (VR, bool) {
			if !lok || !rok {
				return zero[VR](), false
			}
			return joiner(lv, rv), true
		}
	}
	return joinTables(l, r, "table-join", fn, store, valueSerde, collect(opts))
}

// LeftJoinTables is JoinTables keeping every key of l: the result holds
// joiner(lv, rv, found) for each key l holds, with found false and rv the
// zero value when r does not hold it.
func LeftJoinTables[K, LV, RV, VR any](l KTable[K, LV], r KTable[K, RV], joiner func(lv LV, rv RV, found bool) VR, store string, valueSerde serde.Serde[VR], opts ...Option) KTable[K, VR] {
	var fn func(LV, bool, RV, bool) (VR, bool)
	if joiner != nil {
		fn = func(lv LV, lok bool, rv RV, rok bool) (VR, bool) {
			if !lok {
				return zero[VR](), false
			}
			return joiner(lv, rv, rok), true
		}
	}
	return joinTables(l, r, "table-leftjoin", fn, store, valueSerde, collect(opts))
}

// OuterJoinTables is JoinTables keeping every key either side holds: the
// result holds joiner(lv, lfound, rv, rfound), a side's value being the
// zero value when it does not hold the key.
func OuterJoinTables[K, LV, RV, VR any](l KTable[K, LV], r KTable[K, RV], joiner func(lv LV, lfound bool, rv RV, rfound bool) VR, store string, valueSerde serde.Serde[VR], opts ...Option) KTable[K, VR] {
	var fn func(LV, bool, RV, bool) (VR, bool)
	if joiner != nil {
		fn = func(lv LV, lok bool, rv RV, rok bool) (VR, bool) {
			if !lok && !rok {
				return zero[VR](), false
			}
			return joiner(lv, lok, rv, rok), true
		}
	}
	return joinTables(l, r, "table-outerjoin", fn, store, valueSerde, collect(opts))
}

// joinTables adds the three nodes of a table-table join: one under each
// side, which looks the key up on the other side and computes the result
// (fn reports false for no result), and the result node under both, which
// keeps the result in store and forwards what changed.
func joinTables[K, LV, RV, VR any](l KTable[K, LV], r KTable[K, RV], op string, fn func(LV, bool, RV, bool) (VR, bool), store string, vs serde.Serde[VR], o options) KTable[K, VR] {
	b := l.builder()
	r.builder()
	// The result node is created first so that its name, generated or
	// given, names the side nodes; its parents are wired below.
	n := b.addNode(kindProcessor, op, o)
	if r.b != b {
		b.errorf("%s joins a table from another Builder", n.label())
		return KTable[K, VR]{b: b, n: n}
	}
	b.checkFunc(n, fn == nil, "joiner")
	if vs == nil {
		b.errorf("%s: store %q: value serde is nil", n.label(), store)
	}
	n.stores = []string{store}
	n.olds = ownOldValues
	b.declareStore(b.tableStoreInfo(store, o), n.label())

	rStores, rLookup := r.view()
	left := b.addProcessor("", options{name: n.name + "-left", derived: true}, func() procImpl {
		return &tableJoinSide[K, LV, RV]{lookup: rLookup, join: func(k K, lv LV, lok bool, rv RV, rok bool) (any, bool) {
			return fn(lv, lok, rv, rok)
		}}
	}, l.n)
	left.stores = rStores
	lStores, lLookup := l.view()
	right := b.addProcessor("", options{name: n.name + "-right", derived: true}, func() procImpl {
		return &tableJoinSide[K, RV, LV]{lookup: lLookup, join: func(k K, rv RV, rok bool, lv LV, lok bool) (any, bool) {
			return fn(lv, lok, rv, rok)
		}}
	}, r.n)
	right.stores = lStores
	for _, side := range []*node{left, right} {
		side.children = append(side.children, n)
		n.parents = append(n.parents, side)
	}
	ks := l.keySerde
	n.newProc = func() (procImpl, error) {
		return &tableJoinResult[K, VR]{store: store, keySerde: ks, valueSerde: vs}, nil
	}
	return KTable[K, VR]{b: b, n: n, store: store, keySerde: ks, valueSerde: vs}
}

// tableJoinSide receives the updates of one side of a table-table join and
// forwards the key's new result: its value, or a tombstone for none.
type tableJoinSide[K, V, OV any] struct {
	lookup tableLookup[K, OV]
	get    func(K) (OV, int64, bool, error)
	// join computes the result from this side's value and the other's.
	join func(k K, v V, ok bool, ov OV, ook bool) (any, bool)
}

func (p *tableJoinSide[K, V, OV]) init(c *nodeInstance) error {
	var err error
	p.get, err = p.lookup(c.store)
	return err
}

func (p *tableJoinSide[K, V, OV]) process(c *nodeInstance, r record) error {
	// The result joins the sides' latest values: an out-of-order update
	// of a versioned side does not change it (KIP-914).
	if r.keyNull || r.notLatest {
		return nil
	}
	k := as[K](r.key)
	ov, ots, ook, err := p.get(k)
	if err != nil {
		return err
	}
	v, ok := p.join(k, as[V](r.value), !r.valueNull, ov, ook)
	// Stamped, as Kafka Streams stamps it, with the later of the update's
	// time and the other side's value's.
	ts := r.ts
	if ook {
		ts = stamp(r.ts, max(r.ts.UnixMilli(), ots))
	}
	out := record{key: r.key, value: v, valueNull: !ok, ts: ts, headers: r.headers}
	return c.forward(out)
}

func (p *tableJoinSide[K, V, OV]) close() error { return nil }

// tableJoinResult keeps a table-table join's result in its store and
// forwards the updates that change it.
type tableJoinResult[K, VR any] struct {
	store      string
	keySerde   serde.Serde[K]
	valueSerde serde.Serde[VR]
	kv         *KeyValueStore[K, VR]
	updates    tableUpdates
}

func (p *tableJoinResult[K, VR]) init(c *nodeInstance) error {
	rw, err := c.store(p.store)
	if err != nil {
		return err
	}
	p.kv = newTableStore(rw, p.keySerde, p.valueSerde, c.timestamped(p.store))
	p.updates.committed = readsCommitted(rw)
	return nil
}

func (p *tableJoinResult[K, VR]) process(c *nodeInstance, r record) error {
	kb, err := p.kv.encodeKey(as[K](r.key))
	if err != nil {
		return err
	}
	old, err := p.kv.prior(kb)
	if err != nil {
		return err
	}
	if r.valueNull {
		if old.null {
			// Absent before and after: nothing changed.
			return nil
		}
		if err := p.kv.rw.Delete(kb); err != nil {
			return err
		}
		r.value = zero[VR]()
	} else if err := p.kv.putEncodedAt(kb, as[VR](r.value), r.ts.UnixMilli()); err != nil {
		return err
	}
	if c.node.sendOld {
		r.old = old
	}
	return p.updates.emit(c, kb, r)
}

func (p *tableJoinResult[K, VR]) flush(c *nodeInstance) error { return p.updates.flush(c) }

func (p *tableJoinResult[K, VR]) close() error { return nil }

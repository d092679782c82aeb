package topology

import (
	"slices"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

// JoinTables joins the tables l and r on their keys into a table holding,
// for each key both hold, joiner(lv, rv). Given a store name, the result is
// kept in that store (persistent and logged unless InMemory or
// WithoutLogging is given), its values encoded with valueSerde, so it can
// be queried; given "", as Kafka Streams' join without Materialized, it
// keeps no store: valueSerde may then be nil (Suppress needs it), the
// result cannot be queried, and a join or lookup of it reads both sides'
// current values and joins them. Either way it is updated on every update
// of either side: an update of l looks up r's current value for the key,
// and the other way round. As in Kafka Streams, an update of one side
// forwards the key's new result, or a tombstone when there is none (a
// tombstone on either side, or for Filter'ed tables a value that stops
// passing), unless the other side holds no value for the key and the join
// needs one (both sides of JoinTables, the right side of LeftJoinTables),
// or neither side holds one: so a side's tombstone goes out while the
// other side holds a value even when the result never held the key. Under
// the record cache a result store, like Kafka Streams' caching store,
// forwards no tombstone of a key it held no value of at the last commit;
// a result without one forwards each update as the sides' tables flush it.
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

// StoredOldValues makes a table-table join with a store send, as the old
// value of each update (to a grouping, a further left or outer join, or
// anything else that reads old values), what its store held for the key.
// Without it the old value is Kafka Streams': the updated side's old value
// joined with the other side's current one (under the record cache, what
// the store held at the last commit, as in Kafka Streams). The two differ
// only where the stored result no longer follows from the sides, as after
// a self-join, and there only the stored value retracts what the result
// really held.
func StoredOldValues() Option { return func(o *options) { o.storedOlds = true } }

// joinTables adds the three nodes of a table-table join: one under each
// side, which looks the key up on the other side and computes the result
// (fn reports false for no result), and the result node under both, which
// keeps the result in store and forwards what changed, or, without a
// store, forwards what the sides send.
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
	materialized := store != ""
	if materialized {
		if vs == nil {
			b.errorf("%s: store %q: value serde is nil", n.label(), store)
		}
		n.stores = []string{store}
		n.olds = ownOldValues
		// Without StoredOldValues the sides compute the old values, from
		// their tables' in full, as for a join without a store.
		n.fullOldsToo = !o.storedOlds
		b.declareResultStore(n, store, o)
	} else {
		if o.storedOlds {
			b.errorf("%s: StoredOldValues needs a store", n.label())
		}
		if o.versioned {
			b.errorf("%s: Versioned needs a store, the one its results' versions are kept in", n.label())
		}
		n.olds = joinedOldValues
	}

	lRule, rRule := needsOther, needsOther
	switch op {
	case "table-leftjoin":
		lRule = keepsOwn
	case "table-outerjoin":
		lRule, rRule = keepsOwn, keepsOwn
	}
	rStores, rLookup := r.view()
	left := b.addProcessor("", options{name: n.name + "-left", derived: true}, func() procImpl {
		return &tableJoinSide[K, LV, RV]{lookup: rLookup, rule: lRule, olds: n.sendOld && !o.storedOlds, storeless: !materialized,
			join: func(k K, lv LV, lok bool, rv RV, rok bool) (any, bool) {
				return fn(lv, lok, rv, rok)
			}}
	}, l.n)
	left.stores = rStores
	lStores, lLookup := l.view()
	right := b.addProcessor("", options{name: n.name + "-right", derived: true}, func() procImpl {
		return &tableJoinSide[K, RV, LV]{lookup: lLookup, rule: rRule, olds: n.sendOld && !o.storedOlds, storeless: !materialized,
			join: func(k K, rv RV, rok bool, lv LV, lok bool) (any, bool) {
				return fn(lv, lok, rv, rok)
			}}
	}, r.n)
	right.stores = lStores
	for _, side := range []*node{left, right} {
		side.children = append(side.children, n)
		n.parents = append(n.parents, side)
	}
	// As Kafka Streams' joins, a side that keeps its own keys reads its
	// table's old values, only to tell whether the table held the key;
	// a result that must send old values makes both tables send theirs.
	if lRule == keepsOwn {
		b.sendOldValues(l.n, n.label(), false)
	}
	if rRule == keepsOwn {
		b.sendOldValues(r.n, n.label(), false)
	}
	n.oldsToo = []*node{l.n, r.n}
	ks := l.keySerde
	if !materialized {
		n.newProc = func() (procImpl, error) { return tableJoinPass{}, nil }
		return KTable[K, VR]{b: b, n: n, keySerde: ks, valueSerde: vs,
			lookupStores: joinedStores(lStores, rStores), lookup: joinedLookup(lLookup, rLookup, fn)}
	}
	n.newProc = func() (procImpl, error) {
		return &tableJoinResult[K, VR]{store: store, keySerde: ks, valueSerde: vs}, nil
	}
	return versionedResult(KTable[K, VR]{b: b, n: n, store: store, keySerde: ks, valueSerde: vs}, o)
}

// joinedStores lists the stores of both sides' views once each (a
// self-join reads one store twice).
func joinedStores(l, r []string) []string {
	out := slices.Clone(l)
	for _, s := range r {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// joinedLookup reads a table join's result without a store, as Kafka
// Streams' join value getters do: both sides' current values joined by
// fn, stamped with the later of the timestamps of the values found.
func joinedLookup[K, LV, RV, VR any](l tableLookup[K, LV], r tableLookup[K, RV], fn func(LV, bool, RV, bool) (VR, bool)) tableLookup[K, VR] {
	return func(open func(string) (statestore.ReadWriter, error)) (func(K) (VR, int64, bool, error), error) {
		lget, err := l(open)
		if err != nil {
			return nil, err
		}
		rget, err := r(open)
		if err != nil {
			return nil, err
		}
		return func(k K) (VR, int64, bool, error) {
			lv, lts, lok, err := lget(k)
			if err != nil {
				return zero[VR](), statestore.NoTimestamp, false, err
			}
			rv, rts, rok, err := rget(k)
			if err != nil {
				return zero[VR](), statestore.NoTimestamp, false, err
			}
			v, ok := fn(lv, lok, rv, rok)
			if !ok {
				return zero[VR](), statestore.NoTimestamp, false, nil
			}
			ts := statestore.NoTimestamp
			if lok {
				ts = lts
			}
			if rok {
				ts = max(ts, rts)
			}
			return v, ts, true, nil
		}, nil
	}
}

// tableJoinSide receives the updates of one side of a table-table join and
// forwards the key's new result: its value, or a tombstone for none. It
// follows Kafka Streams' KTableKTable*Join processors, which send nothing
// for an update when the other side holds no value for its key and the
// join needs one, or when neither side holds one, and otherwise send the
// result even when it is a tombstone of a key the join never held (the
// result node forwards what it is sent).
type tableJoinSide[K, V, OV any] struct {
	lookup tableLookup[K, OV]
	get    func(K) (OV, int64, bool, error)
	rule   sideRule
	// olds: the join's result must send old values computed here, as
	// Kafka Streams' join processors compute them: from this side's
	// table's old value and the other side's current one. A result with
	// a store (storeless unset) uses its store's when the table sent none.
	olds, storeless bool
	// join computes the result from this side's value and the other's.
	join func(k K, v V, ok bool, ov OV, ook bool) (any, bool)
}

// sideRule is what a table join's side sends for an update of a key the
// other side holds no value for.
type sideRule int

const (
	// needsOther: nothing (the sides of an inner join and the right side
	// of a left join: KTableKTableInnerJoin, KTableKTableRightJoin).
	needsOther sideRule = iota
	// keepsOwn: the update's result, but nothing for a tombstone of a
	// key this side did not hold either (the left side of a left join
	// and the sides of an outer join: KTableKTableLeftJoin,
	// KTableKTableOuterJoin), which it learns from its table's old
	// values (every tombstone of a table sending them carries one).
	keepsOwn
)

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
	if !ook && (p.rule == needsOther || r.valueNull && r.old.null) {
		return nil
	}
	v, ok := p.join(k, as[V](r.value), !r.valueNull, ov, ook)
	// Stamped, as Kafka Streams stamps it, with the later of the update's
	// time and the other side's value's.
	ts := r.ts
	if ook {
		ts = stamp(r.ts, max(r.ts.UnixMilli(), ots))
	}
	out := record{key: r.key, value: v, valueNull: !ok, ts: ts, headers: r.headers}
	if p.olds && (r.old != nil || p.storeless) {
		var oldV V
		oldOK := r.old != nil && !r.old.null
		if oldOK {
			oldV = as[V](r.old.value)
		}
		was, held := p.join(k, oldV, oldOK, ov, ook)
		out.old = &prior{value: was, null: !held}
	}
	return c.forward(out)
}

func (p *tableJoinSide[K, V, OV]) close() error { return nil }

// tableJoinPass is the result node of a table-table join without a
// store, as Kafka Streams' KTableKTableJoinMerger without one: it forwards
// what its sides send at once, old values included when it must send
// them (the sides then compute them).
type tableJoinPass struct{}

func (tableJoinPass) init(*nodeInstance) error { return nil }

func (tableJoinPass) process(c *nodeInstance, r record) error {
	return c.forward(r)
}

func (tableJoinPass) close() error { return nil }

// tableJoinResult keeps a table-table join's result in its store and
// forwards the updates its sides send, as Kafka Streams'
// KTableKTableJoinMerger: a tombstone even for a key the result does not
// hold, unless it holds its updates (the record cache), whose flush then
// drops such a tombstone as Kafka Streams' caching store does.
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
	// Only a result that sends old values needs the value; otherwise
	// whether it held the key decides.
	var old *prior
	if c.node.sendOld {
		old, err = p.kv.prior(kb)
	} else {
		old, err = p.kv.priorPresence(kb)
	}
	if err != nil {
		return err
	}
	if r.valueNull {
		if old.null {
			// Absent before and after: a cached result with no update
			// pending held nothing at the last flush either, so the
			// flush would drop it.
			if c.holds() && !p.updates.holdsKey(kb) {
				return nil
			}
		} else if err := p.kv.rw.Delete(kb); err != nil {
			return err
		}
		r.value = zero[VR]()
	} else if err := p.kv.putEncodedAt(kb, as[VR](r.value), r.ts.UnixMilli()); err != nil {
		return err
	}
	// The sides' old values, when they sent them, are Kafka Streams'
	// without the record cache; under it, what the store held at the last
	// commit, as Kafka Streams' caching store sends.
	if c.node.sendOld && (r.old == nil || c.holds()) {
		r.old = old
	}
	return p.updates.emit(c, kb, r)
}

func (p *tableJoinResult[K, VR]) flush(c *nodeInstance) error { return p.updates.flush(c) }

func (p *tableJoinResult[K, VR]) close() error { return nil }

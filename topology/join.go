package topology

import (
	"time"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

// Join joins s with the table t on their keys: each record of s looks up
// t's current value for its key and, when there is one, forwards
// joiner(value, tableValue) under the record's key, timestamp and headers.
// A record whose key t does not hold is dropped. Updates of t change what
// later records find but produce no output themselves; a tombstone in t
// deletes its key. Records of s with a null key or value are dropped and
// counted (runtime.TaskInfo.DroppedJoin). t may be a table derived
// without Materialized: its values are then read through the store of the
// table it derives from, with the operators in between applied. A table
// read with Versioned, or derived from one without Materialized, is looked
// up as of each record's timestamp instead of its current value, after the
// JoinGrace wait if one is given.
//
// s and t must be co-partitioned: the topics they read need equal
// partition counts, which the runtime checks at start-up. If an operator
// may have changed the key of s (Map, SelectKey, FlatMap, Process), s is
// first written through the repartition topic "<app>-<name>-repartition",
// where name is the join node's name (give it with Named to keep it stable
// as the topology changes); the topic's records are encoded with t's key
// serde and the value serde given with JoinValueSerde, which is then
// required. Named names the join node.
func Join[K, V, TV, VR any](s KStream[K, V], t KTable[K, TV], joiner func(v V, tv TV) VR, opts ...Option) KStream[K, VR] {
	var fn func(V, TV, bool) VR
	if joiner != nil {
		fn = func(v V, tv TV, _ bool) VR { return joiner(v, tv) }
	}
	return join(s, t, "join", false, fn, collect(opts))
}

// LeftJoin is Join that keeps the records whose key t does not hold:
// joiner is called for every record with found false and tv the zero value
// of TV when t has no value for the key. A record with a null key and a
// value is kept too, joined with nothing, as in Kafka Streams since
// KIP-962.
func LeftJoin[K, V, TV, VR any](s KStream[K, V], t KTable[K, TV], joiner func(v V, tv TV, found bool) VR, opts ...Option) KStream[K, VR] {
	return join(s, t, "leftjoin", true, joiner, collect(opts))
}

// JoinGrace gives Join or LeftJoin with a versioned table (see
// Versioned) a grace period (KIP-923): each stream record waits until the
// join's stream time (the latest time of its stream records) has passed
// its own time by grace, so that table updates up to grace late are in
// the table when it is joined, and records are then joined in time order.
// A record already that late when it arrives is joined at once. Records
// wait in the store "<name>-buffer", where name is the join node's name
// (persistent and logged unless InMemory or WithoutLogging is given); the
// stream's value serde must be given with JoinValueSerde. grace must not
// exceed the table's history. Zero is no grace: every record is joined as
// it arrives.
func JoinGrace(grace time.Duration) Option {
	return func(o *options) { o.grace, o.hasGrace = grace.Milliseconds(), true }
}

// JoinValueSerde gives the value serde of the stream side of Join or
// LeftJoin, used to encode its repartition topic when the stream must be
// repartitioned and the records waiting out a JoinGrace; V must be the
// stream's value type.
func JoinValueSerde[V any](s serde.Serde[V]) Option {
	return func(o *options) { o.valueSerde = s }
}

func join[K, V, TV, VR any](s KStream[K, V], t KTable[K, TV], op string, left bool, joiner func(V, TV, bool) VR, o options) KStream[K, VR] {
	b := s.builder()
	if t.b == nil {
		panic("topology: use of a zero KTable")
	}
	if t.b != b {
		b.errorf("%s joins a table from another Builder", s.n.label())
		return KStream[K, VR]{b: b, n: s.n}
	}
	// The node is added before its input is known, so that its (possibly
	// generated) name can name the repartition topic; its parent is wired
	// below.
	n := b.addNode(kindProcessor, op, o)
	n.relaxedNullKeys = left
	in := s.n
	if s.keyChanged {
		vs, ok := o.valueSerde.(serde.Serde[V])
		switch {
		case o.valueSerde == nil:
			b.errorf("%s: the stream was re-keyed (after %s) and must be repartitioned; give its value serde with JoinValueSerde", n.label(), s.n.label())
		case !ok || vs == nil:
			b.errorf("%s: JoinValueSerde is %T, want a non-nil serde.Serde[%T]", n.label(), o.valueSerde, zero[V]())
		default:
			topic := TopicRef{Name: n.name + "-repartition", Internal: true}
			sink := addSink(b, s.n, topic, t.keySerde, vs, options{name: topic.Name + "-sink", derived: true})
			sink.partitions = o.partitions
			if o.partitions < 0 {
				b.errorf("%s: partition count %d is negative", sink.label(), o.partitions)
			}
			in = addSource(b, topic, t.keySerde, vs, options{name: topic.Name + "-source", derived: true})
		}
	}
	in.children = append(in.children, n)
	n.parents = []*node{in}
	// The table is read, not fed: the join node must share the table's
	// task (and so its sub-topology and partition) without receiving its
	// updates.
	n.joins = t.n
	stores, lookup := t.view()
	n.stores = stores
	b.checkFunc(n, joiner == nil, "joiner")
	grace := joinGrace(b, n, t, o)
	if _, ok := o.valueSerde.(serde.Serde[V]); grace != nil && !ok {
		b.errorf("%s: JoinValueSerde is %T, want a non-nil serde.Serde[%T]", n.label(), o.valueSerde, zero[V]())
		grace = nil
	}
	n.newProc = func() (procImpl, error) {
		p := &joinProc[K, V, TV, VR]{lookup: lookup, asOf: t.asOf, left: left, joiner: joiner, grace: grace}
		if grace != nil {
			p.ks, p.vs = t.keySerde, o.valueSerde.(serde.Serde[V])
		}
		return p, nil
	}
	return KStream[K, VR]{b: b, n: n}
}

type joinProc[K, V, TV, VR any] struct {
	lookup tableLookup[K, TV]
	left   bool
	joiner func(V, TV, bool) VR
	get    func(K) (TV, int64, bool, error)
	// asOf, for a table that keeps its history, replaces lookup: a record
	// joins the table as it was at the record's time, through getAt.
	asOf  asOfLookup[K, TV]
	getAt func(K, int64) (TV, int64, bool, error)
	// grace, ks and vs are set for a join with a grace period (JoinGrace).
	grace  *joinBuffer
	ks     serde.Serde[K]
	vs     serde.Serde[V]
	buffer statestore.ReadWriter
}

func (p *joinProc[K, V, TV, VR]) init(c *nodeInstance) error {
	var err error
	if p.asOf != nil {
		p.getAt, err = p.asOf(c.store)
	} else {
		p.get, err = p.lookup(c.store)
	}
	if err == nil && p.grace != nil {
		p.buffer, err = c.store(p.grace.store)
	}
	return err
}

func (p *joinProc[K, V, TV, VR]) process(c *nodeInstance, r record) error {
	if p.left && r.keyNull && !r.valueNull {
		// KIP-962: a left join keeps a keyless record, joined with nothing.
		return c.forward(record{key: r.key, keyNull: true, value: p.joiner(as[V](r.value), zero[TV](), false), ts: r.ts, headers: r.headers})
	}
	if r.keyNull || r.valueNull {
		c.task.droppedJoin++
		return nil
	}
	if p.grace != nil {
		return p.hold(c, r)
	}
	return p.join(c, r)
}

// join joins r, a record with a key and a value, with the table.
func (p *joinProc[K, V, TV, VR]) join(c *nodeInstance, r record) error {
	var (
		tv    TV
		found bool
		err   error
	)
	if p.getAt != nil {
		tv, _, found, err = p.getAt(as[K](r.key), r.ts.UnixMilli())
	} else {
		tv, _, found, err = p.get(as[K](r.key))
	}
	if err != nil {
		return err
	}
	if !found && !p.left {
		return nil
	}
	v := p.joiner(as[V](r.value), tv, found)
	return c.forward(record{key: r.key, value: v, ts: r.ts, headers: r.headers})
}

func (p *joinProc[K, V, TV, VR]) close() error { return nil }

// DroppedJoinRecords implements graph.JoinDropCounter.
func (g *taskGraph) DroppedJoinRecords() int64 { return g.droppedJoin }

package topology

import (
	"errors"
	"fmt"
	"slices"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

// GlobalKTable is a table every instance holds in full: all partitions of
// its topic, read into one global store by the instance's global thread
// rather than by tasks. Streams join it with JoinGlobal and LeftJoinGlobal
// on a key they compute, so neither side need be co-partitioned with the
// other, and nothing is repartitioned.
type GlobalKTable[K, V any] struct {
	b          *Builder
	store      string
	keySerde   serde.Serde[K]
	valueSerde serde.Serde[V]
}

// globalTable is a GlobalKTable as the Builder records it.
type globalTable struct {
	info  StoreInfo
	topic string
	// readers names the join nodes that read the store, for Describe.
	readers []string
}

// GlobalTable reads every partition of topic into the global store named
// store, on every instance of the application. The store holds the
// topic's records as they are (keySerde and valueSerde encode both): a
// record with a null value deletes its key, a record with a null key is
// skipped. It is persistent (badger, under the state directory's global/
// folder) unless InMemory is given; it has no changelog, since the topic
// itself is its source of truth, and WithoutLogging is implied.
//
// The runtime restores every global store before its stream threads
// process anything, keeps it current from a global thread of its own (one
// per instance, outside the consumer group: global topics are never
// assigned), and answers queries of it locally on every instance (iq's
// RoleGlobal). Processors may read it but never write it.
func GlobalTable[K, V any](b *Builder, topic string, keySerde serde.Serde[K], valueSerde serde.Serde[V], store string, opts ...Option) GlobalKTable[K, V] {
	o := collect(opts)
	owner := fmt.Sprintf("global table of topic %q", topic)
	if topic == "" {
		b.errorf("%s: topic name is empty", owner)
	}
	if keySerde == nil || valueSerde == nil {
		b.errorf("%s: key and value serdes must not be nil", owner)
	}
	if o.versioned {
		b.errorf("%s: a global table cannot be Versioned, as in Kafka Streams", owner)
	}
	b.checkName("store", store)
	if prev, dup := b.storeOwner[store]; dup {
		b.errorf("store %q is declared twice (by %s and by %s)", store, prev, owner)
	} else if store != "" {
		b.storeOwner[store] = owner
		b.globals = append(b.globals, &globalTable{info: StoreInfo{Name: store, Persistent: !o.inMemory}, topic: topic})
	}
	return GlobalKTable[K, V]{b: b, store: store, keySerde: keySerde, valueSerde: valueSerde}
}

// StoreName returns the name of the table's global store.
func (g GlobalKTable[K, V]) StoreName() string { return g.store }

// TypedStore wraps rw, the byte-level global store (as an interactive query
// opened it), with the table's serdes.
func (g GlobalKTable[K, V]) TypedStore(rw statestore.ReadWriter) *KeyValueStore[K, V] {
	return NewKeyValueStore(rw, g.keySerde, g.valueSerde)
}

// JoinGlobal joins s with the global table g: for each record of s,
// keySelector computes the key of g to look up, and when g holds it the
// record is forwarded as joiner(value, tableValue) under its own key,
// timestamp and headers. A record whose key g does not hold is dropped.
// Updates of g change what later records find but produce no output. A
// record with a null value is dropped and counted (runtime.TaskInfo.DroppedJoin);
// one with a null key is given to keySelector with the zero K. No
// co-partitioning is needed and s is never repartitioned for the join; a
// re-keyed s stays re-keyed for later groupings. Named names the join node.
//
// g may be behind s: it is restored before processing begins, then follows
// its topic on its own thread, so a record of s meets g as g stands when
// the record is processed, not as it stood at the record's timestamp.
func JoinGlobal[K, V, GK, GV, VR any](s KStream[K, V], g GlobalKTable[GK, GV], keySelector func(K, V) GK, joiner func(v V, gv GV) VR, opts ...Option) KStream[K, VR] {
	var fn func(V, GV, bool) VR
	if joiner != nil {
		fn = func(v V, gv GV, _ bool) VR { return joiner(v, gv) }
	}
	return joinGlobal(s, g, "globaljoin", false, keySelector, fn, collect(opts))
}

// LeftJoinGlobal is JoinGlobal that keeps the records whose key g does not
// hold: joiner is called for every record, with found false and gv the zero
// GV when g has no value for the selected key.
func LeftJoinGlobal[K, V, GK, GV, VR any](s KStream[K, V], g GlobalKTable[GK, GV], keySelector func(K, V) GK, joiner func(v V, gv GV, found bool) VR, opts ...Option) KStream[K, VR] {
	return joinGlobal(s, g, "globalleftjoin", true, keySelector, joiner, collect(opts))
}

func joinGlobal[K, V, GK, GV, VR any](s KStream[K, V], g GlobalKTable[GK, GV], op string, left bool, keySelector func(K, V) GK, joiner func(V, GV, bool) VR, o options) KStream[K, VR] {
	b := s.builder()
	if g.b == nil {
		panic("topology: use of a zero GlobalKTable")
	}
	n := b.addNode(kindProcessor, op, o, s.n)
	n.relaxedNullKeys = left
	if g.b != b {
		b.errorf("%s joins a global table from another Builder", n.label())
	}
	n.globals = []string{g.store}
	for _, gt := range b.globals {
		if gt.info.Name == g.store {
			gt.readers = append(gt.readers, n.name)
		}
	}
	b.checkFunc(n, keySelector == nil, "key selector")
	b.checkFunc(n, joiner == nil, "joiner")
	store, ks, vs := g.store, g.keySerde, g.valueSerde
	n.newProc = func() (procImpl, error) {
		return &globalJoinProc[K, V, GK, GV, VR]{store: store, keySerde: ks, valueSerde: vs, left: left, selector: keySelector, joiner: joiner}, nil
	}
	return KStream[K, VR]{b: b, n: n, keyChanged: s.keyChanged}
}

type globalJoinProc[K, V, GK, GV, VR any] struct {
	store      string
	keySerde   serde.Serde[GK]
	valueSerde serde.Serde[GV]
	left       bool
	selector   func(K, V) GK
	joiner     func(V, GV, bool) VR
	kv         *KeyValueStore[GK, GV]
}

func (p *globalJoinProc[K, V, GK, GV, VR]) init(c *nodeInstance) error {
	rw, err := c.store(p.store)
	if err != nil {
		return err
	}
	p.kv = NewKeyValueStore(rw, p.keySerde, p.valueSerde)
	return nil
}

func (p *globalJoinProc[K, V, GK, GV, VR]) process(c *nodeInstance, r record) error {
	if r.valueNull {
		c.task.droppedJoin++
		return nil
	}
	v := as[V](r.value)
	gv, found, err := p.kv.Get(p.selector(as[K](r.key), v))
	if err != nil {
		return err
	}
	if !found && !p.left {
		return nil
	}
	return c.forward(record{key: r.key, keyNull: r.keyNull, value: p.joiner(v, gv, found), ts: r.ts, headers: r.headers})
}

func (p *globalJoinProc[K, V, GK, GV, VR]) close() error { return nil }

// takeGlobalStores moves the global stores a processor named among its
// stores (Process) to the global stores it reads, which no task owns, and
// returns the names of those processors by store, for Describe.
func (b *Builder) takeGlobalStores(nodes []*node) map[string][]string {
	readers := make(map[string][]string)
	for _, n := range nodes {
		n.stores = slices.DeleteFunc(n.stores, func(s string) bool {
			if !slices.ContainsFunc(b.globals, func(gt *globalTable) bool { return gt.info.Name == s }) {
				return false
			}
			if !slices.Contains(n.globals, s) {
				n.globals = append(n.globals, s)
				readers[s] = append(readers[s], n.name)
			}
			return true
		})
	}
	return readers
}

// ReadOnlyKeyValueStore is a typed store a processor may read but not
// write: a global store, which only the global thread writes.
type ReadOnlyKeyValueStore[K, V any] struct {
	kv *KeyValueStore[K, V]
}

// Get returns the value of k, and whether the store holds it.
func (s *ReadOnlyKeyValueStore[K, V]) Get(k K) (V, bool, error) { return s.kv.Get(k) }

// Range iterates over the keys in [from, to), in the order of their
// serialized bytes. Close the iterator.
func (s *ReadOnlyKeyValueStore[K, V]) Range(from, to K) (*KeyValueIterator[K, V], error) {
	return s.kv.Range(from, to)
}

// All iterates over every entry. Close the iterator.
func (s *ReadOnlyKeyValueStore[K, V]) All() (*KeyValueIterator[K, V], error) { return s.kv.All() }

// ApproximateCount estimates the number of keys.
func (s *ReadOnlyKeyValueStore[K, V]) ApproximateCount() (int64, error) {
	return s.kv.ApproximateCount()
}

// Open returns g's global store from p, typed with g's serdes and read
// only. A processor opens it from its ProcessorContext in Init, having
// named g.StoreName() among its stores when it was added with Process; it
// sees the store as the global thread last left it, which may be behind
// or ahead of the record being processed (see JoinGlobal).
func (g GlobalKTable[K, V]) Open(p StoreProvider) (*ReadOnlyKeyValueStore[K, V], error) {
	if g.b == nil {
		return nil, errors.New("topology: use of a zero GlobalKTable")
	}
	rw, err := p.Store(g.store)
	if err != nil {
		return nil, err
	}
	return &ReadOnlyKeyValueStore[K, V]{kv: NewKeyValueStore(rw, g.keySerde, g.valueSerde)}, nil
}

// checkGlobals reports global tables that cannot be run: a topic read both
// by a global table and by a stream or table source, or by two global
// tables (each record must have one reader that owns it).
func (b *Builder) checkGlobals(nodes []*node) []error {
	var errs []error
	owner := make(map[string]string)
	for _, n := range nodes {
		if n.kind == kindSource && !n.topic.Internal {
			owner[n.topic.Name] = n.label()
		}
	}
	for _, gt := range b.globals {
		if prev, ok := owner[gt.topic]; ok {
			errs = append(errs, fmt.Errorf("topology: topic %q is read by the global table of store %q and by %s; a topic has one reader", gt.topic, gt.info.Name, prev))
			continue
		}
		owner[gt.topic] = fmt.Sprintf("the global table of store %q", gt.info.Name)
	}
	return errs
}

// GlobalStores lists the topology's global stores with their topics.
func (t *runtimeView) GlobalStores() []graph.GlobalStore {
	out := make([]graph.GlobalStore, 0, len(t.globals))
	for _, gt := range t.globals {
		out = append(out, graph.GlobalStore{Store: gt.info, Topic: gt.topic})
	}
	return out
}

// isGlobal reports whether name is a global store of t.
func (t *Topology) isGlobal(name string) bool {
	return slices.ContainsFunc(t.globals, func(gt *globalTable) bool { return gt.info.Name == name })
}

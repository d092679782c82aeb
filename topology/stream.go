package topology

import (
	"unsafe"

	"github.com/eddystreams/eddy/serde"
)

// KStream is an unbounded stream of key-value records. Every record is an
// independent event; compare KTable.
//
// Operators that keep the key and value types are methods; operators that
// change them are package-level functions, because Go methods cannot have
// type parameters of their own.
//
// A Kafka null key or value read from a topic reaches user functions as the
// zero value of its type. Operators that keep the key (Filter, MapValues,
// FlatMapValues, Peek, Merge) remember that it was null, so that sinks write
// it back as a null and aggregations drop the record. Operators that compute
// a new key or value produce non-null ones.
type KStream[K, V any] struct {
	b *Builder
	n *node
	// keyChanged records that an operator may have changed the key since
	// the record was read, so grouping by key must repartition.
	keyChanged bool
}

// KeyValue is a key-value pair, as returned by FlatMap.
type KeyValue[K, V any] struct {
	Key   K
	Value V
}

// KV returns the pair (k, v).
func KV[K, V any](k K, v V) KeyValue[K, V] { return KeyValue[K, V]{Key: k, Value: v} }

// Stream reads topic as a stream, decoding keys with keySerde and values with
// valueSerde. Each topic may be read by only one source in a topology.
func Stream[K, V any](b *Builder, topic string, keySerde serde.Serde[K], valueSerde serde.Serde[V], opts ...Option) KStream[K, V] {
	n := addSource(b, TopicRef{Name: topic}, keySerde, valueSerde, collect(opts))
	return KStream[K, V]{b: b, n: n}
}

func (s KStream[K, V]) builder() *Builder {
	if s.b == nil {
		panic("topology: use of a zero KStream; create streams with topology.Stream")
	}
	return s.b
}

// Filter keeps the records for which keep returns true.
func (s KStream[K, V]) Filter(keep func(K, V) bool, opts ...Option) KStream[K, V] {
	b := s.builder()
	n := b.addStateless("filter", collect(opts), func(c *nodeInstance, r record) error {
		if keep(as[K](r.key), as[V](r.value)) {
			return c.forward(r)
		}
		return nil
	}, s.n)
	b.checkFunc(n, keep == nil, "predicate")
	return KStream[K, V]{b: b, n: n, keyChanged: s.keyChanged}
}

// FilterNot drops the records for which drop returns true.
func (s KStream[K, V]) FilterNot(drop func(K, V) bool, opts ...Option) KStream[K, V] {
	b := s.builder()
	n := b.addStateless("filternot", collect(opts), func(c *nodeInstance, r record) error {
		if !drop(as[K](r.key), as[V](r.value)) {
			return c.forward(r)
		}
		return nil
	}, s.n)
	b.checkFunc(n, drop == nil, "predicate")
	return KStream[K, V]{b: b, n: n, keyChanged: s.keyChanged}
}

// Peek calls fn for every record and passes the record on unchanged.
func (s KStream[K, V]) Peek(fn func(K, V), opts ...Option) KStream[K, V] {
	b := s.builder()
	n := b.addStateless("peek", collect(opts), func(c *nodeInstance, r record) error {
		fn(as[K](r.key), as[V](r.value))
		return c.forward(r)
	}, s.n)
	b.checkFunc(n, fn == nil, "function")
	return KStream[K, V]{b: b, n: n, keyChanged: s.keyChanged}
}

// Merge returns a stream with the records of s and all of others,
// interleaved in the order they are processed. Merged streams end up in
// the same sub-topology, so their source topics must be co-partitioned.
func (s KStream[K, V]) Merge(others ...KStream[K, V]) KStream[K, V] {
	return merge(s, others, options{})
}

// Merge is KStream.Merge of the first of streams with the others, taking
// options: Named names the merge node. streams must not be empty.
func Merge[K, V any](streams []KStream[K, V], opts ...Option) KStream[K, V] {
	if len(streams) == 0 {
		panic("topology: Merge of no streams")
	}
	return merge(streams[0], streams[1:], collect(opts))
}

func merge[K, V any](s KStream[K, V], others []KStream[K, V], o options) KStream[K, V] {
	b := s.builder()
	parents := []*node{s.n}
	changed := s.keyChanged
	foreign := false
	for _, other := range others {
		if other.b != b {
			foreign = true
			continue
		}
		parents = append(parents, other.n)
		changed = changed || other.keyChanged
	}
	n := b.addStateless("merge", o, func(c *nodeInstance, r record) error {
		return c.forward(r)
	}, parents...)
	if foreign {
		b.errorf("%s: merges a stream from another Builder", n.label())
	}
	return KStream[K, V]{b: b, n: n, keyChanged: changed}
}

// To writes every record to topic, encoding keys with keySerde and values
// with valueSerde. The runtime picks the partition from the encoded key with
// Kafka's default partitioner (see Partition).
func (s KStream[K, V]) To(topic string, keySerde serde.Serde[K], valueSerde serde.Serde[V], opts ...Option) {
	addSink(s.builder(), s.n, TopicRef{Name: topic}, keySerde, valueSerde, collect(opts))
}

// Map replaces every record with the key and value fn returns. Grouping the
// result by key repartitions it.
func Map[K, V, K2, V2 any](s KStream[K, V], fn func(K, V) (K2, V2), opts ...Option) KStream[K2, V2] {
	b := s.builder()
	n := b.addStateless("map", collect(opts), func(c *nodeInstance, r record) error {
		k, v := fn(as[K](r.key), as[V](r.value))
		return c.forward(record{key: k, value: v, ts: r.ts, headers: r.headers})
	}, s.n)
	b.checkFunc(n, fn == nil, "function")
	return KStream[K2, V2]{b: b, n: n, keyChanged: true}
}

// SelectKey replaces every record's key with the one fn returns. Grouping the
// result by key repartitions it.
func SelectKey[K, V, K2 any](s KStream[K, V], fn func(K, V) K2, opts ...Option) KStream[K2, V] {
	return selectKey(s, "selectkey", fn, collect(opts))
}

func selectKey[K, V, K2 any](s KStream[K, V], op string, fn func(K, V) K2, o options) KStream[K2, V] {
	b := s.builder()
	n := b.addStateless(op, o, func(c *nodeInstance, r record) error {
		k := fn(as[K](r.key), as[V](r.value))
		return c.forward(record{key: box(k, r.value, r.key), value: r.value, valueNull: r.valueNull, ts: r.ts, headers: r.headers})
	}, s.n)
	b.checkFunc(n, fn == nil, "function")
	return KStream[K2, V]{b: b, n: n, keyChanged: true}
}

// MapValues replaces every record's value with the one fn returns, keeping
// the key, so no repartitioning is needed downstream.
func MapValues[K, V, V2 any](s KStream[K, V], fn func(K, V) V2, opts ...Option) KStream[K, V2] {
	b := s.builder()
	n := b.addStateless("mapvalues", collect(opts), func(c *nodeInstance, r record) error {
		v := fn(as[K](r.key), as[V](r.value))
		return c.forward(record{key: r.key, keyNull: r.keyNull, value: v, ts: r.ts, headers: r.headers})
	}, s.n)
	b.checkFunc(n, fn == nil, "function")
	return KStream[K, V2]{b: b, n: n, keyChanged: s.keyChanged}
}

// FlatMap replaces every record with the zero or more records fn returns.
// Grouping the result by key repartitions it.
func FlatMap[K, V, K2, V2 any](s KStream[K, V], fn func(K, V) []KeyValue[K2, V2], opts ...Option) KStream[K2, V2] {
	b := s.builder()
	n := b.addStateless("flatmap", collect(opts), func(c *nodeInstance, r record) error {
		for _, kv := range fn(as[K](r.key), as[V](r.value)) {
			if err := c.forward(record{key: kv.Key, value: kv.Value, ts: r.ts, headers: r.headers}); err != nil {
				return err
			}
		}
		return nil
	}, s.n)
	b.checkFunc(n, fn == nil, "function")
	return KStream[K2, V2]{b: b, n: n, keyChanged: true}
}

// FlatMapValues replaces every record with one record per value fn returns,
// each with the original key.
func FlatMapValues[K, V, V2 any](s KStream[K, V], fn func(K, V) []V2, opts ...Option) KStream[K, V2] {
	b := s.builder()
	n := b.addStateless("flatmapvalues", collect(opts), func(c *nodeInstance, r record) error {
		out := record{key: r.key, keyNull: r.keyNull, ts: r.ts, headers: r.headers}
		vs := fn(as[K](r.key), as[V](r.value))
		if ss, ok := any(vs).([]string); ok && len(ss) > 1 {
			// Boxed one by one, a line's words cost an allocation each;
			// boxed in a copy of the slice, one for them all.
			boxes := newStringBoxes(ss)
			for i := range boxes {
				out.value = boxes.at(i)
				if err := c.forward(out); err != nil {
					return err
				}
			}
			return nil
		}
		for _, v := range vs {
			out.value = v
			if err := c.forward(out); err != nil {
				return err
			}
		}
		return nil
	}, s.n)
	b.checkFunc(n, fn == nil, "function")
	return KStream[K, V2]{b: b, n: n, keyChanged: s.keyChanged}
}

// box converts v to a graph value, reusing one of the already boxed values
// when v is a string that is one of them, bytes and all (a key selector
// returning the value, say), so that no second copy of the string header
// is allocated. Strings are immutable, so sharing the box is invisible.
func box[T any](v T, boxed ...any) any {
	if s, ok := any(v).(string); ok {
		for _, b := range boxed {
			if bs, ok := b.(string); ok && len(bs) == len(s) && unsafe.StringData(bs) == unsafe.StringData(s) {
				return b
			}
		}
	}
	return v
}

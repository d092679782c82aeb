package topology

import (
	"bytes"
	"fmt"
	"strconv"
	"time"
	"unsafe"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
)

// Builder assembles a topology: sources created with Stream and Table,
// operators applied to the streams and tables they return, sinks added with
// KStream.To, and stores declared with AddStore. Mistakes are recorded as
// they happen and reported together by Build, so DSL calls can be chained
// without checking errors at each step.
//
// A Builder is not safe for concurrent use.
type Builder struct {
	nodes  []*node
	stores []StoreInfo
	// globals are the global tables, whose stores belong to no task.
	globals []*globalTable
	// storeOwner names who declared each store, for error messages.
	storeOwner map[string]string
	errs       []error
	// combiners counts the combiner nodes among nodes, which generated
	// names do not count, so that turning combining on or off leaves the
	// names of the other nodes as they were.
	combiners int
	// bareValues: table and time-window stores keep their values without
	// timestamps (BareStoreValues).
	bareValues bool
}

// NewBuilder returns an empty Builder.
func NewBuilder() *Builder {
	return &Builder{storeOwner: make(map[string]string)}
}

// BareStoreValues makes the topology's table and time-window stores keep
// their values without the timestamp of each (StoreInfo.Timestamped
// false), as builds before timestamped stores did, so that such builds
// can read them: use it for the first rolling bounce of an upgrade from
// such a build, and build without it for a second. Meanwhile results are
// stamped as those builds stamped them, with the time of the record that
// updated them.
func (b *Builder) BareStoreValues() { b.bareValues = true }

// AddStore declares a key-value store for processors added with Process.
// DSL aggregations and tables declare their own stores; do not declare
// those again. A store must be used by at least one processor, and all the
// processors that use it must end up in the same sub-topology.
func (b *Builder) AddStore(spec StoreInfo) {
	b.declareStore(spec, "AddStore")
}

func (b *Builder) declareStore(spec StoreInfo, owner string) {
	if spec.Name == "" {
		b.errorf("%s: store name is empty", owner)
		return
	}
	b.checkName("store", spec.Name)
	if prev, dup := b.storeOwner[spec.Name]; dup {
		b.errorf("store %q is declared twice (by %s and by %s)", spec.Name, prev, owner)
		return
	}
	b.storeOwner[spec.Name] = owner
	b.stores = append(b.stores, spec)
}

// maxNameLen bounds user-given names: every internal topic name contains
// one, and Kafka refuses topic names longer than 249 characters.
const maxNameLen = 249

// checkName records an error for a user-given name (of a node, store or
// repartition topic) that could not be part of a Kafka topic name: empty,
// longer than maxNameLen, or with characters other than ASCII letters,
// digits, '.', '_' and '-'. Node names are held to the same rule as store
// and topic names, since a join's or Repartition's node name becomes part
// of a topic name.
func (b *Builder) checkName(what, name string) {
	if name == "" {
		b.errorf("%s name is empty", what)
		return
	}
	if len(name) > maxNameLen {
		b.errorf("%s name %q is longer than %d characters", what, name, maxNameLen)
		return
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			b.errorf("%s name %q has the character %q; use only ASCII letters, digits, '.', '_' and '-'", what, name, r)
			return
		}
	}
	if name == "." || name == ".." {
		b.errorf("%s name %q is not allowed", what, name)
	}
}

func (b *Builder) errorf(format string, args ...any) {
	b.errs = append(b.errs, fmt.Errorf("topology: "+format, args...))
}

type nodeKind int

const (
	kindSource nodeKind = iota
	kindProcessor
	kindSink
)

// node is one vertex of the processor graph. The graph is untyped: typed
// DSL functions capture their types in the closures they store here.
type node struct {
	id       int
	name     string
	kind     nodeKind
	parents  []*node
	children []*node
	stores   []string
	// versionedResults names the versioned store an aggregation or table
	// join keeps its results in (declareResultStore), "" for none, and
	// resultHistory its history retention in milliseconds.
	versionedResults string
	resultHistory    int64
	// sub is the node's sub-topology, set by Build.
	sub int

	// topic is the topic a source reads or a sink writes.
	topic TopicRef
	// partitions is the partition count asked for a repartition topic, on
	// the sink that writes it.
	partitions int32

	decode func(graph.InputRecord) (record, error)
	// keyOnlyDecode, on a repartition source whose serdes cannot fail to
	// decode, is the decode Build gives it when all its children are
	// keyOnly: the record keeps the key's bytes (srcKey) and neither key
	// nor value is decoded.
	keyOnlyDecode func(graph.InputRecord) (record, error)
	// keyOnly marks an aggregation that accepts such records.
	keyOnly bool
	// extract, on a source with a TimestampExtractor, gives a decoded
	// record its event time.
	extract func(record) (time.Time, error)
	encode  func(record) (key, value []byte, err error)
	newProc func() (procImpl, error)
	// relaxedNullKeys marks a join that keeps keyless records (left and
	// outer joins, KIP-962); dropNullKeys, set by Build on a sink writing a
	// repartition topic with no such join downstream, drops them there, as
	// Kafka Streams' repartitions do.
	relaxedNullKeys, dropNullKeys bool
	// joins is the table node a stream-table join reads the store of: not
	// a parent, since table updates must not reach the join, but it keeps
	// both in one sub-topology.
	joins *node
	// globals are the global stores a stream-global-table join reads:
	// not stores of the node's task, but handed to it by the runtime.
	globals []string
	// readsMeta marks a node whose processor can ask for the metadata of
	// the record being processed (a user Processor).
	readsMeta bool
	// olds says whether and how a table node can send the old value with
	// each update; sendOld, set by requireOldValues, says it must.
	olds    oldValues
	sendOld bool
	// fullOld, with sendOld, says a node downstream reads the old values'
	// contents; without it, each old value need only say whether the
	// table held the key (all a table join's side asks), which a table
	// reading its own store tells without decoding the value.
	fullOld bool
	// oldsToo are the table nodes that send old values whenever this one
	// must: a table join's two tables, as Kafka Streams' joins enable
	// sending old values upstream when their result must send them.
	oldsToo []*node
	// fullOldsToo makes the oldsToo send their old values in full, which
	// a table join's sides read to compute the result's.
	fullOldsToo bool
}

// oldValues is how a table node knows a key's previous value.
type oldValues int

const (
	// noOldValues: the node cannot tell. Every DSL table node can; the
	// zero value is for the nodes that are no tables, and for the result
	// of a join refused for joining tables of two Builders.
	noOldValues oldValues = iota
	// ownOldValues: the node reads it from its store.
	ownOldValues
	// parentOldValues: the node computes it from its parent's.
	parentOldValues
	// joinedOldValues: the node, a table join's result without a store,
	// is sent it by the join's sides, which compute it from the old
	// values of both joined tables (oldsToo).
	joinedOldValues
)

// requireOldValues makes the table node n, and the nodes it derives old
// values from, send each update's old value, as a table aggregation needs
// to retract it. user names the node that needs them, for the error when n
// is no table that can (a Builder misused, which Build reports anyway).
func (b *Builder) requireOldValues(n *node, user string) {
	b.sendOldValues(n, user, true)
}

// sendOldValues is requireOldValues, full saying whether n's old values
// must carry their contents (see node.fullOld). A node that computes its
// old values from its parent's needs the parent's in full whatever its
// own readers need, since the operator decides whether it held the key.
func (b *Builder) sendOldValues(n *node, user string, full bool) {
	for {
		n.fullOld = n.fullOld || full
		full = true
		switch n.olds {
		case ownOldValues:
			n.sendOld = true
			for _, t := range n.oldsToo {
				b.sendOldValues(t, user, n.fullOldsToo)
			}
			return
		case parentOldValues:
			n.sendOld = true
			n = n.parents[0]
		case joinedOldValues:
			n.sendOld = true
			for _, t := range n.oldsToo {
				b.sendOldValues(t, user, true)
			}
			return
		default:
			b.errorf("%s: %s cannot send the old values of its updates, which it needs", user, n.label())
			return
		}
	}
}

// label names the node in error messages.
func (n *node) label() string {
	switch n.kind {
	case kindSource:
		return fmt.Sprintf("source %q", n.name)
	case kindSink:
		return fmt.Sprintf("sink %q", n.name)
	default:
		return fmt.Sprintf("processor %q", n.name)
	}
}

// record is a record inside a task's graph. Keys and values always hold
// values of the stream's static types; a Kafka null is carried as the zero
// value plus a flag, because most Go types have no null of their own.
type record struct {
	key, value         any
	keyNull, valueNull bool
	// notLatest marks a table update that is not its key's latest value:
	// an out-of-order update of a versioned table, which went into the
	// key's history only (KIP-914). Operators that keep a latest-only
	// result (table joins, re-grouping) drop it; the others pass it on.
	// Beside the other flags, it takes no room of its own.
	notLatest bool
	// partial marks a record read from a repartition topic that carries a
	// partial aggregate (CombinedHeader) rather than a raw value: only the
	// mergeable aggregation reading the topic receives it (see
	// acceptPartials).
	partial bool
	ts      time.Time
	headers []Header
	// srcKey is the key's bytes as a source read them, set by the source
	// and meaningful only to the source's own children: an aggregation
	// reading a repartition topic, whose key serde is its store's, uses
	// them as the store key instead of encoding the key again. Nodes
	// further down may have changed the key without clearing it.
	srcKey []byte
	// old is, on a table update from a node whose sendOld is set, the
	// value the table held for the key before it; nil elsewhere.
	old *prior
}

// prior is a table's value for a key before an update: null when the
// table did not hold the key.
type prior struct {
	value any
	null  bool
}

// as converts a graph value back to its static type. The comma-ok form
// keeps nil interface values (zero values of interface types) from
// panicking.
func as[T any](v any) T {
	t, _ := v.(T)
	return t
}

func (b *Builder) addNode(kind nodeKind, op string, o options, parents ...*node) *node {
	n := &node{id: len(b.nodes), kind: kind, name: o.name}
	if n.name == "" {
		n.name = op + "-" + strconv.Itoa(n.id-b.combiners)
	} else if !o.derived {
		b.checkName("node", n.name)
	}
	for _, p := range parents {
		p.children = append(p.children, n)
		n.parents = append(n.parents, p)
	}
	b.nodes = append(b.nodes, n)
	return n
}

// addProcessor adds a processor node whose instances run proc.
func (b *Builder) addProcessor(op string, o options, proc func() procImpl, parents ...*node) *node {
	n := b.addNode(kindProcessor, op, o, parents...)
	n.newProc = func() (procImpl, error) { return proc(), nil }
	return n
}

// addStateless adds a processor node with no state: fn runs for every
// record.
func (b *Builder) addStateless(op string, o options, fn func(*nodeInstance, record) error, parents ...*node) *node {
	return b.addProcessor(op, o, func() procImpl { return statelessProc(fn) }, parents...)
}

func addSource[K, V any](b *Builder, topic TopicRef, ks serde.Serde[K], vs serde.Serde[V], o options) *node {
	n := b.addNode(kindSource, "source", o)
	n.topic = topic
	if topic.Name == "" {
		b.errorf("%s: topic name is empty", n.label())
	}
	b.checkSerdes(n, ks == nil, vs == nil)
	if o.extractor != nil {
		fn, ok := o.extractor.(TimestampExtractor[K, V])
		if !ok || fn == nil {
			b.errorf("%s: timestamp extractor is %T, want a non-nil topology.TimestampExtractor[%T, %T]", n.label(), o.extractor, zero[K](), zero[V]())
		} else {
			n.extract = func(r record) (time.Time, error) {
				return fn(Record[K, V]{Key: as[K](r.key), Value: as[V](r.value), Timestamp: r.ts, Headers: r.headers})
			}
		}
	}
	if isStringSerde(ks) && isStringSerde(vs) {
		n.decode = decodeStrings
		return n
	}
	if isBytesSerde(ks) && isBytesSerde(vs) {
		n.decode = decodeBytes
		return n
	}
	n.decode = func(in graph.InputRecord) (record, error) {
		r := record{ts: in.Timestamp, headers: in.Headers, srcKey: in.Key}
		var err error
		if in.Key == nil {
			r.key, r.keyNull = zero[K](), true
		} else if r.key, err = ks.Decode(in.Key); err != nil {
			return r, fmt.Errorf("key: %w", err)
		}
		if in.Value == nil {
			r.value, r.valueNull = zero[V](), true
		} else if r.value, err = vs.Decode(in.Value); err != nil {
			return r, fmt.Errorf("value: %w", err)
		}
		return r, nil
	}
	return n
}

func addSink[K, V any](b *Builder, parent *node, topic TopicRef, ks serde.Serde[K], vs serde.Serde[V], o options) *node {
	n := b.addNode(kindSink, "sink", o, parent)
	n.topic = topic
	if topic.Name == "" {
		b.errorf("%s: topic name is empty", n.label())
	}
	b.checkSerdes(n, ks == nil, vs == nil)
	if isStringSerde(ks) && isStringSerde(vs) {
		n.encode = encodeStrings
		return n
	}
	n.encode = func(r record) (key, value []byte, err error) {
		if !r.keyNull {
			if key, err = ks.Encode(as[K](r.key)); err != nil {
				return nil, nil, fmt.Errorf("key: %w", err)
			}
		}
		if !r.valueNull {
			if value, err = vs.Encode(as[V](r.value)); err != nil {
				return nil, nil, fmt.Errorf("value: %w", err)
			}
		}
		return key, value, nil
	}
	return n
}

// isStringSerde reports whether s is serde.String, whose encoding the graph
// may perform itself. Only a Serde[string] can equal it, so T is string
// when it reports true.
func isStringSerde[T any](s serde.Serde[T]) bool {
	ss, ok := any(s).(serde.Serde[string])
	return ok && ss == serde.String
}

// decodeStrings is a source's decode when key and value are both
// serde.String. It copies the key and value out of the input in one
// allocation, and once when they are equal (as in a stream grouped by its
// value), sharing the boxed string: strings are immutable, so sharing is
// invisible.
func decodeStrings(in graph.InputRecord) (record, error) {
	r := record{ts: in.Timestamp, headers: in.Headers, srcKey: in.Key}
	switch {
	case in.Key == nil && in.Value == nil:
		r.key, r.value, r.keyNull, r.valueNull = "", "", true, true
	case in.Key == nil:
		r.key, r.keyNull, r.value = "", true, string(in.Value)
	case in.Value == nil:
		r.key, r.value, r.valueNull = string(in.Key), "", true
	case bytes.Equal(in.Key, in.Value):
		r.key = string(in.Key)
		r.value = r.key
	default:
		buf := make([]byte, len(in.Key)+len(in.Value))
		n := copy(buf, in.Key)
		copy(buf[n:], in.Value)
		s := unsafe.String(unsafe.SliceData(buf), len(buf))
		r.key, r.value = s[:n], s[n:]
	}
	return r, nil
}

// decodeBytes is a source's decode when key and value are both
// serde.Bytes: the copies serde.Bytes.Decode makes of them, in one
// allocation. The key's copy is capped at its length, so an append to it
// cannot reach the value.
func decodeBytes(in graph.InputRecord) (record, error) {
	r := record{ts: in.Timestamp, headers: in.Headers, srcKey: in.Key}
	buf := make([]byte, len(in.Key)+len(in.Value))
	n := copy(buf, in.Key)
	copy(buf[n:], in.Value)
	r.key, r.keyNull = decodedBytes(in.Key, buf[:n:n])
	r.value, r.valueNull = decodedBytes(in.Value, buf[n:])
	return r, nil
}

// decodedBytes is what a source holds for in, given its copy: as
// serde.Bytes.Decode, nil for an empty input, and null for a nil one.
func decodedBytes(in, copied []byte) (v any, null bool) {
	if len(in) == 0 {
		return []byte(nil), in == nil
	}
	return copied, false
}

// decodeKeyOnly is a repartition source's decode for aggregations that
// read only the key's bytes (keyOnlyDecode): the word count's Count needs
// a word's bytes as its store key and nothing else, and a word decoded
// into a string, boxed, costs two allocations per record.
func decodeKeyOnly(in graph.InputRecord) (record, error) {
	return record{ts: in.Timestamp, headers: in.Headers, srcKey: in.Key, keyNull: in.Key == nil, valueNull: in.Value == nil}, nil
}

// keyOnlyDecode returns the decode of raw records a repartition source may
// use when only keyOnly aggregations read it, or nil: the key serde must
// be serde.String, whose key an aggregation can make from the bytes
// later, and the value serde one whose Decode never fails, so that
// skipping it hides no deserialization error. The caller wraps it to
// refuse or accept partial aggregates.
func keyOnlyDecode[K, V any](ks serde.Serde[K], vs serde.Serde[V]) func(graph.InputRecord) (record, error) {
	if !isStringSerde(ks) || !infallibleDecode(vs) {
		return nil
	}
	return decodeKeyOnly
}

// infallibleDecode reports whether s is a serde whose Decode never fails:
// serde.String or serde.Bytes.
func infallibleDecode[T any](s serde.Serde[T]) bool {
	return isStringSerde(s) || isBytesSerde(s)
}

func isBytesSerde[T any](s serde.Serde[T]) bool {
	bs, ok := any(s).(serde.Serde[[]byte])
	return ok && bs == serde.Bytes
}

// encodeStrings is a sink's encode when key and value are both
// serde.String: the bytes returned are the strings' own, no copy made.
// Nothing writes to a sink's bytes (the producer and the test driver only
// read them; graph.OutputRecord), and their capacity is their length, so
// an append copies them.
func encodeStrings(r record) (key, value []byte, err error) {
	if !r.keyNull {
		key = stringBytes(as[string](r.key))
	}
	if !r.valueNull {
		value = stringBytes(as[string](r.value))
	}
	return key, value, nil
}

// stringBytes returns s's bytes without copying them, and an empty slice,
// not nil (a Kafka null), for the empty string. The bytes must never be
// written.
func stringBytes(s string) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

func (b *Builder) checkSerdes(n *node, keyNil, valueNil bool) {
	if keyNil {
		b.errorf("%s: key serde is nil", n.label())
	}
	if valueNil {
		b.errorf("%s: value serde is nil", n.label())
	}
}

func (b *Builder) checkFunc(n *node, isNil bool, what string) {
	if isNil {
		b.errorf("%s: %s is nil", n.label(), what)
	}
}

func zero[T any]() T {
	var z T
	return z
}

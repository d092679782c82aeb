package topology

// Combining before the repartition: an associative aggregation of a
// re-keyed stream folds the records of each key into a partial aggregate in
// the sub-topology that writes the repartition topic, and sends partials
// instead of raw records; the aggregation merges them into its store. See
// DESIGN.md, "Combining before the repartition".

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
)

// CombinedHeader is the header that marks a repartition record carrying a
// partial aggregate rather than a raw record. Its value is the format
// version, CombinedVersion. Raw records do not carry it.
const CombinedHeader = "eddy.combined"

// CombinedVersion is the format of partial aggregates this build writes and
// reads: the record's key is the grouping key encoded with the grouping's
// key serde, its value one partial aggregate encoded with the aggregation's
// store serde (serde.Int64 for Count).
const CombinedVersion = "1"

// CombineLimit bounds the keys one task's combiner holds: when a new key
// would exceed it, every partial is sent at once, so memory stays bounded
// however many keys arrive between two commits.
const CombineLimit = 1 << 14

// WithoutCombining turns combining off for an aggregation of a re-keyed
// stream (Count, Reduce, Aggregate): raw records go through the
// repartition topic, as in Kafka Streams. Combining is on by default for
// Count and Reduce and for Aggregate given WithMerger; use this for a
// reducer that is not associative.
func WithoutCombining() Option { return func(o *options) { o.noCombine = true } }

// WithMerger gives Aggregate the function that merges two partial
// aggregates of one key, which lets it combine before the repartition.
// K and A must be the aggregation's key and aggregate types. merge must
// satisfy merge(k, fold(init(), xs), fold(init(), ys)) == fold(init(),
// xs ++ ys), where fold applies the adder to each value in turn.
func WithMerger[K, A any](merge func(key K, agg, partial A) A) Option {
	return func(o *options) { o.merger = merge }
}

// combining is a grouping's combined aggregation, kept so that it can be
// undone when a second aggregation of the grouping needs raw records.
type combining struct {
	b       *Builder
	combine *node
	sink    *node
	source  *node
	agg     *node
	// raw* are what the sink, source and aggregation use without
	// combining.
	rawEncode  func(record) ([]byte, []byte, error)
	rawDecode  func(graph.InputRecord) (record, error)
	rawKeyOnly func(graph.InputRecord) (record, error)
	rawNewProc func() (procImpl, error)
	// rawAggKeyOnly is the plain aggregation's keyOnly.
	rawAggKeyOnly bool
}

// undo turns the combined aggregation back into a plain one: the combiner
// leaves the graph, the sink writes raw values, the source refuses partials
// and the aggregation applies its step to each record.
func (c *combining) undo() {
	parent := c.combine.parents[0]
	i := slices.Index(parent.children, c.combine)
	parent.children[i] = c.sink
	c.sink.parents = []*node{parent}
	c.b.nodes = slices.DeleteFunc(c.b.nodes, func(n *node) bool { return n == c.combine })
	c.b.combiners--
	for i, n := range c.b.nodes {
		n.id = i
	}
	c.sink.encode = c.rawEncode
	c.source.decode = c.rawDecode
	c.source.keyOnlyDecode = c.rawKeyOnly
	c.agg.newProc = c.rawNewProc
	c.agg.keyOnly = c.rawAggKeyOnly
}

// rawValue wraps a raw record's value read from a combined aggregation's
// repartition topic (one written before combining was turned on), so that
// the aggregation tells it from a partial aggregate of the same type.
type rawValue[V any] struct{ v V }

// combinedInput adds the combiner, repartition sink and source of a
// combined aggregation and returns the source. step folds one value into a
// partial; the caller builds the aggregation on the source with
// mergeStep.
func combinedInput[K, V, A any](g *grouping[K, V], store string, aggSerde serde.Serde[A], step func(K, V, A, bool) A) *node {
	topic := g.topic(store)
	comb := g.b.addProcessor("combine", options{name: topic.Name + "-combine", derived: true}, func() procImpl {
		return &combineProc[K, V, A]{keySerde: g.keySerde, step: step}
	}, g.parent)
	g.b.combiners++
	sink := addSink(g.b, comb, topic, g.keySerde, aggSerde, options{name: topic.Name + "-sink", derived: true})
	sink.partitions = g.partitions
	if g.partitions < 0 {
		g.b.errorf("%s: partition count %d is negative", sink.label(), g.partitions)
	}
	src := addSource(g.b, topic, g.keySerde, aggSerde, options{name: topic.Name + "-source", derived: true})
	src.decode = decodeCombined(topic.Name, g.keySerde, g.valueSerde, aggSerde)
	g.source = src

	// The plain encoder and decoder, in case a second aggregation undoes
	// the combining: built on a scratch builder so that this one gains no
	// nodes.
	var scratch Builder
	rawSink := addSink(&scratch, &node{}, topic, g.keySerde, g.valueSerde, options{})
	rawSrc := addSource(&scratch, topic, g.keySerde, g.valueSerde, options{})
	g.combined = &combining{
		b: g.b, combine: comb, sink: sink, source: src,
		rawEncode: rawSink.encode, rawDecode: refusePartials(topic.Name, rawSrc.decode),
		rawKeyOnly: keyOnlyDecode(topic.Name, g.keySerde, g.valueSerde),
	}
	return src
}

// mergeStep is the step of a combined aggregation: a partial aggregate is
// merged into the key's aggregate (or becomes it), and a raw record, which
// the topic may still hold from before combining was turned on, is folded
// in with the plain step.
func mergeStep[K, V, A any](step func(K, V, A, bool) A, merge func(K, A, A) A) func(K, any, A, bool) A {
	return func(k K, v any, agg A, found bool) A {
		if raw, ok := v.(rawValue[V]); ok {
			return step(k, raw.v, agg, found)
		}
		p := as[A](v)
		if !found {
			return p
		}
		return merge(k, agg, p)
	}
}

// combinedVersion returns the value of the CombinedHeader among hs and the
// headers without it.
func combinedVersion(hs []Header) (version string, found bool, rest []Header) {
	for i, h := range hs {
		if h.Key == CombinedHeader {
			rest = append(slices.Clip(hs[:i]), hs[i+1:]...)
			return string(h.Value), true, rest
		}
	}
	return "", false, hs
}

// decodeCombined decodes the records of a combined aggregation's
// repartition topic: partials (marked with CombinedHeader) with the
// aggregate serde, unmarked raw records with the value serde.
func decodeCombined[K, V, A any](topic string, ks serde.Serde[K], vs serde.Serde[V], as serde.Serde[A]) func(graph.InputRecord) (record, error) {
	return func(in graph.InputRecord) (record, error) {
		version, partial, headers := combinedVersion(in.Headers)
		r := record{ts: in.Timestamp, headers: headers, srcKey: in.Key}
		if partial && version != CombinedVersion {
			return r, fmt.Errorf("repartition topic %q: record carries partial aggregate format %s=%q; this build reads format %q only", topic, CombinedHeader, version, CombinedVersion)
		}
		var err error
		if in.Key == nil {
			r.key, r.keyNull = zero[K](), true
		} else if r.key, err = ks.Decode(in.Key); err != nil {
			return r, fmt.Errorf("key: %w", err)
		}
		switch {
		case in.Value == nil && partial:
			return r, fmt.Errorf("repartition topic %q: partial aggregate with a null value", topic)
		case in.Value == nil:
			r.value, r.valueNull = rawValue[V]{}, true
		case partial:
			if r.value, err = as.Decode(in.Value); err != nil {
				return r, fmt.Errorf("partial aggregate: %w", err)
			}
		default:
			v, err := vs.Decode(in.Value)
			if err != nil {
				return r, fmt.Errorf("value: %w", err)
			}
			r.value = rawValue[V]{v}
		}
		return r, nil
	}
}

// refusePartials wraps the decoder of a plain aggregation's repartition
// topic so that partial aggregates, which it cannot decode as values, are
// refused with an error that says what they are, instead of being read as
// garbage.
func refusePartials(topic string, decode func(graph.InputRecord) (record, error)) func(graph.InputRecord) (record, error) {
	return func(in graph.InputRecord) (record, error) {
		if len(in.Headers) > 0 {
			if version, ok, _ := combinedVersion(in.Headers); ok {
				return record{ts: in.Timestamp}, fmt.Errorf("repartition topic %q: record carries a partial aggregate (%s=%q) but the aggregation reading it does not combine; turn combining back on, or let the topic drain before turning it off", topic, CombinedHeader, version)
			}
		}
		return decode(in)
	}
}

// combineProc is the combiner: one task's partial aggregates since its
// last commit, sent downstream at every commit (the task graph's Flush),
// when CombineLimit keys are held, and, when the task does not buffer table
// updates, after every record. It never persists them: after a crash the
// input they came from is processed again.
type combineProc[K, V, A any] struct {
	keySerde serde.Serde[K]
	step     func(K, V, A, bool) A
	// index maps a key (itself when K is string, else its encoding) to
	// its entry in parts, which keeps the order keys were first seen.
	index     map[string]int
	stringKey bool
	parts     []partial[K, A]
}

type partial[K, A any] struct {
	key any
	agg A
	// ts is the latest time of the records combined, which the
	// aggregation takes as their partial aggregate's, as it would have
	// taken the latest of theirs one by one.
	ts      time.Time
	headers []Header
}

func (p *combineProc[K, V, A]) init(*nodeInstance) error {
	p.index = make(map[string]int)
	_, p.stringKey = any(zero[K]()).(string)
	return nil
}

var combinedMarker = Header{Key: CombinedHeader, Value: []byte(CombinedVersion)}

// marked returns hs with the combined marker appended, leaving hs's
// backing array alone.
func marked(hs []Header) []Header {
	return append(slices.Clip(hs), combinedMarker)
}

func (p *combineProc[K, V, A]) process(c *nodeInstance, r record) error {
	if r.keyNull || r.valueNull {
		return nil // dropped, as the aggregation would drop it
	}
	k, v := as[K](r.key), as[V](r.value)
	if !c.task.buffered {
		agg := p.step(k, v, zero[A](), false)
		return c.forward(record{key: r.key, value: agg, ts: r.ts, headers: marked(r.headers)})
	}
	var id string
	if p.stringKey {
		id = as[string](r.key)
	} else {
		kb, err := p.keySerde.Encode(k)
		if err != nil {
			return fmt.Errorf("encode key: %w", err)
		}
		id = string(kb)
	}
	if i, ok := p.index[id]; ok {
		e := &p.parts[i]
		e.agg = p.step(k, v, e.agg, true)
		if r.ts.After(e.ts) {
			e.ts = r.ts
		}
		e.headers = r.headers
		return nil
	}
	if len(p.parts) >= CombineLimit {
		if err := p.flush(c); err != nil {
			return err
		}
	}
	key := r.key
	if p.stringKey {
		s := as[string](key)
		// A key string may share the bytes of a whole input record (a
		// word of a line); held until the commit, it would keep the
		// record alive.
		s = strings.Clone(s)
		key, id = s, s
	}
	p.index[id] = len(p.parts)
	p.parts = append(p.parts, partial[K, A]{key: key, agg: p.step(k, v, zero[A](), false), ts: r.ts, headers: r.headers})
	return nil
}

// flush sends every partial, in the order their keys were first seen, each
// with the timestamp and headers of the last record folded into it.
func (p *combineProc[K, V, A]) flush(c *nodeInstance) error {
	parts := p.parts
	p.parts = p.parts[:0]
	clear(p.index)
	defer clear(parts)
	for i := range parts {
		e := &parts[i]
		c.ts = e.ts
		if err := c.forward(record{key: e.key, value: e.agg, ts: e.ts, headers: marked(e.headers)}); err != nil {
			return err
		}
	}
	return nil
}

// discard drops the partials: the input they came from will be processed
// again (graph.Discarder).
func (p *combineProc[K, V, A]) discard() {
	clear(p.parts)
	p.parts = p.parts[:0]
	clear(p.index)
}

func (p *combineProc[K, V, A]) close() error {
	p.discard()
	return nil
}

// discarder is a procImpl holding in memory what the input since the last
// commit produced, which must go when that input is to be processed again.
type discarder interface {
	discard()
}

// Discard implements graph.Discarder. Table updates held for the next
// Flush go too: they carry values from the store writes the runtime is
// dropping, and sent later they would publish results of input that is
// to be processed again.
func (g *taskGraph) Discard() {
	for _, in := range g.nodes {
		if d, ok := in.proc.(discarder); ok {
			d.discard()
		}
	}
	for _, u := range g.holding {
		u.discard()
	}
	clear(g.holding)
	g.holding = g.holding[:0]
	g.rewind()
}

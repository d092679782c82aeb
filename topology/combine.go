package topology

// Combining before the repartition: given WithCombining, an associative
// aggregation of a re-keyed stream folds the records of each key into a
// partial aggregate in the sub-topology that writes the repartition topic,
// and sends partials instead of raw records; the aggregation merges them
// into its store. Such an aggregation reads partials whether it combines
// or not, so that combining can be turned on or off over a topic holding
// records of the other kind. See DESIGN.md, "Combining before the
// repartition".

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

// WithCombining makes an aggregation of a re-keyed stream (Count, Reduce,
// Aggregate given WithMerger, after GroupBy or GroupByKey of a re-keyed
// stream) combine before the repartition: each task folds the records of
// a key into one partial aggregate between two commits and sends the
// partials through the repartition topic instead of the raw records.
// Final results are those of the plain aggregation, but a downstream
// operator sees fewer updates than Kafka Streams sends, as with the record
// cache, and Reduce's reducer must be associative. Without a repartition
// there is nothing to combine and the option does nothing. Build fails if
// the aggregation is an Aggregate without WithMerger, has a versioned
// result, or shares its grouping with another aggregation (which needs
// the raw records). See DESIGN.md, "Combining before the repartition".
func WithCombining() Option { return func(o *options) { o.combine = true } }

// WithMerger gives Aggregate the function that merges two partial
// aggregates of one key, which lets it combine before the repartition
// (WithCombining) and read partials from its repartition topic. K and A
// must be the aggregation's key and aggregate types. merge must satisfy
// merge(k, fold(init(), xs), fold(init(), ys)) == fold(init(), xs ++ ys),
// where fold applies the adder to each value in turn.
func WithMerger[K, A any](merge func(key K, agg, partial A) A) Option {
	return func(o *options) { o.merger = merge }
}

// merging is a grouping's only aggregation while it can merge partial
// aggregates (Count, Reduce, Aggregate given WithMerger): its repartition
// source accepts partials as well as raw records, so that partials a
// combining build left in the topic are still counted after combining is
// turned off. It is kept so that it can be undone when a second
// aggregation of the grouping needs the records as raw values.
type merging struct {
	b *Builder
	// combine is the combiner (WithCombining), nil without one.
	combine *node
	source  *node
	agg     *node
	// raw* are what the source and aggregation use when they read raw
	// records only.
	rawDecode  func(graph.InputRecord) (record, error)
	rawKeyOnly func(graph.InputRecord) (record, error)
	rawNewProc func() (procImpl, error)
}

// undo makes the source refuse partials and the aggregation apply its
// step to raw values only. A combiner cannot be undone: the aggregation
// asked for it explicitly, so the topology is refused.
func (m *merging) undo() {
	if m.combine != nil {
		m.b.errorf("%s: WithCombining: the grouping is aggregated more than once, and its aggregations share one repartition topic of raw records", m.agg.label())
		return
	}
	m.source.decode = m.rawDecode
	m.source.keyOnlyDecode = m.rawKeyOnly
	m.agg.newProc = m.rawNewProc
}

// mergingInput adds the repartition sink and source of a mergeable
// aggregation, the first of its grouping, and returns the source, which
// reads raw records and partial aggregates alike (acceptPartials). With
// combine, a combiner folding values with step sits before the sink, which
// then writes partials. The caller builds the aggregation on the source
// and completes g.merging.
func mergingInput[K, V, A any](g *grouping[K, V], store string, aggSerde serde.Serde[A], combine bool, step func(K, V, A, bool) A) *node {
	topic := g.topic(store)
	sinkOpts := options{name: topic.Name + "-sink", derived: true}
	m := &merging{b: g.b}
	var sink *node
	if combine {
		m.combine = g.b.addProcessor("combine", options{name: topic.Name + "-combine", derived: true}, func() procImpl {
			return &combineProc[K, V, A]{keySerde: g.keySerde, step: step}
		}, g.parent)
		g.b.combiners++
		sink = addSink(g.b, m.combine, topic, g.keySerde, aggSerde, sinkOpts)
	} else {
		sink = addSink(g.b, g.parent, topic, g.keySerde, g.valueSerde, sinkOpts)
	}
	sink.partitions = g.partitions
	if g.partitions < 0 {
		g.b.errorf("%s: partition count %d is negative", sink.label(), g.partitions)
	}
	src := addSource(g.b, topic, g.keySerde, g.valueSerde, options{name: topic.Name + "-source", derived: true})
	m.source = src
	m.rawDecode = refusePartials(topic.Name, src.decode)
	src.decode = acceptPartials(topic.Name, g.keySerde, aggSerde, src.decode)
	if kd := keyOnlyDecode(g.keySerde, g.valueSerde); kd != nil {
		m.rawKeyOnly = refusePartials(topic.Name, kd)
		src.keyOnlyDecode = acceptPartials(topic.Name, g.keySerde, aggSerde, kd)
	}
	g.source = src
	g.merging = m
	return src
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

// acceptPartials wraps the decoder of a mergeable aggregation's
// repartition topic: a record marked with CombinedHeader is a partial
// aggregate, decoded with the aggregate serde, its marker removed and
// its partial flag set; any other record is raw and goes to raw.
func acceptPartials[K, A any](topic string, ks serde.Serde[K], as serde.Serde[A], raw func(graph.InputRecord) (record, error)) func(graph.InputRecord) (record, error) {
	return func(in graph.InputRecord) (record, error) {
		if len(in.Headers) == 0 {
			return raw(in)
		}
		version, partial, headers := combinedVersion(in.Headers)
		if !partial {
			return raw(in)
		}
		r := record{ts: in.Timestamp, headers: headers, srcKey: in.Key, partial: true}
		if version != CombinedVersion {
			return r, fmt.Errorf("repartition topic %q: record carries partial aggregate format %s=%q; this build reads format %q only", topic, CombinedHeader, version, CombinedVersion)
		}
		if in.Value == nil {
			return r, fmt.Errorf("repartition topic %q: partial aggregate with a null value", topic)
		}
		var err error
		if in.Key == nil {
			r.key, r.keyNull = zero[K](), true
		} else if r.key, err = ks.Decode(in.Key); err != nil {
			return r, fmt.Errorf("key: %w", err)
		}
		if r.value, err = as.Decode(in.Value); err != nil {
			return r, fmt.Errorf("partial aggregate: %w", err)
		}
		return r, nil
	}
}

// refusePartials wraps the decoder of a repartition topic whose readers
// cannot merge partial aggregates, so that partials are refused with an
// error that says what they are instead of being decoded as raw values.
func refusePartials(topic string, decode func(graph.InputRecord) (record, error)) func(graph.InputRecord) (record, error) {
	return func(in graph.InputRecord) (record, error) {
		if len(in.Headers) > 0 {
			if version, ok, _ := combinedVersion(in.Headers); ok {
				return record{ts: in.Timestamp}, fmt.Errorf("repartition topic %q: record carries a partial aggregate (%s=%q), which the aggregations reading it cannot merge (only a grouping's single Count, Reduce or Aggregate given WithMerger can); let the topic drain before such a change", topic, CombinedHeader, version)
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

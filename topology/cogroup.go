package topology

import (
	"strconv"

	"github.com/eddystreams/eddy/serde"
)

// CogroupedKStream is several grouped streams of one key type, each with an
// adder of its own, to be aggregated into one table: Kafka Streams'
// CogroupedKStream (KIP-150). Start one with Cogroup, add streams with
// CogroupWith and finish it with Aggregate. A CogroupedKStream is a value:
// CogroupWith returns a new one and leaves its argument as it was.
type CogroupedKStream[K, A any] struct {
	b      *Builder
	inputs []cogroupInput[K, A]
}

// cogroupInput is one grouped stream of a co-grouping, its value type
// erased so that streams of different value types sit in one list.
type cogroupInput[K, A any] struct {
	// grouping identifies the grouped stream, so that cogrouping one twice
	// replaces its adder, as in Kafka Streams.
	grouping    any
	keySerde    serde.Serde[K]
	repartition bool
	named       bool
	// input returns the node the aggregation reads the stream from (its
	// repartition source, created with the topic named after base unless
	// the grouping has a name or already has a topic).
	input func(base string) *node
	adder func(K, any, A) A
}

// cogrouped is a record's value on its way into a co-grouped aggregation:
// the value and the index of the input it came from, which picks its adder.
type cogrouped struct {
	input int
	value any
}

// Cogroup starts a co-grouping with g, whose values adder folds into the
// aggregate. The co-grouping's aggregation reads g as Aggregate would: a
// re-keyed g goes through its repartition topic first.
func Cogroup[K, V, A any](g KGroupedStream[K, V], adder func(K, V, A) A) CogroupedKStream[K, A] {
	gr := g.grouping()
	return CogroupWith(CogroupedKStream[K, A]{b: gr.b}, g, adder)
}

// CogroupWith returns c with g added, whose values adder folds into the
// aggregate; g's key type is c's, its value type its own. Every grouped
// stream of a co-grouping must have as many partitions as the others
// (Build checks it): a key's records from all of them are aggregated by one
// task. Given a grouped stream c already holds, the new adder replaces the
// old one, as in Kafka Streams.
func CogroupWith[K, V, A any](c CogroupedKStream[K, A], g KGroupedStream[K, V], adder func(K, V, A) A) CogroupedKStream[K, A] {
	gr := g.grouping()
	if c.b == nil {
		panic("topology: use of a zero CogroupedKStream; create one with Cogroup")
	}
	if gr.b != c.b {
		c.b.errorf("Cogroup: a grouped stream from another Builder")
	}
	in := cogroupInput[K, A]{
		grouping: gr, keySerde: gr.keySerde, repartition: gr.repartition, named: gr.name != "",
		input: func(base string) *node { return gr.input(base) },
	}
	if adder != nil {
		in.adder = func(k K, v any, agg A) A { return adder(k, as[V](v), agg) }
	}
	inputs := make([]cogroupInput[K, A], 0, len(c.inputs)+1)
	replaced := false
	for _, old := range c.inputs {
		if old.grouping == in.grouping {
			old.adder, replaced = in.adder, true
		}
		inputs = append(inputs, old)
	}
	if !replaced {
		inputs = append(inputs, in)
	}
	return CogroupedKStream[K, A]{b: c.b, inputs: inputs}
}

// Aggregate folds the values of every grouped stream of c into one
// aggregate per key: init gives a key's starting aggregate, and each
// stream's adder folds in that stream's values. A record with a null key
// or value is dropped. Each result is stamped with the latest time of the
// records folded into it, as Kafka Streams stamps it. Aggregates live in
// the store named store (persistent and logged unless InMemory or
// WithoutLogging is given), keyed with the first grouped stream's key
// serde and encoded with aggSerde.
//
// A re-keyed grouped stream goes through its repartition topic, named
// after its grouping (GroupBy's name) or else "<store>-repartition"; a
// second unnamed re-keyed stream's is "<store>-<i>-repartition", i being
// its place in the co-grouping, where Kafka Streams would fail on two
// topics of one name. Named names the aggregation node (the nodes tagging
// each stream's records are "<name>-cogroup-<i>"). Co-grouped aggregations
// are never combined before the repartition.
func (c CogroupedKStream[K, A]) Aggregate(init func() A, store string, aggSerde serde.Serde[A], opts ...Option) KTable[K, A] {
	if c.b == nil {
		panic("topology: use of a zero CogroupedKStream; create one with Cogroup")
	}
	b := c.b
	o := collect(opts)
	parents, step, missing := c.wire(init, store, o)
	keySerde := c.inputs[0].keySerde
	n := b.addProcessor("cogroup-aggregate", o, func() procImpl {
		return &aggProc[K, cogrouped, A]{store: store, keySerde: keySerde, aggSerde: aggSerde, initial: initialOf(init), step: step, srcKey: true}
	}, parents...)
	n.stores = []string{store}
	n.olds = ownOldValues
	b.declareResultStore(n, store, o)
	if aggSerde == nil {
		b.errorf("%s: store %q: value serde is nil", n.label(), store)
	}
	if init == nil {
		b.errorf("%s: initializer is nil", n.label())
	}
	for _, m := range missing {
		b.errorf("%s: %s is nil", n.label(), m)
	}
	return versionedResult(KTable[K, A]{b: b, n: n, store: store, keySerde: keySerde, valueSerde: aggSerde}, o)
}

// wire adds the nodes that tag each input's records with the input's
// index, reading a re-keyed input from its repartition topic (see
// Aggregate for the topics' names), and returns them with the aggregation
// step, which picks a record's adder by its tag, and the adders missing.
func (c CogroupedKStream[K, A]) wire(init func() A, store string, o options) (parents []*node, step func(K, cogrouped, A, bool) A, missing []string) {
	b := c.b
	adders := make([]func(K, any, A) A, len(c.inputs))
	parents = make([]*node, len(c.inputs))
	unnamed := 0
	for i, in := range c.inputs {
		adders[i] = in.adder
		if in.adder == nil {
			missing = append(missing, "adder "+strconv.Itoa(i))
		}
		base := store
		if in.repartition && !in.named {
			if unnamed > 0 {
				base = store + "-" + strconv.Itoa(i)
			}
			unnamed++
		}
		// Records read back from input 0's repartition topic carry their
		// key encoded with the store's key serde; other inputs' keys are
		// encoded again, their serdes being their own.
		keepSrcKey := i == 0 && in.repartition
		to := options{}
		if o.name != "" {
			to = options{name: o.name + "-cogroup-" + strconv.Itoa(i), derived: true}
		}
		parents[i] = b.addStateless("cogroup-input", to, func(c *nodeInstance, r record) error {
			if r.keyNull || r.valueNull {
				return nil // dropped, as every aggregation drops them
			}
			r.value = cogrouped{input: i, value: r.value}
			if !keepSrcKey {
				r.srcKey = nil
			}
			return c.forward(r)
		}, in.input(base))
	}
	step = func(k K, v cogrouped, agg A, found bool) A {
		if !found {
			agg = init()
		}
		return adders[v.input](k, v.value, agg)
	}
	return parents, step, missing
}

// TimeWindowedCogroupedKStream is a co-grouping cut into time windows,
// ready to be aggregated per key and window: Kafka Streams'
// TimeWindowedCogroupedKStream. Create it with CogroupedKStream.WindowedBy.
type TimeWindowedCogroupedKStream[K, A any] struct {
	c CogroupedKStream[K, A]
	w TimeWindows
}

// WindowedBy cuts the co-grouping c into the time windows w.
func (c CogroupedKStream[K, A]) WindowedBy(w TimeWindows) TimeWindowedCogroupedKStream[K, A] {
	if c.b == nil {
		panic("topology: use of a zero CogroupedKStream; create one with Cogroup")
	}
	if w.size <= 0 {
		c.b.errorf("WindowedBy: zero TimeWindows; use TumblingWindows or HoppingWindows")
	}
	return TimeWindowedCogroupedKStream[K, A]{c: c, w: w}
}

// Aggregate folds the values of every grouped stream of the co-grouping
// into one aggregate per key and window, in the window store named store:
// init gives a window's starting aggregate, and each stream's adder folds
// in that stream's values. Inputs, repartition topics, names and options
// are as for CogroupedKStream.Aggregate; windows, stream time, late
// records and results as for WindowedAggregate, with one difference that
// Kafka Streams has too: each grouped stream has a stream time of its own,
// the latest time of its own records, and a record is late only if that
// time has closed its window. After a restart each starts from the latest
// window the store holds. There is no EmitFinal for co-grouped windows, as
// in Kafka Streams.
func (s TimeWindowedCogroupedKStream[K, A]) Aggregate(init func() A, store string, aggSerde serde.Serde[A], opts ...Option) KTable[Windowed[K], A] {
	if s.c.b == nil {
		panic("topology: use of a zero TimeWindowedCogroupedKStream; create one with CogroupedKStream.WindowedBy")
	}
	o := collect(opts)
	parents, step, missing := s.c.wire(init, store, o)
	if init == nil {
		missing = append([]string{"initializer"}, missing...)
	}
	inputOf := func(v cogrouped) int { return v.input }
	return timeWindowAggregate(s.c.b, "cogroup-windowed-aggregate", store, s.w, false, s.c.inputs[0].keySerde, aggSerde, o, missing, initialOf(init), step, inputOf, parents...)
}

// SlidingWindowedCogroupedKStream is a co-grouping cut into sliding
// windows, ready to be aggregated per key and window: Kafka Streams'
// cogroup(...).windowedBy(SlidingWindows). Create it with
// CogroupedKStream.SlidingWindowedBy.
type SlidingWindowedCogroupedKStream[K, A any] struct {
	c CogroupedKStream[K, A]
	w SlidingWindows
}

// SlidingWindowedBy cuts the co-grouping c into the sliding windows w.
func (c CogroupedKStream[K, A]) SlidingWindowedBy(w SlidingWindows) SlidingWindowedCogroupedKStream[K, A] {
	if c.b == nil {
		panic("topology: use of a zero CogroupedKStream; create one with Cogroup")
	}
	if w.diff <= 0 {
		c.b.errorf("SlidingWindowedBy: zero SlidingWindows; use NewSlidingWindows")
	}
	return SlidingWindowedCogroupedKStream[K, A]{c: c, w: w}
}

// Aggregate folds the values of every grouped stream of the co-grouping
// into one aggregate per key and sliding window, in the window store named
// store and its "<store>-times": init gives a window's starting aggregate,
// and each stream's adder folds in that stream's values. Windows are
// computed as SlidingAggregate computes them without FoldKeptRecords, a
// new window derived from its neighbours in the shared store whichever
// stream wrote them, and each grouped stream has a stream time of its own,
// as for TimeWindowedCogroupedKStream.Aggregate. There is no EmitFinal.
func (s SlidingWindowedCogroupedKStream[K, A]) Aggregate(init func() A, store string, aggSerde serde.Serde[A], opts ...Option) KTable[Windowed[K], A] {
	if s.c.b == nil {
		panic("topology: use of a zero SlidingWindowedCogroupedKStream; create one with CogroupedKStream.SlidingWindowedBy")
	}
	b := s.c.b
	o := collect(opts)
	parents, step, missing := s.c.wire(init, store, o)
	if init == nil {
		missing = append([]string{"initializer"}, missing...)
	}
	keySerde := s.c.inputs[0].keySerde
	inputOf := func(v cogrouped) int { return v.input }
	n := derivedSlidingNode(b, "cogroup-sliding-aggregate", store, s.w, false, keySerde, aggSerde, o, initialOf(init), step, inputOf, parents...)
	if aggSerde == nil {
		b.errorf("%s: store %q: value serde is nil", n.label(), store)
	}
	for _, m := range missing {
		b.errorf("%s: %s is nil", n.label(), m)
	}
	return KTable[Windowed[K], A]{b: b, n: n, store: store, keySerde: TimeWindowedSerde(keySerde, s.w.diff), valueSerde: aggSerde, windows: &windowClose{grace: s.w.grace}}
}

// SessionWindowedCogroupedKStream is a co-grouping cut into sessions,
// ready to be aggregated per key and session: Kafka Streams'
// SessionWindowedCogroupedKStream. Create it with
// CogroupedKStream.SessionWindowedBy.
type SessionWindowedCogroupedKStream[K, A any] struct {
	c CogroupedKStream[K, A]
	w SessionWindows
}

// SessionWindowedBy cuts the co-grouping c into the sessions w.
func (c CogroupedKStream[K, A]) SessionWindowedBy(w SessionWindows) SessionWindowedCogroupedKStream[K, A] {
	if c.b == nil {
		panic("topology: use of a zero CogroupedKStream; create one with Cogroup")
	}
	if w.gap <= 0 {
		c.b.errorf("SessionWindowedBy: zero SessionWindows; use NewSessionWindows")
	}
	return SessionWindowedCogroupedKStream[K, A]{c: c, w: w}
}

// Aggregate folds the values of every grouped stream of the co-grouping
// into one aggregate per key and session, in the session store named
// store: init gives a new session's starting aggregate, each stream's
// adder folds in that stream's values, and merger combines the aggregates
// of the sessions a record joins, whichever streams made them. Sessions
// and results are as for SessionAggregate, and each grouped stream has a
// stream time of its own, as for TimeWindowedCogroupedKStream.Aggregate.
// There is no EmitFinal.
func (s SessionWindowedCogroupedKStream[K, A]) Aggregate(init func() A, merger func(K, A, A) A, store string, aggSerde serde.Serde[A], opts ...Option) KTable[Windowed[K], A] {
	if s.c.b == nil {
		panic("topology: use of a zero SessionWindowedCogroupedKStream; create one with CogroupedKStream.SessionWindowedBy")
	}
	o := collect(opts)
	parents, step, missing := s.c.wire(init, store, o)
	if merger == nil {
		missing = append([]string{"merger"}, missing...)
	}
	if init == nil {
		missing = append([]string{"initializer"}, missing...)
	}
	start := func() (A, bool) { return init(), true }
	inputOf := func(v cogrouped) int { return v.input }
	return sessionWindowAggregate(s.c.b, "cogroup-session-aggregate", store, s.w, false, s.c.inputs[0].keySerde, aggSerde, o, missing, start, step, merger, inputOf, parents...)
}

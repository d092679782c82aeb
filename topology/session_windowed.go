package topology

import (
	"bytes"
	"fmt"
	"math"
	"time"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

// SessionWindowedKStream is a grouped stream cut into sessions of activity
// per key, ready to be aggregated. Create it with SessionWindowedBy. Event
// time, stream time and late records are as for TimeWindowedKStream; a
// record is late when the session it would form or extend has closed
// (stream time past its end plus gap plus grace, SessionWindows.CloseTime).
// Results are stamped with their session's end, its latest record time.
type SessionWindowedKStream[K, V any] struct {
	g     *grouping[K, V]
	w     SessionWindows
	final bool
}

// SessionWindowedBy cuts the grouped stream g into the sessions w.
func SessionWindowedBy[K, V any](g KGroupedStream[K, V], w SessionWindows) SessionWindowedKStream[K, V] {
	gr := g.grouping()
	if w.gap <= 0 {
		gr.b.errorf("SessionWindowedBy: zero SessionWindows; use NewSessionWindows")
	}
	return SessionWindowedKStream[K, V]{g: gr, w: w}
}

// EmitFinal emits one result per session, once it closes, instead of one
// per update (see TimeWindowedKStream.EmitFinal). A session merged into
// another before it closed has no result of its own.
func (s SessionWindowedKStream[K, V]) EmitFinal() SessionWindowedKStream[K, V] {
	s.final = true
	return s
}

func (s SessionWindowedKStream[K, V]) grouping() *grouping[K, V] {
	if s.g == nil {
		panic("topology: use of a zero SessionWindowedKStream; create one with SessionWindowedBy")
	}
	return s.g
}

// Count counts the records of each key's sessions into the session store
// named store (values encoded with serde.Int64). The result is a table
// keyed by Windowed[K] (the session's first and last record times),
// encoded by SessionWindowedSerde over the grouping's key serde. Without
// EmitFinal, a session replaced by a merge is retracted: a null value for
// its key. Named, InMemory and WithoutLogging apply.
func (s SessionWindowedKStream[K, V]) Count(store string, opts ...Option) KTable[Windowed[K], int64] {
	return sessionAggregate(s, "session-count", store, serde.Int64, collect(opts), "",
		func() (int64, bool) { return 0, true },
		func(_ K, _ V, n int64, _ bool) int64 { return n + 1 },
		func(_ K, a, b int64) int64 { return a + b })
}

// Reduce combines the values of each key's sessions with fn, which also
// combines two sessions' values when a record merges them (see Count).
func (s SessionWindowedKStream[K, V]) Reduce(fn func(agg, v V) V, store string, opts ...Option) KTable[Windowed[K], V] {
	gr := s.grouping()
	var missing string
	if fn == nil {
		missing = "reducer"
	}
	return sessionAggregate(s, "session-reduce", store, gr.valueSerde, collect(opts), missing,
		func() (V, bool) { return zero[V](), false },
		reduceStep[K](fn),
		func(_ K, a, b V) V { return fn(a, b) })
}

// SessionAggregate folds the values of each key's sessions into an
// aggregate: init gives a new session's starting aggregate, adder folds in
// one value, and merger combines the aggregates of sessions a record joins
// (see Count).
func SessionAggregate[K, V, A any](s SessionWindowedKStream[K, V], init func() A, adder func(K, V, A) A, merger func(K, A, A) A, store string, aggSerde serde.Serde[A], opts ...Option) KTable[Windowed[K], A] {
	var missing string
	switch {
	case init == nil:
		missing = "initializer"
	case adder == nil:
		missing = "adder"
	case merger == nil:
		missing = "merger"
	}
	return sessionAggregate(s, "session-aggregate", store, aggSerde, collect(opts), missing,
		func() (A, bool) { return init(), true },
		func(k K, v V, agg A, _ bool) A { return adder(k, v, agg) },
		merger)
}

func sessionAggregate[K, V, A any](s SessionWindowedKStream[K, V], op, store string, aggSerde serde.Serde[A], o options, missingFunc string,
	start func() (A, bool), step func(K, V, A, bool) A, merge func(K, A, A) A) KTable[Windowed[K], A] {
	g := s.grouping()
	var missing []string
	if missingFunc != "" {
		missing = []string{missingFunc}
	}
	return sessionWindowAggregate(g.b, op, store, s.w, s.final, g.keySerde, aggSerde, o, missing, start, step, merge, nil, g.input(store))
}

// sessionWindowAggregate adds the processor of a session aggregation
// reading parents. inputOf, given with several parents, tells which parent
// a value came from: each parent has a stream time of its own
// (inputClocks).
func sessionWindowAggregate[K, V, A any](b *Builder, op, store string, w SessionWindows, final bool, keySerde serde.Serde[K], aggSerde serde.Serde[A], o options, missing []string,
	start func() (A, bool), step func(K, V, A, bool) A, merge func(K, A, A) A, inputOf func(V) int, parents ...*node) KTable[Windowed[K], A] {
	info := StoreInfo{
		Name: store, Persistent: !o.inMemory, Logged: !o.unlogged,
		Kind: graph.Session, Retention: addSat(w.MinRetention(), 1),
	}
	// One past the minimum: the session a record closes must still be
	// there to emit with EmitFinal, while lookups keep to the minimum
	// (sessionAggProc.process).
	wopts := info.WindowOptions()
	n := b.addProcessor(op, o, func() procImpl {
		return &sessionAggProc[K, V, A]{
			store: store, w: w, wopts: wopts, final: final,
			keySerde: keySerde, aggSerde: aggSerde, start: start, step: step, merge: merge,
			clock: newInputClocks(len(parents)), inputOf: inputOf,
		}
	}, parents...)
	n.stores = []string{store}
	b.declareStore(info, n.label())
	// Each session a record joins is read before it is retracted, so its
	// tombstone can carry it as the old value, as Kafka Streams'
	// KStreamSessionWindowAggregate sends it when asked; a final result
	// goes out with a null old value, as Kafka Streams sends it
	// (emitFinal).
	n.olds = ownOldValues
	if final {
		declarePending(b, n, store, o)
	}
	if aggSerde == nil {
		b.errorf("%s: store %q: value serde is nil", n.label(), store)
	}
	for _, m := range missing {
		b.errorf("%s: %s is nil", n.label(), m)
	}
	return KTable[Windowed[K], A]{b: b, n: n, store: store, keySerde: SessionWindowedSerde(keySerde), valueSerde: aggSerde, windows: &windowClose{grace: addSat(w.gap, w.grace)}}
}

type sessionAggProc[K, V, A any] struct {
	store    string
	w        SessionWindows
	wopts    statestore.WindowOptions
	final    bool
	keySerde serde.Serde[K]
	aggSerde serde.Serde[A]
	start    func() (A, bool)
	step     func(K, V, A, bool) A
	merge    func(K, A, A) A

	ss      *statestore.SessionStore
	updates tableUpdates
	clock   inputClocks
	inputOf func(V) int // a co-grouped value's input; nil with one input
	log     lateLog
}

func (p *sessionAggProc[K, V, A]) init(c *nodeInstance) error {
	rw, err := c.store(p.store)
	if err != nil {
		return err
	}
	if p.ss, err = statestore.NewSessionStore(rw, p.wopts); err != nil {
		return err
	}
	// A session's pending updates are held under its store key, so the
	// flush reads whether the last commit left it in the store, as Kafka
	// Streams' caching session store reads its underlying store for a
	// tombstone: a session created and merged away within one interval
	// goes out neither as a result nor as a tombstone.
	p.updates.committed = readsCommitted(rw)
	p.log.node = c.node.name
	return p.clock.open(c, p.store, p.final, p.ss.ObservedTime)
}

// session is an existing session a record joins, with its aggregate.
type session[A any] struct {
	win Window
	agg A
	// old is agg decoded apart, when the node sends old values: the
	// merger and adder may change agg in place.
	old A
}

func (p *sessionAggProc[K, V, A]) process(c *nodeInstance, r record) error {
	if r.keyNull || r.valueNull {
		return nil
	}
	v := as[V](r.value)
	t, st, err := inputClock(&p.clock, v, p.inputOf).advance(c, r, p.emit)
	if err != nil {
		return err
	}
	k := as[K](r.key)
	kb, err := p.keySerde.Encode(k)
	if err != nil {
		return fmt.Errorf("encode key for store %q: %w", p.store, err)
	}
	earliestEnd, latestStart := p.w.SearchBounds(t)
	// A record joins the sessions a store of Kafka Streams' retention (gap
	// plus grace) would still return; those it no longer returns ended too
	// long before its latest session, and are closed or about to be.
	obs, err := p.ss.ObservedTime()
	if err != nil {
		return err
	}
	if obs != math.MinInt64 {
		earliestEnd = max(earliestEnd, obs-p.w.MinRetention()+1)
	}
	it, err := p.ss.FindSessions(kb, max(earliestEnd, 0), latestStart)
	if err != nil {
		return err
	}
	var joined []session[A]
	for it.Next() {
		win := Window{Start: it.Start(), End: it.End()}
		agg, err := p.aggSerde.Decode(bytes.Clone(it.Value()))
		if err != nil {
			it.Close()
			return fmt.Errorf("decode aggregate in store %q: %w", p.store, err)
		}
		var old A
		if c.node.sendOld && !p.final {
			if old, err = p.aggSerde.Decode(bytes.Clone(it.Value())); err != nil {
				it.Close()
				return fmt.Errorf("decode aggregate in store %q: %w", p.store, err)
			}
		}
		joined = append(joined, session[A]{win: win, agg: agg, old: old})
	}
	if err := it.Err(); err != nil {
		it.Close()
		return err
	}
	if err := it.Close(); err != nil {
		return err
	}
	wins := make([]Window, len(joined))
	for i, s := range joined {
		wins[i] = s.win
	}
	merged := p.w.Merge(t, wins)
	if p.w.IsClosed(merged, st) {
		c.task.droppedLate++
		p.log.dropped(c.task, t, st)
		return nil
	}
	// The merged session's result goes out as new (Kafka Streams sends
	// it with no old value), but for a record at the time of a one-point
	// session, which retracts nothing: under the record cache its old
	// value is the session's stored aggregate, which Kafka Streams'
	// caching store reads from its underlying store.
	var resultOld *prior
	if c.node.sendOld && !p.final {
		resultOld = &prior{null: true}
	}
	agg, have := p.start()
	for _, s := range joined {
		sa := s.agg
		if have {
			agg = p.merge(k, agg, sa)
		} else {
			agg, have = sa, true
		}
		// Every session the record joins is retracted, even the one it
		// falls within (its result then follows under the same key), as
		// Kafka Streams does; a record at the time of a one-point session
		// retracts nothing.
		if merged == (Window{Start: t, End: t}) {
			if resultOld != nil && c.holds() {
				resultOld = &prior{value: s.old}
			}
			continue
		}
		if p.final {
			if _, err := p.clock.pending.remove(p.w.CloseTime(s.win), s.win.Start, kb); err != nil {
				return err
			}
		}
		if s.win != merged {
			if err := p.ss.Remove(kb, s.win.Start, s.win.End); err != nil {
				return err
			}
		}
		if !p.final {
			tomb := record{key: Windowed[K]{Key: k, Window: s.win}, value: zero[A](), valueNull: true, ts: time.UnixMilli(s.win.End), headers: r.headers}
			if c.node.sendOld {
				tomb.old = &prior{value: s.old}
			}
			if err := p.updates.emit(c, statestore.SessionKey(kb, s.win.Start, s.win.End), tomb); err != nil {
				return err
			}
		}
	}
	agg = p.step(k, v, agg, have)
	vb, err := encodeStoreValue(p.aggSerde, agg)
	if err != nil {
		return err
	}
	if err := p.ss.Put(kb, merged.Start, merged.End, bytes.Clone(vb)); err != nil {
		return err
	}
	if !p.final {
		return p.updates.emit(c, statestore.SessionKey(kb, merged.Start, merged.End), record{key: Windowed[K]{Key: k, Window: merged}, value: agg, ts: time.UnixMilli(merged.End), headers: r.headers, old: resultOld})
	}
	return p.clock.pending.add(p.w.CloseTime(merged), merged.Start, kb, merged.End)
}

// emit forwards the final result of a closed session. The pending entry's
// time, the session's latest record time, is its end.
func (p *sessionAggProc[K, V, A]) emit(c *nodeInstance, d pendingWindow) error {
	end := d.ts
	vb, found, err := p.ss.Get(d.kb, d.start, end)
	if err != nil || !found {
		return err
	}
	return emitFinal(c, p.store, p.keySerde, p.aggSerde, d, Window{Start: d.start, End: end}, vb)
}

func (p *sessionAggProc[K, V, A]) flush(c *nodeInstance) error { return p.updates.flush(c) }

func (p *sessionAggProc[K, V, A]) committed() { p.clock.committed() }

func (p *sessionAggProc[K, V, A]) rewind() {
	p.clock.rewind()
	p.ss.Rewind()
}

func (p *sessionAggProc[K, V, A]) close() error { return nil }

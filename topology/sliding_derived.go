package topology

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/eddystreams/eddy/statestore"
)

// A sliding-window aggregation by default computes its windows as Kafka
// Streams 3.9 does (derivedSlidingProc): a new window's aggregate is
// derived from a neighbouring window's, and each window keeps, beside its
// aggregate, the latest time of the records in it, in a second window
// store "<store>-times" (8 bytes, big-endian, under the same key and
// start). Reading a record's neighbourhood backwards, the first window
// ending before it is its left neighbour, whose latest record is the
// previous record; windows holding it are updated; the previous record's
// right window, the record's left window and its right window are created
// as needed. Records earlier than MaxDiff share the window [0, MaxDiff]
// and are handled forwards. The outputs, their order and their timestamps
// are Kafka Streams'. FoldKeptRecords chooses slidingAggProc instead.

// TimesStoreName is the name of the store in which a sliding-window
// aggregation into store keeps its windows' latest record times.
func TimesStoreName(store string) string { return store + "-times" }

// slidingValue is a window's aggregate with its latest record time; have
// is false for a window about to be created, whose aggregate starts from
// nothing.
type slidingValue[A any] struct {
	agg  A
	have bool
	ts   int64
}

// derivedSlidingProc aggregates records into sliding windows as Kafka
// Streams does.
type derivedSlidingProc[K, V, A any] struct {
	slidingResults[K, A]
	wopts   statestore.WindowOptions
	step    func(K, V, A, bool) A
	inputOf func(V) int // a co-grouped value's input; nil with one input

	times *statestore.WindowStore // latest record times by window start
}

func (p *derivedSlidingProc[K, V, A]) init(c *nodeInstance) error {
	var err error
	if p.ws, err = openWindowStore(c, p.store, p.wopts); err != nil {
		return err
	}
	if p.times, err = openWindowStore(c, TimesStoreName(p.store), p.wopts); err != nil {
		return err
	}
	p.openOlds(c)
	p.log.node = c.node.name
	return p.clock.open(c, p.store, p.final, p.ws.ObservedTime)
}

// derivedRetention is Kafka Streams' retention of a sliding-window store:
// twice MaxDiff plus grace, measured from window starts.
func (w SlidingWindows) derivedRetention() int64 { return addSat(addSat(w.diff, w.diff), w.grace) }

// slidingWindow is a window read from the stores, vb its stored
// aggregate.
type slidingWindow[A any] struct {
	win Window
	val slidingValue[A]
	vb  []byte
}

// neighbours reads k's windows starting in [from, to], by ascending or
// descending start, those a store of Kafka Streams' retention would still
// return (the stores keep one millisecond more, so that a window closed by
// a record is still there to emit with EmitFinal), up to and including the
// first one last accepts (nil: all).
func (p *derivedSlidingProc[K, V, A]) neighbours(kb []byte, from, to int64, backward bool, last func(Window) bool) ([]slidingWindow[A], error) {
	obs, err := p.ws.ObservedTime()
	if err != nil {
		return nil, err
	}
	if obs != math.MinInt64 {
		from = max(from, obs-p.w.derivedRetention()+1)
	}
	if from > to {
		return nil, nil
	}
	// Forwards, then reversed: a store reads forwards much faster.
	it, err := p.ws.Fetch(kb, from, to)
	if err != nil {
		return nil, err
	}
	type raw struct {
		start int64
		vb    []byte
	}
	var raws []raw
	for it.Next() {
		raws = append(raws, raw{it.Start(), bytes.Clone(it.Value())})
	}
	if err := closeIter(it); err != nil {
		return nil, err
	}
	if backward {
		slices.Reverse(raws)
	}
	var out []slidingWindow[A]
	for _, rw := range raws {
		agg, err := p.aggSerde.Decode(rw.vb)
		if err != nil {
			return nil, fmt.Errorf("decode aggregate in store %q: %w", p.store, err)
		}
		win := Window{Start: rw.start, End: addSat(rw.start, p.w.diff)}
		out = append(out, slidingWindow[A]{win: win, val: slidingValue[A]{agg: agg, have: true}, vb: rw.vb})
		if last != nil && last(win) {
			break
		}
	}
	for i := range out {
		tb, found, err := p.times.Get(kb, out[i].win.Start)
		if err != nil {
			return nil, err
		}
		if found && len(tb) == 8 {
			out[i].val.ts = int64(binary.BigEndian.Uint64(tb))
		} else {
			// A window the store holds without a time, written before the
			// times were kept: its end bounds its records' times.
			out[i].val.ts = out[i].win.End
		}
	}
	return out, nil
}

func closeIter(it *statestore.WindowIterator) error {
	err := it.Err()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	return err
}

func (p *derivedSlidingProc[K, V, A]) process(c *nodeInstance, r record) error {
	if r.keyNull || r.valueNull {
		return nil
	}
	v := as[V](r.value)
	t, st, err := inputClock(&p.clock, v, p.inputOf).advance(c, r, p.emit)
	if err != nil {
		return err
	}
	if p.w.IsLate(t, st) {
		c.task.droppedLate++
		p.log.dropped(c.task, t, st)
		return nil
	}
	k := as[K](r.key)
	kb, err := p.keySerde.Encode(k)
	if err != nil {
		return fmt.Errorf("encode key for store %q: %w", p.store, err)
	}
	in := derivedInput[K, V]{k: k, kb: kb, v: v, t: t, st: st, r: r}
	if t < p.w.diff {
		return p.processEarly(c, in)
	}
	return p.processLater(c, in)
}

// derivedInput is the record being processed.
type derivedInput[K, V any] struct {
	k  K
	kb []byte
	v  V
	t  int64
	st int64
	r  record
}

// processLater handles a record at t >= MaxDiff, reading its neighbours
// from the latest start back.
func (p *derivedSlidingProc[K, V, A]) processLater(c *nodeInstance, in derivedInput[K, V]) error {
	t, d := in.t, p.w.diff
	// Backwards, the first window ending before t is the last one read.
	ws, err := p.neighbours(in.kb, max(0, t-2*d), t+1, true, func(w Window) bool { return w.End < t })
	if err != nil {
		return err
	}
	starts := make(map[int64]bool, len(ws))
	var left, right *slidingWindow[A]
	var leftCreated, rightCreated bool
	prev, hasPrev := int64(0), false
	for _, w := range ws {
		starts[w.win.Start] = true
		switch {
		case w.win.Start == t+1:
			rightCreated = true
		case w.win.End > t:
			if right == nil {
				rw := w
				right = &rw
			}
			if err := p.updateStored(c, in, w); err != nil {
				return err
			}
		case w.win.End == t:
			leftCreated = true
			if err := p.updateStored(c, in, w); err != nil {
				return err
			}
			if w.val.ts >= t {
				// A record at t came before: it created the windows.
				return nil
			}
			prev, hasPrev = w.val.ts, true
		default: // ends before t: the left neighbour
			lw := w
			left = &lw
			prev, hasPrev = w.val.ts, true
		}
		if left != nil {
			break
		}
	}
	if hasPrev {
		if s := prev + 1; !starts[s] && addSat(s, d) >= t {
			if err := p.update(c, in, Window{Start: s, End: addSat(s, d)}, slidingValue[A]{ts: t}, p.initialOld(c)); err != nil {
				return err
			}
		}
	}
	if !leftCreated {
		// A left window derived from its neighbour starts from, and
		// sends as its old value, the neighbour's aggregate, as Kafka
		// Streams' sliding aggregate does.
		base, old := slidingValue[A]{ts: t}, p.initialOld(c)
		if hasPrev && left != nil && t-d <= prev {
			base = slidingValue[A]{agg: left.val.agg, have: true, ts: t}
			var err error
			if old, err = p.derivedOld(c, left.vb); err != nil {
				return err
			}
		}
		if err := p.update(c, in, Window{Start: t - d, End: t}, base, old); err != nil {
			return err
		}
	}
	if !rightCreated && right != nil && right.val.ts > t {
		return p.putRight(c, in, *right)
	}
	return nil
}

// processEarly handles a record at t < MaxDiff, which falls into the
// window [0, MaxDiff] with every other early record, reading its
// neighbours forwards.
func (p *derivedSlidingProc[K, V, A]) processEarly(c *nodeInstance, in derivedInput[K, V]) error {
	t, d := in.t, p.w.diff
	ws, err := p.neighbours(in.kb, 0, t+1, false, nil)
	if err != nil {
		return err
	}
	starts := make(map[int64]bool, len(ws))
	var combined *slidingWindow[A]
	var right *slidingWindow[A]
	var rightCreated bool
	prev, hasPrev := int64(0), false
	for _, w := range ws {
		starts[w.win.Start] = true
		switch {
		case w.win.Start == 0:
			cw := w
			combined = &cw
			if w.val.ts < t {
				prev, hasPrev = w.val.ts, true
			}
		case w.win.Start <= t:
			rw := w
			right = &rw
			if err := p.updateStored(c, in, w); err != nil {
				return err
			}
		case w.win.Start == t+1:
			rightCreated = true
		}
	}
	if right == nil && combined != nil && combined.val.ts > t {
		right = combined
	}
	if !rightCreated && right != nil && right.val.ts > t {
		if err := p.putRight(c, in, *right); err != nil {
			return err
		}
	}
	if hasPrev && !starts[prev+1] {
		if err := p.update(c, in, Window{Start: prev + 1, End: addSat(prev+1, d)}, slidingValue[A]{ts: t}, p.initialOld(c)); err != nil {
			return err
		}
	}
	if combined == nil {
		return p.update(c, in, Window{Start: 0, End: d}, slidingValue[A]{ts: t}, p.initialOld(c))
	}
	return p.updateStored(c, in, *combined)
}

// putRight creates the record's right window as a copy of w, the first
// window after the record as it was before the record: its aggregate
// decoded again, since the update of w may have changed it in place. As
// Kafka Streams creates it, it goes out with a null old value.
func (p *derivedSlidingProc[K, V, A]) putRight(c *nodeInstance, in derivedInput[K, V], w slidingWindow[A]) error {
	agg, err := p.aggSerde.Decode(bytes.Clone(w.vb))
	if err != nil {
		return fmt.Errorf("decode aggregate in store %q: %w", p.store, err)
	}
	win := Window{Start: in.t + 1, End: addSat(in.t+1, p.w.diff)}
	return p.put(c, in, win, slidingValue[A]{agg: agg, have: true, ts: w.val.ts}, p.newOld())
}

// updateStored folds the record into w, a window read from the store,
// whose stored aggregate is the update's old value.
func (p *derivedSlidingProc[K, V, A]) updateStored(c *nodeInstance, in derivedInput[K, V], w slidingWindow[A]) error {
	old, err := p.storedOld(w.vb)
	if err != nil {
		return err
	}
	return p.update(c, in, w.win, w.val, old)
}

// update folds the record into win, whose value was cur, unless win has
// closed; old is the update's old value, nil when the node sends none.
func (p *derivedSlidingProc[K, V, A]) update(c *nodeInstance, in derivedInput[K, V], win Window, cur slidingValue[A], old *prior) error {
	if p.w.IsClosed(win, in.st) {
		// Counted once per closed window the record is left out of, as
		// Kafka Streams' dropped-records sensor counts it.
		c.task.droppedLate++
		p.log.dropped(c.task, in.t, in.st)
		return nil
	}
	ts := in.t
	if cur.have {
		ts = max(ts, cur.ts)
	}
	return p.put(c, in, win, slidingValue[A]{agg: p.step(in.k, in.v, cur.agg, cur.have), have: true, ts: ts}, old)
}

// put stores win's value and emits it, stamped with its latest record
// time and carrying old, or records the window as pending its final
// result.
func (p *derivedSlidingProc[K, V, A]) put(c *nodeInstance, in derivedInput[K, V], win Window, val slidingValue[A], old *prior) error {
	if err := p.putAggregate(in.kb, win, val.agg); err != nil {
		return err
	}
	if err := p.times.Put(in.kb, win.Start, binary.BigEndian.AppendUint64(nil, uint64(val.ts))); err != nil {
		return err
	}
	return p.result(c, in.k, in.kb, win, val.agg, val.ts, in.r.headers, old)
}

func (p *derivedSlidingProc[K, V, A]) rewind() {
	p.clock.rewind()
	p.ws.Rewind()
	p.times.Rewind()
}

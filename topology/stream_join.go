package topology

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/eddystreams/eddy/internal/graph"
	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

// JoinWindows bound the times of the records a windowed stream-stream
// join pairs: a left record at t joins the right records of its key with
// times in [t-before, t+after] (a right record at t, the left records in
// [t-after, t+before]). Grace is how long, past a window, records are
// kept for late partners and unmatched records wait in left and outer
// joins.
type JoinWindows struct {
	before, after, grace int64 // milliseconds
}

// JoinTimeDifference returns windows pairing records at most d apart
// either way, with no grace.
func JoinTimeDifference(d time.Duration) JoinWindows {
	if d < 0 {
		panic("topology: JoinTimeDifference needs a non-negative difference")
	}
	return JoinWindows{before: d.Milliseconds(), after: d.Milliseconds()}
}

// Before returns w pairing a left record with right records up to d
// before it.
func (w JoinWindows) Before(d time.Duration) JoinWindows {
	if d < 0 {
		panic("topology: JoinWindows.Before needs a non-negative duration")
	}
	w.before = d.Milliseconds()
	return w
}

// After returns w pairing a left record with right records up to d after
// it.
func (w JoinWindows) After(d time.Duration) JoinWindows {
	if d < 0 {
		panic("topology: JoinWindows.After needs a non-negative duration")
	}
	w.after = d.Milliseconds()
	return w
}

// Grace returns w with grace g. Each side keeps its records for
// before+after+g past its latest record, and a record, however late, joins
// those the other side still keeps; in left and outer joins, an unmatched
// left record at t is emitted once stream time passes t+after+g (a right
// record, t+before+g).
func (w JoinWindows) Grace(g time.Duration) JoinWindows {
	if g < 0 {
		panic("topology: JoinWindows.Grace needs a non-negative duration")
	}
	w.grace = g.Milliseconds()
	return w
}

// RestoreJoinStreamTime makes a stream-stream join (LeftJoinStreams,
// OuterJoinStreams) start, when its task starts again (after a restart,
// a takeover or an aborted transaction), from the stream time it had
// reached: the latest time its window stores hold, or after an abort the
// time at the last commit. By default, as in Kafka Streams, whose join
// keeps its stream time in memory only, a started task knows none until
// its next record, so an unmatched record that arrives behind the time
// reached before waits in "<store>-outer" for stream time to pass its
// window again instead of being emitted at once. With the option a run
// interrupted by restarts or aborts emits what an uninterrupted one
// would. Inner joins do not use stream time.
func RestoreJoinStreamTime() Option { return func(o *options) { o.restoreJoinTime = true } }

// span is before + after + grace: how long each side keeps its records,
// as Kafka Streams does.
func (w JoinWindows) span() int64 { return addSat(addSat(w.before, w.after), w.grace) }

// JoinStreams joins the streams l and r on their keys within windows w:
// every pair of a left and a right record of one key whose times w pairs
// gives joiner(lv, rv), keyed by the key and stamped with the later of
// the two times, emitted when the second of the pair arrives. Records are
// kept in the window stores "<store>-left" and "<store>-right"
// (persistent and logged unless InMemory or WithoutLogging is given),
// encoded with keySerde, leftSerde and rightSerde, for before+after+grace
// (see JoinWindows.Grace). Records with a null key or value are dropped and
// counted as join drops.
//
// l and r must be co-partitioned. A side whose key an operator may have
// changed (Map, SelectKey, FlatMap, Process) is first written through the
// repartition topic "<app>-<name>-left-repartition" (or "-right-"),
// encoded with the serdes given here; NumPartitions sets its partition
// count (default: that of the other side's topic). Named names the join
// node, and so these topics; the nodes taking each side's records are
// "<name>-left" and "<name>-right".
func JoinStreams[K, V, V2, VR any](l KStream[K, V], r KStream[K, V2], joiner func(lv V, rv V2) VR, w JoinWindows, store string, keySerde serde.Serde[K], leftSerde serde.Serde[V], rightSerde serde.Serde[V2], opts ...Option) KStream[K, VR] {
	var fn func(V, bool, V2, bool) VR
	if joiner != nil {
		fn = func(lv V, _ bool, rv V2, _ bool) VR { return joiner(lv, rv) }
	}
	return joinStreams(l, r, "stream-join", false, false, fn, w, store, keySerde, leftSerde, rightSerde, collect(opts))
}

// LeftJoinStreams is JoinStreams that also emits each left record no
// right record joined, as joiner(lv, zero, false), stamped with its own
// time, once its window has passed: when a record at stream time finds
// stream time beyond t+after+grace, or at once if stream time was already
// beyond t+after when it arrived. Such records wait in the store
// "<store>-outer". A left record without a key (but with a value) is
// emitted at once, keyless, as Kafka Streams does since KIP-962.
func LeftJoinStreams[K, V, V2, VR any](l KStream[K, V], r KStream[K, V2], joiner func(lv V, rv V2, found bool) VR, w JoinWindows, store string, keySerde serde.Serde[K], leftSerde serde.Serde[V], rightSerde serde.Serde[V2], opts ...Option) KStream[K, VR] {
	var fn func(V, bool, V2, bool) VR
	if joiner != nil {
		fn = func(lv V, _ bool, rv V2, rok bool) VR { return joiner(lv, rv, rok) }
	}
	return joinStreams(l, r, "stream-leftjoin", true, false, fn, w, store, keySerde, leftSerde, rightSerde, collect(opts))
}

// OuterJoinStreams is LeftJoinStreams that also emits the right records
// nothing joined, as joiner(zero, false, rv, true), the right side's
// window passing at t+before(+grace).
func OuterJoinStreams[K, V, V2, VR any](l KStream[K, V], r KStream[K, V2], joiner func(lv V, lfound bool, rv V2, rfound bool) VR, w JoinWindows, store string, keySerde serde.Serde[K], leftSerde serde.Serde[V], rightSerde serde.Serde[V2], opts ...Option) KStream[K, VR] {
	return joinStreams(l, r, "stream-outerjoin", true, true, joiner, w, store, keySerde, leftSerde, rightSerde, collect(opts))
}

// joinSide tags a record with the side of the join it came from.
type joinSide struct {
	right bool
	value any
}

func joinStreams[K, V, V2, VR any](l KStream[K, V], r KStream[K, V2], op string, leftOuter, rightOuter bool, fn func(V, bool, V2, bool) VR, w JoinWindows, store string, ks serde.Serde[K], lvs serde.Serde[V], rvs serde.Serde[V2], o options) KStream[K, VR] {
	b := l.builder()
	r.builder()
	n := b.addNode(kindProcessor, op, o)
	n.relaxedNullKeys = leftOuter || rightOuter
	out := KStream[K, VR]{b: b, n: n}
	if r.b != b {
		b.errorf("%s joins a stream from another Builder", n.label())
		return out
	}
	b.checkFunc(n, fn == nil, "joiner")
	if ks == nil || lvs == nil || rvs == nil {
		b.errorf("%s: key and value serdes must not be nil", n.label())
	}
	// A side an operator may have re-keyed goes through a repartition
	// topic of its own first, so that each key meets its partners in one
	// task.
	if l.keyChanged && ks != nil && lvs != nil {
		l = l.Repartition(ks, lvs, Named(n.name+"-left"), NumPartitions(o.partitions))
	}
	if r.keyChanged && ks != nil && rvs != nil {
		r = r.Repartition(ks, rvs, Named(n.name+"-right"), NumPartitions(o.partitions))
	}
	for i, parent := range []*node{l.n, r.n} {
		right := i == 1
		suffix := "-left"
		if right {
			suffix = "-right"
		}
		tag := b.addStateless("", options{name: n.name + suffix, derived: true}, func(c *nodeInstance, rec record) error {
			rec.value = joinSide{right: right, value: rec.value}
			return c.forward(rec)
		}, parent)
		tag.children = append(tag.children, n)
		n.parents = append(n.parents, tag)
	}
	// Kafka Streams' retention; a store needs a positive one.
	retention := max(w.span(), 1)
	infos := []StoreInfo{
		{Name: store + "-left", Persistent: !o.inMemory, Logged: !o.unlogged, Kind: graph.Window, Retention: retention},
		{Name: store + "-right", Persistent: !o.inMemory, Logged: !o.unlogged, Kind: graph.Window, Retention: retention},
	}
	outer := leftOuter || rightOuter
	if outer {
		infos = append(infos, StoreInfo{Name: store + "-outer", Persistent: !o.inMemory, Logged: !o.unlogged})
	}
	for _, info := range infos {
		n.stores = append(n.stores, info.Name)
		b.declareStore(info, n.label())
	}
	wopts, restoreTime := infos[0].WindowOptions(), o.restoreJoinTime
	n.newProc = func() (procImpl, error) {
		return &streamJoinProc[K, V, V2, VR]{
			store: store, w: w, wopts: wopts, outer: outer, leftOuter: leftOuter, rightOuter: rightOuter,
			ks: ks, lvs: lvs, rvs: rvs, join: fn, restoreTime: restoreTime,
		}, nil
	}
	return out
}

type streamJoinProc[K, V, V2, VR any] struct {
	store                        string
	w                            JoinWindows
	wopts                        statestore.WindowOptions
	outer, leftOuter, rightOuter bool
	ks                           serde.Serde[K]
	lvs                          serde.Serde[V]
	rvs                          serde.Serde[V2]
	join                         func(V, bool, V2, bool) VR

	left, right *statestore.WindowStore
	unmatched   statestore.ReadWriter // nil for an inner join
	// streamTime is the largest record time the join has seen, in
	// milliseconds (math.MinInt64 for none); started is false until it
	// was set at the task's first record. restoreTime
	// (RestoreJoinStreamTime) sets it from the stores then, and takes it
	// back to the last commit's on an abort; without it, as in Kafka
	// Streams, each start begins with none.
	streamTime  int64
	started     bool
	restoreTime bool
	// minTime is the earliest time in the outer store as Kafka Streams
	// tracks it (math.MaxInt64 before anything was kept, math.MinInt64
	// when unknown, after a restart or an abort): it decides whether a
	// record looks for unmatched records to emit.
	minTime int64
	// committedTime and committedStarted are streamTime and started when
	// the last commit completed, where an abort takes them back.
	committedTime    int64
	committedStarted bool
}

func (p *streamJoinProc[K, V, V2, VR]) init(c *nodeInstance) error {
	for _, s := range []struct {
		name string
		ws   **statestore.WindowStore
	}{{p.store + "-left", &p.left}, {p.store + "-right", &p.right}} {
		rw, err := c.store(s.name)
		if err != nil {
			return err
		}
		if *s.ws, err = statestore.NewWindowStore(rw, p.wopts); err != nil {
			return err
		}
	}
	if p.outer {
		var err error
		if p.unmatched, err = c.store(p.store + "-outer"); err != nil {
			return err
		}
	}
	return nil
}

// start sets stream time at the task's first record: none, or with
// restoreTime from the restored stores, the latest time either window
// store holds being a lower bound of it.
func (p *streamJoinProc[K, V, V2, VR]) start() error {
	p.started = true
	// Unknown after a restart: the next record at stream time looks.
	p.minTime = math.MinInt64
	if !p.restoreTime {
		p.streamTime = math.MinInt64
		return nil
	}
	lt, err := p.left.ObservedTime()
	if err != nil {
		return err
	}
	rt, err := p.right.ObservedTime()
	if err != nil {
		return err
	}
	p.streamTime = max(lt, rt)
	return nil
}

// process joins one record as Kafka Streams 3.9 does: stream time is the
// join's own, the latest time of either side's records; a record joins
// every record of the other side its window reaches that the other side's
// store still keeps (retention before+after+grace, measured from that
// side's latest record), however late it is itself; and an outer side's
// record that joined nothing waits in the outer store until its window and
// grace have passed, or is emitted at once if its window had passed
// already.
func (p *streamJoinProc[K, V, V2, VR]) process(c *nodeInstance, r record) error {
	side := as[joinSide](r.value)
	if r.ts.IsZero() || r.ts.UnixMilli() < 0 {
		if r.keyNull || r.valueNull {
			c.task.droppedJoin++
			return nil
		}
		return errNoTimestamp
	}
	if !p.started {
		if err := p.start(); err != nil {
			return err
		}
	}
	t := r.ts.UnixMilli()
	p.streamTime = max(p.streamTime, t)
	thisOuter := side.right && p.rightOuter || !side.right && p.leftOuter
	if thisOuter && r.keyNull && !r.valueNull {
		// KIP-962: a record without a key joins nothing but is not lost.
		return c.forward(record{key: r.key, keyNull: true, value: p.joinAlone(side.right, side.value), ts: r.ts, headers: r.headers})
	}
	if r.keyNull || r.valueNull {
		c.task.droppedJoin++
		return nil
	}
	// This side's reach back and forward in time.
	back, reach := p.w.before, p.w.after
	own, other := p.left, p.right
	if side.right {
		back, reach = p.w.after, p.w.before
		own, other = p.right, p.left
	}
	if p.outer && t == p.streamTime {
		if err := p.emitUnmatched(c, reach, r.headers); err != nil {
			return err
		}
	}
	kb, err := p.ks.Encode(as[K](r.key))
	if err != nil {
		return fmt.Errorf("encode key for store %q: %w", p.store, err)
	}
	vb, err := p.encodeSide(side)
	if err != nil {
		return err
	}
	timeTo := addSat(t, reach)
	it, err := other.Fetch(kb, max(0, t-back), timeTo)
	if err != nil {
		return err
	}
	type match struct {
		ts     int64
		values [][]byte
	}
	var matches []match
	for it.Next() {
		vals, err := splitValues(bytes.Clone(it.Value()))
		if err != nil {
			it.Close()
			return err
		}
		matches = append(matches, match{ts: it.Start(), values: vals})
	}
	err = it.Err()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	for _, m := range matches {
		if p.outer {
			// The partners are joined now: they are no longer unmatched.
			if err := p.deleteUnmatched(m.ts, !side.right, kb); err != nil {
				return err
			}
		}
		for _, ob := range m.values {
			var lv V
			var rv V2
			if side.right {
				if lv, err = p.lvs.Decode(ob); err != nil {
					return err
				}
				rv = as[V2](side.value)
			} else {
				lv = as[V](side.value)
				if rv, err = p.rvs.Decode(ob); err != nil {
					return err
				}
			}
			out := record{key: r.key, value: p.join(lv, true, rv, true), ts: time.UnixMilli(max(t, m.ts)), headers: r.headers}
			if err := c.forward(out); err != nil {
				return err
			}
		}
	}
	if len(matches) == 0 && thisOuter {
		if timeTo < p.streamTime {
			// No partner can arrive in time any more.
			out := record{key: r.key, value: p.joinAlone(side.right, side.value), ts: r.ts, headers: r.headers}
			if err := c.forward(out); err != nil {
				return err
			}
		} else {
			p.minTime = min(p.minTime, t)
			key := outerKey(t, side.right, kb)
			prev, _, err := p.unmatched.Get(key)
			if err != nil {
				return err
			}
			if err := p.unmatched.Put(key, appendValue(bytes.Clone(prev), vb)); err != nil {
				return err
			}
		}
	}
	// Keep the record with the others of its key and time, for the other
	// side's records to come.
	prev, _, err := own.Get(kb, t)
	if err != nil {
		return err
	}
	return own.Put(kb, t, appendValue(bytes.Clone(prev), vb))
}

// joinAlone is the result of a record of one side joined with nothing.
func (p *streamJoinProc[K, V, V2, VR]) joinAlone(right bool, v any) VR {
	if right {
		return p.join(zero[V](), false, as[V2](v), true)
	}
	return p.join(as[V](v), true, zero[V2](), false)
}

func (p *streamJoinProc[K, V, V2, VR]) encodeSide(side joinSide) ([]byte, error) {
	if side.right {
		return p.rvs.Encode(as[V2](side.value))
	}
	return p.lvs.Encode(as[V](side.value))
}

// deleteUnmatched forgets a side's unmatched records of key kb at ts.
func (p *streamJoinProc[K, V, V2, VR]) deleteUnmatched(ts int64, right bool, kb []byte) error {
	if !right {
		// Left records may still be under the older tag.
		if err := p.unmatched.Delete(outerKeyTagged(ts, sideLeftOld, kb)); err != nil {
			return err
		}
	}
	return p.unmatched.Delete(outerKey(ts, right, kb))
}

// emitUnmatched emits the waiting unmatched records whose window and grace
// have passed, in the outer store's order (time, right before left, key),
// as Kafka Streams does when a record reaches stream time: a record's
// window has passed once stream time is beyond its time plus its side's
// reach forward (after for the left, before for the right) plus grace.
// reach is the reach of the side whose record triggers the scan, with
// which Kafka Streams decides whether to look at all.
func (p *streamJoinProc[K, V, V2, VR]) emitUnmatched(c *nodeInstance, reach int64, headers []Header) error {
	// The sums wrap around as Java's do, so that an unknown earliest time
	// (the largest int64) gives what Kafka Streams gives.
	if p.minTime+reach+p.w.grace >= p.streamTime {
		return nil
	}
	p.minTime = math.MaxInt64
	it, err := p.unmatched.Range(nil, nil)
	if err != nil {
		return err
	}
	type entry struct{ key, value []byte }
	var due []entry
	var leftOpen, rightOpen bool
	for it.Next() {
		k := it.Key()
		if len(k) < 9 {
			it.Close()
			return errBadOuterKey
		}
		ts, right := int64(binary.BigEndian.Uint64(k)), k[8] == sideRight
		p.minTime = ts
		if leftOpen && rightOpen {
			break
		}
		lookBack := p.w.after
		if right {
			lookBack = p.w.before
		}
		if ts+lookBack+p.w.grace >= p.streamTime {
			if right {
				rightOpen = true
			} else {
				leftOpen = true
			}
			continue
		}
		due = append(due, entry{bytes.Clone(k), bytes.Clone(it.Value())})
	}
	err = it.Err()
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	for _, e := range due {
		if err := p.unmatched.Delete(e.key); err != nil {
			return err
		}
		ts, right := int64(binary.BigEndian.Uint64(e.key)), e.key[8] == sideRight
		k, err := p.ks.Decode(e.key[9:])
		if err != nil {
			return err
		}
		vals, err := splitValues(e.value)
		if err != nil {
			return err
		}
		for _, vb := range vals {
			var v any
			if right {
				if v, err = p.rvs.Decode(vb); err != nil {
					return err
				}
			} else if v, err = p.lvs.Decode(vb); err != nil {
				return err
			}
			if err := c.forward(record{key: k, value: p.joinAlone(right, v), ts: time.UnixMilli(ts), headers: headers}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p *streamJoinProc[K, V, V2, VR]) close() error { return nil }

func (p *streamJoinProc[K, V, V2, VR]) committed() {
	p.committedTime, p.committedStarted = p.streamTime, p.started
}

func (p *streamJoinProc[K, V, V2, VR]) rewind() {
	p.streamTime, p.started = p.committedTime, p.committedStarted
	if !p.restoreTime {
		// Kafka Streams revives a task after an abort, its join's stream
		// time starting again from none.
		p.streamTime, p.started = math.MinInt64, true
	}
	p.minTime = math.MinInt64
	p.left.Rewind()
	p.right.Rewind()
}

var errBadOuterKey = errors.New("topology: malformed stream-join store entry")

// The tags of an unmatched record's side in the outer store: right sorts
// before left, as in Kafka Streams' store. sideLeftOld, the left tag of
// stores written by earlier releases, reads as left too.
const (
	sideLeftOld byte = 0
	sideRight   byte = 1
	sideLeft    byte = 2
)

// outerKey is an unmatched record's key in the outer store: its time
// (big-endian, so that keys sort by time), its side, the record key.
func outerKey(ts int64, right bool, kb []byte) []byte {
	if right {
		return outerKeyTagged(ts, sideRight, kb)
	}
	return outerKeyTagged(ts, sideLeft, kb)
}

func outerKeyTagged(ts int64, side byte, kb []byte) []byte {
	out := binary.BigEndian.AppendUint64(make([]byte, 0, 9+len(kb)), uint64(ts))
	return append(append(out, side), kb...)
}

// appendValue adds one encoded value to a list of them: its length as a
// uvarint, then its bytes.
func appendValue(list, v []byte) []byte {
	list = binary.AppendUvarint(list, uint64(len(v)))
	return append(list, v...)
}

// splitValues returns the values of a list appendValue made, in the order
// they were added.
func splitValues(list []byte) ([][]byte, error) {
	var out [][]byte
	for len(list) > 0 {
		n, w := binary.Uvarint(list)
		if w <= 0 || n > uint64(len(list)-w) || n > math.MaxInt32 {
			return nil, errBadOuterKey
		}
		out = append(out, list[w:w+int(n)])
		list = list[w+int(n):]
	}
	return out, nil
}

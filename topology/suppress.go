package topology

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

// Suppressed says how Suppress holds a table's updates back: build it
// with UntilTimeLimit or UntilWindowCloses.
type Suppressed struct {
	finalResults bool
	limit        int64
	buf          BufferConfig
	keepTime     bool
}

// PersistStreamTime also keeps the stream time the suppression has seen in
// its store, so that a task restarted, restored elsewhere or rewound after
// an abort releases held updates on the schedule it had reached: a record
// older than that time by the limit is released at once. Kafka Streams,
// and a suppression without this option, keep stream time in memory only:
// a task starting again starts from the first record it processes.
func (s Suppressed) PersistStreamTime() Suppressed { s.keepTime = true; return s }

// UntilTimeLimit holds each key's updates back until stream time has
// passed the time of the first update held by d, then emits the latest,
// as Kafka Streams' Suppressed.untilTimeLimit does. buf bounds what is
// held.
func UntilTimeLimit(d time.Duration, buf BufferConfig) Suppressed {
	return Suppressed{limit: max(millis(d), 0), buf: buf}
}

// UntilWindowCloses holds back the updates of a windowed table (the result
// of a windowed aggregation, possibly filtered or mapped) until its window
// closes (stream time reaches the window's end plus the windows' grace),
// then emits the window's final result, and never a window's deletion, as
// Kafka Streams' Suppressed.untilWindowCloses does. buf must be Unbounded
// or ShutDownWhenFull: a final result is never emitted early.
func UntilWindowCloses(buf BufferConfig) Suppressed {
	return Suppressed{finalResults: true, buf: buf}
}

// BufferConfig bounds the updates Suppress holds: MaxRecords keys, their
// encoded keys and values together MaxBytes. When an update takes the
// buffer over a bound, the earliest held updates are emitted early
// (EmitEarlyWhenFull, the default of a bounded buffer) or processing fails
// (ShutDownWhenFull).
type BufferConfig struct {
	maxRecords, maxBytes int64
	shutDown             bool
}

// Unbounded is a buffer without bounds; it holds updates until their time
// comes, however many.
func Unbounded() BufferConfig {
	return BufferConfig{maxRecords: math.MaxInt64, maxBytes: math.MaxInt64, shutDown: true}
}

// MaxRecords is a buffer of at most n keys that emits early when full.
func MaxRecords(n int64) BufferConfig {
	return BufferConfig{maxRecords: n, maxBytes: math.MaxInt64}
}

// MaxBytes is a buffer of at most n bytes of keys and values that emits
// early when full.
func MaxBytes(n int64) BufferConfig {
	return BufferConfig{maxRecords: math.MaxInt64, maxBytes: n}
}

// WithMaxRecords also bounds the buffer to n keys.
func (c BufferConfig) WithMaxRecords(n int64) BufferConfig { c.maxRecords = n; return c }

// WithMaxBytes also bounds the buffer to n bytes.
func (c BufferConfig) WithMaxBytes(n int64) BufferConfig { c.maxBytes = n; return c }

// EmitEarlyWhenFull emits the earliest held updates when the buffer is
// full.
func (c BufferConfig) EmitEarlyWhenFull() BufferConfig { c.shutDown = false; return c }

// ShutDownWhenFull fails processing when the buffer is full.
func (c BufferConfig) ShutDownWhenFull() BufferConfig { c.shutDown = true; return c }

// windowClose is what UntilWindowCloses needs of a windowed table: how
// long after a window's end it closes (the windows' grace; for sessions,
// the inactivity gap plus grace).
type windowClose struct{ grace int64 }

// windowEnder is a Windowed key, whose window's end UntilWindowCloses
// waits for.
type windowEnder interface{ windowEnd() int64 }

func (w Windowed[K]) windowEnd() int64 { return w.Window.End }

// Suppress returns the table of t's updates held back as s says. The held
// updates are kept in the store named store (persistent and logged unless
// InMemory or WithoutLogging is given), so that a restart or a failover
// neither loses nor, under exactly-once, repeats them; the stream time the
// node has seen is kept with them only given PersistStreamTime. A join with the returned table reads what
// it last emitted: for a key with an update held, the value before it,
// else t's current value. Named names the node.
func (t KTable[K, V]) Suppress(s Suppressed, store string, opts ...Option) KTable[K, V] {
	b := t.builder()
	o := collect(opts)
	n := b.addNode(kindProcessor, "table-suppress", o, t.n)
	n.olds = parentOldValues
	n.stores = []string{store}
	b.declareStore(StoreInfo{Name: store, Persistent: !o.inMemory, Logged: !o.unlogged}, n.label())
	limit := s.limit
	if s.finalResults {
		if t.windows == nil {
			b.errorf("%s: UntilWindowCloses needs a windowed table (the result of a windowed aggregation)", n.label())
		} else {
			limit = t.windows.grace
		}
		if !s.buf.shutDown {
			b.errorf("%s: UntilWindowCloses needs an Unbounded or ShutDownWhenFull buffer: a final result is never emitted early", n.label())
		}
	}
	if s.buf.maxRecords <= 0 && s.buf.maxBytes <= 0 {
		b.errorf("%s: zero BufferConfig; use Unbounded, MaxRecords or MaxBytes", n.label())
	}
	if t.keySerde == nil || t.valueSerde == nil {
		b.errorf("%s: the table needs a key and a value serde (give a derived table one with TableValueSerde, a table join without a store its valueSerde)", n.label())
	}
	if t.asOf != nil {
		// Refused as Kafka Streams refuses it: a suppressed table emits
		// latest values, and a versioned one also forwards history.
		b.errorf("%s: a versioned table, or one derived from it without Materialized, cannot be suppressed", n.label())
	}
	ks, vs, final, buf, keepTime := t.keySerde, t.valueSerde, s.finalResults, s.buf, s.keepTime
	n.newProc = func() (procImpl, error) {
		return &suppressProc[K, V]{store: store, keySerde: ks, valueSerde: vs, final: final, limit: limit, buf: buf, keepTime: keepTime,
			streamTime: math.MinInt64, committedTime: math.MinInt64}, nil
	}
	out := KTable[K, V]{b: b, n: n, keySerde: ks, valueSerde: vs, windows: t.windows}
	if t.windows == nil {
		// The held updates keep the value each replaced, for the view.
		b.requireOldValues(t.n, n.label())
	}
	parentStores, parent := t.view()
	out.lookupStores = append([]string{store}, parentStores...)
	out.lookup = func(open func(string) (statestore.ReadWriter, error)) (func(K) (V, int64, bool, error), error) {
		rw, err := open(store)
		if err != nil {
			return nil, err
		}
		get, err := parent(open)
		if err != nil {
			return nil, err
		}
		return func(k K) (V, int64, bool, error) {
			kb, err := ks.Encode(k)
			if err != nil {
				return zero[V](), statestore.NoTimestamp, false, err
			}
			tb, held, err := rw.Get(append([]byte{1}, kb...))
			if err != nil || !held {
				if err != nil {
					return zero[V](), statestore.NoTimestamp, false, err
				}
				return get(k)
			}
			hb, found, err := rw.Get(append(append([]byte{0}, tb...), kb...))
			if err != nil || !found {
				return zero[V](), statestore.NoTimestamp, false, err
			}
			h, err := decodeHeld(hb)
			if err != nil || h.flags&2 == 0 {
				return zero[V](), statestore.NoTimestamp, false, err
			}
			v, err := vs.Decode(bytes.Clone(h.old))
			return v, statestore.NoTimestamp, err == nil, err
		}, nil
	}
	return out
}

// suppressProc holds a table's updates in its store, laid out as
//
//	00 | buffer time (8, big-endian, sign bit flipped) | key   → heldUpdate
//	01 | key                                               → its buffer time
//	02                                                     → stream time (keepTime)
//
// so the held updates are one range in buffer-time order. A key updated
// again keeps its place (its first update's time) and its old value, as
// in Kafka Streams, and takes the latest update's value, timestamp and
// headers.
type suppressProc[K, V any] struct {
	store      string
	keySerde   serde.Serde[K]
	valueSerde serde.Serde[V]
	final      bool
	limit      int64
	buf        BufferConfig
	// keepTime: stream time is read from and written to the store
	// (PersistStreamTime); else it lives in memory, as a windowed
	// aggregation's clock does, and a new task starts without one.
	keepTime bool

	rw statestore.ReadWriter
	// What the store holds, read at the first record after start or an
	// abort (started false): held updates and their bytes, the earliest
	// buffer time (math.MaxInt64 when empty), so that a record that
	// releases nothing costs no range scan, and with keepTime stream time.
	started bool
	records int64
	bytes   int64
	minTime int64
	// streamTime is the latest record time seen (math.MinInt64 before
	// the first); without keepTime, an abort takes it back to
	// committedTime, its value at the last commit.
	streamTime    int64
	committedTime int64
}

var (
	suppressStreamTimeKey = []byte{2}
	errSuppressFull       = errors.New("suppression buffer full")
)

func (p *suppressProc[K, V]) init(c *nodeInstance) error {
	rw, err := c.store(p.store)
	p.rw = rw
	return err
}

func sortableTime(t int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(t)^(1<<63)) }

// heldTime is the buffer time of a held update's key.
func heldTime(ek []byte) int64 { return int64(binary.BigEndian.Uint64(ek[1:9]) ^ (1 << 63)) }

func (p *suppressProc[K, V]) start() error {
	p.records, p.bytes, p.minTime = 0, 0, math.MaxInt64
	if p.keepTime {
		p.streamTime = math.MinInt64
		v, found, err := p.rw.Get(suppressStreamTimeKey)
		if err != nil {
			return err
		}
		if found && len(v) == 8 {
			p.streamTime = int64(binary.BigEndian.Uint64(v))
		}
	}
	it, err := p.rw.Range([]byte{0}, []byte{1})
	if err != nil {
		return err
	}
	for it.Next() {
		if p.records == 0 && len(it.Key()) >= 9 {
			p.minTime = heldTime(it.Key())
		}
		p.records++
		p.bytes += int64(len(it.Key()) - 9 + len(it.Value()))
	}
	p.started = true
	return errors.Join(it.Err(), it.Close())
}

func (p *suppressProc[K, V]) process(c *nodeInstance, r record) error {
	if r.keyNull {
		return nil
	}
	if !p.started {
		if err := p.start(); err != nil {
			return err
		}
	}
	if ts := r.ts.UnixMilli(); ts > p.streamTime {
		p.streamTime = ts
		if p.keepTime {
			if err := p.rw.Put(suppressStreamTimeKey, binary.BigEndian.AppendUint64(nil, uint64(ts))); err != nil {
				return err
			}
		}
	}
	k := as[K](r.key)
	kb, err := p.keySerde.Encode(k)
	if err != nil {
		return fmt.Errorf("encode key for store %q: %w", p.store, err)
	}
	if err := p.hold(k, kb, r); err != nil {
		return err
	}
	return p.enforce(c)
}

// hold puts r in the buffer, in the place of k's held update if it has one.
func (p *suppressProc[K, V]) hold(k K, kb []byte, r record) error {
	ik := append([]byte{1}, kb...)
	var ek []byte
	var old []byte
	flags := byte(0)
	if tb, found, err := p.rw.Get(ik); err != nil {
		return err
	} else if found {
		ek = append(append([]byte{0}, tb...), kb...)
		prev, found, err := p.rw.Get(ek)
		if err != nil {
			return err
		}
		if found {
			h, err := decodeHeld(prev)
			if err != nil {
				return fmt.Errorf("store %q: %w", p.store, err)
			}
			old, flags = h.old, h.flags&2
			p.records--
			p.bytes -= int64(len(kb) + len(prev))
		}
	} else {
		t := r.ts.UnixMilli()
		if p.final {
			t = any(k).(windowEnder).windowEnd()
		}
		tb := sortableTime(t)
		ek = append(append([]byte{0}, tb...), kb...)
		p.minTime = min(p.minTime, t)
		if err := p.rw.Put(ik, tb); err != nil {
			return err
		}
		if r.old != nil && !r.old.null {
			if old, err = p.valueSerde.Encode(as[V](r.old.value)); err != nil {
				return fmt.Errorf("encode value for store %q: %w", p.store, err)
			}
			flags |= 2
		}
	}
	var nv []byte
	if !r.valueNull {
		var err error
		if nv, err = p.valueSerde.Encode(as[V](r.value)); err != nil {
			return fmt.Errorf("encode value for store %q: %w", p.store, err)
		}
		flags |= 1
	}
	held := heldUpdate{flags: flags, ts: r.ts.UnixMilli(), nv: nv, old: old, headers: r.headers}.encode()
	p.records++
	p.bytes += int64(len(kb) + len(held))
	return p.rw.Put(ek, held)
}

// heldUpdate is a held update as its store value holds it:
//
//	flags (1: has a new value, 2: has an old value) | timestamp (8) |
//	new value | old value | header count | headers
//
// each value and header key a uvarint length and bytes, a header value a
// uvarint of its length plus one (0 for nil) and bytes.
type heldUpdate struct {
	flags   byte
	ts      int64
	nv, old []byte
	headers []Header
}

func (h heldUpdate) encode() []byte {
	b := append([]byte{h.flags}, binary.BigEndian.AppendUint64(nil, uint64(h.ts))...)
	for _, part := range [][]byte{h.nv, h.old} {
		b = append(binary.AppendUvarint(b, uint64(len(part))), part...)
	}
	b = binary.AppendUvarint(b, uint64(len(h.headers)))
	for _, hd := range h.headers {
		b = append(binary.AppendUvarint(b, uint64(len(hd.Key))), hd.Key...)
		if hd.Value == nil {
			b = binary.AppendUvarint(b, 0)
			continue
		}
		b = append(binary.AppendUvarint(b, uint64(len(hd.Value))+1), hd.Value...)
	}
	return b
}

var errBadHeld = errors.New("malformed held update")

// decodeHeld decodes a held update; its slices share b.
func decodeHeld(b []byte) (heldUpdate, error) {
	var h heldUpdate
	if len(b) < 9 {
		return h, errBadHeld
	}
	h.flags, h.ts, b = b[0], int64(binary.BigEndian.Uint64(b[1:9])), b[9:]
	next := func() ([]byte, bool) {
		n, w := binary.Uvarint(b)
		if w <= 0 || uint64(len(b)-w) < n {
			return nil, false
		}
		part := b[w : w+int(n)]
		b = b[w+int(n):]
		return part, true
	}
	var ok bool
	if h.nv, ok = next(); !ok {
		return h, errBadHeld
	}
	if h.old, ok = next(); !ok {
		return h, errBadHeld
	}
	count, w := binary.Uvarint(b)
	if w <= 0 || count > uint64(len(b)) {
		return h, errBadHeld
	}
	b = b[w:]
	for range count {
		k, ok := next()
		if !ok {
			return h, errBadHeld
		}
		n, w := binary.Uvarint(b)
		if w <= 0 || (n > 0 && uint64(len(b)-w) < n-1) {
			return h, errBadHeld
		}
		hd := Header{Key: string(k)}
		if n > 0 {
			hd.Value = bytes.Clone(b[w : w+int(n-1)])
			b = b[w+int(n-1):]
		} else {
			b = b[w:]
		}
		h.headers = append(h.headers, hd)
	}
	return h, nil
}

// enforce emits the held updates whose time has come, then, if the buffer
// is over a bound, the earliest ones (or fails).
func (p *suppressProc[K, V]) enforce(c *nodeInstance) error {
	expiry := p.streamTime - p.limit
	if p.streamTime == math.MinInt64 {
		expiry = math.MinInt64
	}
	over := func() bool { return p.records > p.buf.maxRecords || p.bytes > p.buf.maxBytes }
	if p.minTime <= expiry {
		if err := p.evict(c, func(t int64) bool { return t <= expiry }); err != nil {
			return err
		}
	}
	if !over() {
		return nil
	}
	if p.buf.shutDown {
		return fmt.Errorf("%w: store %q holds %d records (at most %d) and %d bytes (at most %d)",
			errSuppressFull, p.store, p.records, p.buf.maxRecords, p.bytes, p.buf.maxBytes)
	}
	return p.evict(c, func(int64) bool { return over() })
}

// evict emits and removes held updates in buffer-time order while due says
// so of their time.
func (p *suppressProc[K, V]) evict(c *nodeInstance, due func(t int64) bool) error {
	for {
		it, err := p.rw.Range([]byte{0}, []byte{1})
		if err != nil {
			return err
		}
		var ek, held []byte
		if it.Next() {
			ek, held = bytes.Clone(it.Key()), bytes.Clone(it.Value())
		}
		if err := errors.Join(it.Err(), it.Close()); err != nil || ek == nil || len(ek) < 9 {
			p.minTime = math.MaxInt64
			return err
		}
		p.minTime = heldTime(ek)
		if !due(p.minTime) {
			return nil
		}
		kb := ek[9:]
		if err := errors.Join(p.rw.Delete(ek), p.rw.Delete(append([]byte{1}, kb...))); err != nil {
			return err
		}
		p.records--
		p.bytes -= int64(len(kb) + len(held))
		if err := p.emit(c, kb, held); err != nil {
			return err
		}
	}
}

func (p *suppressProc[K, V]) emit(c *nodeInstance, kb, held []byte) error {
	h, err := decodeHeld(held)
	if err != nil {
		return fmt.Errorf("store %q: %w", p.store, err)
	}
	hasNew := h.flags&1 != 0
	if !hasNew && p.final {
		return nil // a window's deletion is no final result
	}
	k, err := p.keySerde.Decode(bytes.Clone(kb))
	if err != nil {
		return fmt.Errorf("decode key in store %q: %w", p.store, err)
	}
	// Emitted as the latest update held: its timestamp and headers.
	out := record{key: k, value: zero[V](), valueNull: !hasNew, ts: time.UnixMilli(h.ts), headers: h.headers}
	if hasNew {
		if out.value, err = p.valueSerde.Decode(bytes.Clone(h.nv)); err != nil {
			return fmt.Errorf("decode value in store %q: %w", p.store, err)
		}
	}
	if c.node.sendOld {
		out.old = &prior{value: zero[V](), null: h.flags&2 == 0}
		if !out.old.null {
			if out.old.value, err = p.valueSerde.Decode(bytes.Clone(h.old)); err != nil {
				return fmt.Errorf("decode value in store %q: %w", p.store, err)
			}
		}
	}
	return c.forward(out)
}

// committed and rewind make an abort forget the counts read from the
// store, whose cache drops the aborted writes: they are read again, and
// stream time with them or, not kept there, taken back to the commit's.
func (p *suppressProc[K, V]) committed() { p.committedTime = p.streamTime }

func (p *suppressProc[K, V]) rewind() { p.started, p.streamTime = false, p.committedTime }

func (p *suppressProc[K, V]) close() error { return nil }

package topology

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

// Versioned materializes a table read with Table, one derived with
// Filter, FilterNot or MapTableValues given Materialized, or the results
// of an aggregation or a table join (see below), in a versioned store
// (KIP-889): besides each key's latest value it keeps the values it had
// over the last history (statestore.VersionedStore), so that interactive
// queries can ask for a value as of a time, and a stream joined with the
// table (Join, LeftJoin) meets the value its key had at each record's
// timestamp. As in Kafka Streams (KIP-914), an update older than the
// key's latest (out of order) goes into the history and is forwarded
// marked as not the latest: table joins (JoinTables and the others,
// JoinByForeignKey on either side) and GroupTableBy drop it, while
// ToStream, Filter, FilterNot and MapTableValues pass it on (a derived
// table materialized in a plain store takes it as its latest, as Kafka
// Streams' does). An update older than the table's stream time minus
// history is dropped. A versioned table, and one derived from it without
// Materialized, cannot be suppressed. Its updates are forwarded as they
// are applied, never held by the record cache: Kafka Streams does not
// cache versioned stores. Global tables refuse it, as in Kafka Streams.
//
// An aggregation (Aggregate, Count, Reduce, of streams, co-grouped
// streams or tables) or a table join (JoinTables and the others, given a
// store, and the foreign-key joins) given Versioned keeps its results as
// versions, each at its own time (an aggregate's is the latest of its
// records', a join result's the later of its sides'); a result older than
// the store's history is neither kept nor forwarded, and one older than
// its key's latest is forwarded marked as not the latest. As Kafka
// Streams documents, such a history is not the results as of each time
// but the results as they were computed from the records that had
// arrived: a query as of a time answers with what was known then.
//
// A table's changelog holds the same records whether its store is plain
// or versioned, so a table can be switched from one to the other without
// a reset: the runtime finds the store in the other layout, empties it
// and restores it from the changelog.
func Versioned(history time.Duration) Option {
	return func(o *options) { o.versioned, o.history = true, history.Milliseconds() }
}

// StoreLayoutError is the error a table's first record meets when its
// store holds the other layout's entries, which would be misread: read
// plain, a versioned store's own keys (a table read with Table, or derived
// with Filter, FilterNot or MapTableValues in a store of its own), or read
// with Versioned, a plain store's entries. The runtime empties a store
// found in the other layout when it opens it and restores it from its
// changelog, whose records both kinds read, so this error means a store
// given to the table by other means. The runtime stops the stream thread
// on it, whatever its processing error handling.
type StoreLayoutError struct {
	Store string
	// Versioned is true when the table is read with Versioned and the
	// store holds a plain store's entries.
	Versioned bool
	Err       error
}

func (e *StoreLayoutError) Error() string {
	if e.Versioned {
		return fmt.Sprintf("topology: store %q holds a plain key-value store's entries but its table is read Versioned (%v): reset the application so that the store and its changelog are rebuilt from the table's topic", e.Store, e.Err)
	}
	return fmt.Sprintf("topology: store %q holds a versioned store's own keys, restored from a changelog written before versioned stores logged their puts, but its table is now read plain (%v): reset the application so that the store and its changelog are rebuilt from the table's topic, or read the table Versioned again", e.Store, e.Err)
}

func (e *StoreLayoutError) Unwrap() error { return e.Err }

// layoutCheck is a materialized table's check, before its first record,
// that its store holds the layout the table reads (versioned or plain).
// It runs on the first record rather than at init, since a store is
// restored from its changelog after init. Until the store passes, every
// record checks again, so that a processing error handler that skips
// records cannot get past it.
type layoutCheck struct {
	store     string
	versioned bool
	passed    bool
}

func (l *layoutCheck) check(rw statestore.ReadWriter) error {
	if l.passed {
		return nil
	}
	check := statestore.CheckPlainLayout
	if l.versioned {
		check = statestore.CheckVersionedLayout
	}
	if err := check(rw); err != nil {
		if errors.Is(err, statestore.ErrLayoutMismatch) {
			return &StoreLayoutError{Store: l.store, Versioned: l.versioned, Err: err}
		}
		return err
	}
	l.passed = true
	return nil
}

// versionedStoreInfo declares the store of a versioned table.
func (b *Builder) versionedStoreInfo(name string, o options) StoreInfo {
	if o.history < 0 {
		b.errorf("store %q: versioned history %d ms is negative", name, o.history)
	}
	return StoreInfo{Name: name, Persistent: !o.inMemory, Logged: !o.unlogged, Kind: VersionedKind, Retention: max(o.history, 0)}
}

// VersionedRecord is one version of a key in a versioned store: Value,
// valid from ValidFrom (included) until ValidTo (excluded), in
// milliseconds; ValidTo is statestore.OpenEnded for the latest version.
type VersionedRecord[V any] struct {
	Value              V
	ValidFrom, ValidTo int64
}

// VersionedKeyValueStore is a typed view of a byte-level versioned store.
type VersionedKeyValueStore[K, V any] struct {
	s  *statestore.VersionedStore
	ks serde.Serde[K]
	vs serde.Serde[V]
}

// NewVersionedKeyValueStore wraps s with keySerde and valueSerde.
func NewVersionedKeyValueStore[K, V any](s *statestore.VersionedStore, keySerde serde.Serde[K], valueSerde serde.Serde[V]) *VersionedKeyValueStore[K, V] {
	return &VersionedKeyValueStore[K, V]{s: s, ks: keySerde, vs: valueSerde}
}

// GetVersionedStore returns the versioned store info declares (Kind
// VersionedKind, Retention its history in milliseconds) from p, typed
// with keySerde and valueSerde.
func GetVersionedStore[K, V any](p StoreProvider, info StoreInfo, keySerde serde.Serde[K], valueSerde serde.Serde[V]) (*VersionedKeyValueStore[K, V], error) {
	if info.Kind != VersionedKind {
		return nil, fmt.Errorf("topology: store %q is a %s store, not a versioned store", info.Name, info.Kind)
	}
	if keySerde == nil || valueSerde == nil {
		return nil, fmt.Errorf("topology: store %q: key and value serdes must not be nil", info.Name)
	}
	rw, err := p.Store(info.Name)
	if err != nil {
		return nil, err
	}
	vs, err := statestore.NewVersionedStore(rw, info.VersionedOptions())
	if err != nil {
		return nil, err
	}
	return NewVersionedKeyValueStore(vs, keySerde, valueSerde), nil
}

// Get returns k's latest version, not found when k has none or was
// deleted last.
func (s *VersionedKeyValueStore[K, V]) Get(k K) (VersionedRecord[V], bool, error) {
	kb, err := encodeStoreKey(s.ks, k)
	if err != nil {
		return VersionedRecord[V]{}, false, err
	}
	return s.decode(s.s.Get(kb))
}

// GetAsOf returns k's version valid at asOf (milliseconds), not found if
// there is none or it is older than the store keeps
// (statestore.VersionedStore.GetAsOf).
func (s *VersionedKeyValueStore[K, V]) GetAsOf(k K, asOf int64) (VersionedRecord[V], bool, error) {
	kb, err := encodeStoreKey(s.ks, k)
	if err != nil {
		return VersionedRecord[V]{}, false, err
	}
	return s.decode(s.s.GetAsOf(kb, asOf))
}

func (s *VersionedKeyValueStore[K, V]) decode(v statestore.Version, found bool, err error) (VersionedRecord[V], bool, error) {
	if err != nil || !found {
		return VersionedRecord[V]{}, false, err
	}
	val, err := s.vs.Decode(v.Value)
	if err != nil {
		return VersionedRecord[V]{}, false, fmt.Errorf("topology: decode store value: %w", err)
	}
	return VersionedRecord[V]{Value: val, ValidFrom: v.ValidFrom, ValidTo: v.ValidTo}, true, nil
}

// Put stores v as k's version from ts (milliseconds) on; see
// statestore.VersionedStore.Put for what it returns.
func (s *VersionedKeyValueStore[K, V]) Put(k K, v V, ts int64) (validTo int64, put bool, err error) {
	kb, err := encodeStoreKey(s.ks, k)
	if err != nil {
		return 0, false, err
	}
	vb, err := encodeStoreValue(s.vs, v)
	if err != nil {
		return 0, false, err
	}
	return s.s.Put(kb, vb, ts)
}

// Delete puts a tombstone as k's version from ts on.
func (s *VersionedKeyValueStore[K, V]) Delete(k K, ts int64) (validTo int64, put bool, err error) {
	kb, err := encodeStoreKey(s.ks, k)
	if err != nil {
		return 0, false, err
	}
	return s.s.Put(kb, nil, ts)
}

// openVersions opens the store of t, a versioned table, typed.
func (t KTable[K, V]) openVersions(open func(string) (statestore.ReadWriter, error)) (*VersionedKeyValueStore[K, V], error) {
	rw, err := open(t.store)
	if err != nil {
		return nil, err
	}
	s, err := statestore.NewVersionedStore(rw, statestore.VersionedOptions{HistoryRetention: t.history})
	if err != nil {
		return nil, err
	}
	return NewVersionedKeyValueStore(s, t.keySerde, t.valueSerde), nil
}

// asOfLookup reads one key of a table as of a time, as tableLookup reads
// its current value: made once per task, it returns the key's value at
// the time, the time that value became valid, and whether the table held
// the key then.
type asOfLookup[K, V any] func(open func(store string) (statestore.ReadWriter, error)) (func(k K, at int64) (V, int64, bool, error), error)

// valuesAsOf is the asOfLookup of t, a versioned table.
func (t KTable[K, V]) valuesAsOf(open func(string) (statestore.ReadWriter, error)) (func(K, int64) (V, int64, bool, error), error) {
	s, err := t.openVersions(open)
	if err != nil {
		return nil, err
	}
	return func(k K, at int64) (V, int64, bool, error) {
		r, found, err := s.GetAsOf(k, at)
		if !found {
			return r.Value, statestore.NoTimestamp, false, err
		}
		return r.Value, r.ValidFrom, true, nil
	}, nil
}

// latestValues is the tableLookup of t, a versioned table: its latest
// values, which are the table's current ones, each with the time its
// version became valid.
func (t KTable[K, V]) latestValues(open func(string) (statestore.ReadWriter, error)) (func(K) (V, int64, bool, error), error) {
	s, err := t.openVersions(open)
	if err != nil {
		return nil, err
	}
	return func(k K) (V, int64, bool, error) {
		r, found, err := s.Get(k)
		if !found {
			return r.Value, statestore.NoTimestamp, false, err
		}
		return r.Value, r.ValidFrom, true, nil
	}, nil
}

// processVersioned applies one record of a versioned table: a version of
// its key at the record's time (a tombstone for a null value), forwarded
// at once unless it was too late to be put, marked notLatest when it
// went into the key's history, as Kafka Streams' table sources over
// versioned stores do. The old value sent with it is the key's latest
// before the put, which an out-of-order put leaves as it was.
func (p *tableProc[K, V]) processVersioned(c *nodeInstance, kb []byte, r record) error {
	var old *prior
	if c.node.sendOld {
		// Read only when asked for: each read walks the key's versions.
		v, found, err := p.versions.Get(kb)
		if err != nil {
			return err
		}
		old = &prior{null: !found}
		if found {
			if old.value, err = p.valueSerde.Decode(v.Value); err != nil {
				return fmt.Errorf("topology: decode store value: %w", err)
			}
		}
	}
	var vb []byte
	if !r.valueNull {
		var err error
		if vb, err = encodeStoreValue(p.valueSerde, as[V](r.value)); err != nil {
			return err
		}
	}
	validTo, put, err := p.versions.Put(kb, vb, r.ts.UnixMilli())
	if err != nil || !put {
		return err
	}
	r.old, r.notLatest = old, validTo != statestore.OpenEnded
	// Not held for the task's flush: a held update is replaced by the
	// key's next one, which an update of the history must not replace
	// nor be replaced by.
	return c.forward(r)
}

// joinBuffer is a stream-table join's grace period (JoinGrace) and the
// store its records wait in. The store holds
//
//	00                                  → observed time (8) | next seq (8)
//	01 | time (8) | seq (8) | record key → heldUpdate (new value, headers)
//
// with times sign-flipped big-endian, so that records are ordered by time,
// then arrival (seq). The observed time, the latest time of a record that
// waited, lives in the store rather than in memory, so that a task
// restarted, restored elsewhere or rewound after an abort releases waiting
// records on the schedule it had reached.
type joinBuffer struct {
	store string
	grace int64
}

var joinClockKey = []byte{0}

const joinHeldPrefix = 1

// joinGrace checks a stream-table join's grace option and declares the
// store its records wait in; nil when the join has no grace.
func joinGrace[K, TV any](b *Builder, n *node, t KTable[K, TV], o options) *joinBuffer {
	if !o.hasGrace {
		return nil
	}
	switch {
	case o.grace < 0:
		b.errorf("%s: join grace %d ms is negative", n.label(), o.grace)
	case t.asOf == nil:
		b.errorf("%s: a join grace needs a table that keeps its history: read with Versioned, or derived from one without Materialized", n.label())
	case o.grace > t.history:
		b.errorf("%s: join grace %d ms exceeds the table's history of %d ms", n.label(), o.grace, t.history)
	case o.valueSerde == nil:
		b.errorf("%s: a join grace needs the stream's value serde, given with JoinValueSerde", n.label())
	}
	if o.grace <= 0 {
		return nil
	}
	jb := &joinBuffer{store: n.name + "-buffer", grace: o.grace}
	b.declareStore(StoreInfo{Name: jb.store, Persistent: !o.inMemory, Logged: !o.unlogged}, n.label())
	n.stores = append(slices.Clone(n.stores), jb.store)
	return jb
}

func flipTime(t int64) uint64 { return uint64(t) ^ 1<<63 }

// clock reads the buffer's observed time and next sequence number.
func (jb *joinBuffer) clock(rw statestore.ReadWriter) (observed int64, seq uint64, err error) {
	b, found, err := rw.Get(joinClockKey)
	if err != nil || !found {
		return math.MinInt64, 0, err
	}
	if len(b) != 16 {
		return 0, 0, fmt.Errorf("topology: store %q: corrupt join clock", jb.store)
	}
	return int64(binary.BigEndian.Uint64(b)), binary.BigEndian.Uint64(b[8:]), nil
}

// hold puts r in the buffer, or joins it at once if it is too late to
// wait, then joins the records whose wait is over.
func (p *joinProc[K, V, TV, VR]) hold(c *nodeInstance, r record) error {
	jb := p.grace
	observed, seq, err := jb.clock(p.buffer)
	if err != nil {
		return err
	}
	ts := r.ts.UnixMilli()
	if observed != math.MinInt64 && ts < observed-jb.grace {
		return p.join(c, r)
	}
	kb, err := encodeStoreKey(p.ks, as[K](r.key))
	if err != nil {
		return err
	}
	vb, err := encodeStoreValue(p.vs, as[V](r.value))
	if err != nil {
		return err
	}
	k := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64([]byte{joinHeldPrefix}, flipTime(ts)), seq)
	held := heldUpdate{flags: 1, ts: ts, nv: vb, headers: r.headers}.encode()
	if err := p.buffer.Put(append(k, kb...), held); err != nil {
		return err
	}
	observed = max(observed, ts)
	clock := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(observed)), seq+1)
	if err := p.buffer.Put(joinClockKey, clock); err != nil {
		return err
	}
	return p.release(c, observed-jb.grace)
}

// release joins, in time order, the waiting records of times up to until,
// and removes them.
func (p *joinProc[K, V, TV, VR]) release(c *nodeInstance, until int64) error {
	to := []byte{joinHeldPrefix + 1}
	if until < math.MaxInt64 {
		to = binary.BigEndian.AppendUint64([]byte{joinHeldPrefix}, flipTime(until+1))
	}
	it, err := p.buffer.Range([]byte{joinHeldPrefix}, to)
	if err != nil {
		return err
	}
	var done []statestore.Entry
	for it.Next() {
		done = append(done, statestore.Entry{Key: bytes.Clone(it.Key()), Value: bytes.Clone(it.Value())})
	}
	if err := errors.Join(it.Err(), it.Close()); err != nil {
		return err
	}
	for _, e := range done {
		if len(e.Key) < 17 {
			return fmt.Errorf("topology: store %q: corrupt waiting record", p.grace.store)
		}
		h, err := decodeHeld(e.Value)
		if err != nil {
			return fmt.Errorf("topology: store %q: %w", p.grace.store, err)
		}
		k, err := p.ks.Decode(e.Key[17:])
		if err != nil {
			return fmt.Errorf("topology: decode store key: %w", err)
		}
		v, err := p.vs.Decode(h.nv)
		if err != nil {
			return fmt.Errorf("topology: decode store value: %w", err)
		}
		if err := p.buffer.Delete(e.Key); err != nil {
			return err
		}
		if err := p.join(c, record{key: k, value: v, ts: time.UnixMilli(h.ts), headers: h.headers}); err != nil {
			return err
		}
	}
	return nil
}

// Results of aggregations and table joins. Given Versioned, as Kafka
// Streams accepts it, such a table keeps its results in a versioned store:
// each result is put as a version at its own time (an aggregate's is the
// latest of its records', a join result's the later of its two sides'),
// and a result older than the store's history is neither put nor
// forwarded. The processors are those of a plain store: they read the
// key's latest version as the key's value, and the node forwards each
// result as it is put, marked as not the latest when it went into the
// history (a join result whose sides' times are older than the key's
// latest). As Kafka Streams documents, such results form no meaningful
// history of their own: a version stands for when a result was computed
// from the inputs as they had arrived, not for what the inputs were at
// that time, so queries as of a time answer with the results then known.

// declareResultStore declares the store of an aggregation's or table
// join's results, node n's, versioned if o says so.
func (b *Builder) declareResultStore(n *node, store string, o options) {
	if !o.versioned {
		b.declareStore(b.tableStoreInfo(store, o), n.label())
		return
	}
	info := b.versionedStoreInfo(store, o)
	// The processor reads and writes values as a plain table's store
	// holds them, with their times (resultVersions).
	info.Timestamped = !b.bareValues
	n.versionedResults, n.resultHistory = store, info.Retention
	b.declareStore(info, n.label())
}

// versionedResult is t, the table of an aggregation's or table join's
// results, as a versioned table when o says so: joins read it as of
// their records' times, and it cannot be suppressed.
func versionedResult[K, V any](t KTable[K, V], o options) KTable[K, V] {
	if o.versioned {
		t.versioned, t.history = true, max(o.history, 0)
		t.asOf = t.valuesAsOf
	}
	return t
}

// errNotPut stops a result processor at a result older than its
// versioned store's history, before it forwards it; the node then
// reports no error.
var errNotPut = errors.New("topology: result older than the versioned store's history: not put")

// resultVersions is the store a result processor writes as a plain
// table's store (timestamped values), kept as versions: Get returns the
// key's latest version, Put puts a version at the value's time, Delete a
// tombstone at the time of the record being processed.
type resultVersions struct {
	vs    *statestore.VersionedStore
	inner statestore.ReadWriter
	// timestamped: Get returns values with their times, as the store of a
	// topology that keeps them does (BareStoreValues).
	timestamped bool
	// ts is the time of the record being processed, in milliseconds.
	ts int64
	// notLatest: the last put went into the key's history.
	notLatest bool
}

var errResultRange = errors.New("topology: a versioned result store is read by key only")

func newResultVersions(rw statestore.ReadWriter, history int64, timestamped bool) (*resultVersions, error) {
	vs, err := statestore.NewVersionedStore(rw, statestore.VersionedOptions{HistoryRetention: history})
	if err != nil {
		return nil, err
	}
	return &resultVersions{vs: vs, inner: rw, timestamped: timestamped}, nil
}

// begin readies r for the processing of a record at ts.
func (r *resultVersions) begin(ts time.Time) { r.ts, r.notLatest = ts.UnixMilli(), false }

func (r *resultVersions) Get(key []byte) ([]byte, bool, error) {
	v, found, err := r.vs.Get(key)
	if !found {
		return nil, false, err
	}
	if !r.timestamped {
		return v.Value, true, nil
	}
	return statestore.AppendTimestamped(nil, v.ValidFrom, v.Value), true, nil
}

func (r *resultVersions) Put(key, value []byte) error {
	if value == nil {
		return statestore.ErrNilValue
	}
	v, ts := statestore.SplitTimestamped(value)
	if ts == statestore.NoTimestamp {
		ts = r.ts // a store kept bare (BareStoreValues)
	}
	return r.put(key, v, ts)
}

func (r *resultVersions) Delete(key []byte) error { return r.put(key, nil, r.ts) }

func (r *resultVersions) put(key, value []byte, ts int64) error {
	validTo, put, err := r.vs.Put(key, value, ts)
	if err != nil {
		return err
	}
	if !put {
		return errNotPut
	}
	r.notLatest = validTo != statestore.OpenEnded
	return nil
}

func (r *resultVersions) Range(from, to []byte) (statestore.Iterator, error) {
	return nil, errResultRange
}

func (r *resultVersions) All() (statestore.Iterator, error) { return nil, errResultRange }

func (r *resultVersions) ApproximateCount() (int64, error) { return r.inner.ApproximateCount() }

// resultStore returns the store of in's versioned results over rw, the
// task's store.
func (in *nodeInstance) resultStore(rw statestore.ReadWriter) (statestore.ReadWriter, error) {
	if in.results == nil {
		var err error
		if in.results, err = newResultVersions(rw, in.node.resultHistory, in.timestamped(in.node.versionedResults)); err != nil {
			return nil, err
		}
	}
	return in.results, nil
}

// processResult runs in's processor on r over its versioned results: a
// result too old to be put ends the record without error, unforwarded.
func (in *nodeInstance) processResult(r record) error {
	in.results.begin(r.ts)
	err := in.proc.process(in, r)
	if errors.Is(err, errNotPut) {
		return nil
	}
	return err
}

package iq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

// StoreKind is what a store's keys are, which decides how it is queried:
// key lookups and ranges for key-value stores, time ranges for window
// stores, a key's sessions for session stores, key lookups (as of a time,
// or the latest) for versioned stores.
type StoreKind int

// Store kinds.
const (
	KindKeyValue StoreKind = iota
	KindWindow
	KindSession
	KindVersioned
)

// String returns key-value, window, session or versioned.
func (k StoreKind) String() string {
	switch k {
	case KindKeyValue:
		return "key-value"
	case KindWindow:
		return "window"
	case KindSession:
		return "session"
	case KindVersioned:
		return "versioned"
	}
	return fmt.Sprintf("StoreKind(%d)", int(k))
}

// StoreLayout is a store's kind and, for window and session stores, the
// options their keys are laid out by (statestore.WindowOptions), which a
// reader needs to find a key's windows; for a versioned store, its history
// retention. Timestamped stores hold their values with a timestamp each
// (statestore.AppendTimestamped).
type StoreLayout struct {
	Kind        StoreKind
	Window      statestore.WindowOptions
	Versioned   statestore.VersionedOptions
	Timestamped bool
}

// LayoutBackend is a Backend that knows the kind of its stores. Window and
// session queries need it; a Backend without it serves key-value stores
// only.
type LayoutBackend interface {
	// StoreLayout returns a store's layout, or ErrUnknownStore (wrapped)
	// for a store the topology lacks.
	StoreLayout(store string) (StoreLayout, error)
}

// Window is one window (or session) of a key, with its value. Times are
// milliseconds since the epoch, as stores keep them.
type Window[K, V any] struct {
	Key K
	// Start and End bound a time window as [Start, End); for a session
	// they are the times of its first and last records, both included.
	Start, End int64
	Value      V
	// Timestamp is the timestamp of a time window's aggregate, the largest
	// of its records' (milliseconds since the epoch), as the aggregation
	// stamped its last result; 0 for a session, and for a window last
	// written before aggregates kept their time.
	Timestamp int64
}

// StartTime returns Start as a time.Time.
func (w Window[K, V]) StartTime() time.Time { return time.UnixMilli(w.Start) }

// EndTime returns End as a time.Time.
func (w Window[K, V]) EndTime() time.Time { return time.UnixMilli(w.End) }

// WindowResult is the answer to a key's windows or sessions: the windows
// by ascending start (sessions by ascending end), and where they came
// from. No window is not an error: Windows is then empty.
type WindowResult[K, V any] struct {
	Windows []Window[K, V]
	// Truncated is set when the limit cut the answer short.
	Truncated  bool
	Provenance Provenance
}

// PartitionWindows is what one partition's replica returned for a time
// range over all keys.
type PartitionWindows[K, V any] struct {
	Provenance Provenance
	// Windows are ordered by segment, then key, then start: keys are in
	// byte order only within a segment (see statestore.WindowStore).
	Windows   []Window[K, V]
	Truncated bool
}

// WindowRangeResult is the answer to a time range over all keys: one entry
// per partition that answered, in partition order, and the partitions that
// refused.
type WindowRangeResult[K, V any] struct {
	Partitions []PartitionWindows[K, V]
	Refused    []PartitionError
}

// MinTime and MaxTime are the widest time range a window query takes, in
// milliseconds: every window a store keeps starts within it.
const (
	MinTime int64 = 0
	MaxTime int64 = math.MaxInt64
)

func (q *Querier) layout(store string) (StoreLayout, error) {
	lb, ok := q.b.(LayoutBackend)
	if !ok {
		return StoreLayout{}, nil
	}
	return lb.StoreLayout(store)
}

// requireKind fails with ErrInvalidQuery when store is not of kind want,
// naming the queries it does take.
func (q *Querier) requireKind(store string, want StoreKind) (StoreLayout, error) {
	l, err := q.layout(store)
	if err != nil {
		return l, err
	}
	if l.Kind != want {
		use := map[StoreKind]string{
			KindKeyValue:  "Get, Range or All",
			KindWindow:    "WindowFetch or WindowFetchAll",
			KindSession:   "SessionFetch",
			KindVersioned: "Get, latest or AsOf a time",
		}[l.Kind]
		return l, invalidf("store %q is a %s store, not a %s store: query it with %s", store, l.Kind, want, use)
	}
	return l, nil
}

// windowQuery is one read of a window or session store: one key's windows
// starting in [from, to], every key's (all), or one key's sessions.
type windowQuery struct {
	kind     StoreKind
	key      []byte
	all      bool
	from, to int64
}

func (wq windowQuery) check() error {
	if wq.kind == KindWindow && wq.from > wq.to {
		return invalidf("time range from %d to %d ms: from is after to", wq.from, wq.to)
	}
	return nil
}

// open wraps a replica's store for reading as the layout says. The reader
// takes the observed time of the replica's SegmentedStore (after a restart,
// a lower bound of the writer's), so it may show windows the writer already
// counts as expired but has not yet removed, never fewer.
func (wq windowQuery) open(s statestore.Store, l StoreLayout) (*statestore.WindowIterator, error) {
	if l.Kind == KindSession {
		ss, err := statestore.NewSessionStore(s, l.Window)
		if err != nil {
			return nil, err
		}
		return ss.Fetch(wq.key)
	}
	ws, err := statestore.NewWindowStore(s, l.Window)
	if err != nil {
		return nil, err
	}
	if wq.all {
		return ws.FetchAll(wq.from, wq.to)
	}
	return ws.Fetch(wq.key, wq.from, wq.to)
}

// readWindows reads a replica found fit to answer, up to limit windows (0
// is no cap). The store reads each live segment as a snapshot of its own.
func (q *Querier) readWindows(ctx context.Context, r Replica, before ReplicaInfo, bound Staleness, l StoreLayout, store string, p int32, wq windowQuery, limit int) (PartitionWindows[[]byte, []byte], error) {
	it, err := wq.open(r.Store(), l)
	if err != nil {
		return PartitionWindows[[]byte, []byte]{}, movedErr(store, p, err)
	}
	defer it.Close()
	var pw PartitionWindows[[]byte, []byte]
	for it.Next() {
		if limit > 0 && len(pw.Windows) == limit {
			pw.Truncated = true
			break
		}
		if len(pw.Windows)%256 == 255 {
			if err := ctx.Err(); err != nil {
				return PartitionWindows[[]byte, []byte]{}, err
			}
		}
		win := Window[[]byte, []byte]{Key: bytes.Clone(it.Key()), Start: it.Start(), End: it.End(), Value: it.Value()}
		if l.Timestamped {
			var ts int64
			if win.Value, ts = statestore.SplitTimestamped(win.Value); ts != statestore.NoTimestamp {
				win.Timestamp = ts
			}
		}
		win.Value = bytes.Clone(win.Value)
		pw.Windows = append(pw.Windows, win)
	}
	if err := it.Err(); err != nil {
		return PartitionWindows[[]byte, []byte]{}, movedErr(store, p, err)
	}
	pw.Provenance = q.provenance(r, p, before, bound)
	return pw, nil
}

// keyWindows answers one key's windows or sessions from the local replica
// of its partition.
func (q *Querier) keyWindows(ctx context.Context, store string, wq windowQuery, opts []QueryOption) (WindowResult[[]byte, []byte], error) {
	if err := ctx.Err(); err != nil {
		return WindowResult[[]byte, []byte]{}, err
	}
	if err := wq.check(); err != nil {
		return WindowResult[[]byte, []byte]{}, err
	}
	l, err := q.requireKind(store, wq.kind)
	if err != nil {
		return WindowResult[[]byte, []byte]{}, err
	}
	o := buildOptions(opts)
	p := o.partition
	if !o.hasPartition {
		if p, err = q.b.KeyPartition(store, wq.key); err != nil {
			return WindowResult[[]byte, []byte]{}, err
		}
	}
	r, before, err := q.replica(store, p, &o)
	if err != nil {
		return WindowResult[[]byte, []byte]{}, err
	}
	pw, err := q.readWindows(ctx, r, before, o.bound, l, store, p, wq, o.limit)
	if err != nil {
		return WindowResult[[]byte, []byte]{}, err
	}
	return WindowResult[[]byte, []byte]{Windows: pw.Windows, Truncated: pw.Truncated, Provenance: pw.Provenance}, nil
}

// WindowFetchBytes returns a serialized key's windows starting in [from,
// to] (milliseconds, both included; MinTime and MaxTime leave a side
// open) from the local replica of its partition, by ascending start. It
// fails as GetBytes does, and with ErrInvalidQuery when the store is not a
// window store or from is after to.
func (q *Querier) WindowFetchBytes(ctx context.Context, store string, key []byte, from, to int64, opts ...QueryOption) (WindowResult[[]byte, []byte], error) {
	return q.keyWindows(ctx, store, windowQuery{kind: KindWindow, key: key, from: from, to: to}, opts)
}

// SessionFetchBytes returns a serialized key's live sessions from the
// local replica of its partition, by ascending end. It fails as GetBytes
// does, and with ErrInvalidQuery when the store is not a session store.
func (q *Querier) SessionFetchBytes(ctx context.Context, store string, key []byte, opts ...QueryOption) (WindowResult[[]byte, []byte], error) {
	return q.keyWindows(ctx, store, windowQuery{kind: KindSession, key: key}, opts)
}

// WindowFetchAllBytes returns every window starting in [from, to] of one
// partition (WithPartition) or of every local replica of the store within
// the bound, up to the limit per partition (WithLimit). A single asked-for
// partition that cannot answer fails the call; otherwise it is listed in
// Refused.
func (q *Querier) WindowFetchAllBytes(ctx context.Context, store string, from, to int64, opts ...QueryOption) (WindowRangeResult[[]byte, []byte], error) {
	var res WindowRangeResult[[]byte, []byte]
	wq := windowQuery{kind: KindWindow, all: true, from: from, to: to}
	if err := wq.check(); err != nil {
		return res, err
	}
	l, err := q.requireKind(store, KindWindow)
	if err != nil {
		return res, err
	}
	o := buildOptions(opts)
	ps, err := q.localPartitions(store, &o)
	if err != nil {
		return res, err
	}
	for _, p := range ps {
		if err := ctx.Err(); err != nil {
			return WindowRangeResult[[]byte, []byte]{}, err
		}
		r, before, err := q.replica(store, p, &o)
		var pw PartitionWindows[[]byte, []byte]
		if err == nil {
			pw, err = q.readWindows(ctx, r, before, o.bound, l, store, p, wq, o.limit)
		}
		switch {
		case err == nil:
			res.Partitions = append(res.Partitions, pw)
		case o.hasPartition || ctx.Err() != nil || errors.Is(err, ErrInvalidQuery):
			return WindowRangeResult[[]byte, []byte]{}, err
		default:
			res.Refused = append(res.Refused, PartitionError{Partition: p, Err: err})
		}
	}
	return res, nil
}

func decodeWindows[K, V any](store string, p int32, in []Window[[]byte, []byte], ks serde.Serde[K], vs serde.Serde[V]) ([]Window[K, V], error) {
	out := make([]Window[K, V], 0, len(in))
	for _, w := range in {
		k, err := ks.Decode(w.Key)
		if err != nil {
			return nil, fmt.Errorf("iq: store %q partition %d: decode key: %w", store, p, err)
		}
		v, err := vs.Decode(w.Value)
		if err != nil {
			return nil, fmt.Errorf("iq: store %q partition %d: decode value: %w", store, p, err)
		}
		out = append(out, Window[K, V]{Key: k, Start: w.Start, End: w.End, Value: v, Timestamp: w.Timestamp})
	}
	return out, nil
}

func decodeWindowResult[K, V any](store string, raw WindowResult[[]byte, []byte], ks serde.Serde[K], vs serde.Serde[V]) (WindowResult[K, V], error) {
	ws, err := decodeWindows(store, raw.Provenance.Partition, raw.Windows, ks, vs)
	if err != nil {
		return WindowResult[K, V]{}, err
	}
	return WindowResult[K, V]{Windows: ws, Truncated: raw.Truncated, Provenance: raw.Provenance}, nil
}

// WindowFetch returns a key's windows starting in [from, to] (both
// included; the zero time leaves either side open) from the local replica
// of its partition, serializing the key and deserializing values with the
// store's serdes (for a windowed Count, the grouping's key serde and
// serde.Int64). See WindowFetchBytes.
func WindowFetch[K, V any](ctx context.Context, q *Querier, store string, key K, from, to time.Time, keySerde serde.Serde[K], valueSerde serde.Serde[V], opts ...QueryOption) (WindowResult[K, V], error) {
	kb, err := keySerde.Encode(key)
	if err != nil {
		return WindowResult[K, V]{}, invalidf("encode key for store %q: %v", store, err)
	}
	raw, err := q.WindowFetchBytes(ctx, store, kb, timeMillis(from), toMillis(to), opts...)
	if err != nil {
		return WindowResult[K, V]{}, err
	}
	return decodeWindowResult(store, raw, keySerde, valueSerde)
}

// SessionFetch returns a key's live sessions from the local replica of its
// partition. See SessionFetchBytes.
func SessionFetch[K, V any](ctx context.Context, q *Querier, store string, key K, keySerde serde.Serde[K], valueSerde serde.Serde[V], opts ...QueryOption) (WindowResult[K, V], error) {
	kb, err := keySerde.Encode(key)
	if err != nil {
		return WindowResult[K, V]{}, invalidf("encode key for store %q: %v", store, err)
	}
	raw, err := q.SessionFetchBytes(ctx, store, kb, opts...)
	if err != nil {
		return WindowResult[K, V]{}, err
	}
	return decodeWindowResult(store, raw, keySerde, valueSerde)
}

// WindowFetchAll returns every key's windows starting in [from, to] from
// one partition or every local replica. See WindowFetchAllBytes.
func WindowFetchAll[K, V any](ctx context.Context, q *Querier, store string, from, to time.Time, keySerde serde.Serde[K], valueSerde serde.Serde[V], opts ...QueryOption) (WindowRangeResult[K, V], error) {
	raw, err := q.WindowFetchAllBytes(ctx, store, timeMillis(from), toMillis(to), opts...)
	if err != nil {
		return WindowRangeResult[K, V]{}, err
	}
	res := WindowRangeResult[K, V]{Refused: raw.Refused}
	for _, pw := range raw.Partitions {
		ws, err := decodeWindows(store, pw.Provenance.Partition, pw.Windows, keySerde, valueSerde)
		if err != nil {
			return WindowRangeResult[K, V]{}, err
		}
		res.Partitions = append(res.Partitions, PartitionWindows[K, V]{Provenance: pw.Provenance, Windows: ws, Truncated: pw.Truncated})
	}
	return res, nil
}

// toMillis is timeMillis for the end of a range: the zero time is
// MaxTime, leaving the range open at the end.
func toMillis(t time.Time) int64 {
	if t.IsZero() {
		return MaxTime
	}
	return max(t.UnixMilli(), MinTime)
}

// timeMillis turns the start of a range into store milliseconds, rounded
// up: a window starting in the millisecond a finer time falls in starts
// before it. The zero time is MinTime, leaving the range open at the start.
func timeMillis(t time.Time) int64 {
	if t.IsZero() {
		return MinTime
	}
	return max(ceilMillis(t), MinTime)
}

// ceilMillis is t in epoch milliseconds, rounded up.
func ceilMillis(t time.Time) int64 {
	ms := t.UnixMilli()
	if time.UnixMilli(ms).Before(t) {
		ms++
	}
	return ms
}

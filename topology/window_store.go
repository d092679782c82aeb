package topology

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

// WindowStore is a typed view of a byte-level window store for the
// Processor API: values keyed by a record key and a window start.
type WindowStore[K, V any] struct {
	s  *statestore.WindowStore
	ks serde.Serde[K]
	vs serde.Serde[V]
}

// NewWindowStore wraps s with keySerde and valueSerde.
func NewWindowStore[K, V any](s *statestore.WindowStore, keySerde serde.Serde[K], valueSerde serde.Serde[V]) *WindowStore[K, V] {
	return &WindowStore[K, V]{s: s, ks: keySerde, vs: valueSerde}
}

func encodeStoreKey[K any](ks serde.Serde[K], k K) ([]byte, error) {
	b, err := ks.Encode(k)
	if err != nil {
		return nil, fmt.Errorf("topology: encode store key: %w", err)
	}
	return b, nil
}

func encodeStoreValue[V any](vs serde.Serde[V], v V) ([]byte, error) {
	b, err := vs.Encode(v)
	if err != nil {
		return nil, fmt.Errorf("topology: encode store value: %w", err)
	}
	if b == nil {
		return nil, fmt.Errorf("topology: store value encodes to nil; use Remove")
	}
	return b, nil
}

// encodeTimestamped encodes v with vs as a timestamped store value
// (statestore.AppendTimestamped), or bare unless timestamped, in bytes of
// its own. A timestamped count (serde.Int64, the most frequent aggregate)
// is written straight into the value, without the slice of its own that
// Encode would allocate.
func encodeTimestamped[V any](vs serde.Serde[V], v V, ts int64, timestamped bool) ([]byte, error) {
	if !timestamped {
		vb, err := encodeStoreValue(vs, v)
		return bytes.Clone(vb), err
	}
	if n, ok := any(&v).(*int64); ok && any(vs) == any(serde.Int64) {
		return binary.BigEndian.AppendUint64(statestore.AppendTimestamped(make([]byte, 0, 20), ts, nil), uint64(*n)), nil
	}
	vb, err := encodeStoreValue(vs, v)
	if err != nil {
		return nil, err
	}
	return statestore.AppendTimestamped(nil, ts, vb), nil
}

// Put stores v for k's window starting at start.
func (w *WindowStore[K, V]) Put(k K, start int64, v V) error {
	kb, err := encodeStoreKey(w.ks, k)
	if err != nil {
		return err
	}
	vb, err := encodeStoreValue(w.vs, v)
	if err != nil {
		return err
	}
	return w.s.Put(kb, start, vb)
}

// Remove removes k's window starting at start.
func (w *WindowStore[K, V]) Remove(k K, start int64) error {
	kb, err := encodeStoreKey(w.ks, k)
	if err != nil {
		return err
	}
	return w.s.Remove(kb, start)
}

// Get returns the value of k's window starting at start.
func (w *WindowStore[K, V]) Get(k K, start int64) (V, bool, error) {
	var zero V
	kb, err := encodeStoreKey(w.ks, k)
	if err != nil {
		return zero, false, err
	}
	vb, found, err := w.s.Get(kb, start)
	if err != nil || !found {
		return zero, false, err
	}
	v, err := w.vs.Decode(vb)
	if err != nil {
		return zero, false, fmt.Errorf("topology: decode store value: %w", err)
	}
	return v, true, nil
}

// Fetch iterates over k's windows starting in [from, to], by start.
func (w *WindowStore[K, V]) Fetch(k K, from, to int64) (*WindowedIterator[K, V], error) {
	return w.fetch(k, from, to, (*statestore.WindowStore).Fetch)
}

// FetchBackward is Fetch by descending start.
func (w *WindowStore[K, V]) FetchBackward(k K, from, to int64) (*WindowedIterator[K, V], error) {
	return w.fetch(k, from, to, (*statestore.WindowStore).FetchBackward)
}

func (w *WindowStore[K, V]) fetch(k K, from, to int64, f func(*statestore.WindowStore, []byte, int64, int64) (*statestore.WindowIterator, error)) (*WindowedIterator[K, V], error) {
	kb, err := encodeStoreKey(w.ks, k)
	if err != nil {
		return nil, err
	}
	return wrapWindowed[K, V](f(w.s, kb, from, to))(w.ks, w.vs)
}

// FetchAll iterates over every window starting in [from, to] (see
// statestore.WindowStore.FetchAll for the order).
func (w *WindowStore[K, V]) FetchAll(from, to int64) (*WindowedIterator[K, V], error) {
	return wrapWindowed[K, V](w.s.FetchAll(from, to))(w.ks, w.vs)
}

// SessionStore is a typed view of a byte-level session store for the
// Processor API: values keyed by a record key and a session.
type SessionStore[K, V any] struct {
	s  *statestore.SessionStore
	ks serde.Serde[K]
	vs serde.Serde[V]
}

// NewSessionStore wraps s with keySerde and valueSerde.
func NewSessionStore[K, V any](s *statestore.SessionStore, keySerde serde.Serde[K], valueSerde serde.Serde[V]) *SessionStore[K, V] {
	return &SessionStore[K, V]{s: s, ks: keySerde, vs: valueSerde}
}

// Put stores v for k's session.
func (w *SessionStore[K, V]) Put(k K, session Window, v V) error {
	kb, err := encodeStoreKey(w.ks, k)
	if err != nil {
		return err
	}
	vb, err := encodeStoreValue(w.vs, v)
	if err != nil {
		return err
	}
	return w.s.Put(kb, session.Start, session.End, vb)
}

// Remove removes k's session.
func (w *SessionStore[K, V]) Remove(k K, session Window) error {
	kb, err := encodeStoreKey(w.ks, k)
	if err != nil {
		return err
	}
	return w.s.Remove(kb, session.Start, session.End)
}

// FindSessions iterates over k's sessions ending at or after earliestEnd
// and starting at or before latestStart (SessionWindows.SearchBounds).
func (w *SessionStore[K, V]) FindSessions(k K, earliestEnd, latestStart int64) (*WindowedIterator[K, V], error) {
	kb, err := encodeStoreKey(w.ks, k)
	if err != nil {
		return nil, err
	}
	return wrapWindowed[K, V](w.s.FindSessions(kb, earliestEnd, latestStart))(w.ks, w.vs)
}

// WindowedIterator walks a typed window or session store. It must be
// closed.
type WindowedIterator[K, V any] struct {
	it  *statestore.WindowIterator
	ks  serde.Serde[K]
	vs  serde.Serde[V]
	key Windowed[K]
	val V
	err error
}

// wrapWindowed turns a byte-level fetch's results into a typed iterator
// once the serdes are given.
func wrapWindowed[K, V any](it *statestore.WindowIterator, err error) func(serde.Serde[K], serde.Serde[V]) (*WindowedIterator[K, V], error) {
	return func(ks serde.Serde[K], vs serde.Serde[V]) (*WindowedIterator[K, V], error) {
		if err != nil {
			return nil, err
		}
		return &WindowedIterator[K, V]{it: it, ks: ks, vs: vs}, nil
	}
}

// Next decodes the next window and reports whether there is one; it
// returns false at the end and on the first error (see Err).
func (i *WindowedIterator[K, V]) Next() bool {
	if i.err != nil || !i.it.Next() {
		return false
	}
	k, err := i.ks.Decode(i.it.Key())
	if err != nil {
		i.err = fmt.Errorf("topology: decode store key: %w", err)
		return false
	}
	v, err := i.vs.Decode(i.it.Value())
	if err != nil {
		i.err = fmt.Errorf("topology: decode store value: %w", err)
		return false
	}
	i.key = Windowed[K]{Key: k, Window: Window{Start: i.it.Start(), End: i.it.End()}}
	i.val = v
	return true
}

// Key returns the current key and window.
func (i *WindowedIterator[K, V]) Key() Windowed[K] { return i.key }

// Value returns the current value.
func (i *WindowedIterator[K, V]) Value() V { return i.val }

// Err returns the first error of the iteration.
func (i *WindowedIterator[K, V]) Err() error {
	if i.err != nil {
		return i.err
	}
	return i.it.Err()
}

// Close releases the iterator.
func (i *WindowedIterator[K, V]) Close() error { return i.it.Close() }

// Collect drains the iterator into a slice and closes it.
func (i *WindowedIterator[K, V]) Collect() ([]KeyValue[Windowed[K], V], error) {
	var out []KeyValue[Windowed[K], V]
	for i.Next() {
		out = append(out, KeyValue[Windowed[K], V]{Key: i.key, Value: i.val})
	}
	err := i.Err()
	if cerr := i.Close(); err == nil {
		err = cerr
	}
	return out, err
}

// GetWindowStore returns the window store info declares (with AddStore,
// Kind WindowKind, Retention and WindowSize set) from p, typed with keySerde
// and valueSerde. info must be the declaration itself: its WindowOptions
// lay out the store's keys.
func GetWindowStore[K, V any](p StoreProvider, info StoreInfo, keySerde serde.Serde[K], valueSerde serde.Serde[V]) (*WindowStore[K, V], error) {
	if info.Kind != WindowKind {
		return nil, fmt.Errorf("topology: store %q is a %s store, not a window store", info.Name, info.Kind)
	}
	if keySerde == nil || valueSerde == nil {
		return nil, fmt.Errorf("topology: store %q: key and value serdes must not be nil", info.Name)
	}
	rw, err := p.Store(info.Name)
	if err != nil {
		return nil, err
	}
	ws, err := statestore.NewWindowStore(rw, info.WindowOptions())
	if err != nil {
		return nil, err
	}
	return NewWindowStore(ws, keySerde, valueSerde), nil
}

// GetSessionStore is GetWindowStore for a session store (Kind SessionKind).
func GetSessionStore[K, V any](p StoreProvider, info StoreInfo, keySerde serde.Serde[K], valueSerde serde.Serde[V]) (*SessionStore[K, V], error) {
	if info.Kind != SessionKind {
		return nil, fmt.Errorf("topology: store %q is a %s store, not a session store", info.Name, info.Kind)
	}
	if keySerde == nil || valueSerde == nil {
		return nil, fmt.Errorf("topology: store %q: key and value serdes must not be nil", info.Name)
	}
	rw, err := p.Store(info.Name)
	if err != nil {
		return nil, err
	}
	ss, err := statestore.NewSessionStore(rw, info.WindowOptions())
	if err != nil {
		return nil, err
	}
	return NewSessionStore(ss, keySerde, valueSerde), nil
}

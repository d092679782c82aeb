package topology

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
)

// KeyValueStore is a typed view of a byte-level store: keys and values are
// encoded with the serdes it was made with. Iteration order is the order of
// the encoded keys (so, for example, negative int64 keys encoded with
// serde.Int64 sort after positive ones).
type KeyValueStore[K, V any] struct {
	rw         statestore.ReadWriter
	keySerde   serde.Serde[K]
	valueSerde serde.Serde[V]
	// timestamped: the store is a table's, whose values carry the
	// timestamp of their update (statestore.AppendTimestamped). Values
	// read come without it; values written by Put have none.
	timestamped bool
}

// NewKeyValueStore wraps rw with keySerde and valueSerde.
func NewKeyValueStore[K, V any](rw statestore.ReadWriter, keySerde serde.Serde[K], valueSerde serde.Serde[V]) *KeyValueStore[K, V] {
	return &KeyValueStore[K, V]{rw: rw, keySerde: keySerde, valueSerde: valueSerde}
}

// newTableStore wraps the store of a table (declared with tableStoreInfo),
// whose values are timestamped unless the topology keeps them bare
// (BareStoreValues). Values are read either way.
func newTableStore[K, V any](rw statestore.ReadWriter, keySerde serde.Serde[K], valueSerde serde.Serde[V], timestamped bool) *KeyValueStore[K, V] {
	return &KeyValueStore[K, V]{rw: rw, keySerde: keySerde, valueSerde: valueSerde, timestamped: timestamped}
}

// tableStoreInfo declares the store of a table: its values carry the
// timestamp of their table update, as Kafka Streams' timestamped key-value
// stores do, so that a join stamps its result with the later of its two
// sides' times and an aggregation with the latest of its records'.
func (b *Builder) tableStoreInfo(name string, o options) StoreInfo {
	return StoreInfo{Name: name, Persistent: !o.inMemory, Logged: !o.unlogged, Timestamped: !b.bareValues}
}

// StoreProvider gives access to byte-level stores by name. ProcessorContext
// implements it, as does the test driver in package topologytest.
type StoreProvider interface {
	Store(name string) (statestore.ReadWriter, error)
}

// GetKeyValueStore returns the store named name from p, typed with keySerde
// and valueSerde. A processor may only open the stores it declared when it
// was added with Process.
func GetKeyValueStore[K, V any](p StoreProvider, name string, keySerde serde.Serde[K], valueSerde serde.Serde[V]) (*KeyValueStore[K, V], error) {
	if keySerde == nil || valueSerde == nil {
		return nil, fmt.Errorf("topology: store %q: key and value serdes must not be nil", name)
	}
	rw, err := p.Store(name)
	if err != nil {
		return nil, err
	}
	return NewKeyValueStore(rw, keySerde, valueSerde), nil
}

// ReadWriter returns the byte-level store underneath.
func (s *KeyValueStore[K, V]) ReadWriter() statestore.ReadWriter { return s.rw }

func (s *KeyValueStore[K, V]) encodeKey(k K) ([]byte, error) {
	b, err := s.keySerde.Encode(k)
	if err != nil {
		return nil, fmt.Errorf("topology: encode store key: %w", err)
	}
	return b, nil
}

// Get returns the value of k and whether it was found.
func (s *KeyValueStore[K, V]) Get(k K) (V, bool, error) {
	var zero V
	kb, err := s.encodeKey(k)
	if err != nil {
		return zero, false, err
	}
	return s.getEncoded(kb)
}

// getEncoded is Get for a key already encoded.
func (s *KeyValueStore[K, V]) getEncoded(kb []byte) (V, bool, error) {
	v, _, found, err := s.getEncodedAt(kb)
	return v, found, err
}

// getEncodedAt is getEncoded with the value's timestamp
// (statestore.NoTimestamp if it has none).
func (s *KeyValueStore[K, V]) getEncodedAt(kb []byte) (V, int64, bool, error) {
	var zero V
	vb, found, err := s.rw.Get(kb)
	if err != nil || !found {
		return zero, statestore.NoTimestamp, false, err
	}
	ts := statestore.NoTimestamp
	if s.timestamped {
		vb, ts = statestore.SplitTimestamped(vb)
	}
	v, err := s.decodeValue(vb)
	if err != nil {
		return zero, ts, false, err
	}
	return v, ts, true, nil
}

// getAt is Get with the value's timestamp.
func (s *KeyValueStore[K, V]) getAt(k K) (V, int64, bool, error) {
	kb, err := s.encodeKey(k)
	if err != nil {
		var zero V
		return zero, statestore.NoTimestamp, false, err
	}
	return s.getEncodedAt(kb)
}

// prior returns the value stored under kb as a table update's old value.
func (s *KeyValueStore[K, V]) prior(kb []byte) (*prior, error) {
	v, found, err := s.getEncoded(kb)
	if err != nil || !found {
		return absent, err
	}
	return &prior{value: v, null: false}, nil
}

// priorPresence is prior for a reader of the old value's presence alone:
// it neither decodes nor keeps the value (see node.fullOld).
func (s *KeyValueStore[K, V]) priorPresence(kb []byte) (*prior, error) {
	var found bool
	var err error
	if h, ok := s.rw.(keyChecker); ok {
		found, err = h.Has(kb)
	} else {
		_, found, err = s.rw.Get(kb)
	}
	if err != nil || !found {
		return absent, err
	}
	return present, nil
}

// keyChecker is a store that tells whether it holds a key without copying
// its value, as the runtime's record cache (cache.Store) does.
type keyChecker interface {
	Has(key []byte) (bool, error)
}

// absent and present are the old values that say only whether the table
// held the key, shared since no prior is modified once made: absent
// stands for every key a table did not hold, present (its value unset)
// for a held key whose value no reader needs.
var (
	absent  = &prior{null: true}
	present = &prior{}
)

func (s *KeyValueStore[K, V]) decodeValue(vb []byte) (V, error) {
	v, err := s.valueSerde.Decode(vb)
	if err != nil {
		return v, fmt.Errorf("topology: decode store value: %w", err)
	}
	return v, nil
}

// encodeValue encodes v for the store, refusing a value that encodes to
// nil, since byte-level stores reserve nil for deletes.
func (s *KeyValueStore[K, V]) encodeValue(v V) ([]byte, error) {
	vb, err := s.valueSerde.Encode(v)
	if err != nil {
		return nil, fmt.Errorf("topology: encode store value: %w", err)
	}
	if vb == nil {
		return nil, fmt.Errorf("topology: store value encodes to nil; use Delete to remove a key")
	}
	return vb, nil
}

// Put stores v under k. A value that encodes to nil is refused, since the
// byte-level store reserves nil for deletes.
func (s *KeyValueStore[K, V]) Put(k K, v V) error {
	_, err := s.put(k, v)
	return err
}

// put is Put that also returns the encoded key.
func (s *KeyValueStore[K, V]) put(k K, v V) ([]byte, error) {
	kb, err := s.encodeKey(k)
	if err != nil {
		return nil, err
	}
	return kb, s.putEncoded(kb, v)
}

// putEncoded is Put for a key already encoded. The store may keep kb.
func (s *KeyValueStore[K, V]) putEncoded(kb []byte, v V) error {
	return s.putEncodedAt(kb, v, statestore.NoTimestamp)
}

// putEncodedAt is putEncoded of a value with timestamp ts, which a store
// not timestamped drops.
func (s *KeyValueStore[K, V]) putEncodedAt(kb []byte, v V, ts int64) error {
	if s.timestamped {
		if vb, ok := appendBuiltin(s.valueSerde, v, ts); ok {
			return s.rw.Put(kb, vb)
		}
	}
	vb, err := s.encodeValue(v)
	if err != nil {
		return err
	}
	if s.timestamped {
		vb = statestore.AppendTimestamped(nil, ts, vb)
	}
	return s.rw.Put(kb, vb)
}

// appendBuiltin returns the timestamped value of v for a value serde of
// package serde whose encoding it knows (String, Bytes, Int64), made in
// one allocation rather than one for the encoding and one for the
// timestamped copy. It reports false for any other serde, and for a nil
// []byte, which encodeValue refuses.
func appendBuiltin[V any](vs serde.Serde[V], v V, ts int64) ([]byte, bool) {
	switch x := any(v).(type) {
	case string:
		if any(vs) == any(serde.String) {
			return statestore.AppendTimestamped(nil, ts, unsafe.Slice(unsafe.StringData(x), len(x))), true
		}
	case []byte:
		if x != nil && any(vs) == any(serde.Bytes) {
			return statestore.AppendTimestamped(nil, ts, x), true
		}
	case int64:
		if any(vs) == any(serde.Int64) {
			var b [8]byte
			binary.BigEndian.PutUint64(b[:], uint64(x))
			return statestore.AppendTimestamped(nil, ts, b[:]), true
		}
	}
	return nil, false
}

// Delete removes k. Deleting an absent key is not an error.
func (s *KeyValueStore[K, V]) Delete(k K) error {
	_, err := s.delete(k)
	return err
}

// delete is Delete that also returns the encoded key.
func (s *KeyValueStore[K, V]) delete(k K) ([]byte, error) {
	kb, err := s.encodeKey(k)
	if err != nil {
		return nil, err
	}
	return kb, s.rw.Delete(kb)
}

// Range iterates over the keys whose encodings lie in [from, to).
func (s *KeyValueStore[K, V]) Range(from, to K) (*KeyValueIterator[K, V], error) {
	fb, err := s.encodeKey(from)
	if err != nil {
		return nil, err
	}
	tb, err := s.encodeKey(to)
	if err != nil {
		return nil, err
	}
	it, err := s.rw.Range(fb, tb)
	if err != nil {
		return nil, err
	}
	return &KeyValueIterator[K, V]{it: it, s: s}, nil
}

// All iterates over every key.
func (s *KeyValueStore[K, V]) All() (*KeyValueIterator[K, V], error) {
	it, err := s.rw.All()
	if err != nil {
		return nil, err
	}
	return &KeyValueIterator[K, V]{it: it, s: s}, nil
}

// ApproximateCount estimates the number of keys.
func (s *KeyValueStore[K, V]) ApproximateCount() (int64, error) { return s.rw.ApproximateCount() }

// KeyValueIterator walks a KeyValueStore in key order. It must be closed.
type KeyValueIterator[K, V any] struct {
	it  statestore.Iterator
	s   *KeyValueStore[K, V]
	kv  KeyValue[K, V]
	err error
}

// Next decodes the next pair and reports whether there is one. It returns
// false at the end and on the first error; see Err.
func (i *KeyValueIterator[K, V]) Next() bool {
	if i.err != nil || !i.it.Next() {
		return false
	}
	k, err := i.s.keySerde.Decode(i.it.Key())
	if err != nil {
		i.err = fmt.Errorf("topology: decode store key: %w", err)
		return false
	}
	vb := i.it.Value()
	if i.s.timestamped {
		vb, _ = statestore.SplitTimestamped(vb)
	}
	v, err := i.s.valueSerde.Decode(vb)
	if err != nil {
		i.err = fmt.Errorf("topology: decode store value: %w", err)
		return false
	}
	i.kv = KeyValue[K, V]{Key: k, Value: v}
	return true
}

// Key returns the current key.
func (i *KeyValueIterator[K, V]) Key() K { return i.kv.Key }

// Value returns the current value.
func (i *KeyValueIterator[K, V]) Value() V { return i.kv.Value }

// Err returns the first error of the iteration, from the store or a serde.
func (i *KeyValueIterator[K, V]) Err() error {
	if i.err != nil {
		return i.err
	}
	return i.it.Err()
}

// Close releases the iterator.
func (i *KeyValueIterator[K, V]) Close() error { return i.it.Close() }

// Collect drains the iterator into a slice and closes it.
func (i *KeyValueIterator[K, V]) Collect() ([]KeyValue[K, V], error) {
	var out []KeyValue[K, V]
	for i.Next() {
		out = append(out, i.kv)
	}
	err := i.Err()
	if cerr := i.Close(); err == nil {
		err = cerr
	}
	return out, err
}

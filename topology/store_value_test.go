package topology

import (
	"errors"
	"testing"

	"github.com/eddystreams/eddy/serde"
	"github.com/eddystreams/eddy/statestore"
	"github.com/stretchr/testify/require"
)

// byteStore is the least store a KeyValueStore writes to in these tests.
type byteStore struct {
	statestore.ReadWriter
	m map[string][]byte
}

func (s byteStore) Get(k []byte) ([]byte, bool, error) { v, ok := s.m[string(k)]; return v, ok, nil }
func (s byteStore) Put(k, v []byte) error              { s.m[string(k)] = v; return nil }

// A timestamped value written by a serde of package serde is the same
// bytes as its encoding appended to the timestamp, as for any other serde.
func TestTimestampedPutOfBuiltinSerdes(t *testing.T) {
	check := func(t *testing.T, put func(rw statestore.ReadWriter) error, enc []byte) {
		t.Helper()
		rw := byteStore{m: map[string][]byte{}}
		require.NoError(t, put(rw))
		require.Equal(t, statestore.AppendTimestamped(nil, 42, enc), rw.m["k"])
	}
	check(t, func(rw statestore.ReadWriter) error {
		return newTableStore(rw, serde.String, serde.String, true).putEncodedAt([]byte("k"), "héllo", 42)
	}, []byte("héllo"))
	check(t, func(rw statestore.ReadWriter) error {
		return newTableStore(rw, serde.String, serde.Bytes, true).putEncodedAt([]byte("k"), []byte{}, 42)
	}, []byte{})
	check(t, func(rw statestore.ReadWriter) error {
		return newTableStore(rw, serde.String, serde.Int64, true).putEncodedAt([]byte("k"), -300, 42)
	}, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, 0xd4})
	// A string serde of its own encodes as it does, not as serde.String.
	upper := serde.Funcs[string]{EncodeFn: func(v string) ([]byte, error) { return []byte("<" + v + ">"), nil }}
	check(t, func(rw statestore.ReadWriter) error {
		return newTableStore(rw, serde.String, serde.Serde[string](upper), true).putEncodedAt([]byte("k"), "x", 42)
	}, []byte("<x>"))
	// A nil []byte is refused, as by encodeValue.
	rw := byteStore{m: map[string][]byte{}}
	require.Error(t, newTableStore(rw, serde.String, serde.Bytes, true).putEncodedAt([]byte("k"), nil, 42))
}

// The old value a table join's result reads for itself when it sends no
// old values says only whether it held the key.
func TestPriorPresence(t *testing.T) {
	rw := byteStore{m: map[string][]byte{"k": statestore.AppendTimestamped(nil, 1, []byte("v"))}}
	kv := newTableStore(rw, serde.String, serde.String, true)
	p, err := kv.priorPresence([]byte("k"))
	require.NoError(t, err)
	require.False(t, p.null)
	p, err = kv.priorPresence([]byte("other"))
	require.NoError(t, err)
	require.True(t, p.null)
	p, err = kv.prior([]byte("k"))
	require.NoError(t, err)
	require.Equal(t, &prior{value: "v"}, p)
}

// hasStore answers Has alone: its Get fails.
type hasStore struct {
	statestore.ReadWriter
	keys map[string]bool
}

func (s hasStore) Has(k []byte) (bool, error)         { return s.keys[string(k)], nil }
func (s hasStore) Get(k []byte) ([]byte, bool, error) { return nil, false, errors.New("Get called") }

// A store that tells whether it holds a key without copying the value (the
// record cache) is asked that rather than read.
func TestPriorPresenceAsksHas(t *testing.T) {
	kv := newTableStore(hasStore{keys: map[string]bool{"k": true}}, serde.String, serde.String, true)
	p, err := kv.priorPresence([]byte("k"))
	require.NoError(t, err)
	require.False(t, p.null)
	p, err = kv.priorPresence([]byte("other"))
	require.NoError(t, err)
	require.True(t, p.null)
}

// Package serde provides typed serializers and deserializers for record keys,
// values and store contents.
//
// A Serde converts between a Go value and the bytes that travel through Kafka
// and sit in state stores. The built-in serdes use the same encodings as the
// Java client's standard serializers, so topics written by Eddy can be read by
// any Kafka client and vice versa.
package serde

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
)

// Serde encodes and decodes values of type T.
//
// Decode must not retain b after it returns: callers may reuse the buffer.
// A nil slice means the record had no key or value (a Kafka null); serdes
// decide how to represent it (the built-ins return the zero value for nil
// input only where that is unambiguous, and an error otherwise).
type Serde[T any] interface {
	Encode(v T) ([]byte, error)
	Decode(b []byte) (T, error)
}

// Funcs adapts a pair of functions to a Serde.
type Funcs[T any] struct {
	EncodeFn func(T) ([]byte, error)
	DecodeFn func([]byte) (T, error)
}

// Encode calls EncodeFn.
func (f Funcs[T]) Encode(v T) ([]byte, error) { return f.EncodeFn(v) }

// Decode calls DecodeFn.
func (f Funcs[T]) Decode(b []byte) (T, error) { return f.DecodeFn(b) }

// String is the UTF-8 string serde. Decoding nil yields "".
var String Serde[string] = stringSerde{}

type stringSerde struct{}

func (stringSerde) Encode(v string) ([]byte, error) { return []byte(v), nil }
func (stringSerde) Decode(b []byte) (string, error) { return string(b), nil }

// Bytes passes byte slices through unchanged. Decode copies its input so the
// result may be kept.
var Bytes Serde[[]byte] = bytesSerde{}

type bytesSerde struct{}

func (bytesSerde) Encode(v []byte) ([]byte, error) { return v, nil }
func (bytesSerde) Decode(b []byte) ([]byte, error) {
	if b == nil {
		return nil, nil
	}
	return append([]byte(nil), b...), nil
}

// Int64 encodes an int64 as 8 big-endian bytes, as Kafka's LongSerializer does.
var Int64 Serde[int64] = int64Serde{}

type int64Serde struct{}

func (int64Serde) Encode(v int64) ([]byte, error) {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(v)), nil
}

func (int64Serde) Decode(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("serde: int64 needs 8 bytes, got %d", len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

// JSON returns a serde that encodes T with encoding/json.
func JSON[T any]() Serde[T] { return jsonSerde[T]{} }

type jsonSerde[T any] struct{}

func (jsonSerde[T]) Encode(v T) ([]byte, error) { return json.Marshal(v) }

func (jsonSerde[T]) Decode(b []byte) (T, error) {
	var v T
	if b == nil {
		return v, fmt.Errorf("serde: cannot decode JSON from a null")
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return v, fmt.Errorf("serde: decode JSON: %w", err)
	}
	return v, nil
}

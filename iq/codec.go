package iq

import (
	"fmt"
	"strconv"

	"github.com/eddystreams/eddy/serde"
)

// StoreCodec tells the HTTP server how to turn a key written in a URL into
// a store key, and stored keys and values into JSON.
type StoreCodec struct {
	Name string
	// EncodeKey parses a key as written in a URL into the store's key
	// bytes (the key serde's encoding).
	EncodeKey func(string) ([]byte, error)
	// DecodeKey turns a stored key into a JSON-encodable value for range
	// answers. Nil renders the key bytes as a string.
	DecodeKey func([]byte) (any, error)
	// DecodeValue turns a stored value into a JSON-encodable value.
	DecodeValue func([]byte) (any, error)
}

// CodecFor builds a StoreCodec from a store's serdes. parseKey reads a key
// as written in a URL; nil handles string, int64, int32 and int keys (as
// decimal), the forms the routing Client writes with fmt.Sprint.
func CodecFor[K, V any](name string, keySerde serde.Serde[K], valueSerde serde.Serde[V], parseKey func(string) (K, error)) StoreCodec {
	if parseKey == nil {
		parseKey = parseKeyText[K]
	}
	return StoreCodec{
		Name: name,
		EncodeKey: func(s string) ([]byte, error) {
			k, err := parseKey(s)
			if err != nil {
				return nil, err
			}
			return keySerde.Encode(k)
		},
		DecodeKey:   func(b []byte) (any, error) { return keySerde.Decode(b) },
		DecodeValue: func(b []byte) (any, error) { return valueSerde.Decode(b) },
	}
}

func parseKeyText[K any](s string) (K, error) {
	var k K
	var err error
	switch p := any(&k).(type) {
	case *string:
		*p = s
	case *int64:
		*p, err = strconv.ParseInt(s, 10, 64)
	case *int32:
		var n int64
		n, err = strconv.ParseInt(s, 10, 32)
		*p = int32(n)
	case *int:
		*p, err = strconv.Atoi(s)
	default:
		err = fmt.Errorf("no parser for keys of type %T (give CodecFor a parseKey)", k)
	}
	return k, err
}

package statestore

import (
	"bytes"
	"encoding/binary"
	"math"
)

// A timestamped value is a store value that carries, with the value, the
// timestamp of the result it stands for (for a time window's aggregate,
// the largest timestamp of the window's records), in one store entry so
// that an update is one write, one cache entry and one changelog record:
//
//	e1 dd 54 01 | timestamp (8, big-endian) | value
//
// Stores written before values carried timestamps hold the bare value.
// The four-byte mark tells the two apart: it is not valid UTF-8 (e1 opens
// a three-byte sequence that dd cannot continue), so no value of a text or
// JSON serde starts with it, and a value shorter than twelve bytes (an
// 8-byte count, say) is never taken for a timestamped one. Only a bare
// value of a binary serde that happens to start with these four bytes
// would be misread. The last byte numbers the layout, so another one can
// follow without a store conversion.
var timestampedMark = [4]byte{0xe1, 0xdd, 0x54, 0x01}

// timestampedHeader is the length of a timestamped value's mark and
// timestamp.
const timestampedHeader = len(timestampedMark) + 8

// NoTimestamp is the timestamp SplitTimestamped reports for a bare value,
// written before values carried timestamps: lower than any record's, so
// that the larger of it and a record's time is the record's.
const NoTimestamp int64 = math.MinInt64

// AppendTimestamped appends the timestamped value of v with timestamp ts to
// dst; with a nil dst, to a new slice of exactly its size.
func AppendTimestamped(dst []byte, ts int64, v []byte) []byte {
	if dst == nil {
		dst = make([]byte, 0, timestampedHeader+len(v))
	}
	dst = append(dst, timestampedMark[:]...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(ts))
	return append(dst, v...)
}

// SplitTimestamped returns the value and the timestamp of a stored value b
// (a subslice of b), or b itself and NoTimestamp for a bare value.
func SplitTimestamped(b []byte) (v []byte, ts int64) {
	if len(b) < timestampedHeader || !bytes.Equal(b[:len(timestampedMark)], timestampedMark[:]) {
		return b, NoTimestamp
	}
	return b[timestampedHeader:], int64(binary.BigEndian.Uint64(b[len(timestampedMark):]))
}

// BareValues is a view of rw, a store of timestamped values, that reads
// and writes the values alone: Get and iterators return them without
// their timestamps, Put stores a value with NoTimestamp. It is how a
// processor of its own, or a query, reads a table's store.
func BareValues(rw ReadWriter) ReadWriter { return bareValues{rw} }

type bareValues struct{ rw ReadWriter }

func (b bareValues) Get(key []byte) ([]byte, bool, error) {
	v, found, err := b.rw.Get(key)
	if found {
		v, _ = SplitTimestamped(v)
	}
	return v, found, err
}

func (b bareValues) Put(key, value []byte) error {
	if value == nil {
		return ErrNilValue
	}
	return b.rw.Put(key, AppendTimestamped(nil, NoTimestamp, value))
}

func (b bareValues) Delete(key []byte) error { return b.rw.Delete(key) }

func (b bareValues) Range(from, to []byte) (Iterator, error) {
	it, err := b.rw.Range(from, to)
	if err != nil {
		return nil, err
	}
	return bareIterator{it}, nil
}

func (b bareValues) All() (Iterator, error) {
	it, err := b.rw.All()
	if err != nil {
		return nil, err
	}
	return bareIterator{it}, nil
}

func (b bareValues) ApproximateCount() (int64, error) { return b.rw.ApproximateCount() }

type bareIterator struct{ Iterator }

func (i bareIterator) Value() []byte {
	v, _ := SplitTimestamped(i.Iterator.Value())
	return v
}

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
// dst.
func AppendTimestamped(dst []byte, ts int64, v []byte) []byte {
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

package statestore

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
)

func TestTimestampedRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		ts int64
		v  []byte
	}{
		{0, []byte("agg")},
		{1234567, binary.BigEndian.AppendUint64(nil, 42)},
		{math.MaxInt64, nil},
		{-1, []byte{0xe1, 0xdd, 0x54, 0x01}},
	} {
		b := AppendTimestamped([]byte("prefix"), tc.ts, tc.v)
		v, ts := SplitTimestamped(b[len("prefix"):])
		if ts != tc.ts || !bytes.Equal(v, tc.v) {
			t.Errorf("round trip of %q at %d: got %q at %d", tc.v, tc.ts, v, ts)
		}
	}
}

// A bare value, as stores held before values carried timestamps, reads as
// itself with NoTimestamp: counts (8 bytes), text, and empty values.
func TestTimestampedReadsBareValues(t *testing.T) {
	for _, bare := range [][]byte{
		binary.BigEndian.AppendUint64(nil, 7),
		binary.BigEndian.AppendUint64(nil, math.MaxUint64),
		[]byte("0+1+2"),
		[]byte(`{"n":1,"when":"2026-12-06T00:00:00Z"}`),
		{0xe1, 0xdd, 0x54, 0x01, 1, 2, 3, 4}, // the mark, but too short
		{},
	} {
		v, ts := SplitTimestamped(bare)
		if ts != NoTimestamp || !bytes.Equal(v, bare) {
			t.Errorf("bare %x: got %x at %d, want itself at NoTimestamp", bare, v, ts)
		}
	}
}

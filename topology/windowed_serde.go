package topology

import (
	"encoding/binary"
	"fmt"

	"github.com/eddystreams/eddy/serde"
)

// Windowed keys on the wire. The layouts are those of Kafka Streams'
// windowed serdes (WindowedSerdes.timeWindowedSerdeFrom and
// sessionWindowedSerdeFrom in the Java client), so any Kafka client can
// read the results of a windowed aggregation:
//
//	time window:  inner key bytes | window start (8 bytes, big-endian int64)
//	session:      inner key bytes | session end (8 bytes) | session start (8 bytes)
//
// The inner key is the inner serde's encoding, unframed: its length is the
// record key's length minus 8 (or 16). A time window's end is not written;
// readers derive it as start plus the window size they are configured with
// (the Java deserializer takes the size as a parameter), saturating at the
// largest int64. Times are milliseconds since the epoch.
//
// Example: the string key "ab" in the window starting at 1000 encodes as
// 61 62 00 00 00 00 00 00 03 e8; in the session [1000, 1500] as
// 61 62 00 00 00 00 00 00 05 dc 00 00 00 00 00 00 03 e8.

// TimeWindowedSerde returns the serde of keys windowed by time windows of
// windowSize milliseconds (TimeWindows.Size, or MaxDiff for sliding
// windows), wrapping the inner key serde.
func TimeWindowedSerde[K any](inner serde.Serde[K], windowSize int64) serde.Serde[Windowed[K]] {
	return timeWindowedSerde[K]{inner: inner, size: windowSize}
}

type timeWindowedSerde[K any] struct {
	inner serde.Serde[K]
	size  int64
}

func (s timeWindowedSerde[K]) Encode(w Windowed[K]) ([]byte, error) {
	kb, err := s.inner.Encode(w.Key)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(kb)+8)
	out = append(out, kb...)
	return binary.BigEndian.AppendUint64(out, uint64(w.Window.Start)), nil
}

func (s timeWindowedSerde[K]) Decode(b []byte) (Windowed[K], error) {
	var w Windowed[K]
	if len(b) < 8 {
		return w, fmt.Errorf("topology: time-windowed key needs at least 8 bytes, got %d", len(b))
	}
	n := len(b) - 8
	k, err := s.inner.Decode(b[:n:n])
	if err != nil {
		return w, err
	}
	start := int64(binary.BigEndian.Uint64(b[n:]))
	w.Key, w.Window = k, Window{Start: start, End: addSat(start, s.size)}
	return w, nil
}

// SessionWindowedSerde returns the serde of keys windowed by sessions,
// wrapping the inner key serde.
func SessionWindowedSerde[K any](inner serde.Serde[K]) serde.Serde[Windowed[K]] {
	return sessionWindowedSerde[K]{inner: inner}
}

type sessionWindowedSerde[K any] struct{ inner serde.Serde[K] }

func (s sessionWindowedSerde[K]) Encode(w Windowed[K]) ([]byte, error) {
	kb, err := s.inner.Encode(w.Key)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(kb)+16)
	out = append(out, kb...)
	out = binary.BigEndian.AppendUint64(out, uint64(w.Window.End))
	return binary.BigEndian.AppendUint64(out, uint64(w.Window.Start)), nil
}

func (s sessionWindowedSerde[K]) Decode(b []byte) (Windowed[K], error) {
	var w Windowed[K]
	if len(b) < 16 {
		return w, fmt.Errorf("topology: session-windowed key needs at least 16 bytes, got %d", len(b))
	}
	n := len(b) - 16
	k, err := s.inner.Decode(b[:n:n])
	if err != nil {
		return w, err
	}
	w.Key = k
	w.Window = Window{
		End:   int64(binary.BigEndian.Uint64(b[n:])),
		Start: int64(binary.BigEndian.Uint64(b[n+8:])),
	}
	return w, nil
}

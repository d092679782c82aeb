package runtime

// The enumerated options of Config: deserialization handling, processing guarantee and compression.

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// DeserializationHandling says what a stream thread does with an input
// record its source cannot decode.
type DeserializationHandling int

const (
	// DeserializationFail stops the application with an error naming the
	// record's topic, partition and offset. Nothing at or past that offset
	// is committed, so a fixed deployment resumes at the bad record.
	DeserializationFail DeserializationHandling = iota
	// DeserializationLogAndSkip logs the record's coordinates, counts it
	// (see Stats.Skipped) and carries on past it.
	DeserializationLogAndSkip
)

func (h DeserializationHandling) String() string {
	switch h {
	case DeserializationFail:
		return "fail"
	case DeserializationLogAndSkip:
		return "log-and-skip"
	}
	return fmt.Sprintf("DeserializationHandling(%d)", int(h))
}

// ProcessingGuarantee is what a crash may do to results.
type ProcessingGuarantee int

const (
	// AtLeastOnce never loses input, but a crash repeats what was
	// processed after the last commit: its outputs are written again and
	// its store updates applied again.
	AtLeastOnce ProcessingGuarantee = iota
	// ExactlyOnce makes each commit's outputs, changelog records and input
	// offsets visible together or not at all (Kafka transactions, one
	// transactional producer per stream thread), and keeps every store
	// free of writes from transactions that did not commit: a crash loses
	// nothing, repeats nothing, and leaves the local state usable.
	ExactlyOnce
)

func (g ProcessingGuarantee) String() string {
	switch g {
	case AtLeastOnce:
		return "at-least-once"
	case ExactlyOnce:
		return "exactly-once"
	}
	return fmt.Sprintf("ProcessingGuarantee(%d)", int(g))
}

// ParseProcessingGuarantee parses "at-least-once" or "exactly-once".
func ParseProcessingGuarantee(s string) (ProcessingGuarantee, error) {
	for _, g := range []ProcessingGuarantee{AtLeastOnce, ExactlyOnce} {
		if g.String() == s {
			return g, nil
		}
	}
	return 0, fmt.Errorf("unknown processing guarantee %q (want at-least-once or exactly-once)", s)
}

// Compression is a codec for the record batches Eddy produces.
type Compression int

// The codecs Kafka defines.
const (
	CompressionNone Compression = iota
	CompressionGzip
	CompressionSnappy
	CompressionLZ4
	CompressionZstd
)

func (c Compression) String() string {
	switch c {
	case CompressionNone:
		return "none"
	case CompressionGzip:
		return "gzip"
	case CompressionSnappy:
		return "snappy"
	case CompressionLZ4:
		return "lz4"
	case CompressionZstd:
		return "zstd"
	}
	return fmt.Sprintf("Compression(%d)", int(c))
}

// ParseCompression parses "none", "gzip", "snappy", "lz4" or "zstd", the
// names of Kafka's compression.type.
func ParseCompression(s string) (Compression, error) {
	for c := CompressionNone; c <= CompressionZstd; c++ {
		if c.String() == s {
			return c, nil
		}
	}
	return 0, fmt.Errorf("unknown compression %q (want none, gzip, snappy, lz4 or zstd)", s)
}

// codec is the franz-go codec of c. franz-go falls back to the next codec
// given when a broker is too old for one; none needs no fallback, and the
// others fall back to none rather than to franz-go's default, snappy.
func (c Compression) codec() []kgo.CompressionCodec {
	switch c {
	case CompressionGzip:
		return []kgo.CompressionCodec{kgo.GzipCompression(), kgo.NoCompression()}
	case CompressionSnappy:
		return []kgo.CompressionCodec{kgo.SnappyCompression(), kgo.NoCompression()}
	case CompressionLZ4:
		return []kgo.CompressionCodec{kgo.Lz4Compression(), kgo.NoCompression()}
	case CompressionZstd:
		return []kgo.CompressionCodec{kgo.ZstdCompression(), kgo.NoCompression()}
	}
	return []kgo.CompressionCodec{kgo.NoCompression()}
}

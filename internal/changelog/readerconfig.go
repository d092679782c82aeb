package changelog

// How a Reader is configured, and the defaults of what the config leaves zero.

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ReaderConfig configures a Reader.
type ReaderConfig struct {
	// Seeds are the bootstrap brokers. Required unless ClientOpts names
	// them.
	Seeds []string
	// ClientOpts are appended to the Reader's own kgo options, for TLS,
	// SASL, client ID and the like. They must not set a consumer group.
	ClientOpts []kgo.Opt
	// ReadCommitted reads only committed transactional data (for
	// exactly-once); ends and lag are then measured to the last stable
	// offset. Default: read uncommitted.
	ReadCommitted bool
	// ThroughOpenTransactions, with ReadCommitted, sets a Restore
	// partition's end at the high watermark instead of the last stable
	// offset, so that a restoration ends only once every transaction
	// open at the listing has committed or aborted (its marker read) and
	// the store holds whatever those that committed wrote. An active
	// task needs this: the group's committed offsets may already cover
	// input whose results lie past the last stable offset, in a previous
	// owner's transaction that ends late or in transactions committed
	// behind another producer's open one.
	ThroughOpenTransactions bool
	// MaxBatchRecords caps the records of one store write. A Poll takes
	// that many, or up to four times as many when that empties the
	// client's buffer (see Poll). Default DefaultMaxBatchRecords.
	MaxBatchRecords int
	// RetryBackoff is how long Poll waits before retrying a failed
	// end-offset listing. Default 1s.
	RetryBackoff time.Duration
	// FetchMaxWait is how long the broker may hold a fetch that has no
	// data. A partition registered while such a fetch is in flight is
	// first fetched when it returns, so this bounds how long a new
	// restoration can wait to start. Default 500ms (Kafka's consumer
	// default; kgo's own is 5s).
	FetchMaxWait time.Duration
	// ConfirmInterval is how often the Reader lists the end offsets of
	// the partitions it reads: the listings are what confirms an end
	// (see Progress.EndConfirmed). Default 1s.
	ConfirmInterval time.Duration
	// Logger receives progress logs. Nil discards them. Its handler is
	// never called with a lock of the Reader held, so a handler that
	// blocks holds up Poll (and Close, which waits for it) or a round's
	// writes, but not Register, Unregister, Release or Progress; each line
	// keeps the time and call site of the event it reports.
	Logger *slog.Logger
	// Applied, when set, receives the data records of each store write
	// once the write and its position are in (Progress shows the new
	// position), in offset order, from the goroutine that wrote them.
	// Live queries follow a replica through it. It must not block.
	Applied func(topic string, partition int32, recs []*kgo.Record)
}

// Defaults used when ReaderConfig leaves a field zero.
const (
	// DefaultMaxBatchRecords keeps one store write of small records within
	// one badger transaction (3,275 entries and ~300 KiB with the stores'
	// default 2 MiB memtable), so it is atomic across a crash too; a
	// larger one is written torn (statestore.TornStore), which a crash
	// leaves for the next restoration to repair.
	DefaultMaxBatchRecords = 3000
	DefaultRetryBackoff    = time.Second
	DefaultFetchMaxWait    = 500 * time.Millisecond
	DefaultConfirmInterval = time.Second
	// FetchPartitionBytes and FetchMaxBytes bound one fetch of a Reader
	// (per partition and in all); the runtime uses them for its group
	// consumers too.
	FetchPartitionBytes = 256 << 10
	FetchMaxBytes       = 4 << 20
)

// Validate reports whether the config is usable.
func (c ReaderConfig) Validate() error {
	if len(c.Seeds) == 0 && len(c.ClientOpts) == 0 {
		return errors.New("changelog: reader config needs Seeds or ClientOpts")
	}
	if c.MaxBatchRecords < 0 {
		return fmt.Errorf("changelog: MaxBatchRecords must not be negative, got %d", c.MaxBatchRecords)
	}
	if c.RetryBackoff < 0 {
		return fmt.Errorf("changelog: RetryBackoff must not be negative, got %v", c.RetryBackoff)
	}
	if c.FetchMaxWait < 0 {
		return fmt.Errorf("changelog: FetchMaxWait must not be negative, got %v", c.FetchMaxWait)
	}
	if c.ConfirmInterval < 0 {
		return fmt.Errorf("changelog: ConfirmInterval must not be negative, got %v", c.ConfirmInterval)
	}
	return nil
}

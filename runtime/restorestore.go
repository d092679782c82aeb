package runtime

// Restoring one store from its changelog outside an App, the way an App restores an active's.

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/statestore"
)

// DefaultRestoreBatchRecords is the most records an App writes to a store
// at once while restoring it, and RestoreStore's default.
const DefaultRestoreBatchRecords = restoreBatchRecords

// RestoreConfig is how RestoreStore reaches the brokers and writes the
// store. Zero fields take the defaults documented on each.
type RestoreConfig struct {
	// Brokers are the bootstrap brokers. Required unless ClientOptions
	// name them.
	Brokers []string
	// ClientOptions are extra franz-go options for the reading client
	// (TLS, SASL, client ID and the like). They must not set a consumer
	// group.
	ClientOptions []kgo.Opt
	// ReadCommitted reads only committed transactional records, as an
	// exactly-once App does: the restoration then ends at the partition's
	// last stable offset rather than its high watermark.
	ReadCommitted bool
	// MaxBatchRecords caps the records of one store write; each write
	// carries its position. Default DefaultRestoreBatchRecords.
	MaxBatchRecords int
}

// RestoreResult is what RestoreStore did.
type RestoreResult struct {
	// Records counts the changelog records (puts and deletes) applied.
	Records int64
	// Position is the store's position at the end: the offset of the next
	// changelog record it would apply.
	Position int64
	// Duration is the restoration's own time, from the first listing of
	// the partition's end to the last write; the client's creation and
	// closing are not in it.
	Duration time.Duration
}

// RestoreStore brings an open store up to the end of a changelog
// partition, as listed when it begins, from the store's own position, with
// the reader an App restores its active tasks with: batches of at most
// MaxBatchRecords records, each written together with its position, so
// that a restoration cut short leaves the store holding a prefix of the
// changelog. It is for tools that rebuild or inspect a store outside an App,
// and for measuring restoration. The store is left open.
func RestoreStore(ctx context.Context, store statestore.Store, topic string, partition int32, cfg RestoreConfig) (RestoreResult, error) {
	rd, err := changelog.NewReader(changelog.ReaderConfig{
		Seeds:           cfg.Brokers,
		ClientOpts:      cfg.ClientOptions,
		ReadCommitted:   cfg.ReadCommitted,
		MaxBatchRecords: cfg.MaxBatchRecords,
	})
	if err != nil {
		return RestoreResult{}, fmt.Errorf("runtime: restore %s/%d: %w", topic, partition, err)
	}
	defer rd.Close()
	p := changelog.Partition{Topic: topic, Partition: partition, Store: store, Mode: changelog.Restore, Task: fmt.Sprintf("%s/%d", topic, partition)}
	if err := rd.Register(p); err != nil {
		return RestoreResult{}, fmt.Errorf("runtime: restore %s/%d: %w", topic, partition, err)
	}
	for {
		done, err := rd.Poll(ctx)
		for _, c := range done {
			if c.Err != nil {
				return RestoreResult{}, fmt.Errorf("runtime: restore %s/%d: %w", topic, partition, c.Err)
			}
			return RestoreResult{Records: c.Restored, Position: c.Position, Duration: c.Duration}, nil
		}
		if err != nil {
			return RestoreResult{}, fmt.Errorf("runtime: restore %s/%d: %w", topic, partition, err)
		}
	}
}

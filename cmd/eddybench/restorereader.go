package main

// Benchmarks (b) and (w2) time restoration itself, the runtime's restoring
// path without the App around it (runtime.RestoreStore), against a bare
// badger write of the same records.

import (
	"context"
	"fmt"
	"time"

	"github.com/eddystreams/eddy/runtime"
	"github.com/eddystreams/eddy/statestore"
)

// readerBatchRecords is the most records a restoration writes to a store
// in one batch by default.
const readerBatchRecords = runtime.DefaultRestoreBatchRecords

// restoreInto restores partition 0 of topic into store and returns how
// long that took.
func restoreInto(ctx context.Context, addrs []string, topic string, store statestore.Store, want int64, batch int) (time.Duration, error) {
	res, err := runtime.RestoreStore(ctx, store, topic, 0, runtime.RestoreConfig{Brokers: addrs, MaxBatchRecords: batch})
	if err != nil {
		return 0, err
	}
	if res.Records != want {
		return 0, fmt.Errorf("restored %d records, want %d", res.Records, want)
	}
	return res.Duration, nil
}

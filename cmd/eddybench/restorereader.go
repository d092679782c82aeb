package main

// This file is the one place a command reaches an internal package:
// benchmarks (b) and (w2) measure the changelog reader itself, the
// runtime's restoration path without the App around it, against a bare
// badger write of the same records. docs.TestToolsUsePublicPackages
// names it as the exception.

import (
	"context"
	"fmt"
	"time"

	"github.com/eddystreams/eddy/internal/changelog"
	"github.com/eddystreams/eddy/statestore"
)

// readerBatchRecords is the most records the reader writes to a store in
// one batch by default.
const readerBatchRecords = changelog.DefaultMaxBatchRecords

// restoreInto restores partition 0 of topic into store with a
// changelog.Reader and returns how long that took.
func restoreInto(ctx context.Context, addrs []string, topic string, store statestore.Store, want int64, batch int) (time.Duration, error) {
	rd, err := changelog.NewReader(changelog.ReaderConfig{Seeds: addrs, MaxBatchRecords: batch})
	if err != nil {
		return 0, err
	}
	defer rd.Close()
	start := time.Now()
	if err := rd.Register(changelog.Partition{Topic: topic, Partition: 0, Store: store, Mode: changelog.Restore, Task: "bench"}); err != nil {
		return 0, err
	}
	for {
		done, err := rd.Poll(ctx)
		for _, c := range done {
			elapsed := time.Since(start)
			if c.Err != nil {
				return 0, c.Err
			}
			if c.Restored != want {
				return 0, fmt.Errorf("restored %d records, want %d", c.Restored, want)
			}
			return elapsed, nil
		}
		if err != nil {
			return 0, err
		}
	}
}

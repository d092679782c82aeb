package runtime

import (
	"sync"
	"time"

	"github.com/eddystreams/eddy/statestore"
	"github.com/eddystreams/eddy/task"
)

// storeSizeMaxAge is how long a store's measured size is reused. Counting
// a store's keys reads every key (tens of milliseconds per 100,000), too
// much for every scrape of every store; sizes change slowly anyway.
const storeSizeMaxAge = 10 * time.Second

// StoreSize is what one store partition of a replica occupies, as last
// measured.
type StoreSize struct {
	// Bytes estimates its files on disk (see statestore.Sizer); 0 for an
	// in-memory store.
	Bytes int64
	// Keys is its approximate key count (statestore's ApproximateCount).
	Keys int64
	// Measured is when the figures were taken.
	Measured time.Time
}

// storeSizes remembers each store partition's last measured size.
type storeSizes struct {
	mu    sync.Mutex
	known map[storeSizeKey]storeSizeEntry
}

type storeSizeKey struct {
	task  task.ID
	store string
}

type storeSizeEntry struct {
	backing statestore.Store
	size    StoreSize
}

// of returns the size of a replica's store, measuring it when the last
// measurement of that very store is older than storeSizeMaxAge; false when
// the store cannot be measured (it closed meanwhile).
func (c *storeSizes) of(ri ReplicaInfo, now time.Time) (StoreSize, bool) {
	k := storeSizeKey{ri.Task, ri.Store}
	c.mu.Lock()
	e, ok := c.known[k]
	c.mu.Unlock()
	if ok && e.backing == ri.Backing && now.Sub(e.size.Measured) < storeSizeMaxAge {
		return e.size, true
	}
	size := StoreSize{Measured: now}
	var err error
	if size.Keys, err = ri.Backing.ApproximateCount(); err != nil {
		return StoreSize{}, false
	}
	if sz, ok := ri.Backing.(statestore.Sizer); ok {
		if size.Bytes, err = sz.DiskSize(); err != nil {
			return StoreSize{}, false
		}
	}
	c.mu.Lock()
	if c.known == nil {
		c.known = make(map[storeSizeKey]storeSizeEntry)
	}
	c.known[k] = storeSizeEntry{ri.Backing, size}
	c.mu.Unlock()
	return size, true
}

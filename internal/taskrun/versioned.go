package taskrun

import (
	"github.com/eddystreams/eddy/internal/cache"
	"github.com/eddystreams/eddy/statestore"
)

// versionLog holds the changelog records of a logged versioned store's
// puts since the last commit, in put order: its changelog holds puts,
// not the store's own keys (statestore.VersionedChangelog), so a commit
// sends these instead of the cache's dirty entries, which it still
// writes to the store.
type versionLog struct {
	records []statestore.Entry
}

// take returns the records and starts a new log: the producer keeps the
// slice until it is flushed.
func (l *versionLog) take() []statestore.Entry {
	r := l.records
	l.records = nil
	return r
}

// versionLogged is a versioned store's cache as its processors see it:
// statestore.VersionedStore finds the VersionLogger and tells it of each
// put. The cache's other methods are promoted, so that what processors
// detect on a cache they still find.
type versionLogged struct {
	*cache.Store
	log *versionLog
}

func (v versionLogged) LogVersion(key, value []byte, ts int64) {
	v.log.records = append(v.log.records, statestore.VersionRecord(key, value, ts))
}

// discard drops the store's writes since the last commit, and the
// records logged for them.
func (h *StoreHandle) discard() {
	h.Cache.Discard()
	if h.versions != nil {
		h.versions.take()
	}
}

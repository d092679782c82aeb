package cache

import (
	"unsafe"

	"github.com/eddystreams/eddy/statestore"
)

// The read cache keeps values read from the inner store (clean entries), so
// that a key read again is answered from memory: a stream–table join looks
// up the table for every stream record and an aggregation reads each key it
// updates; each would otherwise cost a badger read even for a key that
// changed long ago.
//
// A clean entry is a copy of the inner store's value, so it stays right for
// exactly as long as the inner store's value does. Once the cache is
// enabled the inner store must change only through Commit (which updates
// or drops the clean entries of the keys it writes) — true of an active
// task's key-value stores while it runs, and not of a restoring task (the
// restorer writes the inner store), a standby (the changelog follower
// does), or a window store (its writes drop expired segments). Hence it is
// off until SetReadCache turns it on, and turning it off drops it.
// Discard leaves it as it is: it drops dirty entries, which only shadowed
// the clean ones.
//
// A reader on another goroutine (GetCommitted) can race a Commit:
// it reads the inner store, the commit lands, and only then would the
// reader keep what it read. gen, bumped by every commit once its write has
// landed, detects that: a read keeps its value only if no commit finished
// since it began.
//
// Clean entries are charged to the Budget's read share, of the same size
// as its write share, and never make it Full: when the read share is used
// up a store evicts some of its own clean entries (whichever the map
// yields first) to make room, and keeps nothing if it has none to evict.

// cleanEntryOverhead is what a clean entry costs beyond its key and value:
// the map slot, the string header and the slice header.
const cleanEntryOverhead = 64

// SetReadCache turns the read cache on or off; off drops every clean
// entry. A Store whose Budget is nil or has no room is never cached.
func (c *Store) SetReadCache(on bool) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	on = on && c.budget != nil && c.budget.max > 0
	if !on {
		c.dropCleanLocked()
	}
	c.readCache = on
}

// GetCommitted returns what the inner store holds for key, as of its last
// Commit, from the read cache when it holds the key: never a dirty value.
// It may come from any goroutine, as a reader of committed data does. A value read from the inner store
// is kept like one a processor reads. The caller owns the returned bytes.
func (c *Store) GetCommitted(key []byte) ([]byte, bool, error) {
	c.mu.RLock()
	return c.getCommittedRLocked(key)
}

// HasCommitted reports whether the inner store holds key as of its last
// Commit, from the read cache when it holds the key. Unlike GetCommitted it
// copies and keeps nothing: a table's flush asks it about keys it is about
// to delete, whose values nobody reads again.
func (c *Store) HasCommitted(key []byte) (bool, error) {
	c.mu.RLock()
	_, ok := c.cleanGetLocked(key)
	c.mu.RUnlock()
	if ok {
		return true, nil
	}
	_, found, err := c.inner.Get(key)
	return found, err
}

// Has reports whether key holds a value, dirty or committed, copying
// nothing: a table that needs only whether it held a key (an old value
// offered to a join) asks it instead of Get, which copies the value.
func (c *Store) Has(key []byte) (bool, error) {
	c.mu.RLock()
	if i, ok := c.index[string(key)]; ok {
		found := c.entries[i].Value != nil
		c.mu.RUnlock()
		return found, nil
	}
	c.mu.RUnlock()
	return c.HasCommitted(key)
}

// getCommittedRLocked is GetCommitted for a caller holding mu shared; it
// releases mu.
func (c *Store) getCommittedRLocked(key []byte) ([]byte, bool, error) {
	if v, ok := c.cleanGetLocked(key); ok {
		c.mu.RUnlock()
		return cloneBytes(v), true, nil
	}
	cached, gen := c.readCache, c.gen
	c.mu.RUnlock()
	// Outside mu: a Commit that lands meanwhile writes to the inner store
	// the very value this read would have found in the cache.
	v, found, err := c.inner.Get(key)
	if err != nil || !found || !cached {
		return v, found, err
	}
	keep := cloneBytes(v) // the caller may scribble on v
	c.mu.Lock()
	c.keepReadLocked(key, keep, gen)
	c.mu.Unlock()
	return v, true, nil
}

// ReadCacheLen returns the number of clean entries.
func (c *Store) ReadCacheLen() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.clean)
}

// cleanGetLocked returns key's clean value, if the read cache has one. It
// needs mu in either mode.
func (c *Store) cleanGetLocked(key []byte) ([]byte, bool) {
	if !c.readCache {
		return nil, false
	}
	v, ok := c.clean[string(key)]
	return v, ok
}

// keepReadLocked records value, just read from the inner store for key,
// as clean, unless a commit has run since the read began (gen is c.gen as
// it was then) or key has become dirty. value must not be modified by
// anyone afterwards. It needs mu exclusively.
func (c *Store) keepReadLocked(key, value []byte, gen uint64) {
	if !c.readCache || c.gen != gen || value == nil {
		return
	}
	if _, dirty := c.index[string(key)]; dirty {
		return
	}
	if _, ok := c.clean[string(key)]; ok {
		return
	}
	size := int64(len(key)+len(value)) + cleanEntryOverhead
	if !c.budget.reserveRead(size) {
		if !c.evictLocked(size) {
			return
		}
	}
	if c.clean == nil {
		c.clean = make(map[string][]byte)
	}
	kb := cloneBytes(key)
	c.clean[unsafe.String(unsafe.SliceData(kb), len(kb))] = value
	c.cleanBytes += size
}

// evictLocked drops clean entries until size more bytes fit in the budget's
// read share, or at least an eighth of the store's clean bytes are gone,
// and reserves size. It reports false, reserving nothing, if the store
// has nothing left to evict and the share is still full.
func (c *Store) evictLocked(size int64) bool {
	goal := max(size, c.cleanBytes/8)
	var freed int64
	for k, v := range c.clean {
		n := int64(len(k)+len(v)) + cleanEntryOverhead
		delete(c.clean, k)
		c.cleanBytes -= n
		freed += n
		if freed >= goal {
			break
		}
	}
	c.budget.releaseRead(freed)
	return c.budget.reserveRead(size)
}

// commitCleanLocked brings the clean entries in line with entries, just
// written to the inner store (tombstones as nil values). It needs mu
// exclusively. Keys it does not hold are not added: keeping every
// committed key while the read share has room (so that a count's next
// update and a query need no badger read) was measured to cost 45-55 MiB
// of peak RSS in eddybench (c), 4,000,000 keys, for 10 MiB charged.
func (c *Store) commitCleanLocked(entries []statestore.Entry) {
	c.gen++
	if len(c.clean) == 0 {
		return
	}
	for _, e := range entries {
		old, ok := c.clean[string(e.Key)]
		if !ok {
			continue
		}
		d := int64(len(e.Value) - len(old))
		if e.Value == nil || (d > 0 && !c.budget.reserveRead(d)) {
			delete(c.clean, string(e.Key))
			n := int64(len(e.Key)+len(old)) + cleanEntryOverhead
			c.cleanBytes -= n
			c.budget.releaseRead(n)
			continue
		}
		if d < 0 {
			c.budget.releaseRead(-d)
		}
		// The entry's value is never modified once stored (see
		// Store.entries), so the clean entry can share it.
		c.clean[string(e.Key)] = e.Value
		c.cleanBytes += d
	}
}

// dropCleanLocked drops every clean entry; reads under way keep nothing.
// It needs mu exclusively.
func (c *Store) dropCleanLocked() {
	c.gen++
	c.clean = nil
	c.budget.releaseRead(c.cleanBytes)
	c.cleanBytes = 0
}

// reserveRead charges n bytes to the read share if they fit.
func (b *Budget) reserveRead(n int64) bool {
	for {
		u := b.readUsed.Load()
		if u+n > b.max {
			return false
		}
		if b.readUsed.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

func (b *Budget) releaseRead(n int64) { b.addRead(-n) }

func (b *Budget) addRead(n int64) {
	if b != nil && n != 0 {
		b.readUsed.Add(n)
	}
}

// ReadUsed returns the bytes charged by clean entries.
func (b *Budget) ReadUsed() int64 {
	if b == nil {
		return 0
	}
	return b.readUsed.Load()
}

package statestore

import (
	"bytes"
	"sync"
	"sync/atomic"
)

// cacheEntryOverhead is what a dirty entry costs beyond its key and value
// bytes: the tree node holding it (slice headers, child pointers, priority,
// version).
const cacheEntryOverhead = 80

// CacheBudget bounds the bytes of dirty entries held by a group of
// CachedStores: one budget per stream thread, shared by the stores of all
// its tasks. The budget never blocks or refuses a write; it only reports
// when it is Full, and the runtime then commits early, which empties the
// caches and releases their bytes.
//
// An entry is charged len(key) + len(value) + 80 bytes of overhead. A nil
// *CacheBudget is unbounded and never full.
type CacheBudget struct {
	max  int64
	used atomic.Int64
}

// NewCacheBudget returns a budget of maxBytes. With maxBytes <= 0 the
// budget is full as soon as anything is dirty, which makes the runtime
// commit after every record (no write buffering).
func NewCacheBudget(maxBytes int64) *CacheBudget {
	return &CacheBudget{max: maxBytes}
}

// Max returns the budget's size in bytes.
func (b *CacheBudget) Max() int64 {
	if b == nil {
		return 0
	}
	return b.max
}

// Used returns the bytes currently charged by dirty entries.
func (b *CacheBudget) Used() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

// Full reports whether the dirty entries have reached the budget, the
// signal to commit.
func (b *CacheBudget) Full() bool {
	if b == nil {
		return false
	}
	u := b.used.Load()
	return u > 0 && u >= b.max
}

func (b *CacheBudget) add(n int64) {
	if b != nil && n != 0 {
		b.used.Add(n)
	}
}

// CachedStore is the write-back record cache in front of a Store. It
// implements ReadWriter; processors use it instead of the store.
//
// Put and Delete only record the write in memory as a dirty entry; repeated
// writes to one key collapse into one entry holding the latest value or a
// tombstone. Reads see dirty entries first and the inner store below them:
// a tombstone hides the inner key, and Range/All merge both in key order.
//
// The cache never writes to the inner store on its own: there is no
// eviction and no write-through. Dirty entries leave only through Commit,
// which the runtime calls at every commit, and earlier whenever the shared
// CacheBudget reports Full. The commit protocol is:
//
//  1. Dirty() returns the entries, sorted by key; the runtime sends them to
//     the changelog and waits for the broker's acknowledgements.
//  2. Commit(position) writes exactly those entries to the inner store in
//     one inner.Write together with the changelog position, then drops
//     them and returns their bytes to the budget.
//
// Discard drops the dirty entries instead (a task that is fenced or closed
// uncleanly), leaving the inner store at its last committed position.
//
// Reads may come from other goroutines (interactive queries) while the
// stream thread writes; Put, Delete, Dirty, Commit and Discard are meant to
// be called from one goroutine, and no Put or Delete may come between
// Dirty and the Commit that applies what it returned.
type CachedStore struct {
	inner  Store
	budget *CacheBudget

	// wmu serialises the mutators, so Commit can write to the inner store
	// without holding mu and block no reader meanwhile.
	wmu sync.Mutex
	// mu guards the fields below: exclusively for changes, shared for
	// reads.
	mu sync.RWMutex
	// root is a treap of dirty entries, tombstones stored as nil values.
	// It is mutated in place until an iterator takes a snapshot of it
	// (shared); the next mutation then starts a new version (gen) and
	// copies the paths it changes, so the snapshot stays intact.
	root   *memNode
	gen    uint64
	shared atomic.Bool
	puts   int64 // dirty entries that are puts
	dels   int64 // dirty entries that are tombstones
	bytes  int64 // bytes charged to budget
	sorted []Entry
}

// NewCachedStore returns an empty cache in front of inner, charging the
// given budget (nil means unbounded).
func NewCachedStore(inner Store, budget *CacheBudget) *CachedStore {
	return &CachedStore{inner: inner, budget: budget}
}

// Inner returns the store behind the cache.
func (c *CachedStore) Inner() Store { return c.inner }

// Get returns the dirty value for key if there is one, otherwise the inner
// store's.
func (c *CachedStore) Get(key []byte) ([]byte, bool, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for n := c.root; n != nil; {
		switch cmp := bytes.Compare(key, n.key); {
		case cmp < 0:
			n = n.left
		case cmp > 0:
			n = n.right
		case n.value == nil:
			return nil, false, nil
		default:
			return append([]byte{}, n.value...), true, nil
		}
	}
	return c.inner.Get(key)
}

// Put records a dirty put. The cache copies key and value.
func (c *CachedStore) Put(key, value []byte) error {
	if value == nil {
		return errNilValue
	}
	c.set(key, append([]byte{}, value...))
	return nil
}

// Delete records a dirty tombstone, which hides key in the inner store
// until Commit deletes it there.
func (c *CachedStore) Delete(key []byte) error {
	c.set(key, nil)
	return nil
}

func (c *CachedStore) set(key, value []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.shared.Swap(false) {
		c.gen++
	}
	w := memWriter{gen: c.gen}
	var (
		prev    []byte
		existed bool
	)
	c.root, prev, existed = w.insert(c.root, key, value)
	delta := int64(len(value))
	if existed {
		delta -= int64(len(prev))
		c.countEntry(prev, -1)
	} else {
		delta += int64(len(key)) + cacheEntryOverhead
	}
	c.countEntry(value, 1)
	c.bytes += delta
	c.budget.add(delta)
	c.sorted = nil
}

func (c *CachedStore) countEntry(value []byte, n int64) {
	if value == nil {
		c.dels += n
	} else {
		c.puts += n
	}
}

// Range iterates over [from, to) of the dirty entries merged over the
// inner store. The iterator works on a snapshot of the dirty entries and
// on the inner store's own snapshot, taken together, so later writes and
// commits do not show through.
func (c *CachedStore) Range(from, to []byte) (Iterator, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	inner, err := c.inner.Range(from, to)
	if err != nil {
		return nil, err
	}
	if c.root == nil {
		return inner, nil
	}
	c.shared.Store(true)
	return &mergeIter{dirty: newMemIter(c.root, from, to), inner: inner, needDirty: true, needInner: true}, nil
}

// All iterates over every key, dirty entries merged over the inner store.
func (c *CachedStore) All() (Iterator, error) { return c.Range(nil, nil) }

// ApproximateCount is the inner store's estimate adjusted by the dirty
// entries: plus the puts, minus the tombstones. Puts over existing keys and
// tombstones for absent ones make it drift until the next commit.
func (c *CachedStore) ApproximateCount() (int64, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n, err := c.inner.ApproximateCount()
	if err != nil {
		return 0, err
	}
	return max(n+c.puts-c.dels, 0), nil
}

// Dirty returns the dirty entries sorted by key, tombstones as entries with
// a nil Value. The slice and the bytes it refers to are never modified by
// the cache afterwards, so they may be handed to an asynchronous producer;
// callers must not modify them either.
func (c *CachedStore) Dirty() []Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dirtyLocked()
}

func (c *CachedStore) dirtyLocked() []Entry {
	if c.sorted == nil && c.root != nil {
		out := make([]Entry, 0, c.puts+c.dels)
		it := newMemIter(c.root, nil, nil)
		for it.Next() {
			out = append(out, Entry{Key: it.Key(), Value: it.Value()})
		}
		c.sorted = out
	}
	return c.sorted
}

// DirtyLen returns the number of dirty entries.
func (c *CachedStore) DirtyLen() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return int(c.puts + c.dels)
}

// Commit writes the dirty entries (what Dirty returns) to the inner store
// with one inner.Write(entries, position), then drops them and releases
// their budget. With nothing dirty it does nothing, not even record the
// position. If the write fails the entries stay dirty.
func (c *CachedStore) Commit(position int64) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	entries := c.dirtyLocked()
	c.mu.Unlock()
	if len(entries) == 0 {
		return nil
	}
	// Readers keep running during the write: until the entries are
	// dropped they shadow the inner store with the same values it is
	// receiving, so they read the same whether the write has landed yet
	// or not.
	if err := c.inner.Write(entries, position); err != nil {
		return err
	}
	c.mu.Lock()
	c.clearLocked()
	c.mu.Unlock()
	return nil
}

// Discard drops every dirty entry without writing it and releases its
// budget.
func (c *CachedStore) Discard() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clearLocked()
}

func (c *CachedStore) clearLocked() {
	c.budget.add(-c.bytes)
	c.root, c.sorted = nil, nil
	c.puts, c.dels, c.bytes = 0, 0, 0
	// Open iterators may hold the old tree; a new version keeps any node
	// built from here on out of their way.
	c.gen++
	c.shared.Store(false)
}

// mergeIter merges a snapshot of dirty entries (tombstones included) over an
// inner iterator. A source is advanced lazily, at the Next after the one
// that consumed its current pair, so the pair handed out stays valid until
// then, as the Iterator contract requires.
type mergeIter struct {
	dirty                *memIter
	inner                Iterator
	needDirty, needInner bool
	dValid, iValid       bool
	fromDirty            bool
	done                 bool
}

func (m *mergeIter) Next() bool {
	if m.done {
		return false
	}
	for {
		if m.needDirty {
			m.dValid, m.needDirty = m.dirty.Next(), false
		}
		if m.needInner {
			m.iValid, m.needInner = m.inner.Next(), false
		}
		switch {
		case !m.dValid && !m.iValid:
			m.done = true
			return false
		case m.dValid && m.iValid:
			cmp := bytes.Compare(m.dirty.Key(), m.inner.Key())
			if cmp > 0 {
				m.fromDirty, m.needInner = false, true
				return true
			}
			if cmp == 0 {
				m.needInner = true // shadowed by the dirty entry
			}
		case m.iValid:
			m.fromDirty, m.needInner = false, true
			return true
		}
		m.needDirty = true
		if m.dirty.Value() != nil {
			m.fromDirty = true
			return true
		}
		// A tombstone: it hid the inner key (if any); move on.
	}
}

func (m *mergeIter) Key() []byte {
	switch {
	case m.done:
		return nil
	case m.fromDirty:
		return m.dirty.Key()
	default:
		return m.inner.Key()
	}
}

func (m *mergeIter) Value() []byte {
	switch {
	case m.done:
		return nil
	case m.fromDirty:
		return m.dirty.Value()
	default:
		return m.inner.Value()
	}
}

func (m *mergeIter) Err() error { return m.inner.Err() }

func (m *mergeIter) Close() error {
	m.done = true
	_ = m.dirty.Close()
	return m.inner.Close()
}

// Package cache is the write-back record cache the runtime puts in front of
// every store of a task: writes collect in memory between commits, so that
// a commit sends each changed key to the changelog once, and so that under
// exactly-once a store never holds a write whose transaction did not
// commit. Processors see a Store only as the statestore.ReadWriter their
// context hands them.
package cache

import (
	"bytes"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/eddystreams/eddy/statestore"
)

// cacheEntryOverhead is what a dirty entry costs beyond its key and value
// bytes: its slot in the entry slice and in the key index (slice headers,
// the index's string key and hash-table share).
const cacheEntryOverhead = 80

// Budget bounds the bytes of dirty entries held by a group of
// Stores: one budget per stream thread, shared by the stores of all
// its tasks. The budget never blocks or refuses a write; it only reports
// when it is Full, and the runtime then commits early, which empties the
// caches and releases their bytes.
//
// An entry is charged len(key) + len(value) + 80 bytes of overhead. A nil
// *Budget is unbounded and never full.
type Budget struct {
	max  int64
	used atomic.Int64
	// readUsed is the read share's charge (see readcache.go).
	readUsed atomic.Int64
}

// NewBudget returns a budget of maxBytes. With maxBytes <= 0 the
// budget is full as soon as anything is dirty, which makes the runtime
// commit after every record (no write buffering).
func NewBudget(maxBytes int64) *Budget {
	return &Budget{max: maxBytes}
}

// Max returns the budget's size in bytes.
func (b *Budget) Max() int64 {
	if b == nil {
		return 0
	}
	return b.max
}

// Used returns the bytes currently charged by dirty entries.
func (b *Budget) Used() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

// Full reports whether the dirty entries have reached the budget, the
// signal to commit.
func (b *Budget) Full() bool {
	if b == nil {
		return false
	}
	u := b.used.Load()
	return u > 0 && u >= b.max
}

// EntriesLeft returns how many more new dirty entries the budget has room
// for at the least an entry is charged (its overhead, with an empty key and
// value), and whether the budget bounds anything at all: a runtime that
// checks the budget only between batches of records sizes a batch by it, so
// that one batch cannot overrun the budget many times over. It is 0 once
// the budget is full.
func (b *Budget) EntriesLeft() (n int, bounded bool) {
	if b == nil || b.max <= 0 {
		return 0, false
	}
	room := b.max - b.used.Load()
	if room <= 0 {
		return 0, true
	}
	return int(room / cacheEntryOverhead), true
}

func (b *Budget) add(n int64) {
	if b != nil && n != 0 {
		b.used.Add(n)
	}
}

// Store is the write-back record cache in front of a statestore.Store. It
// implements statestore.ReadWriter; processors use it instead of the store.
//
// Put and Delete only record the write in memory as a dirty entry; repeated
// writes to one key collapse into one entry holding the latest value or a
// tombstone. Reads see dirty entries first and the inner store below them:
// a tombstone hides the inner key, and Range/All merge both in key order.
//
// The cache never writes to the inner store on its own: there is no
// eviction and no write-through. Dirty entries leave only through Commit,
// which the runtime calls at every commit, and earlier whenever the shared
// Budget reports Full. The commit protocol is:
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
// Turned on with SetReadCache, the Store also keeps values it read from the
// inner store, bounded by the Budget's read share (see readcache.go);
// GetCommitted reads committed values through them.
//
// Reads may come from other goroutines (interactive queries) while the
// stream thread writes; Put, Delete, Dirty, Commit and Discard are meant to
// be called from one goroutine, and no Put or Delete may come between
// Dirty and the Commit that applies what it returned.
type Store struct {
	inner  statestore.Store
	budget *Budget

	// wmu serialises the mutators, so Commit can write to the inner store
	// without holding mu and block no reader meanwhile.
	wmu sync.Mutex
	// mu guards the fields below: exclusively for changes, shared for
	// reads.
	mu sync.RWMutex
	// entries holds the dirty entries in first-write order, tombstones as
	// nil values; index maps a key to its slot. Point reads and writes are
	// one hash lookup, and a rewrite of a dirty key replaces its value
	// slice without touching the index. Value bytes are never modified
	// once stored, only replaced, so a copy of a statestore.Entry stays valid.
	entries []statestore.Entry
	index   map[string]int
	// sorted is the key-ordered copy of entries that Dirty returns and
	// wide ranges slice, built on demand and dropped (never modified) by
	// the next write, so whoever holds it keeps an immutable snapshot.
	sorted []statestore.Entry
	// order keeps the entries' slots in key order for Range, from the
	// first Range on (ordered): each new key is placed as it is written.
	order   orderedSlots
	ordered bool
	// hint is the capacity the next round makes entries and index with,
	// once a commit has released them (clearLocked), so that a round like
	// the last one grows them through no doubling.
	hint  int
	puts  int64 // dirty entries that are puts
	dels  int64 // dirty entries that are tombstones, but for skipped ones
	bytes int64 // bytes charged to budget
	// skipped holds the slots of tombstones of keys the inner store does
	// not hold (SkipTombstone): they stay as entries, hiding nothing, but
	// Dirty and Commit leave them out.
	skipped map[int]struct{}

	// The read cache (readcache.go): clean entries, copies of inner
	// values, kept while readCache is on; cleanBytes are charged to the
	// budget's read share; gen counts commits, so that a read racing one
	// keeps nothing.
	readCache  bool
	clean      map[string][]byte
	cleanBytes int64
	gen        uint64
}

// New returns an empty cache in front of inner, charging the
// given budget (nil means unbounded).
func New(inner statestore.Store, budget *Budget) *Store {
	return &Store{inner: inner, budget: budget, index: make(map[string]int)}
}

// Inner returns the store behind the cache.
func (c *Store) Inner() statestore.Store { return c.inner }

// Get returns the dirty value for key if there is one, otherwise the inner
// store's (from the read cache when it is on and holds the key).
func (c *Store) Get(key []byte) ([]byte, bool, error) {
	c.mu.RLock()
	if i, ok := c.index[string(key)]; ok {
		v := c.entries[i].Value
		c.mu.RUnlock()
		if v == nil {
			return nil, false, nil
		}
		// A copy: the dirty value may already be on its way to the
		// changelog, and a caller that scribbles on it must not change
		// what is sent.
		return cloneBytes(v), true, nil
	}
	return c.getCommittedRLocked(key)
}

// Put records a dirty put. The cache copies key and value.
func (c *Store) Put(key, value []byte) error {
	if value == nil {
		return statestore.ErrNilValue
	}
	c.set(key, cloneBytes(value))
	return nil
}

// cloneBytes copies b into a new slice that is never nil, so an empty value
// stays a put rather than turning into a tombstone.
func cloneBytes(b []byte) []byte {
	out := make([]byte, len(b))
	copy(out, b)
	return out
}

// Delete records a dirty tombstone, which hides key in the inner store
// until Commit deletes it there.
func (c *Store) Delete(key []byte) error {
	c.set(key, nil)
	return nil
}

func (c *Store) set(key, value []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	i, ok := c.index[string(key)]
	c.setLocked(key, value, i, ok)
}

// Update is a read-modify-write of one key with a single lookup: fn gets the
// key's current value (found is false when it is absent or deleted) and
// returns its new value, which Update records as a dirty put. The old value
// is the cache's or the inner store's own bytes, which fn must neither
// modify nor keep; the new value becomes the cache's, so fn must return
// bytes that nobody modifies afterwards. If fn fails, nothing is written.
// The cache copies key.
func (c *Store) Update(key []byte, fn func(old []byte, found bool) ([]byte, error)) error {
	_, _, err := c.UpdateAt(key, fn)
	return err
}

// UpdateAt is Update, which also reports where the key's dirty entry is:
// slot, its position among the dirty entries in first-write order, which
// stays the key's until the next Commit or Discard, and stored, the
// cache's copy of the key, which is never modified. A table that holds one
// update per key until the commit finds a key's held update by its slot,
// without hashing the key a second time.
func (c *Store) UpdateAt(key []byte, fn func(old []byte, found bool) ([]byte, error)) (slot int, stored []byte, err error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	// Every mutator holds wmu, so the index and the entries cannot change
	// under this read even without mu; concurrent readers only read.
	i, dirty := c.index[string(key)]
	var (
		old   []byte
		found bool
	)
	read := false // old was read from the inner store
	if dirty {
		old = c.entries[i].Value
		found = old != nil
	} else {
		// Queries may be adding clean entries meanwhile. Without the read
		// cache there are none, and readCache changes only under wmu.
		if c.readCache {
			c.mu.RLock()
			old, found = c.cleanGetLocked(key)
			c.mu.RUnlock()
		}
		if !found {
			if old, found, err = c.inner.Get(key); err != nil {
				return 0, nil, err
			}
			read = found
		}
	}
	value, err := fn(old, found)
	if err != nil {
		return 0, nil, err
	}
	if value == nil {
		return 0, nil, statestore.ErrNilValue
	}
	c.mu.Lock()
	if read {
		// fn neither modifies nor keeps old, a copy the inner store made
		// for this read, and wmu keeps commits out, so c.gen is the
		// read's own.
		c.keepReadLocked(key, old, c.gen)
	}
	slot, stored = c.setLocked(key, value, i, dirty)
	c.mu.Unlock()
	return slot, stored, nil
}

// setLocked records value for key, whose slot is i if dirty, and returns
// the key's slot and the entry's copy of the key. It needs wmu and mu
// exclusively.
func (c *Store) setLocked(key, value []byte, i int, dirty bool) (slot int, stored []byte) {
	delta := int64(len(value))
	if dirty {
		prev := c.entries[i].Value
		delta -= int64(len(prev))
		if len(c.skipped) > 0 {
			if _, ok := c.skipped[i]; ok {
				delete(c.skipped, i)
				c.dels++
			}
		}
		c.countEntry(prev, -1)
		c.entries[i].Value = value
		slot, stored = i, c.entries[i].Key
	} else {
		if c.index == nil {
			c.index = make(map[string]int, c.hint)
			c.entries = make([]statestore.Entry, 0, c.hint)
		}
		// One copy serves as the entry's key and the index's: entry keys
		// are never modified, by the cache or (Dirty's contract) anyone.
		kb := cloneBytes(key)
		slot, stored = len(c.entries), kb
		c.index[unsafe.String(unsafe.SliceData(kb), len(kb))] = slot
		c.entries = append(c.entries, statestore.Entry{Key: kb, Value: value})
		if c.ordered {
			c.order.insert(c.entries, slot)
		}
		delta += int64(len(key)) + cacheEntryOverhead
	}
	c.countEntry(value, 1)
	c.bytes += delta
	c.budget.add(delta)
	c.sorted = nil
	return slot, stored
}

func (c *Store) countEntry(value []byte, n int64) {
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
//
// The first Range orders the dirty entries, which costs O(n log n) for n
// dirty entries; from then on the store places each new key in that order
// as it is written (O(log n)), and a Range costs O(log n) plus the keys it
// covers.
func (c *Store) Range(from, to []byte) (statestore.Iterator, error) {
	c.mu.RLock()
	if d, ok := c.dirtyRangeLocked(from, to); ok {
		defer c.mu.RUnlock()
		return c.mergeLocked(from, to, d)
	}
	c.mu.RUnlock()
	// Ordering writes c.order and c.sorted, which shared holders of mu may
	// be reading.
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ordered {
		c.order.build(c.entries)
		c.ordered = true
	}
	d, ok := c.dirtyRangeLocked(from, to)
	if !ok {
		c.sortLocked()
		d, _ = c.dirtyRangeLocked(from, to)
	}
	return c.mergeLocked(from, to, d)
}

// dirtyRangeLocked returns the dirty entries in [from, to), in key order,
// as a snapshot nobody modifies, or false if that needs mu exclusively: to
// order the entries, or for a range over more than two blocks of them, to
// build c.sorted (a wide range copies as many entries as that does, and
// the ranges after it, until the next write, cost none). It needs mu in
// either mode.
func (c *Store) dirtyRangeLocked(from, to []byte) ([]statestore.Entry, bool) {
	switch {
	case len(c.entries) == 0:
		return nil, true
	case c.sorted != nil:
		d := c.sorted
		if from != nil {
			d = d[searchEntries(d, from):]
		}
		if to != nil {
			d = d[:searchEntries(d, to)]
		}
		return d, true
	case !c.ordered:
		return nil, false
	}
	return c.order.collect(c.entries, from, to, 2*orderBlock)
}

// mergeLocked merges d, the dirty entries in [from, to), over the inner
// store's range. It needs mu in either mode, so that the inner snapshot is
// taken together with d.
func (c *Store) mergeLocked(from, to []byte, d []statestore.Entry) (statestore.Iterator, error) {
	inner, err := c.inner.Range(from, to)
	if err != nil {
		return nil, err
	}
	if len(c.entries) == 0 {
		return inner, nil
	}
	return &mergeIter{dirty: &entryIter{rest: d}, inner: inner, needDirty: true, needInner: true}, nil
}

// searchEntries returns the index of the first entry of sorted whose key is
// not below key.
func searchEntries(sorted []statestore.Entry, key []byte) int {
	i, _ := slices.BinarySearchFunc(sorted, key, func(e statestore.Entry, k []byte) int { return bytes.Compare(e.Key, k) })
	return i
}

// All iterates over every key, dirty entries merged over the inner store.
func (c *Store) All() (statestore.Iterator, error) { return c.Range(nil, nil) }

// ApproximateCount is the inner store's estimate adjusted by the dirty
// entries: plus the puts, minus the tombstones. Puts over existing keys and
// tombstones for absent ones make it drift until the next commit.
func (c *Store) ApproximateCount() (int64, error) {
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
func (c *Store) Dirty() []statestore.Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dirtyLocked()
}

func (c *Store) dirtyLocked() []statestore.Entry {
	c.sortLocked()
	return c.sorted
}

// sortLocked builds c.sorted from the dirty entries if a write dropped it.
// It needs mu exclusively.
func (c *Store) sortLocked() {
	if c.sorted != nil || len(c.entries) == 0 {
		return
	}
	if len(c.skipped) == len(c.entries) {
		// An empty, non-nil slice: sorted, with nothing to write.
		c.sorted = []statestore.Entry{}
		return
	}
	var out []statestore.Entry
	if c.ordered {
		out, _ = c.order.collect(c.entries, nil, nil, len(c.entries))
	} else {
		out = slices.Clone(c.entries)
		slices.SortFunc(out, func(a, b statestore.Entry) int { return bytes.Compare(a.Key, b.Key) })
	}
	if len(c.skipped) > 0 {
		out = slices.DeleteFunc(out, func(e statestore.Entry) bool {
			if e.Value != nil {
				return false
			}
			_, skip := c.skipped[c.index[string(e.Key)]]
			return skip
		})
	}
	c.sorted = out
}

// SkipTombstone leaves the dirty tombstone of key, if it has one, out of
// the next commit: neither the changelog nor the inner store gets it. The
// caller knows that the inner store does not hold key as of its last
// commit, so the delete would change nothing there, and a table whose
// update of key comes to nothing writes nothing for it, as Kafka Streams'
// caching stores write nothing for a key absent from their store and
// deleted in the cache. A later write of key makes its entry dirty again.
func (c *Store) SkipTombstone(key []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	i, ok := c.index[string(key)]
	if !ok || c.entries[i].Value != nil {
		return
	}
	if _, done := c.skipped[i]; done {
		return
	}
	if c.skipped == nil {
		c.skipped = make(map[int]struct{})
	}
	c.skipped[i] = struct{}{}
	c.dels--
	c.sorted = nil
}

// DirtyLen returns the number of dirty entries.
func (c *Store) DirtyLen() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return int(c.puts + c.dels)
}

// Commit writes the dirty entries (what Dirty returns) to the inner store
// with one inner.Write(entries, position), then drops them and releases
// their budget. With nothing dirty it does nothing, not even record the
// position. If the write fails the entries stay dirty.
func (c *Store) Commit(position int64) error {
	entries, done := c.BeginCommit()
	if len(entries) == 0 {
		return nil
	}
	err := c.inner.Write(entries, position)
	done(err)
	return err
}

// BeginCommit is Commit for a caller that writes the entries to the inner
// store itself, with other stores' in one write (statestore.SharedBadger's
// Commit): it returns the dirty entries and done, to call with the
// outcome of their write once it is over. Mutators wait until then; with
// nothing dirty, there is nothing to write and done is not to be called.
func (c *Store) BeginCommit() (entries []statestore.Entry, done func(error)) {
	c.wmu.Lock()
	c.mu.Lock()
	entries = c.dirtyLocked()
	if len(entries) == 0 {
		if len(c.entries) > 0 {
			// Skipped tombstones alone leave nothing to write, yet their
			// entries go as a commit's would.
			c.clearLocked()
		}
		c.mu.Unlock()
		c.wmu.Unlock()
		return nil, nil
	}
	c.mu.Unlock()
	// Readers keep running during the write: until the entries are
	// dropped they shadow the inner store with the same values it is
	// receiving, so they read the same whether the write has landed yet
	// or not.
	return entries, func(err error) {
		defer c.wmu.Unlock()
		c.mu.Lock()
		defer c.mu.Unlock()
		if err != nil {
			// Part of the write may have landed: the clean entries no
			// longer say what the inner store holds.
			c.dropCleanLocked()
			return
		}
		c.commitCleanLocked(entries)
		c.clearLocked()
	}
}

// Discard drops every dirty entry without writing it and releases its
// budget.
func (c *Store) Discard() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clearLocked()
}

// maxReusedEntries bounds the capacity of the slice and index a commit
// keeps for the next round: hot keys then cost no allocation for their
// slots. A commit also releases them when the round filled less than half
// of them, or every store of a thread would keep the largest dirty set it
// ever held: a fetch brings one partition's batch, so one commit's new
// keys often land in one task's store. When the limit was on the dirty
// set's length alone, the twelve stores of eddybench (c) held 25 MiB of
// mostly empty slots at the heap's peak, against a 10 MiB budget; the
// price is an allocation per such round (BenchmarkStoreBurstyRounds: about
// 12% more time per put, every key new).
const maxReusedEntries = 1 << 14

func (c *Store) clearLocked() {
	c.budget.add(-c.bytes)
	if used, slots := len(c.entries), cap(c.entries); slots > maxReusedEntries || 2*used < slots {
		// Made again by the next write (setLocked) at the size this
		// round reached and a quarter more: a round like the last one
		// costs one allocation instead of every doubling, and is kept.
		c.entries, c.index, c.hint = nil, nil, used+used/4
	} else {
		// Drop the references so committed values can be collected.
		clear(c.entries)
		c.entries = c.entries[:0]
		clear(c.index)
	}
	c.sorted = nil
	c.order.reset()
	clear(c.skipped)
	c.puts, c.dels, c.bytes = 0, 0, 0
}

// entryIter walks a sorted slice of entries, tombstones included.
type entryIter struct {
	rest []statestore.Entry
	cur  *statestore.Entry
}

func (it *entryIter) Next() bool {
	if len(it.rest) == 0 {
		it.cur = nil
		return false
	}
	it.cur, it.rest = &it.rest[0], it.rest[1:]
	return true
}

func (it *entryIter) Key() []byte {
	if it.cur == nil {
		return nil
	}
	return it.cur.Key
}

func (it *entryIter) Value() []byte {
	if it.cur == nil {
		return nil
	}
	return it.cur.Value
}

// mergeIter merges a snapshot of dirty entries (tombstones included) over an
// inner iterator. A source is advanced lazily, at the Next after the one
// that consumed its current pair, so the pair handed out stays valid until
// then, as the statestore.Iterator contract requires.
type mergeIter struct {
	dirty                *entryIter
	inner                statestore.Iterator
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
	m.dirty.rest, m.dirty.cur = nil, nil
	return m.inner.Close()
}

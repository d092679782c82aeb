package topology

// A table node's updates held between flushes, collapsed by key, and what the
// flush forwards of them.

import (
	"bytes"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/eddystreams/eddy/statestore"
)

// tableUpdates collects a table node's updates between flushes when the
// task buffers them (see taskGraph.buffered), in chunks from a pool all
// table nodes share.
type tableUpdates struct {
	index map[string]int
	held  chunked[pendingUpdate]
	// bySlot indexes the pending updates instead of index for a table
	// whose store reports each written key's slot (emitAt).
	bySlot slotIndex
	// values, when set, holds the values of the pending updates by
	// position, unboxed, and the held records' values are nil until flush:
	// boxed at every update (an int64 above 255 or a string costs an
	// allocation in an interface), a key's value would be boxed again for
	// each record, though only its last box goes out.
	values heldValues
	// committed, when set, reads the table's store as of the last commit,
	// beneath the writes of the pending updates: the flush asks it whether
	// a key whose pending update is a tombstone without an old value held
	// a value then.
	committed committedReader
}

// committedReader is a store that reads beneath its uncommitted writes:
// the runtime's record cache (cache.Store) and topologytest's stores under
// Config.Commits. A task flushes its table updates just before it commits,
// so at the flush the committed values are those of the last flush.
//
// A key found absent there whose pending update is a tombstone is one
// Kafka Streams' caching stores neither forward nor write: SkipTombstone
// leaves the store's delete of it, and so its changelog record, out of the
// commit.
type committedReader interface {
	HasCommitted(key []byte) (bool, error)
	SkipTombstone(key []byte)
}

// readsCommitted returns rw as a committedReader, or nil when it is none.
func readsCommitted(rw statestore.ReadWriter) committedReader {
	cr, _ := rw.(committedReader)
	return cr
}

// heldValues holds a table node's pending values unboxed (see
// tableUpdates.values).
type heldValues interface {
	// box returns the value at position i as a graph value.
	box(i int) any
	// empty drops every value.
	empty()
}

// valueBuf is a heldValues of values of type A, in chunks from its own
// pool.
type valueBuf[A any] struct {
	pool sync.Pool
	vals chunked[A]
}

// set makes v the value at position i, which is at most one past the
// last.
func (b *valueBuf[A]) set(i int, v A) {
	if i == b.vals.n {
		b.vals.pool = &b.pool
		b.vals.push(v)
		return
	}
	*b.vals.at(i) = v
}

func (b *valueBuf[A]) box(i int) any { return *b.vals.at(i) }
func (b *valueBuf[A]) empty()        { b.vals.empty() }

// pendingUpdate is a held update, with the cache's copy of its key when it
// came through emitAt, or a copy of its key when it came through emit as a
// tombstone (for the flush's committed read).
type pendingUpdate struct {
	r   record
	key []byte
}

var pendingChunks sync.Pool

// add holds r at position u.held.n.
func (u *tableUpdates) add(c *nodeInstance, key []byte, r record) {
	if u.held.n == 0 {
		c.task.holding = append(c.task.holding, u)
	}
	u.held.pool = &pendingChunks
	u.held.push(pendingUpdate{r: r, key: key})
}

// emit forwards r now, or, when the task buffers table updates, keeps it
// as the pending update of its serialized key.
func (u *tableUpdates) emit(c *nodeInstance, key []byte, r record) error {
	if !c.holds() {
		return c.forward(r)
	}
	if u.index == nil {
		u.index = make(map[string]int)
	}
	if i, ok := u.index[string(key)]; ok {
		// Collapsed updates go out as one, from the value before the
		// first to the latest.
		p := u.held.at(i)
		if r.old != nil {
			r.old = p.r.old
		}
		p.r = r
		if r.valueNull && p.key == nil {
			p.key = bytes.Clone(key)
		}
		return nil
	}
	u.index[string(key)] = u.held.n
	var kept []byte
	if r.valueNull {
		kept = bytes.Clone(key)
	}
	u.add(c, kept, r)
	return nil
}

// holdsKey reports whether an update of key (as given to emit) is
// pending.
func (u *tableUpdates) holdsKey(key []byte) bool {
	_, ok := u.index[string(key)]
	return ok
}

// unheldTombstone reports whether r, an update of the key kb of the
// store rw whose updates u holds, is a tombstone for a key that held no
// value at the last flush and has no update pending since: one that Kafka
// Streams' caching stores neither write nor forward. It reads the store
// for tombstones only, and only when c holds updates and r carries no old
// value (which the flush checks instead).
func (u *tableUpdates) unheldTombstone(c *nodeInstance, rw statestore.ReadWriter, kb []byte, r record) (bool, error) {
	if !r.valueNull || r.old != nil || !c.holds() || u.holdsKey(kb) {
		return false, nil
	}
	_, found, err := rw.Get(kb)
	return !found, err
}

// emitAt is emit for a key written to the record cache, which reported the
// key's slot and its own copy of the key (cache.Store.UpdateAt): the
// pending update of the key is found by slot, which costs no hashing. The
// cache renumbers its slots at every commit and discard, as the task graph
// flushes or discards its pending updates; a slot that holds another key
// all the same (the two fell out of step) only costs a second update of
// the key in the next flush, each carrying the value before it.
//
// With lazyKey, r's key is a string not made yet: it is made from the
// cache's copy of the key, which the cache never modifies, when r is
// forwarded or held as the key's first update, and a later update of the
// key takes the held one's.
//
// It returns the update's position among the held ones, or -1 if it was
// forwarded: a table with values (tableUpdates.values) passes r without
// its value and sets the value at that position, and only when the task
// holds its updates.
func (u *tableUpdates) emitAt(c *nodeInstance, slot int, key []byte, lazyKey bool, r record) (int, error) {
	if !c.holds() {
		if lazyKey {
			r.key = unsafe.String(unsafe.SliceData(key), len(key))
		}
		return -1, c.forward(r)
	}
	if i, ok := u.bySlot.lookup(slot); ok && i < u.held.n {
		if p := u.held.at(i); bytes.Equal(p.key, key) {
			if r.old != nil {
				r.old = p.r.old
			}
			if lazyKey {
				r.key = p.r.key
			}
			p.r = r
			return i, nil
		}
	}
	if lazyKey {
		r.key = unsafe.String(unsafe.SliceData(key), len(key))
	}
	i := u.held.n
	u.bySlot.set(slot, i)
	u.add(c, key, r)
	return i, nil
}

// discard drops the pending updates: the input they came from will be
// processed again, and the store writes they reflect were dropped.
func (u *tableUpdates) discard() {
	u.resetIndex(u.held.n)
	u.held.empty()
	if u.values != nil {
		u.values.empty()
	}
}

// resetIndex forgets where the n pending updates are, as the cache
// renumbers its slots at the commit or discard that follows a flush or
// discard; an index grown past maxRetainedUpdates is let go rather than
// kept for every later interval.
func (u *tableUpdates) resetIndex(n int) {
	u.bySlot.reset(maxRetainedUpdates)
	if n > maxRetainedUpdates {
		u.index = nil
	} else {
		clear(u.index)
	}
}

// slotIndex finds a pending update by the record-cache slot of the entry
// it came from (cache.Store.UpdateAt): x[slot] is the update's position
// plus one, 0 for none. The cache renumbers its slots at every commit and
// discard, so the index is reset with the updates it points into, and a
// caller checks that the update found is still of the same entry.
type slotIndex []int32

// lookup returns the position recorded for slot, if any.
func (x slotIndex) lookup(slot int) (int, bool) {
	if slot < len(x) {
		if p := x[slot] - 1; p >= 0 {
			return int(p), true
		}
	}
	return 0, false
}

// set records pos as slot's position.
func (x *slotIndex) set(slot, pos int) {
	if slot >= len(*x) {
		*x = slices.Grow(*x, slot+1-len(*x))[:slot+1]
	}
	(*x)[slot] = int32(pos + 1)
}

// reset forgets every slot, keeping the index's memory unless it grew
// past max entries.
func (x *slotIndex) reset(max int) {
	if cap(*x) > max {
		*x = nil
		return
	}
	clear(*x)
	*x = (*x)[:0]
}

// replace gives the pending update of key, if there is one, the value,
// time and headers of a newer one with the same record key, and reports
// whether there was one: a table whose record keys are costly to make (a
// Windowed key put into an interface) makes one only when replace fails.
func (u *tableUpdates) replace(c *nodeInstance, key []byte, value any, ts time.Time, headers []Header) bool {
	if !c.holds() {
		return false
	}
	i, ok := u.index[string(key)]
	if !ok {
		return false
	}
	p := &u.held.at(i).r
	p.value, p.valueNull, p.ts, p.headers = value, false, ts, headers
	return true
}

// flush forwards the pending updates in the order their keys were first
// updated, but for a tombstone of a key that held no value at the last
// flush either: as Kafka Streams' caching stores at their flush, nothing
// downstream holds the key. The old value, when sent, tells; otherwise the
// store as of the last commit does (u.committed), read for tombstones only,
// as Kafka Streams reads its underlying store for them.
func (u *tableUpdates) flush(c *nodeInstance) error {
	u.resetIndex(u.held.n)
	if u.values == nil {
		return u.held.drain(func(p *pendingUpdate) error {
			if p.r.valueNull {
				if held, err := u.heldAtLastFlush(p); err != nil || !held {
					return err
				}
			}
			return c.forward(p.r)
		})
	}
	// Nothing a table forwards comes back to it, so no update is held
	// while these go out.
	defer u.values.empty()
	i := 0
	return u.held.drain(func(p *pendingUpdate) error {
		p.r.value = u.values.box(i)
		i++
		return c.forward(p.r)
	})
}

// heldAtLastFlush reports whether the key of p, a pending tombstone, held
// a value at the last flush: the old value tells when sent, else the store
// as of the last commit; with neither it cannot tell, and says it did, so
// that the tombstone goes out. A key the committed store lacks has its
// delete left out of the commit, even when an old value decided already:
// only the store's answer is safe to skip a write on.
func (u *tableUpdates) heldAtLastFlush(p *pendingUpdate) (bool, error) {
	if p.r.old != nil && !p.r.old.null {
		return true, nil
	}
	if u.committed == nil || p.key == nil {
		return p.r.old == nil, nil
	}
	held, err := u.committed.HasCommitted(p.key)
	if err != nil {
		return false, err
	}
	if !held {
		u.committed.SkipTombstone(p.key)
	}
	return held && p.r.old == nil, nil
}

// maxRetainedUpdates bounds the index of pending updates a table keeps
// between flushes.
const maxRetainedUpdates = 4096

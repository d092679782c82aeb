package runtime

// A global store: one badger store holding every partition of a global topic, read-only but to its thread.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/eddystreams/eddy/statestore"
)

// The layout of a global store's keys in its backing store: the data under
// one prefix, each partition's position under another, so that reads and
// scans see only the data and a Write carries the data and the position of
// the partition it came from together.
const (
	globalPosPrefix  byte = 0x00
	globalDataPrefix byte = 0x01
)

// errGlobalReadOnly refuses writes to a global store other than its
// thread's: processors and queries only read it.
var errGlobalReadOnly = errors.New("runtime: a global store is written only by its global thread (from its topic)")

// GlobalStoreBadgerOptions returns the options persistent global stores
// are opened with (see globalBadgerOptions), for benchmarks that compare
// with badger itself.
func GlobalStoreBadgerOptions() statestore.BadgerOptions { return globalBadgerOptions() }

// globalBadgerOptions sizes a persistent global store. There is one per
// global table per instance, not one per task, and it holds the whole
// topic, written in restoration batches: a memtable eight times a task
// store's (16 MiB; ~21 MiB of arena while written) holds 1/8 as many
// flushes and level-0 compactions for a full restore, and larger tables
// and levels keep the tree shallow for the larger data set. One
// transaction may then hold ~2.4 MiB, far above a restoration batch of
// restoreBatchRecords small records, so batches of small records fit one
// transaction; larger ones are staged (see globalStore.write).
func globalBadgerOptions() statestore.BadgerOptions {
	o := statestore.DefaultBadgerOptions()
	o.MemTableSize = 16 << 20
	o.BaseTableSize = 4 << 20
	o.BaseLevelSize = 32 << 20
	return o
}

// globalStore is a global table's store: the records of every partition of
// its topic in one backing store, with a position per partition. It is the
// statestore.Store queries read (writes refused; Position sums the
// partitions'), and hands the changelog reader one partitionView per
// partition.
type globalStore struct {
	name, topic string
	inner       statestore.Store

	mu        sync.Mutex
	positions map[int32]int64
	// resetWanted is set when the reader found a partition's position no
	// longer fits the topic and reset its view: the records of that
	// partition cannot be told from the others', so the global thread
	// empties the whole store and reads every partition again.
	resetWanted atomic.Bool
}

func globalPosKey(p int32) []byte {
	return binary.BigEndian.AppendUint32([]byte{globalPosPrefix}, uint32(p))
}

func globalDataKey(key []byte) []byte {
	k := make([]byte, 1+len(key))
	k[0] = globalDataPrefix
	copy(k[1:], key)
	return k
}

// newGlobalStore reads the positions inner holds.
func newGlobalStore(name, topic string, inner statestore.Store) (*globalStore, error) {
	g := &globalStore{name: name, topic: topic, inner: inner, positions: make(map[int32]int64)}
	it, err := inner.Range([]byte{globalPosPrefix}, []byte{globalDataPrefix})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	for it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) != 5 || len(v) != 8 {
			return nil, fmt.Errorf("runtime: global store %q: corrupt position record", name)
		}
		g.positions[int32(binary.BigEndian.Uint32(k[1:]))] = int64(binary.BigEndian.Uint64(v))
	}
	return g, it.Err()
}

// write applies a batch of partition p and p's new position in one store
// write. Records without a key are left out: they have no place in a table.
func (g *globalStore) write(p int32, entries []statestore.Entry, position int64) error {
	n := 0
	for _, e := range entries {
		n += 1 + len(e.Key)
	}
	buf := make([]byte, n)
	out := make([]statestore.Entry, 0, len(entries)+1)
	for _, e := range entries {
		if e.Key == nil {
			continue
		}
		k := buf[: 1+len(e.Key) : 1+len(e.Key)]
		k[0] = globalDataPrefix
		copy(k[1:], e.Key)
		buf = buf[len(k):]
		out = append(out, statestore.Entry{Key: k, Value: e.Value})
	}
	out = append(out, statestore.Entry{Key: globalPosKey(p), Value: binary.BigEndian.AppendUint64(nil, uint64(position))})
	// The backing store's own position means nothing here; the
	// partitions' are in the data. Without one, a batch too big for one
	// badger transaction is staged, atomic across a crash: torn (as a
	// write with a position would be) it could leave p's position ahead of
	// its records, and nothing replays a global store past a torn write.
	if err := g.inner.Write(out, statestore.NoPosition); err != nil {
		return err
	}
	g.mu.Lock()
	g.positions[p] = position
	g.mu.Unlock()
	return nil
}

func (g *globalStore) position(p int32) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if pos, ok := g.positions[p]; ok {
		return pos
	}
	return statestore.NoPosition
}

// empty removes every record and position (Store.Reset). The global
// thread calls it with every partition released from its reader, so
// nothing writes meanwhile. The positions go first, under mu, and the
// backing store is emptied with mu released: queries reading Position
// meanwhile see no position rather than wait for the disk, and never one
// the emptied records no longer back.
func (g *globalStore) empty() error {
	g.mu.Lock()
	clear(g.positions)
	g.mu.Unlock()
	if err := g.inner.Reset(); err != nil {
		return err
	}
	g.resetWanted.Store(false)
	return nil
}

// Get implements statestore.ReadWriter.
func (g *globalStore) Get(key []byte) ([]byte, bool, error) { return g.inner.Get(globalDataKey(key)) }

// Put implements statestore.ReadWriter; it refuses.
func (g *globalStore) Put(_, _ []byte) error { return errGlobalReadOnly }

// Delete implements statestore.ReadWriter; it refuses.
func (g *globalStore) Delete([]byte) error { return errGlobalReadOnly }

// Range implements statestore.ReadWriter.
func (g *globalStore) Range(from, to []byte) (statestore.Iterator, error) {
	lo, hi := []byte{globalDataPrefix}, []byte{globalDataPrefix + 1}
	if from != nil {
		lo = globalDataKey(from)
	}
	if to != nil {
		hi = globalDataKey(to)
	}
	it, err := g.inner.Range(lo, hi)
	if err != nil {
		return nil, err
	}
	return globalIter{it}, nil
}

// All implements statestore.ReadWriter.
func (g *globalStore) All() (statestore.Iterator, error) { return g.Range(nil, nil) }

// ApproximateCount implements statestore.ReadWriter.
func (g *globalStore) ApproximateCount() (int64, error) {
	n, err := g.inner.ApproximateCount()
	g.mu.Lock()
	n -= int64(len(g.positions))
	g.mu.Unlock()
	return max(n, 0), err
}

// Write implements statestore.Store; it refuses.
func (g *globalStore) Write([]statestore.Entry, int64) error { return errGlobalReadOnly }

// Position implements statestore.Store: the sum of the partitions'
// positions, which only grows while the store is not emptied, so that
// queries' minimum positions (monotonic reads) keep their meaning.
func (g *globalStore) Position() (int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.positions) == 0 {
		return statestore.NoPosition, nil
	}
	var sum int64
	for _, p := range g.positions {
		sum += max(p, 0)
	}
	return sum, nil
}

// Reset implements statestore.Store; it refuses.
func (g *globalStore) Reset() error { return errGlobalReadOnly }

// Close implements statestore.Store. The global thread closes the backing
// store; a reader's Close does nothing.
func (g *globalStore) Close() error { return nil }

// globalIter strips the data prefix from the keys of an iterator.
type globalIter struct{ statestore.Iterator }

func (it globalIter) Key() []byte { return it.Iterator.Key()[1:] }

// partitionView is one partition of a global store as the changelog reader
// sees it: a store whose position is the partition's.
type partitionView struct {
	*globalStore
	p int32
}

func (v partitionView) Write(entries []statestore.Entry, position int64) error {
	return v.write(v.p, entries, position)
}

func (v partitionView) Position() (int64, error) { return v.position(v.p), nil }

// Reset leaves the store as it is and asks the global thread to empty all
// of it (see globalStore.resetWanted); meanwhile the reader rereads the
// partition from its start over the old records, which the thread's reset
// removes with the rest.
func (v partitionView) Reset() error {
	v.resetWanted.Store(true)
	v.mu.Lock()
	delete(v.positions, v.p)
	v.mu.Unlock()
	return nil
}

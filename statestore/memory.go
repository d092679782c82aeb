package statestore

import (
	"bytes"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// NewMemory returns an empty in-memory Store. Its position lives only in
// memory, so a new one always starts at NoPosition.
//
// The store is a persistent (path-copying) treap. Every Write builds a new
// version that shares all untouched nodes with the previous one and publishes
// it with a single atomic pointer swap. Readers and iterators therefore work
// on an immutable version without locks: an iterator opened before a Write
// never sees any of it, one opened after sees all of it, and neither blocks
// the writer. A put or delete costs O(log n) time and allocations; nodes
// created within one Write are updated in place, so large batches do not
// copy the same path over and over. Opening an iterator costs O(log n).
func NewMemory() Store {
	s := &memStore{}
	s.snap.Store(&memSnapshot{position: NoPosition})
	return s
}

type memStore struct {
	// wmu serialises writers; readers only load snap.
	wmu    sync.Mutex
	gen    uint64 // version counter, guarded by wmu
	snap   atomic.Pointer[memSnapshot]
	closed atomic.Bool
}

// memSnapshot is one published, immutable version of the store.
type memSnapshot struct {
	root     *memNode
	count    int64
	position int64
}

type memNode struct {
	key, value  []byte
	left, right *memNode
	prio        uint32
	// gen is the version that created the node. Only the Write that owns
	// that version may modify the node; once published it is frozen.
	gen uint64
}

func (s *memStore) load() (*memSnapshot, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	return s.snap.Load(), nil
}

func (s *memStore) Get(key []byte) ([]byte, bool, error) {
	snap, err := s.load()
	if err != nil {
		return nil, false, err
	}
	n := snap.root
	for n != nil {
		switch c := bytes.Compare(key, n.key); {
		case c < 0:
			n = n.left
		case c > 0:
			n = n.right
		default:
			// A copy, so a caller that scribbles on the result cannot
			// corrupt a version other readers share.
			return append([]byte{}, n.value...), true, nil
		}
	}
	return nil, false, nil
}

func (s *memStore) Put(key, value []byte) error {
	if value == nil {
		return ErrNilValue
	}
	return s.apply([]Entry{{Key: key, Value: value}}, false, 0)
}

func (s *memStore) Delete(key []byte) error {
	return s.apply([]Entry{{Key: key}}, false, 0)
}

func (s *memStore) Write(entries []Entry, position int64) error {
	return s.apply(entries, true, position)
}

func (s *memStore) apply(entries []Entry, setPos bool, position int64) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed.Load() {
		return ErrClosed
	}
	cur := s.snap.Load()
	s.gen++
	w := memWriter{gen: s.gen}
	root, count := cur.root, cur.count
	for _, e := range entries {
		if e.Deleted() {
			var removed bool
			if root, removed = w.delete(root, e.Key); removed {
				count--
			}
			continue
		}
		var existed bool
		if root, _, existed = w.insert(root, e.Key, append([]byte{}, e.Value...)); !existed {
			count++
		}
	}
	next := &memSnapshot{root: root, count: count, position: cur.position}
	if setPos {
		next.position = position
	}
	s.snap.Store(next)
	return nil
}

func (s *memStore) Range(from, to []byte) (Iterator, error) {
	snap, err := s.load()
	if err != nil {
		return nil, err
	}
	return newMemIter(snap.root, from, to), nil
}

func (s *memStore) All() (Iterator, error) { return s.Range(nil, nil) }

// ApproximateCount is exact for the in-memory store and O(1).
func (s *memStore) ApproximateCount() (int64, error) {
	snap, err := s.load()
	if err != nil {
		return 0, err
	}
	return snap.count, nil
}

func (s *memStore) Position() (int64, error) {
	snap, err := s.load()
	if err != nil {
		return NoPosition, err
	}
	return snap.position, nil
}

// Reset publishes an empty version. Iterators already open keep reading
// the version they started on.
func (s *memStore) Reset() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed.Load() {
		return ErrClosed
	}
	s.snap.Store(&memSnapshot{position: NoPosition})
	return nil
}

func (s *memStore) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed.Swap(true) {
		return nil
	}
	// Iterators still open keep their own root; dropping ours lets the
	// rest be collected as soon as they finish.
	s.snap.Store(&memSnapshot{position: NoPosition})
	return nil
}

// memWriter applies the entries of one Write, building one new version.
type memWriter struct{ gen uint64 }

// own returns n itself if this Write created it, otherwise a private copy.
func (w *memWriter) own(n *memNode) *memNode {
	if n.gen == w.gen {
		return n
	}
	c := *n
	c.gen = w.gen
	return &c
}

// insert puts key (copied if new) with value, which the caller already
// owns. It returns the new root, the value it replaced and whether the key
// was already there. A nil value is stored as is (the record cache uses it
// for tombstones).
func (w *memWriter) insert(n *memNode, key, value []byte) (*memNode, []byte, bool) {
	if n == nil {
		return &memNode{key: append([]byte{}, key...), value: value, prio: rand.Uint32(), gen: w.gen}, nil, false
	}
	c := bytes.Compare(key, n.key)
	n = w.own(n)
	var (
		prev    []byte
		existed bool
	)
	switch {
	case c == 0:
		prev, existed = n.value, true
		n.value = value
	case c < 0:
		n.left, prev, existed = w.insert(n.left, key, value)
		if n.left.prio > n.prio {
			n = rotateRight(n)
		}
	default:
		n.right, prev, existed = w.insert(n.right, key, value)
		if n.right.prio > n.prio {
			n = rotateLeft(n)
		}
	}
	return n, prev, existed
}

// delete removes key and reports whether it was there. Paths that do not
// hold the key are returned unchanged, so deleting an absent key copies
// nothing.
func (w *memWriter) delete(n *memNode, key []byte) (*memNode, bool) {
	if n == nil {
		return nil, false
	}
	c := bytes.Compare(key, n.key)
	if c == 0 {
		return w.join(n.left, n.right), true
	}
	if c < 0 {
		l, ok := w.delete(n.left, key)
		if !ok {
			return n, false
		}
		n = w.own(n)
		n.left = l
		return n, true
	}
	r, ok := w.delete(n.right, key)
	if !ok {
		return n, false
	}
	n = w.own(n)
	n.right = r
	return n, true
}

// join merges two treaps where every key of a precedes every key of b.
func (w *memWriter) join(a, b *memNode) *memNode {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case a.prio > b.prio:
		a = w.own(a)
		a.right = w.join(a.right, b)
		return a
	default:
		b = w.own(b)
		b.left = w.join(a, b.left)
		return b
	}
}

// Rotations only touch nodes the caller owns: n by own(), its child because
// insert just returned it.
func rotateRight(n *memNode) *memNode {
	l := n.left
	n.left, l.right = l.right, n
	return l
}

func rotateLeft(n *memNode) *memNode {
	r := n.right
	n.right, r.left = r.left, n
	return r
}

// memIter walks one immutable version in order with an explicit stack
// holding the nodes whose key is next to visit.
type memIter struct {
	stack []*memNode
	to    []byte
	cur   *memNode
}

func newMemIter(root *memNode, from, to []byte) *memIter {
	it := &memIter{stack: make([]*memNode, 0, 32), to: to}
	for n := root; n != nil; {
		if from == nil || bytes.Compare(n.key, from) >= 0 {
			it.stack = append(it.stack, n)
			n = n.left
		} else {
			n = n.right
		}
	}
	return it
}

func (it *memIter) Next() bool {
	if len(it.stack) == 0 {
		it.cur = nil
		return false
	}
	n := it.stack[len(it.stack)-1]
	it.stack = it.stack[:len(it.stack)-1]
	if it.to != nil && bytes.Compare(n.key, it.to) >= 0 {
		it.stack, it.cur = it.stack[:0], nil
		return false
	}
	for r := n.right; r != nil; r = r.left {
		it.stack = append(it.stack, r)
	}
	it.cur = n
	return true
}

func (it *memIter) Key() []byte {
	if it.cur == nil {
		return nil
	}
	return it.cur.key
}

func (it *memIter) Value() []byte {
	if it.cur == nil {
		return nil
	}
	return it.cur.value
}

func (it *memIter) Err() error { return nil }

func (it *memIter) Close() error {
	it.stack, it.cur = nil, nil
	return nil
}

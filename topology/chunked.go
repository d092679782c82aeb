package topology

import "sync"

// chunked holds a node's updates between flushes in fixed-size chunks
// taken from a pool, so that a buffer holding a commit interval's updates
// of many keys (tens of thousands a task at a million keys, or a spread
// input's windows) is never copied as it grows, nor allocated and cleared
// again at every commit. The zero value works; without a pool it allocates
// its chunks.
type chunked[T any] struct {
	pool   *sync.Pool // of *[chunkLen]T
	chunks []*[chunkLen]T
	n      int
}

// chunkLen is how many items a chunk holds: 128 of a table's held updates
// make a chunk of 18 KiB.
const chunkLen = 128

func (b *chunked[T]) at(i int) *T { return &b.chunks[i/chunkLen][i%chunkLen] }

// push appends v at position b.n.
func (b *chunked[T]) push(v T) {
	if b.n/chunkLen == len(b.chunks) {
		var ch *[chunkLen]T
		if b.pool != nil {
			ch, _ = b.pool.Get().(*[chunkLen]T)
		}
		if ch == nil {
			ch = new([chunkLen]T)
		}
		b.chunks = append(b.chunks, ch)
	}
	*b.at(b.n) = v
	b.n++
}

// drain hands the held items to fn in the order they were pushed and
// empties the buffer, whether or not fn fails.
func (b *chunked[T]) drain(fn func(*T) error) error {
	held := *b
	b.chunks, b.n = nil, 0
	defer func() {
		held.empty()
		if b.chunks == nil {
			b.chunks = held.chunks
		}
	}()
	for i := range held.n {
		if err := fn(held.at(i)); err != nil {
			return err
		}
	}
	return nil
}

// empty drops the held items and returns their chunks to the pool,
// keeping the slice that held them.
func (b *chunked[T]) empty() {
	for i, ch := range b.chunks {
		clear(ch[:min(b.n-i*chunkLen, chunkLen)])
		if b.pool != nil {
			b.pool.Put(ch)
		}
	}
	clear(b.chunks)
	b.chunks, b.n = b.chunks[:0], 0
}

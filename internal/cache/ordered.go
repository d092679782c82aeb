package cache

import (
	"bytes"
	"slices"

	"github.com/eddystreams/eddy/statestore"
)

// orderBlock bounds a block of orderedSlots: a new key moves at most this
// many slots, and a lookup compares O(log n) keys.
const orderBlock = 256

// orderedSlots keeps the slots of a Store's dirty entries in key order, so
// a Range over a few keys costs a binary search and a copy of those keys,
// not a sort of every dirty entry. Windowed aggregations and joins read a
// range after nearly every write; sorting on each read made a record's cost
// grow with the dirty set, quadratic over a commit interval.
//
// The slots sit in sorted blocks of at most orderBlock. A Store keeps one
// only once something ranges over it: a store read by key alone sorts its
// entries once, at the commit.
type orderedSlots struct {
	blocks [][]int32
}

// build orders every slot of entries.
func (o *orderedSlots) build(entries []statestore.Entry) {
	o.blocks = o.blocks[:0]
	slots := make([]int32, len(entries))
	for i := range slots {
		slots[i] = int32(i)
	}
	slices.SortFunc(slots, func(a, b int32) int { return bytes.Compare(entries[a].Key, entries[b].Key) })
	for len(slots) > 0 {
		n := min(len(slots), orderBlock)
		o.blocks = append(o.blocks, slots[:n:n])
		slots = slots[n:]
	}
}

func (o *orderedSlots) reset() {
	clear(o.blocks)
	o.blocks = o.blocks[:0]
}

// seek returns the position of the first slot whose key is not below key:
// block b, index i within it (b == len(o.blocks) past the end).
func (o *orderedSlots) seek(entries []statestore.Entry, key []byte) (b, i int) {
	b, _ = slices.BinarySearchFunc(o.blocks, key, func(blk []int32, k []byte) int {
		return bytes.Compare(entries[blk[len(blk)-1]].Key, k)
	})
	if b == len(o.blocks) {
		return b, 0
	}
	i, _ = slices.BinarySearchFunc(o.blocks[b], key, func(s int32, k []byte) int {
		return bytes.Compare(entries[s].Key, k)
	})
	return b, i
}

// insert places slot, whose key is new to the dirty set.
func (o *orderedSlots) insert(entries []statestore.Entry, slot int) {
	if len(o.blocks) == 0 {
		o.blocks = append(o.blocks, append(make([]int32, 0, orderBlock), int32(slot)))
		return
	}
	b, i := o.seek(entries, entries[slot].Key)
	if b == len(o.blocks) {
		// Past every key: the end of the last block.
		b--
		i = len(o.blocks[b])
	}
	blk := o.blocks[b]
	if len(blk) == orderBlock {
		// Split: the upper half moves to a block of its own.
		upper := make([]int32, orderBlock/2, orderBlock)
		copy(upper, blk[orderBlock/2:])
		blk = blk[: orderBlock/2 : orderBlock]
		o.blocks[b] = blk
		o.blocks = slices.Insert(o.blocks, b+1, upper)
		if i > orderBlock/2 {
			b, i, blk = b+1, i-orderBlock/2, upper
		}
	}
	if cap(blk) < orderBlock {
		// A block from build shares its array with its neighbours.
		blk = append(make([]int32, 0, orderBlock), blk...)
	}
	o.blocks[b] = slices.Insert(blk, i, int32(slot))
}

// collect copies the entries with keys in [from, to), in key order (nil
// bounds are open), unless there are more than limit of them: then it
// returns false.
func (o *orderedSlots) collect(entries []statestore.Entry, from, to []byte, limit int) ([]statestore.Entry, bool) {
	b, i := 0, 0
	if from != nil {
		b, i = o.seek(entries, from)
	}
	var out []statestore.Entry
	for ; b < len(o.blocks); b, i = b+1, 0 {
		for _, s := range o.blocks[b][i:] {
			e := entries[s]
			if to != nil && bytes.Compare(e.Key, to) >= 0 {
				return out, true
			}
			if len(out) == limit {
				return nil, false
			}
			out = append(out, e)
		}
	}
	return out, true
}

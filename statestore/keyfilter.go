package statestore

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// keyFilter answers, for a store whose every key it has been shown, that
// a key is certainly absent, so that a Get of a key new to the store need
// not read badger. A read that misses costs badger a lookup in each
// memtable and each level (the bloom filters of badger's tables spare the
// table reads, not the search for the tables), which counting keys that
// are mostly new (eddybench (m)) paid once per record.
//
// It is a scalable split-block bloom filter: layers of blocks of eight
// 32-bit words, a key setting one bit in each word of the one block its
// hash picks. The first layer holds filterFirstKeys keys, each further one
// twice the keys of the one before, so that a store's filter grows with
// it, never knowing its size ahead, at about filterBitsPerKey bits per key
// when full and twice that at worst. A key tested by every layer is
// absent with certainty; the chance that an absent key passes is about
// one percent per full layer, so a store of n keys reads badger for some
// log2(n/filterFirstKeys) percent of its new keys.
//
// Adds happen under the store's writer lock (wmu); tests take no lock and
// may run alongside adds: the words are read and set atomically, and a
// new layer is published only once made.
type keyFilter struct {
	seed   maphash.Seed
	layers atomic.Pointer[[]*filterLayer]
	// added counts the keys put in the last layer; guarded by mu.
	mu    sync.Mutex
	added int
}

const (
	filterFirstKeys  = 4096
	filterBitsPerKey = 10
	filterBlockWords = 8
)

// filterSalts spread a key's 32 low hash bits over the eight words of its
// block, one bit each; any odd constants will do.
var filterSalts = [filterBlockWords]uint32{
	0x9e3779b1, 0x85ebca77, 0xc2b2ae3d, 0x27d4eb2f,
	0x165667b1, 0xd3a2646d, 0xfd7046c5, 0xb55a4f09,
}

type filterLayer struct {
	words  []uint32
	blocks uint64
	keys   int // how many keys the layer is sized for
}

func newFilterLayer(keys int) *filterLayer {
	blocks := (keys*filterBitsPerKey + 32*filterBlockWords - 1) / (32 * filterBlockWords)
	return &filterLayer{words: make([]uint32, blocks*filterBlockWords), blocks: uint64(blocks), keys: keys}
}

// block returns the words of the block h picks in l.
func (l *filterLayer) block(h uint64) []uint32 {
	i := ((h >> 32) * l.blocks) >> 32
	return l.words[i*filterBlockWords : (i+1)*filterBlockWords : (i+1)*filterBlockWords]
}

func (l *filterLayer) has(h uint64) bool {
	b := l.block(h)
	for i, salt := range filterSalts {
		if atomic.LoadUint32(&b[i])&(1<<((uint32(h)*salt)>>27)) == 0 {
			return false
		}
	}
	return true
}

func (l *filterLayer) set(h uint64) {
	b := l.block(h)
	for i, salt := range filterSalts {
		atomic.OrUint32(&b[i], 1<<((uint32(h)*salt)>>27))
	}
}

func newKeyFilter() *keyFilter {
	f := &keyFilter{seed: maphash.MakeSeed()}
	f.layers.Store(new([]*filterLayer))
	return f
}

// mayHave reports whether key may be one the filter was shown.
func (f *keyFilter) mayHave(key []byte) bool {
	return f.mayHaveHash(maphash.Bytes(f.seed, key))
}

func (f *keyFilter) mayHaveHash(h uint64) bool {
	for _, l := range *f.layers.Load() {
		if l.has(h) {
			return true
		}
	}
	return false
}

// add shows the filter the keys of entries that are not deletions.
func (f *keyFilter) add(entries []Entry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range entries {
		if e.Value != nil {
			f.addLocked(e.Key)
		}
	}
}

// addLocked adds key, counting it only if no layer already passes it: a
// store rewriting the same keys (a count's updates) must not grow its
// filter.
func (f *keyFilter) addLocked(key []byte) {
	h := maphash.Bytes(f.seed, key)
	if f.mayHaveHash(h) {
		return
	}
	layers := *f.layers.Load()
	if len(layers) == 0 || f.added >= layers[len(layers)-1].keys {
		keys := filterFirstKeys
		if len(layers) > 0 {
			keys = 2 * layers[len(layers)-1].keys
		}
		grown := append(layers[:len(layers):len(layers)], newFilterLayer(keys))
		f.layers.Store(&grown)
		layers, f.added = grown, 0
	}
	layers[len(layers)-1].set(h)
	f.added++
}

// bytes is the memory the filter's layers take.
func (f *keyFilter) bytes() int {
	n := 0
	for _, l := range *f.layers.Load() {
		n += 4 * len(l.words)
	}
	return n
}

package cache

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/eddystreams/eddy/statestore"
)

// benchRecord fills a 10-byte key and an 8-byte value for record i.
func benchRecord(i int, key, val []byte) {
	copy(key, fmt.Appendf(key[:0], "%010d", i))
	binary.BigEndian.PutUint64(val, uint64(i))
}

// BenchmarkStorePut measures the processing-path write: a put into
// the record cache, committed every 10,000 records.
func BenchmarkStorePut(b *testing.B) {
	c := New(statestore.NewMemory(), NewBudget(64<<20))
	key, val := make([]byte, 10), make([]byte, 8)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		benchRecord(i%50_000, key, val)
		if err := c.Put(key, val); err != nil {
			b.Fatal(err)
		}
		if i%10_000 == 9_999 {
			if err := c.Commit(int64(i)); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkStorePutRange is the path of windowed aggregations and joins: each
// record writes a key and then reads a short key range, as a sliding window
// or a stream-stream join looks up a key's neighbouring windows. The
// dirty set grows to 10,000 entries between commits; reading a range must
// not cost in proportion to it.
func BenchmarkStorePutRange(b *testing.B) {
	c := New(statestore.NewMemory(), NewBudget(64<<20))
	key, val := make([]byte, 10), make([]byte, 8)
	lo, hi := make([]byte, 10), make([]byte, 10)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Keys in a scattered order, so new keys land all over the order.
		k := (i * 7919) % 1_000_003
		benchRecord(k, key, val)
		if err := c.Put(key, val); err != nil {
			b.Fatal(err)
		}
		benchRecord(k-2, lo, val)
		benchRecord(k+3, hi, val)
		it, err := c.Range(lo, hi)
		if err != nil {
			b.Fatal(err)
		}
		for it.Next() {
		}
		if err := it.Close(); err != nil {
			b.Fatal(err)
		}
		if i%10_000 == 9_999 {
			if err := c.Commit(int64(i)); err != nil {
				b.Fatal(err)
			}
		}
	}
}

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

// BenchmarkStoreBurstyRounds is a thread of eddybench (c) and (m): six
// stores share a 5 MiB budget, every key is new, and keys arrive in
// batches of one partition (one store) at a time, as a fetch brings them;
// all stores commit when the budget is full. It reports the slots the
// stores hold between rounds, which the commit's reuse rule bounds.
func BenchmarkStoreBurstyRounds(b *testing.B) {
	budget := NewBudget(5 << 20)
	stores := make([]*Store, 6)
	for i := range stores {
		stores[i] = New(statestore.NewMemory(), budget)
	}
	var pos int64
	commit := func() {
		for _, s := range stores {
			pos++
			if err := s.Commit(pos); err != nil {
				b.Fatal(err)
			}
		}
		// A memory store keeps what is committed; start each round empty
		// so that only the cache's own buffers carry over.
		for _, s := range stores {
			s.inner = statestore.NewMemory()
		}
	}
	val := make([]byte, 8)
	batch := []int{9000, 20000, 3000, 50000, 12000, 700}
	maxSlots := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i, n := 0, 0; i < b.N; n++ {
		s := stores[n%len(stores)]
		for range batch[n%len(batch)] {
			key := fmt.Appendf(nil, "%012d", i)
			binary.BigEndian.PutUint64(val, uint64(i))
			if err := s.Put(key, val); err != nil {
				b.Fatal(err)
			}
			i++
			if budget.Full() {
				commit()
				slots := 0
				for _, s := range stores {
					slots += cap(s.entries)
				}
				maxSlots = max(maxSlots, slots)
			}
			if i >= b.N {
				break
			}
		}
	}
	b.ReportMetric(float64(maxSlots), "max-kept-slots")
}

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

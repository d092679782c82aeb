package topology

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The hashes are the signed Java ints Kafka's Utils.murmur2 returns; the
// partitions were computed with Kafka's toPositive(h) % 12.
func TestMurmur2MatchesKafka(t *testing.T) {
	cases := []struct {
		in        string
		hash      int32
		partition int32
	}{
		{"21", -973932308, 0},
		{"foobar", -790332482, 6},
		{"a-little-bit-long-string", -985981536, 8},
		{"a-little-bit-longer-string", -1486304829, 11},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971, 5},
		{"abc", 479470107, 3},
		{"", 275646681, 9},
		{"hello", 2132663229, 9},
		{"word-0", -1981601879, 9},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			require.Equal(t, c.hash, int32(murmur2([]byte(c.in))))
			require.Equal(t, c.partition, Partition([]byte(c.in), 12))
		})
	}
}

func TestPartitionIsInRange(t *testing.T) {
	for n := int32(1); n <= 7; n++ {
		for i := range 200 {
			p := Partition([]byte{byte(i), byte(i * 7), 0xff, byte(i >> 3)}, n)
			require.GreaterOrEqual(t, p, int32(0))
			require.Less(t, p, n)
		}
	}
	require.Panics(t, func() { Partition([]byte("k"), 0) })
}

func BenchmarkPartition(b *testing.B) {
	key := []byte("a-typical-record-key-0123")
	for b.Loop() {
		Partition(key, 12)
	}
}

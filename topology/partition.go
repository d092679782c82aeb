package topology

// Partition returns the partition of a record with the given serialized key
// among numPartitions, as Kafka's default partitioner computes it for keyed
// records: the murmur2 hash of the key, made non-negative by clearing its
// sign bit, modulo numPartitions. Producers in any language that use the
// default partitioner therefore agree with Eddy on where a key lives.
//
// Records without a key are spread by the producer instead; Partition is
// for keyed records only. It panics if numPartitions is not positive.
func Partition(key []byte, numPartitions int32) int32 {
	if numPartitions <= 0 {
		panic("topology: Partition needs a positive partition count")
	}
	return int32(murmur2(key)&0x7fffffff) % numPartitions
}

// murmur2 is the 32-bit MurmurHash2 of data with the seed the Kafka clients
// use. Kafka computes it on Java ints; the uint32 arithmetic here yields the
// same bits.
func murmur2(data []byte) uint32 {
	const (
		seed = 0x9747b28c
		m    = 0x5bd1e995
		r    = 24
	)
	n := len(data)
	h := uint32(seed) ^ uint32(n)
	for len(data) >= 4 {
		k := uint32(data[0]) | uint32(data[1])<<8 | uint32(data[2])<<16 | uint32(data[3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
		data = data[4:]
	}
	switch len(data) {
	case 3:
		h ^= uint32(data[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}

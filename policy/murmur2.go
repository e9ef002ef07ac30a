package policy

// murmur2 is the 32-bit MurmurHash2 variant of Kafka's Utils.murmur2 (seed 0x9747b28c), the hash
// behind Java's default partitioner for keyed records. Java computes it in signed 32-bit
// arithmetic; unsigned arithmetic gives the same bits.
func murmur2(data []byte) uint32 {
	const (
		seed = 0x9747b28c
		m    = 0x5bd1e995
		r    = 24
	)
	length := len(data)
	h := uint32(seed) ^ uint32(length)
	n := length / 4
	for i := range n {
		i4 := i * 4
		k := uint32(data[i4]) | uint32(data[i4+1])<<8 | uint32(data[i4+2])<<16 | uint32(data[i4+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := data[n*4:]
	switch len(tail) {
	case 3:
		h ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(tail[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}

// ConnectOffsetPartition is the partition Java's default partitioner picks for a record with this
// key: toPositive(murmur2(key)) % numPartitions, where toPositive clears the sign bit. Connect
// writes every record of the offsets topic (25 partitions by default, offset.storage.partitions)
// this way, so a Go writer that wants Java Connect to find its offsets must use the same partition.
// It returns -1 when numPartitions is not positive, so a misuse shows up as a produce error rather
// than as a record on a plausible but wrong partition.
func ConnectOffsetPartition(key []byte, numPartitions int32) int32 {
	if numPartitions <= 0 {
		return -1
	}
	return int32((murmur2(key) & 0x7fffffff) % uint32(numPartitions))
}

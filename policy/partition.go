package policy

import "github.com/twmb/franz-go/pkg/kgo"

// javaPartitioner partitions keyed records as Java's default partitioner
// does: toPositive(murmur2(key)) % numPartitions (Kafka's Utils.murmur2,
// seed 0x9747b28c; toPositive clears the sign bit). franz-go's
// StickyKeyPartitioner with its default hasher is that rule for records with
// a key, and holds no state for them.
var javaPartitioner = kgo.StickyKeyPartitioner(nil).ForTopic("")

// keyPartition is the partition Java's default partitioner picks for key
// among n > 0 partitions; a nil key hashes as an empty one.
func keyPartition(key []byte, n int) int {
	if key == nil {
		key = []byte{}
	}
	return javaPartitioner.Partition(&kgo.Record{Key: key}, n)
}

// ConnectOffsetPartition is the partition Java's default partitioner picks for a record with this
// key. Connect writes every record of the offsets topic (25 partitions by default,
// offset.storage.partitions) this way, so a Go writer that wants Java Connect to find its offsets
// must use the same partition. It returns -1 when numPartitions is not positive, so a misuse shows
// up as a produce error rather than as a record on a plausible but wrong partition.
func ConnectOffsetPartition(key []byte, numPartitions int32) int32 {
	if numPartitions <= 0 {
		return -1
	}
	return int32(keyPartition(key, int(numPartitions)))
}

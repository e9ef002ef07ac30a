package policy

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestKeyPartitionHash checks the hash behind keyPartition against Kafka's
// murmur2 vectors: over MaxInt32 partitions the partition is the hash with
// its sign bit cleared, modulo MaxInt32.
func TestKeyPartitionHash(t *testing.T) {
	tests := []struct {
		in   string
		want int32 // as Java's int
	}{
		// Kafka's UtilsTest.testMurmur2 vectors.
		{"21", -973932308},
		{"foobar", -790332482},
		{"a-little-bit-long-string", -985981536},
		{"a-little-bit-longer-string", -1486304829},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
		{"abc", 479470107},
		// Every tail length, printed by Kafka 4.3.1's Utils.murmur2.
		{"", 275646681},
		{"a", -1563381124},
		{"ab", 316155434},
		{"abcd", -1323649548},
		{"abcde", 461995741},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			want := int(uint32(tc.want)&0x7fffffff) % math.MaxInt32
			require.Equal(t, want, keyPartition([]byte(tc.in), math.MaxInt32))
		})
	}
}

func TestConnectOffsetPartition(t *testing.T) {
	// Expected partitions are Utils.toPositive(Utils.murmur2(key)) % n computed by Kafka 4.3.1.
	tests := []struct {
		name string
		key  []byte
		n    int32
		want int32
	}{
		{"21 of 25", []byte("21"), 25, 15},
		{"21 of 7", []byte("21"), 7, 3},
		{"foobar of 25", []byte("foobar"), 25, 16},
		{"foobar of 7", []byte("foobar"), 7, 0},
		{"empty of 25", []byte{}, 25, 6},
		{"nil of 7", nil, 7, 2},
		{"a of 25 (negative hash)", []byte("a"), 25, 24},
		{"abcd of 7", []byte("abcd"), 7, 5},
		{"abcde of 25", []byte("abcde"), 25, 16},
		{"source key partition 0", SourceOffsetKey{Cluster: "A", Topic: "t", Partition: 0}.Encode(), 25, 7},
		{"source key partition 1", SourceOffsetKey{Cluster: "A", Topic: "t", Partition: 1}.Encode(), 25, 1},
		{"source key partition 24", SourceOffsetKey{Cluster: "A", Topic: "t", Partition: 24}.Encode(), 25, 20},
		{"source key max partition", SourceOffsetKey{Cluster: "A", Topic: "t", Partition: 2147483647}.Encode(), 25, 7},
		{"checkpoint key", CheckpointOffsetKey{Group: "g", Topic: "A.t", Partition: 0}.Encode(), 25, 21},
		{"heartbeat key", HeartbeatOffsetKey{SourceAlias: "A", TargetAlias: "B"}.Encode(), 25, 0},
		{"one partition", []byte("anything"), 1, 0},
		{"zero partitions", []byte("a"), 0, -1},
		{"negative partitions", []byte("a"), -3, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, ConnectOffsetPartition(tc.key, tc.n))
		})
	}
}

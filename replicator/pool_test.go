package replicator

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestPoolClasses(t *testing.T) {
	for _, tc := range []struct {
		n, class, size int
	}{
		{n: 1, class: 0, size: 1},
		{n: 8, class: 7, size: 8},
		{n: 9, class: 8*3 + 1, size: 9}, // steps of 1<<3/8 = 1
		{n: 15, class: 8*3 + 7, size: 15},
		{n: 16, class: 8 * 4, size: 16},
		{n: 17, class: 8*4 + 1, size: 18}, // steps of 2
		{n: 1 << 20, class: 8 * 20, size: 1 << 20},
		{n: 1<<20 + 1, class: 8*20 + 1, size: 1<<20 + 1<<17},
		{n: 1<<21 - 1, class: 8 * 21, size: 1 << 21}, // rounds up into the next power
		{n: 1 << maxExp, class: 8 * maxExp, size: 1 << maxExp},
	} {
		class, size, ok := classFor(tc.n)
		require.True(t, ok, "n=%d", tc.n)
		require.Equal(t, tc.class, class, "class of n=%d", tc.n)
		require.Equal(t, tc.size, size, "size of n=%d", tc.n)
		// A buffer of the class's size is kept in that class.
		back, ok := classOf(size)
		require.True(t, ok)
		require.Equal(t, class, back, "classOf(%d)", size)
	}
	_, _, ok := classFor(1 << (maxExp + 1))
	require.False(t, ok, "beyond the largest class")
	_, _, ok = classFor(0)
	require.False(t, ok)
}

// TestPoolClassesHoldWhatTheyPromise checks the invariant the pool relies
// on for every size up to 64 Ki: a buffer of capacity c is filed under a
// class whose size is at most c, and a request for n gets a class whose
// size is at least n and at most 12.5 % more.
func TestPoolClassesHoldWhatTheyPromise(t *testing.T) {
	sizes := map[int]int{} // class -> size
	for n := 1; n <= 1<<16; n++ {
		class, size, ok := classFor(n)
		require.True(t, ok)
		require.GreaterOrEqual(t, size, n)
		require.LessOrEqual(t, float64(size), float64(n)*1.125+1, "n=%d", n)
		if s, seen := sizes[class]; seen {
			require.Equal(t, s, size, "class %d has one size", class)
		}
		sizes[class] = size
		kept, ok := classOf(n)
		require.True(t, ok)
		keptSize, seen := sizes[kept]
		require.True(t, seen, "capacity %d filed under class %d, which no request of at most %d gets", n, kept, n)
		require.LessOrEqual(t, keptSize, n, "capacity %d filed under class %d of size %d", n, kept, keptSize)
	}
}

func TestPoolLearnsTheExpansionRatio(t *testing.T) {
	fp := newFetchPool()
	require.Equal(t, minBuffer, fp.decompressedGuess(100))
	require.Equal(t, (2*ratioScale+ratioMargin)*100_000/ratioScale, fp.decompressedGuess(100_000), "guess before any batch")
	for range 100 {
		fp.OnFetchBatchRead(kgo.BrokerMetadata{}, "t", 0, kgo.FetchBatchMetrics{CompressionType: 3, CompressedBytes: 1000, UncompressedBytes: 5000})
	}
	guess := fp.decompressedGuess(100_000)
	require.GreaterOrEqual(t, guess, 500_000, "the ratio moved to 5")
	require.LessOrEqual(t, guess, 520_000)
	// Uncompressed batches say nothing about the ratio.
	fp.OnFetchBatchRead(kgo.BrokerMetadata{}, "t", 0, kgo.FetchBatchMetrics{CompressedBytes: 1000, UncompressedBytes: 1000})
	require.Equal(t, guess, fp.decompressedGuess(100_000))
	b := fp.GetDecompressBytes(make([]byte, 100_000), kgo.CodecLz4)
	require.Empty(t, b)
	require.GreaterOrEqual(t, cap(b), guess)
	// A one-record batch gets a buffer about its size, not kilobytes.
	require.LessOrEqual(t, cap(fp.GetDecompressBytes(make([]byte, 150), kgo.CodecSnappy)), 1024)
}

// TestFetchBuffersGoBackToThePool copies data and transaction markers and
// checks that every record slice the source client took from the pool came
// back: acknowledged records and skipped markers are all recycled.
func TestFetchBuffersGoBackToThePool(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "pooled", 2, nil)
	want := b.produce("pooled", 2, 0, 200)

	txn := newClient(t, b.src, kgo.TransactionalID("pool-test"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx := context.Background()
	for i := range 2 {
		require.NoError(t, txn.BeginTransaction())
		rec := &kgo.Record{Topic: "pooled", Partition: int32(i), Value: []byte("in a transaction"), Timestamp: time.UnixMilli(1_600_000_000_000)}
		require.NoError(t, txn.ProduceSync(ctx, rec).FirstErr())
		want[int32(i)] = append(want[int32(i)], toRecord(rec))
		require.NoError(t, txn.EndTransaction(ctx, kgo.TryCommit))
	}
	b.produceTo(want, "pooled", 2, 200, 100)

	stop := b.run(b.flow("mm2go.copy.mode = records"), prometheus.NewRegistry())
	require.Equal(t, want, b.read("A.pooled", 302))
	require.Eventually(t, func() bool {
		return b.pool.lent.Load() > 0 && b.pool.lent.Load() == b.pool.returned.Load()
	}, 5*time.Second, 10*time.Millisecond, "record slices lent %d, returned %d", b.pool.lent.Load(), b.pool.returned.Load())
	require.Positive(t, b.pool.ratio.Load(), "compressed batches were read through the pool")
	require.NoError(t, stop())
}

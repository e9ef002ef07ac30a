package replicator

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// fetchPool lends the source client the buffers it decompresses fetched
// batches into and the record slices it decodes them into (kgo.WithPools).
// The poll loop gives a record back (kgo.Record.Recycle) once the target
// acknowledged it or it was skipped; when every record of a batch is back,
// kgo returns the batch's buffers here and the next fetch reuses them. This
// spares the copy path an allocation and a copy of every decompressed byte.
//
// A decompression buffer is sized from the batch's compressed size and the
// expansion ratio seen so far (the pool is also the client's
// HookFetchBatchRead), so that a buffer is not much larger than its batch:
// records hold their batch's whole buffer until the last of them is
// acknowledged, and oversized buffers would cost more memory than the
// allocations they save.
//
// Buffers are kept in size classes an eighth of a power of two apart, so a
// buffer is at most 12.5 % larger than asked for.
type fetchPool struct {
	bytes [numClasses]sync.Pool // *[]byte
	recs  [numClasses]sync.Pool // *[]kgo.Record
	// ratio is decompressed/compressed bytes of the batches read so far,
	// a moving average, times ratioScale; 0 until the first batch.
	ratio atomic.Int64
	// lent and returned count record slices handed to kgo and given back:
	// once everything fetched is acknowledged or skipped, they are equal.
	lent, returned atomic.Int64
}

const (
	// minBuffer is the smallest decompression buffer handed out. A
	// record holds its batch's buffer until acknowledged, so a backlog of
	// one-record batches holds one buffer per record: with 16 KiB, the
	// records mode's catch-up of 60,000 such batches over 1,500 partitions
	// peaked at 953-1,114 MiB of RSS, 251-261 MiB with 512 B, as fast.
	minBuffer = 512
	// maxExp bounds the classes at 1<<maxExp (1 GiB, above any batch);
	// larger requests are allocated and not pooled.
	maxExp     = 30
	numClasses = steps * (maxExp + 1)
	// steps is the number of classes per power of two.
	steps = 8
	// ratioScale is the fixed-point scale of ratio; firstRatio is the
	// guess before any batch was read; ratioMargin is added to the
	// average so that most batches fit their first buffer.
	ratioScale  = 1024
	firstRatio  = 2 * ratioScale
	ratioMargin = ratioScale / 32
)

var (
	_ kgo.PoolDecompressBytes = (*fetchPool)(nil)
	_ kgo.PoolRecords         = (*fetchPool)(nil)
	_ kgo.HookFetchBatchRead  = (*fetchPool)(nil)
)

func newFetchPool() *fetchPool { return new(fetchPool) }

// classFor is the smallest class whose buffers hold n (> 0) and the size of
// that class; ok is false when n exceeds the largest class.
func classFor(n int) (class, size int, ok bool) {
	if n <= steps {
		return n - 1, n, n > 0
	}
	e := bits.Len(uint(n)) - 1 // 1<<e <= n < 1<<(e+1)
	step := 1 << e / steps
	q := (n - 1<<e + step - 1) / step // steps above 1<<e, rounded up
	if q == steps {
		e, q = e+1, 0
	}
	if e > maxExp {
		return 0, 0, false
	}
	return steps*e + q, 1<<e + q*(1<<e/steps), true
}

// classOf is the largest class whose size is at most c (> 0): where a
// buffer of capacity c is kept. ok is false for c beyond the largest class.
func classOf(c int) (class int, ok bool) {
	if c <= steps {
		return c - 1, c > 0
	}
	e := bits.Len(uint(c)) - 1
	if e > maxExp {
		return 0, false
	}
	return steps*e + (c-1<<e)/(1<<e/steps), true
}

// decompressedGuess is the buffer size asked for a batch of compressed
// bytes: the moving expansion ratio plus a margin, at least minBuffer.
func (fp *fetchPool) decompressedGuess(compressed int) int {
	r := fp.ratio.Load()
	if r == 0 {
		r = firstRatio
	}
	guess := float64(compressed) * float64(r+ratioMargin) / ratioScale
	return max(minBuffer, int(min(guess, math.MaxInt32)))
}

// GetDecompressBytes implements kgo.PoolDecompressBytes.
func (fp *fetchPool) GetDecompressBytes(compressed []byte, _ kgo.CompressionCodecType) []byte {
	k, size, ok := classFor(fp.decompressedGuess(len(compressed)))
	if !ok {
		return nil // kgo allocates what it needs
	}
	if v := fp.bytes[k].Get(); v != nil {
		return (*v.(*[]byte))[:0]
	}
	return make([]byte, 0, size)
}

// PutDecompressBytes implements kgo.PoolDecompressBytes.
func (fp *fetchPool) PutDecompressBytes(b []byte) {
	if k, ok := classOf(cap(b)); ok && cap(b) >= minBuffer {
		b = b[:0]
		fp.bytes[k].Put(&b)
	}
}

// GetRecords implements kgo.PoolRecords.
func (fp *fetchPool) GetRecords(n int) []kgo.Record {
	fp.lent.Add(1)
	k, size, ok := classFor(max(n, 1))
	if !ok {
		return nil
	}
	if v := fp.recs[k].Get(); v != nil {
		return (*v.(*[]kgo.Record))[:0]
	}
	return make([]kgo.Record, 0, size)
}

// PutRecords implements kgo.PoolRecords.
func (fp *fetchPool) PutRecords(rs []kgo.Record) {
	fp.returned.Add(1)
	if k, ok := classOf(cap(rs)); ok {
		rs = rs[:0]
		fp.recs[k].Put(&rs)
	}
}

// OnFetchBatchRead implements kgo.HookFetchBatchRead: it moves the expansion
// ratio an eighth of the way towards the batch's.
func (fp *fetchPool) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	if m.CompressionType == 0 || m.CompressedBytes <= 0 {
		return
	}
	batch := int64(m.UncompressedBytes) * ratioScale / int64(m.CompressedBytes)
	for {
		old := fp.ratio.Load()
		next := batch
		if old != 0 {
			next = old + (batch-old)/8
		}
		if fp.ratio.CompareAndSwap(old, next) {
			return
		}
	}
}

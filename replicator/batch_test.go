package replicator

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func testRecords() []*kgo.Record {
	return []*kgo.Record{
		{Key: []byte("k0"), Value: []byte("v0"), Timestamp: time.UnixMilli(1_700_000_000_005), Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("x")}, {Key: "nil"}}},
		{Value: []byte("v1"), Timestamp: time.UnixMilli(1_700_000_000_001)}, // nil key, older timestamp
		{Key: []byte("k2"), Timestamp: time.UnixMilli(1_700_000_000_009)},   // nil value (tombstone)
	}
}

// decode reads b back as kgo's consumer would, at base offset base.
func decode(t *testing.T, b []byte, base int64) []*kgo.Record {
	t.Helper()
	binary.BigEndian.PutUint64(b[offBaseOffset:], uint64(base))
	b = append([]byte(nil), b...)
	// The base offset is outside the CRC: setting it keeps the batch valid.
	fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Offset: base, Topic: "t"},
		&kmsg.FetchResponseTopicPartition{RecordBatches: b, HighWatermark: base + 100}, kgo.DefaultDecompressor(), nil)
	require.NoError(t, fp.Err)
	return fp.Records
}

func TestEncodeAndRewriteKeepRecords(t *testing.T) {
	want := testRecords()
	b := encodeBatch(want, nil)
	_, err := checkBatch(b)
	require.NoError(t, err)

	rb, rest, ok := nextBatch(append(b, 0, 0, 0)) // a partial batch follows
	require.True(t, ok)
	require.Len(t, rest, 3)
	require.Equal(t, int8(2), rb.magic)
	require.Equal(t, int32(3), rb.count)
	require.Equal(t, int32(2), rb.lastDelta)
	require.Equal(t, int64(1_700_000_000_009), rb.maxTS)
	require.True(t, rb.forwardable(0))
	require.False(t, rb.forwardable(1), "starts before the resume offset")
	_, _, ok = nextBatch(rest)
	require.False(t, ok)

	rewrite(b, 4242, 7, 1000)
	got, err := checkBatch(b)
	require.NoError(t, err)
	require.Equal(t, int64(4242), got.ProducerID)
	require.Equal(t, int16(7), got.ProducerEpoch)
	require.Equal(t, int32(1000), got.FirstSequence)
	require.Equal(t, int32(-1), got.PartitionLeaderEpoch)

	recs := decode(t, b, 500)
	require.Len(t, recs, len(want))
	for i, r := range recs {
		require.Equal(t, int64(500+i), r.Offset)
		require.Equal(t, want[i].Key, r.Key, "record %d", i)
		require.Equal(t, want[i].Value, r.Value, "record %d", i)
		require.Equal(t, want[i].Key == nil, r.Key == nil, "record %d key nil", i)
		require.Equal(t, want[i].Value == nil, r.Value == nil, "record %d value nil", i)
		require.Equal(t, want[i].Timestamp.UnixMilli(), r.Timestamp.UnixMilli(), "record %d", i)
		require.Equal(t, want[i].Headers, r.Headers, "record %d", i)
	}
}

func TestForwardableRefusesWhatMustChange(t *testing.T) {
	set := func(mut func(b []byte)) rawBatch {
		b := encodeBatch(testRecords(), nil)
		mut(b)
		rb, _, ok := nextBatch(b)
		require.True(t, ok)
		return rb
	}
	attrs := func(a uint16) func([]byte) {
		return func(b []byte) {
			binary.BigEndian.PutUint16(b[offAttributes:], a)
			rewrite(b, -1, -1, -1) // a valid CRC again
		}
	}
	require.True(t, set(func([]byte) {}).forwardable(0))
	for name, mut := range map[string]func([]byte){
		"transaction marker":   attrs(attrControl),
		"transactional":        attrs(attrTransactional),
		"log append time":      attrs(attrLogAppendTime),
		"corrupt":              func(b []byte) { b[len(b)-1] ^= 0xFF },
		"compacted hole":       func(b []byte) { binary.BigEndian.PutUint32(b[offLastDelta:], 5); rewrite(b, -1, -1, -1) },
		"older message format": func(b []byte) { b[offMagic] = 1 },
	} {
		require.False(t, set(mut).forwardable(0), name)
	}
}

// checkBatch decodes b as the target would and reports a wrong length or
// CRC.
func checkBatch(b []byte) (kmsg.RecordBatch, error) {
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(b); err != nil {
		return rb, err
	}
	if int(rb.Length) != len(b)-12 {
		return rb, fmt.Errorf("length %d, batch of %d bytes", rb.Length, len(b))
	}
	if uint32(rb.CRC) != crc32.Checksum(b[offAttributes:], crc32c) {
		return rb, errors.New("crc mismatch")
	}
	return rb, nil
}

// TestEncodeCompressed: a batch encoded with a compressor carries its
// codec in the attributes and decodes to the same records.
func TestEncodeCompressed(t *testing.T) {
	for name, c := range map[string]kgo.CompressionCodec{"gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()} {
		t.Run(name, func(t *testing.T) {
			comp, err := kgo.DefaultCompressor(c)
			require.NoError(t, err)
			want := testRecords()
			want[0].Value = []byte(strings.Repeat("compressible ", 100))
			b := encodeBatch(want, comp)
			got, err := checkBatch(b)
			require.NoError(t, err)
			require.NotZero(t, got.Attributes&attrCompression, "compressed")
			recs := decode(t, b, 7)
			require.Len(t, recs, len(want))
			for i, r := range recs {
				require.Equal(t, want[i].Key, r.Key, "record %d", i)
				require.Equal(t, want[i].Value, r.Value, "record %d", i)
				require.Equal(t, want[i].Timestamp.UnixMilli(), r.Timestamp.UnixMilli(), "record %d", i)
				require.Equal(t, want[i].Headers, r.Headers, "record %d", i)
				require.Equal(t, uint8(got.Attributes&attrCompression), r.Attrs.CompressionType())
			}
		})
	}
}

// TestRewriteCRC: the CRC rewrite derives from the batch's own equals
// CRC-32C computed over the rewritten batch, for batches from a header
// alone to beyond a megabyte, rewritten once and again (a retry, a new
// epoch), and a damaged batch keeps a CRC that does not match.
func TestRewriteCRC(t *testing.T) {
	for _, size := range []int{0, 1, 7, 100, 4096, 65537, 1 << 20, 3<<20 + 5} {
		b := make([]byte, batchHeaderLen+size)
		for i := range b {
			b[i] = byte(i*131 + size)
		}
		binary.BigEndian.PutUint32(b[offLength:], uint32(len(b)-12))
		setCRC(b)
		for _, w := range []struct {
			id    int64
			epoch int16
			seq   int32
		}{{7, 0, 0}, {7, 0, 0}, {1 << 40, 3, 1 << 30}, {-1, -1, -1}} {
			rewrite(b, w.id, w.epoch, w.seq)
			require.Equal(t, crc32.Checksum(b[offAttributes:], crc32c), binary.BigEndian.Uint32(b[offCRC:]), "%d bytes, %+v", size, w)
		}
		if size > 0 {
			b[len(b)-1] ^= 1 // damaged in transit
			rewrite(b, 8, 1, 5)
			require.NotEqual(t, crc32.Checksum(b[offAttributes:], crc32c), binary.BigEndian.Uint32(b[offCRC:]), "%d bytes", size)
		}
	}
}

// BenchmarkRewrite rewrites a 256 KiB batch: the header's fields and its
// CRC.
func BenchmarkRewrite(b *testing.B) {
	batch := make([]byte, 256<<10)
	binary.BigEndian.PutUint32(batch[offLength:], uint32(len(batch)-12))
	setCRC(batch)
	b.SetBytes(int64(len(batch)))
	for i := range b.N {
		rewrite(batch, 7, 1, int32(i))
	}
}

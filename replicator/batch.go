package replicator

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Raw record batches (Kafka's message format v2), as the batches copy mode
// forwards them: a fetched batch whose records need no change is sent to the
// target as it was fetched, compressed as it was, with only the fields its
// producer owns rewritten (base offset, leader epoch, producer id, epoch and
// sequence) and its CRC recomputed.
//
// Byte layout of a v2 batch header (DefaultRecordBatch in Kafka's sources):
//
//	 0 baseOffset int64     27 baseTimestamp int64
//	 8 batchLength int32    35 maxTimestamp int64
//	12 leaderEpoch int32    43 producerId int64
//	16 magic int8           51 producerEpoch int16
//	17 crc uint32           53 baseSequence int32
//	21 attributes int16     57 recordCount int32
//	23 lastOffsetDelta int32 61 records...
//
// The CRC (CRC-32C) covers everything from the attributes to the end.
const (
	offBaseOffset    = 0
	offLength        = 8
	offLeaderEpoch   = 12
	offMagic         = 16
	offCRC           = 17
	offAttributes    = 21
	offLastDelta     = 23
	offBaseTimestamp = 27
	offMaxTimestamp  = 35
	offProducerID    = 43
	offProducerEpoch = 51
	offBaseSequence  = 53
	offRecordCount   = 57
	batchHeaderLen   = 61

	// Attribute bits.
	attrCompression   = 0x07
	attrLogAppendTime = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// rawBatch is one fetched batch, undecoded.
type rawBatch struct {
	b         []byte // the whole batch, header included
	base      int64  // offset of its first record
	magic     int8
	attrs     int16
	lastDelta int32
	count     int32
	firstTS   int64
	maxTS     int64
}

// last is the offset of the batch's last record (or of the last record it
// held before compaction removed records).
func (rb rawBatch) last() int64 { return rb.base + int64(rb.lastDelta) }

// batchSize returns the size of the batch that starts in, as its header
// declares it (in may hold less: a fetch may end in a partial batch), or 0
// when in is too short to hold the length.
func batchSize(in []byte) int {
	if len(in) < offLength+4 {
		return 0
	}
	return 12 + int(int32(binary.BigEndian.Uint32(in[offLength:])))
}

// nextBatch splits the first batch off a fetched partition's record bytes.
// ok is false when in holds no whole batch (a fetch may end in a partial
// one). Batches of older message formats are returned with their magic and
// offsets only.
func nextBatch(in []byte) (rb rawBatch, rest []byte, ok bool) {
	if len(in) < offMagic+1 {
		return rawBatch{}, nil, false
	}
	size := batchSize(in)
	if size < offMagic+1 || size > len(in) {
		return rawBatch{}, nil, false
	}
	rb.b, rest = in[:size:size], in[size:]
	rb.base = int64(binary.BigEndian.Uint64(in[offBaseOffset:]))
	rb.magic = int8(in[offMagic])
	if rb.magic != 2 || size < batchHeaderLen {
		return rb, rest, true
	}
	rb.attrs = int16(binary.BigEndian.Uint16(in[offAttributes:]))
	rb.lastDelta = int32(binary.BigEndian.Uint32(in[offLastDelta:]))
	rb.firstTS = int64(binary.BigEndian.Uint64(in[offBaseTimestamp:]))
	rb.maxTS = int64(binary.BigEndian.Uint64(in[offMaxTimestamp:]))
	rb.count = int32(binary.BigEndian.Uint32(in[offRecordCount:]))
	return rb, rest, true
}

// forwardable reports whether the batch can be sent to the target as it is,
// when copying resumes at offset from: a v2 data batch (no transaction
// marker, not part of a transaction, whose abort the broker's list would
// have to be checked against), with create-time timestamps, wholly at or
// after from, whose records sit at consecutive offsets (compaction leaves
// holes, which the target would close up), and intact.
func (rb rawBatch) forwardable(from int64) bool {
	return rb.magic == 2 && len(rb.b) >= batchHeaderLen &&
		rb.attrs&(attrControl|attrTransactional|attrLogAppendTime) == 0 &&
		rb.base >= from && rb.count > 0 && rb.lastDelta == rb.count-1 &&
		binary.BigEndian.Uint32(rb.b[offCRC:]) == crc32.Checksum(rb.b[offAttributes:], crc32c)
}

// rewrite makes b (a whole v2 batch) a batch of the given idempotent
// producer at sequence seq: the fields the producing client owns are
// replaced and the CRC is updated. The records, their compression and
// timestamps are untouched. b's CRC must be right for b (forwardable checked
// it, encodeBatch set it): the new one is derived from it and the changed
// bytes alone (crcChange), not computed again over the records, so a batch
// damaged after its CRC was checked keeps a CRC that does not match, for
// the target to refuse.
func rewrite(b []byte, producerID int64, epoch int16, seq int32) {
	var diff [offRecordCount - offProducerID]byte
	copy(diff[:], b[offProducerID:offRecordCount])
	binary.BigEndian.PutUint64(b[offBaseOffset:], 0)
	binary.BigEndian.PutUint32(b[offLeaderEpoch:], 0xFFFFFFFF) // -1: the broker's to set
	binary.BigEndian.PutUint64(b[offProducerID:], uint64(producerID))
	binary.BigEndian.PutUint16(b[offProducerEpoch:], uint16(epoch))
	binary.BigEndian.PutUint32(b[offBaseSequence:], uint32(seq))
	for i := range diff {
		diff[i] ^= b[offProducerID+i]
	}
	crc := binary.BigEndian.Uint32(b[offCRC:]) ^ crcChange(diff[:], len(b)-offRecordCount)
	binary.BigEndian.PutUint32(b[offCRC:], crc)
}

// crcChange is what XORing diff into a message, followed by after more
// bytes, XORs into its CRC-32C. A CRC is linear over GF(2) for messages of
// one length: crc(m) ^ crc(m ^ d) is the CRC of d alone with a zero
// initial value and no final XOR, and the zeros before diff leave that at
// zero. The after zero bytes multiply it by x^(8*after) modulo the
// polynomial, which x2nModP computes in log2(after) steps.
func crcChange(diff []byte, after int) uint32 {
	raw := ^crc32.Update(^uint32(0), crc32c, diff) // zero initial value, no final XOR
	return multModP(x2nModP(uint64(after), 3), raw)
}

// castagnoliReversed is the CRC-32C polynomial in the bit order of
// hash/crc32 (lowest degree in the highest bit).
const castagnoliReversed = 0x82f63b78

// multModP multiplies a and b, polynomials over GF(2) in castagnoliReversed's
// bit order, modulo the polynomial.
func multModP(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		if b&1 != 0 {
			b = b>>1 ^ castagnoliReversed
		} else {
			b >>= 1
		}
	}
	return p
}

// x2nModP returns x^(n * 2^k) modulo the polynomial: the product of the
// x^(2^i) (squared from x, precomputed) for the bits i of n shifted by k.
func x2nModP(n uint64, k uint) uint32 {
	p := uint32(1) << 31 // x^0
	for ; n != 0; n, k = n>>1, k+1 {
		if n&1 != 0 {
			p = multModP(x2n[k], p)
		}
	}
	return p
}

// x2n[i] is x^(2^i) modulo the polynomial, for shifts up to 2^40 bits: a
// batch's length is an int32 of bytes.
var x2n = func() (t [40]uint32) {
	p := uint32(1) << 30 // x^1
	for i := range t {
		t[i] = p
		p = multModP(p, p)
	}
	return t
}()

// setCRC sets the CRC of the v2 batch b, which covers the attributes to
// the end.
func setCRC(b []byte) {
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], crc32c))
}

// encodeBatch builds a v2 batch of recs (already decoded; at least one) for
// the records the batches copy mode cannot forward as fetched, compressed
// with comp (nil: uncompressed). Producer fields are left for rewrite.
func encodeBatch(recs []*kgo.Record, comp kgo.Compressor) []byte {
	first, maxTS := recs[0].Timestamp.UnixMilli(), int64(-1)
	var body []byte
	for i, r := range recs {
		ts := r.Timestamp.UnixMilli()
		maxTS = max(maxTS, ts)
		kr := kmsg.Record{
			TimestampDelta64: ts - first,
			OffsetDelta:      int32(i),
			Key:              r.Key,
			Value:            r.Value,
		}
		for _, h := range r.Headers {
			kr.Headers = append(kr.Headers, kmsg.Header{Key: h.Key, Value: h.Value})
		}
		body = appendRecord(body, &kr)
	}
	rb := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1,
		Magic:                2,
		LastOffsetDelta:      int32(len(recs) - 1),
		FirstTimestamp:       first,
		MaxTimestamp:         maxTS,
		ProducerID:           -1,
		ProducerEpoch:        -1,
		FirstSequence:        -1,
		NumRecords:           int32(len(recs)),
		Records:              body,
	}
	if comp != nil {
		var buf bytes.Buffer
		if out, codec := comp.Compress(&buf, body); codec != kgo.CodecNone && out != nil {
			rb.Attributes, rb.Records = int16(codec)&attrCompression, out
		}
	}
	b := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(b[offLength:], uint32(len(b)-12))
	setCRC(b)
	return b
}

// appendRecord appends r in the v2 record encoding: its length as a varint,
// then the record. kmsg writes r.Length first; encoded as 0 it is one byte,
// dropped here for the real length.
func appendRecord(dst []byte, r *kmsg.Record) []byte {
	r.Length = 0
	body := r.AppendTo(nil)[1:]
	dst = binary.AppendVarint(dst, int64(len(body)))
	return append(dst, body...)
}

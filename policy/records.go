package policy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// ErrMalformed is wrapped by every decoding error of this package: the bytes are not a record of the
// expected kind (too short, a negative string length, invalid JSON, a missing field...). Callers
// that skip such records, as MM2 does, can test for it with errors.Is.
var ErrMalformed = errors.New("malformed record")

// ErrStringTooLong is wrapped by the encoding errors of OffsetSync, Checkpoint and Heartbeat when a
// string field is longer than the protocol's 32767 bytes.
var ErrStringTooLong = errors.New("string longer than 32767 bytes")

// maxStringLen is the largest length a Kafka protocol STRING can have (its INT16 length prefix).
const maxStringLen = 32767

// recordVersion is the INT16 version header of checkpoint and heartbeat values (MM2 writes 0).
const recordVersion = 0

// encoder appends Kafka protocol primitives (Schema/Struct layout): big-endian integers
// and INT16-length-prefixed UTF-8 strings, written back to back.
type encoder struct {
	buf []byte
	err error
}

func (e *encoder) int16(v int16) { e.buf = binary.BigEndian.AppendUint16(e.buf, uint16(v)) }
func (e *encoder) int32(v int32) { e.buf = binary.BigEndian.AppendUint32(e.buf, uint32(v)) }
func (e *encoder) int64(v int64) { e.buf = binary.BigEndian.AppendUint64(e.buf, uint64(v)) }

func (e *encoder) string(field, s string) {
	if len(s) > maxStringLen {
		if e.err == nil {
			e.err = fmt.Errorf("encode %s (%d bytes): %w", field, len(s), ErrStringTooLong)
		}
		return
	}
	e.int16(int16(len(s)))
	e.buf = append(e.buf, s...)
}

func (e *encoder) result() ([]byte, error) {
	if e.err != nil {
		return nil, e.err
	}
	return e.buf, nil
}

// decoder reads Kafka protocol primitives in order. Like Java's Schema.read it ignores bytes left
// over after the last field, so values with appended future fields still decode.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) need(field string, n int) bool {
	if d.err != nil {
		return false
	}
	if len(d.b)-d.off < n {
		d.err = fmt.Errorf("read %s: need %d bytes at offset %d, have %d: %w", field, n, d.off, len(d.b)-d.off, ErrMalformed)
		return false
	}
	return true
}

func (d *decoder) int16(field string) int16 {
	if !d.need(field, 2) {
		return 0
	}
	v := int16(binary.BigEndian.Uint16(d.b[d.off:]))
	d.off += 2
	return v
}

func (d *decoder) int32(field string) int32 {
	if !d.need(field, 4) {
		return 0
	}
	v := int32(binary.BigEndian.Uint32(d.b[d.off:]))
	d.off += 4
	return v
}

func (d *decoder) int64(field string) int64 {
	if !d.need(field, 8) {
		return 0
	}
	v := int64(binary.BigEndian.Uint64(d.b[d.off:]))
	d.off += 8
	return v
}

// string reads an INT16-length-prefixed string. The bytes are kept as they are; Java would replace
// invalid UTF-8 with U+FFFD, which cannot happen for strings Java wrote.
func (d *decoder) string(field string) string {
	n := d.int16(field + " length")
	if d.err != nil {
		return ""
	}
	if n < 0 {
		d.err = fmt.Errorf("read %s: negative string length %d: %w", field, n, ErrMalformed)
		return ""
	}
	if !d.need(field, int(n)) {
		return ""
	}
	s := string(d.b[d.off : d.off+int(n)])
	d.off += int(n)
	return s
}

// topicPartitionString is Kafka's TopicPartition.toString: "<topic>-<partition>".
func topicPartitionString(topic string, partition int32) string {
	return topic + "-" + strconv.FormatInt(int64(partition), 10)
}

// OffsetSync is a record of the offset-syncs topic, mm2-offset-syncs.<other alias>.internal:
// upstream offset UpstreamOffset of source partition Topic/Partition was written to the
// target at DownstreamOffset. Topic is the source (upstream) topic name.
type OffsetSync struct {
	Topic            string
	Partition        int32
	UpstreamOffset   int64
	DownstreamOffset int64
}

// Key returns the record key: topic STRING, partition INT32. It fails, wrapping ErrStringTooLong,
// only when Topic is longer than 32767 bytes.
func (s OffsetSync) Key() ([]byte, error) {
	e := encoder{buf: make([]byte, 0, 2+len(s.Topic)+4)}
	e.string("offset-sync topic", s.Topic)
	e.int32(s.Partition)
	return e.result()
}

// Value returns the record value: upstreamOffset INT64, offset INT64, with no version header.
func (s OffsetSync) Value() []byte {
	e := encoder{buf: make([]byte, 0, 16)}
	e.int64(s.UpstreamOffset)
	e.int64(s.DownstreamOffset)
	return e.buf
}

// String is the form of MM2's OffsetSyncFormatter:
// "OffsetSync{topicPartition=t-0, upstreamOffset=5, downstreamOffset=7}".
func (s OffsetSync) String() string {
	return fmt.Sprintf("OffsetSync{topicPartition=%s, upstreamOffset=%d, downstreamOffset=%d}",
		topicPartitionString(s.Topic, s.Partition), s.UpstreamOffset, s.DownstreamOffset)
}

// DecodeOffsetSync parses an offset-sync record. Bytes after the last field are ignored. Errors wrap
// ErrMalformed.
func DecodeOffsetSync(key, value []byte) (OffsetSync, error) {
	var s OffsetSync
	k := decoder{b: key}
	s.Topic = k.string("topic")
	s.Partition = k.int32("partition")
	if k.err != nil {
		return OffsetSync{}, fmt.Errorf("decode offset-sync key: %w", k.err)
	}
	v := decoder{b: value}
	s.UpstreamOffset = v.int64("upstreamOffset")
	s.DownstreamOffset = v.int64("offset")
	if v.err != nil {
		return OffsetSync{}, fmt.Errorf("decode offset-sync value: %w", v.err)
	}
	return s, nil
}

// Checkpoint is a record of the checkpoints topic, <source alias>.checkpoints.internal on the
// target: consumer group Group, which committed UpstreamOffset on the source, may resume at
// DownstreamOffset of Topic/Partition on the target. Topic is the downstream (renamed) topic;
// Metadata is the group's commit metadata, "" when it has none.
type Checkpoint struct {
	Group            string
	Topic            string
	Partition        int32
	UpstreamOffset   int64
	DownstreamOffset int64
	Metadata         string
}

// Key returns the record key: group STRING, topic STRING, partition INT32. It fails, wrapping
// ErrStringTooLong, only when Group or Topic is longer than 32767 bytes.
func (c Checkpoint) Key() ([]byte, error) {
	e := encoder{buf: make([]byte, 0, 2+len(c.Group)+2+len(c.Topic)+4)}
	e.string("checkpoint group", c.Group)
	e.string("checkpoint topic", c.Topic)
	e.int32(c.Partition)
	return e.result()
}

// Value returns the record value: version INT16 (0), upstreamOffset INT64, offset INT64,
// metadata STRING. It fails, wrapping ErrStringTooLong, only when Metadata is longer than 32767
// bytes.
func (c Checkpoint) Value() ([]byte, error) {
	e := encoder{buf: make([]byte, 0, 2+8+8+2+len(c.Metadata))}
	e.int16(recordVersion)
	e.int64(c.UpstreamOffset)
	e.int64(c.DownstreamOffset)
	e.string("checkpoint metadata", c.Metadata)
	return e.result()
}

// String is the form of MM2's CheckpointFormatter: "Checkpoint{consumerGroupId=g,
// topicPartition=t-0, upstreamOffset=5, downstreamOffset=7, metadata=}".
func (c Checkpoint) String() string {
	return fmt.Sprintf("Checkpoint{consumerGroupId=%s, topicPartition=%s, upstreamOffset=%d, downstreamOffset=%d, metadata=%s}",
		c.Group, topicPartitionString(c.Topic, c.Partition), c.UpstreamOffset, c.DownstreamOffset, c.Metadata)
}

// DecodeCheckpoint parses a checkpoint record. Like Java it reads the version header and then
// always applies the version 0 layout; bytes after the last field are ignored. Errors wrap
// ErrMalformed.
func DecodeCheckpoint(key, value []byte) (Checkpoint, error) {
	var c Checkpoint
	k := decoder{b: key}
	c.Group = k.string("group")
	c.Topic = k.string("topic")
	c.Partition = k.int32("partition")
	if k.err != nil {
		return Checkpoint{}, fmt.Errorf("decode checkpoint key: %w", k.err)
	}
	v := decoder{b: value}
	v.int16("version")
	c.UpstreamOffset = v.int64("upstreamOffset")
	c.DownstreamOffset = v.int64("offset")
	c.Metadata = v.string("metadata")
	if v.err != nil {
		return Checkpoint{}, fmt.Errorf("decode checkpoint value: %w", v.err)
	}
	return c, nil
}

// Heartbeat is a record of the heartbeats topic on a flow's target: the flow
// SourceAlias->TargetAlias was alive at Timestamp, in milliseconds since the Unix epoch. MM2 also
// uses Timestamp as the record's timestamp.
type Heartbeat struct {
	SourceAlias string
	TargetAlias string
	Timestamp   int64
}

// Key returns the record key: sourceClusterAlias STRING, targetClusterAlias STRING. It fails,
// wrapping ErrStringTooLong, only when an alias is longer than 32767 bytes.
func (h Heartbeat) Key() ([]byte, error) {
	e := encoder{buf: make([]byte, 0, 2+len(h.SourceAlias)+2+len(h.TargetAlias))}
	e.string("heartbeat source alias", h.SourceAlias)
	e.string("heartbeat target alias", h.TargetAlias)
	return e.result()
}

// Value returns the record value: version INT16 (0), timestamp INT64.
func (h Heartbeat) Value() []byte {
	e := encoder{buf: make([]byte, 0, 10)}
	e.int16(recordVersion)
	e.int64(h.Timestamp)
	return e.buf
}

// String is the form of MM2's HeartbeatFormatter:
// "Heartbeat{sourceClusterAlias=A, targetClusterAlias=B, timestamp=1700000000000}".
func (h Heartbeat) String() string {
	return fmt.Sprintf("Heartbeat{sourceClusterAlias=%s, targetClusterAlias=%s, timestamp=%d}",
		h.SourceAlias, h.TargetAlias, h.Timestamp)
}

// DecodeHeartbeat parses a heartbeat record. Like Java it reads the version header and then always
// applies the version 0 layout; bytes after the last field are ignored. Errors wrap ErrMalformed.
func DecodeHeartbeat(key, value []byte) (Heartbeat, error) {
	var h Heartbeat
	k := decoder{b: key}
	h.SourceAlias = k.string("sourceClusterAlias")
	h.TargetAlias = k.string("targetClusterAlias")
	if k.err != nil {
		return Heartbeat{}, fmt.Errorf("decode heartbeat key: %w", k.err)
	}
	v := decoder{b: value}
	v.int16("version")
	h.Timestamp = v.int64("timestamp")
	if v.err != nil {
		return Heartbeat{}, fmt.Errorf("decode heartbeat value: %w", v.err)
	}
	return h, nil
}

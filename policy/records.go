package policy

import (
	"fmt"
	"strconv"

	"github.com/mm2go/mm2go/internal/kbin"
)

// ErrMalformed is wrapped by every decoding error of this package: the bytes are not a record of the
// expected kind (too short, a negative string length, invalid JSON, a missing field...). Callers
// that skip such records, as MM2 does, can test for it with errors.Is.
var ErrMalformed = kbin.ErrMalformed

// ErrStringTooLong is wrapped by the encoding errors of OffsetSync, Checkpoint and Heartbeat when a
// string field is longer than the protocol's 32767 bytes.
var ErrStringTooLong = kbin.ErrStringTooLong

// recordVersion is the INT16 version header of checkpoint and heartbeat values (MM2 writes 0).
const recordVersion = 0

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
	e := kbin.Encoder{Buf: make([]byte, 0, 2+len(s.Topic)+4)}
	e.String("offset-sync topic", s.Topic)
	e.Int32(s.Partition)
	return e.Result()
}

// Value returns the record value: upstreamOffset INT64, offset INT64, with no version header.
func (s OffsetSync) Value() []byte {
	e := kbin.Encoder{Buf: make([]byte, 0, 16)}
	e.Int64(s.UpstreamOffset)
	e.Int64(s.DownstreamOffset)
	return e.Buf
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
	k := kbin.Decoder{B: key}
	s.Topic = k.String("topic")
	s.Partition = k.Int32("partition")
	if k.Err != nil {
		return OffsetSync{}, fmt.Errorf("decode offset-sync key: %w", k.Err)
	}
	v := kbin.Decoder{B: value}
	s.UpstreamOffset = v.Int64("upstreamOffset")
	s.DownstreamOffset = v.Int64("offset")
	if v.Err != nil {
		return OffsetSync{}, fmt.Errorf("decode offset-sync value: %w", v.Err)
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
	e := kbin.Encoder{Buf: make([]byte, 0, 2+len(c.Group)+2+len(c.Topic)+4)}
	e.String("checkpoint group", c.Group)
	e.String("checkpoint topic", c.Topic)
	e.Int32(c.Partition)
	return e.Result()
}

// Value returns the record value: version INT16 (0), upstreamOffset INT64, offset INT64,
// metadata STRING. It fails, wrapping ErrStringTooLong, only when Metadata is longer than 32767
// bytes.
func (c Checkpoint) Value() ([]byte, error) {
	e := kbin.Encoder{Buf: make([]byte, 0, 2+8+8+2+len(c.Metadata))}
	e.Int16(recordVersion)
	e.Int64(c.UpstreamOffset)
	e.Int64(c.DownstreamOffset)
	e.String("checkpoint metadata", c.Metadata)
	return e.Result()
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
	k := kbin.Decoder{B: key}
	c.Group = k.String("group")
	c.Topic = k.String("topic")
	c.Partition = k.Int32("partition")
	if k.Err != nil {
		return Checkpoint{}, fmt.Errorf("decode checkpoint key: %w", k.Err)
	}
	v := kbin.Decoder{B: value}
	v.Int16("version")
	c.UpstreamOffset = v.Int64("upstreamOffset")
	c.DownstreamOffset = v.Int64("offset")
	c.Metadata = v.String("metadata")
	if v.Err != nil {
		return Checkpoint{}, fmt.Errorf("decode checkpoint value: %w", v.Err)
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
	e := kbin.Encoder{Buf: make([]byte, 0, 2+len(h.SourceAlias)+2+len(h.TargetAlias))}
	e.String("heartbeat source alias", h.SourceAlias)
	e.String("heartbeat target alias", h.TargetAlias)
	return e.Result()
}

// Value returns the record value: version INT16 (0), timestamp INT64.
func (h Heartbeat) Value() []byte {
	e := kbin.Encoder{Buf: make([]byte, 0, 10)}
	e.Int16(recordVersion)
	e.Int64(h.Timestamp)
	return e.Buf
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
	k := kbin.Decoder{B: key}
	h.SourceAlias = k.String("sourceClusterAlias")
	h.TargetAlias = k.String("targetClusterAlias")
	if k.Err != nil {
		return Heartbeat{}, fmt.Errorf("decode heartbeat key: %w", k.Err)
	}
	v := kbin.Decoder{B: value}
	v.Int16("version")
	h.Timestamp = v.Int64("timestamp")
	if v.Err != nil {
		return Heartbeat{}, fmt.Errorf("decode heartbeat value: %w", v.Err)
	}
	return h, nil
}

// Package offsetmap is mm2go's offset map: its record format, the fold of
// its records into per-partition state, and the reading of its topic. The
// replicator writes it, the checkpoint worker and the offsets commands read
// it; exact failover rests on it.
//
// The offset map is the exact correspondence between upstream and
// downstream offsets of every replicated partition, kept in a compacted
// topic on the target (Topic). MM2's offset-syncs are sparse and
// compacted down to one record per partition, so they cannot translate a
// group offset exactly once the group is behind the newest sync; the map
// can, as long as its segments are kept.
//
// A segment is a run of replicated records whose upstream and downstream
// offsets both advance by one per record: upstream offsets From..Last were
// written at downstream offsets Down..Down+(Last-From). A new segment starts
// wherever either sequence jumps: a compacted or transactional gap upstream,
// a transaction marker or a foreign write downstream, a restart. Segments are
// keyed by their first upstream offset, so rewriting a segment as it grows
// replaces the older record under compaction.
//
// A position records where copying of a partition stands: the next upstream
// offset to copy and the downstream offset it will get. It lets an empty or
// fully-gapped partition translate, and it is rewritten at every progress
// flush.
//
// Byte layout (Kafka protocol primitives, as MM2's own records):
//
//	segment key:    kind INT8 (0) | topic STRING | partition INT32 | from INT64
//	segment value:  version INT16 (0) | down INT64 | last INT64
//	position key:   kind INT8 (1) | topic STRING | partition INT32
//	position value: version INT16 (0) | next INT64 | downNext INT64
//	imported key:   kind INT8 (2) | topic STRING | partition INT32 | upstream INT64
//	imported value: version INT16 (0) | downstream INT64
//
// An imported record is an offset sync of the replicator that copied the
// partition before mm2go took the flow over (Apache MM2): it lets offsets
// from before the takeover translate, approximately, as MM2 would.
//
// A record with a nil value is a tombstone that deletes the key.
package offsetmap

import (
	"fmt"
	"strconv"

	"github.com/mm2go/mm2go/internal/kbin"
)

// Topic is the name of mm2go's offset map topic on the target for a
// flow from sourceAlias: "mm2go-offset-map.<source>.internal". The suffix
// makes it internal to every replication policy and excluded by MM2's default
// topics.exclude.
func Topic(sourceAlias string) string {
	return "mm2go-offset-map." + sourceAlias + ".internal"
}

const (
	kindSegment  int8 = 0
	kindPosition int8 = 1
	kindImported int8 = 2
)

// Segment is one run of contiguously replicated records of a partition.
type Segment struct {
	Topic     string // upstream topic
	Partition int32
	From      int64 // first upstream offset
	Last      int64 // last upstream offset, >= From
	Down      int64 // downstream offset of From
}

// LastDown is the downstream offset of the segment's last record.
func (s Segment) LastDown() int64 { return s.Down + (s.Last - s.From) }

// Key encodes the segment's key; it does not depend on Last or Down.
func (s Segment) Key() ([]byte, error) { return key(kindSegment, s.Topic, s.Partition, s.From) }

// Value encodes the segment's value.
func (s Segment) Value() []byte { return value(s.Down, s.Last) }

func (s Segment) String() string {
	return fmt.Sprintf("Segment{topicPartition=%s, upstream=%d..%d, downstream=%d..%d}",
		topicPartitionString(s.Topic, s.Partition), s.From, s.Last, s.Down, s.LastDown())
}

// Position is where copying of a partition stands.
type Position struct {
	Topic     string
	Partition int32
	Next      int64 // next upstream offset to copy
	DownNext  int64 // downstream offset the next copied record will get, as far as mm2go knows
}

// Key encodes the position's key.
func (p Position) Key() ([]byte, error) { return key(kindPosition, p.Topic, p.Partition) }

// Value encodes the position's value.
func (p Position) Value() []byte { return value(p.Next, p.DownNext) }

func (p Position) String() string {
	return fmt.Sprintf("Position{topicPartition=%s, next=%d, downstreamNext=%d}",
		topicPartitionString(p.Topic, p.Partition), p.Next, p.DownNext)
}

// Imported is an offset sync of the replicator mm2go took a flow over
// from: Upstream was written at Downstream.
type Imported struct {
	Topic      string
	Partition  int32
	Upstream   int64
	Downstream int64
}

// Key encodes the imported sync's key.
func (s Imported) Key() ([]byte, error) { return key(kindImported, s.Topic, s.Partition, s.Upstream) }

// Value encodes the imported sync's value.
func (s Imported) Value() []byte { return value(s.Downstream) }

// Record is one decoded record of the offset map: exactly one of
// Segment, Position and Imported is set. Deleted reports a tombstone; then
// only the key fields (Topic, Partition and, for segments and imported
// syncs, the upstream offset) are meaningful.
type Record struct {
	Segment  *Segment
	Position *Position
	Imported *Imported
	Deleted  bool
}

// Decode decodes a record of the offset map topic. Errors wrap
// kbin.ErrMalformed.
func Decode(key, value []byte) (Record, error) {
	if len(key) == 0 {
		return Record{}, fmt.Errorf("offset map key: empty: %w", kbin.ErrMalformed)
	}
	d := kbin.Decoder{B: key}
	kind := d.Int8("kind")
	topic := d.String("topic")
	partition := d.Int32("partition")
	var name string
	var out Record
	var fields []*int64 // value fields, in order
	switch kind {
	case kindSegment:
		s := &Segment{Topic: topic, Partition: partition, From: d.Int64("from")}
		name, out.Segment, fields = "segment", s, []*int64{&s.Down, &s.Last}
	case kindPosition:
		p := &Position{Topic: topic, Partition: partition}
		name, out.Position, fields = "position", p, []*int64{&p.Next, &p.DownNext}
	case kindImported:
		im := &Imported{Topic: topic, Partition: partition, Upstream: d.Int64("upstream")}
		name, out.Imported, fields = "imported", im, []*int64{&im.Downstream}
	default:
		if d.Err != nil {
			return Record{}, fmt.Errorf("offset map key: %w", d.Err)
		}
		return Record{}, fmt.Errorf("offset map key: unknown kind %d: %w", kind, kbin.ErrMalformed)
	}
	if d.Err != nil {
		return Record{}, fmt.Errorf("offset map %s key: %w", name, d.Err)
	}
	if value == nil {
		out.Deleted = true
		return out, nil
	}
	v := kbin.Decoder{B: value}
	v.Int16("version")
	for i, f := range fields {
		*f = v.Int64("field " + strconv.Itoa(i))
	}
	if v.Err != nil {
		return Record{}, fmt.Errorf("offset map %s value: %w", name, v.Err)
	}
	if s := out.Segment; s != nil && (s.From < 0 || s.Last < s.From || s.Down < 0) {
		return Record{}, fmt.Errorf("offset map segment %s: inconsistent offsets: %w", s, kbin.ErrMalformed)
	}
	return out, nil
}

// key encodes a key: kind, topic, partition and the upstream offsets that
// identify the record.
func key(kind int8, topic string, partition int32, offsets ...int64) ([]byte, error) {
	e := kbin.Encoder{Buf: make([]byte, 0, 1+2+len(topic)+4+8*len(offsets))}
	e.Int8(kind)
	e.String("topic", topic)
	e.Int32(partition)
	for _, o := range offsets {
		e.Int64(o)
	}
	return e.Result()
}

// value encodes a value: the version, then fields.
func value(fields ...int64) []byte {
	e := kbin.Encoder{Buf: make([]byte, 0, 2+8*len(fields))}
	e.Int16(version)
	for _, f := range fields {
		e.Int64(f)
	}
	return e.Buf
}

// version is the INT16 version header of every value.
const version = 0

// topicPartitionString is Kafka's TopicPartition.toString: "<topic>-<partition>".
func topicPartitionString(topic string, partition int32) string {
	return topic + "-" + strconv.FormatInt(int64(partition), 10)
}

package policy

import (
	"fmt"
)

// mm2go's offset map: the exact correspondence between upstream and
// downstream offsets of every replicated partition, kept in a compacted
// topic on the target (OffsetMapTopic). MM2's offset-syncs are sparse and
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

// OffsetMapTopic is the name of mm2go's offset map topic on the target for a
// flow from sourceAlias: "mm2go-offset-map.<source>.internal". The suffix
// makes it internal to every replication policy and excluded by MM2's default
// topics.exclude.
func OffsetMapTopic(sourceAlias string) string {
	return "mm2go-offset-map." + sourceAlias + ".internal"
}

const (
	offsetMapSegment  int8 = 0
	offsetMapPosition int8 = 1
	offsetMapImported int8 = 2
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
func (s Segment) Key() ([]byte, error) {
	e := encoder{buf: make([]byte, 0, 1+2+len(s.Topic)+4+8)}
	e.buf = append(e.buf, byte(offsetMapSegment))
	e.string("topic", s.Topic)
	e.int32(s.Partition)
	e.int64(s.From)
	return e.result()
}

// Value encodes the segment's value.
func (s Segment) Value() []byte {
	e := encoder{buf: make([]byte, 0, 18)}
	e.int16(recordVersion)
	e.int64(s.Down)
	e.int64(s.Last)
	return e.buf
}

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
func (p Position) Key() ([]byte, error) {
	e := encoder{buf: make([]byte, 0, 1+2+len(p.Topic)+4)}
	e.buf = append(e.buf, byte(offsetMapPosition))
	e.string("topic", p.Topic)
	e.int32(p.Partition)
	return e.result()
}

// Value encodes the position's value.
func (p Position) Value() []byte {
	e := encoder{buf: make([]byte, 0, 18)}
	e.int16(recordVersion)
	e.int64(p.Next)
	e.int64(p.DownNext)
	return e.buf
}

func (p Position) String() string {
	return fmt.Sprintf("Position{topicPartition=%s, next=%d, downstreamNext=%d}",
		topicPartitionString(p.Topic, p.Partition), p.Next, p.DownNext)
}

// ImportedSync is an offset sync of the replicator mm2go took a flow over
// from: Upstream was written at Downstream.
type ImportedSync struct {
	Topic      string
	Partition  int32
	Upstream   int64
	Downstream int64
}

// Key encodes the imported sync's key.
func (s ImportedSync) Key() ([]byte, error) {
	e := encoder{buf: make([]byte, 0, 1+2+len(s.Topic)+4+8)}
	e.buf = append(e.buf, byte(offsetMapImported))
	e.string("topic", s.Topic)
	e.int32(s.Partition)
	e.int64(s.Upstream)
	return e.result()
}

// Value encodes the imported sync's value.
func (s ImportedSync) Value() []byte {
	e := encoder{buf: make([]byte, 0, 10)}
	e.int16(recordVersion)
	e.int64(s.Downstream)
	return e.buf
}

// OffsetMapRecord is one decoded record of the offset map: exactly one of
// Segment, Position and Imported is set. Deleted reports a tombstone; then
// only the key fields (Topic, Partition and, for segments and imported
// syncs, the upstream offset) are meaningful.
type OffsetMapRecord struct {
	Segment  *Segment
	Position *Position
	Imported *ImportedSync
	Deleted  bool
}

// DecodeOffsetMap decodes a record of the offset map topic. Errors wrap
// ErrMalformed.
func DecodeOffsetMap(key, value []byte) (OffsetMapRecord, error) {
	if len(key) == 0 {
		return OffsetMapRecord{}, fmt.Errorf("offset map key: empty: %w", ErrMalformed)
	}
	kind := int8(key[0])
	d := decoder{b: key, off: 1}
	topic := d.string("topic")
	partition := d.int32("partition")
	var out OffsetMapRecord
	switch kind {
	case offsetMapSegment:
		from := d.int64("from")
		if d.err != nil {
			return out, fmt.Errorf("offset map segment key: %w", d.err)
		}
		s := &Segment{Topic: topic, Partition: partition, From: from}
		out.Segment = s
		if value == nil {
			out.Deleted = true
			return out, nil
		}
		v := decoder{b: value}
		v.int16("version")
		s.Down = v.int64("down")
		s.Last = v.int64("last")
		if v.err != nil {
			return OffsetMapRecord{}, fmt.Errorf("offset map segment value: %w", v.err)
		}
		if s.From < 0 || s.Last < s.From || s.Down < 0 {
			return OffsetMapRecord{}, fmt.Errorf("offset map segment %s: inconsistent offsets: %w", s, ErrMalformed)
		}
	case offsetMapPosition:
		if d.err != nil {
			return out, fmt.Errorf("offset map position key: %w", d.err)
		}
		p := &Position{Topic: topic, Partition: partition}
		out.Position = p
		if value == nil {
			out.Deleted = true
			return out, nil
		}
		v := decoder{b: value}
		v.int16("version")
		p.Next = v.int64("next")
		p.DownNext = v.int64("downNext")
		if v.err != nil {
			return OffsetMapRecord{}, fmt.Errorf("offset map position value: %w", v.err)
		}
	case offsetMapImported:
		up := d.int64("upstream")
		if d.err != nil {
			return out, fmt.Errorf("offset map imported key: %w", d.err)
		}
		im := &ImportedSync{Topic: topic, Partition: partition, Upstream: up}
		out.Imported = im
		if value == nil {
			out.Deleted = true
			return out, nil
		}
		v := decoder{b: value}
		v.int16("version")
		im.Downstream = v.int64("downstream")
		if v.err != nil {
			return OffsetMapRecord{}, fmt.Errorf("offset map imported value: %w", v.err)
		}
	default:
		return out, fmt.Errorf("offset map key: unknown kind %d: %w", kind, ErrMalformed)
	}
	return out, nil
}

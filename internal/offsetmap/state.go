package offsetmap

import (
	"context"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/internal/itopic"
)

// TopicIDHeader is the record header on positions that holds the 16-byte
// ID of the source topic incarnation the position belongs to (a topic
// deleted and created again gets a new ID). Readers that decode only keys
// and values ignore it.
const TopicIDHeader = "mm2go.source.topic.id"

// TP names a source partition.
type TP struct {
	Topic     string
	Partition int32
}

// Partition is what the offset map holds for one source partition.
type Partition struct {
	Segments []Segment // sorted by From
	Position *Position
	TopicID  kadm.TopicID // incarnation of Position (TopicIDHeader); zero if unknown
	Imported []Imported   // sorted by Upstream
}

// Newest returns the segment with the highest From, where copying stopped,
// or nil.
func (p *Partition) Newest() *Segment {
	if p == nil || len(p.Segments) == 0 {
		return nil
	}
	return &p.Segments[len(p.Segments)-1]
}

// State is the offset map folded into per-partition state: what a reader
// that keeps everything knows after reading the topic up to some offset.
// A record replaces what its key held before; a tombstone deletes it.
type State map[TP]*Partition

// Apply folds one record of the offset map topic into st. A record that
// does not decode is returned as an error (wrapping kbin.ErrMalformed) and
// changes nothing.
func (st State) Apply(r *kgo.Record) error {
	m, err := Decode(r.Key, r.Value)
	if err != nil {
		return err
	}
	k := m.tp()
	p := st[k]
	if p == nil {
		if m.Deleted {
			return nil
		}
		p = &Partition{}
		st[k] = p
	}
	switch {
	case m.Segment != nil:
		p.Segments = put(p.Segments, *m.Segment, m.Deleted, func(s Segment) int64 { return s.From })
	case m.Imported != nil:
		p.Imported = put(p.Imported, *m.Imported, m.Deleted, func(s Imported) int64 { return s.Upstream })
	case m.Deleted:
		p.Position, p.TopicID = nil, kadm.TopicID{}
	default:
		pos := *m.Position
		p.Position, p.TopicID = &pos, TopicIDOf(r.Headers)
	}
	if len(p.Segments) == 0 && p.Position == nil && len(p.Imported) == 0 {
		delete(st, k)
	}
	return nil
}

// put replaces or inserts v in s, sorted by key, or deletes the element
// with v's key.
func put[T any](s []T, v T, del bool, key func(T) int64) []T {
	kv := key(v)
	i := sort.Search(len(s), func(i int) bool { return key(s[i]) >= kv })
	found := i < len(s) && key(s[i]) == kv
	switch {
	case del && found:
		return append(s[:i], s[i+1:]...)
	case del:
		return s
	case found:
		s[i] = v
		return s
	}
	var zero T
	s = append(s, zero)
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}

// tp returns the partition a decoded record is about.
func (m Record) tp() TP {
	switch {
	case m.Segment != nil:
		return TP{m.Segment.Topic, m.Segment.Partition}
	case m.Position != nil:
		return TP{m.Position.Topic, m.Position.Partition}
	default:
		return TP{m.Imported.Topic, m.Imported.Partition}
	}
}

// Load reads the offset map topic from its start to its current end (see
// itopic.ReadAll for what cl must be) and folds it. A missing topic loads
// as empty. Records that do not decode are skipped and counted in bad.
func Load(ctx context.Context, cl *kgo.Client, topic string) (st State, bad int, err error) {
	st = make(State)
	err = itopic.ReadAll(ctx, cl, topic, func(r *kgo.Record) {
		if st.Apply(r) != nil {
			bad++
		}
	})
	if err != nil {
		return nil, bad, fmt.Errorf("read offset map %s: %w", topic, err)
	}
	return st, bad, nil
}

// TopicIDOf reads the topic ID header of a position record; the zero ID
// when there is none.
func TopicIDOf(hs []kgo.RecordHeader) kadm.TopicID {
	var id kadm.TopicID
	for _, h := range hs {
		if h.Key == TopicIDHeader && len(h.Value) == len(id) {
			copy(id[:], h.Value)
		}
	}
	return id
}

// SegmentRecord is the record that writes s to topic.
func SegmentRecord(topic string, s Segment) (*kgo.Record, error) {
	key, err := s.Key()
	if err != nil {
		return nil, err
	}
	return &kgo.Record{Topic: topic, Key: key, Value: s.Value()}, nil
}

// SegmentTombstone is the record that deletes s from topic.
func SegmentTombstone(topic string, s Segment) (*kgo.Record, error) {
	key, err := s.Key()
	if err != nil {
		return nil, err
	}
	return &kgo.Record{Topic: topic, Key: key}, nil
}

// PositionRecord is the record that writes p to topic, with the source
// topic's incarnation id in TopicIDHeader unless id is zero.
func PositionRecord(topic string, p Position, id kadm.TopicID) (*kgo.Record, error) {
	key, err := p.Key()
	if err != nil {
		return nil, err
	}
	r := &kgo.Record{Topic: topic, Key: key, Value: p.Value()}
	if id != (kadm.TopicID{}) {
		r.Headers = []kgo.RecordHeader{{Key: TopicIDHeader, Value: append([]byte(nil), id[:]...)}}
	}
	return r, nil
}

// ImportedRecord is the record that writes s to topic.
func ImportedRecord(topic string, s Imported) (*kgo.Record, error) {
	key, err := s.Key()
	if err != nil {
		return nil, err
	}
	return &kgo.Record{Topic: topic, Key: key, Value: s.Value()}, nil
}

// Tombstones are the records that delete everything p holds from topic.
func (p *Partition) Tombstones(topic string) []*kgo.Record {
	var out []*kgo.Record
	add := func(key []byte, err error) {
		if err == nil {
			out = append(out, &kgo.Record{Topic: topic, Key: key})
		}
	}
	for _, s := range p.Segments {
		add(s.Key())
	}
	for _, s := range p.Imported {
		add(s.Key())
	}
	if p.Position != nil {
		add(p.Position.Key())
	}
	return out
}

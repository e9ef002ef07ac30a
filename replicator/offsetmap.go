package replicator

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/internal/loop"
	"github.com/mm2go/mm2go/internal/offsetmap"
)

// tp names a source partition.
type tp struct {
	topic     string
	partition int32
}

// mapState is what the offset map says of one partition: its newest
// segment (where copying stopped) and its position.
type mapState struct {
	last *offsetmap.Segment
	pos  *offsetmap.Position
	id   kadm.TopicID // source topic incarnation of pos (topicIDHeader); zero if unknown
}

// loadMap reads the offset map topic and returns, per partition, the newest
// segment and the position. Undecodable records are skipped and counted.
func (r *Replicator) loadMap(ctx context.Context) (map[tp]mapState, error) {
	st, bad, err := offsetmap.Load(ctx, r.o.TargetReader, r.mapTopic)
	if err != nil {
		return nil, err
	}
	if bad > 0 {
		r.m.error(r.flow, reasonOffsetMap)
		r.log.Warn("skipped undecodable offset map records", zap.String("topic", r.mapTopic), zap.Int("records", bad))
	}
	out := make(map[tp]mapState, len(st))
	for k, p := range st {
		out[tp{k.Topic, k.Partition}] = mapState{last: p.Newest(), pos: p.Position, id: p.TopicID}
	}
	return out, nil
}

// pruneLoop deletes, every interval, the offset map's segments that lie
// entirely below their source partition's log start: no committed offset
// there can be read on the source any more. The newest segment of each
// partition is always kept.
func (r *Replicator) pruneLoop(ctx context.Context, every time.Duration) error {
	loop.Every(ctx, every, func(ctx context.Context) {
		if n, err := r.prune(ctx); err != nil && ctx.Err() == nil {
			r.m.error(r.flow, reasonOffsetMap)
			r.log.Warn("prune offset map; retried at the next interval", zap.Error(err))
		} else if n > 0 {
			r.log.Info("offset map pruned", zap.String("topic", r.mapTopic), zap.Int("segments", n))
		}
	})
	return ctx.Err()
}

func (r *Replicator) prune(ctx context.Context) (int, error) {
	r.readers.Lock()
	st, _, err := offsetmap.Load(ctx, r.o.TargetReader, r.mapTopic)
	r.readers.Unlock()
	if err != nil {
		return 0, err
	}
	var topics []string
	seen := make(map[string]bool)
	for k, p := range st {
		if len(p.Segments) > 1 && r.owns(k.Topic, k.Partition) && !seen[k.Topic] {
			seen[k.Topic] = true
			topics = append(topics, k.Topic)
		}
	}
	if len(topics) == 0 {
		return 0, nil
	}
	starts, err := r.o.SourceAdmin.ListStartOffsets(ctx, topics...)
	if err != nil {
		return 0, fmt.Errorf("list source start offsets: %w", err)
	}
	var tombs []*kgo.Record
	for k, p := range st {
		o, ok := starts.Lookup(k.Topic, k.Partition)
		if !ok || o.Err != nil || !r.owns(k.Topic, k.Partition) {
			continue // another task prunes its own
		}
		for _, s := range p.Segments[:len(p.Segments)-1] { // the newest is kept
			if s.Last >= o.Offset {
				continue
			}
			if t, err := offsetmap.SegmentTombstone(r.mapTopic, s); err == nil {
				tombs = append(tombs, t)
			}
		}
	}
	if len(tombs) == 0 {
		return 0, nil
	}
	if err := r.o.Target.ProduceSync(ctx, tombs...).FirstErr(); err != nil {
		return 0, fmt.Errorf("write offset map tombstones: %w", err)
	}
	return len(tombs), nil
}

// mapRecords encodes what a flush writes to the offset map.
func (r *Replicator) mapRecords(pd pending, recs []*kgo.Record) []*kgo.Record {
	add := func(rec *kgo.Record, err error) {
		if err == nil { // a topic name cannot exceed the length limit
			recs = append(recs, rec)
		}
	}
	for _, s := range pd.imported {
		add(offsetmap.ImportedRecord(r.mapTopic, s))
	}
	for _, s := range pd.segs {
		add(offsetmap.SegmentRecord(r.mapTopic, s))
	}
	if pd.pos != nil {
		id, _ := r.inc.id(pd.p.topic)
		add(offsetmap.PositionRecord(r.mapTopic, *pd.pos, id))
	}
	return recs
}

// syncRecords encodes MM2's offset syncs of a flush.
func (r *Replicator) syncRecords(pd pending, recs []*kgo.Record) []*kgo.Record {
	for _, s := range pd.syncs {
		key, err := s.Key()
		if err != nil {
			continue
		}
		recs = append(recs, &kgo.Record{Topic: r.syncTopic, Partition: 0, Key: key, Value: s.Value()})
	}
	return recs
}

// listOffsets lists start or end offsets and returns them per partition;
// partitions with errors are left out.
func listed(l kadm.ListedOffsets) map[tp]int64 {
	out := make(map[tp]int64)
	l.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			out[tp{o.Topic, o.Partition}] = o.Offset
		}
	})
	return out
}

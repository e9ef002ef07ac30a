package replicator

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/internal/itopic"
	"github.com/mm2go/mm2go/policy"
)

// tp names a source partition.
type tp struct {
	topic     string
	partition int32
}

// mapState is what the offset map says of one partition: its newest
// segment (where copying stopped) and its position.
type mapState struct {
	last *policy.Segment
	pos  *policy.Position
	id   kadm.TopicID // source topic incarnation of pos (topicIDHeader); zero if unknown
}

// loadMap reads the offset map topic and returns, per partition, the newest
// segment and the position. Undecodable records are skipped and counted.
func (r *Replicator) loadMap(ctx context.Context) (map[tp]mapState, error) {
	out := make(map[tp]mapState)
	var bad int
	err := itopic.ReadAll(ctx, r.o.TargetReader, r.mapTopic, func(rec *kgo.Record) {
		m, err := policy.DecodeOffsetMap(rec.Key, rec.Value)
		if err != nil {
			bad++
			return
		}
		switch {
		case m.Segment != nil:
			k := tp{m.Segment.Topic, m.Segment.Partition}
			st := out[k]
			switch {
			case m.Deleted:
				if st.last != nil && st.last.From == m.Segment.From {
					st.last = nil // pruning never deletes the newest; keep going
				}
			case st.last == nil || m.Segment.From >= st.last.From:
				s := *m.Segment
				st.last = &s
			}
			out[k] = st
		case m.Position != nil:
			k := tp{m.Position.Topic, m.Position.Partition}
			st := out[k]
			if m.Deleted {
				st.pos, st.id = nil, kadm.TopicID{}
			} else {
				p := *m.Position
				st.pos, st.id = &p, topicIDOf(rec.Headers)
			}
			out[k] = st
		}
	})
	if err != nil {
		return nil, fmt.Errorf("read offset map %s: %w", r.mapTopic, err)
	}
	if bad > 0 {
		r.m.error(r.flow, reasonOffsetMap)
		r.log.Warn("skipped undecodable offset map records", zap.String("topic", r.mapTopic), zap.Int("records", bad))
	}
	return out, nil
}

// pruneLoop deletes, every interval, the offset map's segments that lie
// entirely below their source partition's log start: no committed offset
// there can be read on the source any more. The newest segment of each
// partition is always kept.
func (r *Replicator) pruneLoop(ctx context.Context, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if n, err := r.prune(ctx); err != nil && ctx.Err() == nil {
			r.m.error(r.flow, reasonOffsetMap)
			r.log.Warn("prune offset map; retried at the next interval", zap.Error(err))
		} else if n > 0 {
			r.log.Info("offset map pruned", zap.String("topic", r.mapTopic), zap.Int("segments", n))
		}
	}
}

func (r *Replicator) prune(ctx context.Context) (int, error) {
	segs := make(map[tp][]policy.Segment)
	r.readers.Lock()
	err := itopic.ReadAll(ctx, r.o.TargetReader, r.mapTopic, func(rec *kgo.Record) {
		m, err := policy.DecodeOffsetMap(rec.Key, rec.Value)
		if err != nil || m.Segment == nil || !r.owns(m.Segment.Topic, m.Segment.Partition) {
			return // another task prunes its own
		}
		k := tp{m.Segment.Topic, m.Segment.Partition}
		if m.Deleted {
			for i, s := range segs[k] {
				if s.From == m.Segment.From {
					segs[k] = append(segs[k][:i], segs[k][i+1:]...)
					break
				}
			}
			return
		}
		for i, s := range segs[k] {
			if s.From == m.Segment.From {
				segs[k][i] = *m.Segment
				return
			}
		}
		segs[k] = append(segs[k], *m.Segment)
	})
	r.readers.Unlock()
	if err != nil {
		return 0, err
	}
	var topics []string
	seen := make(map[string]bool)
	for k := range segs {
		if !seen[k.topic] {
			seen[k.topic] = true
			topics = append(topics, k.topic)
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
	for k, ss := range segs {
		o, ok := starts.Lookup(k.topic, k.partition)
		if !ok || o.Err != nil {
			continue
		}
		var newest int64 = -1
		for _, s := range ss {
			newest = max(newest, s.From)
		}
		for _, s := range ss {
			if s.From == newest || s.Last >= o.Offset {
				continue
			}
			key, err := s.Key()
			if err != nil {
				continue
			}
			tombs = append(tombs, &kgo.Record{Topic: r.mapTopic, Partition: 0, Key: key})
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
	for _, s := range pd.imported {
		if key, err := s.Key(); err == nil {
			recs = append(recs, &kgo.Record{Topic: r.mapTopic, Partition: 0, Key: key, Value: s.Value()})
		}
	}
	for _, s := range pd.segs {
		key, err := s.Key()
		if err != nil {
			continue // a topic name cannot exceed the length limit
		}
		recs = append(recs, &kgo.Record{Topic: r.mapTopic, Partition: 0, Key: key, Value: s.Value()})
	}
	if pd.pos != nil {
		if key, err := pd.pos.Key(); err == nil {
			recs = append(recs, &kgo.Record{Topic: r.mapTopic, Partition: 0, Key: key, Value: pd.pos.Value(), Headers: r.inc.header(pd.p.topic)})
		}
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

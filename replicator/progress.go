package replicator

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/internal/itopic"
	"github.com/mm2go/mm2go/policy"
)

// sourceConnector is the Connect connector name under which MM2's dedicated
// mode stores source offsets; mm2go uses the same name so that either tool
// can resume where the other stopped.
const sourceConnector = "MirrorSourceConnector"

// progress stores, per source partition, the last upstream offset the target
// acknowledged. It lives where MM2's dedicated mode keeps it: the Connect
// offsets topic (mm2-offsets.<source>.internal) on the target, one compacted
// record per partition, keyed and partitioned exactly as Java Connect does.
type progress struct {
	topic      string
	partitions int32
	source     string // source cluster alias
	cl         *kgo.Client
}

// load reads the offsets topic and returns the stored offset per source topic
// and partition. Records of other connectors or other source clusters are
// skipped; a record that does not decode is logged and skipped, as Connect
// does.
func (pg *progress) load(ctx context.Context, reader *kgo.Client, log *zap.Logger) (map[string]map[int32]int64, error) {
	stored := make(map[string]map[int32]int64)
	var bad int
	err := itopic.ReadAll(ctx, reader, pg.topic, func(r *kgo.Record) {
		co, err := policy.DecodeConnectOffset(r.Key, r.Value)
		if err != nil {
			bad++
			if bad <= 5 {
				log.Warn("skip undecodable connect offset", zap.String("topic", pg.topic), zap.Int32("partition", r.Partition), zap.Int64("offset", r.Offset), zap.Error(err))
			}
			return
		}
		if co.Source == nil || co.Connector != sourceConnector || co.Source.Cluster != pg.source {
			return
		}
		ps := stored[co.Source.Topic]
		if ps == nil {
			ps = make(map[int32]int64)
			stored[co.Source.Topic] = ps
		}
		if co.Deleted {
			delete(ps, co.Source.Partition)
			return
		}
		ps[co.Source.Partition] = co.Offset
	})
	if err != nil {
		return nil, fmt.Errorf("read progress from %s: %w", pg.topic, err)
	}
	return stored, nil
}

// record encodes the progress of p: offset is the last copied upstream
// offset.
func (pg *progress) record(p *partition, offset int64) *kgo.Record {
	key := policy.SourceOffsetKey{Cluster: pg.source, Topic: p.topic, Partition: p.partition}.Encode()
	return &kgo.Record{
		Topic:     pg.topic,
		Partition: policy.ConnectOffsetPartition(key, pg.partitions),
		Key:       key,
		Value:     policy.EncodeConnectOffset(offset),
	}
}

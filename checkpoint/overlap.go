package checkpoint

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/internal/itopic"
	"github.com/mm2go/mm2go/policy"
)

// ReasonForeignRecords fails a failover check when other producers' records
// lie on the target between replicated records, below the translation and
// above where the group is: no offset then avoids both a loss and a
// re-delivery (see ModeOverlap). It happens when producers are switched to
// the target before replication of the source's tail finished, under the
// identity policy.
const ReasonForeignRecords FailureReason = "foreign_records"

// noLoss lowers a translated offset to the first record of another
// producer between the group's current target offset (its start, without
// one) and the translation, so that none is skipped. moved reports that it
// did; the replicated records from there to the translation are then
// delivered again.
func noLoss(idx *Index, tp TopicPartition, translated, current int64) (offset int64, moved bool) {
	if idx == nil {
		return translated, false
	}
	if f, ok := idx.ForeignRun(tp, max(current, 0), translated); ok {
		return f, true
	}
	return translated, false
}

// ClassifyGaps reads, on the target, the downstream offsets between
// replicated records that the index has not read yet, and marks the gaps
// that hold only control records: a writer that fences older ones
// (mm2go.copy.fencing = epoch) puts an abort marker into each remote
// partition when it starts, and no consumer reads it as a record. Gaps with
// other records stay foreign (see ForeignRun). remote names the remote
// topic of a source topic; reader is a client built with itopic.ReaderOpts
// that nothing else uses meanwhile. A gap that could not be read stays
// foreign and is read again a minute later; the error names the first.
func (x *Index) ClassifyGaps(ctx context.Context, reader *kgo.Client, remote func(topic string) string) error {
	var firstErr error
	for tp, gaps := range x.unreadGaps(time.Now()) {
		rt := remote(tp.Topic)
		for _, g := range gaps {
			only := true
			rctx, cancel := context.WithTimeout(ctx, gapReadTimeout)
			err := itopic.ReadRanges(rctx, reader, map[string]map[int32]itopic.Range{rt: {tp.Partition: {From: g[0], To: g[1]}}},
				func(r *kgo.Record) bool {
					only = r.Attrs.IsControl()
					return only
				})
			cancel()
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("read %s[%d] offsets %d to %d: %w", rt, tp.Partition, g[0], g[1]-1, err)
			}
			x.classified(tp, g, only, err != nil, time.Now())
			if ctx.Err() != nil {
				return firstErr
			}
		}
	}
	return firstErr
}

// gapReadTimeout bounds the reading of one gap: the offsets may be gone
// (retention), and the sync waits meanwhile.
const gapReadTimeout = 5 * time.Second

// upstreamOf returns the source topic whose remote topic is remote under
// flow source->target's policy: remote itself under the identity policy,
// remote without "<source><sep>" under the default policy.
func upstreamOf(p policy.Policy, source, remote string) (string, bool) {
	if p.FormatRemoteTopic(source, remote) == remote {
		return remote, true
	}
	if up, ok := p.UpstreamTopic(remote); ok && p.FormatRemoteTopic(source, up) == remote {
		return up, true
	}
	return "", false
}

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
//
// The gaps are read in rounds, the next unread gap of every partition in
// one read: a flow restarted n times has up to n gaps per partition, and
// one read per gap kept a restarted checkpointer's sync waiting for
// partitions times restarts round trips.
func (x *Index) ClassifyGaps(ctx context.Context, reader *kgo.Client, remote func(topic string) string) error {
	unread := x.unreadGaps(time.Now())
	var firstErr error
	for round := 0; ; round++ {
		type key struct {
			topic     string
			partition int32
		}
		type gapOf struct {
			tp  TopicPartition
			gap [2]int64
		}
		ranges := make(map[string]map[int32]itopic.Range)
		gaps := make(map[key]gapOf)
		for tp, gs := range unread {
			if round >= len(gs) {
				continue
			}
			g, rt := gs[round], remote(tp.Topic)
			if ranges[rt] == nil {
				ranges[rt] = make(map[int32]itopic.Range)
			}
			ranges[rt][tp.Partition] = itopic.Range{From: g[0], To: g[1]}
			gaps[key{rt, tp.Partition}] = gapOf{tp, g}
		}
		if len(gaps) == 0 {
			return firstErr
		}
		foreign := make(map[key]bool)
		done := make(map[key]bool)
		rctx, cancel := context.WithTimeout(ctx, gapReadTimeout)
		err := itopic.ReadRanges(rctx, reader, ranges, func(r *kgo.Record) bool {
			k := key{r.Topic, r.Partition}
			if !r.Attrs.IsControl() {
				foreign[k] = true
			}
			if foreign[k] || r.Offset+1 >= gaps[k].gap[1] {
				done[k] = true
			}
			return !foreign[k]
		})
		cancel()
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("read gaps between replicated records (%d partitions): %w", len(gaps), err)
		}
		now := time.Now()
		for k, g := range gaps {
			x.classified(g.tp, g.gap, !foreign[k], !done[k], now)
		}
		if ctx.Err() != nil {
			return firstErr
		}
	}
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

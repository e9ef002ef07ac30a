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
// partition when it starts, an exactly-once flow a commit marker after each
// of its transactions, and no consumer reads them as records. Gaps with
// other records stay foreign (see ForeignRun). remote names the remote
// topic of a source topic; reader is a client built with itopic.ReaderOpts
// that nothing else uses meanwhile. A gap that could not be read stays
// foreign and is read again a minute later; the error names the first.
//
// The gaps are read in rounds, in every partition the next run of gaps
// within gapSpan offsets of each other in one read (the replicated records
// between them are skipped): a flow restarted n times has up to n gaps per
// partition, an exactly-once flow one per transaction, and one read per
// gap kept a restarted checkpointer's sync waiting for partitions times
// gaps round trips.
func (x *Index) ClassifyGaps(ctx context.Context, reader *kgo.Client, remote func(topic string) string) error {
	unread := x.unreadGaps(time.Now())
	var firstErr error
	for {
		type key struct {
			topic     string
			partition int32
		}
		ranges := make(map[string]map[int32]itopic.Range)
		runs := make(map[key]*gapRun)
		for tp, gs := range unread {
			if len(gs) == 0 {
				continue
			}
			n := 1
			for n < len(gs) && gs[n][1]-gs[0][0] <= gapSpan {
				n++
			}
			r := &gapRun{tp: tp, gaps: gs[:n], foreign: make([]bool, n), done: make([]bool, n)}
			unread[tp] = gs[n:]
			rt := remote(tp.Topic)
			if ranges[rt] == nil {
				ranges[rt] = make(map[int32]itopic.Range)
			}
			ranges[rt][tp.Partition] = itopic.Range{From: r.gaps[0][0], To: r.gaps[n-1][1]}
			runs[key{rt, tp.Partition}] = r
		}
		if len(runs) == 0 {
			return firstErr
		}
		rctx, cancel := context.WithTimeout(ctx, gapReadTimeout)
		err := itopic.ReadRanges(rctx, reader, ranges, func(r *kgo.Record) bool {
			return runs[key{r.Topic, r.Partition}].read(r)
		})
		cancel()
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("read gaps between replicated records (%d partitions): %w", len(runs), err)
		}
		now := time.Now()
		for _, r := range runs {
			for i, g := range r.gaps {
				x.classified(r.tp, g, !r.foreign[i], !r.done[i], now)
			}
		}
		if ctx.Err() != nil {
			return firstErr
		}
	}
}

// gapSpan is the most offsets one read of a partition's gaps spans.
const gapSpan = 10_000

// gapRun is a partition's run of gaps read at once, in offset order.
type gapRun struct {
	tp      TopicPartition
	gaps    [][2]int64
	next    int // the first gap not read to its end
	foreign []bool
	done    []bool
}

// read classifies the gaps r reaches and reports whether one is left.
func (g *gapRun) read(r *kgo.Record) bool {
	for g.next < len(g.gaps) && r.Offset >= g.gaps[g.next][1] {
		g.done[g.next] = true // read past its end
		g.next++
	}
	if g.next == len(g.gaps) {
		return false
	}
	if gap := g.gaps[g.next]; r.Offset >= gap[0] {
		if !r.Attrs.IsControl() {
			g.foreign[g.next] = true
		}
		if g.foreign[g.next] || r.Offset+1 >= gap[1] {
			g.done[g.next] = true
			g.next++
		}
	}
	return g.next < len(g.gaps)
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

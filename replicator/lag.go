package replicator

import (
	"cmp"
	"context"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/internal/loop"
)

// lagLoop refreshes the lag gauges every LagInterval, apart from the copy
// and the flush: a target that does not answer stalls those, and the lag
// must keep growing meanwhile.
func (r *Replicator) lagLoop(ctx context.Context) error {
	loop.Every(ctx, r.o.LagInterval, func(ctx context.Context) { r.updateLag(ctx, r.o.SourceAdmin) })
	return ctx.Err()
}

// Watch keeps the task's lag gauges moving after Run returned because the
// task was taken from this instance: lost with the flow's group session
// (its target does not answer, say) or revoked. Until ctx ends it lists the
// source's end offsets with adm every LagInterval against the positions
// the target acknowledged last; then, with forget, it deletes the gauges
// (the task runs elsewhere now; without forget, it runs here again and its
// new run sets them).
func (r *Replicator) Watch(ctx context.Context, adm *kadm.Client, forget func() bool) {
	r.updateLag(ctx, adm)
	loop.Every(ctx, r.o.LagInterval, func(ctx context.Context) { r.updateLag(ctx, adm) })
	if forget() {
		r.forgetGauges()
	}
}

// updateLag lists the source end offsets of the assigned topics with adm,
// allowing LagInterval for the answer, and sets the lag gauges. When the
// source does not answer, the gauges are computed from the ends listed last
// (the age of the oldest uncopied record still grows).
func (r *Replicator) updateLag(ctx context.Context, adm *kadm.Client) {
	topics := r.copiedTopicNames()
	if len(topics) == 0 {
		return
	}
	var ends kadm.ListedOffsets
	var err error
	lctx, cancel := context.WithTimeout(ctx, r.o.LagInterval)
	if r.o.Flow.SourceIsolationLevel == config.ReadCommitted {
		ends, err = adm.ListCommittedOffsets(lctx, topics...)
	} else {
		ends, err = adm.ListEndOffsets(lctx, topics...)
	}
	cancel()
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		r.log.Debug("list source end offsets", zap.Error(err))
	}
	r.mu.Lock()
	for t, ps := range r.parts {
		for i, p := range ps {
			if o, ok := ends.Lookup(t, i); err == nil && ok && o.Err == nil {
				p.end.Store(o.Offset)
			}
		}
	}
	r.mu.Unlock()
	r.setLag()
}

// setLag sets the lag gauges from the end offsets listed last (by
// updateLag, or by plan for a partition just started) and reports progress.
func (r *Replicator) setLag() {
	sums := map[string]int64{}
	secs := map[string]float64{}
	now := time.Now().UnixMilli()
	r.mu.Lock()
	topics := len(r.parts)
	for t, ps := range r.parts {
		for i, p := range ps {
			lag := max(p.lag(), 0)
			sums[t] += lag
			p.mm2.SetLag(lag)
			if r.o.PartitionMetrics {
				r.m.setPartitionLag(r.flow, t, i, lag)
			}
			// The oldest uncopied record follows the last acknowledged
			// one; its age is at least that one's.
			if ts := p.ackedTS.Load(); lag > 0 && ts > 0 {
				secs[t] = max(secs[t], float64(now-ts)/1000)
			} else {
				secs[t] = max(secs[t], 0)
			}
		}
	}
	r.mu.Unlock()
	for t, l := range sums {
		r.m.setLag(r.flow, t, r.task, l)
		r.m.setLagSeconds(r.flow, t, r.task, secs[t])
	}
	r.m.setTopics(r.flow, r.task, topics)
	var backlog int64
	for _, l := range sums {
		backlog += l
	}
	r.reportProgress(backlog)
}

// reportProgress logs, every ProgressInterval while a backlog remains, how
// much was copied, at what rate, and when the backlog should be done.
func (r *Replicator) reportProgress(backlog int64) {
	now, copied := time.Now(), r.copied.Load()
	if r.reportAt.IsZero() {
		r.reportAt, r.reportCopied = now, copied
		return
	}
	elapsed := now.Sub(r.reportAt)
	if elapsed < r.o.ProgressInterval || backlog == 0 && copied == r.reportCopied {
		return
	}
	rate := float64(copied-r.reportCopied) / elapsed.Seconds()
	fields := []zap.Field{zap.Int64("copied_records", copied), zap.Float64("records_per_second", math.Round(rate)), zap.Int64("backlog_records", backlog)}
	switch {
	case backlog == 0:
		r.log.Info("caught up", fields...)
	case rate > 0:
		eta := time.Duration(float64(backlog) / rate * float64(time.Second)).Round(time.Second)
		r.log.Info("catching up", append(fields, zap.Duration("eta", eta))...)
	default:
		r.log.Warn("backlog is not shrinking", fields...)
	}
	r.reportAt, r.reportCopied = now, copied
}

// Stats is a point-in-time summary of a flow for progress displays.
type Stats struct {
	Topics, Partitions, Stalled int
	// Lag is the number of source offsets not yet acknowledged, summed over
	// partitions whose end is known.
	Lag int64
}

// PartitionError is the last write of a source partition the target
// refused.
type PartitionError struct {
	Topic       string
	Partition   int32
	RemoteTopic string
	Offset      int64 // the upstream offset of the record refused
	Reason      string
	Err         string
	At          time.Time
	// Stalled says the partition is still paused and retried; false once
	// it copies again.
	Stalled bool
}

// PartitionErrors returns the last refusal of every partition the target
// refused a write of since the replicator started, by topic and partition.
func (r *Replicator) PartitionErrors() []PartitionError {
	var out []PartitionError
	r.eachPartition(func(p *partition) {
		if e := p.lastErr.Load(); e != nil {
			pe := *e
			pe.Stalled = p.failed.Load()
			out = append(out, pe)
		}
	})
	slices.SortFunc(out, func(a, b PartitionError) int {
		return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out
}

// Stats returns a summary of the flow's partitions.
func (r *Replicator) Stats() Stats {
	var s Stats
	r.mu.Lock()
	s.Topics = len(r.parts)
	r.mu.Unlock()
	r.eachPartition(func(p *partition) {
		s.Partitions++
		if p.failed.Load() {
			s.Stalled++
		}
		if l := p.lag(); l > 0 {
			s.Lag += l
		}
	})
	return s
}

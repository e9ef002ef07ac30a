package replicator

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/internal/loop"
)

// flushLoop stores progress every offset.flush.interval.ms until ctx ends.
// It writes with produceCtx, which outlives ctx by the drain: a write cut
// off by ctx would fail the offset syncs of the final flush too when it
// was the sync producer's first (franz-go initializes the producer id with
// the context of the records that asked for it, and a failed
// initialization fails every record waiting for it).
func (r *Replicator) flushLoop(ctx, produceCtx context.Context) error {
	interval := r.o.Flow.OffsetFlushInterval
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var lastFlush time.Time
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		case <-r.caughtUp:
			// Early, but not more often than every caughtUpFlushGap.
			if !loop.Sleep(ctx, caughtUpFlushGap-time.Since(lastFlush)) {
				return ctx.Err()
			}
		}
		lastFlush = time.Now()
		if err := r.flush(produceCtx); err != nil && ctx.Err() == nil {
			r.m.error(r.flow, reasonProgressWrite)
			r.log.Warn("store progress; retried at the next interval", zap.Error(err))
		}
	}
}

// flush writes what moved since the last flush: progress (MM2's Connect
// offsets) and mm2go's offset map in one request to the target, then MM2's
// offset syncs. What fails to be written is kept for the next flush.
func (r *Replicator) flush(ctx context.Context) error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	pds := r.takePending()
	if len(pds) == 0 {
		return nil
	}
	recs, segs := r.stateRecords(pds)
	if len(recs) > 0 {
		start := time.Now()
		if err := produceSync(ctx, r.o.Target, recs...); err != nil {
			for _, pd := range pds {
				pd.p.give(pd)
			}
			return fmt.Errorf("write progress and offset map to %s: %w", r.o.Flow.Target, err)
		}
		r.stateStored(pds, time.Since(start))
	}
	return r.writeSyncs(ctx, pds, segs)
}

// takePending takes from every partition what it has to write.
func (r *Replicator) takePending() []pending {
	var pds []pending
	r.eachPartition(func(p *partition) {
		if pd := p.take(); !pd.empty() {
			pds = append(pds, pd)
		}
	})
	return pds
}

// stateRecords returns the progress and offset map records of pds and the
// number of segments among them.
func (r *Replicator) stateRecords(pds []pending) (recs []*kgo.Record, segs int) {
	for _, pd := range pds {
		if pd.progress >= 0 {
			recs = append(recs, r.pg.record(pd.p, pd.progress))
		}
		recs = r.mapRecords(pd, recs)
		segs += len(pd.segs)
	}
	return recs, segs
}

// stateStored notes that the state records of pds are stored, which took
// took.
func (r *Replicator) stateStored(pds []pending, took time.Duration) {
	for _, pd := range pds {
		if pd.progress >= 0 {
			pd.p.flushed.Store(pd.progress)
		}
		if pd.pos != nil {
			pd.p.posWritten = *pd.pos
		}
	}
	r.m.flushed(r.flow)
	r.mm2.Committed(took)
}

// writeSyncs writes MM2's offset syncs of pds, once their state is stored.
func (r *Replicator) writeSyncs(ctx context.Context, pds []pending, segs int) error {
	var syncs []*kgo.Record
	for _, pd := range pds {
		syncs = r.syncRecords(pd, syncs)
	}
	if len(syncs) > 0 {
		if err := produceSync(ctx, r.syncCl, syncs...); err != nil {
			for _, pd := range pds {
				pd.p.give(pending{syncs: pd.syncs})
			}
			r.m.error(r.flow, reasonOffsetSyncs)
			return fmt.Errorf("write offset syncs to %s: %w", r.syncTopic, err)
		}
	}
	r.m.flushWrote(r.flow, len(syncs), segs)
	return nil
}

// produceSync is ProduceSync that returns when ctx ends even while
// franz-go still holds the records: it fails a buffered record only at its
// next try, which a broker answering with retriable errors puts off, and a
// stop must keep to its drain deadline. Records given up on may still be
// written, before those of a later call for the same partitions.
func produceSync(ctx context.Context, cl *kgo.Client, recs ...*kgo.Record) error {
	done := make(chan error, 1)
	go func() { done <- cl.ProduceSync(ctx, recs...).FirstErr() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

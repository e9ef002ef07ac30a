package replicator

// Exactly-once copying (<target>.exactly.once.source.support = enabled).
//
// The copy loop of an exactly-once flow writes, in one transaction on the
// target per step: the copied records, the flow's progress
// (mm2-offsets.<source>.internal) and its offset map records. A
// read_committed consumer of the target sees a step's records only with
// their progress, so a restart, which reads progress and the offset map with
// read_committed, resumes exactly after the last committed record: nothing is
// copied twice and nothing needs matching against the target's tail. MM2's
// offset syncs (usually on the source cluster) are written after the commit,
// so they name committed records only.
//
// A step ends at each poll (transaction.boundary = poll, Connect's default)
// or every transaction.boundary.interval.ms. A record the target refuses
// aborts the step: every partition the step copied goes back to its state
// before it (partition.rollback) and is read again; the refused record's
// partition pauses with backoff, as in the record mode. A commit whose
// outcome is unknown, or a producer fenced by a newer one, ends the run:
// the next start reads what the target committed.
//
// The transactional id is the flow task's own (policy.TransactionalID), the
// one the batches mode fences with: a new instance of a task, or a process
// started twice, bumps its epoch at start, which aborts the old one's open
// transaction and refuses its later writes.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/internal/fence"
)

// txn is the open transaction of the exactly-once copy loop.
type txn struct {
	open    bool
	begun   time.Time
	records int
	// marks holds the state of every partition the transaction copied
	// from, as it was before.
	marks map[*partition]txnMark
}

// fenceOlder bumps the epoch of the flow task's transactional id before
// the target's state is read: an open transaction of an earlier writer (a
// crashed or paused process) is aborted, so that read_committed reads of
// the remote partitions and the progress are not held up by it, and that
// writer cannot commit any more.
func (r *Replicator) fenceOlder(ctx context.Context) error {
	timeout, _ := r.o.Transactional.OptValue(kgo.TransactionTimeout).(time.Duration)
	if _, err := fence.Acquire(ctx, r.o.Target, r.txnID, timeout, nil); err != nil {
		return fmt.Errorf("fence older writers of %s: %w", r.flow, err)
	}
	r.log.Info("copying exactly once: records, progress and offset map are committed in one transaction per step",
		zap.String("transactional_id", r.txnID), zap.String("transaction_boundary", string(r.o.Flow.TransactionBoundary)))
	return nil
}

// txnLoop fetches from the source and copies in transactions. What it
// fetched before ctx ended is committed with produceCtx.
func (r *Replicator) txnLoop(ctx, produceCtx context.Context) error {
	f, tx := r.o.Flow, r.o.Transactional
	poll := r.pollTimeout()
	t := &txn{marks: make(map[*partition]txnMark)}
	markFirst := func(p *partition) {
		if _, ok := t.marks[p]; !ok {
			t.marks[p] = p.mark()
		}
	}
	for {
		r.retryStalled()
		wait := poll
		if t.open && f.TransactionBoundary == config.BoundaryInterval {
			wait = max(min(poll, time.Until(t.begun.Add(f.TransactionBoundaryInterval))), time.Millisecond)
		}
		fs := r.poll(ctx, wait)
		stopping := ctx.Err() != nil
		if !t.open {
			if err := tx.BeginTransaction(); err != nil {
				return fmt.Errorf("begin a transaction of %s: %w", r.flow, err)
			}
			t.open, t.begun = true, time.Now()
		}
		fetched, n := r.handOver(produceCtx, fs, tx, markFirst)
		t.records += n
		if stopping || f.TransactionBoundary != config.BoundaryInterval || time.Since(t.begun) >= f.TransactionBoundaryInterval {
			if err := r.endTxn(produceCtx, t); err != nil {
				return err
			}
			if stopping {
				return ctx.Err()
			}
		}
		r.throttled(ctx, fetched)
	}
}

// endTxn commits t with the state it moved, or aborts it when the target
// refused a record or the state; it returns an error only when the run
// cannot go on.
func (r *Replicator) endTxn(ctx context.Context, t *txn) error {
	tx := r.o.Transactional
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	defer func() {
		t.open, t.records = false, 0
		clear(t.marks)
	}()
	ending := time.Now()
	if err := tx.Flush(ctx); err != nil {
		return r.abortTxn(ctx, t, nil, fmt.Errorf("write the records of a transaction of %s: %w", r.flow, err))
	}
	flushed := time.Now()
	if r.txnFenced.Load() {
		return r.fencedErr()
	}
	for p := range t.marks {
		if p.failed.Load() { // logged and counted by fail
			return r.abortTxn(ctx, t, nil, nil)
		}
	}
	pds := r.takePending()
	recs, segs := r.stateRecords(pds)
	if len(recs) > 0 {
		if err := produceSync(ctx, tx, recs...); err != nil {
			if fence.Fenced(err) {
				return r.fencedErr()
			}
			r.m.error(r.flow, reasonProgressWrite)
			r.log.Warn("write progress and offset map in the transaction; aborted and copied again", zap.Error(err))
			return r.abortTxn(ctx, t, pds, ctx.Err())
		}
	}
	stored := time.Now()
	if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
		// Committed or not, fenced or not: the next start reads what the
		// target holds.
		return fmt.Errorf("commit a transaction of %s: %w", r.flow, err)
	}
	if len(recs) > 0 {
		took := time.Since(t.begun)
		r.stateStored(pds, took)
		r.m.txnEnded(r.flow, txnCommitted, took, t.records)
		if ce := r.log.Check(zap.DebugLevel, "transaction committed"); ce != nil {
			ce.Write(zap.Int("records", t.records), zap.Int("partitions", len(t.marks)), zap.Int("state_records", len(recs)),
				zap.Duration("copying", ending.Sub(t.begun)), zap.Duration("flush", flushed.Sub(ending)),
				zap.Duration("state", stored.Sub(flushed)), zap.Duration("commit", time.Since(stored)))
		}
	}
	if err := r.writeSyncs(ctx, pds, segs); err != nil && ctx.Err() == nil {
		r.log.Warn("write offset syncs; retried with the next transaction", zap.Error(err))
	}
	return nil
}

// fencedErr is the end of a run whose transactional producer a newer one
// fenced. It does not abort: the newer producer's initialization aborted
// the open transaction, and aborting would initialize this producer again,
// which (where the coordinator allows it) would fence the newer one back.
func (r *Replicator) fencedErr() error {
	return fmt.Errorf("another writer of %s took over with a newer epoch of transactional id %s: %w", r.flow, r.txnID, kerr.ProducerFenced)
}

// abortTxn aborts t and rolls back the partitions it copied from, which are
// read again from where the last commit left them; pds are the states taken
// for the transaction, given back to the partitions it did not copy from.
// It returns cause, or why the abort failed.
func (r *Replicator) abortTxn(ctx context.Context, t *txn, pds []pending, cause error) error {
	tx := r.o.Transactional
	if err := tx.AbortBufferedRecords(ctx); err != nil {
		return errors.Join(cause, fmt.Errorf("abort a transaction of %s: %w", r.flow, err))
	}
	if err := tx.EndTransaction(ctx, kgo.TryAbort); err != nil {
		return errors.Join(cause, fmt.Errorf("abort a transaction of %s: %w", r.flow, err))
	}
	r.m.txnEnded(r.flow, txnAborted, 0, 0)
	for _, pd := range pds {
		if _, ok := t.marks[pd.p]; !ok {
			pd.p.give(pd)
		}
	}
	seek := make(map[string]map[int32]kgo.EpochOffset)
	for p, m := range t.marks {
		p.rollback(m)
		if p.failed.Load() {
			continue // paused and re-read by retryStalled
		}
		if seek[p.topic] == nil {
			seek[p.topic] = make(map[int32]kgo.EpochOffset)
		}
		seek[p.topic][p.partition] = kgo.EpochOffset{Epoch: -1, Offset: m.acked + 1}
	}
	if len(seek) > 0 {
		r.src.SetOffsets(seek)
	}
	r.log.Warn("transaction aborted; its partitions are copied again from the last commit",
		zap.Int("partitions", len(t.marks)), zap.Int("records", t.records))
	return cause
}

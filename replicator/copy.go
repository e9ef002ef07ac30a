package replicator

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/internal/fence"
	"github.com/mm2go/mm2go/internal/metric"
	"github.com/mm2go/mm2go/policy"
)

// forward runs the batches copy mode's forwarder. What it fetched before ctx
// ended is sent until produceCtx ends (DrainTimeout after ctx).
func (r *Replicator) forward(ctx, produceCtx context.Context) error {
	sendCtx, cancel := context.WithCancel(produceCtx)
	defer cancel()
	r.log.Info("copying in the batches mode: fetched batches are forwarded as they are where none of their records must change")
	return r.fw.run(ctx, sendCtx)
}

// pollLoop fetches from the source and hands every record to the producer.
func (r *Replicator) pollLoop(ctx, produceCtx context.Context) error {
	for {
		r.retryStalled()
		fs := r.poll(ctx, r.pollTimeout())
		if err := ctx.Err(); err != nil {
			return err
		}
		fetched, _ := r.handOver(produceCtx, fs, r.o.Target, nil)
		r.throttled(ctx, fetched)
	}
}

// pollTimeout is the flow's consumer.poll.timeout.ms, 1 s when unset.
func (r *Replicator) pollTimeout() time.Duration {
	if t := r.o.Flow.ConsumerPollTimeout; t > 0 {
		return t
	}
	return time.Second
}

// poll returns what the source client fetched within wait (or until ctx
// ends), having reported its fetch errors.
func (r *Replicator) poll(ctx context.Context, wait time.Duration) kgo.Fetches {
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	fs := r.o.Source.PollFetches(pctx)
	fs.EachError(func(t string, p int32, err error) {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return
		}
		r.fetchError(t, p, err)
	})
	return fs
}

// handOver hands every fetched record to the producer dst, which writes it
// with ctx, and returns the bytes of the records (for the throttle; 0 without
// one) and their number. first, if not nil, is called for each partition
// before its first record goes.
func (r *Replicator) handOver(ctx context.Context, fs kgo.Fetches, dst *kgo.Client, first func(*partition)) (fetched, handed int) {
	fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		if len(fp.Records) == 0 {
			return
		}
		p := r.lookup(fp.Topic, fp.Partition)
		if p == nil || p.failed.Load() || p.removed.Load() {
			// Dropped: a stalled partition is re-read from its progress.
			for _, rec := range fp.Records {
				rec.Recycle()
			}
			return
		}
		if first != nil {
			first(p)
		}
		r.checkContinuity(p, fp.Records[0].Offset, fp.LogStartOffset)
		// Read what is needed of the last record now: once handed to
		// the producer a record belongs to it.
		last := fp.Records[len(fp.Records)-1]
		lastOffset, lastSkipped := last.Offset, r.skip(last)
		r.polled(p, fp.Records[0].Timestamp)
		b := &batch{p: p, epoch: p.epoch.Load(), metas: make([]recMeta, len(fp.Records))}
		n := 0
		for _, rec := range fp.Records {
			if r.skip(rec) {
				rec.Recycle()
				continue
			}
			if r.provenance {
				r.stamp(rec)
			}
			m := &b.metas[n]
			n++
			m.b, m.up, m.pool = b, rec.Offset, rec.Context
			p.lastData = rec.Offset
			rec.Topic = p.remote
			rec.Context = m
			p.inflight.Add(1)
			if r.throttle != nil {
				fetched += recordSize(rec)
			}
			dst.Produce(ctx, rec, r.promise)
		}
		handed += n
		p.next = lastOffset + 1
		if lastSkipped {
			p.markerAfter.Store(p.lastData)
			p.markerEnd.Store(p.next)
		}
		if end := endOf(fp.HighWatermark, fp.LastStableOffset); end > p.end.Load() {
			p.end.Store(end)
		}
	})
	return fetched, handed
}

// skip reports whether a fetched record is not copied: a transaction
// marker, or, with provenance headers, a record that came from the flow's
// target (copying it back would loop). Skipped records are upstream gaps
// to the offset map.
func (r *Replicator) skip(rec *kgo.Record) bool {
	if rec.Attrs.IsControl() {
		return true
	}
	if !r.provenance {
		return false
	}
	for _, h := range rec.Headers {
		if h.Key == policy.OriginHeader {
			return string(h.Value) == r.o.Flow.Target
		}
	}
	return false
}

// stamp adds the origin header to a record produced on the source itself.
func (r *Replicator) stamp(rec *kgo.Record) {
	for _, h := range rec.Headers {
		if h.Key == policy.OriginHeader {
			return // copied from further upstream: keep its origin
		}
	}
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: policy.OriginHeader, Value: r.origin})
}

// endOf is the end offset a fetch reports for its partition, given its high
// watermark and last stable offset: the last stable offset when the client
// reads committed data, else the high watermark.
func endOf(hwm, lso int64) int64 {
	if lso >= 0 && lso < hwm {
		return lso
	}
	return hwm
}

// checkContinuity reports upstream jumps the fetcher made on its own, when
// the first offset fetched for p is first: a jump forward past the log start
// means retention removed records before they were copied; a jump
// backwards means the source partition was truncated or recreated.
func (r *Replicator) checkContinuity(p *partition, first, logStart int64) {
	switch {
	case p.next < 0 || first == p.next:
	case first > p.next && logStart > p.next:
		lost := min(first, logStart) - p.next
		r.m.sourceLost(r.flow, p.topic, lost)
		r.m.error(r.flow, reasonSourceGap)
		r.log.Warn("source records removed by retention before they were copied",
			zap.String("topic", p.topic), zap.Int32("partition", p.partition),
			zap.Int64("offset", p.next), zap.Int64("log_start_offset", logStart), zap.Int64("lost", lost))
	case first < p.next:
		r.m.error(r.flow, reasonSourceRewound)
		r.log.Warn("source partition went backwards: truncated or recreated",
			zap.String("topic", p.topic), zap.Int32("partition", p.partition),
			zap.Int64("offset", p.next), zap.Int64("first_fetched", first))
	}
}

func (r *Replicator) fetchError(topic string, part int32, err error) {
	reason := metric.Reason(err, reasonFetch)
	if errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID) {
		reason = reasonTopicDeleted
	}
	r.m.error(r.flow, reason)
	r.log.Warn("fetch from source", zap.String("topic", topic), zap.Int32("partition", part), zap.String("reason", reason), zap.Error(err))
}

// onProduced runs on kgo's promise goroutine, serially, once per record.
// It must not block. The record goes back to the fetch pool when it returns.
func (r *Replicator) onProduced(rec *kgo.Record, err error) {
	m, ok := rec.Context.(*recMeta)
	if !ok {
		return
	}
	defer rec.Recycle()
	p := m.b.p
	p.inflight.Add(-1)
	if m.b.epoch != p.epoch.Load() || p.failed.Load() {
		return // sent before the partition's last failure; it is re-sent
	}
	if err != nil {
		if r.txnID != "" && fence.Fenced(err) {
			r.txnFenced.Store(true) // no retry: see fencedErr
		}
		r.fail(p, m.up, err)
		return
	}
	p.mu.Lock()
	p.observe(m.up, rec.Offset, r.syncTopic != "")
	p.acked.Store(m.up)
	p.mu.Unlock()
	r.counted(p, 1, recordSize(rec), rec.Timestamp.UnixMilli())
	r.noteCaughtUp(p)
}

// caughtUpFlushGap is the least time between two flushes that partitions
// catching up ask for (see noteCaughtUp).
const caughtUpFlushGap = 100 * time.Millisecond

// noteCaughtUp asks the flush loop for an early flush when the target just
// acknowledged p's last record in flight and p's position reached the
// source's end: the source is quiet there, as when producers moved to the
// target, and a consumer group failing over waits for the offset map to
// reach its final commit. Where records keep coming, partitions are rarely
// caught up and the flush interval rules. Called on the acknowledgement
// path after acked is stored; it never blocks, and in the middle of a batch
// it costs one atomic load.
func (r *Replicator) noteCaughtUp(p *partition) {
	if p.inflight.Load() != 0 || p.lag() != 0 {
		return
	}
	select {
	case r.caughtUp <- struct{}{}:
	default:
	}
}

// counted adds n records of p that the target acknowledged, of size bytes
// and the newest with timestamp ts (Unix ms), to the progress log, the
// partition's last acknowledged timestamp and the metrics.
func (r *Replicator) counted(p *partition, n, size int, ts int64) {
	r.copied.Add(int64(n))
	p.ackedTS.Store(ts)
	now := time.Now()
	latency := float64(now.UnixMilli() - ts)
	r.latency.Observe(latency / 1000)
	p.m.records.Add(float64(n))
	p.m.bytes.Add(float64(size))
	p.mm2.Acked(now, n, size, latency)
}

// polled records the age of a fetched batch of p by its first (oldest)
// record's timestamp: per-record observations would cost more than the copy.
func (r *Replicator) polled(p *partition, first time.Time) {
	now := time.Now()
	age := now.Sub(first)
	r.age.Observe(age.Seconds())
	p.mm2.Polled(now, float64(age.Milliseconds()))
}

// recordSize is what mm2go_replicator_bytes_total counts of a record: key,
// value and headers.
func recordSize(rec *kgo.Record) int {
	n := len(rec.Key) + len(rec.Value)
	for _, h := range rec.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// fail marks p stalled after the target refused the record at upstream
// offset up. The poll loop pauses it and retries from the last acknowledged
// offset; no later record of p counts as progress until then.
func (r *Replicator) fail(p *partition, up int64, err error) {
	p.failed.Store(true)
	if errors.Is(err, context.Canceled) {
		return // shutdown; the partition resumes from its progress next time
	}
	reason := metric.Reason(err, reasonProduce)
	r.m.error(r.flow, reason)
	p.lastErr.Store(&PartitionError{Topic: p.topic, Partition: p.partition, RemoteTopic: p.remote,
		Offset: up, Reason: reason, Err: err.Error(), At: time.Now()})
	r.log.Error("target refused record; partition paused and retried from its last acknowledged offset",
		zap.String("topic", p.topic), zap.Int32("partition", p.partition), zap.Int64("offset", up),
		zap.String("target_topic", p.remote), zap.String("reason", reason), zap.Error(err))
	r.failMu.Lock()
	r.failed = append(r.failed, p)
	r.failMu.Unlock()
}

// retryStalled pauses newly failed partitions and restarts those whose
// backoff elapsed and whose earlier records have all settled. Poll loop only.
func (r *Replicator) retryStalled() {
	r.failMu.Lock()
	newly := r.failed
	r.failed = nil
	r.failMu.Unlock()
	now := time.Now()
	for _, p := range newly {
		if !p.paused {
			r.src.PauseFetchPartitions(map[string][]int32{p.topic: {p.partition}})
			p.paused = true
			p.backoff.Min, p.backoff.Max = r.o.RetryBackoff, r.o.MaxRetryBackoff
			p.retryAt = now.Add(p.backoff.Next())
		}
	}
	var stalled int
	var resume []*partition
	r.eachPartition(func(p *partition) {
		if !p.paused {
			return
		}
		if p.removed.Load() || now.Before(p.retryAt) || p.inflight.Load() > 0 {
			stalled++
			return
		}
		resume = append(resume, p)
	})
	for _, p := range resume {
		from := p.acked.Load() + 1
		p.epoch.Add(1)
		p.failed.Store(false)
		p.paused = false
		p.next, p.lastData = from, from-1
		p.markerEnd.Store(-1)
		r.src.SetOffsets(map[string]map[int32]kgo.EpochOffset{p.topic: {p.partition: {Epoch: -1, Offset: from}}})
		r.src.ResumeFetchPartitions(map[string][]int32{p.topic: {p.partition}})
		r.log.Info("retry stalled partition", zap.String("topic", p.topic), zap.Int32("partition", p.partition), zap.Int64("offset", from))
	}
	var assigned int
	r.eachPartition(func(*partition) { assigned++ })
	r.m.setPartitions(r.flow, r.task, assigned, stalled)
}

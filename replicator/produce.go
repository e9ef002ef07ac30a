package replicator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/internal/fence"
	"github.com/mm2go/mm2go/internal/loop"
	"github.com/mm2go/mm2go/internal/metric"
)

// renewEvery is how often the forwarder's transactional id is used again
// so that the coordinator does not expire it (transactional.id.expiration.ms,
// 7 days by default): an expired id would get a new producer id, which the
// markers of the old one do not fence.
const renewEvery = 24 * time.Hour

// fenceTimeout bounds one acquisition of the transactional id.
const fenceTimeout = time.Minute

// acquire makes the forwarder the only writer of the remote partitions
// parts: the flow's transactional id gets a new epoch, and every one of
// parts not fenced yet gets an abort marker with it, after which no older
// epoch (an earlier run, a paused or duplicate instance) can write to it
// (internal/fence). It runs only with nothing in flight: before the send
// goroutine starts, then in it between sends. New partitions are fenced
// before their target tail is read (fenceBeforePlan) and before their first
// batch; every partition's sequence starts over with the new epoch. A call
// with nothing new to fence does nothing, except once a day. marked are
// the partitions that got a marker: the last offset of each when it returns.
func (fw *forwarder) acquire(ctx context.Context, parts []tp) (marked []tp, err error) {
	if fw.txnID == "" {
		return nil, fw.initProducer(ctx)
	}
	todo := map[string][]int32{}
	for _, rp := range parts {
		if !fw.fenced[rp] {
			todo[rp.topic] = append(todo[rp.topic], rp.partition)
			marked = append(marked, rp)
		}
	}
	n := len(marked)
	if n == 0 && !fw.acquiredAt.IsZero() && time.Since(fw.acquiredAt) < renewEvery {
		return nil, nil
	}
	f := fw.r.o.Flow
	ctx, cancel := context.WithTimeout(ctx, fenceTimeout)
	defer cancel()
	prod, err := fence.Acquire(ctx, fw.r.o.Target, fw.txnID, fenceTimeout, todo)
	if err != nil {
		return nil, fmt.Errorf("fence older writers of %s on %s: %w", f.Name(), f.Target, err)
	}
	fw.producerID, fw.producerEpoch, fw.acquiredAt = prod.ID, prod.Epoch, time.Now()
	for _, rp := range parts {
		fw.fenced[rp] = true
	}
	fw.r.eachPartition(func(p *partition) { p.seq = 0 })
	fw.r.log.Info("fenced older writers of the remote partitions", zap.String("transactional_id", fw.txnID),
		zap.Int64("producer_id", prod.ID), zap.Int16("epoch", prod.Epoch), zap.Int("new_partitions", n))
	return marked, nil
}

// initProducer gets a plain idempotent producer id, once: without
// mm2go.copy.fencing = epoch, the flow's lease alone keeps other writers
// away.
func (fw *forwarder) initProducer(ctx context.Context) error {
	if !fw.acquiredAt.IsZero() {
		return nil
	}
	prod, err := fence.Idempotent(ctx, fw.r.o.Target)
	if err != nil {
		return fmt.Errorf("init producer id on %s: %w", fw.r.o.Flow.Target, err)
	}
	fw.producerID, fw.producerEpoch, fw.acquiredAt = prod.ID, prod.Epoch, time.Now()
	fw.r.eachPartition(func(p *partition) { p.seq = 0 })
	return nil
}

// fenceRequest asks the send goroutine to acquire parts between sends.
type fenceRequest struct {
	parts []tp
	done  chan fenceResult
}

// fenceResult is what acquire returned for a fenceRequest.
type fenceResult struct {
	marked []tp
	err    error
}

// fenceBeforePlan fences the remote partitions of news before the
// replicator reads their target tails to decide where they resume: a
// record an older writer gets acknowledged later would not be seen there
// and would be copied twice. It returns the remote partitions that got an
// abort marker, which is then their last offset.
func (fw *forwarder) fenceBeforePlan(ctx context.Context, news []newPart) (map[tp]bool, error) {
	if fw.txnID == "" {
		return nil, nil
	}
	parts := make([]tp, 0, len(news))
	for _, np := range news {
		parts = append(parts, tp{np.remote, np.partition})
	}
	var res fenceResult
	fw.startMu.Lock()
	if !fw.started {
		res.marked, res.err = fw.acquire(ctx, parts)
		fw.startMu.Unlock()
	} else {
		fw.startMu.Unlock()
		req := fenceRequest{parts: parts, done: make(chan fenceResult, 1)}
		select {
		case fw.fenceReqs <- req:
		case <-fw.sendDone:
			return nil, errors.New("the forwarder stopped")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		select {
		case res = <-req.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if res.err != nil {
		return nil, res.err
	}
	marked := make(map[tp]bool, len(res.marked))
	for _, rp := range res.marked {
		marked[rp] = true
	}
	return marked, nil
}

// unfenced returns the remote partitions of w that acquire has not covered.
func (fw *forwarder) unfenced(w fwdWork) []tp {
	var out []tp
	for p := range w {
		if rp := (tp{p.remote, p.partition}); !fw.fenced[rp] {
			out = append(out, rp)
		}
	}
	return out
}

// errProducerState are the errors after which the forwarder's sequence
// numbers no longer match the broker's.
func lostProducerState(err error) bool {
	return errors.Is(err, kerr.OutOfOrderSequenceNumber) || errors.Is(err, kerr.UnknownProducerID) ||
		errors.Is(err, kerr.InvalidProducerEpoch) || errors.Is(err, kerr.ProducerFenced) ||
		errors.Is(err, kerr.InvalidProducerIDMapping)
}

// send produces w: round after round, the first unsent batch of every
// partition, one Produce request per target leader.
func (fw *forwarder) send(ctx context.Context, w fwdWork) error {
	r := fw.r
	if fw.txnID != "" {
		if news := fw.unfenced(w); len(news) > 0 || time.Since(fw.acquiredAt) > renewEvery {
			if _, err := fw.acquire(ctx, news); err != nil {
				fw.drop(w)
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
	}
	backoff := loop.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	for len(w) > 0 {
		var parts []*partition
		for p, bs := range w {
			if b := bs[0]; b.epoch != p.epoch.Load() || p.failed.Load() {
				fw.drop(fwdWork{p: bs}) // sent before the partition's last failure
				delete(w, p)
				continue
			}
			parts = append(parts, p)
		}
		if len(parts) == 0 {
			return nil
		}
		by, err := leaders(ctx, r.o.Target, fw.dst, fw.dstStale.Swap(false), parts, remoteTopic)
		if err == nil && len(by) == 0 {
			err = errors.New("no leader known for the remote partitions")
		}
		if err != nil {
			if ctx.Err() != nil {
				fw.drop(w)
				return nil
			}
			fw.dstStale.Store(true)
			r.m.error(r.flow, metric.Reason(err, reasonProduce))
			r.log.Warn("target metadata; retried", zap.Error(err))
			loop.Sleep(ctx, 200*time.Millisecond)
			continue
		}
		retry := fw.sendRound(ctx, by, w)
		if retry != nil {
			if fence.Fenced(retry) {
				fw.drop(w)
				return fmt.Errorf("another writer of %s took over with a newer epoch of transactional id %s: %w", r.o.Flow.Name(), fw.txnID, retry)
			}
			if lostProducerState(retry) {
				fw.drop(w)
				return fmt.Errorf("target %s lost the idempotent producer's state (%w); restarting the flow", r.o.Flow.Target, retry)
			}
			if ctx.Err() != nil {
				fw.drop(w)
				return nil
			}
			fw.dstStale.Store(true)
			wait := backoff.Next()
			r.m.error(r.flow, metric.Reason(retry, reasonProduce))
			r.log.Warn("target did not take batches; re-sent with the same sequence numbers", zap.Duration("backoff", wait), zap.Error(retry))
			loop.Sleep(ctx, wait)
			continue
		}
		backoff.Reset()
	}
	return nil
}

// sendRound sends the first batch of each partition in by and settles what
// the target answered. It returns the last retriable (or producer-state)
// error; those batches stay first in w.
func (fw *forwarder) sendRound(ctx context.Context, by map[int32][]*partition, w fwdWork) error {
	r := fw.r
	type result struct {
		parts []*partition
		resp  *kmsg.ProduceResponse
		err   error
	}
	results := make(chan result, len(by))
	for leader, ps := range by {
		req := kmsg.NewPtrProduceRequest()
		req.Acks = -1
		req.TimeoutMillis = int32(fw.produceTimeout.Milliseconds())
		idx := map[string]int{}
		for _, p := range ps {
			b := w[p][0]
			rewrite(b.b, fw.producerID, fw.producerEpoch, p.seq)
			i, ok := idx[p.remote]
			if !ok {
				i = len(req.Topics)
				idx[p.remote] = i
				rt := kmsg.NewProduceRequestTopic()
				rt.Topic, rt.TopicID = p.remote, fw.dst[p.remote].id
				req.Topics = append(req.Topics, rt)
			}
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Partition = p.partition
			rp.Records = b.b
			req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
		}
		go func() {
			resp, err := r.o.Target.Broker(int(leader)).Request(ctx, req)
			res := result{parts: ps, err: err}
			if err == nil {
				res.resp = resp.(*kmsg.ProduceResponse)
			}
			results <- res
		}()
	}
	var retry error
	for range by {
		res := <-results
		if res.err != nil {
			retry = res.err
			continue
		}
		byID := map[[16]byte]string{}
		for name, tm := range fw.dst {
			byID[tm.id] = name
		}
		answered := map[tp]kmsg.ProduceResponseTopicPartition{}
		for _, rt := range res.resp.Topics {
			topic := rt.Topic
			if topic == "" {
				topic = byID[rt.TopicID]
			}
			for _, rp := range rt.Partitions {
				answered[tp{topic, rp.Partition}] = rp
			}
		}
		for _, p := range res.parts {
			rp, ok := answered[tp{p.remote, p.partition}]
			if !ok {
				retry = fmt.Errorf("no answer for %s/%d", p.remote, p.partition)
				continue
			}
			b := w[p][0]
			switch err := kerr.ErrorForCode(rp.ErrorCode); {
			case err == nil:
				// Sequences wrap to 0 past MaxInt32, as Kafka's do.
				p.seq = int32((int64(p.seq) + int64(b.n)) % (1 << 31))
				fw.settle(b, rp.BaseOffset)
			case lostProducerState(err), kerr.IsRetriable(err):
				retry = err
				continue
			case (errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)) && b.n > 1:
				// Larger than the target takes (a forwarded batch keeps
				// the source's batching): sent again as two halves,
				// until a refused batch is a single record.
				halves, derr := fw.split(b)
				if derr != nil {
					r.fail(p, b.up(0), fmt.Errorf("%w; splitting it: %w", err, derr))
					continue
				}
				r.log.Info("batch too large for the target; sent again in two halves",
					zap.String("topic", p.topic), zap.Int32("partition", p.partition), zap.Int64("offset", b.up(0)),
					zap.Int("records", b.n), zap.Int("bytes", len(b.b)), zap.Error(err))
				w[p] = append(halves, w[p][1:]...)
				continue
			default:
				for _, rest := range w[p] {
					p.inflight.Add(-int64(rest.n))
				}
				delete(w, p)
				r.fail(p, b.up(0), err)
				continue
			}
			if w[p] = w[p][1:]; len(w[p]) == 0 {
				delete(w, p)
			}
		}
	}
	return retry
}

// settle records that the target wrote b at base: the exact offset map,
// offset syncs, progress and metrics, as the record path's promise does.
func (fw *forwarder) settle(b *fwdBatch, base int64) {
	r, p := fw.r, b.p
	p.inflight.Add(-int64(b.n))
	if b.epoch != p.epoch.Load() || p.failed.Load() {
		return
	}
	syncs := r.syncTopic != ""
	p.mu.Lock()
	if b.ups == nil {
		p.observeRun(b.up0, base, b.n, syncs)
	} else {
		for i, up := range b.ups {
			p.observe(up, base+int64(i), syncs)
		}
	}
	p.acked.Store(b.up(b.n - 1))
	p.mu.Unlock()
	if b.ups == nil {
		r.m.batchSent(r.flow, pathForwarded)
	} else {
		r.m.batchSent(r.flow, pathReencoded)
	}
	r.counted(p, b.n, b.size, b.maxTS)
	r.noteCaughtUp(p)
}

// split decodes b (a batch the target refused as too large) and encodes its
// records again as two batches.
func (fw *forwarder) split(b *fwdBatch) ([]*fwdBatch, error) {
	fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Topic: b.p.topic, Partition: b.p.partition},
		&kmsg.FetchResponseTopicPartition{RecordBatches: b.b, HighWatermark: int64(b.n)}, fw.decompressor, nil)
	if fp.Err != nil {
		return nil, fp.Err
	}
	if len(fp.Records) != b.n {
		return nil, fmt.Errorf("decoded %d records of %d", len(fp.Records), b.n)
	}
	// The batch was decoded at base offset 0: a record's offset is its
	// index in b.
	up := func(rec *kgo.Record) int64 { return b.up(int(rec.Offset)) }
	half := b.n / 2
	return []*fwdBatch{
		fw.encode(b.p, b.epoch, fp.Records[:half], up),
		fw.encode(b.p, b.epoch, fp.Records[half:], up),
	}, nil
}

// encode encodes recs (at least one) into a batch of p's to send,
// compressed as the record path's producer would (fw.compressor); up gives
// each record's upstream offset.
func (fw *forwarder) encode(p *partition, epoch uint32, recs []*kgo.Record, up func(*kgo.Record) int64) *fwdBatch {
	b := &fwdBatch{p: p, epoch: epoch, b: encodeBatch(recs, fw.compressor), n: len(recs), maxTS: -1}
	for _, rec := range recs {
		b.ups = append(b.ups, up(rec))
		b.maxTS = max(b.maxTS, rec.Timestamp.UnixMilli())
		b.size += recordSize(rec)
	}
	return b
}

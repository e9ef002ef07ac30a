package replicator

import (
	"context"
	"errors"
	"fmt"
	"math"
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
//
// replanned says parts are planned anew (fenceBeforePlan). One of them the
// producer id and epoch cover already was copied before in this run (its
// topic stopped, as gone or recreated, and found again): the target's
// sequence for it went on with the batches sent then, and the partition,
// starting over at sequence 0 under the same epoch, would have its first
// batches taken for duplicates of those (acknowledged, not written). Then
// the producer id gets a new epoch (without fencing, a new producer id).
func (fw *forwarder) acquire(ctx context.Context, parts []tp, replanned bool) (marked []tp, err error) {
	again := false
	for _, rp := range parts {
		again = again || replanned && fw.fenced[rp]
	}
	if fw.txnID == "" {
		if err := fw.initProducer(ctx, again); err != nil {
			return nil, err
		}
		for _, rp := range parts {
			fw.fenced[rp] = true
		}
		return nil, nil
	}
	todo := map[string][]int32{}
	for _, rp := range parts {
		if !fw.fenced[rp] {
			todo[rp.topic] = append(todo[rp.topic], rp.partition)
			marked = append(marked, rp)
		}
	}
	n := len(marked)
	if n == 0 && !again && !fw.acquiredAt.IsZero() && time.Since(fw.acquiredAt) < renewEvery {
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

// initProducer gets a plain idempotent producer id, once unless again:
// without mm2go.copy.fencing = epoch, the flow's lease alone keeps other
// writers away.
func (fw *forwarder) initProducer(ctx context.Context, again bool) error {
	if !fw.acquiredAt.IsZero() && !again {
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
	parts := make([]tp, 0, len(news))
	for _, np := range news {
		parts = append(parts, tp{np.remote, np.partition})
	}
	var res fenceResult
	fw.startMu.Lock()
	if !fw.started {
		res.marked, res.err = fw.acquire(ctx, parts, true)
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

// queueBound is what the send loop holds before it takes more from the
// fetch loop: what one Fetch of every partition brings at most
// (max.partition.fetch.bytes each, fetch.max.bytes in all).
func (fw *forwarder) queueBound() int {
	r := fw.r
	n := 0
	r.mu.Lock()
	for _, ps := range r.parts {
		n += len(ps)
	}
	r.mu.Unlock()
	return int(min(int64(fw.fetchMax), int64(max(n, 1))*int64(fw.partitionMax)))
}

// sendState is the send loop's record of what it holds and what is out.
type sendState struct {
	queue   fwdWork                  // batches not acknowledged yet, in order per partition
	bytes   int                      // their bytes
	out     map[sendKey][]*partition // Produce requests out, and their partitions
	results chan produceResult
	retry   map[int32]*retryAfter // leaders whose request failed as a whole
	// partRetry holds partitions the target refused (a retriable error in
	// their answer) back, each on its own: one partition short of in-sync
	// replicas, say, does not slow the others of its leader.
	partRetry map[*partition]*retryAfter
	// leaderless holds partitions without a known target leader back
	// from a metadata reload until it passes.
	leaderless time.Time
	fences     []fenceRequest // acquisitions waiting for nothing to be out
	err        error          // why the loop ends (nil: it ends with sendCtx)
	stopping   bool           // no more requests: the loop ends once nothing is out
}

// retryAfter is a backoff after an error: nothing is sent again before
// until.
type retryAfter struct {
	loop.Backoff
	until time.Time
}

// sendKey names a Produce request out: the target leader, and the lane
// (the index in fw.sendLanes of the client it goes on).
type sendKey struct {
	leader int32
	lane   int
}

// produceResult is a Produce request's outcome.
type produceResult struct {
	to    sendKey
	parts []*partition
	req   *kmsg.ProduceRequest
	resp  *kmsg.ProduceResponse
	err   error
}

// sendLoop sends what the fetch loop hands over on work until work is
// closed and everything is acknowledged, ctx ends, or the producer's state
// is lost (the error). Each target leader has a Produce request out on
// each lane (fw.sendLanes, one connection each) at a time, carrying the
// next batch of partitions it leads that have one and none out, so each
// partition has one batch in flight and its batches land in order; an
// answer is settled and the lane's next request sent at once, whatever the
// other leaders do, so a slow or failing broker holds back only its own
// partitions (and the fetch, once queueBound is held). Kafka handles one
// request per connection at a time: on two connections the target broker
// validates and appends two requests at once (decompressing each batch to
// check its records), which was the copy's bound with one (a catch-up at
// 67-85 % of the franz-go copy loop's rate in four rounds, 100-114 % with
// two).
// Fencing (acquire) waits until no request is out and sends none meanwhile.
func (fw *forwarder) sendLoop(ctx context.Context, work <-chan fwdWork) error {
	st := &sendState{
		queue:     fwdWork{},
		out:       map[sendKey][]*partition{},
		results:   make(chan produceResult),
		retry:     map[int32]*retryAfter{},
		partRetry: map[*partition]*retryAfter{},
	}
	done := ctx.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		unsure := st.unsure()
		if len(st.out) == 0 {
			if st.stopping || st.err != nil || (work == nil && len(st.queue) == 0) {
				fw.drop(st.queue)
				for _, req := range st.fences {
					req.done <- fenceResult{err: errForwarderStopped}
				}
				return st.err
			}
			if !unsure {
				fw.fence(ctx, st)
			}
		}
		if !st.stopping && st.err == nil {
			// While fencing waits, only batches that may be written
			// already go out (again), until answered.
			waiting := len(st.fences) > 0 || fw.needsFence(st.queue)
			if !waiting || unsure {
				fw.issueProduce(ctx, st, waiting)
			}
		}
		in := work
		if st.bytes >= fw.queueBound() || st.stopping || st.err != nil {
			in = nil
		}
		var tick <-chan time.Time
		if next, ok := st.nextWake(); ok {
			timer.Reset(time.Until(next))
			tick = timer.C
		}
		select {
		case w, ok := <-in:
			if !ok {
				work = nil
				continue
			}
			for p, bs := range w {
				st.queue[p] = append(st.queue[p], bs...)
				for _, b := range bs {
					st.bytes += len(b.b)
				}
			}
		case req := <-fw.fenceReqs:
			st.fences = append(st.fences, req)
		case res := <-st.results:
			fw.produced(ctx, st, res)
		case <-tick:
		case <-done:
			done, st.stopping = nil, true
		}
		timer.Stop()
	}
}

// errForwarderStopped answers a fence request the send loop can no longer
// serve.
var errForwarderStopped = errors.New("the forwarder stopped")

// nextWake is when the send loop must look again although nothing arrived:
// the end of a leader's or a partition's backoff or of the leaderless
// hold, whichever comes first and has not passed.
func (st *sendState) nextWake() (time.Time, bool) {
	now := time.Now()
	var next time.Time
	consider := func(at time.Time) {
		if at.After(now) && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	consider(st.leaderless)
	for _, lr := range st.retry {
		consider(lr.until)
	}
	for _, pr := range st.partRetry {
		consider(pr.until)
	}
	return next, !next.IsZero()
}

// needsFence reports whether the queue holds a partition acquire has not
// covered, or the transactional id is due for renewal.
func (fw *forwarder) needsFence(queue fwdWork) bool {
	if fw.txnID == "" {
		return false
	}
	return len(fw.unfenced(queue)) > 0 || time.Since(fw.acquiredAt) > renewEvery
}

// fence runs, with nothing out, the acquisitions asked for (fenceBeforePlan)
// and the one the queue needs (needsFence).
func (fw *forwarder) fence(ctx context.Context, st *sendState) {
	for _, req := range st.fences {
		marked, err := fw.acquire(ctx, req.parts, true)
		req.done <- fenceResult{marked, err}
	}
	st.fences = nil
	if !fw.needsFence(st.queue) {
		return
	}
	if _, err := fw.acquire(ctx, fw.unfenced(st.queue), false); err != nil {
		if ctx.Err() != nil {
			st.stopping = true
			return
		}
		st.err = err
	}
}

// unsure reports whether a partition's first batch went out without an
// answer that settles it: the target may hold it. A new producer epoch or
// id (acquire) waits until none does, since the batch sent again under
// those would be written again.
func (st *sendState) unsure() bool {
	for _, bs := range st.queue {
		if bs[0].sent {
			return true
		}
	}
	return false
}

// issueProduce sends a Produce request on every lane with none out to its
// target leader, unless the leader is backing off, with the first batch of
// each of the leader's partitions that has none out: split evenly among
// the leader's free lanes. With onlySent, only batches that went out
// before without an answer (unsure) are sent.
func (fw *forwarder) issueProduce(ctx context.Context, st *sendState, onlySent bool) {
	r := fw.r
	now := time.Now()
	hold := now.Before(st.leaderless)
	sending := map[*partition]bool{}
	for _, ps := range st.out {
		for _, p := range ps {
			sending[p] = true
		}
	}
	var parts []*partition
	for p, bs := range st.queue {
		if sending[p] {
			continue
		}
		if b := bs[0]; b.epoch != p.epoch.Load() || p.failed.Load() || p.removed.Load() && !b.sent {
			// Fetched before the partition's last failure, or its topic
			// stopped: if the topic is found again, it resumes from the
			// target's tail, read after a new epoch fenced these.
			fw.dropQueued(st, p, 0)
			continue
		}
		if p.removed.Load() && len(bs) > 1 {
			// Its topic stopped after its first batch went out: that one
			// is sent until answered, the others are not.
			fw.dropQueued(st, p, 1)
		}
		if onlySent && !bs[0].sent {
			continue
		}
		if pr := st.partRetry[p]; pr != nil && now.Before(pr.until) {
			continue
		}
		if _, known := fw.dst[p.remote].leaders[p.partition]; hold && !known {
			continue
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return
	}
	by, err := leaders(ctx, r.o.Target, fw.dst, fw.dstStale.Swap(false), parts, remoteTopic)
	if err == nil && len(by) == 0 {
		err = errors.New("no leader known for the remote partitions")
	}
	if err != nil {
		if ctx.Err() == nil {
			fw.dstStale.Store(true)
			r.m.error(r.flow, metric.Reason(err, reasonProduce))
			r.log.Warn("target metadata; retried", zap.Error(err))
			st.leaderless = now.Add(200 * time.Millisecond)
		}
		return
	}
	n := 0
	for _, ps := range by {
		n += len(ps)
	}
	if n < len(parts) && !hold {
		st.leaderless = now.Add(200 * time.Millisecond) // metadata reloaded: asked again then
	}
	for leader, ps := range by {
		if lr := st.retry[leader]; lr != nil && now.Before(lr.until) {
			continue
		}
		var free []int
		for lane := range fw.sendLanes {
			if _, busy := st.out[sendKey{leader, lane}]; !busy {
				free = append(free, lane)
			}
		}
		for i, lane := range free {
			if g := ps[i*len(ps)/len(free) : (i+1)*len(ps)/len(free)]; len(g) > 0 {
				fw.sendProduce(ctx, st, sendKey{leader, lane}, g)
			}
		}
	}
}

// sendProduce sends the first batch of each of ps to the leader of to on
// its lane.
func (fw *forwarder) sendProduce(ctx context.Context, st *sendState, to sendKey, ps []*partition) {
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = int32(fw.produceTimeout.Milliseconds())
	idx := map[string]int{}
	for _, p := range ps {
		fw.mergeHead(st, p)
		b := st.queue[p][0]
		rewrite(b.b, fw.producerID, fw.producerEpoch, p.seq)
		b.asIs, b.sent = true, true
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
	st.out[to] = ps
	go func() {
		resp, err := fw.sendLanes[to.lane].Broker(int(to.leader)).Request(ctx, req)
		res := produceResult{to: to, parts: ps, req: req, err: err}
		if err == nil {
			res.resp = resp.(*kmsg.ProduceResponse)
		}
		st.results <- res
	}()
}

// mergeHead encodes p's first queued batches again as one batch while each
// is small (under coalesceBelow), together they stay under maxEncodedBatch
// and none is a half of a batch the target refused as too large; a first
// batch sent before (an error's retry) goes again unchanged, since the
// broker recognizes a duplicate only by the same sequence range. A
// partition has one batch out at a time, so the small batches of several
// fetches (a producer with linger.ms=0, while the fetch loop runs ahead)
// would each take a round trip to the target. A batch that does not decode
// is sent as it is.
func (fw *forwarder) mergeHead(st *sendState, p *partition) {
	bs := st.queue[p]
	if bs[0].asIs {
		return
	}
	k, size := 0, 0
	for ; k < len(bs); k++ {
		b := bs[k]
		if b.asIs || b.epoch != bs[0].epoch || len(b.b) >= coalesceBelow || (k > 0 && size+b.size > maxEncodedBatch) {
			break
		}
		size += b.size
	}
	if k < 2 {
		return
	}
	var recs []*kgo.Record
	for _, b := range bs[:k] {
		fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Topic: p.topic, Partition: p.partition},
			&kmsg.FetchResponseTopicPartition{RecordBatches: b.b, HighWatermark: math.MaxInt64}, fw.decompressor, nil)
		if fp.Err != nil || len(fp.Records) != b.n {
			return
		}
		for i, rec := range fp.Records {
			rec.Offset = b.up(i) // the encoded batch's upstream offsets
		}
		recs = append(recs, fp.Records...)
	}
	merged := fw.encode(p, bs[0].epoch, recs, func(rec *kgo.Record) int64 { return rec.Offset })
	for _, b := range bs[:k] {
		st.bytes -= len(b.b)
	}
	st.bytes += len(merged.b)
	st.queue[p] = append([]*fwdBatch{merged}, bs[k:]...)
}

// dropQueued drops p's queued batches after its first keep, and p's entry
// with keep 0.
func (fw *forwarder) dropQueued(st *sendState, p *partition, keep int) {
	bs := st.queue[p]
	if len(bs) <= keep {
		return
	}
	fw.drop(fwdWork{p: bs[keep:]})
	for _, b := range bs[keep:] {
		st.bytes -= len(b.b)
	}
	if keep == 0 {
		delete(st.queue, p)
		delete(st.partRetry, p)
		return
	}
	st.queue[p] = bs[:keep]
}

// produced settles what a leader answered: acknowledged batches leave the
// queue, a partition the target refused fails (the replicator's stall and
// retry), and a retriable error keeps the batches first in the queue, sent
// again with the same sequence numbers after a backoff: the leader's when
// the request failed as a whole, else each refused partition's.
func (fw *forwarder) produced(ctx context.Context, st *sendState, res produceResult) {
	r := fw.r
	delete(st.out, res.to)
	retry := res.err
	var refused []*partition // answered with a retriable error
	if retry == nil {
		// Produce v13 answers by topic ID. The IDs are the request's:
		// fw.dst may have been reloaded since, for other partitions only.
		byID := map[[16]byte]string{}
		for _, rt := range res.req.Topics {
			byID[rt.TopicID] = rt.Topic
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
			err := fw.answered(st, p, answered)
			if err == nil {
				delete(st.partRetry, p)
				continue
			}
			if retry == nil || fence.Fenced(err) || lostProducerState(err) {
				retry = err // the first, unless a later one ends the loop
			}
			refused = append(refused, p)
		}
	}
	switch {
	case fence.Fenced(retry):
		st.err = fmt.Errorf("another writer of %s took over with a newer epoch of transactional id %s: %w", r.o.Flow.Name(), fw.txnID, retry)
	case lostProducerState(retry):
		st.err = fmt.Errorf("target %s lost the idempotent producer's state (%w); restarting the flow", r.o.Flow.Target, retry)
	case retry == nil:
		delete(st.retry, res.to.leader)
	case ctx.Err() != nil:
		st.stopping = true
	default:
		fw.dstStale.Store(true)
		var wait time.Duration
		held := len(refused)
		if res.err != nil {
			wait, held = backOff(st.retry, res.to.leader), len(res.parts)
		} else {
			delete(st.retry, res.to.leader)
			for _, p := range refused {
				wait = max(wait, backOff(st.partRetry, p))
			}
		}
		r.m.error(r.flow, metric.Reason(retry, reasonProduce))
		r.log.Warn("target did not take batches; re-sent with the same sequence numbers",
			zap.Int32("broker", res.to.leader), zap.Int("partitions", held),
			zap.Duration("backoff", wait), zap.Error(retry))
	}
}

// backOff starts or lengthens k's backoff in m and returns it.
func backOff[K comparable](m map[K]*retryAfter, k K) time.Duration {
	ra := m[k]
	if ra == nil {
		ra = &retryAfter{Backoff: loop.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}}
		m[k] = ra
	}
	wait := ra.Next()
	ra.until = time.Now().Add(wait)
	return wait
}

// answered settles partition p's first batch from the leader's answer. It
// returns a retriable (or producer-state) error, which leaves the batch
// first in the queue.
func (fw *forwarder) answered(st *sendState, p *partition, answered map[tp]kmsg.ProduceResponseTopicPartition) error {
	r := fw.r
	rp, ok := answered[tp{p.remote, p.partition}]
	if !ok {
		return fmt.Errorf("no answer for %s/%d", p.remote, p.partition)
	}
	b := st.queue[p][0]
	switch err := kerr.ErrorForCode(rp.ErrorCode); {
	case err == nil:
		// Sequences wrap to 0 past MaxInt32, as Kafka's do.
		p.seq = int32((int64(p.seq) + int64(b.n)) % (1 << 31))
		fw.settle(b, rp.BaseOffset)
	case lostProducerState(err), kerr.IsRetriable(err):
		if notWritten(err) {
			b.sent = false // refused before the append: nothing to wait for
		}
		return err
	case (errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)) && b.n > 1:
		// Larger than the target takes (a forwarded batch keeps the
		// source's batching): sent again as two halves, until a refused
		// batch is a single record.
		halves, derr := fw.split(b)
		if derr != nil {
			fw.dropQueued(st, p, 0)
			r.fail(p, b.up(0), fmt.Errorf("%w; splitting it: %w", err, derr))
			return nil
		}
		r.log.Info("batch too large for the target; sent again in two halves",
			zap.String("topic", p.topic), zap.Int32("partition", p.partition), zap.Int64("offset", b.up(0)),
			zap.Int("records", b.n), zap.Int("bytes", len(b.b)), zap.Error(err))
		st.bytes += len(halves[0].b) + len(halves[1].b) - len(b.b)
		st.queue[p] = append(halves, st.queue[p][1:]...)
		return nil
	default:
		fw.dropQueued(st, p, 0)
		r.fail(p, b.up(0), err)
		return nil
	}
	st.bytes -= len(b.b)
	if st.queue[p] = st.queue[p][1:]; len(st.queue[p]) == 0 {
		delete(st.queue, p)
	}
	return nil
}

// notWritten reports whether a Produce error says the partition's leader
// refused the batch before appending it. REQUEST_TIMED_OUT or
// NOT_ENOUGH_REPLICAS_AFTER_APPEND say it may be in the log.
func notWritten(err error) bool {
	return errors.Is(err, kerr.NotLeaderForPartition) || errors.Is(err, kerr.NotEnoughReplicas) ||
		errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.LeaderNotAvailable)
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
	halves := []*fwdBatch{
		fw.encode(b.p, b.epoch, fp.Records[:half], up),
		fw.encode(b.p, b.epoch, fp.Records[half:], up),
	}
	halves[0].asIs, halves[1].asIs = true, true
	return halves, nil
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

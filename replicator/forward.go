package replicator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/internal/fence"
	"github.com/mm2go/mm2go/policy"
)

// The batches copy mode (mm2go.copy.mode=batches).
//
// Instead of the source client's consumer and the target client's producer,
// the flow fetches with its own Fetch requests and produces with its own
// Produce requests as an idempotent producer of its own (one producer id per
// run, a sequence per target partition, acks=all). A fetched partition whose
// batches all hold records that need no change (batch.go: forwardable) is
// sent on batch by batch, still compressed as the source stored it; a
// partition with anything else in its fetch (transaction markers or
// transactional data, compacted holes, a batch that starts before the resume
// offset, log-append timestamps) is decoded as the record path decodes it
// (aborted transactions dropped under read_committed) and re-encoded into
// uncompressed batches. Either way the target assigns consecutive offsets to
// a sent batch, so every acknowledged batch extends the exact offset map as
// the record path's acknowledgements do, and progress, offset syncs, lag and
// the stall-and-retry of a refused partition work unchanged.
//
// A Produce request carries one batch per partition, so each partition has
// one batch in flight: a refused batch leaves no later batch of its
// partition written. Retriable errors re-send the same batch with the same
// sequence, which the broker de-duplicates; an error that loses the
// producer's state (unknown producer id, out-of-order sequence) ends the
// run, and the restart's reconciliation finds what the target already holds.
//
// Fetching and producing overlap: one goroutine fetches, another sends the
// previous fetch.

// feed is what the replicator asks of its source side besides fetching:
// kgo's consumer for the record path, the forwarder for the batches path.
type feed interface {
	AddConsumePartitions(map[string]map[int32]kgo.Offset)
	PurgeTopicsFromConsuming(...string)
	ForceMetadataRefresh()
	PauseFetchPartitions(map[string][]int32) map[string][]int32
	ResumeFetchPartitions(map[string][]int32)
	SetOffsets(map[string]map[int32]kgo.EpochOffset)
}

var _ feed = (*kgo.Client)(nil)

// maxEncodedBatch bounds the record bytes of a batch the forwarder encodes
// itself, below the brokers' default max.message.bytes (1 MiB).
const maxEncodedBatch = 512 << 10

// coalesceBelow: a partition's fetched batches smaller than this on
// average (a producer with linger.ms=0 or at a low rate writes a batch per
// record or a few) are decoded and encoded again as few batches (see
// forwarder.encode). Forwarded as they are, a Produce request carries one
// batch per partition, so the copy would advance one such batch per round
// trip to the target. Larger batches are forwarded.
const coalesceBelow = 32 << 10

// coalesce reports whether a partition's fetched batches are small enough
// to be encoded again together (see coalesceBelow).
func coalesce(raws []rawBatch) bool {
	if len(raws) < 2 {
		return false
	}
	size := 0
	for _, rb := range raws {
		size += len(rb.b)
	}
	return size < len(raws)*coalesceBelow
}

// forwarder fetches and produces raw batches for one flow.
type forwarder struct {
	r *Replicator

	fetchMax, partitionMax, maxWait int32
	isolation                       kgo.IsolationLevel
	produceTimeout                  time.Duration
	decompressor                    kgo.Decompressor
	// compressor compresses what the forwarder encodes (nil: nothing), as
	// the record path's producer would: with the target producer's
	// compression.type (franz-go's default: snappy).
	compressor kgo.Compressor

	// srcStale and dstStale ask for the source's and the target's
	// metadata to be reloaded before the next request.
	srcStale, dstStale atomic.Bool

	// Fetch goroutine only. troubled is set when a response had errors,
	// so that the loop pauses instead of asking again at once.
	src      map[string]topicMeta
	troubled bool
	// Send goroutine only.
	dst           map[string]topicMeta
	txnID         string // the flow's transactional id under mm2go.copy.fencing = epoch, else ""
	producerID    int64
	producerEpoch int16
	fenced        map[tp]bool // remote (target) partitions that have the epoch's marker
	acquiredAt    time.Time
	fenceReqs     chan fenceRequest
	sendDone      chan struct{} // closed when the send goroutine ended

	startMu sync.Mutex // guards started
	started bool       // the send goroutine runs: acquire only through fenceReqs
}

// topicMeta is a topic's ID and its partitions' leaders.
type topicMeta struct {
	id      [16]byte
	leaders map[int32]int32
}

// fwdBatch is one batch to send: fetched as it is, or re-encoded.
type fwdBatch struct {
	p     *partition
	epoch uint32
	b     []byte
	up0   int64   // upstream offset of the first record, when contiguous
	ups   []int64 // upstream offset of each record, when re-encoded
	n     int
	maxTS int64
	size  int
}

func (b *fwdBatch) up(i int) int64 {
	if b.ups != nil {
		return b.ups[i]
	}
	return b.up0 + int64(i)
}

// fwdWork is what one fetch produced: per partition, batches in order.
type fwdWork map[*partition][]*fwdBatch

func newForwarder(r *Replicator) *forwarder {
	src, dst := r.o.Source, r.o.Target
	fw := &forwarder{
		r:              r,
		fetchMax:       src.OptValue(kgo.FetchMaxBytes).(int32),
		partitionMax:   src.OptValue(kgo.FetchMaxPartitionBytes).(int32),
		maxWait:        int32(src.OptValue(kgo.FetchMaxWait).(time.Duration).Milliseconds()),
		isolation:      kgo.ReadUncommitted(),
		produceTimeout: dst.OptValue(kgo.ProduceRequestTimeout).(time.Duration),
		decompressor:   kgo.DefaultDecompressor(),
		src:            make(map[string]topicMeta),
		dst:            make(map[string]topicMeta),
		fenced:         make(map[tp]bool),
		fenceReqs:      make(chan fenceRequest),
		sendDone:       make(chan struct{}),
	}
	if codecs, _ := dst.OptValue(kgo.ProducerBatchCompression).([]kgo.CompressionCodec); len(codecs) > 0 {
		// An error leaves it nil: uncompressed, as franz-go then sends.
		fw.compressor, _ = kgo.DefaultCompressor(codecs...)
	}
	if r.o.Flow.Fencing == config.FencingEpoch {
		fw.txnID = policy.TransactionalID(r.o.Flow.Source, r.o.Flow.Target, r.o.Task)
	}
	if level, _ := src.OptValue(kgo.FetchIsolationLevel).(int8); level == 1 {
		fw.isolation = kgo.ReadCommitted()
	}
	return fw
}

// The feed methods: the forwarder reads which partitions to fetch, and from
// where, from the replicator's partition states, so only a metadata refresh
// needs doing.

func (*forwarder) AddConsumePartitions(map[string]map[int32]kgo.Offset) {}
func (*forwarder) PurgeTopicsFromConsuming(...string)                   {}
func (fw *forwarder) ForceMetadataRefresh() {
	fw.srcStale.Store(true)
	fw.dstStale.Store(true)
}
func (*forwarder) PauseFetchPartitions(map[string][]int32) map[string][]int32 { return nil }
func (*forwarder) ResumeFetchPartitions(map[string][]int32)                   {}
func (*forwarder) SetOffsets(map[string]map[int32]kgo.EpochOffset)            {}

// run fetches until ctx ends and sends until the last fetch is sent or
// sendCtx ends. It returns an error only when the producer's state is lost.
func (fw *forwarder) run(ctx, sendCtx context.Context) error {
	var parts []tp
	fw.r.eachPartition(func(p *partition) { parts = append(parts, tp{p.remote, p.partition}) })
	fw.startMu.Lock()
	_, err := fw.acquire(sendCtx, parts)
	fw.started = err == nil
	fw.startMu.Unlock()
	if err != nil {
		return err
	}
	work := make(chan fwdWork, 1)
	failed := make(chan struct{}) // closed when sending failed
	sendErr := make(chan error, 1)
	go func() {
		defer close(fw.sendDone)
		var err error
		for {
			select {
			case req := <-fw.fenceReqs:
				if err == nil {
					marked, aerr := fw.acquire(sendCtx, req.parts)
					req.done <- fenceResult{marked, aerr}
				} else {
					req.done <- fenceResult{err: err}
				}
				continue
			case w, ok := <-work:
				if !ok {
					sendErr <- err
					return
				}
				if err != nil {
					fw.drop(w)
					continue
				}
				if err = fw.send(sendCtx, w); err != nil {
					close(failed)
				}
			}
		}
	}()
	fetchErr := fw.fetchLoop(ctx, work, failed)
	close(work)
	if err := <-sendErr; err != nil {
		return err
	}
	return fetchErr
}

// fetchLoop fetches the partitions that are copying and hands what it got to
// the send goroutine. Each source leader has at most one Fetch request out;
// a response is taken as soon as it arrives and its leader asked again, so a
// leader with nothing new (its request waits fetch.max.wait.ms) does not hold
// back the others.
func (fw *forwarder) fetchLoop(ctx context.Context, work chan<- fwdWork, failed <-chan struct{}) error {
	r := fw.r
	idle := r.o.Flow.ConsumerPollTimeout
	if idle <= 0 || idle > 100*time.Millisecond {
		idle = 100 * time.Millisecond
	}
	results := make(chan fetchResult)
	out := map[int32]bool{}           // leaders with a request out
	fetching := map[*partition]bool{} // partitions in a request out
	defer func() {
		for range out {
			<-results // every request ends with ctx
		}
	}()
	for {
		r.retryStalled()
		if err := ctx.Err(); err != nil {
			return err
		}
		var parts []*partition
		r.eachPartition(func(p *partition) {
			if !p.paused && !p.failed.Load() && !p.removed.Load() && !fetching[p] {
				parts = append(parts, p)
			}
		})
		if len(parts) > 0 {
			by, err := fw.sourceLeaders(ctx, parts)
			if err != nil && ctx.Err() == nil {
				r.m.error(r.flow, reasonFetch)
				r.log.Warn("source metadata; retried", zap.Error(err))
			}
			for leader, ps := range by {
				if out[leader] {
					continue // asked at the leader's next request
				}
				out[leader] = true
				for _, p := range ps {
					fetching[p] = true
				}
				// The request is built here, not in its goroutine: it
				// reads fw.src and the partitions' next offsets.
				res := fetchResult{leader: leader, parts: ps, names: map[[16]byte]string{}, at: map[*partition]int64{}}
				go fw.fetchFrom(ctx, res, fw.fetchRequest(ps, res), results)
			}
		}
		if len(out) == 0 {
			sleep(ctx, idle)
			continue
		}
		var res fetchResult
		select {
		case res = <-results:
		case <-failed:
			return nil // run returns the send error
		case <-ctx.Done():
			return ctx.Err()
		}
		delete(out, res.leader)
		for _, p := range res.parts {
			delete(fetching, p)
		}
		if res.err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			fw.srcStale.Store(true)
			r.m.error(r.flow, reasonFetch)
			r.log.Warn("fetch from source; retried", zap.Int32("broker", res.leader), zap.Error(res.err))
			sleep(ctx, idle)
			continue
		}
		w := make(fwdWork)
		fw.takeResponse(ctx, res, w)
		if len(w) == 0 {
			if fw.troubled {
				fw.troubled = false
				sleep(ctx, idle)
			}
			continue
		}
		select {
		case work <- w:
		case <-failed:
			fw.drop(w)
			return nil
		case <-ctx.Done():
			fw.drop(w)
			return ctx.Err()
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// loadMeta fills meta with the topics' IDs and leaders from cl.
func loadMeta(ctx context.Context, cl *kgo.Client, meta map[string]topicMeta, topics []string) error {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || t.ErrorCode != 0 {
			continue
		}
		tm := topicMeta{id: t.TopicID, leaders: make(map[int32]int32, len(t.Partitions))}
		for _, p := range t.Partitions {
			if p.ErrorCode == 0 && p.Leader >= 0 {
				tm.leaders[p.Partition] = p.Leader
			}
		}
		meta[*t.Topic] = tm
	}
	return nil
}

// leaders groups parts by the leader of pick(p) in meta, reloading meta when
// it is stale or lacks one of them. Partitions without a known leader are
// left out.
func leaders(ctx context.Context, cl *kgo.Client, meta map[string]topicMeta, stale bool, parts []*partition, pick func(*partition) string) (map[int32][]*partition, error) {
	missing := stale
	for _, p := range parts {
		if _, ok := meta[pick(p)].leaders[p.partition]; !ok {
			missing = true
		}
	}
	if missing {
		var topics []string
		seen := map[string]bool{}
		for _, p := range parts {
			if t := pick(p); !seen[t] {
				seen[t] = true
				topics = append(topics, t)
			}
		}
		clear(meta)
		if err := loadMeta(ctx, cl, meta, topics); err != nil {
			return nil, err
		}
	}
	by := make(map[int32][]*partition)
	for _, p := range parts {
		if l, ok := meta[pick(p)].leaders[p.partition]; ok {
			by[l] = append(by[l], p)
		}
	}
	return by, nil
}

func sourceTopic(p *partition) string { return p.topic }
func remoteTopic(p *partition) string { return p.remote }

// sourceLeaders groups parts by source leader, leaving out partitions
// without a known leader and those of a topic that is not the incarnation
// being copied.
func (fw *forwarder) sourceLeaders(ctx context.Context, parts []*partition) (map[int32][]*partition, error) {
	r := fw.r
	by, err := leaders(ctx, r.o.Source, fw.src, fw.srcStale.Swap(false), parts, sourceTopic)
	if err != nil {
		fw.srcStale.Store(true)
		return nil, err
	}
	for leader, ps := range by {
		// A topic whose ID is not the incarnation being copied was
		// deleted and recreated: it is not fetched, and the next refresh
		// stops copying it (recreate.go), as kgo's consumer, which keeps
		// fetching by the old ID, leaves it for the refresh to find.
		ps = slices.DeleteFunc(ps, func(p *partition) bool {
			id, known := r.inc.id(p.topic)
			return known && [16]byte(id) != fw.src[p.topic].id
		})
		if len(ps) == 0 {
			delete(by, leader)
		} else {
			by[leader] = ps
		}
	}
	if len(by) < len(parts) {
		for _, p := range parts {
			if _, ok := fw.src[p.topic].leaders[p.partition]; !ok {
				fw.srcStale.Store(true) // ask again for the leaderless
				break
			}
		}
	}
	return by, nil
}

// fetchResult is one Fetch request's outcome.
type fetchResult struct {
	leader int32
	parts  []*partition
	names  map[[16]byte]string  // topic IDs of the request, for responses that name only IDs
	at     map[*partition]int64 // the offset each partition was fetched at
	resp   *kmsg.FetchResponse
	err    error
}

// fetchFrom sends req to res.leader and reports on results.
func (fw *forwarder) fetchFrom(ctx context.Context, res fetchResult, req *kmsg.FetchRequest, results chan<- fetchResult) {
	resp, err := fw.r.o.Source.Broker(int(res.leader)).Request(ctx, req)
	if err == nil {
		res.resp = resp.(*kmsg.FetchResponse)
		err = kerr.ErrorForCode(res.resp.ErrorCode)
	}
	res.err = err
	results <- res
}

// fetchRequest builds the Fetch request for ps at their next offsets, noting
// topic IDs and offsets in res.
func (fw *forwarder) fetchRequest(ps []*partition, res fetchResult) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = fw.maxWait
	req.MinBytes = 1
	req.MaxBytes = fw.fetchMax
	if fw.isolation == kgo.ReadCommitted() {
		req.IsolationLevel = 1
	}
	req.SessionID, req.SessionEpoch = 0, -1
	idx := map[string]int{}
	for _, p := range ps {
		i, ok := idx[p.topic]
		if !ok {
			i = len(req.Topics)
			idx[p.topic] = i
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic, rt.TopicID = p.topic, fw.src[p.topic].id
			res.names[rt.TopicID] = p.topic
			req.Topics = append(req.Topics, rt)
		}
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = p.partition
		rp.FetchOffset = p.next
		res.at[p] = p.next
		rp.CurrentLeaderEpoch = -1
		rp.LogStartOffset = -1
		rp.PartitionMaxBytes = fw.partitionMax
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	return req
}

// takeResponse turns a Fetch response into batches to send, advancing each
// partition's next offset. Fetch goroutine only.
func (fw *forwarder) takeResponse(ctx context.Context, res fetchResult, w fwdWork) {
	find := map[tp]*partition{}
	for _, p := range res.parts {
		find[tp{p.topic, p.partition}] = p
	}
	for ti := range res.resp.Topics {
		rt := &res.resp.Topics[ti]
		topic := rt.Topic
		if topic == "" {
			topic = res.names[rt.TopicID]
		}
		for pi := range rt.Partitions {
			rp := &rt.Partitions[pi]
			p := find[tp{topic, rp.Partition}]
			if p == nil || p.failed.Load() || p.removed.Load() || res.at[p] != p.next {
				continue // failed, gone, or restarted from elsewhere since
			}
			switch err := kerr.ErrorForCode(rp.ErrorCode); {
			case err == nil:
			case errors.Is(err, kerr.OffsetOutOfRange):
				fw.outOfRange(ctx, p)
				continue
			case errors.Is(err, kerr.NotLeaderForPartition), errors.Is(err, kerr.FencedLeaderEpoch),
				errors.Is(err, kerr.UnknownLeaderEpoch), errors.Is(err, kerr.LeaderNotAvailable),
				errors.Is(err, kerr.ReplicaNotAvailable), errors.Is(err, kerr.KafkaStorageError),
				errors.Is(err, kerr.OffsetNotAvailable):
				fw.srcStale.Store(true)
				fw.troubled = true
				continue
			default:
				fw.srcStale.Store(true)
				fw.fetchError(p, err)
				continue
			}
			if end := endOf(rp.HighWatermark, rp.LastStableOffset); end > p.end.Load() {
				p.end.Store(end)
			}
			if bs := fw.take(p, rp); len(bs) > 0 {
				w[p] = bs
			}
		}
	}
}

// take turns one partition's fetched bytes into batches to send.
func (fw *forwarder) take(p *partition, rp *kmsg.FetchResponseTopicPartition) []*fwdBatch {
	var raws []rawBatch
	forward := true
	for in := rp.RecordBatches; ; {
		rb, rest, ok := nextBatch(in)
		if !ok {
			break
		}
		in = rest
		if rb.magic == 2 && rb.last() < p.next {
			continue // wholly before the resume offset
		}
		raws = append(raws, rb)
		forward = forward && rb.forwardable(p.next)
	}
	if len(raws) == 0 {
		return nil
	}
	if !forward || coalesce(raws) {
		return fw.reencode(p, rp)
	}
	r := fw.r
	r.checkContinuity(p, raws[0].base, rp.LogStartOffset)
	r.age.Observe(time.Since(time.UnixMilli(raws[0].firstTS)).Seconds())
	epoch := p.epoch.Load()
	out := make([]*fwdBatch, 0, len(raws))
	for _, rb := range raws {
		out = append(out, &fwdBatch{p: p, epoch: epoch, b: rb.b, up0: rb.base, n: int(rb.count), maxTS: rb.maxTS, size: len(rb.b)})
		p.inflight.Add(int64(rb.count))
		p.lastData = rb.last()
		p.next = rb.last() + 1
	}
	return out
}

// reencode decodes a partition's fetched bytes as the record path would and
// encodes the records to copy into batches of the forwarder's own.
func (fw *forwarder) reencode(p *partition, rp *kmsg.FetchResponseTopicPartition) []*fwdBatch {
	r := fw.r
	fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
		KeepControlRecords: true,
		Offset:             p.next,
		IsolationLevel:     fw.isolation,
		Topic:              p.topic,
		Partition:          p.partition,
	}, rp, fw.decompressor, nil)
	if fp.Err != nil {
		fw.fetchError(p, fp.Err)
	}
	if len(fp.Records) == 0 {
		if next > p.next {
			p.next = next // aborted data only
		}
		return nil
	}
	r.checkContinuity(p, fp.Records[0].Offset, rp.LogStartOffset)
	r.age.Observe(time.Since(fp.Records[0].Timestamp).Seconds())
	epoch := p.epoch.Load()
	var out []*fwdBatch
	var chunk []*kgo.Record
	flush := func() {
		if len(chunk) > 0 {
			out = append(out, fw.encode(p, epoch, chunk, func(rec *kgo.Record) int64 { return rec.Offset }))
			p.inflight.Add(int64(len(chunk)))
			chunk = nil
		}
	}
	size := 0
	for _, rec := range fp.Records {
		if rec.Attrs.IsControl() {
			continue
		}
		n := recordSize(rec)
		if size > 0 && size+n > maxEncodedBatch {
			flush()
			size = 0
		}
		chunk, size = append(chunk, rec), size+n
		p.lastData = rec.Offset
	}
	flush()
	last := fp.Records[len(fp.Records)-1]
	p.next = max(next, last.Offset+1)
	if last.Attrs.IsControl() {
		p.markerAfter.Store(p.lastData)
		p.markerEnd.Store(p.next)
	}
	return out
}

// outOfRange handles a fetch offset the source no longer (or not yet) has:
// below the log start, retention removed records before they were copied,
// which is counted; above the end, the partition was truncated or
// recreated. Either way copying resumes at the log start, as the record
// path's consumer does.
func (fw *forwarder) outOfRange(ctx context.Context, p *partition) {
	r := fw.r
	starts, err := r.o.SourceAdmin.ListStartOffsets(ctx, p.topic)
	if err != nil {
		fw.fetchError(p, err)
		return
	}
	o, ok := starts.Lookup(p.topic, p.partition)
	switch {
	case !ok:
		fw.fetchError(p, errors.New("list start offset: the partition is missing from the response"))
		return
	case o.Err != nil:
		fw.fetchError(p, fmt.Errorf("list start offset: %w", o.Err))
		return
	}
	r.checkContinuity(p, o.Offset, o.Offset)
	p.next = o.Offset
}

// fetchError reports a fetch error of p (fetch goroutine only).
func (fw *forwarder) fetchError(p *partition, err error) {
	fw.troubled = true
	fw.r.fetchError(p.topic, p.partition, err)
}

// drop settles batches that will not be sent.
func (fw *forwarder) drop(w fwdWork) {
	for p, bs := range w {
		for _, b := range bs {
			p.inflight.Add(-int64(b.n))
		}
	}
}

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
	backoff := 50 * time.Millisecond
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
			r.m.error(r.flow, reasonProduce)
			r.log.Warn("target metadata; retried", zap.Error(err))
			sleep(ctx, 200*time.Millisecond)
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
			backoff = min(2*backoff, 2*time.Second)
			r.m.error(r.flow, reasonProduce)
			r.log.Warn("target did not take batches; re-sent with the same sequence numbers", zap.Duration("backoff", backoff), zap.Error(retry))
			sleep(ctx, backoff)
			continue
		}
		backoff = 50 * time.Millisecond
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
					r.fail(p, b.up(0), fmt.Errorf("%w; splitting it: %v", err, derr))
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

package replicator

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/config"
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
// A Produce request carries one batch per partition, and a partition is in
// one request out at a time (each target leader has one out per
// connection, see sendLoop), so each partition has one batch in flight: a
// refused batch leaves no later batch of its partition written. Retriable
// errors re-send the same batch with the same sequence, which the broker
// de-duplicates; an error that loses the producer's state (unknown producer
// id, out-of-order sequence) ends the run, and the restart's reconciliation
// finds what the target already holds.
//
// Fetching and producing overlap: one goroutine fetches, another sends
// what was fetched (sendLoop), each target leader on its own.

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
	// lanes are the source clients Fetch requests go on: Source, and
	// Options.SourceSecond when given, so that a far broker's two requests
	// out (see fetchLoop) each have a connection. One lane: no
	// overlapping requests.
	lanes []*kgo.Client
	// sendLanes are the target clients Produce requests go on: Target,
	// and Options.TargetSecond when given (see sendLoop).
	sendLanes []*kgo.Client
	// farRTT is mm2go.fetch.far.threshold.ms (see far).
	farRTT time.Duration

	// srcStale and dstStale ask for the source's and the target's
	// metadata to be reloaded before the next request.
	srcStale, dstStale atomic.Bool

	// listed are source topics discovery listed just now, with the
	// partitions it started copying: the fetch goroutine takes them into
	// src before its next request instead of asking for them again.
	listedMu sync.Mutex
	listed   map[string]topicMeta

	// Fetch goroutine only. troubled is set when a response had errors,
	// so that the loop pauses instead of asking again at once.
	src      map[string]topicMeta
	troubled bool
	// rtt is the measured round trip to each source broker (-1 while
	// being measured); see far.
	rttMu sync.Mutex
	rtt   map[int32]time.Duration
	// Send goroutine only.
	dst           map[string]topicMeta
	txnID         string // the flow's transactional id under mm2go.copy.fencing = epoch, else ""
	producerID    int64
	producerEpoch int16
	fenced        map[tp]bool // remote (target) partitions the producer id and epoch cover (with fencing: have the epoch's marker)
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
	// asIs: the batch goes as it is, never merged (mergeHead): it went out
	// before (the target may hold it under its sequence numbers), or it is
	// a half of a batch the target refused as too large.
	asIs bool
	// sent: the batch went out and has no answer yet that settles it (a
	// request error or a retriable one): the target may have written it.
	// Only the same producer id, epoch and sequence sent again are known
	// to the target as a duplicate, so the batch is sent again until
	// answered before any change of those (see unsure).
	sent bool
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
		farRTT:         r.o.Flow.FetchFarThreshold,
		decompressor:   kgo.DefaultDecompressor(),
		src:            make(map[string]topicMeta),
		rtt:            make(map[int32]time.Duration),
		dst:            make(map[string]topicMeta),
		fenced:         make(map[tp]bool),
		fenceReqs:      make(chan fenceRequest),
		sendDone:       make(chan struct{}),
	}
	if codecs, _ := dst.OptValue(kgo.ProducerBatchCompression).([]kgo.CompressionCodec); len(codecs) > 0 {
		// An error leaves it nil: uncompressed, as franz-go then sends.
		fw.compressor, _ = kgo.DefaultCompressor(codecs...)
	}
	fw.lanes = []*kgo.Client{src}
	fw.sendLanes = []*kgo.Client{r.o.Target}
	if r.o.TargetSecond != nil {
		fw.sendLanes = append(fw.sendLanes, r.o.TargetSecond)
	}
	if r.o.SourceSecond != nil {
		fw.lanes = append(fw.lanes, r.o.SourceSecond)
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

// learnSource takes the source metadata of topics discovery listed as it
// started copying partitions of them (their IDs and leaders), in place of
// the source reload ForceMetadataRefresh asks for: across regions the
// first Fetch then waits for no Metadata round trip. The target's is
// reloaded.
func (fw *forwarder) learnSource(topics map[string]kadm.TopicDetail) {
	fw.listedMu.Lock()
	if fw.listed == nil {
		fw.listed = map[string]topicMeta{}
	}
	for name, d := range topics {
		fw.listed[name] = metaOf(d)
	}
	fw.listedMu.Unlock()
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
	_, err := fw.acquire(sendCtx, parts, false)
	fw.started = err == nil
	fw.startMu.Unlock()
	if err != nil {
		return err
	}
	// The send loop takes work while it holds less than queueBound, so the
	// fetch loop runs ahead of the target by at most that, one fetch here
	// and the one in its hands.
	work := make(chan fwdWork, 1)
	failed := make(chan struct{}) // closed when sending failed
	sendErr := make(chan error, 1)
	go func() {
		defer close(fw.sendDone)
		err := fw.sendLoop(sendCtx, work)
		if err != nil {
			close(failed)
		}
		// What the fetch loop still hands over is dropped, and fence
		// requests are refused, until it stopped.
		refused := err
		if refused == nil {
			refused = errForwarderStopped
		}
		for {
			select {
			case req := <-fw.fenceReqs:
				req.done <- fenceResult{err: refused}
			case w, ok := <-work:
				if !ok {
					sendErr <- err
					return
				}
				fw.drop(w)
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

package replicator

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mm2go/mm2go/internal/loop"
	"github.com/mm2go/mm2go/internal/mm2metrics"
	"github.com/mm2go/mm2go/internal/offsetmap"
	"github.com/mm2go/mm2go/policy"
)

// partition is the copy state of one source partition.
//
// Ownership: the poll loop owns next, lastData, paused, retryAt and backoff;
// the producer's promise goroutine (kgo calls promises serially) changes the
// offset map and sync state under mu, which the flush loop reads; everything
// else read across goroutines is atomic.
type partition struct {
	topic     string // source topic
	remote    string // target topic
	partition int32

	// epoch increments each time copying (re)starts from stored progress, so
	// that acknowledgements of records sent before a failure are ignored.
	epoch atomic.Uint32
	// acked is the last upstream offset the target acknowledged without a
	// failure before it in this epoch, or the resume point minus one.
	acked atomic.Int64
	// flushed is the last upstream offset stored in the progress topic.
	flushed atomic.Int64
	// end is the source partition's end (high watermark, or last stable
	// offset under read_committed) as last seen by a fetch or listing.
	end atomic.Int64
	// inflight counts records handed to the producer and not yet settled.
	inflight atomic.Int64
	// failed is set by the promise goroutine when a record could not be
	// written; the poll loop then pauses the partition and retries it.
	failed atomic.Bool

	// markerEnd and markerAfter let lag count trailing transaction markers
	// as copied: once the upstream offset markerAfter is acknowledged, the
	// position is markerEnd.
	markerEnd, markerAfter atomic.Int64

	// removed is set when the source topic vanished or left the filter.
	removed atomic.Bool
	// ackedTS is the timestamp (Unix ms) of the last acknowledged record.
	ackedTS atomic.Int64

	// Poll loop only.
	next     int64 // next upstream offset expected from the fetcher; -1 unknown
	lastData int64 // upstream offset of the last data record handed to the producer
	paused   bool
	retryAt  time.Time
	backoff  loop.Backoff
	// fetchSize is what the batches mode's next Fetch asks of the
	// partition at most (0: max.partition.fetch.bytes); see
	// forwarder.resize.
	fetchSize int32
	// cut is the size of the batch the partition's last response ended
	// in the middle of (0: none), largest that of the largest whole batch
	// in it: the next Fetch asks for whole batches (fetchAsk).
	cut, largest int32

	// seq is the sequence number of the partition's next batch in the
	// batches copy mode; the forwarder's send goroutine only.
	seq int32

	// Guarded by mu: the exact offset map and MM2's offset syncs, changed
	// by the promise goroutine per acknowledged record, taken by the flush.
	mu       sync.Mutex
	seg      offsetmap.Segment // the open segment, valid when segOpen
	segOpen  bool
	segDirty bool                // the open segment changed since it was last taken
	closed   []offsetmap.Segment // closed segments not yet written
	imported []offsetmap.Imported
	downNext int64 // downstream offset the next record is expected at
	syncer   syncDecider
	syncs    []policy.OffsetSync // syncs MM2's rule says must be sent
	delayed  policy.OffsetSync   // the newest position, sent at the next flush
	hasDelay bool

	// Flush loop only.
	posWritten offsetmap.Position

	m   partitionMetrics
	mm2 *mm2metrics.Partition // nil when MM2's names are not exported

	lastErr atomic.Pointer[PartitionError] // the target's last refusal, for the status page
}

type partitionMetrics struct {
	records prometheus.Counter
	bytes   prometheus.Counter
}

// start describes where copying of a partition resumes and what is known of
// the offset map there.
type start struct {
	// from is the first upstream offset to fetch; -1 means the reset
	// policy decides (nothing stored).
	from int64
	// stored is the offset in the progress topic (-1 if none).
	stored int64
	// open is the segment copying continues, if the last copied record is
	// known; downNext is the downstream offset of the next record.
	open     *offsetmap.Segment
	downNext int64
	// imported are the previous replicator's offset syncs, written to the
	// offset map with the first flush.
	imported []offsetmap.Imported
}

func newPartition(topic, remote string, p int32, st start, lagMax int64, m partitionMetrics) *partition {
	pt := &partition{topic: topic, remote: remote, partition: p, next: st.from, lastData: st.from - 1, m: m}
	pt.acked.Store(st.from - 1)
	pt.flushed.Store(st.stored)
	pt.markerEnd.Store(-1)
	pt.end.Store(-1)
	pt.syncer = newSyncDecider(lagMax)
	pt.downNext = st.downNext
	pt.posWritten = offsetmap.Position{Next: -1, DownNext: -1}
	if st.open != nil {
		pt.seg, pt.segOpen = *st.open, true
	}
	pt.imported = st.imported
	return pt
}

// observe records that upstream offset up was acknowledged at downstream
// offset down: it extends the open segment or starts a new one, and applies
// MM2's sync rule. Callers hold mu.
func (p *partition) observe(up, down int64, syncs bool) {
	if p.segOpen && up == p.seg.Last+1 && down == p.seg.LastDown()+1 {
		p.seg.Last = up
	} else {
		if p.segOpen {
			p.closed = append(p.closed, p.seg)
		}
		p.seg = offsetmap.Segment{Topic: p.topic, Partition: p.partition, From: up, Last: up, Down: down}
		p.segOpen = true
	}
	p.segDirty = true
	p.downNext = down + 1
	if syncs {
		s := policy.OffsetSync{Topic: p.topic, Partition: p.partition, UpstreamOffset: up, DownstreamOffset: down}
		if p.syncer.update(up, down) {
			p.syncs = append(p.syncs, s)
			p.hasDelay = false
		} else {
			p.delayed, p.hasDelay = s, true
		}
	}
}

// observeRun is observe for n records at consecutive offsets from up and
// down (a batch the target took whole): the same segments and offset syncs,
// worked out per run instead of per record. Callers hold mu.
func (p *partition) observeRun(up, down int64, n int, syncs bool) {
	p.observe(up, down, syncs)
	if n <= 1 {
		return
	}
	last := int64(n - 1)
	p.seg.Last = up + last // observe opened or extended the segment with up
	p.downNext = down + last + 1
	if !syncs {
		return
	}
	// Inside the run neither offset jumps, so MM2's rule only fires each
	// time the newest sync falls offset.lag.max behind.
	d := &p.syncer
	for next := d.lastSync + 1 + d.lagMax; next <= down+last; next = d.lastSync + 1 + d.lagMax {
		d.lastSync = next
		p.syncs = append(p.syncs, policy.OffsetSync{Topic: p.topic, Partition: p.partition, UpstreamOffset: up + next - down, DownstreamOffset: next})
	}
	d.prevUp, d.prevDown = up+last, down+last
	if d.lastSync == down+last {
		p.hasDelay = false
	} else {
		p.delayed = policy.OffsetSync{Topic: p.topic, Partition: p.partition, UpstreamOffset: up + last, DownstreamOffset: down + last}
		p.hasDelay = true
	}
}

// position is where copying stands: the next upstream offset to copy, past
// the acknowledged records and any transaction markers after them.
func (p *partition) position() int64 {
	acked := p.acked.Load()
	pos := acked + 1
	if me := p.markerEnd.Load(); me > pos && acked >= p.markerAfter.Load() {
		pos = me
	}
	return pos
}

// lag is the number of source offsets not yet acknowledged by the target, or
// -1 when the end is not known yet.
func (p *partition) lag() int64 {
	end := p.end.Load()
	if end < 0 {
		return -1
	}
	return max(end-p.position(), 0)
}

// pending is what a partition has to write at a flush.
type pending struct {
	p        *partition
	progress int64 // upstream offset for the progress topic, -1 if unchanged
	segs     []offsetmap.Segment
	pos      *offsetmap.Position
	syncs    []policy.OffsetSync
	imported []offsetmap.Imported
}

// take removes what the partition has to write. After a failed write, give
// puts it back.
func (p *partition) take() pending {
	pd := pending{p: p, progress: -1}
	if a := p.acked.Load(); a > p.flushed.Load() {
		pd.progress = a
	}
	p.mu.Lock()
	pd.segs = p.closed
	p.closed = nil
	pd.imported = p.imported
	p.imported = nil
	if p.segDirty {
		pd.segs = append(pd.segs, p.seg)
		p.segDirty = false
	}
	pd.syncs = p.syncs
	p.syncs = nil
	if p.hasDelay {
		pd.syncs = append(pd.syncs, p.delayed)
		p.hasDelay = false
	}
	downNext := p.downNext
	p.mu.Unlock()
	pos := offsetmap.Position{Topic: p.topic, Partition: p.partition, Next: p.position(), DownNext: downNext}
	if pos.Next >= 0 && (pos.Next != p.posWritten.Next || pos.DownNext != p.posWritten.DownNext) {
		pd.pos = &pos
	}
	return pd
}

func (pd pending) empty() bool {
	return pd.progress < 0 && len(pd.segs) == 0 && pd.pos == nil && len(pd.syncs) == 0 && len(pd.imported) == 0
}

// give puts back what a failed write did not store, so the next flush
// writes it. Segments and syncs written later supersede or follow these.
func (p *partition) give(pd pending) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(pd.segs); n > 0 {
		// The last taken segment may be the open one; rewriting it is
		// harmless (same key, a newer value follows).
		p.closed = append(pd.segs, p.closed...)
	}
	p.syncs = append(pd.syncs, p.syncs...)
	p.imported = append(pd.imported, p.imported...)
}

// batch is one fetched run of records of one partition handed to the
// producer together. Its metas are allocated once per batch; each record's
// Context points at its own meta so the promise learns the upstream offset
// without an allocation per record.
type batch struct {
	p     *partition
	epoch uint32
	metas []recMeta
}

// recMeta is what the promise needs to know about a produced record. It
// implements context.Context (never cancelled) so that it can ride in
// kgo.Record.Context; kgo then falls back to the Produce context for
// cancellation. Values are looked up in the context the record was fetched
// with, where kgo keeps what Record.Recycle needs.
type recMeta struct {
	b    *batch
	up   int64           // upstream offset
	pool context.Context // the record's Context as fetched, may be nil
}

func (*recMeta) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*recMeta) Done() <-chan struct{}       { return nil }
func (*recMeta) Err() error                  { return nil }
func (m *recMeta) Value(key any) any {
	if m.pool == nil {
		return nil
	}
	return m.pool.Value(key)
}

var _ context.Context = (*recMeta)(nil)

// txnMark is the copy state of a partition when an exactly-once transaction
// first handed it records; an aborted transaction puts it back (rollback).
type txnMark struct {
	acked             int64
	seg               offsetmap.Segment
	segOpen, segDirty bool
	closed            []offsetmap.Segment
	imported          []offsetmap.Imported
	downNext          int64
	syncer            syncDecider
	syncs             []policy.OffsetSync
	delayed           policy.OffsetSync
	hasDelay          bool
}

// mark returns p's state for a rollback. Nothing of p is in flight.
func (p *partition) mark() txnMark {
	p.mu.Lock()
	defer p.mu.Unlock()
	return txnMark{
		acked: p.acked.Load(), seg: p.seg, segOpen: p.segOpen, segDirty: p.segDirty,
		closed: slices.Clone(p.closed), imported: slices.Clone(p.imported), downNext: p.downNext,
		syncer: p.syncer, syncs: slices.Clone(p.syncs), delayed: p.delayed, hasDelay: p.hasDelay,
	}
}

// rollback puts back p's state of m after the transaction that copied
// records of p since was aborted: copying resumes right after m's last
// acknowledged offset, in a new epoch. Poll loop only, with nothing of p in
// flight; the caller moves the fetch position.
func (p *partition) rollback(m txnMark) {
	p.mu.Lock()
	p.acked.Store(m.acked)
	p.seg, p.segOpen, p.segDirty = m.seg, m.segOpen, m.segDirty
	p.closed, p.imported, p.downNext = m.closed, m.imported, m.downNext
	p.syncer, p.syncs, p.delayed, p.hasDelay = m.syncer, m.syncs, m.delayed, m.hasDelay
	p.mu.Unlock()
	p.epoch.Add(1)
	p.next, p.lastData = m.acked+1, m.acked
	p.markerEnd.Store(-1)
}

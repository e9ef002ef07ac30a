package replicator

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// partition is the copy state of one source partition.
//
// Ownership: the poll loop owns next, paused and retryAt; the producer's
// promise goroutine (kgo calls promises serially) owns lastUp and lastDown;
// everything read across goroutines is atomic.
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
	failed  atomic.Bool
	failErr atomic.Value // error

	// markerEnd and markerAfter let lag count trailing transaction markers
	// as copied: once the upstream offset markerAfter is acknowledged, the
	// position is markerEnd.
	markerEnd, markerAfter atomic.Int64

	// Poll loop only.
	next     int64 // next upstream offset expected from the fetcher; -1 unknown
	lastData int64 // upstream offset of the last data record handed to the producer
	paused   bool
	retryAt  time.Time
	backoff  time.Duration

	// removed is set when the source topic vanished or left the filter.
	removed atomic.Bool

	// Promise goroutine only.
	lastUp, lastDown int64

	m partitionMetrics
}

type partitionMetrics struct {
	records prometheus.Counter
	bytes   prometheus.Counter
}

func newPartition(topic, remote string, p int32, resumeAfter int64, m partitionMetrics) *partition {
	pt := &partition{topic: topic, remote: remote, partition: p, next: -1, lastData: resumeAfter, lastUp: -1, lastDown: -1, m: m}
	pt.acked.Store(resumeAfter)
	pt.markerEnd.Store(-1)
	pt.flushed.Store(resumeAfter)
	pt.end.Store(-1)
	if resumeAfter >= 0 {
		pt.next = resumeAfter + 1
	}
	return pt
}

// lag is the number of source offsets not yet acknowledged by the target, or
// -1 when the end is not known yet.
func (p *partition) lag() int64 {
	end := p.end.Load()
	if end < 0 {
		return -1
	}
	acked := p.acked.Load()
	pos := acked + 1
	if me := p.markerEnd.Load(); me > pos && acked >= p.markerAfter.Load() {
		pos = me
	}
	l := end - pos
	if l < 0 {
		return 0
	}
	return l
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
// cancellation.
type recMeta struct {
	b  *batch
	up int64 // upstream offset
}

func (*recMeta) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*recMeta) Done() <-chan struct{}       { return nil }
func (*recMeta) Err() error                  { return nil }
func (*recMeta) Value(any) any               { return nil }

var _ context.Context = (*recMeta)(nil)

// Package replicator copies records of one replication flow from the source
// cluster to the target cluster and records how far it got.
//
// A Replicator discovers the source topics its flow selects, creates their
// remote topics on the target (same partition count, the flow's replication
// factor, the source's non-default configs), and copies every record to the
// same partition of the remote topic with key, value, headers and timestamp
// intact, through the idempotent acks=all producer it is given. Progress is
// the last upstream offset the target acknowledged per partition; it is
// stored in MM2's Connect offsets topic on the target, byte-compatible with
// MM2's dedicated mode, so a restart resumes where the acknowledged copy
// ended and MM2 and mm2go can take a flow over from each other.
//
// Like MM2's MirrorSourceConnector it also grows remote topics when their
// source grows, keeps their configs in step with the source
// (sync.topic.configs.*, topicsync.go) and copies their literal topic ACLs
// (sync.topic.acls.*, aclsync.go). Unlike MM2 it stops copying a source
// topic that was deleted and recreated instead of resuming the new topic at
// the old topic's offset (recreate.go).
//
// The copy path works per fetched batch: one poll loop per replicator (a task
// of the flow), records handed to the producer as fetched, no per-record goroutines or
// allocations. A record the target refuses pauses its partition, which is
// retried with backoff from the last acknowledged offset: nothing is skipped.
//
// The package does not create or close clients (the caller owns them), does
// not translate consumer-group offsets (package checkpoint) and does not emit
// heartbeats (package heartbeat).
package replicator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/internal/itopic"
	"github.com/mm2go/mm2go/internal/offsetmap"
	"github.com/mm2go/mm2go/policy"
)

// Options configure a Replicator. Flow, Policy, Source, SourceAdmin, Target,
// TargetAdmin and TargetReader are required.
type Options struct {
	Flow   *config.Flow
	Policy policy.Policy

	// Source consumes source partitions directly (no group). Build it from
	// the flow's source consumer options followed by ConsumerOpts.
	Source      *kgo.Client
	SourceAdmin *kadm.Client
	// Target writes replicated records and progress. Build it from the
	// flow's target producer options followed by ProducerOpts.
	Target      *kgo.Client
	TargetAdmin *kadm.Client
	// TargetReader reads the progress and offset map topics and the tails
	// of remote partitions; build it with itopic.ReaderOpts.
	TargetReader *kgo.Client
	// SourceReader reads source records when a restart reconciles what the
	// target already holds; build it like Source (same isolation level)
	// with kgo.KeepControlRecords.
	SourceReader *kgo.Client
	// SyncProducer writes MM2's offset syncs when the flow keeps them on
	// the source cluster (offset-syncs.topic.location=source, the
	// default); it may be nil when offset syncs are disabled or on the
	// target, where Target writes them.
	SyncProducer *kgo.Client

	Log        *zap.Logger
	Registerer prometheus.Registerer

	// DrainTimeout bounds how long Run waits at shutdown for in-flight
	// records and the last progress write; default 10s.
	DrainTimeout time.Duration
	// RetryBackoff is the first wait before a stalled partition is retried;
	// it doubles up to MaxRetryBackoff. Defaults 1s and 1m.
	RetryBackoff, MaxRetryBackoff time.Duration
	// LagInterval is how often end offsets are listed for the lag gauges;
	// default 5s.
	LagInterval time.Duration
	// PruneInterval is how often the offset map is pruned of segments
	// below the source's log start; default 1h.
	PruneInterval time.Duration
	// ProgressInterval is how often the log reports progress while a
	// backlog is being copied; default 30s.
	ProgressInterval time.Duration
	// PartitionMetrics adds per-partition lag gauges
	// (mm2go_replicator_partition_lag_records); topics with many partitions
	// multiply the series.
	PartitionMetrics bool

	// Task and Tasks split the flow: this replicator copies the source
	// partitions policy.TaskOf gives to task Task of Tasks, and only task 0
	// syncs topic configs and ACLs. Tasks 0 or 1: it copies every
	// partition. Under mm2go.copy.fencing = epoch each task fences with a
	// transactional id of its own.
	Task, Tasks int
}

// ConsumerOpts are the options the source client needs on top of the flow's
// source consumer settings. Control records are kept so the poll loop sees
// transaction markers as the upstream offset gaps they are; an out-of-range
// position resets to the log start, so a retention loss skips the fewest
// records and is reported (never to the end, which would skip more).
//
// Fetched batches are decoded into pooled buffers that the replicator gives
// back once their records are acknowledged (pool.go), so the options serve
// one client only.
func ConsumerOpts() []kgo.Opt { return consumerOpts(newFetchPool()) }

func consumerOpts(pool *fetchPool) []kgo.Opt {
	return []kgo.Opt{
		kgo.WithPools(pool),
		kgo.WithHooks(pool),
		kgo.KeepControlRecords(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableFetchSessions(),
	}
}

// ProducerOpts are the options the target client needs on top of the flow's
// target producer settings: records go to the partition they were read from,
// and the producer is idempotent with acks=all, whatever the file says, so
// that an acknowledged record is durable and never written twice by a retry.
func ProducerOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	}
}

// Replicator copies one flow. Create it with New and call Run once.
type Replicator struct {
	o      Options
	flow   string
	task   string // Options.Task, the value of the metrics' task label
	log    *zap.Logger
	m      *metrics
	sel    policy.TopicSelector
	pg     *progress
	stored map[string]map[int32]int64 // progress read at start; refresh goroutine only
	maps   map[tp]mapState            // offset map read at start; refresh goroutine only
	// deferred counts the partitions the last discovery left for later
	// (refresh goroutine only); see refreshLoop.
	deferred int

	mapTopic  string      // mm2go's offset map on the target
	syncTopic string      // MM2's offset syncs, "" when disabled
	syncCl    *kgo.Client // writes syncTopic

	mu    sync.Mutex
	parts map[string]map[int32]*partition // source topic -> partition -> state

	inc *incarnations // source topic incarnations copied; see recreate.go
	// flushMu serialises flushes with forgetTopic's tombstones, so that no
	// flush writes a forgotten partition's state after them.
	flushMu sync.Mutex

	// src is the source side's consumer: the Source client, or the
	// forwarder fw in the batches copy mode.
	src feed
	fw  *forwarder

	failMu sync.Mutex
	failed []*partition // partitions the promise goroutine marked failed, for the poll loop

	promise func(*kgo.Record, error)

	// provenance is the flow's mm2go.provenance.headers; origin is the
	// header value it writes (the source alias).
	provenance bool
	origin     []byte

	// readers serializes the refresh and prune loops' use of TargetReader
	// and SourceReader: a client polled by two readers at once would hand
	// each the other's records.
	readers sync.Mutex

	age, latency prometheus.Observer

	// copied counts acknowledged records since start (promise goroutine
	// writes, the flush loop reads) for the progress log.
	copied atomic.Int64
	// Flush loop only: the last progress report.
	reportAt     time.Time
	reportCopied int64

	// caughtUp asks the flush loop for an early flush: a partition's
	// records are all acknowledged up to the source's end (see
	// noteCaughtUp).
	caughtUp chan struct{}
}

// New validates the options and returns a Replicator.
func New(o Options) (*Replicator, error) {
	switch {
	case o.Flow == nil:
		return nil, errors.New("replicator: flow is required")
	case o.Source == nil || o.SourceAdmin == nil || o.Target == nil || o.TargetAdmin == nil || o.TargetReader == nil || o.SourceReader == nil:
		return nil, errors.New("replicator: source, source admin, source reader, target, target admin and target reader clients are required")
	case o.Flow.EmitOffsetSyncsEnabled && o.Flow.OffsetSyncsTopicLocation == config.LocationSource && o.SyncProducer == nil:
		return nil, errors.New("replicator: a sync producer on the source is required for offset-syncs.topic.location=source")
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 10 * time.Second
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = time.Second
	}
	if o.MaxRetryBackoff <= 0 {
		o.MaxRetryBackoff = time.Minute
	}
	if o.LagInterval <= 0 {
		o.LagInterval = 5 * time.Second
	}
	if o.PruneInterval <= 0 {
		o.PruneInterval = time.Hour
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = 30 * time.Second
	}
	if o.Tasks <= 0 {
		o.Tasks = 1
	}
	if o.Task < 0 || o.Task >= o.Tasks {
		return nil, fmt.Errorf("replicator: task %d of %d", o.Task, o.Tasks)
	}
	f := o.Flow
	topics, err := policy.NewFilter(f.Topics, f.TopicsExclude)
	if err != nil {
		return nil, fmt.Errorf("replicator: compile topic filter of %s: %w", f.Name(), err)
	}
	r := &Replicator{
		o:    o,
		flow: f.Name(),
		task: strconv.Itoa(o.Task),
		log:  o.Log.With(zap.String("flow", f.Name())),
		m:    newMetrics(o.Registerer),
		sel: policy.TopicSelector{
			Policy:                o.Policy,
			Topics:                topics,
			HeartbeatsReplication: f.HeartbeatsReplicationEnabled,
			TargetAlias:           f.Target,
		},
		parts:    make(map[string]map[int32]*partition),
		mapTopic: offsetmap.Topic(f.Source),
		inc:      newIncarnations(),
		caughtUp: make(chan struct{}, 1),
	}
	if o.Tasks > 1 {
		r.log = r.log.With(zap.Int("task", o.Task))
	}
	r.m.touch(r.flow, r.task)
	if f.EmitOffsetSyncsEnabled {
		if f.OffsetSyncsTopicLocation == config.LocationTarget {
			r.syncTopic, r.syncCl = o.Policy.OffsetSyncsTopic(f.Source), o.Target
		} else {
			r.syncTopic, r.syncCl = o.Policy.OffsetSyncsTopic(f.Target), o.SyncProducer
		}
	}
	r.provenance, r.origin = f.ProvenanceHeaders, []byte(f.Source)
	r.src = o.Source
	if f.CopyMode == config.CopyBatches { // never with provenance headers (config)
		r.fw = newForwarder(r)
		r.src = r.fw
	}
	r.promise = r.onProduced
	r.age, r.latency = r.m.observers(r.flow)
	return r, nil
}

// Run copies until ctx is cancelled or a fatal error occurs, then drains
// in-flight records and stores progress, bounded by DrainTimeout. It returns
// nil after a cancellation and an error when the flow cannot run (the
// progress topic cannot be created or read, the first discovery fails);
// failures of single partitions or topics are logged, counted and retried,
// not returned.
func (r *Replicator) Run(ctx context.Context) error {
	f := r.o.Flow
	startCtx, cancel := context.WithTimeout(ctx, f.AdminTimeout)
	err := r.ensureTopics(startCtx)
	cancel()
	if err != nil {
		return err
	}
	if r.stored, err = r.pg.load(ctx, r.o.TargetReader, r.log); err != nil {
		return err
	}
	if r.maps, err = r.loadMap(ctx); err != nil {
		return err
	}
	r.inc.load(r.maps)
	startCtx, cancel = context.WithTimeout(ctx, f.AdminTimeout)
	err = r.refresh(startCtx)
	cancel()
	if err != nil {
		return fmt.Errorf("discover topics of %s: %w", f.Name(), err)
	}
	r.updateLag(ctx)
	r.logStart()

	// Records are produced with a context that outlives ctx, so that a
	// shutdown drains what is buffered instead of failing it.
	produceCtx, stopProducing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopProducing()

	g, gctx := errgroup.WithContext(ctx)
	if r.fw != nil {
		g.Go(func() error { return r.forward(gctx, produceCtx) })
	} else {
		g.Go(func() error { return r.pollLoop(gctx, produceCtx) })
	}
	g.Go(func() error { return r.flushLoop(gctx) })
	g.Go(func() error { return r.refreshLoop(gctx) })
	g.Go(func() error { return r.pruneLoop(gctx, r.o.PruneInterval) })
	// Once per flow: on task 0.
	if f.SyncTopicConfigsEnabled && f.SyncTopicConfigsInterval > 0 && r.o.Task == 0 {
		g.Go(func() error { return r.configSyncLoop(gctx) })
	}
	if f.SyncTopicAclsEnabled && f.SyncTopicAclsInterval > 0 && r.o.Task == 0 {
		g.Go(func() error { return r.aclSyncLoop(gctx) })
	}
	runErr := g.Wait()

	drainCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.o.DrainTimeout)
	defer cancel()
	if err := r.o.Target.Flush(drainCtx); err != nil {
		r.log.Warn("drain in-flight records", zap.Error(err))
	}
	stopProducing()
	if err := r.flush(drainCtx); err != nil {
		r.log.Warn("store final progress", zap.Error(err))
	}
	var parts []tp
	r.eachPartition(func(p *partition) { parts = append(parts, tp{p.topic, p.partition}) })
	r.m.forgetTask(r.flow, r.task, parts)
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return runErr
	}
	return nil
}

// ensureTopics creates the flow's internal topics where missing: the
// Connect offsets topic and mm2go's offset map on the target, and MM2's
// offset-syncs topic where the flow keeps it.
func (r *Replicator) ensureTopics(ctx context.Context) error {
	f := r.o.Flow
	n, err := itopic.Ensure(ctx, r.o.TargetAdmin, itopic.Spec{
		Name:              f.OffsetStorageTopic,
		Partitions:        f.OffsetStoragePartitions,
		ReplicationFactor: f.OffsetStorageReplicationFactor,
	})
	if err != nil {
		return fmt.Errorf("ensure progress topic on %s: %w", f.Target, err)
	}
	r.pg = &progress{topic: f.OffsetStorageTopic, partitions: n, source: f.Source, cl: r.o.Target}
	if _, err := itopic.Ensure(ctx, r.o.TargetAdmin, itopic.Spec{
		Name:              r.mapTopic,
		Partitions:        1,
		ReplicationFactor: f.OffsetStorageReplicationFactor,
	}); err != nil {
		return fmt.Errorf("ensure offset map topic on %s: %w", f.Target, err)
	}
	if r.syncTopic == "" {
		return nil
	}
	adm, cluster := r.o.SourceAdmin, f.Source
	if f.OffsetSyncsTopicLocation == config.LocationTarget {
		adm, cluster = r.o.TargetAdmin, f.Target
	}
	if _, err := itopic.Ensure(ctx, adm, itopic.Spec{
		Name:              r.syncTopic,
		Partitions:        1,
		ReplicationFactor: f.OffsetSyncsTopicReplicationFactor,
	}); err != nil {
		return fmt.Errorf("ensure offset-syncs topic on %s: %w", cluster, err)
	}
	return nil
}

func (r *Replicator) logStart() {
	var topics, parts int
	var backlog int64
	r.eachPartition(func(p *partition) {
		parts++
		if l := p.lag(); l > 0 {
			backlog += l
		}
	})
	r.mu.Lock()
	topics = len(r.parts)
	names := make([]string, 0, len(r.parts))
	for t := range r.parts {
		names = append(names, t)
	}
	r.mu.Unlock()
	sort.Strings(names)
	if len(names) > 20 {
		names = append(names[:20], "...")
	}
	r.log.Info("flow started",
		zap.String("source_cluster", r.o.Flow.Source),
		zap.String("target_cluster", r.o.Flow.Target),
		zap.Strings("topic_names", names),
		zap.Int("topics", topics),
		zap.Int("partitions", parts),
		zap.Int64("backlog_records", backlog))
}

// owns reports whether this replicator's task copies a source partition.
func (r *Replicator) owns(topic string, partition int32) bool {
	return policy.TaskOf(topic, partition, r.o.Tasks) == r.o.Task
}

func (r *Replicator) eachPartition(fn func(*partition)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ps := range r.parts {
		for _, p := range ps {
			fn(p)
		}
	}
}

func (r *Replicator) lookup(topic string, p int32) *partition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.parts[topic][p]
}

// forward runs the batches copy mode's forwarder. What it fetched before ctx
// ended is sent until DrainTimeout after that.
func (r *Replicator) forward(ctx, produceCtx context.Context) error {
	sendCtx, cancel := context.WithCancel(produceCtx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(r.o.DrainTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-sendCtx.Done():
		}
	})
	defer stop()
	r.log.Info("copying in the batches mode: fetched batches are forwarded as they are where none of their records must change")
	return r.fw.run(ctx, sendCtx)
}

// pollLoop fetches from the source and hands every record to the producer.
func (r *Replicator) pollLoop(ctx, produceCtx context.Context) error {
	src, dst := r.o.Source, r.o.Target
	poll := r.o.Flow.ConsumerPollTimeout
	if poll <= 0 {
		poll = time.Second
	}
	for {
		r.retryStalled()
		pctx, cancel := context.WithTimeout(ctx, poll)
		fs := src.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		fs.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return
			}
			r.fetchError(t, p, err)
		})
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
			r.checkContinuity(p, fp.Records[0].Offset, fp.LogStartOffset)
			// Read what is needed of the last record now: once handed to
			// the producer a record belongs to it.
			last := fp.Records[len(fp.Records)-1]
			lastOffset, lastSkipped := last.Offset, r.skip(last)
			// Record age is sampled once per fetched batch, by its first
			// record: per-record observations would cost more than the copy.
			r.age.Observe(time.Since(fp.Records[0].Timestamp).Seconds())
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
				dst.Produce(produceCtx, rec, r.promise)
			}
			p.next = lastOffset + 1
			if lastSkipped {
				p.markerAfter.Store(p.lastData)
				p.markerEnd.Store(p.next)
			}
			if end := endOf(fp.HighWatermark, fp.LastStableOffset); end > p.end.Load() {
				p.end.Store(end)
			}
		})
	}
}

// originHeader names the cluster a record was first produced on, when the
// flow's mm2go.provenance.headers is on.
const originHeader = "mm2go.origin"

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
		if h.Key == originHeader {
			return string(h.Value) == r.o.Flow.Target
		}
	}
	return false
}

// stamp adds the origin header to a record produced on the source itself.
func (r *Replicator) stamp(rec *kgo.Record) {
	for _, h := range rec.Headers {
		if h.Key == originHeader {
			return // copied from further upstream: keep its origin
		}
	}
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: originHeader, Value: r.origin})
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
	reason := reasonFetch
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		reason = reasonTopicDeleted
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
		reason = reasonAuthorization
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
	r.latency.Observe(float64(time.Now().UnixMilli()-ts) / 1000)
	p.m.records.Add(float64(n))
	p.m.bytes.Add(float64(size))
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
	reason := reasonProduce
	switch {
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		reason = reasonRecordTooLarge
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed), errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		reason = reasonAuthorization
	case errors.Is(err, context.Canceled):
		return // shutdown; the partition resumes from its progress next time
	}
	r.m.error(r.flow, reason)
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
			if p.backoff == 0 {
				p.backoff = r.o.RetryBackoff
			} else {
				p.backoff = min(2*p.backoff, r.o.MaxRetryBackoff)
			}
			p.retryAt = now.Add(p.backoff)
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

// flushLoop stores progress every offset.flush.interval.ms and refreshes the
// lag gauges.
func (r *Replicator) flushLoop(ctx context.Context) error {
	interval := r.o.Flow.OffsetFlushInterval
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var lastLag, lastFlush time.Time
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		case <-r.caughtUp:
			// Early, but not more often than every caughtUpFlushGap.
			if wait := caughtUpFlushGap - time.Since(lastFlush); wait > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(wait):
				}
			}
		}
		lastFlush = time.Now()
		if err := r.flush(ctx); err != nil && ctx.Err() == nil {
			r.m.error(r.flow, reasonProgressWrite)
			r.log.Warn("store progress; retried at the next interval", zap.Error(err))
		}
		if time.Since(lastLag) >= r.o.LagInterval {
			lastLag = time.Now()
			r.updateLag(ctx)
		}
	}
}

// flush writes what moved since the last flush: progress (MM2's Connect
// offsets) and mm2go's offset map in one request to the target, then MM2's
// offset syncs. What fails to be written is kept for the next flush.
func (r *Replicator) flush(ctx context.Context) error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	var pds []pending
	r.eachPartition(func(p *partition) {
		if pd := p.take(); !pd.empty() {
			pds = append(pds, pd)
		}
	})
	if len(pds) == 0 {
		return nil
	}
	var recs []*kgo.Record
	var segs int
	for _, pd := range pds {
		if pd.progress >= 0 {
			recs = append(recs, r.pg.record(pd.p, pd.progress))
		}
		recs = r.mapRecords(pd, recs)
		segs += len(pd.segs)
	}
	if len(recs) > 0 {
		if err := r.o.Target.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			for _, pd := range pds {
				pd.p.give(pd)
			}
			return fmt.Errorf("write progress and offset map to %s: %w", r.o.Flow.Target, err)
		}
		for _, pd := range pds {
			if pd.progress >= 0 {
				pd.p.flushed.Store(pd.progress)
			}
			if pd.pos != nil {
				pd.p.posWritten = *pd.pos
			}
		}
		r.m.flushed(r.flow)
	}
	var syncs []*kgo.Record
	for _, pd := range pds {
		syncs = r.syncRecords(pd, syncs)
	}
	if len(syncs) > 0 {
		if err := r.syncCl.ProduceSync(ctx, syncs...).FirstErr(); err != nil {
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

// updateLag lists the source end offsets of the assigned topics and sets the
// lag gauges.
func (r *Replicator) updateLag(ctx context.Context) {
	var topics []string
	r.mu.Lock()
	for t := range r.parts {
		topics = append(topics, t)
	}
	r.mu.Unlock()
	if len(topics) == 0 {
		return
	}
	var ends kadm.ListedOffsets
	var err error
	if r.o.Flow.SourceIsolationLevel == config.ReadCommitted {
		ends, err = r.o.SourceAdmin.ListCommittedOffsets(ctx, topics...)
	} else {
		ends, err = r.o.SourceAdmin.ListEndOffsets(ctx, topics...)
	}
	if err != nil {
		r.log.Debug("list source end offsets", zap.Error(err))
		return
	}
	sums := make(map[string]int64, len(topics))
	secs := make(map[string]float64, len(topics))
	now := time.Now().UnixMilli()
	r.mu.Lock()
	for t, ps := range r.parts {
		for i, p := range ps {
			if o, ok := ends.Lookup(t, i); ok && o.Err == nil {
				p.end.Store(o.Offset)
			}
			lag := max(p.lag(), 0)
			sums[t] += lag
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
	r.m.setTopics(r.flow, r.task, len(topics))
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

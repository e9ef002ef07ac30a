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
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/internal/itopic"
	"github.com/mm2go/mm2go/internal/mm2metrics"
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
	// Transactional copies records and writes progress and the offset map
	// of an exactly-once flow (Flow.ExactlyOnce), in transactions; build it
	// from the flow's target producer options followed by
	// TransactionalOpts(policy.TransactionalID(...)) of the task. Required
	// for, and only used by, such a flow.
	Transactional *kgo.Client
	// TargetReader reads the progress and offset map topics and the tails
	// of remote partitions; build it with itopic.ReaderOpts.
	TargetReader *kgo.Client
	// SourceReader reads source records when a restart reconciles what the
	// target already holds; build it like Source (same isolation level)
	// with kgo.KeepControlRecords.
	SourceReader *kgo.Client
	// SourceSecond is a second client of the source, built like Source
	// (ConsumerOpts, its own client id), for the batches copy mode: a far
	// broker's two Fetch requests out, for halves of its partitions while
	// they are behind or overlapping under Flow.FetchOverlap, go on a
	// connection each (see fetchLoop), and it is opened only for such a
	// broker. Nil: one connection, and no overlapping requests. Closed by
	// the caller.
	SourceSecond *kgo.Client
	// TargetSecond is a second client of the target, built like Target
	// (ProducerOpts, its own client id), for the batches copy mode: its
	// Produce requests go on both, a connection each (see the forwarder's
	// sendLoop). Nil: Target alone. Closed by the caller.
	TargetSecond *kgo.Client
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

	// MM2 keeps the figures of MM2's metric names (mm2go
	// --metrics.mm2-names); nil keeps none.
	MM2 *mm2metrics.Exporter
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

// TransactionalOpts are the options of an exactly-once flow's transactional
// target client (Options.Transactional) on top of the flow's target
// producer settings: ProducerOpts, the transactional id id, and retries
// that start after 20 ms, doubling up to a second. A step's first produce
// to a partition meets the markers of the step before still being written
// whenever the coordinator is slower than the copy loop (Kafka answers
// CONCURRENT_TRANSACTIONS, retriable), and franz-go's default first backoff
// is 250 ms; Kafka's Java producer retries that answer after 20 ms.
func TransactionalOpts(id string) []kgo.Opt {
	return append(ProducerOpts(), kgo.TransactionalID(id), kgo.RetryBackoffFn(txnRetryBackoff))
}

// txnRetryBackoff is 20 ms, doubling per failed try up to a second.
func txnRetryBackoff(fails int) time.Duration {
	return min(20*time.Millisecond<<min(max(fails-1, 0), 6), time.Second)
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
	// unsettled holds partitions stopped (stopTopics) with records still
	// in flight to the target, until those are settled: the partition is
	// not copied again before (refresh goroutine only).
	unsettled map[tp]*partition
	// throttle limits the bytes copied per second; nil for no limit.
	throttle *throttle
	// discoveries counts the discovery rounds refreshLoop finished, failed
	// ones included (what a test waits for before it asserts that a
	// round changed nothing).
	discoveries atomic.Int64

	mapTopic  string      // mm2go's offset map on the target
	syncTopic string      // MM2's offset syncs, "" when disabled
	syncCl    *kgo.Client // writes syncTopic

	mu    sync.Mutex
	parts map[string]map[int32]*partition // source topic -> partition -> state

	mm2 *mm2metrics.Task // MM2's metric names; nil when not exported

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

	// txnID is the transactional id of Options.Transactional ("" without
	// one); txnFenced is set by the promise goroutine when a newer
	// producer of that id refused a record.
	txnID     string
	txnFenced atomic.Bool

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
	case o.Flow.ExactlyOnce && o.Transactional == nil:
		return nil, errors.New("replicator: a transactional target client is required for exactly-once")
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
		// Each task takes its share of the flow's limit, so that the flow
		// stays within it wherever its tasks run.
		throttle: newThrottle(float64(f.ThrottleBytesPerSecond) / float64(max(1, o.Tasks))),
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
	if o.Transactional != nil {
		r.txnID, _ = o.Transactional.OptValue(kgo.TransactionalID).(string)
	}
	r.age, r.latency = r.m.observers(r.flow)
	r.mm2 = o.MM2.Task(f.Source, f.Target, o.Task, 0)
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
	if r.fw != nil { // the fetch loop's connections open while the flow starts
		warmCtx, stopWarming := context.WithCancel(ctx)
		var warming sync.WaitGroup
		warming.Go(func() { r.fw.warm(warmCtx) })
		defer warming.Wait()
		defer stopWarming()
	}
	syncCtx, stopSync := context.WithCancel(ctx)
	var syncing sync.WaitGroup
	defer syncing.Wait()
	defer stopSync()
	syncTopic := make(chan error, 1)
	syncing.Go(func() { syncTopic <- r.ensureSyncTopic(syncCtx) })
	startCtx, cancel := context.WithTimeout(ctx, f.AdminTimeout)
	newProgress, newMap, err := r.ensureTopics(startCtx)
	cancel()
	if err != nil {
		return err
	}
	if f.ExactlyOnce {
		if err := r.fenceOlder(ctx); err != nil {
			return err
		}
	}
	// A topic created just now holds nothing: no read (it would wait for
	// the new partitions' leaders).
	r.stored, r.maps = map[string]map[int32]int64{}, map[tp]mapState{}
	if !newProgress {
		if r.stored, err = r.pg.load(ctx, r.o.TargetReader, r.log); err != nil {
			return err
		}
	}
	if !newMap {
		if r.maps, err = r.loadMap(ctx); err != nil {
			return err
		}
	}
	r.inc.load(r.maps)
	startCtx, cancel = context.WithTimeout(ctx, f.AdminTimeout)
	err = r.refresh(startCtx)
	cancel()
	if err != nil {
		return fmt.Errorf("discover topics of %s: %w", f.Name(), err)
	}
	r.setLag() // plan listed the ends: lagLoop lists them again later
	if err := <-syncTopic; err != nil {
		return err
	}
	r.logStart()

	// Records are produced with a context that outlives ctx by
	// DrainTimeout, so that a shutdown drains what is buffered instead of
	// failing it. The final flush below shares the deadline: the whole
	// drain takes DrainTimeout at most, in both copy modes.
	drainCtx, stopDraining := outlive(ctx, r.o.DrainTimeout)
	defer stopDraining()
	produceCtx, stopProducing := context.WithCancel(drainCtx)
	defer stopProducing()

	g, gctx := errgroup.WithContext(ctx)
	switch {
	case f.ExactlyOnce:
		// Progress is stored in each transaction, never apart from it.
		g.Go(func() error { return r.txnLoop(gctx, produceCtx) })
	case r.fw != nil:
		g.Go(func() error { return r.forward(gctx, produceCtx) })
		g.Go(func() error { return r.flushLoop(gctx, produceCtx) })
	default:
		g.Go(func() error { return r.pollLoop(gctx, produceCtx) })
		g.Go(func() error { return r.flushLoop(gctx, produceCtx) })
	}
	g.Go(func() error { return r.lagLoop(gctx) })
	g.Go(func() error { return r.refreshLoop(gctx) })
	g.Go(func() error { return r.pruneLoop(gctx, r.o.PruneInterval) })
	// Once per flow: on task 0.
	if f.SyncTopicConfigsEnabled && f.SyncTopicConfigsInterval > 0 && r.o.Task == 0 {
		g.Go(func() error { return r.configSyncLoop(gctx) })
	}
	if f.SyncTopicAclsEnabled && f.SyncTopicAclsInterval > 0 && r.o.Task == 0 {
		g.Go(func() error { return r.aclSyncLoop(gctx) })
	}
	// When the stop began, for the log of how long each part of it took.
	var stopped atomic.Int64
	defer context.AfterFunc(ctx, func() { stopped.Store(time.Now().UnixNano()) })()
	runErr := g.Wait()

	loopsDone := time.Now()
	var drained time.Time
	if !f.ExactlyOnce { // the copy loop committed or abandoned its last transaction
		if err := r.o.Target.Flush(drainCtx); err != nil {
			r.log.Warn("drain in-flight records", zap.Error(err))
		}
		stopProducing()
		drained = time.Now()
		if err := r.flush(drainCtx); err != nil {
			r.log.Warn("store final progress", zap.Error(err))
		}
	}
	if ctx.Err() != nil {
		// The AfterFunc's goroutine may run after the loops saw ctx end.
		began := loopsDone
		if at := stopped.Load(); at != 0 && at < began.UnixNano() {
			began = time.Unix(0, at)
		}
		fields := []zap.Field{zap.Duration("took", time.Since(began)), zap.Duration("copy_loops", loopsDone.Sub(began))}
		if !drained.IsZero() {
			fields = append(fields, zap.Duration("in_flight_records", drained.Sub(loopsDone)), zap.Duration("final_progress", time.Since(drained)))
		}
		r.log.Info("copy stopped", fields...)
	}
	r.forgetGauges()
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return runErr
	}
	return nil
}

// forgetGauges deletes the task's gauges (see metrics.forgetTask).
func (r *Replicator) forgetGauges() {
	var parts []tp
	r.eachPartition(func(p *partition) { parts = append(parts, tp{p.topic, p.partition}) })
	r.m.forgetTask(r.flow, r.task, parts)
	r.mm2.Close()
}

// ensureTopics creates the flow's internal topics on the target where
// missing: the Connect offsets topic and mm2go's offset map. The two are
// created at once: each creation waits for the controller, and a flow's
// first start waits for both. newProgress and newMap report that it created
// the progress topic or the offset map: they hold nothing yet.
func (r *Replicator) ensureTopics(ctx context.Context) (newProgress, newMap bool, err error) {
	f := r.o.Flow
	var g errgroup.Group
	var progressParts int32
	g.Go(func() error {
		n, created, err := itopic.EnsureCreated(ctx, r.o.TargetAdmin, itopic.Spec{
			Name:              f.OffsetStorageTopic,
			Partitions:        f.OffsetStoragePartitions,
			ReplicationFactor: f.OffsetStorageReplicationFactor,
		})
		if err != nil {
			return fmt.Errorf("ensure progress topic on %s: %w", f.Target, err)
		}
		progressParts, newProgress = n, created
		return nil
	})
	g.Go(func() error {
		_, created, err := itopic.EnsureCreated(ctx, r.o.TargetAdmin, itopic.Spec{
			Name:              r.mapTopic,
			Partitions:        1,
			ReplicationFactor: f.OffsetStorageReplicationFactor,
		})
		if err != nil {
			return fmt.Errorf("ensure offset map topic on %s: %w", f.Target, err)
		}
		newMap = created
		return nil
	})
	if err := g.Wait(); err != nil {
		return false, false, err
	}
	r.pg = &progress{topic: f.OffsetStorageTopic, partitions: progressParts, source: f.Source, cl: r.o.Target}
	return newProgress, newMap, nil
}

// ensureSyncTopic creates MM2's offset-syncs topic where the flow keeps it
// (by default on the source), if missing and offset syncs are on. Run does
// it beside the topic listing and waits for it only before the copy, the
// first to write to it. Before the listing, across a long link, its round
// trips (the admin client's first connections, then the controller's) held
// everything up: in the benchmark's 80 ms link ensureTopics, waiting for it,
// took 533 ms (74 ms without it), and the task took 0.90-1.02 s from its
// assignment to "flow started"; beside the listing 0.77-0.83 s (three runs
// each). legacySyncs, which plan may call
// meanwhile, reads a missing topic as none, as it is while being created.
func (r *Replicator) ensureSyncTopic(ctx context.Context) error {
	if r.syncTopic == "" {
		return nil
	}
	f := r.o.Flow
	ctx, cancel := context.WithTimeout(ctx, f.AdminTimeout)
	defer cancel()
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
	names := r.copiedTopicNames()
	topics = len(names)
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

// outlive returns a context that ends d after ctx ends (or when cancel is
// called): the time a shutdown has to drain.
func outlive(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	out, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var mu sync.Mutex
	var timer *time.Timer
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		timer = time.AfterFunc(d, cancel)
		mu.Unlock()
	})
	return out, func() {
		stop()
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

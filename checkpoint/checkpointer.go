package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/internal/itopic"
	"github.com/mm2go/mm2go/internal/loop"
	"github.com/mm2go/mm2go/internal/metric"
	"github.com/mm2go/mm2go/internal/mm2metrics"
	"github.com/mm2go/mm2go/internal/offsetmap"
	"github.com/mm2go/mm2go/policy"
)

// Options configure a Checkpointer. Flow, SourceAdmin, Target, TargetAdmin,
// MapReader and CheckpointReader are required.
type Options struct {
	// Flow supplies groups / groups.exclude, topics / topics.exclude,
	// heartbeats.replication.enabled, the intervals and enable flags of
	// refresh.groups, emit.checkpoints and sync.group.offsets,
	// checkpoints.topic.replication.factor and admin.timeout.ms.
	Flow *config.Flow
	// Policy is the flow's replication policy: it names the checkpoints
	// topic and the downstream topics.
	Policy policy.Policy

	// SourceAdmin lists the source's consumer groups and fetches their
	// committed offsets.
	SourceAdmin *kadm.Client
	// Target writes checkpoints. It must send a record to the partition in
	// its Partition field (kgo.ManualPartitioner); the replicator's target
	// producer qualifies and may be shared.
	Target *kgo.Client
	// TargetAdmin creates the checkpoints topic and describes, reads and
	// commits the target's consumer groups.
	TargetAdmin *kadm.Client
	// MapReader reads the offset map topic: a client without group options
	// built with itopic.ReaderOpts. Run owns it for its whole life (it reads
	// the topic to its end first, then keeps tailing it); it must not be
	// used for anything else.
	MapReader *kgo.Client
	// CheckpointReader reads the checkpoints topic once at start: a client
	// without group options built with itopic.ReaderOpts. It is not used
	// after start.
	CheckpointReader *kgo.Client

	Log        *zap.Logger
	Registerer prometheus.Registerer
	// MM2 keeps the figures of MM2's metric names (mm2go
	// --metrics.mm2-names); nil keeps none.
	MM2 *mm2metrics.Exporter

	// MaxSegments bounds the exact offset map history kept in memory per
	// partition; 0 means DefaultMaxSegments.
	MaxSegments int
	// InitLocalTopics makes group-offset sync set a group's offsets on a
	// local topic of the target to its log start when the group has a
	// checkpoint for the matching remote topic and no offset on the local
	// one (see the package documentation). Default false here; mm2go turns
	// it on.
	InitLocalTopics bool
}

// Checkpointer emits the checkpoints of one flow and syncs group offsets.
// Create it with New and call Run once.
type Checkpointer struct {
	o        Options
	flow     string
	log      *zap.Logger
	m        *metrics
	sel      policy.TopicSelector
	groupsF  *policy.Filter
	cpTopic  string
	mapTopic string
	idx      *Index
	st       *store
	feed     *offsetmap.Feed

	sw     *switchState // the exact sync's memory; only its loop uses it
	marker string       // commit metadata of the exact sync's own commits

	mu       sync.Mutex
	groups   []string             // selected source groups, sorted; nil until the first refresh succeeded
	missing  map[string]time.Time // selected groups the last listings lacked, since when (refresh only)
	overlaps map[overlapKey]bool
}

// New validates the options and returns a Checkpointer. It fails when a
// required option is missing, when the flow's topic or group patterns do not
// compile, or when the metrics cannot be registered with Registerer.
func New(o Options) (*Checkpointer, error) {
	switch {
	case o.Flow == nil:
		return nil, errors.New("checkpoint: flow is required")
	case o.SourceAdmin == nil || o.Target == nil || o.TargetAdmin == nil || o.MapReader == nil || o.CheckpointReader == nil:
		return nil, errors.New("checkpoint: source admin, target, target admin, map reader and checkpoint reader clients are required")
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	f := o.Flow
	topics, err := policy.NewFilter(f.Topics, f.TopicsExclude)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: compile topic filter of %s: %w", f.Name(), err)
	}
	groups, err := policy.NewFilter(f.Groups, f.GroupsExclude)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: compile group filter of %s: %w", f.Name(), err)
	}
	m := newMetrics(o.Registerer)
	m.init(f.Name())
	c := &Checkpointer{
		o:    o,
		flow: f.Name(),
		log:  o.Log.With(zap.String("flow", f.Name())),
		m:    m,
		sel: policy.TopicSelector{
			Policy:                o.Policy,
			Topics:                topics,
			HeartbeatsReplication: f.HeartbeatsReplicationEnabled,
			TargetAlias:           f.Target,
		},
		groupsF:  groups,
		cpTopic:  o.Policy.CheckpointsTopic(f.Source),
		mapTopic: offsetmap.Topic(f.Source),
		st:       newStore(),
		sw:       newSwitchState(),
		marker:   syncMarker(f.Name()),
	}
	c.idx = NewIndex(o.MaxSegments, c.onThin)
	c.feed = &offsetmap.Feed{
		Client:    o.MapReader,
		Topic:     c.mapTopic,
		Apply:     c.idx.Apply,
		Malformed: c.onMalformedMap,
		Failed: func(err error) {
			c.fail(context.Background(), metric.Reason(err, reasonMapRead), "read offset map; retried", err, zap.String("topic", c.mapTopic))
		},
		Applied: c.updateIndexMetrics,
	}
	return c, nil
}

// Index returns the checkpointer's translation index. It is filled by Run.
func (c *Checkpointer) Index() *Index { return c.idx }

// Run creates the checkpoints topic unless it exists, reads the checkpoints
// already in it and the offset map, and then, until ctx is done, refreshes
// the groups every refresh.groups.interval.seconds, writes checkpoints every
// emit.checkpoints.interval.seconds (when emit.checkpoints.enabled) and,
// when sync.group.offsets.enabled, syncs group offsets into idle target
// groups: in the exact mode (the default) every
// mm2go.sync.group.offsets.watch.interval.ms, only from source groups that
// are empty (see switch.go); in the periodic mode the last checkpoints every
// sync.group.offsets.interval.seconds, as MM2 does.
// Each periodic step first runs one interval after start, as in MM2.
//
// It returns nil once ctx is done. It returns an error when the start fails
// (the checkpoints topic can neither be created nor found within
// admin.timeout.ms, or the checkpoints or the offset map cannot be read) and
// when MapReader is closed under it. Failures of periodic steps are not
// returned: each is logged, counted in mm2go_checkpoint_errors_total and
// retried at the next interval.
func (c *Checkpointer) Run(ctx context.Context) error {
	// Stopped, not failed: the gauges are no longer this checkpointer's
	// (one that fails is started again and keeps them).
	defer func() {
		if ctx.Err() != nil {
			c.m.stopped(c.flow)
			c.o.MM2.ForgetCheckpoints(c.o.Flow.Source, c.o.Flow.Target, "")
		}
	}()
	err := c.startGuarded(ctx)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return err
	}
	f := c.o.Flow
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return c.feed.Tail(gctx) })
	if f.RefreshGroupsEnabled && f.RefreshGroupsInterval > 0 {
		g.Go(func() error { loop.Every(gctx, f.RefreshGroupsInterval, c.refreshGroups); return nil })
	}
	if f.EmitCheckpointsEnabled && f.EmitCheckpointsInterval > 0 {
		g.Go(func() error { loop.Every(gctx, f.EmitCheckpointsInterval, c.emit); return nil })
	}
	switch {
	case !f.SyncGroupOffsetsEnabled || f.SyncGroupOffsetsInterval <= 0:
	case f.GroupSyncMode == config.GroupSyncPeriodic:
		g.Go(func() error { loop.Every(gctx, f.SyncGroupOffsetsInterval, c.sync); return nil })
	default:
		g.Go(func() error { loop.Every(gctx, f.GroupSyncWatchInterval, c.watch); return nil })
	}
	err = g.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// groupGoneAfter is how long a selected group must be missing from the
// source's listings before it is dropped: a broker shutting down answers
// ListGroups with none, and dropping the groups then would delete their
// checkpoint age (and the alert on it) during the very source outage it
// should report.
var groupGoneAfter = 30 * time.Second

// keepMissing returns the groups listed plus those of old the listings have
// lacked for less than after (missing records since when, updated), sorted.
func keepMissing(old, listed []string, missing map[string]time.Time, now time.Time, after time.Duration) []string {
	out := slices.Clone(listed)
	for _, g := range listed {
		delete(missing, g)
	}
	for _, g := range old {
		if _, found := slices.BinarySearch(listed, g); found {
			continue
		}
		since, ok := missing[g]
		if !ok {
			since, missing[g] = now, now
		}
		if now.Sub(since) < after {
			out = append(out, g)
		} else {
			delete(missing, g)
		}
	}
	slices.Sort(out)
	return out
}

// startGuarded runs start; under the exact group-offset sync, the sync's
// guard runs meanwhile.
func (c *Checkpointer) startGuarded(ctx context.Context) error {
	f := c.o.Flow
	if !f.SyncGroupOffsetsEnabled || f.SyncGroupOffsetsInterval <= 0 || f.GroupSyncMode == config.GroupSyncPeriodic {
		return c.start(ctx)
	}
	done := make(chan error, 1)
	go func() { done <- c.start(ctx) }()
	t := time.NewTicker(f.GroupSyncWatchInterval)
	defer t.Stop()
	c.guard(ctx)
	for {
		select {
		case err := <-done:
			return err
		case <-t.C:
			c.guard(ctx)
		}
	}
}

// start ensures the checkpoints topic and loads the checkpoints, the offset
// map and the groups.
func (c *Checkpointer) start(ctx context.Context) error {
	f := c.o.Flow
	actx, cancel := context.WithTimeout(ctx, f.AdminTimeout)
	_, err := itopic.Ensure(actx, c.o.TargetAdmin, itopic.Spec{
		Name:              c.cpTopic,
		Partitions:        1,
		ReplicationFactor: f.CheckpointsTopicReplicationFactor,
	})
	cancel()
	if err != nil {
		return fmt.Errorf("ensure checkpoints topic on %s: %w", f.Target, err)
	}
	if err := c.st.load(ctx, c.o.CheckpointReader, c.cpTopic, c.groupsF, c.replicates, c.onMalformedCheckpoint); err != nil {
		return err
	}
	if err := c.feed.Load(ctx); err != nil {
		return fmt.Errorf("load offset map %s: %w", c.mapTopic, err)
	}
	c.updateIndexMetrics()
	c.refreshGroups(ctx)
	parts, segs, thinned := c.idx.Stats()
	c.mu.Lock()
	groups := len(c.groups)
	c.mu.Unlock()
	c.log.Info("checkpoints started",
		zap.String("source_cluster", f.Source),
		zap.String("target_cluster", f.Target),
		zap.String("topic", c.cpTopic),
		zap.Int("groups", groups),
		zap.Int("checkpoints_loaded", c.st.count()),
		zap.Int("index_partitions", parts),
		zap.Int("index_segments", segs),
		zap.Int("index_degraded_partitions", thinned),
		zap.Bool("emit_checkpoints", f.EmitCheckpointsEnabled),
		zap.Bool("sync_group_offsets", f.SyncGroupOffsetsEnabled))
	return nil
}

// replicates reports whether a checkpoint is of a topic the flow replicates:
// its downstream topic is a remote topic of the flow (or, for topics that
// came from the target, their original name) whose source topic passes the
// flow's topic filter.
func (c *Checkpointer) replicates(cp policy.Checkpoint) bool {
	f := c.o.Flow
	if up, ok := upstreamOf(c.o.Policy, f.Source, cp.Topic); ok && c.sel.ShouldReplicate(up) {
		return true
	}
	// A topic that came from the target, renamed back (RemoteTopic).
	return c.sel.ShouldReplicate(c.o.Policy.FormatRemoteTopic(f.Target, cp.Topic))
}

// fail logs and counts a failure of periodic work, unless it is only the
// consequence of a shutdown (ctx done).
func (c *Checkpointer) fail(ctx context.Context, reason, msg string, err error, fields ...zap.Field) {
	if ctx.Err() != nil {
		return
	}
	c.m.error(c.flow, reason)
	c.log.Warn(msg, append(fields, zap.String("reason", reason), zap.Error(err))...)
}

func (c *Checkpointer) onMalformedCheckpoint(r *kgo.Record, err error) {
	c.m.error(c.flow, reasonMalformed)
	c.log.Warn("skip undecodable checkpoint", zap.String("topic", r.Topic), zap.Int32("partition", r.Partition), zap.Int64("offset", r.Offset), zap.Error(err))
}

func (c *Checkpointer) onMalformedMap(r *kgo.Record, err error) {
	c.m.error(c.flow, reasonMalformedMap)
	c.log.Warn("skip undecodable offset map record", zap.String("topic", r.Topic), zap.Int32("partition", r.Partition), zap.Int64("offset", r.Offset), zap.Error(err))
}

// onThin is called by the index when a partition's history is first
// thinned.
func (c *Checkpointer) onThin(tp TopicPartition) {
	c.log.Warn("offset map history thinned; old offsets of the partition translate approximately (MM2's rule: never skipped, possibly read again)",
		zap.String("topic", tp.Topic), zap.Int32("partition", tp.Partition), zap.Int("max_segments", c.idx.maxSegments))
	c.updateIndexMetrics()
}

func (c *Checkpointer) updateIndexMetrics() {
	_, segs, thinned := c.idx.Stats()
	c.m.setIndex(c.flow, segs, thinned)
}

// currentGroups returns the selected groups; nil until the first refresh
// succeeded.
func (c *Checkpointer) currentGroups() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.groups
}

// refreshGroups selects the source groups again. On failure the previous
// selection stays.
func (c *Checkpointer) refreshGroups(ctx context.Context) {
	actx, cancel := context.WithTimeout(ctx, c.o.Flow.AdminTimeout)
	groups, err := SelectGroups(actx, c.o.SourceAdmin, c.groupsF, c.sel)
	cancel()
	if err != nil {
		c.fail(ctx, metric.Reason(err, reasonGroupList), "refresh consumer groups; retried at the next interval", err)
		return
	}
	if groups == nil {
		groups = []string{}
	}
	c.mu.Lock()
	old := c.groups
	if c.missing == nil {
		c.missing = make(map[string]time.Time)
	}
	groups = keepMissing(old, groups, c.missing, time.Now(), groupGoneAfter)
	c.groups = groups
	c.mu.Unlock()
	c.m.setGroups(c.flow, len(groups))
	if old != nil && slices.Equal(old, groups) {
		return
	}
	var added, removed int
	for _, g := range groups {
		if _, found := slices.BinarySearch(old, g); !found {
			added++
		}
	}
	for _, g := range old {
		if _, found := slices.BinarySearch(groups, g); !found {
			removed++
			c.m.dropAge(c.flow, g)
			c.o.MM2.ForgetCheckpoints(c.o.Flow.Source, c.o.Flow.Target, g)
		}
	}
	c.log.Info("consumer groups selected", zap.Int("groups", len(groups)), zap.Int("added", added), zap.Int("removed", removed))
}

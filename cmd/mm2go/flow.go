package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/mm2go/mm2go/checkpoint"
	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/heartbeat"
	"github.com/mm2go/mm2go/internal/fence"
	"github.com/mm2go/mm2go/internal/itopic"
	"github.com/mm2go/mm2go/internal/loop"
	"github.com/mm2go/mm2go/internal/mm2metrics"
	"github.com/mm2go/mm2go/policy"
	"github.com/mm2go/mm2go/replicator"
)

// flowRunner runs one flow's workers under one context and restarts them
// with backoff when one fails; they stop together.
type flowRunner struct {
	flow *config.Flow
	log  *zap.Logger // with the flow's name
	base *zap.Logger // without it: workers add it themselves
	lvl  zap.AtomicLevel
	reg  prometheus.Registerer
	m    *daemonMetrics

	drainTimeout     time.Duration
	partitionMetrics bool
	mm2              *mm2metrics.Exporter // MM2's metric names; nil when not exported
	maxBufferedBytes int64
	progressInterval time.Duration
	lagInterval      time.Duration
	maxSegments      int // the checkpointer's exact history per partition; 0: its default

	instanceID string
	// srcReach and dstReach follow whether the flow's clusters answer
	// (probe); probeSrc is the probe's source admin client, which the
	// lag watches of stopped tasks share.
	srcReach, dstReach reach
	probeSrc           atomic.Pointer[kadm.Client]
	watches            watches
	// lease is the flow's current lease, while run has one.
	lease atomic.Pointer[fence.Lease]
	// running counts the tasks this process runs.
	running atomic.Int32

	mu   sync.Mutex
	reps map[int]*replicator.Replicator // running tasks' replicators, for status displays
}

// policyFor builds the replication policy a flow's settings name.
func policyFor(f *config.Flow) policy.Policy {
	kind := policy.KindDefault
	if f.ReplicationPolicyClass == config.PolicyIdentity {
		kind = policy.KindIdentity
	}
	return policy.New(kind, f.ReplicationPolicySeparator, f.ReplicationPolicyInternalTopicSeparatorEnabled, f.Source)
}

// supervise runs the flow until ctx is cancelled, restarting it with
// exponential backoff (1s to 1m) after a failure. A flow that ran for a while
// before failing starts over at the shortest backoff.
func (fr *flowRunner) supervise(ctx context.Context) {
	defer fr.startProbe(ctx)()
	fr.watches.open(ctx)
	defer fr.watches.close()
	const maxBackoff = time.Minute
	backoff := loop.Backoff{Min: time.Second, Max: maxBackoff}
	for {
		start := time.Now()
		err := fr.run(ctx)
		fr.m.flowUp(fr.flow.Name(), false)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, fence.ErrInstanceFenced) {
			// Joining again would fence the newer process back.
			fr.log.Error("another process runs this flow with the same --instance-id; this one stops running it until it is restarted or reloaded (give every process its own id)",
				zap.String("instance_id", fr.instanceID), zap.Error(err))
			return
		}
		if time.Since(start) > 5*maxBackoff {
			backoff.Reset()
		}
		wait := backoff.Next()
		fr.m.flowRestart(fr.flow.Name())
		fr.log.Error("flow failed; restarting", zap.Duration("backoff", wait), zap.Error(err))
		if !loop.Sleep(ctx, wait) {
			return
		}
	}
}

// run checks connectivity, then runs the tasks of the flow this process is
// given: every mm2go process with the same file joins the flow's group on
// the target, which spreads the flow's tasks (tasks.max, the partitions of
// its task topic) over them (internal/fence). It returns nil when ctx ends
// and an error when a task failed or this process must stop running the
// flow; every task is stopped first, and the group is left, so that the
// other members take the tasks over while this one backs off.
func (fr *flowRunner) run(ctx context.Context) error {
	f := fr.flow
	// A wrong password, CA or address fails here, in one line naming the
	// cluster, instead of in whichever worker's request hits it first.
	if err := preflight(ctx, f); err != nil {
		return fmt.Errorf("check connectivity: %w", err)
	}
	fr.m.flowUp(f.Name(), true) // supervise sets it down when run returns
	fr.m.certificates(f)
	if !f.Enabled {
		return fr.runWorkers(ctx, 0, 1)
	}
	lease, tasks, err := fr.joinLease(ctx)
	if err != nil {
		return err
	}
	fr.lease.Store(lease)
	fr.m.inGroup(f.Name(), tasks)
	rctx, cancel := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel(nil)
		wg.Wait()
		fr.lease.Store(nil)
		lease.Close()
		fr.m.inGroup(f.Name(), -1)
	}()
	running := make(map[int32]chan struct{}) // per task, closed when its last run ended
	fr.m.running(f.Name(), int(fr.running.Load()))
	fr.log.Info("joined the flow's group; waiting for tasks (other instances may run them)",
		zap.String("group", policy.LeaseGroup(f.Source)), zap.String("instance_id", fr.instanceID), zap.Int("tasks", tasks))
	for {
		g, err := lease.Wait(rctx)
		if err != nil {
			cancel(nil)
			wg.Wait()
			if cause := context.Cause(rctx); ctx.Err() == nil && cause != nil && !errors.Is(cause, context.Canceled) {
				return cause // a task failed
			}
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		// A task lost with the group session and assigned again at once
		// may still be draining here: its next run starts after it (its
		// clients have the same ids).
		prev := running[g.Task]
		done := make(chan struct{})
		running[g.Task] = done
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done)
			if prev != nil {
				select {
				case <-prev:
				case <-rctx.Done():
					g.Release()
					return
				}
			}
			if err := fr.runTask(rctx, g, tasks, fr.runWorkers); err != nil {
				cancel(err)
			}
		}()
	}
}

// runTask runs one task of the flow with work (runWorkers) until its grant
// ends (revoked, or lost with the group session) or ctx ends, and returns an
// error only when the task failed.
func (fr *flowRunner) runTask(ctx context.Context, g *fence.Grant, tasks int, work func(ctx context.Context, task, tasks int) error) error {
	f := fr.flow
	defer g.Release()
	if int(g.Task) >= tasks {
		return fmt.Errorf("the group assigned task %d, but the flow had %d tasks (partitions of %s on %s) when this instance joined: the topic was altered; rejoining",
			g.Task, tasks, policy.LeaseTopic(f.Source), f.Target)
	}
	fr.m.running(f.Name(), int(fr.running.Add(1)))
	defer func() { fr.m.running(f.Name(), int(fr.running.Add(-1))) }()
	// The workers stop when the process stops or the grant ends.
	wctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(g.Context(), func() { cancel(grantEnded{g.Generation}) })
	err := work(wctx, int(g.Task), tasks)
	stop()
	cancel(nil)
	switch {
	case ctx.Err() != nil:
		return nil
	case g.Context().Err() != nil:
		// Revoked or lost: whatever the workers returned is the stop (a
		// task revoked while it starts fails the request under way), not
		// a failure of the flow. Another member runs the task now.
		fr.m.taskLost(f.Name())
		if err != nil && !errors.Is(err, context.Canceled) {
			fr.log.Info("task stopped after it was taken from this instance", zap.Int32("task", g.Task), zap.Error(err))
		}
		return nil
	case fence.Fenced(err):
		// Another member fenced this task's writer: the group gave it the
		// task, and tells this one at its next heartbeat.
		fr.m.taskLost(f.Name())
		fr.log.Warn("task fenced by its next holder; this instance lost it", zap.Int32("task", g.Task), zap.Error(err))
		return nil
	case err == nil:
		return fmt.Errorf("task %d: the flow's workers stopped", g.Task)
	default:
		return fmt.Errorf("task %d: %w", g.Task, err)
	}
}

// standingBy reports whether other instances run the flow: this one is in
// the flow's group without a task.
func (fr *flowRunner) standingBy() bool {
	l := fr.lease.Load()
	return l != nil && l.Standing()
}

// joinLease ensures the flow's task topic on the target and joins its
// group. It returns the flow's number of tasks: the topic's partitions,
// which every instance reads the same way (tasks.max only says how many to
// create it with).
func (fr *flowRunner) joinLease(ctx context.Context) (*fence.Lease, int, error) {
	f := fr.flow
	adm, err := fr.client(config.RoleTargetAdmin)
	if err != nil {
		return nil, 0, err
	}
	defer adm.Close()
	ectx, cancel := context.WithTimeout(ctx, f.AdminTimeout)
	topic := policy.LeaseTopic(f.Source)
	n, err := itopic.Ensure(ectx, kadm.NewClient(adm), itopic.Spec{
		Name:              topic,
		Partitions:        int32(f.TasksMax),
		ReplicationFactor: f.OffsetStorageReplicationFactor,
	})
	cancel()
	if err != nil {
		return nil, 0, fmt.Errorf("ensure the task topic on %s: %w", f.Target, err)
	}
	if int(n) != f.TasksMax {
		fr.log.Warn("tasks.max differs from the flow's task topic; the topic decides, so that every instance splits the flow the same way. "+
			"To change the number of tasks stop every instance of the flow, delete the topic, and start them with the new tasks.max",
			zap.Int("tasks_max", f.TasksMax), zap.String("topic", topic), zap.String("cluster", f.Target), zap.Int32("tasks", n))
	}
	id := f.Client(config.RoleTargetConsumer).ID + "-lease"
	l, err := fence.Join(fence.LeaseOptions{
		Client: func(opts ...kgo.Opt) (*kgo.Client, error) {
			return fr.client(config.RoleTargetConsumer, append(opts, kgo.ClientID(id))...)
		},
		Group:      policy.LeaseGroup(f.Source),
		Topic:      topic,
		Session:    leaseSession,
		Heartbeat:  leaseHeartbeat,
		Rebalance:  max(leaseRebalance, fr.drainTimeout+5*time.Second),
		InstanceID: fr.instanceID,
		OnAssigned: func(gen int32, tasks []int32) {
			fr.watches.assigned(gen, tasks)
			fr.m.assigned(f.Name(), gen)
			fr.log.Info("flow's group assigned tasks", zap.Int32("generation", gen), zap.Int32s("tasks_here", tasks))
		},
		OnRevoked: func(took time.Duration) { fr.m.revoked(f.Name(), took) },
		Log:       fr.log.Named("lease"),
	})
	return l, int(n), err
}

// The lease group's timing: Kafka Connect's worker defaults
// (session.timeout.ms, heartbeat.interval.ms, rebalance.timeout.ms), so that
// a host failure moves a flow to another instance within about 10 s.
const (
	leaseSession   = 10 * time.Second
	leaseHeartbeat = 3 * time.Second
	leaseRebalance = time.Minute
)

// runWorkers creates the clients of one task of the flow, runs its workers
// until ctx is cancelled or one fails, and closes the clients in reverse
// order of creation. Task 0 runs, besides its share of the replication,
// what runs once per flow: checkpoints, group-offset sync, heartbeats,
// topic-config and ACL sync.
func (fr *flowRunner) runWorkers(ctx context.Context, task, tasks int) (err error) {
	f := fr.flow
	var closers []func()
	defer func() {
		for _, c := range slices.Backward(closers) {
			c()
		}
	}()
	// Two tasks of a flow in one process need clients of their own ids
	// (kprom labels series by client id): task n of several adds "-n".
	suffix := ""
	if tasks > 1 {
		suffix = "-" + strconv.Itoa(task)
	}
	newClient := func(r config.Role, extra ...kgo.Opt) (*kgo.Client, error) {
		cl, err := fr.client(r, append([]kgo.Opt{kgo.ClientID(f.Client(r).ID + suffix)}, extra...)...)
		if err != nil {
			return nil, err
		}
		closers = append(closers, cl.Close)
		return cl, nil
	}

	if !f.Enabled {
		// MM2 runs a heartbeat connector for a pair even when its
		// replication is disabled: heartbeats written into the
		// target come back through the reverse flow and show its health.
		hdst, err := newClient(config.RoleTargetProducer, heartbeat.ProducerOpts()...)
		if err != nil {
			return err
		}
		hadm, err := newClient(config.RoleTargetAdmin)
		if err != nil {
			return err
		}
		hb, err := fr.newHeartbeat(hdst, kadm.NewClient(hadm))
		if err != nil {
			return err
		}
		fr.retry(ctx, "heartbeat", hb.Run)
		return nil
	}

	src, err := newClient(config.RoleSourceConsumer, append(replicator.ConsumerOpts(), fr.consumerBudget()...)...)
	if err != nil {
		return err
	}
	var srcSecond *kgo.Client
	if f.CopyMode == config.CopyBatches {
		// A far source broker's two Fetch requests out go on two
		// connections (replicator.Options.SourceSecond).
		id := f.Client(config.RoleSourceConsumer).ID + suffix + "-second"
		if srcSecond, err = newClient(config.RoleSourceConsumer, append(replicator.ConsumerOpts(), kgo.ClientID(id))...); err != nil {
			return err
		}
	}
	srcAdmin, err := newClient(config.RoleSourceAdmin)
	if err != nil {
		return err
	}
	dst, err := newClient(config.RoleTargetProducer, append(replicator.ProducerOpts(), fr.producerBudget()...)...)
	if err != nil {
		return err
	}
	var dstSecond *kgo.Client
	if f.CopyMode == config.CopyBatches && !f.ExactlyOnce {
		// The batches mode's Produce requests go on two connections
		// (replicator.Options.TargetSecond).
		id := f.Client(config.RoleTargetProducer).ID + suffix + "-second"
		if dstSecond, err = newClient(config.RoleTargetProducer, append(replicator.ProducerOpts(), kgo.ClientID(id))...); err != nil {
			return err
		}
	}
	dstAdmin, err := newClient(config.RoleTargetAdmin)
	if err != nil {
		return err
	}
	reader, err := newClient(config.RoleTargetConsumer, itopic.ReaderOpts()...)
	if err != nil {
		return err
	}
	// Reads source records after a crash to find what the target already
	// holds; it keeps the source consumer's isolation level.
	srcReader, err := newClient(config.RoleSourceConsumer, kgo.KeepControlRecords(),
		kgo.ClientID(f.Client(config.RoleSourceConsumer).ID+suffix+"-reader"))
	if err != nil {
		return err
	}
	var txnProducer *kgo.Client
	if f.ExactlyOnce {
		// Its own client id: kprom labels series by it.
		id := f.Client(config.RoleTargetProducer).ID + suffix + "-txn"
		opts := append(replicator.TransactionalOpts(policy.TransactionalID(f.Source, f.Target, task)), fr.producerBudget()...)
		if txnProducer, err = newClient(config.RoleTargetProducer, append(opts, kgo.ClientID(id))...); err != nil {
			return err
		}
	}
	var syncProducer *kgo.Client
	if f.EmitOffsetSyncsEnabled && f.OffsetSyncsTopicLocation == config.LocationSource {
		if syncProducer, err = newClient(config.RoleSourceProducer, kgo.RecordPartitioner(kgo.ManualPartitioner())); err != nil {
			return err
		}
	}

	rep, err := replicator.New(replicator.Options{
		Flow:             f,
		Policy:           policyFor(f),
		Source:           src,
		SourceSecond:     srcSecond,
		TargetSecond:     dstSecond,
		SourceAdmin:      kadm.NewClient(srcAdmin),
		Target:           dst,
		Transactional:    txnProducer,
		TargetAdmin:      kadm.NewClient(dstAdmin),
		TargetReader:     reader,
		SourceReader:     srcReader,
		SyncProducer:     syncProducer,
		Log:              fr.base.Named("replicator"),
		Registerer:       fr.reg,
		DrainTimeout:     fr.drainTimeout,
		PartitionMetrics: fr.partitionMetrics,
		MM2:              fr.mm2,
		ProgressInterval: fr.progressInterval,
		LagInterval:      fr.lagInterval,
		Task:             task,
		Tasks:            tasks,
	})
	if err != nil {
		return err
	}
	fr.mu.Lock()
	if fr.reps == nil {
		fr.reps = make(map[int]*replicator.Replicator)
	}
	fr.reps[task] = rep
	fr.mu.Unlock()
	fr.watches.stopTask(task)
	defer func() {
		fr.mu.Lock()
		delete(fr.reps, task)
		fr.mu.Unlock()
		var ended grantEnded
		if errors.As(context.Cause(ctx), &ended) {
			fr.watches.start(task, ended.gen, rep, fr.probeSrc.Load())
		}
	}()

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := rep.Run(gctx); err != nil {
			return fmt.Errorf("replicate: %w", err)
		}
		return gctx.Err()
	})
	// MM2 runs no checkpoint connector without offset syncs; mm2go does not
	// need them to translate, but keeps MM2's switches.
	if f.EmitCheckpointsEnabled && f.EmitOffsetSyncsEnabled && task == 0 {
		g.Go(func() error {
			fr.retry(gctx, "checkpoint", func(ctx context.Context) error {
				return fr.runCheckpoints(ctx, dst, kadm.NewClient(srcAdmin), kadm.NewClient(dstAdmin))
			})
			return gctx.Err()
		})
	}
	if f.EmitHeartbeatsEnabled && task == 0 {
		hb, err := fr.newHeartbeat(dst, kadm.NewClient(dstAdmin))
		if err != nil {
			return err
		}
		g.Go(func() error {
			fr.retry(gctx, "heartbeat", hb.Run)
			return gctx.Err()
		})
	}
	err = g.Wait()
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return err
}

// stats returns the summary of the flow's tasks running here, if one is.
// A topic split over several tasks counts once per task.
func (fr *flowRunner) stats() (replicator.Stats, bool) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	var sum replicator.Stats
	for _, rep := range fr.reps {
		s := rep.Stats()
		sum.Topics += s.Topics
		sum.Partitions += s.Partitions
		sum.Stalled += s.Stalled
		sum.Lag += s.Lag
	}
	return sum, len(fr.reps) > 0
}

func (fr *flowRunner) newHeartbeat(producer *kgo.Client, adm *kadm.Client) (*heartbeat.Emitter, error) {
	f := fr.flow
	return heartbeat.New(heartbeat.Options{
		Source: f.Source, Target: f.Target, Policy: policyFor(f),
		Producer: producer, Admin: adm,
		Interval: f.EmitHeartbeatsInterval, ReplicationFactor: f.HeartbeatsTopicReplicationFactor,
		AdminTimeout: f.AdminTimeout,
		Log:          fr.base.Named("heartbeat"), Registerer: fr.reg,
	})
}

// retry runs a worker whose failure must not stop replication (heartbeats,
// checkpoints): after an error it is logged, counted and started again with
// backoff (1s doubling to 1m), until ctx ends.
func (fr *flowRunner) retry(ctx context.Context, worker string, run func(context.Context) error) {
	backoff := loop.Backoff{Min: time.Second, Max: time.Minute}
	for {
		err := run(ctx)
		if ctx.Err() != nil {
			return
		}
		wait := backoff.Next()
		fr.m.workerRestart(fr.flow.Name(), worker)
		fr.log.Error("worker failed; restarting it", zap.String("worker", worker), zap.Duration("backoff", wait), zap.Error(err))
		if !loop.Sleep(ctx, wait) {
			return
		}
	}
}

// client creates a client of the flow for role r: the file's settings, then
// mm2go's logging and metrics, then extra. The caller closes it.
func (fr *flowRunner) client(r config.Role, extra ...kgo.Opt) (*kgo.Client, error) {
	c := fr.flow.Client(r)
	// One kprom per client: it registers its collectors with the client's
	// id as a label and unregisters them when the client closes.
	kp := kprom.NewMetrics("mm2go", kprom.Subsystem("kgo"), kprom.Registerer(fr.reg), kprom.WithClientLabel())
	// Metadata is refreshed when a topic is discovered or created; kgo
	// would otherwise wait until its last refresh is 5s old, delaying the
	// copy of a new topic by as much.
	opts := append(slices.Clone(c.Opts()), kgo.WithLogger(kgoLogger(fr.log, fr.lvl)), kgo.WithHooks(kp),
		kgo.MetadataMinAge(250*time.Millisecond))
	opts = append(opts, extra...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("create %s client for %s: %w", c.ID, c.Cluster, err)
	}
	return cl, nil
}

// runCheckpoints runs the flow's checkpointer until ctx ends or it fails,
// with readers of its own (they hold assigned partitions) and the flow's
// shared producer and admin clients.
func (fr *flowRunner) runCheckpoints(ctx context.Context, dst *kgo.Client, srcAdm, dstAdm *kadm.Client) error {
	f := fr.flow
	id := f.Client(config.RoleTargetConsumer).ID
	mapReader, err := fr.client(config.RoleTargetConsumer, append(itopic.ReaderOpts(), kgo.ClientID(id+"-offset-map"))...)
	if err != nil {
		return err
	}
	defer mapReader.Close()
	cpReader, err := fr.client(config.RoleTargetConsumer, append(itopic.ReaderOpts(), kgo.ClientID(id+"-checkpoints"))...)
	if err != nil {
		return err
	}
	defer cpReader.Close()
	cp, err := checkpoint.New(checkpoint.Options{
		Flow:             f,
		Policy:           policyFor(f),
		SourceAdmin:      srcAdm,
		Target:           dst,
		TargetAdmin:      dstAdm,
		MapReader:        mapReader,
		CheckpointReader: cpReader,
		Log:              fr.base.Named("checkpoint"),
		Registerer:       fr.reg,
		MM2:              fr.mm2,
		MaxSegments:      fr.maxSegments,
		InitLocalTopics:  true,
	})
	if err != nil {
		return err
	}
	return cp.Run(ctx)
}

// consumerBudget and producerBudget split --buffer.max-bytes between the
// flow's source consumer (a quarter: two fetches in flight of an eighth
// each) and its target producer (the rest, records fetched and not yet
// acknowledged). Without the flag they add nothing.
func (fr *flowRunner) consumerBudget() []kgo.Opt {
	b := fr.maxBufferedBytes
	if b <= 0 {
		return nil
	}
	fetch := int32(min(max(b/8, 64<<10), 1<<30))
	return []kgo.Opt{
		kgo.FetchMaxBytes(fetch),
		kgo.FetchMaxPartitionBytes(min(fetch, 1<<20)),
		kgo.MaxConcurrentFetches(2),
	}
}

func (fr *flowRunner) producerBudget() []kgo.Opt {
	b := fr.maxBufferedBytes
	if b <= 0 {
		return nil
	}
	return []kgo.Opt{kgo.MaxBufferedBytes(int(max(b*3/4, 1<<20)))}
}

// Package heartbeat emits MirrorMaker 2's heartbeats for one flow, the job of
// MM2's MirrorHeartbeatConnector and its single task.
//
// An Emitter creates the "heartbeats" topic on the flow's target the way MM2
// does (compacted, one partition, heartbeats.topic.replication.factor) and
// then, once per emit.heartbeats.interval.seconds, writes one Heartbeat
// record to its partition 0: key (source alias, target alias), value version
// 0 and the emission time in milliseconds, the same time as the record
// timestamp, and no headers. The bytes are MM2's (see policy.Heartbeat), so
// MM2's tools and mm2go read each other's heartbeats. MM2 runs this for every
// pair whose emit.heartbeats.enabled is true, even when the flow itself is
// disabled: flow A->B is monitored by the heartbeats B->A writes into A,
// which A->B replicates to "A.heartbeats" on B.
//
// A failed write is logged, counted and simply superseded by the next one;
// it never stops the emitter. The package does not replicate heartbeats
// topics (package replicator copies them as ordinary remote topics), does
// not interpret them (the MirrorClient functions of package policy and
// `mm2go topology` do), and does not create or close clients: the caller
// owns them.
package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/internal/itopic"
	"github.com/mm2go/mm2go/internal/loop"
	"github.com/mm2go/mm2go/internal/metric"
	"github.com/mm2go/mm2go/policy"
)

// Defaults of the Options fields left zero.
const (
	// DefaultInterval is MM2's emit.heartbeats.interval.seconds default, 1s.
	DefaultInterval = time.Second
	// DefaultReplicationFactor is MM2's heartbeats.topic.replication.factor
	// default, 3.
	DefaultReplicationFactor int16 = 3
	// DefaultAdminTimeout is MM2's admin.timeout.ms default, 60s.
	DefaultAdminTimeout = time.Minute
	// DefaultWriteTimeout bounds one heartbeat write, 30s.
	DefaultWriteTimeout = 30 * time.Second
	// warnEvery is how often a streak of failed writes is logged at warn
	// level after its first failure; every failure is counted.
	warnEvery = time.Minute
)

// Options configure an Emitter. Source, Target, Producer and Admin are
// required.
type Options struct {
	// Source and Target are the aliases of the flow's clusters, the key of
	// every heartbeat record.
	Source, Target string
	// Policy names the heartbeats topic (always "heartbeats" in MM2 4.x).
	Policy policy.Policy

	// Producer writes to the target cluster. It must send a record to the
	// partition in its Partition field: build it with ProducerOpts, or pass
	// the replicator's target producer, which has the same options. It may
	// be shared with other workers of the flow.
	Producer *kgo.Client
	// Admin creates the heartbeats topic on the target cluster.
	Admin *kadm.Client

	// Interval is emit.heartbeats.interval.seconds, the time between two
	// heartbeats; default 1s. The first heartbeat is written one Interval
	// after the topic exists, as MM2's task does.
	Interval time.Duration
	// ReplicationFactor is heartbeats.topic.replication.factor, used only
	// when the topic is created; default 3, -1 means the broker's default.
	ReplicationFactor int16
	// AdminTimeout is admin.timeout.ms, the bound on creating the topic at
	// start; default 60s.
	AdminTimeout time.Duration
	// WriteTimeout bounds one write; default 30s. While a write is pending
	// no other heartbeat is started, so heartbeats never queue up behind an
	// unreachable target, they are skipped.
	WriteTimeout time.Duration

	// Log receives the emitter's entries, each with a flow field; nil
	// discards them.
	Log *zap.Logger
	// Registerer receives the mm2go_heartbeat_* metrics; nil records none.
	// Emitters of several flows, and restarted ones, may share it.
	Registerer prometheus.Registerer
}

// ProducerOpts are the options a dedicated heartbeat producer needs on top
// of the flow's target producer settings: records go to the partition they
// name (MM2 writes heartbeats to partition 0 whatever the topic's partition
// count), with acks=all.
func ProducerOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	}
}

// Emitter writes the heartbeats of one flow. Create it with New and call Run
// once.
type Emitter struct {
	o     Options
	flow  string
	topic string
	key   []byte
	log   *zap.Logger
	m     *metrics
}

// New validates the options, fills in defaults and registers the metrics.
// It fails when a required option is missing, when an alias is longer than
// the 32767 bytes a heartbeat key can hold (wrapping policy.ErrStringTooLong),
// or when the metrics cannot be registered with Registerer.
func New(o Options) (*Emitter, error) {
	switch {
	case o.Source == "" || o.Target == "":
		return nil, errors.New("heartbeat: source and target aliases are required")
	case o.Producer == nil || o.Admin == nil:
		return nil, errors.New("heartbeat: producer and admin clients are required")
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.ReplicationFactor == 0 {
		o.ReplicationFactor = DefaultReplicationFactor
	}
	if o.AdminTimeout <= 0 {
		o.AdminTimeout = DefaultAdminTimeout
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	flow := o.Source + "->" + o.Target
	key, err := policy.Heartbeat{SourceAlias: o.Source, TargetAlias: o.Target}.Key()
	if err != nil {
		return nil, fmt.Errorf("heartbeat: encode key of %s: %w", flow, err)
	}
	m := newMetrics(o.Registerer)
	m.init(flow)
	return &Emitter{
		o:     o,
		flow:  flow,
		topic: o.Policy.HeartbeatsTopic(),
		key:   key,
		log:   o.Log.With(zap.String("flow", flow)),
		m:     m,
	}, nil
}

// Run creates the heartbeats topic on the target unless it exists, then
// writes a heartbeat every Interval until ctx is done. It returns nil once
// ctx is done, and an error only when the topic can neither be created nor
// found within AdminTimeout (see itopic.Ensure for the creation errors that
// are tolerated). Failed writes are not returned: each is counted in
// mm2go_heartbeat_errors_total, logged, and followed by the next heartbeat
// one Interval later.
func (e *Emitter) Run(ctx context.Context) error {
	actx, cancel := context.WithTimeout(ctx, e.o.AdminTimeout)
	n, err := itopic.Ensure(actx, e.o.Admin, itopic.Spec{
		Name:              e.topic,
		Partitions:        1,
		ReplicationFactor: e.o.ReplicationFactor,
	})
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("ensure heartbeats topic on %s: %w", e.o.Target, err)
	}
	e.log.Info("heartbeats started",
		zap.String("source_cluster", e.o.Source),
		zap.String("target_cluster", e.o.Target),
		zap.String("topic", e.topic),
		zap.Int32("partitions", n),
		zap.Duration("interval", e.o.Interval))

	// Stopped, not failed: the timestamp is no longer this emitter's.
	defer func() {
		if ctx.Err() != nil {
			e.m.stopped(e.flow)
		}
	}()
	var s streak
	loop.Every(ctx, e.o.Interval, func(ctx context.Context) {
		if err := e.beat(ctx); ctx.Err() == nil {
			e.report(&s, err)
		}
	})
	return nil
}

// beat writes one heartbeat and waits for the target's answer, at most
// WriteTimeout. On shutdown it returns without waiting: the record then
// belongs to the producer, whose owner flushes or closes it.
func (e *Emitter) beat(ctx context.Context) error {
	now := time.Now()
	hb := policy.Heartbeat{SourceAlias: e.o.Source, TargetAlias: e.o.Target, Timestamp: now.UnixMilli()}
	rec := &kgo.Record{
		Topic:     e.topic,
		Partition: 0,
		Key:       e.key,
		Value:     hb.Value(),
		Timestamp: time.UnixMilli(hb.Timestamp),
	}
	wctx, cancel := context.WithTimeout(ctx, e.o.WriteTimeout)
	defer cancel()
	done := make(chan error, 1) // buffered: the promise never blocks kgo
	e.o.Producer.Produce(wctx, rec, func(_ *kgo.Record, err error) { done <- err })
	select {
	case err := <-done:
		if err != nil {
			return err
		}
		e.m.written(e.flow, rec.Timestamp)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// streak tracks consecutive failed writes, so that a lasting failure is
// logged at warn level once a minute rather than once per heartbeat.
type streak struct {
	failures, unlogged int
	lastWarn           time.Time
}

// report counts and logs the outcome of one write.
func (e *Emitter) report(s *streak, err error) {
	if err == nil {
		if s.failures > 0 {
			e.log.Info("heartbeat writes recovered", zap.String("topic", e.topic), zap.Int("failed_writes", s.failures))
		}
		*s = streak{}
		return
	}
	reason := metric.Reason(err, reasonProduce)
	e.m.error(e.flow, reason)
	s.failures++
	s.unlogged++
	if s.failures == 1 || time.Since(s.lastWarn) >= warnEvery {
		e.log.Warn("write heartbeat; retried at the next interval",
			zap.String("topic", e.topic), zap.String("reason", reason),
			zap.Int("failed_writes", s.unlogged), zap.Error(err))
		s.unlogged = 0
		s.lastWarn = time.Now()
		return
	}
	e.log.Debug("write heartbeat", zap.String("topic", e.topic), zap.String("reason", reason), zap.Error(err))
}

package heartbeat

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest"

	"github.com/mm2go/mm2go/internal/ktest"
	"github.com/mm2go/mm2go/internal/metric"
	"github.com/mm2go/mm2go/policy"
)

// fixture is a one-broker kfake cluster on a virtual network, so that tests
// run inside a synctest bubble where the clock only moves when every
// goroutine waits: intervals are exact and a 10s test takes milliseconds.
type fixture struct {
	c   *kfake.Cluster
	net *kfake.VirtualNetwork
	cl  *kgo.Client
	adm *kadm.Client
	reg *prometheus.Registry
}

// newFixture must be called inside synctest.Test.
func newFixture(t *testing.T, opts ...kfake.Opt) *fixture {
	t.Helper()
	f := &fixture{net: new(kfake.VirtualNetwork), reg: prometheus.NewRegistry()}
	f.c = ktest.Fake(t, 1, append([]kfake.Opt{kfake.Ports(19400), kfake.ListenFn(f.net.Listen)}, opts...)...)
	f.cl = f.client(t, ProducerOpts()...)
	f.adm = kadm.NewClient(f.cl)
	return f
}

func (f *fixture) client(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(f.c.ListenAddrs()...), kgo.Dialer(f.net.DialContext)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

func (f *fixture) emitter(t *testing.T, o Options) *Emitter {
	t.Helper()
	o.Producer, o.Admin, o.Log, o.Registerer = f.cl, f.adm, zaptest.NewLogger(t), f.reg
	if o.ReplicationFactor == 0 {
		o.ReplicationFactor = 1
	}
	e, err := New(o)
	require.NoError(t, err)
	return e
}

// runFor runs e for d of bubble time and returns what Run returned.
func runFor(t *testing.T, e *Emitter, d time.Duration) error {
	t.Helper()
	return runThen(t, e, d, func() {})
}

// runThen is runFor calling running after d, before e is stopped.
func runThen(t *testing.T, e *Emitter, d time.Duration, running func()) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	time.Sleep(d)
	running()
	cancel()
	return <-done
}

// readTopic reads every record of topic up to its end.
func (f *fixture) readTopic(t *testing.T, topic string) []*kgo.Record {
	t.Helper()
	ctx := context.Background()
	ends, err := f.adm.ListEndOffsets(ctx, topic)
	require.NoError(t, err)
	var want int64
	ends.Each(func(o kadm.ListedOffset) { want += o.Offset })
	cl := f.client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var out []*kgo.Record
	for int64(len(out)) < want {
		fs := cl.PollFetches(ctx)
		require.NoError(t, fs.Err())
		out = append(out, fs.Records()...)
	}
	return out
}

func TestEmitterWritesHeartbeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		e := f.emitter(t, Options{Source: "A", Target: "B", Policy: policy.New(policy.KindDefault, "", true, ""), Interval: time.Second})
		start := time.Now()
		var lastSeen float64
		require.NoError(t, runThen(t, e, 10*time.Second+500*time.Millisecond, func() {
			lastSeen = testutil.ToFloat64(e.m.last.WithLabelValues("A->B"))
		}))

		recs := f.readTopic(t, "heartbeats")
		require.Len(t, recs, 10, "one heartbeat per interval, the first one interval after start")
		for i, r := range recs {
			hb, err := policy.DecodeHeartbeat(r.Key, r.Value)
			require.NoError(t, err)
			require.Equal(t, "A", hb.SourceAlias)
			require.Equal(t, "B", hb.TargetAlias)
			require.Equal(t, start.Add(time.Duration(i+1)*time.Second).UnixMilli(), hb.Timestamp, "heartbeat %d", i)
			require.Equal(t, hb.Timestamp, r.Timestamp.UnixMilli(), "record timestamp is the heartbeat's")
			require.Equal(t, []byte{0, 1, 'A', 0, 1, 'B'}, r.Key)
			require.Equal(t, int32(0), r.Partition)
			require.Empty(t, r.Headers)
		}

		require.Equal(t, 10.0, testutil.ToFloat64(e.m.records.WithLabelValues("A->B")))
		last, _ := policy.DecodeHeartbeat(recs[9].Key, recs[9].Value)
		require.Equal(t, float64(last.Timestamp)/1000, lastSeen)
		problems, err := testutil.GatherAndLint(f.reg)
		require.NoError(t, err)
		require.Empty(t, problems)
	})
}

func TestEmitterCreatesCompactedTopic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, kfake.NumBrokers(3), kfake.Ports(19400, 19401, 19402))
		e := f.emitter(t, Options{Source: "A", Target: "B", ReplicationFactor: 3, Interval: time.Minute})
		require.NoError(t, runFor(t, e, time.Second))

		ctx := context.Background()
		// A fresh client: f.adm's metadata cache still remembers the topic
		// as missing from before it was created.
		adm := kadm.NewClient(f.client(t))
		td, err := adm.ListTopics(ctx, "heartbeats")
		require.NoError(t, err)
		require.Len(t, td["heartbeats"].Partitions, 1)
		require.Len(t, td["heartbeats"].Partitions[0].Replicas, 3, "heartbeats.topic.replication.factor")
		cfgs, err := adm.DescribeTopicConfigs(ctx, "heartbeats")
		require.NoError(t, err)
		rc, err := cfgs.On("heartbeats", nil)
		require.NoError(t, err)
		var policyValue string
		for _, c := range rc.Configs {
			if c.Key == "cleanup.policy" {
				policyValue = c.MaybeValue()
			}
		}
		require.Equal(t, "compact", policyValue)
	})
}

// An existing heartbeats topic (written by MM2 before, or created by an
// operator) is used as it is, even with another partition count; heartbeats
// still go to partition 0.
func TestEmitterUsesExistingTopic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		_, err := f.adm.CreateTopic(context.Background(), 3, 1, nil, "heartbeats")
		require.NoError(t, err)
		e := f.emitter(t, Options{Source: "B", Target: "A", Interval: time.Second})
		require.NoError(t, runFor(t, e, 3*time.Second+500*time.Millisecond))
		recs := f.readTopic(t, "heartbeats")
		require.Len(t, recs, 3)
		for _, r := range recs {
			require.Equal(t, int32(0), r.Partition)
		}
	})
}

func TestEmitterTopicCreationFailure(t *testing.T) {
	tests := []struct {
		name  string
		rf    int16
		fault *kfake.Fault
		want  error
	}{
		{name: "replication factor above the broker count", rf: 3, want: kerr.InvalidReplicationFactor},
		{name: "invalid config", rf: 1, fault: &kfake.Fault{Keys: []kmsg.Key{kmsg.CreateTopics}, Err: kerr.InvalidConfig}, want: kerr.InvalidConfig},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t)
				if tc.fault != nil {
					f.c.Fault(*tc.fault)
				}
				e := f.emitter(t, Options{Source: "A", Target: "B", ReplicationFactor: tc.rf})
				err := runFor(t, e, time.Second)
				require.ErrorIs(t, err, tc.want)
				require.ErrorContains(t, err, "ensure heartbeats topic on B")
			})
		})
	}
}

// Writes the target refuses are counted by reason and superseded by the next
// heartbeat; the emitter keeps running and recovers on its own.
func TestEmitterRecoversFromProduceErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		fault := f.c.Fault(kfake.Fault{
			Keys:  []kmsg.Key{kmsg.Produce},
			Topic: "heartbeats",
			Err:   kerr.TopicAuthorizationFailed,
			Count: 2,
		})
		e := f.emitter(t, Options{Source: "A", Target: "B", Interval: time.Second})
		require.NoError(t, runFor(t, e, 5*time.Second+500*time.Millisecond))

		require.Equal(t, 2.0, testutil.ToFloat64(e.m.errors.WithLabelValues("A->B", metric.ReasonAuthorization)))
		require.Equal(t, 3.0, testutil.ToFloat64(e.m.records.WithLabelValues("A->B")))
		recs := f.readTopic(t, "heartbeats")
		require.Len(t, recs, 3, "heartbeats 3, 4 and 5 were written")
		require.Equal(t, 2, fault.Hits())
		require.NoError(t, testutil.GatherAndCompare(f.reg, strings.NewReader(`
# HELP mm2go_heartbeat_errors_total Heartbeat writes that failed, by flow and reason; every one is also logged and retried at the next interval.
# TYPE mm2go_heartbeat_errors_total counter
mm2go_heartbeat_errors_total{flow="A->B",reason="authorization"} 2
# HELP mm2go_heartbeat_records_total Heartbeat records the target acknowledged, by flow (MM2's heartbeat task writes one per emit.heartbeats.interval.seconds).
# TYPE mm2go_heartbeat_records_total counter
mm2go_heartbeat_records_total{flow="A->B"} 3
`), "mm2go_heartbeat_errors_total", "mm2go_heartbeat_records_total"))
	})
}

// A write the target keeps failing with a retriable error is given up after
// WriteTimeout (once kgo can safely fail it) and counted as a timeout; no
// second write starts meanwhile, and heartbeats resume once the target
// answers again.
func TestEmitterWriteTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		fault := f.c.Fault(kfake.Fault{
			Keys:  []kmsg.Key{kmsg.Produce},
			Topic: "heartbeats",
			Err:   kerr.NotLeaderForPartition,
			Count: -1,
		})
		e := f.emitter(t, Options{Source: "A", Target: "B", Interval: time.Second, WriteTimeout: 3 * time.Second})
		timeouts := func() float64 { return testutil.ToFloat64(e.m.errors.WithLabelValues("A->B", metric.ReasonTimeout)) }
		written := func() float64 { return testutil.ToFloat64(e.m.records.WithLabelValues("A->B")) }
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- e.Run(ctx) }()
		time.Sleep(10*time.Second + 500*time.Millisecond)
		failedWhileDown, writtenWhileDown := timeouts(), written()
		fault.Remove()
		time.Sleep(5 * time.Second)
		cancel()
		require.NoError(t, <-done)

		require.Equal(t, 0.0, writtenWhileDown)
		// Ten ticks passed, but each write waits at least WriteTimeout.
		require.GreaterOrEqual(t, failedWhileDown, 1.0)
		require.LessOrEqual(t, failedWhileDown, 3.0)
		require.Positive(t, written(), "writes resume after the fault")
		require.Equal(t, 0.0, testutil.ToFloat64(e.m.errors.WithLabelValues("A->B", reasonProduce)))
	})
}

// Emitters of several flows, and a restarted emitter, share one registry.
// TestEmitterStopDeletesItsTimestamp: an emitter stopped (its flow removed
// by a reload, or its task moved to another instance) deletes its
// last-heartbeat series, on which the stale-heartbeats alert would fire
// for ever; one that keeps failing keeps it.
func TestEmitterStopDeletesItsTimestamp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		e := f.emitter(t, Options{Source: "A", Target: "B", Interval: time.Second})
		series := func() int { return testutil.CollectAndCount(f.reg, "mm2go_heartbeat_last_timestamp_seconds") }
		require.NoError(t, runThen(t, e, 2*time.Second+500*time.Millisecond, func() {
			require.Equal(t, 1, series(), "exported while it runs")
		}))
		require.Zero(t, series(), "deleted when it stopped")
		require.Equal(t, 2.0, testutil.ToFloat64(e.m.records.WithLabelValues("A->B")), "counters stay")
	})
}

func TestEmittersShareRegistry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		ab := f.emitter(t, Options{Source: "A", Target: "B", Interval: time.Second})
		cb := f.emitter(t, Options{Source: "C", Target: "B", Interval: time.Second})
		again := f.emitter(t, Options{Source: "A", Target: "B", Interval: time.Second})
		require.NoError(t, runFor(t, ab, 2*time.Second+500*time.Millisecond))
		require.NoError(t, runFor(t, cb, 1*time.Second+500*time.Millisecond))
		require.NoError(t, runFor(t, again, 1*time.Second+500*time.Millisecond))
		require.Equal(t, 3.0, testutil.ToFloat64(again.m.records.WithLabelValues("A->B")))
		require.Equal(t, 1.0, testutil.ToFloat64(ab.m.records.WithLabelValues("C->B")))

		keys := map[string]int{}
		for _, r := range f.readTopic(t, "heartbeats") {
			hb, err := policy.DecodeHeartbeat(r.Key, r.Value)
			require.NoError(t, err)
			keys[hb.SourceAlias+"->"+hb.TargetAlias]++
		}
		require.Equal(t, map[string]int{"A->B": 3, "C->B": 1}, keys)
	})
}

func TestNewValidates(t *testing.T) {
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	long := strings.Repeat("x", 32768)
	tests := []struct {
		name string
		o    Options
		want string
	}{
		{"no source", Options{Target: "B", Producer: cl, Admin: adm}, "source and target aliases are required"},
		{"no target", Options{Source: "A", Producer: cl, Admin: adm}, "source and target aliases are required"},
		{"no producer", Options{Source: "A", Target: "B", Admin: adm}, "producer and admin clients are required"},
		{"no admin", Options{Source: "A", Target: "B", Producer: cl}, "producer and admin clients are required"},
		{"alias too long", Options{Source: long, Target: "B", Producer: cl, Admin: adm}, "encode key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.o)
			require.ErrorContains(t, err, tc.want)
		})
	}

	e, err := New(Options{Source: "A", Target: "B", Producer: cl, Admin: adm})
	require.NoError(t, err)
	require.Equal(t, DefaultInterval, e.o.Interval)
	require.Equal(t, DefaultReplicationFactor, e.o.ReplicationFactor)
	require.Equal(t, DefaultAdminTimeout, e.o.AdminTimeout)
	require.Equal(t, DefaultWriteTimeout, e.o.WriteTimeout)
	require.Equal(t, "heartbeats", e.topic)
	_, err = New(Options{Source: long, Target: "B", Producer: cl, Admin: adm})
	require.ErrorIs(t, err, policy.ErrStringTooLong)
}

// takenRegistry has a different metric under the name of the heartbeat
// counter, so registering ours conflicts.

package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/internal/itopic"
	"github.com/mm2go/mm2go/internal/ktest"
	"github.com/mm2go/mm2go/internal/offsetmap"
	"github.com/mm2go/mm2go/policy"
)

// bed is a source cluster A and a target cluster B (kfake, one broker each)
// with clients to set them up and inspect them.
type bed struct {
	t        *testing.T
	src, dst *kfake.Cluster
	srcAdm   *kadm.Client
	dstAdm   *kadm.Client
	dstProd  *kgo.Client // manual partitioner, for the offset map and checkpoints
}

func newBed(t *testing.T) *bed {
	t.Helper()
	b := &bed{t: t, src: newCluster(t), dst: newCluster(t)}
	b.srcAdm = kadm.NewClient(b.client(b.src))
	b.dstAdm = kadm.NewClient(b.client(b.dst))
	b.dstProd = b.client(b.dst, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	return b
}

func newCluster(t *testing.T) *kfake.Cluster {
	t.Helper()
	return ktest.Fake(t, 1)
}

// client returns a client of c closed at the end of the test.
func (b *bed) client(c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	b.t.Helper()
	return ktest.Client(b.t, c.ListenAddrs(), append([]kgo.Opt{kgo.MetadataMinAge(50 * time.Millisecond)}, opts...)...)
}

// flow parses flow A->B between the bed's clusters; intervals are set to
// 50 ms so that loops run quickly.
func (b *bed) flow(extra ...string) *config.Flow {
	b.t.Helper()
	props := append([]string{
		"clusters = A, B",
		"A.bootstrap.servers = " + strings.Join(b.src.ListenAddrs(), ","),
		"B.bootstrap.servers = " + strings.Join(b.dst.ListenAddrs(), ","),
		"A->B.enabled = true",
		"checkpoints.topic.replication.factor = 1",
		"sync.group.offsets.enabled = true",
	}, extra...)
	cfg, _, err := config.Parse([]byte(strings.Join(props, "\n")), b.t.TempDir())
	require.NoError(b.t, err)
	f := cfg.Flow("A", "B")
	require.NotNil(b.t, f)
	f.EmitCheckpointsInterval = 50 * time.Millisecond
	f.SyncGroupOffsetsInterval = 50 * time.Millisecond
	f.RefreshGroupsInterval = 50 * time.Millisecond
	f.AdminTimeout = 10 * time.Second
	return f
}

func defaultPolicy() policy.Policy { return policy.New(policy.KindDefault, "", true, "A") }

// selector is the topic selector of f under the default policy.
func selector(t *testing.T, f *config.Flow) policy.TopicSelector {
	t.Helper()
	topics, err := policy.NewFilter(f.Topics, f.TopicsExclude)
	require.NoError(t, err)
	return policy.TopicSelector{Policy: defaultPolicy(), Topics: topics, HeartbeatsReplication: true, TargetAlias: f.Target}
}

func createTopic(t *testing.T, c *kfake.Cluster, topic string, partitions int32) {
	t.Helper()
	require.NoError(t, c.CreateTopic(topic, partitions, nil))
}

// seg and posn build offset map records of any partition.
func mseg(topic string, p int32, from, last, down int64) offsetmap.Record {
	return offsetmap.Record{Segment: &offsetmap.Segment{Topic: topic, Partition: p, From: from, Last: last, Down: down}}
}

func mpos(topic string, p int32, next, downNext int64) offsetmap.Record {
	return offsetmap.Record{Position: &offsetmap.Position{Topic: topic, Partition: p, Next: next, DownNext: downNext}}
}

// writeMap writes records to the offset map topic of source A on B, as the
// replicator does.
func (b *bed) writeMap(recs ...offsetmap.Record) {
	b.t.Helper()
	topic := offsetmap.Topic("A")
	_, err := itopic.Ensure(context.Background(), b.dstAdm, itopic.Spec{Name: topic, Partitions: 1, ReplicationFactor: 1})
	require.NoError(b.t, err)
	var krs []*kgo.Record
	for _, r := range recs {
		var key, value []byte
		var err error
		switch {
		case r.Segment != nil:
			key, err = r.Segment.Key()
			value = r.Segment.Value()
		default:
			key, err = r.Position.Key()
			value = r.Position.Value()
		}
		require.NoError(b.t, err)
		krs = append(krs, &kgo.Record{Topic: topic, Partition: 0, Key: key, Value: value})
	}
	require.NoError(b.t, b.dstProd.ProduceSync(context.Background(), krs...).FirstErr())
}

// produceRaw writes raw records to partition 0 of topic on B.
func (b *bed) produceRaw(topic string, recs ...*kgo.Record) {
	b.t.Helper()
	for _, r := range recs {
		r.Topic, r.Partition = topic, 0
	}
	require.NoError(b.t, b.dstProd.ProduceSync(context.Background(), recs...).FirstErr())
}

// commit commits offsets of group on a cluster through adm.
func commit(t *testing.T, adm *kadm.Client, group, topic string, offsets map[int32]int64, metadata string) {
	t.Helper()
	os := make(kadm.Offsets)
	for p, o := range offsets {
		os.Add(kadm.Offset{Topic: topic, Partition: p, At: o, LeaderEpoch: -1, Metadata: metadata})
	}
	require.NoError(t, adm.CommitAllOffsets(context.Background(), group, os))
}

// committed returns the committed offsets of group on topic (-1 for none).
func committed(t *testing.T, adm *kadm.Client, group, topic string, partitions int32) []int64 {
	t.Helper()
	rs, err := adm.FetchOffsets(context.Background(), group)
	if !errors.Is(err, kerr.GroupIDNotFound) {
		require.NoError(t, err)
	}
	out := make([]int64, partitions)
	for p := range partitions {
		out[p] = currentOffset(rs, topic, p)
	}
	return out
}

// checkpointRecords reads every record of A's checkpoints topic on B.
func (b *bed) checkpointRecords() ([]*kgo.Record, error) {
	b.t.Helper()
	cl := b.client(b.dst, itopic.ReaderOpts()...)
	defer cl.Close()
	var out []*kgo.Record
	err := itopic.ReadAll(context.Background(), cl, defaultPolicy().CheckpointsTopic("A"), func(r *kgo.Record) {
		out = append(out, r)
	})
	return out, err
}

// checkpoints decodes every record of A's checkpoints topic on B, as MM2's
// tools read them. Records whose key is in skip are left out.
func (b *bed) checkpoints(skip ...[]byte) []policy.Checkpoint {
	b.t.Helper()
	recs, err := b.checkpointRecords()
	require.NoError(b.t, err)
	var out []policy.Checkpoint
	for _, r := range recs {
		if slices.ContainsFunc(skip, func(k []byte) bool { return bytes.Equal(k, r.Key) }) {
			continue
		}
		cp, err := policy.DecodeCheckpoint(r.Key, r.Value)
		require.NoError(b.t, err)
		out = append(out, cp)
	}
	return out
}

// countCheckpoints returns the number of records in the checkpoints topic,
// -1 while it cannot be read (it may be being created).
func (b *bed) countCheckpoints() int {
	recs, err := b.checkpointRecords()
	if err != nil {
		return -1
	}
	return len(recs)
}

// newCheckpointer builds a checkpointer for f with fresh clients.
func (b *bed) newCheckpointer(f *config.Flow, reg prometheus.Registerer, log *zap.Logger, tweak ...func(*Options)) *Checkpointer {
	b.t.Helper()
	if log == nil {
		log = zaptest.NewLogger(b.t)
	}
	o := Options{
		Flow:             f,
		Policy:           defaultPolicy(),
		SourceAdmin:      kadm.NewClient(b.client(b.src)),
		Target:           b.client(b.dst, kgo.RecordPartitioner(kgo.ManualPartitioner())),
		TargetAdmin:      kadm.NewClient(b.client(b.dst)),
		MapReader:        b.client(b.dst, itopic.ReaderOpts()...),
		CheckpointReader: b.client(b.dst, itopic.ReaderOpts()...),
		Log:              log,
		Registerer:       reg,
		InitLocalTopics:  true,
	}
	for _, fn := range tweak {
		fn(&o)
	}
	c, err := New(o)
	require.NoError(b.t, err)
	return c
}

// started builds a checkpointer and runs its start step (topic, loads),
// without the loops, so that tests can drive emit and sync themselves.
func (b *bed) started(f *config.Flow, reg prometheus.Registerer, log *zap.Logger, tweak ...func(*Options)) *Checkpointer {
	b.t.Helper()
	c := b.newCheckpointer(f, reg, log, tweak...)
	require.NoError(b.t, c.start(context.Background()))
	return c
}

// run runs c until the test ends or stop is called; stop returns Run's
// result.
func run(t *testing.T, c *Checkpointer) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// waitEmitRounds waits until c has finished at least n more checkpoint
// rounds (its last-emit timestamp moved n times), so that a test that
// asserts what a round did not do knows the round ran.
func waitEmitRounds(t *testing.T, c *Checkpointer, n int) {
	t.Helper()
	g := c.m.lastEmit.WithLabelValues(c.flow)
	last := testutil.ToFloat64(g)
	for range n {
		waitFor(t, "a checkpoint round", func() bool {
			v := testutil.ToFloat64(g)
			moved := v != last
			last = v
			return moved
		})
	}
}

// waitFor polls cond every 20 ms for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, 20*time.Millisecond, "waiting for %s", what)
}

// member starts a consumer of group on B reading topic (with the KIP-848
// protocol when nextGen) and waits until the group is stable with it. The
// consumer never commits; it stops at the end of the test or when the
// returned function is called.
func (b *bed) member(group, topic string, nextGen bool) (leave func()) {
	b.t.Helper()
	return b.memberOf(b.dst, group, topic, nextGen)
}

// memberOf is member on cluster c.
func (b *bed) memberOf(c *kfake.Cluster, group, topic string, nextGen bool) (leave func()) {
	b.t.Helper()
	opts := []kgo.Opt{kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit()}
	if nextGen {
		opts = append(opts, kgo.ServerSideBalancer())
	}
	cl := b.client(c, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx)
		}
	}()
	var once sync.Once
	leave = func() {
		once.Do(func() {
			cancel()
			<-done
			cl.Close()
		})
	}
	b.t.Cleanup(leave)
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	_, err := c.WaitGroupStable(wctx, group, 1)
	require.NoError(b.t, err)
	return leave
}

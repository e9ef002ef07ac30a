package replicator

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/internal/itopic"
	"github.com/mm2go/mm2go/internal/ktest"
	"github.com/mm2go/mm2go/internal/offsetmap"
	"github.com/mm2go/mm2go/policy"
)

// bed is a source and a target kfake cluster with admin clients.
type bed struct {
	t        *testing.T
	src, dst *kfake.Cluster
	srcCl    *kgo.Client
	dstCl    *kgo.Client
	srcAdm   *kadm.Client
	dstAdm   *kadm.Client
	// pool is the fetch pool of the replicator last started.
	pool *fetchPool
	// last is the replicator last started.
	last *Replicator
	// srcOpts are added to the replicator's source client options,
	// srcSecondOpts to those of its second source client (the batches
	// mode's, Options.SourceSecond).
	srcOpts, srcSecondOpts []kgo.Opt
	// dstOpts are added to the replicator's target client options,
	// secondOpts to those of its second target client (the batches
	// mode's, Options.TargetSecond).
	dstOpts, secondOpts []kgo.Opt
	// task and tasks are the task the next replicator started runs.
	task, tasks int
	// drain is the next replicator's DrainTimeout (0: the default).
	drain time.Duration
	// lagEvery is the next replicator's LagInterval (0: 50 ms).
	lagEvery time.Duration
}

func newBed(t *testing.T) *bed {
	t.Helper()
	return newBedBrokers(t, 1)
}

// newBedBrokers is newBed with n brokers in each cluster.
func newBedBrokers(t *testing.T, n int) *bed {
	t.Helper()
	b := &bed{t: t}
	b.src = newClusterBrokers(t, n)
	b.dst = newClusterBrokers(t, n)
	b.srcCl = newClient(t, b.src, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	// A topic the replicator creates is seen at once (kgo caches a topic
	// it found missing for its metadata min age, 5 s by default).
	b.dstCl = newClient(t, b.dst, kgo.MetadataMinAge(50*time.Millisecond))
	b.srcAdm, b.dstAdm = kadm.NewClient(b.srcCl), kadm.NewClient(b.dstCl)
	return b
}

func newClusterBrokers(t *testing.T, n int) *kfake.Cluster {
	t.Helper()
	return ktest.Fake(t, n)
}

func newClient(t *testing.T, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return ktest.Client(t, c.ListenAddrs(), opts...)
}

// flow parses a flow A->B between the bed's clusters from MM2 properties.
func (b *bed) flow(extra ...string) *config.Flow {
	b.t.Helper()
	props := []string{
		"clusters = A, B",
		"A.bootstrap.servers = " + strings.Join(b.src.ListenAddrs(), ","),
		"B.bootstrap.servers = " + strings.Join(b.dst.ListenAddrs(), ","),
		"A->B.enabled = true",
		"replication.factor = 1",
		"offset-syncs.topic.replication.factor = 1",
		"B.offset.storage.replication.factor = 1",
		"B.offset.flush.interval.ms = 50",
		"refresh.topics.interval.seconds = 1",
	}
	if mode := os.Getenv("MM2GO_TEST_COPY_MODE"); mode != "" {
		props = append(props, "mm2go.copy.mode = "+mode) // the whole suite in another copy mode
	}
	props = append(props, extra...)
	cfg, _, err := config.Parse([]byte(strings.Join(props, "\n")), b.t.TempDir())
	require.NoError(b.t, err)
	f := cfg.Flow("A", "B")
	require.NotNil(b.t, f)
	return f
}

// run starts a replicator for f and returns a stop function that cancels
// it and waits for Run to return.
func (b *bed) run(f *config.Flow, reg prometheus.Registerer) (stop func() error) {
	b.t.Helper()
	return b.runLogged(f, reg, zaptest.NewLogger(b.t))
}

// runLogged is run with the replicator logging to log.
func (b *bed) runLogged(f *config.Flow, reg prometheus.Registerer, log *zap.Logger) (stop func() error) {
	b.t.Helper()
	r, closeClients := b.replicator(f, reg, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := r.Run(ctx)
		if ctx.Err() == nil {
			b.t.Errorf("Run returned before it was stopped: %v", err)
		}
		done <- err
	}()
	var stopped bool
	var runErr error
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			runErr = <-done
			closeClients()
		}
		return runErr
	}
	b.t.Cleanup(func() { _ = stop() })
	return stop
}

// replicator builds a replicator of f on the bed's clusters, with clients
// of its own that closeClients closes.
func (b *bed) replicator(f *config.Flow, reg prometheus.Registerer, log *zap.Logger) (r *Replicator, closeClients func()) {
	b.t.Helper()
	mk := func(c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, opts...)...)
		require.NoError(b.t, err)
		return cl
	}
	b.pool = newFetchPool()
	src := mk(b.src, append(append(consumerOpts(b.pool), kgo.FetchMaxWait(500*time.Millisecond)), b.srcOpts...)...)
	var srcSecond *kgo.Client
	if f.CopyMode == config.CopyBatches {
		srcSecond = mk(b.src, append(append(consumerOpts(newFetchPool()), kgo.FetchMaxWait(500*time.Millisecond)), b.srcSecondOpts...)...)
	}
	srcAdm := mk(b.src)
	dst := mk(b.dst, append(ProducerOpts(), b.dstOpts...)...)
	var dstSecond *kgo.Client
	if f.CopyMode == config.CopyBatches && !f.ExactlyOnce {
		dstSecond = mk(b.dst, append(ProducerOpts(), b.secondOpts...)...)
	}
	dstAdm := mk(b.dst)
	reader := mk(b.dst, itopic.ReaderOpts()...)
	srcReader := mk(b.src, itopic.ReaderOpts()...)
	syncs := mk(b.src, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var txnCl *kgo.Client
	if f.ExactlyOnce {
		txnCl = mk(b.dst, TransactionalOpts(policy.TransactionalID("A", "B", b.task))...)
	}
	lagEvery := 50 * time.Millisecond
	if b.lagEvery > 0 {
		lagEvery = b.lagEvery
	}
	r, err := New(Options{
		Flow: f, Policy: policy.New(policy.KindDefault, "", true, "A"),
		Source: src, SourceSecond: srcSecond, SourceAdmin: kadm.NewClient(srcAdm), SourceReader: srcReader, SyncProducer: syncs,
		Target: dst, TargetSecond: dstSecond, TargetAdmin: kadm.NewClient(dstAdm), TargetReader: reader, Transactional: txnCl,
		Log: log, Registerer: reg,
		RetryBackoff: 50 * time.Millisecond, MaxRetryBackoff: 200 * time.Millisecond, LagInterval: lagEvery,
		Task: b.task, Tasks: b.tasks, DrainTimeout: b.drain,
	})
	require.NoError(b.t, err)
	b.last = r
	return r, func() {
		for _, c := range []*kgo.Client{syncs, srcReader, reader, dstAdm, dst, srcAdm, src} {
			c.Close()
		}
		for _, c := range []*kgo.Client{txnCl, srcSecond, dstSecond} {
			if c != nil {
				c.Close()
			}
		}
	}
}

type record struct {
	key, value string
	keyNil     bool
	headers    string
	ts         int64
}

func toRecord(r *kgo.Record) record {
	var hs []string
	for _, h := range r.Headers {
		hs = append(hs, fmt.Sprintf("%s=%q/%v", h.Key, h.Value, h.Value == nil))
	}
	return record{key: string(r.Key), keyNil: r.Key == nil, value: string(r.Value), headers: strings.Join(hs, ","), ts: r.Timestamp.UnixMilli()}
}

// produceTo is produce, adding what it wrote to want.
func (b *bed) produceTo(want map[int32][]record, topic string, partitions int32, from, n int) {
	b.t.Helper()
	for p, rs := range b.produce(topic, partitions, from, n) {
		want[p] = append(want[p], rs...)
	}
}

// produce writes n records to topic round-robin over partitions, starting
// at sequence number from, and returns them per partition.
func (b *bed) produce(topic string, partitions int32, from, n int) map[int32][]record {
	b.t.Helper()
	out := make(map[int32][]record)
	var rs []*kgo.Record
	for i := from; i < from+n; i++ {
		r := &kgo.Record{Topic: topic, Partition: int32(i) % partitions, Value: []byte(fmt.Sprintf("v%d", i)), Timestamp: time.UnixMilli(1_600_000_000_000 + int64(i))}
		if i%5 != 0 {
			r.Key = []byte(fmt.Sprintf("k%d", i))
		}
		if i%3 == 0 {
			r.Headers = []kgo.RecordHeader{{Key: "h", Value: []byte("x")}, {Key: "nil"}}
		}
		rs = append(rs, r)
		out[r.Partition] = append(out[r.Partition], toRecord(r))
	}
	require.NoError(b.t, b.srcCl.ProduceSync(context.Background(), rs...).FirstErr())
	return out
}

// read returns every record of topic on the target, per partition, waiting
// until there are at least want in total.
func (b *bed) read(topic string, want int) map[int32][]record {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl := newClient(b.t, b.dst, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer cl.Close() // no fetching in the background afterwards
	out := make(map[int32][]record)
	n := 0
	for n < want {
		fs := cl.PollFetches(ctx)
		require.NoError(b.t, ctx.Err(), "read %s: have %d of %d records", topic, n, want)
		fs.EachRecord(func(r *kgo.Record) {
			out[r.Partition] = append(out[r.Partition], toRecord(r))
			n++
		})
	}
	return out
}

func (b *bed) createTopic(adm *kadm.Client, topic string, partitions int32, cfg map[string]*string) {
	b.t.Helper()
	_, err := adm.CreateTopic(context.Background(), partitions, 1, cfg, topic)
	require.NoError(b.t, err)
}

// copied counts the records of topic on the target up to its current end:
// data records only, not the transaction markers that fencing writes
// (mm2go.copy.fencing = epoch, the batches mode's default), which take
// offsets too. -1 when the topic cannot be listed.
func (b *bed) copied(topic string) int64 {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := ktest.Records(ctx, b.dstAdm, topic)
	if err != nil {
		return -1
	}
	return n
}

// copiedPer is copied per partition; nil when the topic cannot be listed.
func (b *bed) copiedPer(topic string) map[int32]int64 {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	per, err := ktest.RecordsPer(ctx, b.dstAdm, topic)
	if err != nil {
		return nil
	}
	return per
}

// waitDiscoveries waits until the replicator last started has finished n
// more discovery rounds.
func (b *bed) waitDiscoveries(n int64) {
	b.t.Helper()
	want := b.last.discoveries.Load() + n
	waitFor(b.t, "discovery rounds", func() bool { return b.last.discoveries.Load() >= want })
}

// moveLeaders moves the leaders of c's partitions until one of topic's
// has moved, as cl (a client of c) is told by a broker.
func moveLeaders(t *testing.T, c *kfake.Cluster, cl *kgo.Client, topic string) {
	t.Helper()
	leaders := func() map[int32]int32 {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(context.Background(), cl) // not kgo's cache
		require.NoError(t, err)
		out := map[int32]int32{}
		for _, rt := range resp.Topics {
			for _, p := range rt.Partitions {
				out[p.Partition] = p.Leader
			}
		}
		require.NotEmpty(t, out, "partitions of %s", topic)
		return out
	}
	before := leaders()
	for {
		c.ShufflePartitionLeaders()
		for p, l := range leaders() {
			if before[p] != l {
				return
			}
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCopiesRecordsFaithfully(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "orders", 3, map[string]*string{"cleanup.policy": kadm.StringPtr("compact"), "retention.ms": kadm.StringPtr("12345")})
	b.createTopic(b.srcAdm, "payments", 2, nil)
	want := b.produce("orders", 3, 0, 300)
	wantPay := b.produce("payments", 2, 0, 50)

	reg := prometheus.NewRegistry()
	stop := b.run(b.flow(), reg)
	require.Equal(t, want, b.read("A.orders", 300))
	require.Equal(t, wantPay, b.read("A.payments", 50))
	require.NoError(t, stop())

	// Same partition count; the source's non-default configs were copied.
	md, err := b.dstAdm.ListTopics(context.Background(), "A.orders")
	require.NoError(t, err)
	require.Len(t, md["A.orders"].Partitions, 3)
	rcs, err := b.dstAdm.DescribeTopicConfigs(context.Background(), "A.orders")
	require.NoError(t, err)
	rc, err := rcs.On("A.orders", nil)
	require.NoError(t, err)
	got := map[string]string{}
	for _, c := range rc.Configs {
		got[c.Key] = c.MaybeValue()
	}
	require.Equal(t, "compact", got["cleanup.policy"])
	require.Equal(t, "12345", got["retention.ms"])

	require.Equal(t, 350.0, sumOf(t, reg, "mm2go_replicator_records_total", nil))
}

// sumOf gathers reg and sums the values (counter or gauge) of the series
// of the named metric whose labels include labels (none: every series).
func sumOf(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	_, sum := seriesOf(t, reg, name, labels)
	return sum
}

// seriesOf gathers reg and counts the series of the named metric whose
// labels include labels, and sums their values.
func seriesOf(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (n int, sum float64) {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			n++
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return n, sum
}

// TestProgressIsStoredAsMM2StoresIt checks the offsets topic: MM2's key bytes,
// Java's partitioning, the last copied upstream offset.
func TestProgressIsStoredAsMM2StoresIt(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "orders", 2, nil)
	b.produce("orders", 2, 0, 10)
	stop := b.run(b.flow(), nil)
	b.read("A.orders", 10)
	require.NoError(t, stop())

	cl := newClient(t, b.dst, itopic.ReaderOpts()...)
	got := map[string]string{}
	require.NoError(t, itopic.ReadAll(context.Background(), cl, "mm2-offsets.A.internal", func(r *kgo.Record) {
		require.Equal(t, policy.ConnectOffsetPartition(r.Key, 25), r.Partition)
		got[string(r.Key)] = string(r.Value)
	}))
	require.Equal(t, map[string]string{
		`["MirrorSourceConnector",{"cluster":"A","partition":0,"topic":"orders"}]`: `{"offset":4}`,
		`["MirrorSourceConnector",{"cluster":"A","partition":1,"topic":"orders"}]`: `{"offset":4}`,
	}, got)
}

// TestFlushesWhenCaughtUp: once the target acknowledged everything up to
// the source's end (the source is quiet, as when producers moved to the
// target), progress and the offset map are stored at once rather than at
// the next offset.flush.interval.ms, so that a group failing over finds its
// final commit translated without waiting for it.
func TestFlushesWhenCaughtUp(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "orders", 2, nil)
	b.produce("orders", 2, 0, 10)
	b.run(b.flow("B.offset.flush.interval.ms = 60000"), nil)
	cl := newClient(t, b.dst, itopic.ReaderOpts()...)
	stored := func(want string) func() bool {
		return func() bool {
			got := map[string]string{}
			err := itopic.ReadAll(context.Background(), cl, "mm2-offsets.A.internal", func(r *kgo.Record) {
				got[string(r.Key)] = string(r.Value)
			})
			return err == nil && len(got) == 2 &&
				got[`["MirrorSourceConnector",{"cluster":"A","partition":0,"topic":"orders"}]`] == want &&
				got[`["MirrorSourceConnector",{"cluster":"A","partition":1,"topic":"orders"}]`] == want
		}
	}
	require.Eventually(t, stored(`{"offset":4}`), 10*time.Second, 50*time.Millisecond, "progress stored long before the 60 s flush interval")
	b.produce("orders", 2, 10, 10)
	require.Eventually(t, stored(`{"offset":9}`), 10*time.Second, 50*time.Millisecond, "and again when the source is quiet again")
}

// TestResumesFromStoredProgress covers a restart and a takeover: records
// copied by an earlier run, and offsets stored by Apache MM2, are not copied
// again.
func TestResumesFromStoredProgress(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "orders", 2, nil)
	first := b.produce("orders", 2, 0, 20)
	stop := b.run(b.flow(), nil)
	b.read("A.orders", 20)
	require.NoError(t, stop())

	second := b.produce("orders", 2, 20, 20)
	stop = b.run(b.flow(), nil)
	waitFor(t, "40 records on the target", func() bool { return b.copied("A.orders") == 40 })
	require.NoError(t, stop())
	got := b.read("A.orders", 40)
	for p := range int32(2) {
		require.Equal(t, append(slices.Clone(first[p]), second[p]...), got[p], "partition %d: each record once, in order", p)
	}

	// An offset written by Apache MM2 (same bytes) for a topic mm2go never
	// copied: copying starts after it.
	b.createTopic(b.srcAdm, "legacy", 1, nil)
	legacy := b.produce("legacy", 1, 0, 10)
	key := `["MirrorSourceConnector",{"cluster":"A","partition":0,"topic":"legacy"}]`
	require.NoError(t, b.dstCl.ProduceSync(context.Background(), &kgo.Record{
		Topic: "mm2-offsets.A.internal", Partition: policy.ConnectOffsetPartition([]byte(key), 25),
		Key: []byte(key), Value: []byte(`{"offset":6}`),
	}).FirstErr())
	stop = b.run(b.flow(), nil)
	require.Equal(t, map[int32][]record{0: legacy[0][7:]}, b.read("A.legacy", 3))
	require.NoError(t, stop())
	require.EqualValues(t, 3, b.copied("A.legacy"))
}

// TestRecordTooLargeStallsAndRecovers: a record the target refuses pauses its
// partition (counted, logged), the other partitions go on, and once the
// target accepts it the partition continues from it: nothing is skipped.
func TestRecordTooLargeStallsAndRecovers(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "big", 2, nil)
	b.createTopic(b.dstAdm, "A.big", 2, map[string]*string{"max.message.bytes": kadm.StringPtr("2000")})
	large := make([]byte, 10_000) // random, so compression cannot shrink it
	_, err := rand.Read(large)
	require.NoError(t, err)
	copy(large, "LLLLLLL")
	rs := []*kgo.Record{
		{Topic: "big", Partition: 0, Value: []byte("small-0")},
		{Topic: "big", Partition: 0, Value: large},
		{Topic: "big", Partition: 0, Value: []byte("small-2")},
		{Topic: "big", Partition: 1, Value: []byte("other")},
	}
	require.NoError(t, b.srcCl.ProduceSync(context.Background(), rs...).FirstErr())

	reg := prometheus.NewRegistry()
	// Topic-config sync would revert the target-only max.message.bytes
	// (the source has the default), as MM2's does.
	stop := b.run(b.flow("sync.topic.configs.enabled = false"), reg)
	waitFor(t, "partition 1 copied and partition 0 refused", func() bool {
		return b.copied("A.big") >= 1 && sumOf(t, reg, "mm2go_replicator_errors_total", nil) >= 2
	})
	// Retried with backoff, never skipped: the large record stays the
	// partition's next record, however many times it is refused.
	refused := sumOf(t, reg, "mm2go_replicator_errors_total", nil)
	waitFor(t, "two more refusals", func() bool { return sumOf(t, reg, "mm2go_replicator_errors_total", nil) >= refused+2 })
	per := b.copiedPer("A.big")
	require.LessOrEqual(t, per[0], int64(1), "at most small-0 before the refused record")
	require.EqualValues(t, 1, per[1])

	_, err = b.dstAdm.AlterTopicConfigs(context.Background(), []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: kadm.StringPtr("100000")}}, "A.big")
	require.NoError(t, err)
	got := b.read("A.big", 4)
	require.NoError(t, stop())
	var vals []string
	for _, r := range got[0] {
		vals = append(vals, r.value[:min(len(r.value), 7)])
	}
	// small-0 may have been written twice (it was in flight when the
	// partition failed); the large record and small-2 follow, once.
	vals = slices.Compact(vals)
	require.Equal(t, []string{"small-0", "LLLLLLL", "small-2"}, vals)
}

func TestDiscoversNewTopicsAndSkipsInternalAndCycles(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "first", 1, nil)
	b.createTopic(b.srcAdm, "B.came-from-target", 1, nil) // would cycle back to B
	b.createTopic(b.srcAdm, "mm2-offsets.X.internal", 1, nil)
	b.createTopic(b.srcAdm, "skipped", 1, nil)
	b.produce("first", 1, 0, 1)
	b.produce("B.came-from-target", 1, 0, 1)
	stop := b.run(b.flow("A->B.topics.exclude = skipped, .*[\\-\\.]internal"), nil)
	b.read("A.first", 1)

	b.createTopic(b.srcAdm, "later", 2, nil)
	b.produce("later", 2, 0, 4)
	b.read("A.later", 4)
	require.NoError(t, stop())

	md, err := b.dstAdm.ListTopics(context.Background())
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"A.first", "A.later", "mm2-offsets.A.internal", "mm2go-offset-map.A.internal"}, md.Names())
}

// offsetMap reads the flow's offset map from the target: the segments per
// partition, by first upstream offset, and the positions.
func (b *bed) offsetMap() (map[int32][]offsetmap.Segment, map[int32]offsetmap.Position) {
	b.t.Helper()
	cl := newClient(b.t, b.dst, itopic.ReaderOpts()...)
	segs := make(map[int32]map[int64]offsetmap.Segment)
	pos := make(map[int32]offsetmap.Position)
	require.NoError(b.t, itopic.ReadAll(context.Background(), cl, offsetmap.Topic("A"), func(r *kgo.Record) {
		m, err := offsetmap.Decode(r.Key, r.Value)
		require.NoError(b.t, err)
		switch {
		case m.Segment != nil && m.Deleted:
			delete(segs[m.Segment.Partition], m.Segment.From)
		case m.Segment != nil:
			if segs[m.Segment.Partition] == nil {
				segs[m.Segment.Partition] = make(map[int64]offsetmap.Segment)
			}
			segs[m.Segment.Partition][m.Segment.From] = *m.Segment
		case m.Position != nil:
			pos[m.Position.Partition] = *m.Position
		}
	}))
	out := make(map[int32][]offsetmap.Segment)
	for p, ss := range segs {
		for _, s := range ss {
			out[p] = append(out[p], s)
		}
		slices.SortFunc(out[p], func(a, b offsetmap.Segment) int { return int(a.From - b.From) })
	}
	return out, pos
}

// offsetSyncs returns MM2's offset syncs on the bed's source, in order, as
// "upstream->downstream".
func (b *bed) offsetSyncs() []string {
	b.t.Helper()
	cl := newClient(b.t, b.src, itopic.ReaderOpts()...)
	var syncs []string
	require.NoError(b.t, itopic.ReadAll(context.Background(), cl, "mm2-offset-syncs.B.internal", func(r *kgo.Record) {
		s, err := policy.DecodeOffsetSync(r.Key, r.Value)
		require.NoError(b.t, err)
		syncs = append(syncs, fmt.Sprintf("%d->%d", s.UpstreamOffset, s.DownstreamOffset))
	}))
	return syncs
}

// TestSyncTopicWhileFlowStarts: MM2's offset-syncs topic on the source is
// created while the flow starts, not before it: with the source holding
// its creation, the remote topic is created meanwhile, and nothing is
// copied (the copy writes offset syncs) until the topic exists. Refused
// (a create policy), it fails Run, naming the cluster and the topic.
func TestSyncTopicWhileFlowStarts(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "t", 1, nil)
	want := map[int32][]record{}
	b.produceTo(want, "t", 1, 0, 10)
	release := make(chan struct{})
	var held atomic.Bool
	b.src.ControlKey(int16(kmsg.CreateTopics), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		b.src.KeepControl()
		for _, rt := range kr.(*kmsg.CreateTopicsRequest).Topics {
			if rt.Topic == "mm2-offset-syncs.B.internal" {
				held.Store(true)
				b.src.SleepControl(func() { <-release })
			}
		}
		return nil, nil, false
	})
	stop := b.run(b.flow("mm2go.copy.fencing = none"), nil)
	waitFor(t, "the offset-syncs topic's creation held", held.Load)
	waitFor(t, "the remote topic created meanwhile", func() bool {
		td, err := b.dstAdm.ListTopics(context.Background(), "A.t")
		return err == nil && td.Has("A.t") && td["A.t"].Err == nil
	})
	require.Zero(t, b.copied("A.t"), "copied before the offset-syncs topic exists")
	close(release)
	require.Equal(t, want, b.read("A.t", 10))
	waitFor(t, "an offset sync", func() bool { return len(b.offsetSyncs()) > 0 })
	require.NoError(t, stop())

	// Refused: Run fails.
	other := newBed(t)
	other.createTopic(other.srcAdm, "t", 1, nil)
	other.src.ControlKey(int16(kmsg.CreateTopics), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		other.src.KeepControl()
		req := kr.(*kmsg.CreateTopicsRequest)
		resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewCreateTopicsResponseTopic()
			st.Topic, st.ErrorCode = rt.Topic, kerr.PolicyViolation.Code
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	r, closeClients := other.replicator(other.flow("mm2go.copy.fencing = none"), nil, zaptest.NewLogger(t))
	defer closeClients()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.ErrorContains(t, r.Run(ctx), "ensure offset-syncs topic on A: create topic mm2-offset-syncs.B.internal")
}

// TestOffsetMapAndSyncs checks what a copy records: one segment per run of
// contiguous offsets, the position, and MM2's offset syncs on the source.
func TestOffsetMapAndSyncs(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "orders", 1, nil)
	b.produce("orders", 1, 0, 250)
	// No fencing: its abort marker would take the first remote offset.
	stop := b.run(b.flow("offset.lag.max = 100", "mm2go.copy.fencing = none"), nil)
	b.read("A.orders", 250)
	waitFor(t, "the position written", func() bool {
		_, pos := b.offsetMap()
		return pos[0].Next == 250
	})
	require.NoError(t, stop())
	segs, pos := b.offsetMap()
	require.Equal(t, []offsetmap.Segment{{Topic: "orders", Partition: 0, From: 0, Last: 249, Down: 0}}, segs[0])
	require.Equal(t, offsetmap.Position{Topic: "orders", Partition: 0, Next: 250, DownNext: 250}, pos[0])

	// MM2's syncs: the first record, then whenever the newest is 100 or more
	// downstream offsets behind, then the newest at the last flush.
	syncs := b.offsetSyncs()
	require.Contains(t, syncs, "0->0")
	require.Contains(t, syncs, "101->101")
	require.Contains(t, syncs, "202->202")
	require.Equal(t, "249->249", syncs[len(syncs)-1])
}

// TestOffsetSyncsOfAStopDuringProducerInit: a stop while the offset sync
// producer's first write waits for its producer id (the source answers
// InitProducerID after 400 ms) still writes the syncs: the periodic flush
// writes on past the stop, within the drain, so that its cancelled write
// does not fail the producer id and with it the final flush's syncs.
func TestOffsetSyncsOfAStopDuringProducerInit(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "orders", 1, nil)
	b.produce("orders", 1, 0, 20)
	b.src.ControlKey(int16(kmsg.InitProducerID), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.src.KeepControl()
		b.src.SleepControl(func() { time.Sleep(400 * time.Millisecond) })
		return nil, nil, false
	})
	stop := b.run(b.flow("mm2go.copy.fencing = none"), nil)
	b.read("A.orders", 20)
	waitFor(t, "the position written", func() bool {
		_, pos := b.offsetMap()
		return pos[0].Next == 20
	})
	require.NoError(t, stop())
	syncs := b.offsetSyncs()
	require.Contains(t, syncs, "0->0")
	require.Equal(t, "19->19", syncs[len(syncs)-1])
}

// TestRestartReconcilesCopiedTail simulates a crash after the target
// acknowledged records whose progress was not stored yet: the restart finds
// them on the target and copies nothing twice. Records of another producer
// on the remote topic are kept and skipped around.
func TestRestartReconcilesCopiedTail(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "orders", 1, nil)
	first := b.produce("orders", 1, 0, 20)
	f := b.flow()
	stop := b.run(f, nil)
	b.read("A.orders", 20)
	require.NoError(t, stop())

	// The "crash": ten more source records reached the target, but neither
	// the progress nor the offset map recorded them.
	next := b.produce("orders", 1, 20, 10)
	src := newClient(t, b.src, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"orders": {0: kgo.NewOffset().At(20)}}))
	var copied []*kgo.Record
	for len(copied) < 10 {
		fs := src.PollFetches(context.Background())
		fs.EachRecord(func(r *kgo.Record) {
			copied = append(copied, &kgo.Record{Topic: "A.orders", Partition: 0, Key: r.Key, Value: r.Value, Headers: r.Headers, Timestamp: r.Timestamp})
		})
	}
	dst := newClient(t, b.dst, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, dst.ProduceSync(context.Background(), copied...).FirstErr())

	reg := prometheus.NewRegistry()
	stop = b.run(b.flow(), reg)
	// Caught up (the lag counts from what the target acknowledged): what
	// the run would copy again is on the target by now.
	waitFor(t, "the run caught up", func() bool {
		n, lag := seriesOf(t, reg, "mm2go_replicator_lag_records", map[string]string{"topic": "orders"})
		return n == 1 && lag == 0
	})
	require.EqualValues(t, 30, b.copied("A.orders"), "nothing copied twice")
	require.Equal(t, append(slices.Clone(first[0]), next[0]...), b.read("A.orders", 30)[0])

	// Another producer writes to the remote topic; replication goes on
	// after its records.
	require.NoError(t, dst.ProduceSync(context.Background(), &kgo.Record{Topic: "A.orders", Partition: 0, Value: []byte("foreign")}).FirstErr())
	b.produce("orders", 1, 30, 5)
	waitFor(t, "36 records", func() bool { return b.copied("A.orders") == 36 })
	require.NoError(t, stop())
	// Fencing (the batches mode's default) puts an abort marker before each
	// run's first write: at 0, and after the records of the "crash".
	var m int64
	if f.Fencing == config.FencingEpoch {
		m = 1
	}
	segs, pos := b.offsetMap()
	require.Equal(t, []offsetmap.Segment{
		{Topic: "orders", Partition: 0, From: 0, Last: 29, Down: m},
		{Topic: "orders", Partition: 0, From: 30, Last: 34, Down: 31 + 2*m},
	}, segs[0])
	require.Equal(t, offsetmap.Position{Topic: "orders", Partition: 0, Next: 35, DownNext: 36 + 2*m}, pos[0])
}

// TestProvenanceHeaders: with mm2go.provenance.headers on, copied records
// carry their origin and records that came from the target are not copied
// back (active/active under the identity policy).
func TestProvenanceHeaders(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "orders", 1, nil)
	require.NoError(t, b.srcCl.ProduceSync(context.Background(),
		&kgo.Record{Topic: "orders", Value: []byte("local-1")},
		&kgo.Record{Topic: "orders", Value: []byte("from-B"), Headers: []kgo.RecordHeader{{Key: "mm2go.origin", Value: []byte("B")}}},
		&kgo.Record{Topic: "orders", Value: []byte("from-C"), Headers: []kgo.RecordHeader{{Key: "mm2go.origin", Value: []byte("C")}}},
		&kgo.Record{Topic: "orders", Value: []byte("local-2"), Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("v")}}},
	).FirstErr())
	reg := prometheus.NewRegistry()
	stop := b.run(b.flow("mm2go.provenance.headers = true"), reg)
	got := b.read("A.orders", 3)
	require.Equal(t, []record{
		{key: "", keyNil: true, value: "local-1", headers: `mm2go.origin="A"/false`, ts: got[0][0].ts},
		{key: "", keyNil: true, value: "from-C", headers: `mm2go.origin="C"/false`, ts: got[0][1].ts},
		{key: "", keyNil: true, value: "local-2", headers: `h="v"/false,mm2go.origin="A"/false`, ts: got[0][2].ts},
	}, got[0])
	waitFor(t, "lag 0 although the last records were skipped", func() bool {
		return sumOf(t, reg, "mm2go_replicator_lag_records", nil) == 0
	})
	require.NoError(t, stop())
	segs, pos := b.offsetMap()
	require.Equal(t, []offsetmap.Segment{
		{Topic: "orders", Partition: 0, From: 0, Last: 0, Down: 0},
		{Topic: "orders", Partition: 0, From: 2, Last: 3, Down: 1},
	}, segs[0])
	require.EqualValues(t, 4, pos[0].Next)
}

// TestCleanRestartReadsNoTail: after a clean stop the target holds nothing
// after the offset map's last copy but, under fencing (the batches mode's
// default), the abort marker of the next start: that start reads no record
// of the remote topic (no READ on it needed, and a quick start), and copies
// on exactly.
func TestCleanRestartReadsNoTail(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "orders", 2, nil)
	first := b.produce("orders", 2, 0, 20)
	stop := b.run(b.flow(), nil)
	require.Equal(t, first, b.read("A.orders", 20))
	require.NoError(t, stop())

	reads := b.dst.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: "A.orders", Observe: true, Count: -1})
	reg := prometheus.NewRegistry()
	stop = b.run(b.flow(), reg)
	more := b.produce("orders", 2, 20, 10)
	waitFor(t, "10 more records copied", func() bool {
		return sumOf(t, reg, "mm2go_replicator_records_total", nil) >= 10
	})
	require.Zero(t, reads.Hits(), "the start read the remote partitions' tails")
	reads.Remove()
	require.NoError(t, stop())
	got := b.read("A.orders", 30)
	for p := range int32(2) {
		require.Equal(t, append(first[p], more[p]...), got[p], "partition %d", p)
	}
}

// TestDrainBoundedOnce: a stop while the target refuses every write
// returns after DrainTimeout, not after it twice (the batches mode drained
// its sends for DrainTimeout, then the final flush for another).
func TestDrainBoundedOnce(t *testing.T) {
	b := newBed(t)
	b.drain = time.Second
	b.createTopic(b.srcAdm, "orders", 1, nil)
	b.produce("orders", 1, 0, 10)

	// Writes to the held topics fail with a retriable error, retried until
	// the writer gives up.
	var holdCopy, holdProgress atomic.Bool
	var refusedCopy atomic.Int32
	var copyID atomic.Value // [16]byte: the remote topic's ID (Produce v13 names topics by ID)
	copyID.Store([16]byte{})
	b.dst.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		b.dst.KeepControl()
		req := kr.(*kmsg.ProduceRequest)
		// The record mode's producer may put copies and progress into one
		// request: it is held only for what is held alone.
		copies, others := false, false
		for _, rt := range req.Topics {
			if rt.Topic == "A.orders" || rt.TopicID == copyID.Load().([16]byte) {
				copies = true
			} else {
				others = true
			}
		}
		held := (copies && holdCopy.Load()) || (others && !copies && holdProgress.Load())
		if !held {
			return nil, nil, false
		}
		if copies {
			refusedCopy.Add(1)
		}
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.NotEnoughReplicas.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})

	r, closeClients := b.replicator(b.flow(), nil, zaptest.NewLogger(t))
	t.Cleanup(closeClients)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	b.read("A.orders", 10)
	td, err := b.dstAdm.ListTopics(context.Background(), "A.orders")
	require.NoError(t, err)
	copyID.Store([16]byte(td["A.orders"].ID))

	// Records copied whose progress cannot be stored, then records that
	// cannot be copied: a stop has both to drain.
	holdProgress.Store(true)
	b.produce("orders", 1, 10, 10)
	b.read("A.orders", 20)
	holdCopy.Store(true)
	b.produce("orders", 1, 20, 10)
	waitFor(t, "a copy refused", func() bool { return refusedCopy.Load() > 0 })

	start := time.Now()
	cancel()
	require.NoError(t, <-done)
	took := time.Since(start)
	require.Less(t, took, 1800*time.Millisecond, "drain of 1 s took %s", took)
	require.GreaterOrEqual(t, took, 900*time.Millisecond, "stopped before its drain time: nothing was held")
}

// TestRestartReconcilesTailWhoseSourceIsGone: records copied before a crash
// whose source records retention removed before the restart could compare
// them. The restart does not wait for them (it read until its deadline and
// failed the flow, again and again): the tail's records the source no
// longer has are kept, the source's records left are matched against the
// rest, nothing is copied twice, and only what was never copied counts as
// lost.
func TestRestartReconcilesTailWhoseSourceIsGone(t *testing.T) {
	for _, tc := range []struct {
		name      string
		deleteTo  int64 // source records below are removed
		wantTotal int64 // records on the target in the end
		wantLost  float64
	}{
		{name: "part of the tail removed", deleteTo: 25, wantTotal: 35, wantLost: 0},
		{name: "all removed, some never copied", deleteTo: 35, wantTotal: 30, wantLost: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBed(t)
			b.createTopic(b.srcAdm, "orders", 1, nil)
			b.produce("orders", 1, 0, 20)
			stop := b.run(b.flow(), nil)
			b.read("A.orders", 20)
			require.NoError(t, stop())

			// The "crash": records 20..29 reached the target unrecorded;
			// 30..34 were written after it.
			b.produce("orders", 1, 20, 10)
			src := newClient(t, b.src, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"orders": {0: kgo.NewOffset().At(20)}}))
			var copied []*kgo.Record
			for len(copied) < 10 {
				src.PollFetches(context.Background()).EachRecord(func(r *kgo.Record) {
					copied = append(copied, &kgo.Record{Topic: "A.orders", Partition: 0, Key: r.Key, Value: r.Value, Headers: r.Headers, Timestamp: r.Timestamp})
				})
			}
			dst := newClient(t, b.dst, kgo.RecordPartitioner(kgo.ManualPartitioner()))
			require.NoError(t, dst.ProduceSync(context.Background(), copied...).FirstErr())
			b.produce("orders", 1, 30, 5)
			var del kadm.Offsets
			del.Add(kadm.Offset{Topic: "orders", Partition: 0, At: tc.deleteTo})
			resps, err := b.srcAdm.DeleteRecords(context.Background(), del)
			require.NoError(t, err)
			require.NoError(t, resps.Error())

			reg := prometheus.NewRegistry()
			stop = b.run(b.flow(), reg)
			defer func() { require.NoError(t, stop()) }()
			orders := map[string]string{"topic": "orders"}
			waitFor(t, "the run caught up", func() bool {
				n, lag := seriesOf(t, reg, "mm2go_replicator_lag_records", orders)
				return n == 1 && lag == 0 && b.copied("A.orders") == tc.wantTotal
			})
			require.Equal(t, tc.wantLost, sumOf(t, reg, "mm2go_replicator_source_records_lost_total", orders))
			require.Equal(t, tc.wantTotal, b.copied("A.orders"), "nothing copied twice")
		})
	}
}

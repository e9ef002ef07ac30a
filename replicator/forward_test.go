package replicator

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/internal/fence"
	"github.com/mm2go/mm2go/internal/metric"
)

// TestBatchesModeForwardsAndReencodes copies plain batches (forwarded as
// fetched) and transactions, committed and aborted (decoded, aborted records
// dropped under read_committed, re-encoded), and checks the copy record by
// record, the exact offset map across the markers and both paths' counts.
func TestBatchesModeForwardsAndReencodes(t *testing.T) {
	b := newBed(t)
	b.srcOpts = []kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadCommitted())}
	b.createTopic(b.srcAdm, "fwd", 2, nil)
	reg := prometheus.NewRegistry()
	// No fencing: its abort marker would take the first remote offset.
	stop := b.run(b.flow("mm2go.copy.mode = batches", "mm2go.copy.fencing = none"), reg)
	want := b.produce("fwd", 2, 0, 200)
	require.Equal(t, want, b.read("A.fwd", 200)) // plain batches alone: forwarded

	txn := newClient(t, b.src, kgo.TransactionalID("fwd-test"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx := context.Background()
	for i, commit := range []bool{true, false, true} {
		require.NoError(t, txn.BeginTransaction())
		for p := range int32(2) {
			rec := &kgo.Record{Topic: "fwd", Partition: p, Key: []byte("txn"), Value: []byte{byte(i)}, Timestamp: time.UnixMilli(1_600_000_000_000 + int64(i))}
			require.NoError(t, txn.ProduceSync(ctx, rec).FirstErr())
			if commit {
				want[p] = append(want[p], toRecord(rec))
			}
		}
		require.NoError(t, txn.EndTransaction(ctx, kgo.TransactionEndTry(commit)))
	}
	b.produceTo(want, "fwd", 2, 200, 100)

	require.Equal(t, want, b.read("A.fwd", 304))
	require.Eventually(t, func() bool {
		segs, _ := b.offsetMap()
		for p := range int32(2) {
			if n := len(segs[p]); n == 0 || segs[p][n-1].Last != 155 {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "offset map reaches the source's last record")
	require.NoError(t, stop())

	// Per partition: 100 records at 0-99, then transactions (record, marker)
	// x3 at 100-105 with the second aborted, then 50 records at 106-155.
	// Downstream: 0-99, the two committed records at 100 and 101, 102-151.
	segs, _ := b.offsetMap()
	for p := range int32(2) {
		var got [][3]int64 // from, last, down
		for _, s := range segs[p] {
			got = append(got, [3]int64{s.From, s.Last, s.Down})
		}
		require.Equal(t, [][3]int64{{0, 100, 0}, {104, 104, 101}, {106, 155, 102}}, got, "partition %d", p)
	}
	require.Positive(t, sumOf(t, reg, "mm2go_replicator_batches_total", map[string]string{"path": pathForwarded}))
	require.Positive(t, sumOf(t, reg, "mm2go_replicator_batches_total", map[string]string{"path": pathReencoded}))
	require.Equal(t, 304.0, sumOf(t, reg, "mm2go_replicator_records_total", nil))
}

// TestBatchesModeSplitsBatchesTooLargeForTheTarget: a fetched batch larger
// than the remote topic's max.message.bytes is not stalled on (the record
// path re-batches; a forwarded batch keeps the source's batching): it is
// sent again in halves until each half fits, every record once and in order.
func TestBatchesModeSplitsBatchesTooLargeForTheTarget(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "wide", 1, nil)
	b.createTopic(b.dstAdm, "A.wide", 1, map[string]*string{"max.message.bytes": kadm.StringPtr("2000")})
	var rs []*kgo.Record
	want := map[int32][]record{}
	for i := range 12 {
		v := make([]byte, 400) // random: compression cannot shrink the batch
		_, err := rand.Read(v)
		require.NoError(t, err)
		r := &kgo.Record{Topic: "wide", Key: []byte(fmt.Sprintf("k%d", i)), Value: v, Timestamp: time.UnixMilli(1_600_000_000_000 + int64(i))}
		rs = append(rs, r)
		want[0] = append(want[0], toRecord(r))
	}
	require.NoError(t, b.srcCl.ProduceSync(context.Background(), rs...).FirstErr()) // one batch of ~5 kB

	reg := prometheus.NewRegistry()
	// No fencing: its abort marker would take the first remote offset.
	stop := b.run(b.flow("mm2go.copy.mode = batches", "mm2go.copy.fencing = none", "sync.topic.configs.enabled = false"), reg)
	require.Equal(t, want, b.read("A.wide", 12))
	require.Eventually(t, func() bool {
		segs, _ := b.offsetMap()
		return len(segs[0]) == 1 && segs[0][0].From == 0 && segs[0][0].Last == 11 && segs[0][0].Down == 0
	}, 10*time.Second, 20*time.Millisecond, "one exact segment 0..11")
	require.NoError(t, stop())
	require.Positive(t, sumOf(t, reg, "mm2go_replicator_batches_total", map[string]string{"path": pathReencoded}))
	require.Zero(t, sumOf(t, reg, "mm2go_replicator_errors_total", map[string]string{"reason": metric.ReasonRecordTooLarge}), "not stalled")
}

// TestBatchesModeSeveralLeaders copies partitions led by three brokers on
// each side, some of them idle, while leaders move: every record once, in
// order, and the copy goes on after each move.
func TestBatchesModeSeveralLeaders(t *testing.T) {
	b := newBedBrokers(t, 3)
	b.createTopic(b.srcAdm, "spread", 6, nil)
	stop := b.run(b.flow("mm2go.copy.mode = batches"), prometheus.NewRegistry())
	want := map[int32][]record{}
	b.produceTo(want, "spread", 6, 0, 300)
	require.Equal(t, want, b.read("A.spread", 300))
	b.produceTo(want, "spread", 2, 300, 300) // partitions 2-5 idle
	require.Equal(t, want, b.read("A.spread", 600))
	b.src.ShufflePartitionLeaders()
	b.dst.ShufflePartitionLeaders()
	b.produceTo(want, "spread", 6, 600, 300)
	require.Equal(t, want, b.read("A.spread", 900))
	require.NoError(t, stop())
}

// TestBatchesModeLeadersMovedInCache: after leaders moved on both sides, the
// batches mode finds the new ones at its next try, not when kgo's cached
// metadata ages out. The replicator's clients cache metadata for a minute
// here (the daemon's for 250 ms, kgo's default 5 s): without the
// forwarder's own metadata request, the target's old leader was sent the
// same batches until then.
func TestBatchesModeLeadersMovedInCache(t *testing.T) {
	b := newBedBrokers(t, 3)
	long := kgo.MetadataMinAge(time.Minute)
	b.srcOpts, b.dstOpts = []kgo.Opt{long}, []kgo.Opt{long}
	b.createTopic(b.srcAdm, "spread", 6, nil)
	reg := prometheus.NewRegistry()
	stop := b.run(b.flow("mm2go.copy.mode = batches"), reg)
	want := map[int32][]record{}
	b.produceTo(want, "spread", 6, 0, 300)
	require.Equal(t, want, b.read("A.spread", 300))
	moveLeaders(t, b.src, b.srcCl, "spread")
	moveLeaders(t, b.dst, b.dstCl, "A.spread")
	b.produceTo(want, "spread", 6, 300, 300)
	require.Equal(t, want, b.read("A.spread", 600))
	require.NoError(t, stop())
	require.Zero(t, sumOf(t, reg, "mm2go_replicator_errors_total", map[string]string{"reason": reasonTopicDeleted}), "the topic was never taken for gone")
}

// TestBatchesModeUnansweredBeforeNewProducer: a batch went out and its
// request timed out (the target held it), then its topic stopped and was
// found again, which takes a new producer id (without fencing; a new epoch
// with it). The batch was dropped at the timeout and its records sent
// again under the new id from the target's tail, read before the held
// request was written: ten records twice. A batch without an answer is
// now sent again as it was until answered, and the new id waits for it.
func TestBatchesModeUnansweredBeforeNewProducer(t *testing.T) {
	b := newBed(t)
	short := []kgo.Opt{kgo.ProduceRequestTimeout(300 * time.Millisecond), kgo.RequestTimeoutOverhead(300 * time.Millisecond)}
	b.dstOpts, b.secondOpts = short, short
	b.createTopic(b.srcAdm, "unsure", 1, nil)
	stop := b.run(b.flow("mm2go.copy.mode = batches", "mm2go.copy.fencing = none"), prometheus.NewRegistry())
	want := map[int32][]record{}
	b.produceTo(want, "unsure", 1, 0, 10)
	require.Equal(t, want, b.read("A.unsure", 10))

	release := make(chan struct{})
	var released atomic.Bool
	held := b.holdProduce("A.unsure", release, func(int32) bool { return !released.Load() })
	b.produceTo(want, "unsure", 1, 10, 10)
	waitFor(t, "a Produce request of A.unsure held", func() bool { return held.Load() >= 1 })
	b.stopTopic("unsure")
	// Before, the second request held was the new producer id's.
	waitFor(t, "three Produce requests of A.unsure held", func() bool { return held.Load() >= 3 })
	released.Store(true)
	close(release)
	require.Equal(t, want, b.read("A.unsure", 20))
	require.NoError(t, stop())
	require.EqualValues(t, 20, b.copied("A.unsure"), "every record once")
}

// TestBatchesModeRefusedDoesNotHoldFencing: a partition whose batch the
// target keeps refusing before writing it (NOT_ENOUGH_REPLICAS: too few
// replicas in sync) does not hold back the fence of a new topic, which is
// copied meanwhile; only a batch whose fate is unknown does (above).
func TestBatchesModeRefusedDoesNotHoldFencing(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "starved", 1, nil)
	reg := prometheus.NewRegistry()
	stop := b.run(b.flow("mm2go.copy.mode = batches"), reg)
	starved := map[int32][]record{}
	b.produceTo(starved, "starved", 1, 0, 10)
	require.Equal(t, starved, b.read("A.starved", 10))
	id := b.topicID(b.dstAdm, "A.starved")
	// Refused while A.starved is alone in the request: kfake's answer to a
	// faulted request leaves out its other topics.
	refusing := b.dst.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, TopicID: id, Err: kerr.NotEnoughReplicas, Count: -1,
		When: func(kr kmsg.Request) bool {
			return !slices.ContainsFunc(kr.(*kmsg.ProduceRequest).Topics, func(rt kmsg.ProduceRequestTopic) bool {
				return !producesTo(rt, "A.starved", id)
			})
		}})
	b.produceTo(starved, "starved", 1, 10, 10)
	waitFor(t, "a refused batch", func() bool { return sumOf(t, reg, "mm2go_replicator_errors_total", nil) > 0 })
	b.createTopic(b.srcAdm, "fresh", 1, nil)
	fresh := b.produceOneBatch("fresh", 10)
	require.Equal(t, fresh, b.read("A.fresh", 10), "fenced while A.starved was refused")
	refusing.Remove()
	require.Equal(t, starved, b.read("A.starved", 20))
	require.NoError(t, stop())
}

// TestBatchesModeRefusedPartitionAlone: a partition the target keeps
// refusing is held back on its own, and the other partitions of the same
// target leader are copied at once meanwhile. Before, a refused partition
// put its whole leader on a backoff (up to 2 s), and every partition of
// the leader waited with it.
func TestBatchesModeRefusedPartitionAlone(t *testing.T) {
	b := newBed(t)
	reg, stop, starved, busy := b.copyingTwo("starved", "busy")
	id := b.topicID(b.dstAdm, "A.starved")
	// The target leaves A.starved out of the Produce requests it handles
	// (no answer for it: not written) and writes the rest.
	var refusing atomic.Bool
	refusing.Store(true)
	b.dst.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		b.dst.KeepControl()
		if req := kr.(*kmsg.ProduceRequest); refusing.Load() {
			req.Topics = slices.DeleteFunc(req.Topics, func(rt kmsg.ProduceRequestTopic) bool {
				return producesTo(rt, "A.starved", id)
			})
		}
		return nil, nil, false
	})
	b.produceTo(starved, "starved", 1, 10, 10)
	// Five refusals: a backoff of 1.6 s next, were it the leader's.
	waitFor(t, "five refusals", func() bool { return sumOf(t, reg, "mm2go_replicator_errors_total", nil) >= 5 })
	began := time.Now()
	for i := range 10 {
		b.produceTo(busy, "busy", 1, 10+10*i, 10)
		waitFor(t, "A.busy copied", func() bool { return b.copied("A.busy") >= int64(20+10*i) })
	}
	took := time.Since(began)
	t.Logf("ten batches of A.busy copied one after the other in %s while A.starved was refused", took)
	require.Less(t, took, 5*time.Second, "A.busy waited for A.starved's backoff")
	refusing.Store(false)
	require.Equal(t, starved, b.read("A.starved", 20))
	require.Equal(t, busy, b.read("A.busy", 110))
	require.NoError(t, stop())
	require.EqualValues(t, 20, b.copied("A.starved"), "every record once")
}

// TestBatchesModeAnswerAfterMetadataReload: an answer is read with the topic
// IDs of its request. The target's metadata was reloaded, for the partitions
// being sent only, while A.held's request was out (A.other's leader refused
// a batch); A.held's answer, by topic ID (Produce v13), then named a topic
// the forwarder no longer knew: "no answer for A.held/0", and the batch
// went again after a backoff (two requests, one error counted more).
func TestBatchesModeAnswerAfterMetadataReload(t *testing.T) {
	b := newBed(t)
	reg, stop, held, other := b.copyingTwo("held", "other")

	release := make(chan struct{})
	sent := b.holdProduce("A.held", release, func(n int32) bool { return n == 1 })
	b.produceTo(held, "held", 1, 10, 10)
	waitFor(t, "A.held's request held", func() bool { return sent.Load() == 1 })
	b.dst.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, TopicID: b.topicID(b.dstAdm, "A.other"), Err: kerr.NotLeaderForPartition, Count: 1})
	b.produceTo(other, "other", 1, 10, 10)
	require.Equal(t, other, b.read("A.other", 20), "A.other sent again after its refusal")
	close(release)
	require.Equal(t, held, b.read("A.held", 20))
	require.NoError(t, stop())
	require.EqualValues(t, 1, sent.Load(), "A.held's batch sent once")
	require.EqualValues(t, 1, sumOf(t, reg, "mm2go_replicator_errors_total", nil), "the refusal the only error")
}

// copyingTwo starts a batches-mode flow copying two new topics of one
// partition each and waits until the first ten records of each are copied.
// It returns the flow's registry, its stop and the records of each topic.
func (b *bed) copyingTwo(x, y string) (*prometheus.Registry, func() error, map[int32][]record, map[int32][]record) {
	b.t.Helper()
	b.createTopic(b.srcAdm, x, 1, nil)
	b.createTopic(b.srcAdm, y, 1, nil)
	reg := prometheus.NewRegistry()
	stop := b.run(b.flow("mm2go.copy.mode = batches"), reg)
	wx, wy := map[int32][]record{}, map[int32][]record{}
	b.produceTo(wx, x, 1, 0, 10)
	b.produceTo(wy, y, 1, 0, 10)
	require.Equal(b.t, wx, b.read("A."+x, 10))
	require.Equal(b.t, wy, b.read("A."+y, 10))
	return reg, stop, wx, wy
}

// holdProduce holds the target's Produce requests of the remote topic for
// which hold, given how many there were so far (this one included), says
// so, until release is closed; each is then written. It returns that
// count.
func (b *bed) holdProduce(remote string, release <-chan struct{}, hold func(n int32) bool) *atomic.Int32 {
	b.t.Helper()
	id := b.topicID(b.dstAdm, remote)
	var seen atomic.Int32 // not a sync.Once: a second request waiting in Do would block kfake's wakeup of the first
	b.dst.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		b.dst.KeepControl()
		for _, rt := range kr.(*kmsg.ProduceRequest).Topics {
			if producesTo(rt, remote, id) {
				if hold(seen.Add(1)) {
					b.dst.SleepControl(func() { <-release })
				}
			}
		}
		return nil, nil, false
	})
	return &seen
}

// producesTo reports whether a Produce request's topic is the one named
// (by ID from Produce v13 on).
func producesTo(rt kmsg.ProduceRequestTopic, name string, id kadm.TopicID) bool {
	return rt.Topic == name || rt.TopicID == id
}

// stopTopic stops the copy of a source topic as dropVanished does, under
// the lock refresh holds.
func (b *bed) stopTopic(topic string) {
	r := b.last
	r.readers.Lock()
	r.stopTopics([]string{topic})
	r.readers.Unlock()
}

// TestBatchesModeTwoConnections: the batches mode sends its Produce
// requests on two connections to the target broker (Options.TargetSecond),
// each carrying some of the partitions, one batch per partition in flight:
// a backlog of many batches per partition is copied once and in order.
func TestBatchesModeTwoConnections(t *testing.T) {
	b := newBed(t)
	second := &writes{key: kmsg.Produce}
	b.secondOpts = []kgo.Opt{kgo.WithHooks(second)}
	b.createTopic(b.srcAdm, "two", 8, nil)
	want := map[int32][]record{}
	for i := range 20 { // 20 batches per partition
		b.produceTo(want, "two", 8, i*25, 25)
	}
	stop := b.run(b.flow("mm2go.copy.mode = batches"), prometheus.NewRegistry())
	require.Equal(t, want, b.read("A.two", 500))
	require.NoError(t, stop())
	require.Positive(t, second.n.Load(), "Produce requests on the second connection")
	require.Equal(t, int64(500), b.copied("A.two"), "no record copied twice")
}

// TestBatchesModeFencesTheOlderWriter: with mm2go.copy.fencing = epoch, a
// second writer of the same flow (a paused holder's successor, a duplicate
// instance) fences the first: the
// first writer's next batch is refused and its run ends with an error that
// says so; every record is on the target once.
func TestBatchesModeFencesTheOlderWriter(t *testing.T) {
	b := newBed(t)
	f, want, firstDone := b.firstWriter("fenced")

	stop := b.runLogged(f, prometheus.NewRegistry(), zaptest.NewLogger(t).Named("second"))
	// The second fenced the first before it read the target's tail: it
	// resumes after the 100 records. The first's next batch is refused.
	b.untilFenced("fenced", 100, want, firstDone)
	require.NoError(t, stop())
}

// firstWriter starts a first writer of a flow in the batches mode with
// epoch fencing over topic (two partitions, 100 records), waits until it
// copied them, and returns the flow, the records and the channel its run's
// result arrives on.
func (b *bed) firstWriter(topic string) (*config.Flow, map[int32][]record, <-chan error) {
	t := b.t
	t.Helper()
	b.createTopic(b.srcAdm, topic, 2, nil)
	f := b.flow("mm2go.copy.mode = batches", "mm2go.copy.fencing = epoch", "sync.topic.configs.enabled = false")
	want := b.produce(topic, 2, 0, 100)
	first, closeFirst := b.replicator(f, prometheus.NewRegistry(), zaptest.NewLogger(t).Named("first"))
	t.Cleanup(closeFirst)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // runs before closeFirst
	done := make(chan error, 1)
	go func() { done <- first.Run(ctx) }()
	b.read("A."+topic, 100)
	return f, want, done
}

// untilFenced produces records to the two partitions of topic from offset
// from on, adding them to want, until the first writer's run (done) ends
// fenced; then every record of want must be on the target once, in order.
func (b *bed) untilFenced(topic string, from int, want map[int32][]record, done <-chan error) {
	t := b.t
	t.Helper()
	for i := from; ; i += 10 {
		b.produceTo(want, topic, 2, i, 10)
		var err error
		select {
		case err = <-done:
		case <-time.After(200 * time.Millisecond):
			require.Less(t, i, 2000, "the first writer was never refused")
			continue
		}
		require.Error(t, err)
		require.Truef(t, fence.Fenced(err), "the first writer's run ended with %v", err)
		break
	}
	n := 0
	for _, rs := range want {
		n += len(rs)
	}
	require.Equal(t, want, b.read("A."+topic, n), "every record once, in order")
}

// TestBatchesModeTailCopiedWhileFencing: a writer of the same flow goes on
// copying after a new one listed the source's offsets and before the new
// one's fencing: the records it copies then, written to the source after
// that listing, are found on the target's tail and not copied again.
func TestBatchesModeTailCopiedWhileFencing(t *testing.T) {
	b := newBed(t)
	b.lagEvery = time.Hour // the only ListOffsets below are the second writer's
	f, want, firstDone := b.firstWriter("taken")

	listed, fencing, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var once, held sync.Once
	b.src.ControlKey(int16(kmsg.ListOffsets), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.src.KeepControl()
		once.Do(func() { close(listed) })
		return nil, nil, false
	})
	b.dst.ControlKey(int16(kmsg.InitProducerID), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.dst.KeepControl()
		held.Do(func() {
			close(fencing)
			b.dst.SleepControl(func() { <-release })
		})
		return nil, nil, false
	})
	stop := b.runLogged(f, prometheus.NewRegistry(), zaptest.NewLogger(t).Named("second"))
	for _, ch := range []chan struct{}{listed, fencing} {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("the second writer neither listed the source nor fenced")
		}
	}
	// Written after the second listed the source; the first copies them
	// while the second's fencing waits.
	b.produceTo(want, "taken", 2, 100, 10)
	b.read("A.taken", 110)
	close(release)
	b.untilFenced("taken", 110, want, firstDone)
	require.NoError(t, stop())
}

// TestBatchesModeOutOfRangeErrorReason: when the source refuses to list a
// partition's log start, the error is counted under its reason and its
// message names Kafka's error, not "<nil>".
func TestBatchesModeOutOfRangeErrorReason(t *testing.T) {
	for _, tc := range []struct {
		err    *kerr.Error
		reason string
	}{
		{kerr.TopicAuthorizationFailed, metric.ReasonAuthorization},
		{kerr.UnknownTopicOrPartition, reasonTopicDeleted},
		{kerr.KafkaStorageError, reasonFetch},
	} {
		t.Run(tc.err.Message, func(t *testing.T) {
			b := newBed(t)
			b.createTopic(b.srcAdm, "orders", 1, nil)
			core, logs := observer.New(zap.WarnLevel)
			r, closeClients := b.replicator(b.flow("mm2go.copy.mode = batches"), prometheus.NewRegistry(), zap.New(core))
			defer closeClients()
			b.src.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets}, Topic: "orders", Err: tc.err, Count: -1})
			newForwarder(r).outOfRange(context.Background(), &partition{topic: "orders", partition: 0, next: 5})
			require.Equal(t, 1.0, testutil.ToFloat64(r.m.errors.WithLabelValues("A->B", tc.reason)))
			require.Equal(t, 1, logs.Len())
			msg := fmt.Sprint(logs.All()[0].ContextMap()["error"])
			require.Contains(t, msg, tc.err.Message)
			require.NotContains(t, msg, "<nil>")
		})
	}
}

// TestBatchesModeCoalescesSmallBatches: a backlog of one-record batches (a
// producer with linger.ms=0) is not sent one batch per round trip: the
// batches of a fetch are encoded again together, compressed as the record
// path's producer would (franz-go's default, snappy; the source used lz4),
// and the copy is exact record by record and in the offset map. A backlog
// of large batches is still forwarded as fetched.
func TestBatchesModeCoalescesSmallBatches(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "tiny", 1, nil)
	b.createTopic(b.srcAdm, "bulk", 1, nil)
	const n = 300
	tiny := newClient(t, b.src, kgo.ProducerLinger(0), kgo.ProducerBatchCompression(kgo.Lz4Compression()))
	want := map[int32][]record{}
	for i := range n {
		r := &kgo.Record{Topic: "tiny", Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("value %d %s", i, strings.Repeat("compressible ", 20))),
			Timestamp: time.UnixMilli(1_600_000_000_000 + int64(i%7)), Headers: []kgo.RecordHeader{{Key: "i", Value: []byte{byte(i)}}}}
		require.NoError(t, tiny.ProduceSync(context.Background(), r).FirstErr()) // one batch each
		want[0] = append(want[0], toRecord(r))
	}
	bulk := b.produceOneBatch("bulk", n)

	reg := prometheus.NewRegistry()
	stop := b.run(b.flow("mm2go.copy.mode = batches"), reg)
	require.Equal(t, want, b.read("A.tiny", n))
	require.Equal(t, bulk, b.read("A.bulk", n))
	require.Eventually(t, func() bool {
		segs, _ := b.offsetMap()
		return len(segs[0]) > 0 && segs[0][len(segs[0])-1].Last == n-1
	}, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, stop())

	reencoded := sumOf(t, reg, "mm2go_replicator_batches_total", map[string]string{"path": pathReencoded})
	require.Positive(t, reencoded)
	require.Less(t, reencoded, float64(n/10), "the tiny topic's %d batches were sent as %v", n, reencoded)
	require.Equal(t, 1.0, sumOf(t, reg, "mm2go_replicator_batches_total", map[string]string{"path": pathForwarded}), "the bulk topic's batch")

	cl := newClient(t, b.dst, kgo.ConsumeTopics("A.tiny"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fs := cl.PollFetches(ctx)
	require.NoError(t, fs.Err0())
	recs := fs.Records()
	require.NotEmpty(t, recs)
	require.Equal(t, uint8(kgo.CodecSnappy), recs[0].Attrs.CompressionType(), "compressed as the record path's producer does")
}

// produceOneBatch writes n records to partition 0 of topic in one batch and
// returns them. kgo's producer may write them as two: records for a topic
// it does not know yet reach their partition's buffer in pieces, and its
// linger (or a flush) can send the first piece alone.
func (b *bed) produceOneBatch(topic string, n int) map[int32][]record {
	b.t.Helper()
	ctx := context.Background()
	md, err := b.srcAdm.ListTopics(ctx, topic)
	require.NoError(b.t, err)
	var recs []*kgo.Record
	out := map[int32][]record{}
	for i := range n {
		r := &kgo.Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("v%d", i)), Timestamp: time.UnixMilli(1_600_000_000_000 + int64(i))}
		recs = append(recs, r)
		out[0] = append(out[0], toRecord(r))
	}
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 10_000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID = topic, md[topic].ID // by ID from Produce v13 on
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = encodeBatch(recs, nil)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, b.srcCl)
	require.NoError(b.t, err)
	require.NoError(b.t, kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode))
	return out
}

// TestFetchResize: a partition of a far source still behind after a Fetch
// that filled half of what it asked for doubles its size, up to its share
// of fetch.max.bytes; a near source's partition, or a Fetch that came back
// with little, keeps the size; caught up, it returns to
// max.partition.fetch.bytes.
func TestFetchResize(t *testing.T) {
	const mib = 1 << 20
	const slow, fast = true, false
	tests := []struct {
		name   string
		before int32
		got    int
		far    bool
		behind bool
		n      int
		want   int32
	}{
		{"first slow full fetch doubles", 0, mib, slow, true, 8, 2 * mib},
		{"doubles again", 2 * mib, 2 * mib, slow, true, 8, 4 * mib},
		{"half full is enough", 4 * mib, 2 * mib, slow, true, 8, 50 * mib / 8},
		{"capped by its share of fetch.max.bytes", 50 * mib / 8, 6 * mib, slow, true, 8, 50 * mib / 8},
		{"alone it may take it all", 32 * mib, 32 * mib, slow, true, 1, 50 * mib},
		{"a near source keeps the size", 0, mib, fast, true, 8, mib},
		{"a near source keeps a grown size", 4 * mib, 4 * mib, fast, true, 8, 4 * mib},
		{"little data keeps the size", 4 * mib, mib, slow, true, 8, 4 * mib},
		{"caught up: back to the configured size", 4 * mib, 4 * mib, slow, false, 8, mib},
		{"many partitions: never below the configured size", 0, mib, slow, true, 100, mib},
	}
	fw := &forwarder{partitionMax: mib, fetchMax: 50 * mib}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &partition{fetchSize: tt.before}
			fw.resize(p, tt.got, tt.far, tt.behind, tt.n)
			require.Equal(t, tt.want, p.fetchSize)
		})
	}
}

// farSource makes the bed's source a far-away cluster: it answers Metadata
// requests (how the forwarder measures the round trip) after 30 ms and
// Fetch requests after 60 ms, each first shown to onFetch (if not nil).
func (b *bed) farSource(onFetch func(*kmsg.FetchRequest)) {
	b.src.ControlKey(int16(kmsg.Fetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		b.src.KeepControl()
		if onFetch != nil {
			onFetch(kr.(*kmsg.FetchRequest))
		}
		b.src.SleepControl(func() { time.Sleep(60 * time.Millisecond) })
		return nil, nil, false
	})
	b.src.ControlKey(int16(kmsg.Metadata), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.src.KeepControl()
		b.src.SleepControl(func() { time.Sleep(30 * time.Millisecond) })
		return nil, nil, false
	})
}

// TestBatchesModeSlowSource: a source that answers every request after
// 30 ms or more (a far-away cluster) while partitions are behind gets larger
// fetches per partition and two requests in flight, each for half of the
// partitions, on two connections (the second client sends Fetch requests
// for partitions too, not only the empty one that opens its connection
// once the source is found far); the copy is still every record once, in
// order, with an exact offset map.
func TestBatchesModeSlowSource(t *testing.T) {
	b := newBed(t)
	const kib = 1 << 10
	b.srcOpts = []kgo.Opt{kgo.FetchMaxBytes(64 * kib), kgo.FetchMaxPartitionBytes(kib)}
	second := &writes{key: kmsg.Fetch}
	b.srcSecondOpts = []kgo.Opt{kgo.WithHooks(second)}
	b.createTopic(b.srcAdm, "far", 4, nil)
	want := map[int32][]record{}
	for i := range 80 { // 80 small batches per partition: time to tell the source is far
		b.produceTo(want, "far", 4, i*40, 40)
	}
	var mu sync.Mutex
	parts := map[int]int{} // requests by partition count
	var largest int32
	b.farSource(func(req *kmsg.FetchRequest) {
		n := 0
		mu.Lock()
		for _, rt := range req.Topics {
			n += len(rt.Partitions)
			for _, rp := range rt.Partitions {
				largest = max(largest, rp.PartitionMaxBytes)
			}
		}
		parts[n]++
		mu.Unlock()
	})
	stop := b.run(b.flow("mm2go.copy.mode = batches", "mm2go.copy.fencing = none"), prometheus.NewRegistry())
	require.Equal(t, want, b.read("A.far", 3200))
	require.Eventually(t, func() bool {
		segs, _ := b.offsetMap()
		for p := range int32(4) {
			if len(segs[p]) != 1 || segs[p][0].From != 0 || segs[p][0].Last != 799 || segs[p][0].Down != 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "one exact segment 0..799 per partition")
	require.NoError(t, stop())
	mu.Lock()
	defer mu.Unlock()
	require.Positive(t, parts[2], "requests for half of the partitions (two in flight): %v", parts)
	least, most := second.sizes()
	require.Greater(t, most, least, "Fetch requests for partitions on the second client's connection, besides the empty one that opens it")
	require.Greater(t, largest, int32(kib), "a partition asked for more than max.partition.fetch.bytes")
	require.LessOrEqual(t, largest, int32(64*kib/4), "at most its share of fetch.max.bytes")
}

// TestBatchesModeOverlappingFetches: a far source (Metadata answered after
// 30 ms, every Fetch after 60 ms) whose partitions are caught up, with
// mm2go.fetch.overlap.enabled, gets a second request for its partitions
// while the first is out, so records written meanwhile come in both
// responses: the later copy is dropped and counted
// (mm2go_replicator_fetch_refetched_bytes_total), and a steady trickle with
// transactions in it, committed and aborted (read_committed: decoded and
// encoded again), is copied once, in order, and the offset map reaches the
// last record. The second client
// (Options.SourceSecond, a connection of its own) sends Fetch requests too.
// Without the key, nothing is fetched twice.
func TestBatchesModeOverlappingFetches(t *testing.T) {
	for _, overlap := range []bool{true, false} {
		t.Run(fmt.Sprintf("overlap=%v", overlap), func(t *testing.T) {
			b := newBed(t)
			second := &writes{key: kmsg.Fetch}
			b.srcOpts = []kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadCommitted())}
			b.srcSecondOpts = append([]kgo.Opt{kgo.WithHooks(second)}, b.srcOpts...)
			b.createTopic(b.srcAdm, "far", 4, nil)
			b.farSource(nil)
			reg := prometheus.NewRegistry()
			r, closeClients := b.replicator(b.flow("mm2go.copy.mode = batches", "mm2go.copy.fencing = none",
				fmt.Sprintf("mm2go.fetch.overlap.enabled = %v", overlap)), reg, zaptest.NewLogger(t))
			defer closeClients()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			defer func() {
				cancel()
				assert.NoError(t, <-done, "Run after cancel")
			}()

			// A trickle for 1.2 s: one record per partition every 20 ms,
			// every fifth in a transaction (record and marker), every
			// other transaction aborted; the last two rounds plain.
			txn := newClient(t, b.src, kgo.TransactionalID("overlap"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			want := map[int32][]record{}
			n := 0
			const rounds, per = 60, 4
			for i := range rounds {
				if i%5 != 2 {
					for p, rs := range b.produce("far", 4, i*per, per) {
						want[p] = append(want[p], rs...)
						n += len(rs)
					}
				} else {
					commit := (i/5)%2 == 0
					require.NoError(t, txn.BeginTransaction())
					for p := range int32(per) {
						rec := &kgo.Record{Topic: "far", Partition: p, Key: []byte("txn"), Value: []byte{byte(i)}, Timestamp: time.UnixMilli(1_600_000_000_000 + int64(i))}
						require.NoError(t, txn.ProduceSync(context.Background(), rec).FirstErr())
						if commit {
							want[p] = append(want[p], toRecord(rec))
							n++
						}
					}
					require.NoError(t, txn.EndTransaction(context.Background(), kgo.TransactionEndTry(commit)))
				}
				time.Sleep(20 * time.Millisecond)
			}
			require.Equal(t, want, b.read("A.far", n))
			const last = rounds + rounds/5 - 1 // a marker per transaction
			require.Eventually(t, func() bool {
				segs, _ := b.offsetMap()
				for p := range int32(4) {
					if k := len(segs[p]); k == 0 || segs[p][k-1].Last != last {
						return false
					}
				}
				return true
			}, 10*time.Second, 20*time.Millisecond, "the offset map reaches each partition's last record")
			require.Equal(t, int64(n), b.copied("A.far"), "no record copied twice")
			refetched := testutil.ToFloat64(r.m.refetched.WithLabelValues("A->B"))
			if overlap {
				require.Positive(t, refetched, "records fetched by both overlapping requests")
				require.Positive(t, second.n.Load(), "Fetch requests on the second client's connection")
			} else {
				require.Zero(t, refetched)
			}
		})
	}
}

// TestCurrent: which partitions of a Fetch response are taken: those
// fetched at their next offset, with or without an error, and those fetched
// before it without one (an overlapping request's); not one fetched before
// it with an error (stale: an out-of-range answer there would move the
// partition back over records already copied), nor one fetched past it, nor
// a failed or removed partition.
func TestCurrent(t *testing.T) {
	outOfRange := kerr.OffsetOutOfRange.Code
	tests := []struct {
		name     string
		at, next int64
		code     int16
		failed   bool
		want     bool
	}{
		{"at next", 10, 10, 0, false, true},
		{"at next, error", 10, 10, outOfRange, false, true},
		{"before next", 7, 10, 0, false, true},
		{"before next, error", 7, 10, outOfRange, false, false},
		{"past next", 12, 10, 0, false, false},
		{"failed", 10, 10, 0, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &partition{topic: "t", next: tt.next}
			p.failed.Store(tt.failed)
			res := fetchResult{parts: []*partition{p}, at: map[*partition]int64{p: tt.at}, names: map[[16]byte]string{}}
			res.resp = &kmsg.FetchResponse{Topics: []kmsg.FetchResponseTopic{{Topic: "t",
				Partitions: []kmsg.FetchResponseTopicPartition{{ErrorCode: tt.code}}}}}
			taken := false
			res.current(func(*partition, *kmsg.FetchResponseTopicPartition) { taken = true })
			require.Equal(t, tt.want, taken)
		})
	}
}

// writes counts the requests of one kind a client wrote, and the smallest
// and largest in bytes.
type writes struct {
	key         kmsg.Key
	n           atomic.Int64
	mu          sync.Mutex
	least, most int
}

func (w *writes) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, bytes int, _, _ time.Duration, err error) {
	if key == int16(w.key) && err == nil {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.n.Add(1) == 1 || bytes < w.least {
			w.least = bytes
		}
		w.most = max(w.most, bytes)
	}
}

// sizes returns the smallest and largest request written.
func (w *writes) sizes() (least, most int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.least, w.most
}

// TestPredict: the offset a partition continues at after a response is
// taken, known before it is taken: past the last whole batch at or after
// its next offset (batches wholly before it and a batch cut at the
// response's end do not count, also in a response fetched before its next
// offset), its next offset when nothing came; nothing for a partition with
// an error or a response fetched past its next offset.
func TestPredict(t *testing.T) {
	batch := func(base int64, n int) []byte {
		b := encodeBatch(testRecords()[:n], nil)
		binary.BigEndian.PutUint64(b, uint64(base))
		return b
	}
	whole := slices.Concat(batch(5, 3), batch(10, 3), batch(15, 2))
	cut := batch(17, 3)
	mk := func(n int32) *partition { return &partition{topic: "t", partition: n, next: 10} }
	ps := []*partition{mk(0), mk(1), mk(2), mk(3), mk(4)}
	res := fetchResult{parts: ps, at: map[*partition]int64{ps[0]: 10, ps[1]: 10, ps[2]: 10, ps[3]: 4, ps[4]: 12}, names: map[[16]byte]string{}}
	res.resp = &kmsg.FetchResponse{Topics: []kmsg.FetchResponseTopic{{Topic: "t", Partitions: []kmsg.FetchResponseTopicPartition{
		{Partition: 0, RecordBatches: append(whole, cut[:len(cut)-5]...)},
		{Partition: 1},
		{Partition: 2, ErrorCode: kerr.NotLeaderForPartition.Code, RecordBatches: whole},
		{Partition: 3, RecordBatches: whole},
		{Partition: 4, RecordBatches: whole},
	}}}}
	ahead := map[*partition]int64{}
	(&forwarder{}).predict(res, ahead)
	require.Equal(t, map[*partition]int64{ps[0]: 17, ps[1]: 10, ps[3]: 17}, ahead)

	// The sizes the next request asks by: the cut batch's and the largest
	// whole one's.
	largest := int32(max(len(batch(5, 3)), len(batch(15, 2))))
	require.Equal(t, [2]int32{int32(len(cut)), largest}, [2]int32{ps[0].cut, ps[0].largest})
	require.Equal(t, [2]int32{0, largest}, [2]int32{ps[3].cut, ps[3].largest}, "a response that ends at a batch's end cuts none")
	require.Equal(t, [2]int32{0, 0}, [2]int32{ps[1].cut, ps[1].largest})
}

// TestFetchAsk: a partition's next Fetch asks for the batch its last
// response cut off and as many more as fit in the limit at the size of the
// largest batch seen, so that the response ends at a batch's end; after a
// response that ended at a batch's end, as many of the largest as fit and
// an eighth of one more; the limit when nothing came; a cut batch larger
// than the limit whole. A cut batch is read from its header.
func TestFetchAsk(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name                string
		limit, cut, largest int32
		want                int32
	}{
		{"empty response: the limit", mib, 0, 0, mib},
		{"batches over half the limit: one at a time", mib, 550_000, 548_000, 550_000},
		{"no whole batch seen: sized by the cut one", mib, 550_000, 0, 550_000},
		{"small batches: as many as fit", mib, 16_000, 16_500, 16_000 + 62*16_500},
		{"a larger whole batch sets the step", mib, 300_000, 400_000, 700_000},
		{"larger than the limit: whole", mib, 3 * mib, 0, 3 * mib},
		{"exactly the limit", mib, mib, 0, mib},
		{"a grown limit takes more", 6 * mib, 550_000, 550_000, 550_000 * 11},
		{"nothing cut: the largest and an eighth", mib, 0, 550_000, 550_000 + 68_750},
		{"nothing cut, small batches: as many as fit and an eighth", mib, 0, 16_000, 65*16_000 + 2_000},
		{"nothing cut, a batch near the limit: the limit", mib, 0, mib - 1000, mib},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fetchAsk(tt.limit, tt.cut, tt.largest)
			require.Equal(t, tt.want, got)
			require.LessOrEqual(t, got, max(tt.limit, tt.cut), "never more than the limit, or the cut batch alone")
		})
	}

	b := encodeBatch(testRecords()[:3], nil)
	require.Equal(t, int32(len(b)), cutBatch(b[:len(b)-1]), "a batch cut one byte short")
	require.Equal(t, int32(len(b)), cutBatch(b[:12]), "its header's length field alone")
	require.Zero(t, cutBatch(b[:11]), "too short to tell")
	require.Zero(t, cutBatch(b), "a whole batch is not cut")
	require.Zero(t, cutBatch(nil))
}

// TestMergeHead: the small batches queued for a partition (fetches that
// arrived while its batch was out) go as one batch holding their records in
// order, each mapped to its upstream offset, whether forwarded as fetched
// (at the source's base offset) or encoded again (with a compacted hole); a
// large batch or one of a later epoch ends the merge, a batch sent before
// is not merged, and the queue's bytes stay counted.
func TestMergeHead(t *testing.T) {
	fw := &forwarder{decompressor: kgo.DefaultDecompressor()}
	p := &partition{topic: "t"}
	rec := func(up int64, value string) *kgo.Record {
		return &kgo.Record{Key: []byte{byte(up)}, Value: []byte(value), Offset: up,
			Timestamp: time.UnixMilli(1_600_000_000_000 + up), Headers: []kgo.RecordHeader{{Key: "h", Value: []byte{byte(up)}}}}
	}
	forwarded := func(epoch uint32, up0 int64, values ...string) *fwdBatch {
		var recs []*kgo.Record
		for i, v := range values {
			recs = append(recs, rec(up0+int64(i), v))
		}
		b := fw.encode(p, epoch, recs, func(r *kgo.Record) int64 { return r.Offset })
		binary.BigEndian.PutUint64(b.b[offBaseOffset:], uint64(up0)) // as fetched
		b.up0, b.ups = up0, nil
		return b
	}
	reencoded := fw.encode(p, 0, []*kgo.Record{rec(20, "v20"), rec(25, "v25")}, func(r *kgo.Record) int64 { return r.Offset })
	large := forwarded(0, 26, strings.Repeat("x", coalesceBelow))
	queued := func(bs ...*fwdBatch) *sendState {
		st := &sendState{queue: fwdWork{p: bs}}
		for _, b := range bs {
			st.bytes += len(b.b)
		}
		return st
	}
	bytesOf := func(bs []*fwdBatch) int {
		n := 0
		for _, b := range bs {
			n += len(b.b)
		}
		return n
	}

	st := queued(forwarded(0, 10, "v10", "v11"), forwarded(0, 12, "v12"), reencoded, large, forwarded(0, 27, "v27"))
	fw.mergeHead(st, p)
	q := st.queue[p]
	require.Len(t, q, 3)
	require.Same(t, large, q[1])
	require.Equal(t, bytesOf(q), st.bytes)
	head := q[0]
	require.Equal(t, 5, head.n)
	var got []string
	for i, r := range decode(t, head.b, 0) {
		require.Equal(t, []byte{byte(head.up(i))}, r.Key, "record %d", i)
		require.Equal(t, time.UnixMilli(1_600_000_000_000+head.up(i)), r.Timestamp)
		require.Equal(t, []kgo.RecordHeader{{Key: "h", Value: []byte{byte(head.up(i))}}}, r.Headers)
		got = append(got, string(r.Value))
	}
	require.Equal(t, []string{"v10", "v11", "v12", "v20", "v25"}, got)
	require.Equal(t, []int64{10, 11, 12, 20, 25}, head.ups)

	// A later epoch's batch (fetched after the partition's failure) is not
	// merged into the earlier one, nor the halves of a batch the target
	// refused as too large (they would be refused again).
	first, later := forwarded(0, 40, "v40"), forwarded(1, 41, "v41")
	st = queued(first, later)
	fw.mergeHead(st, p)
	require.Equal(t, []*fwdBatch{first, later}, st.queue[p])
	halves, err := fw.split(forwarded(0, 50, "v50", "v51"))
	require.NoError(t, err)
	st = queued(halves...)
	fw.mergeHead(st, p)
	require.Equal(t, halves, st.queue[p])
	// A batch sent before (its retry after an error) goes again as it was:
	// the broker takes a duplicate for one only with the same sequences.
	retried, next := forwarded(0, 60, "v60"), forwarded(0, 61, "v61")
	retried.asIs = true
	st = queued(retried, next)
	fw.mergeHead(st, p)
	require.Equal(t, []*fwdBatch{retried, next}, st.queue[p])
}

// TestBatchesModeSlowTargetBroker: while one target broker holds a Produce
// request, the partitions other brokers lead keep being copied, batch after
// batch; once it answers, every record is on the target once and in order.
func TestBatchesModeSlowTargetBroker(t *testing.T) {
	b := newBedBrokers(t, 3)
	b.createTopic(b.srcAdm, "slow", 2, nil)
	b.createTopic(b.dstAdm, "A.slow", 2, nil)
	const held = int32(0)
	require.NoError(t, b.dst.MoveTopicPartition("A.slow", 0, held))
	require.NoError(t, b.dst.MoveTopicPartition("A.slow", 1, 1))
	stop := b.run(b.flow("mm2go.copy.mode = batches", "mm2go.copy.fencing = none", "sync.topic.configs.enabled = false"), prometheus.NewRegistry())
	want := map[int32][]record{}
	seq := 0
	produce := func(p int32, n int) {
		var rs []*kgo.Record
		for range n {
			r := &kgo.Record{Topic: "slow", Partition: p, Value: []byte(fmt.Sprintf("v%d", seq)), Timestamp: time.UnixMilli(1_600_000_000_000 + int64(seq))}
			seq++
			rs = append(rs, r)
			want[p] = append(want[p], toRecord(r))
		}
		require.NoError(t, b.srcCl.ProduceSync(context.Background(), rs...).FirstErr())
	}
	ends := func() (p0, p1 int64) {
		o, err := b.dstAdm.ListEndOffsets(context.Background(), "A.slow")
		e0, _ := o.Lookup("A.slow", 0)
		e1, _ := o.Lookup("A.slow", 1)
		if err != nil {
			return -1, -1
		}
		return e0.Offset, e1.Offset
	}
	produce(0, 10)
	produce(1, 10)
	require.Equal(t, want, b.read("A.slow", 20))

	// Broker 0 holds every Produce request for A.slow until release.
	id := b.topicID(b.dstAdm, "A.slow")
	release := make(chan struct{})
	b.dst.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.dst.KeepControl()
		if b.dst.CurrentNode() != held || !slices.ContainsFunc(req.(*kmsg.ProduceRequest).Topics, func(rt kmsg.ProduceRequestTopic) bool {
			return producesTo(rt, "A.slow", id)
		}) {
			return nil, nil, false
		}
		b.dst.SleepControl(func() { <-release })
		return nil, nil, false
	})
	produce(0, 10)
	for round := range 3 {
		produce(1, 10)
		require.Eventually(t, func() bool { _, e1 := ends(); return e1 == int64(10*(round+2)) }, 10*time.Second, 10*time.Millisecond,
			"partition 1's round %d copied while broker 0 holds partition 0's batch", round)
	}
	e0, _ := ends()
	require.Equal(t, int64(10), e0, "partition 0's batch is held")
	close(release)
	require.Equal(t, want, b.read("A.slow", 60), "every record once, in order")
	require.NoError(t, stop())
}

// TestWarm: while a flow starts, the fetch loop's first requests are
// readied: the Source client opens its connection for Fetch requests to
// every source broker (a Fetch for no partitions), and every broker's round
// trip is measured, so that a far one (Metadata answered after 30 ms) is
// known far, and the second client's connection to it opened, before the
// first Fetch for partitions.
func TestWarm(t *testing.T) {
	b := newBedBrokers(t, 3)
	first, second := &writes{key: kmsg.Fetch}, &writes{key: kmsg.Fetch}
	b.srcOpts = []kgo.Opt{kgo.WithHooks(first)}
	b.srcSecondOpts = []kgo.Opt{kgo.WithHooks(second)}
	b.farSource(nil)
	r, closeClients := b.replicator(b.flow("mm2go.copy.mode = batches", "mm2go.copy.fencing = none"), prometheus.NewRegistry(), zaptest.NewLogger(t))
	defer closeClients()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.fw.warm(ctx)
	require.EqualValues(t, 3, first.n.Load(), "one empty Fetch per source broker")
	least, most := first.sizes()
	require.Equal(t, least, most, "Fetch requests for no partitions only")
	r.fw.rttMu.Lock()
	measured := len(r.fw.rtt) // far, below, would start what warm did not
	r.fw.rttMu.Unlock()
	require.Equal(t, 3, measured, "every broker's round trip measured or being measured")
	require.Eventually(t, func() bool {
		for id := range int32(3) {
			if rtt, far := r.fw.far(ctx, id); !far || rtt < 30*time.Millisecond {
				return false
			}
		}
		return second.n.Load() == 3
	}, 5*time.Second, 10*time.Millisecond, "every broker found far and the second client's connection to it opened")
}

// TestBatchesModeStartAsksNothingTwice: from the offsets plan lists to the
// first Fetch of the copy, a flow asks the source nothing: the lag starts
// from the end offsets plan listed and the fetch loop from the leaders
// discovery listed (across regions each question is a round trip before the
// first record). The backlog the start reports comes from plan's end
// offsets.
func TestBatchesModeStartAsksNothingTwice(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "orders", 3, nil)
	b.produce("orders", 3, 0, 30)
	b.lagEvery = time.Hour // no periodic listing in between
	var mu sync.Mutex
	var asked []string // the source requests, in order, up to the first Fetch of a partition
	fetched := false
	note := func(what string) {
		mu.Lock()
		defer mu.Unlock()
		if !fetched {
			asked = append(asked, what)
		}
	}
	b.src.ControlKey(int16(kmsg.Metadata), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		b.src.KeepControl()
		if req := kr.(*kmsg.MetadataRequest); len(req.Topics) > 0 {
			note("Metadata")
		}
		return nil, nil, false
	})
	b.src.ControlKey(int16(kmsg.ListOffsets), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.src.KeepControl()
		note("ListOffsets")
		return nil, nil, false
	})
	b.src.ControlKey(int16(kmsg.Fetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		b.src.KeepControl()
		if len(kr.(*kmsg.FetchRequest).Topics) > 0 {
			note("Fetch")
			mu.Lock()
			fetched = true
			mu.Unlock()
		}
		return nil, nil, false
	})
	core, logs := observer.New(zap.InfoLevel)
	b.runLogged(b.flow("mm2go.copy.mode = batches", "topics = orders"), prometheus.NewRegistry(), zap.New(core))
	require.Eventually(t, func() bool { return b.copied("A.orders") == 30 }, 10*time.Second, 20*time.Millisecond)
	started := logs.FilterMessage("flow started").All()
	require.Len(t, started, 1)
	require.EqualValues(t, 30, started[0].ContextMap()["backlog_records"], "the backlog from plan's end offsets")

	mu.Lock()
	defer mu.Unlock()
	require.True(t, fetched)
	n := len(asked)
	require.GreaterOrEqual(t, n, 3, "asked: %v", asked)
	require.Equal(t, []string{"ListOffsets", "ListOffsets", "Fetch"}, asked[n-3:],
		"plan's two listings (start and end offsets), then the copy's first Fetch; asked: %v", asked)
	require.Equal(t, 2, strings.Count(strings.Join(asked, " "), "ListOffsets"), "asked: %v", asked)
}

// TestBatchesModeListsSourceWhileFencing: the source's offsets are listed
// while the target is readied for the new partitions (remote topic,
// fencing), not after it: round trips to a source in another region that a
// start does not take in turn. The fencing's requests wait here until the
// source was asked for its offsets, which before came after the fence. The
// listings before the first Fetch: the start and end offsets; on a restart
// with read_committed also the high watermarks, which the stored positions
// are checked against; with read_uncommitted the ends are those, and the
// check and the plan share one listing.
func TestBatchesModeListsSourceWhileFencing(t *testing.T) {
	for _, tc := range []struct {
		isolation      string
		first, restart int // ListOffsets requests before the first Fetch
	}{
		{"read_committed", 2, 3},
		{"read_uncommitted", 2, 2},
	} {
		t.Run(tc.isolation, func(t *testing.T) {
			b := newBed(t)
			b.createTopic(b.srcAdm, "orders", 3, nil)
			b.produce("orders", 3, 0, 30)
			b.lagEvery = time.Hour // no periodic listing in between
			var mu sync.Mutex
			var lists int
			fetched := false
			listed := make(chan struct{}) // closed at the run's first ListOffsets
			b.src.ControlKey(int16(kmsg.ListOffsets), func(kmsg.Request) (kmsg.Response, error, bool) {
				b.src.KeepControl()
				mu.Lock()
				defer mu.Unlock()
				if !fetched {
					if lists == 0 {
						close(listed)
					}
					lists++
				}
				return nil, nil, false
			})
			b.src.ControlKey(int16(kmsg.Fetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
				b.src.KeepControl()
				if len(kr.(*kmsg.FetchRequest).Topics) > 0 {
					mu.Lock()
					fetched = true
					mu.Unlock()
				}
				return nil, nil, false
			})
			var late atomic.Bool // a fencing request found no listing of the source after 5 s
			b.dst.ControlKey(int16(kmsg.InitProducerID), func(kmsg.Request) (kmsg.Response, error, bool) {
				b.dst.KeepControl()
				mu.Lock()
				ch := listed
				mu.Unlock()
				select {
				case <-ch:
				case <-time.After(5 * time.Second):
					late.Store(true)
				}
				return nil, nil, false
			})
			flow := b.flow("mm2go.copy.mode = batches", "topics = orders", "A->B.consumer.isolation.level = "+tc.isolation)
			for i, want := range []int{tc.first, tc.restart} {
				if i > 0 {
					mu.Lock()
					lists, fetched, listed = 0, false, make(chan struct{})
					mu.Unlock()
					b.produce("orders", 3, 30, 30)
				}
				stop := b.run(flow, prometheus.NewRegistry())
				require.Eventually(t, func() bool { return b.copied("A.orders") == int64(30*(i+1)) }, 20*time.Second, 20*time.Millisecond)
				require.NoError(t, stop())
				require.False(t, late.Load(), "run %d: the source's offsets were listed only after the fencing", i)
				mu.Lock()
				require.True(t, fetched)
				require.Equal(t, want, lists, "run %d: ListOffsets before the first Fetch", i)
				mu.Unlock()
			}
		})
	}
}

// TestHalve: a far leader's partitions are split into two groups of about
// the same backlog (from the predicted offset where there is one), the
// partitions with nothing left spread over both.
func TestHalve(t *testing.T) {
	tests := []struct {
		name  string
		left  []int64 // per partition
		ahead map[int]int64
		want  [2][]int32
	}{
		{"even", []int64{10, 10, 10, 10}, nil, [2][]int32{{0, 2}, {1, 3}}},
		{"one half caught up", []int64{0, 0, 0, 0, 40, 30, 20, 10}, nil, [2][]int32{{4, 7, 0, 2}, {5, 6, 1, 3}}},
		{"one large", []int64{100, 10, 10, 10}, nil, [2][]int32{{0}, {1, 2, 3}}},
		{"predicted", []int64{10, 10, 10, 10}, map[int]int64{1: 10, 3: 10}, [2][]int32{{0, 1}, {2, 3}}},
		{"two", []int64{0, 0}, nil, [2][]int32{{0}, {1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ps []*partition
			ahead := map[*partition]int64{}
			for i, n := range tt.left {
				p := &partition{topic: "t", partition: int32(i)}
				p.end.Store(n)
				ps = append(ps, p)
				if a, ok := tt.ahead[i]; ok {
					ahead[p] = a
				}
			}
			var got [2][]int32
			for i, g := range halve(ps, ahead) {
				for _, p := range g {
					got[i] = append(got[i], p.partition)
				}
			}
			require.Equal(t, tt.want, got)
		})
	}
}

// TestBatchesModeFarHalvesSplitAnew: a far leader's two halves, one of them
// slower (every request that asks for partition 0 is answered 150 ms
// later, as over a slower connection): the other half, once it has little
// left, waits for the slow one, and the partitions are split anew, so that
// a partition that started in the slow half goes on in a request without
// partition 0 before it is done (without that, the slow half kept its
// partitions to the end). Every record is still copied once, in order.
func TestBatchesModeFarHalvesSplitAnew(t *testing.T) {
	b := newBed(t)
	const kib = 1 << 10
	b.srcOpts = []kgo.Opt{kgo.FetchMaxBytes(64 * kib), kgo.FetchMaxPartitionBytes(kib)}
	b.createTopic(b.srcAdm, "far", 4, nil)
	want := map[int32][]record{}
	for i := range 80 {
		b.produceTo(want, "far", 4, i*40, 40)
	}
	var mu sync.Mutex
	var slow []int32   // the partitions of the first request that asked for partition 0
	moved := []int32{} // partitions of slow asked, before their end, in a request without partition 0
	b.farSource(func(req *kmsg.FetchRequest) {
		asked := map[int32]int64{}
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				asked[rp.Partition] = rp.FetchOffset
			}
		}
		if len(asked) == 0 {
			return
		}
		_, withZero := asked[0]
		mu.Lock()
		if withZero && slow == nil && len(asked) == 2 { // the first half with it
			for p := range asked {
				slow = append(slow, p)
			}
		}
		if !withZero && slow != nil {
			for _, p := range slow {
				if at, ok := asked[p]; ok && at < 800 && !slices.Contains(moved, p) {
					moved = append(moved, p)
				}
			}
		}
		mu.Unlock()
		if withZero {
			b.src.SleepControl(func() { time.Sleep(150 * time.Millisecond) })
		}
	})
	stop := b.run(b.flow("mm2go.copy.mode = batches", "mm2go.copy.fencing = none"), prometheus.NewRegistry())
	require.Equal(t, want, b.read("A.far", 3200))
	require.NoError(t, stop())
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, slow, 2, "the slow half: partition 0 and one more")
	require.NotEmpty(t, moved, "a partition of the slow half fetched without partition 0 before its end (slow half %v)", slow)
}

// TestOverlapPeriod: overlapping requests are spaced by half the longer of
// the leader's last two requests with data (one per lane while they
// alternate), so a slower lane spaces them evenly; a cycle older than that
// no longer counts.
func TestOverlapPeriod(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name string
		took []time.Duration
		want time.Duration
	}{
		{"none yet", nil, 0},
		{"one", []time.Duration{86 * ms}, 86 * ms},
		{"lanes alternate, the slower counts", []time.Duration{86 * ms, 104 * ms, 86 * ms}, 104 * ms},
		{"an old slow cycle is forgotten", []time.Duration{400 * ms, 86 * ms, 87 * ms}, 87 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &fetchState{cycle: map[int32][2]time.Duration{}}
			for _, d := range tt.took {
				st.took(1, d)
			}
			require.Equal(t, tt.want, st.slowest(1))
			require.Zero(t, st.slowest(2), "another leader")
		})
	}
}

// TestReencodeFromAnEarlierOffset: a response fetched before the partition's
// next offset (an overlapping request's) holding an aborted transaction and
// its abort marker before that offset and a committed transaction of the
// same producer after it: the committed record is copied. Decoded from the
// next offset, the marker was skipped unread while the response still
// listed the aborted transaction, and the committed record was dropped as
// aborted.
func TestReencodeFromAnEarlierOffset(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "txn", 1, nil)
	txn := newClient(t, b.src, kgo.TransactionalID("reencode"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx := context.Background()
	for _, commit := range []bool{false, true} { // offsets 0 (aborted), 1 (marker), 2 (committed), 3 (marker)
		require.NoError(t, txn.BeginTransaction())
		require.NoError(t, txn.ProduceSync(ctx, &kgo.Record{Topic: "txn", Value: fmt.Appendf(nil, "%v", commit)}).FirstErr())
		require.NoError(t, txn.EndTransaction(ctx, kgo.TransactionEndTry(commit)))
	}
	listed, err := b.srcAdm.ListTopics(ctx, "txn")
	require.NoError(t, err)
	fetch := func(at int64) kmsg.FetchResponseTopicPartition { // read_committed
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID, req.MaxBytes, req.IsolationLevel, req.SessionEpoch = -1, 1<<20, 1, -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = "txn", listed["txn"].ID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = at, 1<<20, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, b.srcCl)
		require.NoError(t, err)
		return resp.Topics[0].Partitions[0]
	}
	require.NotEmpty(t, fetch(0).AbortedTransactions, "fetched at 0, the response lists the aborted transaction")

	b.srcOpts = []kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadCommitted())}
	r, closeClients := b.replicator(b.flow("mm2go.copy.mode = batches"), prometheus.NewRegistry(), zaptest.NewLogger(t))
	defer closeClients()
	for _, at := range []int64{0, 2} {
		p := newPartition("txn", "A.txn", 0, start{from: 2, stored: -1}, 0, r.m.partitionMetrics(r.flow, "txn"))
		p.mm2 = r.mm2.Partition("txn", "A.txn", 0, &p.inflight)
		p.next = 2 // the aborted transaction and its marker were taken before
		got := fetch(at)
		bs := r.fw.reencode(p, &got, at)
		require.Len(t, bs, 1, "fetched at %d", at)
		require.Equal(t, []string{"true"}, values(t, bs[0]), "fetched at %d", at)
		require.EqualValues(t, 2, bs[0].up(0))
		require.EqualValues(t, 4, p.next, "after the commit marker")
	}
}

// values decodes the values of a batch the forwarder encoded.
func values(t *testing.T, b *fwdBatch) []string {
	t.Helper()
	var out []string
	for _, r := range decode(t, b.b, 0) {
		out = append(out, string(r.Value))
	}
	return out
}

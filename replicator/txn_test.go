package replicator

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest"

	"github.com/mm2go/mm2go/internal/offsetmap"
)

const exactlyOnce = "B.exactly.once.source.support = enabled"

// readCommitted returns what a read_committed consumer sees of topic on
// the target, per partition, once it reached the end of every partition
// (the last stable offset).
func (b *bed) readCommitted(topic string) map[int32][]record {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ends, err := b.dstAdm.ListEndOffsets(ctx, topic)
	require.NoError(b.t, err)
	cl := newClient(b.t, b.dst, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	defer cl.Close()
	out := make(map[int32][]record)
	pos := make(map[int32]int64)
	done := func() bool {
		for p, e := range ends[topic] {
			if pos[p] < e.Offset {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		require.NoError(b.t, ctx.Err(), "read %s up to %v: at %v", topic, ends, pos)
		fs.EachRecord(func(r *kgo.Record) {
			pos[r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				out[r.Partition] = append(out[r.Partition], toRecord(r))
			}
		})
	}
	return out
}

// TestExactlyOnceCommitsRecordsWithProgress runs a flow exactly once,
// stops it and starts it again: records and their progress are committed
// together, and a read_committed consumer sees every record once, in order.
// (Fencing of an older writer is tested on real Kafka, e2e: kfake lets a
// fenced producer initialize again with its stale epoch, which Kafka's
// coordinator refuses.)
func TestExactlyOnceCommitsRecordsWithProgress(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "orders", 3, nil)
	want := b.produce("orders", 3, 0, 300)
	f := b.flow(exactlyOnce)
	require.True(t, f.ExactlyOnce)

	reg := prometheus.NewRegistry()
	stop := b.run(f, reg)
	waitFor(t, "300 records committed", func() bool {
		return sumOf(t, reg, "mm2go_replicator_records_total", nil) == 300 && len(b.progressOf()["orders"]) == 3
	})
	require.NoError(t, stop())
	require.Equal(t, map[int32]int64{0: 99, 1: 99, 2: 99}, b.progressOf()["orders"])
	n, committed := seriesOf(t, reg, "mm2go_replicator_transactions_total", map[string]string{"result": "committed"})
	require.Equal(t, 1, n)
	require.Positive(t, committed)
	require.Equal(t, want, b.readCommitted("A.orders"))

	b.produceTo(want, "orders", 3, 300, 300)
	stop = b.run(f, prometheus.NewRegistry())
	waitFor(t, "600 records committed", func() bool { return b.progressOf()["orders"][2] == 199 })
	require.NoError(t, stop())
	require.Equal(t, want, b.readCommitted("A.orders"))
}

// TestExactlyOnceAbortsAndCopiesAgain: a record the target refuses aborts
// the transaction it was in; the other partition's records of that
// transaction are copied again from the last commit, with their offset map
// rolled back to it, the refused one's partition is retried with backoff,
// and a read_committed consumer sees every record exactly once (the record
// mode may write a record twice here).
func TestExactlyOnceAbortsAndCopiesAgain(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "big", 2, nil)
	b.createTopic(b.dstAdm, "A.big", 2, map[string]*string{"max.message.bytes": kadm.StringPtr("2000")})
	ctx := context.Background()
	require.NoError(t, b.srcCl.ProduceSync(ctx, &kgo.Record{Topic: "big", Partition: 1, Value: []byte("first")}).FirstErr())

	reg := prometheus.NewRegistry()
	stop := b.run(b.flow(exactlyOnce, "sync.topic.configs.enabled = false"), reg)
	waitFor(t, "the first record committed", func() bool {
		_, ok := b.progressOf()["big"][1]
		return ok
	})

	large := make([]byte, 10_000) // random, so compression cannot shrink it
	_, err := rand.Read(large)
	require.NoError(t, err)
	copy(large, "LLLLLLL")
	rs := []*kgo.Record{
		{Topic: "big", Partition: 0, Value: []byte("small-0")},
		{Topic: "big", Partition: 1, Value: []byte("other")},
		{Topic: "big", Partition: 0, Value: large},
		{Topic: "big", Partition: 0, Value: []byte("small-2")},
	}
	require.NoError(t, b.srcCl.ProduceSync(ctx, rs...).FirstErr())
	waitFor(t, "two aborted transactions", func() bool {
		return sumOf(t, reg, "mm2go_replicator_transactions_total", map[string]string{"result": "aborted"}) >= 2
	})
	_, err = b.dstAdm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: kadm.StringPtr("100000")}}, "A.big")
	require.NoError(t, err)
	waitFor(t, "all five records committed", func() bool {
		got := b.readCommitted("A.big")
		return len(got[0]) == 3 && len(got[1]) == 2
	})
	require.NoError(t, stop())
	got := b.readCommitted("A.big")
	var vals []string
	for _, r := range got[0] {
		vals = append(vals, r.value[:7])
	}
	require.Equal(t, []string{"small-0", "LLLLLLL", "small-2"}, vals)
	require.Equal(t, []record{{value: "first", keyNil: true, ts: got[1][0].ts}, {value: "other", keyNil: true, ts: got[1][1].ts}}, got[1])
	require.Equal(t, map[int32]int64{0: 2, 1: 1}, b.progressOf()["big"])

	// Partition 1 on the target: first (0), its commit marker (1), the
	// aborted other (2) and its abort marker (3), other again (4). The map
	// knows the committed copies only.
	segs, _ := b.offsetMap()
	require.Equal(t, []offsetmap.Segment{{Topic: "big", Partition: 1, From: 0, Last: 0, Down: 0}, {Topic: "big", Partition: 1, From: 1, Last: 1, Down: 4}}, segs[1])
	require.Equal(t, []offsetmap.Segment{{Topic: "big", Partition: 0, From: 0, Last: 2, Down: 0}}, segs[0])
}

// TestExactlyOnceFailedCommitLeavesNothing: a commit that fails (here the
// coordinator answers an error without committing) ends the run; the next
// run fences the open transaction away and copies the whole step again,
// because the step's progress and offset map were in the transaction too.
func TestExactlyOnceFailedCommitLeavesNothing(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "orders", 2, nil)
	want := b.produce("orders", 2, 0, 100)
	f := b.flow(exactlyOnce)
	b.dst.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.UnknownServerError})

	r, closeClients := b.replicator(f, prometheus.NewRegistry(), zaptest.NewLogger(t).Named("failing"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.ErrorContains(t, r.Run(ctx), "commit a transaction")
	closeClients()
	require.Empty(t, b.progressOf()["orders"], "progress of the failed step")

	stop := b.run(f, prometheus.NewRegistry())
	waitFor(t, "the step copied again", func() bool {
		pr := b.progressOf()["orders"]
		return pr[0] == 49 && pr[1] == 49
	})
	require.NoError(t, stop())
	require.Equal(t, want, b.readCommitted("A.orders"))
}

func TestTxnRetryBackoff(t *testing.T) {
	for fails, want := range map[int]time.Duration{0: 20 * time.Millisecond, 1: 20 * time.Millisecond, 2: 40 * time.Millisecond,
		4: 160 * time.Millisecond, 6: 640 * time.Millisecond, 7: time.Second, 100: time.Second} {
		require.Equal(t, want, txnRetryBackoff(fails), "after %d failures", fails)
	}
}

// TestExactlyOnceIntervalBoundary: with transaction.boundary = interval a
// transaction collects what several polls bring; records produced in five
// bursts within 200 ms are committed in at most three transactions (one per
// poll would make about five), each record once.
func TestExactlyOnceIntervalBoundary(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "orders", 2, nil)
	want := b.produce("orders", 2, 0, 10)
	reg := prometheus.NewRegistry()
	stop := b.run(b.flow(exactlyOnce, "A->B.transaction.boundary = interval", "A->B.transaction.boundary.interval.ms = 1000"), reg)
	waitFor(t, "the first records committed", func() bool { return b.progressOf()["orders"][1] == 4 })
	before := sumOf(t, reg, "mm2go_replicator_transactions_total", map[string]string{"result": "committed"})
	for i := range 5 {
		b.produceTo(want, "orders", 2, 10+20*i, 20)
		time.Sleep(40 * time.Millisecond)
	}
	waitFor(t, "110 records committed", func() bool { return b.progressOf()["orders"][1] == 54 })
	require.NoError(t, stop())
	txns := sumOf(t, reg, "mm2go_replicator_transactions_total", map[string]string{"result": "committed"}) - before
	require.LessOrEqual(t, txns, 3.0, "transactions for the five bursts")
	require.Equal(t, want, b.readCommitted("A.orders"))
}

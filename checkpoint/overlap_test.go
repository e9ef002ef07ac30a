package checkpoint

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/mm2go/mm2go/internal/fence"
	"github.com/mm2go/mm2go/internal/itopic"
	"github.com/mm2go/mm2go/internal/offsetmap"
	"github.com/mm2go/mm2go/policy"
)

// TestOverlapLosesNothing covers producers switched to the target before
// replication finished, under the identity policy: their records sit on the
// target between copies. The group committed 30 on the source; copies of
// 0..19 are at 0..19, another producer's records at 20..24, copies of 20..29
// at 25..34. The translation (35) would skip the other producer's records;
// sync and apply commit 20 instead (the copies at 25..34 are delivered
// again), and the failover check says why it is not safe.
func TestOverlapLosesNothing(t *testing.T) {
	b := newBed(t)
	f := b.flow("topics = t", "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy")
	createTopic(t, b.src, "t", 1)
	createTopic(t, b.dst, "t", 1)
	b.produceSource("t", 0, 30)
	b.writeMap(mseg("t", 0, 0, 19, 0), mseg("t", 0, 20, 29, 25), mpos("t", 0, 30, 35))
	commit(t, b.srcAdm, "g", "t", map[int32]int64{0: 30}, "")
	ctx := context.Background()
	pol := policy.New(policy.KindIdentity, "", true, "A")

	// The checkpoint keeps MM2's meaning: the translation.
	c := b.emitted(f, prometheus.NewRegistry(), nil, func(o *Options) { o.Policy = pol })
	require.Equal(t, int64(35), b.checkpoints()[0].DownstreamOffset)
	c.sync(ctx)
	require.Equal(t, []int64{20}, committed(t, b.dstAdm, "g", "t", 1))
	require.InDelta(t, 1, testutil.ToFloat64(c.m.translations.WithLabelValues("A->B", "overlap")), 0)

	// A later sync keeps it: the floor is now the group's own offset.
	c.sync(ctx)
	require.Equal(t, []int64{20}, committed(t, b.dstAdm, "g", "t", 1))

	sel := selector(t, f)
	sel.Policy = pol
	idx, err := LoadIndex(ctx, b.client(b.dst, itopic.ReaderOpts()...), offsetmap.Topic("A"), 0)
	require.NoError(t, err)
	rep, err := Check(ctx, b.srcAdm, b.dstAdm, idx, sel, "A", []string{"g"}, CheckOptions{})
	require.NoError(t, err)
	require.False(t, rep.Safe())
	require.Equal(t, ReasonForeignRecords, rep.Failures()[0].Reason, rep.Failures())

	// Apply on a fresh group lowers the translation the same way.
	offs, err := Translate(ctx, b.srcAdm, idx, sel, "A", "g", "")
	require.NoError(t, err)
	res, err := Apply(ctx, b.dstAdm, "fresh", offs, ApplyOptions{Policy: pol, Source: "A", Index: idx})
	require.NoError(t, err)
	require.Len(t, res.Overlaps, 1)
	require.Equal(t, []int64{20}, committed(t, b.dstAdm, "fresh", "t", 1))
}

// TestFenceMarkersAreNotForeign: a writer that fences older ones
// (mm2go.copy.fencing = epoch) puts an abort marker into the remote
// partition when it starts, a gap between replicated records that holds no
// record. Copies of 0..19 are at 0..19, the marker at 20, copies of 20..29
// at 21..30; the group committed 30 on the source. Sync, apply and the
// failover check use the translation (31) once the gap was read: lowering
// to 20 would deliver the copies at 21..30 twice.
func TestFenceMarkersAreNotForeign(t *testing.T) {
	b := newBed(t)
	f := b.flow("topics = t")
	createTopic(t, b.src, "t", 1)
	createTopic(t, b.dst, "A.t", 1)
	b.produceSource("t", 0, 30)
	ctx := context.Background()
	dst := b.client(b.dst, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	copies := func(n int) {
		var rs []*kgo.Record
		for range n {
			rs = append(rs, &kgo.Record{Topic: "A.t", Value: []byte("copy")})
		}
		require.NoError(t, dst.ProduceSync(ctx, rs...).FirstErr())
	}
	copies(20)
	_, err := fence.Acquire(ctx, b.client(b.dst), "A-mm2go-A->B-0", time.Minute, map[string][]int32{"A.t": {0}})
	require.NoError(t, err)
	copies(10)
	ends, err := b.dstAdm.ListEndOffsets(ctx, "A.t")
	require.NoError(t, err)
	end, _ := ends.Lookup("A.t", 0)
	require.Equal(t, int64(31), end.Offset, "20 copies, the marker, 10 copies")
	b.writeMap(mseg("t", 0, 0, 19, 0), mseg("t", 0, 20, 29, 21), mpos("t", 0, 30, 31))
	commit(t, b.srcAdm, "g", "t", map[int32]int64{0: 30}, "")

	// Unread, the gap counts as another producer's record.
	reader := b.client(b.dst, itopic.ReaderOpts()...)
	idx, err := LoadIndex(ctx, reader, offsetmap.Topic("A"), 0)
	require.NoError(t, err)
	tp := TopicPartition{"t", 0}
	at, foreign := idx.ForeignRun(tp, 0, 31)
	require.True(t, foreign)
	require.Equal(t, int64(20), at)
	require.NoError(t, idx.ClassifyGaps(ctx, reader, func(t string) string { return "A." + t }))
	_, foreign = idx.ForeignRun(tp, 0, 31)
	require.False(t, foreign, "the marker is not a record")

	c := b.emitted(f, prometheus.NewRegistry(), nil)
	c.sync(ctx)
	require.Equal(t, []int64{31}, committed(t, b.dstAdm, "g", "A.t", 1))
	require.Zero(t, testutil.ToFloat64(c.m.translations.WithLabelValues("A->B", "overlap")))

	sel := selector(t, f)
	rep, err := Check(ctx, b.srcAdm, b.dstAdm, idx, sel, "A", []string{"g"}, CheckOptions{})
	require.NoError(t, err)
	require.True(t, rep.Safe(), rep.Failures())

	offs, err := Translate(ctx, b.srcAdm, idx, sel, "A", "g", "")
	require.NoError(t, err)
	res, err := Apply(ctx, b.dstAdm, "fresh", offs, ApplyOptions{Policy: sel.Policy, Source: "A", Index: idx})
	require.NoError(t, err)
	require.Empty(t, res.Overlaps)
	require.Equal(t, []int64{31}, committed(t, b.dstAdm, "fresh", "A.t", 1))

	// A record of another producer in a gap stays foreign.
	copies(1) // at 31: not a copy
	copies(5) // copies of 30..34 at 32..36
	b.produceSource("t", 0, 5)
	b.writeMap(mseg("t", 0, 30, 34, 32))
	idx, err = LoadIndex(ctx, reader, offsetmap.Topic("A"), 0)
	require.NoError(t, err)
	require.NoError(t, idx.ClassifyGaps(ctx, reader, func(t string) string { return "A." + t }))
	at, foreign = idx.ForeignRun(tp, 0, 37)
	require.True(t, foreign)
	require.Equal(t, int64(31), at)
}

// TestClassifyGapsInRounds: a flow restarted under fencing leaves a marker
// gap per partition and start. Four partitions with three gaps each (the
// last of partition 3 another producer's record) are classified in three
// rounds, one read of every partition's next gap each, not one read per gap:
// a restarted checkpointer's sync waited for all of them.
func TestClassifyGapsInRounds(t *testing.T) {
	b := newBed(t)
	createTopic(t, b.dst, "A.t", 4)
	ctx := context.Background()
	dst := b.client(b.dst, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	copies := func(p int32, n int) {
		var rs []*kgo.Record
		for range n {
			rs = append(rs, &kgo.Record{Topic: "A.t", Partition: p, Value: []byte("copy")})
		}
		require.NoError(t, dst.ProduceSync(ctx, rs...).FirstErr())
	}
	all := map[string][]int32{"A.t": {0, 1, 2, 3}}
	// Per partition: copies of 0..9 at 0..9, then three times a gap at
	// 10, 16, 22 (a marker, or on partition 3 the last time a foreign
	// record) and five copies after it.
	var recs []offsetmap.Record
	for p := range int32(4) {
		copies(p, 10)
		recs = append(recs, mseg("t", p, 0, 9, 0))
	}
	for i := range int64(3) {
		if i < 2 {
			_, err := fence.Acquire(ctx, b.client(b.dst), "A-mm2go-A->B-0", time.Minute, all)
			require.NoError(t, err)
		} else {
			_, err := fence.Acquire(ctx, b.client(b.dst), "A-mm2go-A->B-0", time.Minute, map[string][]int32{"A.t": {0, 1, 2}})
			require.NoError(t, err)
			copies(3, 1) // not a copy
		}
		for p := range int32(4) {
			copies(p, 5)
			recs = append(recs, mseg("t", p, 10+5*i, 14+5*i, 11+6*i))
		}
	}
	b.writeMap(recs...)

	reader := b.client(b.dst, itopic.ReaderOpts()...)
	idx, err := LoadIndex(ctx, reader, offsetmap.Topic("A"), 0)
	require.NoError(t, err)
	fetches := b.dst.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: "A.t", Observe: true, Count: -1})
	require.NoError(t, idx.ClassifyGaps(ctx, reader, func(t string) string { return "A." + t }))
	require.Less(t, fetches.Hits(), 12, "12 gaps, 3 rounds")
	for p := range int32(3) {
		_, foreign := idx.ForeignRun(TopicPartition{"t", p}, 0, 28)
		require.False(t, foreign, "partition %d: markers only", p)
	}
	at, foreign := idx.ForeignRun(TopicPartition{"t", 3}, 0, 28)
	require.True(t, foreign)
	require.Equal(t, int64(22), at)
}

// TestClassifyGapsOfExactlyOnceSteps: an exactly-once flow ends every copy
// step with a commit marker, a gap per transaction and partition. 300 of
// them (one holding another producer's record instead) are read in a few
// fetches, not one per gap, and only the record is foreign.
func TestClassifyGapsOfExactlyOnceSteps(t *testing.T) {
	b := newBed(t)
	createTopic(t, b.dst, "A.t", 1)
	ctx := context.Background()
	txn := b.client(b.dst, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID("A-mm2go-A->B-0"))
	plain := b.client(b.dst, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []offsetmap.Record
	for i := range int64(300) {
		require.NoError(t, txn.BeginTransaction())
		rs := make([]*kgo.Record, 5)
		for j := range rs {
			rs[j] = &kgo.Record{Topic: "A.t", Value: []byte("copy")}
		}
		require.NoError(t, txn.ProduceSync(ctx, rs...).FirstErr())
		require.NoError(t, txn.EndTransaction(ctx, kgo.TryCommit))
		recs = append(recs, mseg("t", 0, 5*i, 5*i+4, rs[0].Offset))
		if i == 200 {
			require.NoError(t, plain.ProduceSync(ctx, &kgo.Record{Topic: "A.t", Value: []byte("foreign")}).FirstErr())
		}
	}
	b.writeMap(recs...)

	reader := b.client(b.dst, itopic.ReaderOpts()...)
	idx, err := LoadIndex(ctx, reader, offsetmap.Topic("A"), 0)
	require.NoError(t, err)
	fetches := b.dst.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: "A.t", Observe: true, Count: -1})
	require.NoError(t, idx.ClassifyGaps(ctx, reader, func(t string) string { return "A." + t }))
	require.Less(t, fetches.Hits(), 20, "299 gaps in one span")
	tp := TopicPartition{"t", 0}
	at, foreign := idx.ForeignRun(tp, 0, 1800)
	require.True(t, foreign)
	require.Equal(t, int64(200*6+5), at, "the gap after step 200: its marker and the record")
	_, foreign = idx.ForeignRun(tp, at+2, 1800) // from the next step's first copy
	require.False(t, foreign, "markers only after it")
	_, foreign = idx.ForeignRun(tp, 0, at)
	require.False(t, foreign, "markers only before it")
}

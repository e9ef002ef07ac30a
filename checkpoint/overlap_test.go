package checkpoint

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/mm2go/mm2go/internal/itopic"
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
	idx, err := LoadIndex(ctx, b.client(b.dst, itopic.ReaderOpts()...), policy.OffsetMapTopic("A"), 0)
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

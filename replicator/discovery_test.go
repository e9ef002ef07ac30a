package replicator

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGrowsRemoteTopic: partitions added to a source topic while it is
// copied are added to the remote topic and copied, although the target
// producer already knows the remote topic with fewer partitions.
func TestGrowsRemoteTopic(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "orders", 2, nil)
	first := b.produce("orders", 2, 0, 10)
	stop := b.run(b.flow(), nil)
	require.Equal(t, first, b.read("A.orders", 10))

	resp, err := b.srcAdm.UpdatePartitions(context.Background(), 4, "orders")
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	b.srcCl.ForceMetadataRefresh()
	waitFor(t, "the producer to see 4 partitions", func() bool {
		leader, _, _ := b.srcCl.PartitionLeader("orders", 3)
		return leader >= 0
	})
	more := b.produce("orders", 4, 10, 20)
	waitFor(t, "30 records on the target", func() bool { return b.copied("A.orders") == 30 })
	got := b.read("A.orders", 30)
	require.NoError(t, stop())

	md, err := b.dstAdm.ListTopics(context.Background(), "A.orders")
	require.NoError(t, err)
	require.Len(t, md["A.orders"].Partitions, 4)
	for p := range int32(4) {
		require.Equal(t, append(first[p], more[p]...), got[p], "partition %d", p)
	}
}

func TestNextRefresh(t *testing.T) {
	for _, tc := range []struct {
		periodic bool
		interval time.Duration
		deferred int
		wait     time.Duration
		run      bool
	}{
		{true, 10 * time.Minute, 0, 10 * time.Minute, true},
		{true, 10 * time.Minute, 3, deferRetry, true},  // partitions wait for their remote partition
		{false, 10 * time.Minute, 2, deferRetry, true}, // even without periodic discovery
		{false, 10 * time.Minute, 0, time.Hour, false},
	} {
		wait, run := nextRefresh(tc.periodic, tc.interval, tc.deferred)
		require.Equal(t, tc.wait, wait, "%+v", tc)
		require.Equal(t, tc.run, run, "%+v", tc)
	}
}

package replicator

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mm2go/mm2go/internal/offsetmap"
)

// TestObserveRunEqualsObservePerRecord: a run observed at once leaves the
// same segments, offset syncs, delayed sync and decider state as its records
// observed one by one, across runs that continue, jump upstream or
// downstream, and lag.max values from 0 up.
func TestObserveRunEqualsObservePerRecord(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, lagMax := range []int64{0, 1, 3, 100} {
		for trial := range 200 {
			perRecord := newPartition("t", "A.t", 0, start{from: 0}, lagMax, partitionMetrics{})
			perRun := newPartition("t", "A.t", 0, start{from: 0}, lagMax, partitionMetrics{})
			up, down := int64(rng.IntN(5)), int64(0)
			for range 1 + rng.IntN(8) {
				n := 1 + rng.IntN(250)
				for i := range n {
					perRecord.observe(up+int64(i), down+int64(i), true)
				}
				perRun.observeRun(up, down, n, true)
				up += int64(n + rng.IntN(3))   // sometimes an upstream gap
				down += int64(n + rng.IntN(2)) // sometimes a foreign record downstream
			}
			where := fmt.Sprintf("lag.max %d, trial %d", lagMax, trial)
			require.Equal(t, perRecord.seg, perRun.seg, where)
			require.Equal(t, perRecord.closed, perRun.closed, where)
			require.Equal(t, perRecord.syncs, perRun.syncs, where)
			require.Equal(t, perRecord.hasDelay, perRun.hasDelay, where)
			if perRecord.hasDelay {
				require.Equal(t, perRecord.delayed, perRun.delayed, where)
			}
			require.Equal(t, perRecord.syncer, perRun.syncer, where)
			require.Equal(t, perRecord.downNext, perRun.downNext, where)
		}
	}
}

// TestRollbackRestoresMark: an aborted transaction's acknowledgements leave
// no trace in the partition's offset map, sync or position state.
func TestRollbackRestoresMark(t *testing.T) {
	p := newPartition("t", "A.t", 0, start{from: 10, stored: 9, downNext: 20,
		open: &offsetmap.Segment{Topic: "t", From: 5, Last: 9, Down: 15}}, 3, partitionMetrics{})
	p.mu.Lock()
	p.observe(10, 20, true)
	p.mu.Unlock()
	p.acked.Store(10)
	before := p.mark()
	epoch := p.epoch.Load()

	p.mu.Lock()
	p.observe(11, 22, true) // after a marker: a new segment
	p.observeRun(12, 23, 5, true)
	p.mu.Unlock()
	p.acked.Store(16)
	p.next, p.lastData = 17, 16
	p.markerEnd.Store(18)

	p.rollback(before)
	require.Equal(t, before, p.mark())
	require.EqualValues(t, 10, p.acked.Load())
	require.Equal(t, epoch+1, p.epoch.Load())
	require.EqualValues(t, 11, p.next)
	require.EqualValues(t, 10, p.lastData)
	require.EqualValues(t, -1, p.markerEnd.Load())
	pd := p.take()
	require.Equal(t, []offsetmap.Segment{{Topic: "t", From: 5, Last: 10, Down: 15}}, pd.segs)
	require.Equal(t, offsetmap.Position{Topic: "t", Next: 11, DownNext: 21}, *pd.pos)
}

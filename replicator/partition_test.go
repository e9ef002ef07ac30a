package replicator

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
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

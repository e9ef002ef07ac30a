package replicator

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSyncDecider replays MM2's MirrorSourceTaskTest vectors
// (offset.lag.max=50). MM2's state keeps "should sync" set until reset(),
// which its writer calls right after every true; the decider has no sticky
// flag, so it always behaves as if reset after each true.
func TestSyncDecider(t *testing.T) {
	type step struct {
		up, down int64
		want     bool
	}
	tests := []struct {
		name  string
		lag   int64
		fill  bool // feed the contiguous records between the listed steps, all false
		steps []step
	}{
		{"MM2 vectors", 50, false, []step{
			{0, 100, true}, {2, 102, true}, {3, 152, false}, {4, 153, true}, {5, 154, false},
			{6, 203, false}, {7, 204, true}, {2, 206, true}, {3, 207, false}, {4, 3, true}, {5, 4, false},
		}},
		{"repeated and gapped upstream offsets", 50, false, []step{
			{7, 6, true}, {7, 6, true}, {8, 7, false}, {10, 57, true}, {11, 58, false},
		}},
		{"offset.lag.max=0 syncs every record", 0, false, []step{
			{0, 0, true}, {1, 1, true}, {2, 2, true}, {3, 3, true},
		}},
		{"default lag: one sync per 100 downstream offsets", 100, true, []step{
			{0, 0, true}, {1, 1, false}, {99, 99, false}, {100, 100, false}, {101, 101, true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newSyncDecider(tt.lag)
			for i, s := range tt.steps {
				if tt.fill {
					for d.prevUp >= 0 && d.prevUp+1 < s.up {
						require.False(t, d.update(d.prevUp+1, d.prevDown+1))
					}
				}
				require.Equal(t, s.want, d.update(s.up, s.down), "step %d (%d,%d)", i, s.up, s.down)
			}
		})
	}
}

package checkpoint

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mm2go/mm2go/internal/offsetmap"
)

func seg(from, last, down int64) offsetmap.Record {
	return offsetmap.Record{Segment: &offsetmap.Segment{Topic: "t", Partition: 0, From: from, Last: last, Down: down}}
}

func pos(next, downNext int64) offsetmap.Record {
	return offsetmap.Record{Position: &offsetmap.Position{Topic: "t", Partition: 0, Next: next, DownNext: downNext}}
}

func imported(up, down int64) offsetmap.Record {
	return offsetmap.Record{Imported: &offsetmap.Imported{Topic: "t", Partition: 0, Upstream: up, Downstream: down}}
}

var tp0 = TopicPartition{"t", 0}

func TestTranslate(t *testing.T) {
	type want struct {
		up, down int64
		mode     Mode
	}
	tests := []struct {
		name    string
		records []offsetmap.Record
		want    []want
	}{
		{
			name:    "contiguous run, no position",
			records: []offsetmap.Record{seg(0, 99, 0)},
			want:    []want{{0, 0, ModeExact}, {50, 50, ModeExact}, {100, 100, ModeExact}, {150, 100, ModeBeyond}},
		},
		{
			name:    "contiguous run caught up",
			records: []offsetmap.Record{seg(0, 99, 0), pos(100, 100)},
			want:    []want{{100, 100, ModeExact}, {101, 100, ModeBeyond}},
		},
		{
			name:    "upstream gap (compaction)",
			records: []offsetmap.Record{seg(0, 9, 0), seg(12, 20, 10)},
			want:    []want{{10, 10, ModeExact}, {11, 10, ModeGap}, {12, 10, ModeExact}, {13, 11, ModeExact}, {21, 19, ModeExact}},
		},
		{
			name:    "transaction markers upstream",
			records: []offsetmap.Record{seg(0, 4, 0), seg(6, 10, 5), seg(12, 16, 10), pos(18, 15)},
			want:    []want{{5, 5, ModeExact}, {6, 5, ModeExact}, {7, 6, ModeExact}, {11, 10, ModeExact}, {12, 10, ModeExact}, {17, 15, ModeExact}, {18, 15, ModeExact}, {19, 15, ModeBeyond}},
		},
		{
			name: "foreign writes downstream are read, not skipped",
			// Five records of another producer sit at downstream 10..14.
			records: []offsetmap.Record{seg(0, 9, 0), seg(10, 19, 15)},
			want:    []want{{10, 10, ModeExact}, {11, 16, ModeExact}},
		},
		{
			name:    "replication started later",
			records: []offsetmap.Record{seg(100, 199, 0)},
			want:    []want{{50, 0, ModeBefore}, {100, 0, ModeExact}, {101, 1, ModeExact}},
		},
		{
			name:    "empty partition: only a position",
			records: []offsetmap.Record{pos(0, 0)},
			want:    []want{{0, 0, ModeExact}, {5, 0, ModeBeyond}},
		},
		{
			name:    "gap at the tail, position past the markers",
			records: []offsetmap.Record{seg(0, 9, 0), pos(11, 10)},
			want:    []want{{10, 10, ModeExact}, {11, 10, ModeExact}, {12, 10, ModeBeyond}},
		},
		{
			// Apache MM2 copied 0..99 (its syncs survive compaction
			// sparsely), mm2go copies from 100 on. Offsets before the
			// takeover translate with MM2's rule, never past the truth.
			name:    "taken over from Apache MM2",
			records: []offsetmap.Record{imported(0, 0), imported(50, 50), imported(99, 99), seg(100, 149, 100)},
			want:    []want{{0, 0, ModeBefore}, {33, 1, ModeApproximate}, {60, 51, ModeApproximate}, {100, 100, ModeApproximate}, {101, 101, ModeExact}},
		},
		{
			name:    "segment rewritten as it grows; tombstone removes",
			records: []offsetmap.Record{seg(0, 5, 0), seg(0, 9, 0), seg(10, 12, 20), {Segment: &offsetmap.Segment{Topic: "t", From: 10}, Deleted: true}},
			want:    []want{{10, 10, ModeExact}, {12, 10, ModeBeyond}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := NewIndex(0, nil)
			for _, r := range tt.records {
				x.Apply(r)
			}
			for _, w := range tt.want {
				got, ok := x.Translate(tp0, w.up)
				require.True(t, ok)
				require.Equal(t, Translation{Upstream: w.up, Downstream: w.down, Mode: w.mode}, got, "translate(%d)", w.up)
			}
		})
	}
	_, ok := NewIndex(0, nil).Translate(tp0, 5)
	require.False(t, ok, "nothing known")
}

// replicated simulates a replicator: a random upstream log with gaps is
// copied in runs (restarts, foreign writes in between) and the segments it
// would record are returned with every (upstream, downstream) pair.
func replicated(r *rand.Rand, n int) (pairs [][2]int64, recs []offsetmap.Record) {
	up, down := int64(r.IntN(5)), int64(0)
	var cur *offsetmap.Segment
	for range n {
		if r.IntN(10) == 0 {
			up += 1 + int64(r.IntN(4)) // upstream gap
		}
		if r.IntN(20) == 0 {
			down += 1 + int64(r.IntN(3)) // foreign write or marker downstream
		}
		if cur != nil && up == cur.Last+1 && down == cur.LastDown()+1 {
			cur.Last = up
		} else {
			if cur != nil {
				recs = append(recs, offsetmap.Record{Segment: cur})
			}
			cur = &offsetmap.Segment{Topic: "t", From: up, Last: up, Down: down}
		}
		pairs = append(pairs, [2]int64{up, down})
		up++
		down++
	}
	recs = append(recs, offsetmap.Record{Segment: cur})
	return pairs, recs
}

// oracle is the translation rule applied to the full list of pairs: right
// after the downstream copy of the last replicated record before u.
func oracle(pairs [][2]int64, u int64) int64 {
	res := pairs[0][1]
	for _, p := range pairs {
		if p[0] < u {
			res = p[1] + 1
		}
	}
	return res
}

func TestTranslateMatchesOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		pairs, recs := replicated(r, 300)
		x := NewIndex(0, nil)
		for _, i := range r.Perm(len(recs)) { // order of arrival does not matter
			x.Apply(recs[i])
		}
		last := pairs[len(pairs)-1][0]
		for u := int64(0); u <= last+3; u++ {
			got, ok := x.Translate(tp0, u)
			require.True(t, ok)
			require.Equal(t, oracle(pairs, u), got.Downstream, "translate(%d), mode %s", u, got.Mode)
			require.NotEqual(t, ModeApproximate, got.Mode)
		}
	}
}

// TestThinningNeverSkips checks the bounded index: once history is thinned,
// translations of old offsets are approximate and never past the exact
// answer (a record may be read again, none is skipped); recent offsets stay
// exact.
func TestThinningNeverSkips(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var thinned []TopicPartition
	for range 20 {
		pairs, recs := replicated(r, 2000)
		x := NewIndex(16, func(tp TopicPartition) { thinned = append(thinned, tp) })
		for _, rec := range recs {
			x.Apply(rec)
		}
		_, segs, th := x.Stats()
		require.LessOrEqual(t, segs, 16)
		require.Equal(t, 1, th)
		last := pairs[len(pairs)-1][0]
		var approx int
		for u := int64(0); u <= last+1; u++ {
			got, ok := x.Translate(tp0, u)
			require.True(t, ok)
			exact := oracle(pairs, u)
			require.LessOrEqual(t, got.Downstream, exact, "translate(%d) skips records (%s)", u, got.Mode)
			if got.Mode == ModeApproximate || got.Mode == ModeBefore {
				approx++
			} else {
				require.Equal(t, exact, got.Downstream, "translate(%d), mode %s", u, got.Mode)
			}
		}
		require.Positive(t, approx)
	}
	require.Len(t, thinned, 20, "one notice per thinned partition")
}

func TestForeignRun(t *testing.T) {
	x := NewIndex(0, nil)
	// Copies at 0..9, another producer at 10..14, copies at 15..24 and a
	// second foreign run at 25..26, copies from 27 on.
	for _, r := range []offsetmap.Record{seg(0, 9, 0), seg(10, 19, 15), seg(20, 29, 27)} {
		x.Apply(r)
	}
	tests := []struct {
		from, below int64
		want        int64
		ok          bool
	}{
		{0, 5, 0, false},
		{0, 10, 0, false},
		{0, 11, 10, true},
		{0, 37, 10, true},
		{12, 37, 12, true},
		{15, 37, 25, true},
		{27, 37, 0, false},
	}
	for _, tt := range tests {
		got, ok := x.ForeignRun(tp0, tt.from, tt.below)
		require.Equal(t, tt.ok, ok, "ForeignRun(%d, %d)", tt.from, tt.below)
		if ok {
			require.Equal(t, tt.want, got, "ForeignRun(%d, %d)", tt.from, tt.below)
		}
	}
	_, ok := x.ForeignRun(TopicPartition{"other", 0}, 0, 100)
	require.False(t, ok)
}

func TestUpstream(t *testing.T) {
	type want struct {
		down, up int64
		mode     Mode
	}
	for _, tt := range []struct {
		name    string
		records []offsetmap.Record
		want    []want
	}{
		{name: "nothing known", want: nil},
		{
			name: "contiguous run, copies from 0",
			// Read nothing: from 0; read copies 0..49: from 50; read all.
			records: []offsetmap.Record{seg(0, 99, 0)},
			want:    []want{{0, 0, ModeExact}, {50, 50, ModeExact}, {99, 99, ModeExact}, {100, 100, ModeExact}, {150, 100, ModeExact}},
		},
		{
			name: "a fencing marker at downstream 0 and 50",
			// Copies of 0..49 at 1..50, of 50..99 at 52..101.
			records: []offsetmap.Record{seg(0, 49, 1), seg(50, 99, 52)},
			want: []want{{0, 0, ModeBefore}, {1, 0, ModeExact}, {50, 49, ModeExact}, {51, 50, ModeGap},
				{52, 50, ModeExact}, {53, 51, ModeExact}, {102, 100, ModeExact}},
		},
		{
			name:    "foreign records between copies",
			records: []offsetmap.Record{seg(0, 9, 0), seg(10, 19, 15)},
			want:    []want{{10, 10, ModeGap}, {12, 10, ModeGap}, {15, 10, ModeExact}, {16, 11, ModeExact}},
		},
		{
			name: "transaction markers upstream after the last copy",
			// The last copied record is 16; 17 is a marker; the position is 18.
			records: []offsetmap.Record{seg(0, 4, 0), seg(6, 10, 5), seg(12, 16, 10), pos(18, 15)},
			want:    []want{{5, 6, ModeExact}, {10, 12, ModeExact}, {14, 16, ModeExact}, {15, 18, ModeExact}},
		},
		{
			name:    "position only (nothing copied)",
			records: []offsetmap.Record{pos(7, 0)},
			want:    []want{{0, 7, ModeExact}, {3, 7, ModeExact}},
		},
		{
			name: "thinned or imported history before the segments",
			// Known points: upstream 10 at 5, upstream 40 at 20; exact from 100 at 50.
			records: []offsetmap.Record{imported(10, 5), imported(40, 20), seg(100, 109, 50)},
			want:    []want{{3, 10, ModeBefore}, {6, 11, ModeApproximate}, {25, 41, ModeApproximate}, {50, 100, ModeExact}, {60, 110, ModeExact}},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			idx := NewIndex(0, nil)
			for _, r := range tt.records {
				idx.Apply(r)
			}
			if tt.want == nil {
				_, ok := idx.Upstream(tp0, 5)
				require.False(t, ok)
				return
			}
			for _, w := range tt.want {
				got, ok := idx.Upstream(tp0, w.down)
				require.True(t, ok)
				require.Equal(t, Translation{Upstream: w.up, Downstream: w.down, Mode: w.mode}, got, "downstream %d", w.down)
			}
		})
	}
}

// TestUpstreamInvertsTranslate: for every upstream offset that translates
// exactly, translating it back gives it again (on plain runs and gaps of
// markers), so a failback resumes where the failover left off.
func TestUpstreamInvertsTranslate(t *testing.T) {
	idx := NewIndex(0, nil)
	for _, r := range []offsetmap.Record{seg(0, 49, 1), seg(50, 99, 52), seg(102, 120, 103), pos(121, 122)} {
		idx.Apply(r)
	}
	for u := int64(1); u <= 121; u++ {
		tr, ok := idx.Translate(tp0, u)
		require.True(t, ok)
		if tr.Mode != ModeExact {
			continue
		}
		back, ok := idx.Upstream(tp0, tr.Downstream)
		require.True(t, ok)
		if u == 100 || u == 101 {
			// 100 and 101 are an upstream gap: the copy after it is 102's.
			require.Equal(t, int64(102), back.Upstream, "upstream %d -> %d", u, tr.Downstream)
			continue
		}
		require.Equal(t, u, back.Upstream, "upstream %d -> downstream %d", u, tr.Downstream)
	}
}

package offsetmap

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func seg(from, last, down int64) Segment {
	return Segment{Topic: "t", Partition: 1, From: from, Last: last, Down: down}
}

func segRec(t *testing.T, s Segment) *kgo.Record {
	r, err := SegmentRecord("m", s)
	require.NoError(t, err)
	return r
}

func tomb(t *testing.T, s Segment) *kgo.Record {
	r, err := SegmentTombstone("m", s)
	require.NoError(t, err)
	return r
}

func TestStateFold(t *testing.T) {
	id := kadm.TopicID{1, 2, 3}
	pos, err := PositionRecord("m", Position{Topic: "t", Partition: 1, Next: 30, DownNext: 33}, id)
	require.NoError(t, err)
	posDel := &kgo.Record{Key: pos.Key}
	imp, err := ImportedRecord("m", Imported{Topic: "t", Partition: 1, Upstream: 3, Downstream: 2})
	require.NoError(t, err)
	tp := TP{"t", 1}

	for _, tc := range []struct {
		name    string
		recs    func(t *testing.T) []*kgo.Record
		want    []Segment
		wantPos *Position
		wantID  kadm.TopicID
		gone    bool // no state for the partition
	}{
		{
			name: "segments sorted whatever the order written",
			recs: func(t *testing.T) []*kgo.Record {
				return []*kgo.Record{segRec(t, seg(20, 29, 22)), segRec(t, seg(0, 9, 0)), segRec(t, seg(10, 19, 11))}
			},
			want: []Segment{seg(0, 9, 0), seg(10, 19, 11), seg(20, 29, 22)},
		},
		{
			name: "a growing segment replaces its key",
			recs: func(t *testing.T) []*kgo.Record {
				return []*kgo.Record{segRec(t, seg(0, 4, 0)), segRec(t, seg(0, 9, 0))}
			},
			want: []Segment{seg(0, 9, 0)},
		},
		{
			name: "a tombstone deletes its key only, the newest included",
			recs: func(t *testing.T) []*kgo.Record {
				return []*kgo.Record{segRec(t, seg(0, 9, 0)), segRec(t, seg(10, 19, 11)), tomb(t, seg(10, 0, 0)), tomb(t, seg(5, 0, 0))}
			},
			want: []Segment{seg(0, 9, 0)},
		},
		{
			name: "a position keeps its incarnation header; deleting it clears both",
			recs: func(t *testing.T) []*kgo.Record { return []*kgo.Record{segRec(t, seg(0, 9, 0)), pos} },
			want: []Segment{seg(0, 9, 0)}, wantPos: &Position{Topic: "t", Partition: 1, Next: 30, DownNext: 33}, wantID: id,
		},
		{
			name: "everything deleted leaves no partition",
			recs: func(t *testing.T) []*kgo.Record {
				return []*kgo.Record{segRec(t, seg(0, 9, 0)), pos, imp, tomb(t, seg(0, 0, 0)), posDel, {Key: imp.Key}}
			},
			gone: true,
		},
		{
			name: "a tombstone of an unknown partition creates none",
			recs: func(*testing.T) []*kgo.Record { return []*kgo.Record{posDel} },
			gone: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := make(State)
			for _, r := range tc.recs(t) {
				require.NoError(t, st.Apply(r))
			}
			p, ok := st[tp]
			if tc.gone {
				require.False(t, ok, "state: %+v", p)
				return
			}
			require.True(t, ok)
			require.Equal(t, tc.want, p.Segments)
			require.Equal(t, &tc.want[len(tc.want)-1], p.Newest())
			require.Equal(t, tc.wantPos, p.Position)
			require.Equal(t, tc.wantID, p.TopicID)
		})
	}
}

func TestStateMalformedChangesNothing(t *testing.T) {
	st := make(State)
	require.ErrorContains(t, st.Apply(&kgo.Record{Key: []byte{0, 0}}), "offset map")
	require.Empty(t, st)
}

func TestTombstonesDeleteEverything(t *testing.T) {
	st := make(State)
	pos, err := PositionRecord("m", Position{Topic: "t", Partition: 1, Next: 30, DownNext: 33}, kadm.TopicID{})
	require.NoError(t, err)
	require.Empty(t, pos.Headers)
	imp, err := ImportedRecord("m", Imported{Topic: "t", Partition: 1, Upstream: 3, Downstream: 2})
	require.NoError(t, err)
	for _, r := range []*kgo.Record{segRec(t, seg(0, 9, 0)), segRec(t, seg(10, 19, 11)), pos, imp} {
		require.NoError(t, st.Apply(r))
	}
	tombs := st[TP{"t", 1}].Tombstones("m")
	require.Len(t, tombs, 4)
	for _, r := range tombs {
		require.Nil(t, r.Value)
		require.NoError(t, st.Apply(r))
	}
	require.Empty(t, st)
}

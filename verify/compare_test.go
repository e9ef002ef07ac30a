package verify

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/internal/offsetmap"
)

// rec is the record the test's source holds at offset o; its copies are
// made with at.
func rec(o int64) *kgo.Record {
	return &kgo.Record{Offset: o, Key: []byte("k" + strconv.FormatInt(o, 10)), Value: []byte("v" + strconv.FormatInt(o, 10)),
		Timestamp: time.UnixMilli(1000 + o), Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("x")}}}
}

// at is a copy of r at target offset d.
func at(r *kgo.Record, d int64) *kgo.Record {
	c := *r
	c.Headers = append([]kgo.RecordHeader(nil), r.Headers...)
	c.Offset = d
	return &c
}

func sliceStream(rs []*kgo.Record) *stream {
	return &stream{next: func() (*kgo.Record, bool) {
		if len(rs) == 0 {
			return nil, false
		}
		r := rs[0]
		rs = rs[1:]
		return r, true
	}}
}

func seg(from, last, down int64) offsetmap.Segment {
	return offsetmap.Segment{Topic: "t", From: from, Last: last, Down: down}
}

// sources returns the source records at offsets.
func sources(offsets ...int64) []*kgo.Record {
	var rs []*kgo.Record
	for _, o := range offsets {
		rs = append(rs, rec(o))
	}
	return rs
}

func span(from, to int64) []int64 {
	var os []int64
	for o := from; o < to; o++ {
		os = append(os, o)
	}
	return os
}

// copies copies rs to consecutive target offsets from d.
func copies(d int64, rs []*kgo.Record) []*kgo.Record {
	var out []*kgo.Record
	for i, r := range rs {
		out = append(out, at(r, d+int64(i)))
	}
	return out
}

func TestCompare(t *testing.T) {
	ten := sources(span(0, 10)...)
	for _, tc := range []struct {
		name     string
		src, dst []*kgo.Record
		m        segments
		b        bounds
		want     Partition
	}{
		{
			name: "a copy, after a fence's abort marker",
			src:  ten, dst: copies(1, ten), m: segments{seg(0, 9, 1)},
			want: Partition{Matched: 10},
		},
		{
			name: "a copy missing in the middle of a segment",
			src:  ten, dst: copies(0, append(sources(0, 1, 2), sources(span(4, 10)...)...)), m: segments{seg(0, 9, 0)},
			want: Partition{Matched: 9, Missing: Finding{1, 3, -1}},
		},
		{
			name: "three copies missing",
			src:  ten, dst: copies(0, append(sources(0, 1), sources(span(5, 10)...)...)), m: segments{seg(0, 9, 0)},
			want: Partition{Matched: 7, Missing: Finding{3, 2, -1}},
		},
		{
			name: "a record copied twice",
			src:  ten, dst: copies(0, sources(0, 1, 2, 3, 4, 4, 5, 6, 7, 8, 9)), m: segments{seg(0, 9, 0)},
			want: Partition{Matched: 10, Duplicated: Finding{1, 4, 5}},
		},
		{
			name: "the last record copied twice",
			src:  ten, dst: copies(0, sources(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9)), m: segments{seg(0, 9, 0)},
			want: Partition{Matched: 10, Duplicated: Finding{1, 9, 10}},
		},
		{
			name: "a changed value and a changed header",
			src:  ten,
			dst: func() []*kgo.Record {
				rs := copies(0, ten)
				rs[6].Value = []byte("changed")
				rs[8].Headers[0].Value = []byte("y")
				return rs
			}(),
			m:    segments{seg(0, 9, 0)},
			want: Partition{Matched: 8, Differing: Finding{2, 6, 6}, DifferingFields: "value, headers"},
		},
		{
			name: "source records compacted away after the copy",
			src:  sources(0, 1, 2, 5, 6, 7, 8), dst: copies(0, sources(span(0, 9)...)), m: segments{seg(0, 8, 0)},
			want: Partition{Matched: 7, RemovedFromSource: 2},
		},
		{
			name: "the source's last records compacted away after the copy",
			src:  sources(0, 1, 2), dst: copies(0, sources(0, 1, 2, 3, 4)), m: segments{seg(0, 4, 0)},
			want: Partition{Matched: 3, RemovedFromSource: 2},
		},
		{
			name: "copied after compaction: the map has a segment per run",
			src:  sources(0, 1, 2, 5, 6), dst: copies(0, sources(0, 1, 2, 5, 6)), m: segments{seg(0, 2, 0), seg(5, 6, 3)},
			want: Partition{Matched: 5},
		},
		{
			name: "source records between segments never copied",
			src:  ten, dst: copies(0, sources(0, 1, 2, 3, 6, 7, 8, 9)), m: segments{seg(0, 3, 0), seg(6, 9, 4)},
			want: Partition{Matched: 8, Missing: Finding{2, 4, -1}},
		},
		{
			name: "copies deleted by the target's retention",
			src:  ten, dst: copies(3, sources(span(3, 10)...)), m: segments{seg(0, 9, 0)}, b: bounds{targetStart: 3, sourceTo: 10},
			want: Partition{Matched: 7, TargetRetention: 3},
		},
		{
			name: "an offset gap in a target that does not compact",
			src:  ten, dst: append(copies(0, sources(0, 1, 2)), copies(5, sources(span(5, 10)...))...), m: segments{seg(0, 9, 0)},
			want: Partition{Matched: 8, Missing: Finding{2, 3, 3}},
		},
		{
			name: "copies the map promises but the target lacks",
			src:  ten, dst: copies(0, sources(span(0, 7)...)), m: segments{seg(0, 9, 0)},
			want: Partition{Matched: 7, Missing: Finding{3, 7, 7}},
		},
		{
			name: "a foreign record between copies",
			src:  ten,
			dst: append(append(copies(0, sources(0, 1, 2, 3, 4)), &kgo.Record{Offset: 5, Value: []byte("foreign")}),
				copies(6, sources(5, 6, 7, 8, 9))...),
			m:    segments{seg(0, 4, 0), seg(5, 9, 6)},
			want: Partition{Matched: 10, Extra: Finding{1, -1, 5}},
		},
		{
			name: "copies after the map: stored at the next flush",
			src:  ten, dst: copies(0, sources(span(0, 12)...)), m: segments{seg(0, 9, 0)},
			want: Partition{Matched: 10, AfterMap: 2},
		},
		{
			name: "copies after the verified range",
			src:  ten, dst: copies(0, sources(span(0, 12)...)), m: segments{seg(0, 11, 0)}, b: bounds{sourceTo: 10},
			want: Partition{Matched: 10, AfterMap: 2},
		},
		{
			name: "copies removed by the target's compaction",
			src:  ten, dst: append(copies(0, sources(0, 1, 2)), copies(5, sources(span(5, 10)...))...), m: segments{seg(0, 9, 0)},
			b:    bounds{targetCompacted: true, sourceTo: 10},
			want: Partition{Matched: 8, TargetCompacted: 2},
		},
		{
			name: "every discrepancy at once",
			src:  sources(span(0, 50)...),
			dst: func() []*kgo.Record {
				var rs []*kgo.Record
				for o := range int64(50) {
					switch o {
					case 10: // deleted
						continue
					case 20: // duplicated
						rs = append(rs, rec(o))
					case 30:
						r := rec(o)
						r.Headers[0].Value = []byte("changed")
						rs = append(rs, r)
						continue
					case 40:
						r := rec(o)
						r.Value = []byte("changed")
						rs = append(rs, r)
						continue
					}
					rs = append(rs, rec(o))
				}
				return copies(0, rs)
			}(),
			m: segments{seg(0, 49, 0)},
			want: Partition{Matched: 47, Missing: Finding{1, 10, -1}, Duplicated: Finding{1, 20, 20},
				Differing: Finding{2, 30, 30}, DifferingFields: "value, headers"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p Partition
			if tc.b.sourceTo == 0 {
				tc.b.sourceTo = 1000
			}
			compare(sliceStream(tc.src), sliceStream(tc.dst), tc.m, tc.b, &p)
			p.fields = 0
			require.Equal(t, tc.want, p)
			require.Equal(t, tc.want.OK(), p.OK())
		})
	}
}

func TestSegmentsLookup(t *testing.T) {
	m := segments{seg(0, 2, 1), seg(5, 6, 4)}
	for _, tc := range []struct {
		up, down int64
		ok       bool
	}{
		{0, 1, true}, {2, 3, true}, {5, 4, true}, {6, 5, true},
		{3, 0, false}, {7, 0, false}, {-1, 0, false},
	} {
		d, ok := m.down(tc.up)
		require.Equal(t, tc.ok, ok, "down(%d)", tc.up)
		if ok {
			require.Equal(t, tc.down, d, "down(%d)", tc.up)
			u, ok := m.up(d)
			require.True(t, ok)
			require.Equal(t, tc.up, u, "up(%d)", d)
		}
	}
	_, ok := m.up(0)
	require.False(t, ok, "up(0): before the first segment")
	_, ok = m.up(6)
	require.False(t, ok, "up(6): after the last")
}

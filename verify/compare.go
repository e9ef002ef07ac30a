package verify

import (
	"sort"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/internal/offsetmap"
	"github.com/mm2go/mm2go/policy"
)

// Finding counts one kind of discrepancy in a partition and says where the
// first one is. An offset is -1 where it does not apply.
type Finding struct {
	Count       int64 `json:"count"`
	FirstSource int64 `json:"first_source_offset"`
	FirstTarget int64 `json:"first_target_offset"`
}

func (f *Finding) add(source, target int64) {
	if f.Count == 0 {
		f.FirstSource, f.FirstTarget = source, target
	}
	f.Count++
}

// Partition is what verify found in one source partition and its copy.
type Partition struct {
	Topic       string `json:"topic"`
	Partition   int32  `json:"partition"`
	RemoteTopic string `json:"remote_topic"`
	// The offsets read: [SourceFrom, SourceTo) on the source, [TargetFrom,
	// TargetTo) on the target.
	SourceFrom int64 `json:"source_from"`
	SourceTo   int64 `json:"source_to"`
	TargetFrom int64 `json:"target_from"`
	TargetTo   int64 `json:"target_to"`

	Matched int64 `json:"matched"`
	// Missing: a source record the offset map says was copied, or that lies
	// between copied ones, without its copy on the target.
	Missing Finding `json:"missing"`
	// Duplicated: a second copy of the source record copied just before.
	Duplicated Finding `json:"duplicated"`
	// Differing: a copy whose key, value, headers or timestamp differ from
	// its source record (DifferingFields: which, over all of them).
	Differing       Finding `json:"differing"`
	DifferingFields string  `json:"differing_fields,omitempty"`
	// Extra: a target record that is no copy of a source record.
	Extra Finding `json:"extra"`

	// Explained, not errors: copies of source records that the source no
	// longer holds (compaction removed them after the copy),
	RemovedFromSource int64 `json:"removed_from_source"`
	// source records whose copies the target's retention deleted,
	TargetRetention int64 `json:"removed_by_target_retention"`
	// offsets before the offset map's first segment (copied before mm2go
	// kept a map, by Apache MM2 say, or before --since),
	BeforeMap int64 `json:"offsets_before_map"`
	// offsets after the flow's position: not copied yet,
	NotCopied int64 `json:"offsets_not_copied_yet"`
	// copies after the offset map's end (the replicator stores the map a
	// flush after the copy) or of records after the verified range,
	AfterMap int64 `json:"target_after_map"`
	// and copies the target's own compaction removed (the remote topic is
	// compacted, and an offset inside a segment holds no record).
	TargetCompacted int64 `json:"removed_by_target_compaction"`
	// Error is why the partition could not be read to its end.
	Error string `json:"error,omitempty"`

	fields policy.Fields
}

// OK reports whether everything in the partition is a copy or explained.
func (p *Partition) OK() bool {
	return p.Missing.Count == 0 && p.Duplicated.Count == 0 && p.Differing.Count == 0 && p.Extra.Count == 0 && p.Error == ""
}

// segments is a partition's offset map: sorted by From, their downstream
// ranges ascending as well (the target assigns offsets in order).
type segments []offsetmap.Segment

// down returns the downstream offset the map gives the upstream offset o.
func (m segments) down(o int64) (int64, bool) {
	i := sort.Search(len(m), func(i int) bool { return m[i].Last >= o })
	if i == len(m) || m[i].From > o {
		return 0, false
	}
	return m[i].Down + (o - m[i].From), true
}

// up returns the upstream offset whose copy the map puts at downstream
// offset d.
func (m segments) up(d int64) (int64, bool) {
	i := sort.Search(len(m), func(i int) bool { return m[i].LastDown() >= d })
	if i == len(m) || m[i].Down > d {
		return 0, false
	}
	return m[i].From + (d - m[i].Down), true
}

// stream is one side's records of a partition in offset order, read ahead
// on demand.
type stream struct {
	next func() (*kgo.Record, bool)
	buf  []*kgo.Record
	end  bool
}

// peek returns the k-th record ahead (0: the next one), nil past the end.
func (s *stream) peek(k int) *kgo.Record {
	for len(s.buf) <= k && !s.end {
		r, ok := s.next()
		if !ok {
			s.end = true
			break
		}
		s.buf = append(s.buf, r)
	}
	if k < len(s.buf) {
		return s.buf[k]
	}
	return nil
}

func (s *stream) pop() {
	s.buf[0] = nil
	s.buf = s.buf[1:]
}

// lookahead is how many source records after the expected one compare
// checks when a copy does not match: a run of up to that many records
// missing on the target is found as such (and the rest aligned again)
// rather than as differing copies.
const lookahead = 64

// bounds is what compare needs to know of a partition besides its records.
type bounds struct {
	targetStart     int64 // the target partition's log start offset
	sourceTo        int64 // the end of the source records read
	targetCompacted bool  // the remote topic's cleanup.policy has compact
}

// compare walks a partition's source records and their copies side by side
// and counts into p. The map (m) says which target offset holds the copy of
// which source offset; compare follows it where the target agrees and
// aligns on content where it does not (a copy missing in the middle of a
// segment moves every later copy down one offset).
func compare(src, dst *stream, m segments, b bounds, p *Partition) {
	var last *kgo.Record // the source record of the last copy compared
	shift := int64(0)    // target offset minus the map's, where they disagree
	for {
		s := src.peek(0)
		if s == nil {
			break
		}
		d, ok := m.down(s.Offset)
		if !ok {
			p.Missing.add(s.Offset, -1) // between segments: never copied
			src.pop()
			continue
		}
		d += shift
		t := dst.peek(0)
		if t != nil && t.Offset < d {
			// The target holds a copy before the one of s: of a source
			// record that is gone, or one that no source record explains.
			unexpected(t, last, m, shift, s.Offset, b, p)
			dst.pop()
			continue
		}
		if t == nil || t.Offset > d {
			switch {
			case d < b.targetStart:
				p.TargetRetention++
			case b.targetCompacted && t != nil:
				p.TargetCompacted++ // an offset gap inside a segment
			default:
				p.Missing.add(s.Offset, d)
			}
			src.pop()
			continue
		}
		diff := policy.CopyDiff(s, t)
		switch {
		case diff == 0:
			p.Matched++
		case last != nil && policy.CopyDiff(last, t) == 0:
			p.Duplicated.add(last.Offset, t.Offset)
			shift = t.Offset + 1 - (d - shift)
			dst.pop()
			continue
		default:
			if k := ahead(src, t); k > 0 {
				for range k {
					p.Missing.add(src.peek(0).Offset, -1)
					src.pop()
				}
				if d2, ok := m.down(src.peek(0).Offset); ok {
					shift = t.Offset - d2
				}
				continue
			}
			p.Differing.add(s.Offset, t.Offset)
			p.fields |= diff
		}
		last = s
		shift = t.Offset - (d - shift)
		src.pop()
		dst.pop()
	}
	for t := dst.peek(0); t != nil; t = dst.peek(0) {
		unexpected(t, last, m, shift, -1, b, p)
		dst.pop()
	}
	p.DifferingFields = p.fields.String()
}

// ahead returns k when the source record k places after the next one
// (1 <= k <= lookahead) is what t is a copy of, 0 when none is.
func ahead(src *stream, t *kgo.Record) int {
	for k := 1; k <= lookahead; k++ {
		s := src.peek(k)
		if s == nil {
			return 0
		}
		if policy.CopyDiff(s, t) == 0 {
			return k
		}
	}
	return 0
}

// unexpected counts a target record that is not the copy compare expected
// next: a second copy of the last source record, a copy after the map's
// end or the verified range, the copy of a source record that compaction
// has removed since (its map entry is between the last source record
// compared and the next, next, or after the last when the source has no
// next record: next < 0), or an extra record.
func unexpected(t, last *kgo.Record, m segments, shift, next int64, b bounds, p *Partition) {
	if last != nil && policy.CopyDiff(last, t) == 0 {
		p.Duplicated.add(last.Offset, t.Offset)
		return
	}
	o, ok := m.up(t.Offset - shift)
	switch {
	case !ok && len(m) > 0 && t.Offset-shift > m[len(m)-1].LastDown(), ok && o >= b.sourceTo:
		p.AfterMap++
	case ok && (last == nil || o > last.Offset) && (next < 0 || o < next):
		p.RemovedFromSource++
	default:
		p.Extra.add(-1, t.Offset)
	}
}

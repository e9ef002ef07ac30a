package checkpoint

import (
	"context"
	"iter"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/internal/offsetmap"
)

// Mode says how a translation was derived. Every mode but ModeApproximate
// is exact: the consumer resumes on the target right after the last record
// it consumed on the source, no record skipped and none read twice.
type Mode int

const (
	// ModeExact means the record before the committed offset was replicated, or
	// the committed offset is where a run of replicated records starts.
	ModeExact Mode = iota
	// ModeGap means the committed offset falls in an upstream gap (compacted
	// away, transaction markers, aborted records); the translation is the
	// position right after the last replicated record before it, which is
	// where the next replicated record is (or will be) written.
	ModeGap
	// ModeBeyond means the committed offset is beyond what has been replicated;
	// the translation is the end of what has been replicated, never past
	// it. It moves forward as replication catches up.
	ModeBeyond
	// ModeBefore means the committed offset precedes everything replicated for
	// the partition (replication started later, or the group is behind the
	// source's log start); the translation is where replication began.
	ModeBefore
	// ModeOverlap means records of other producers lie on the target between
	// replicated records, below the translation and above where the group
	// already is; the offset is moved back to the first of them so that
	// none is skipped, and the replicated records after it are delivered
	// again. No single offset avoids both. Used by group-offset sync, apply
	// and check, never by Translate.
	ModeOverlap
	// ModeApproximate means the history needed was thinned out of memory; the
	// translation follows MM2's rule (right after the nearest earlier known
	// point), which never skips a record but may deliver some again.
	ModeApproximate
	// ModeCheckpoint means the offset is the group's last checkpoint read from
	// the checkpoints topic (LastCheckpoints), for when the source cluster
	// cannot be reached: the source commit it translates may be older than
	// the group's final one, so records may be delivered again (at most
	// what the group consumed in the checkpoint's age). Never used by
	// Translate.
	ModeCheckpoint
)

func (m Mode) String() string {
	switch m {
	case ModeExact:
		return "exact"
	case ModeGap:
		return "gap"
	case ModeBeyond:
		return "beyond"
	case ModeBefore:
		return "before"
	case ModeOverlap:
		return "overlap"
	case ModeApproximate:
		return "approximate"
	case ModeCheckpoint:
		return "checkpoint"
	default:
		return "unknown"
	}
}

// segment is offsetmap.Segment without the partition's name.
type segment struct {
	from, last, down int64
}

func (s segment) lastDown() int64 { return s.down + (s.last - s.from) }

// point is an (upstream, downstream) pair kept after thinning.
type point struct{ up, down int64 }

// partitionIndex translates one partition's offsets. It holds the
// partition's segments sorted by first upstream offset, the position of
// copying, and, once the segment count exceeded its bound, a sparse list of
// points for the oldest history.
//
// It is not safe for concurrent use; Index guards it.
type partitionIndex struct {
	segs    []segment
	coarse  []point // thinned history and imported syncs, sorted, all below segs[0].from
	pos     *offsetmap.Position
	thinned bool
	// markers are the gaps between segments (downstream [from, to)) read
	// and found to hold only control records: the abort markers a fencing
	// writer puts into the remote partitions when it starts. Not foreign.
	markers map[[2]int64]bool
	// unreadable are the gaps whose last reading failed, and when.
	unreadable map[[2]int64]time.Time
	// foreign holds the gaps read and found to hold other records.
	foreign map[[2]int64]bool
}

// put adds or replaces the segment starting at s.from.
func (x *partitionIndex) put(s segment) {
	i := sort.Search(len(x.segs), func(i int) bool { return x.segs[i].from >= s.from })
	switch {
	case i < len(x.segs) && x.segs[i].from == s.from:
		x.segs[i] = s
	case i == len(x.segs):
		x.segs = append(x.segs, s)
	default:
		if i == 0 && x.thinned && len(x.coarse) > 0 && s.from < x.segs[0].from {
			// Older than the exact history we kept: it only adds a point.
			x.addCoarse(point{s.from, s.down})
			return
		}
		x.segs = append(x.segs, segment{})
		copy(x.segs[i+1:], x.segs[i:])
		x.segs[i] = s
	}
}

// remove deletes the segment starting at from (a tombstone).
func (x *partitionIndex) remove(from int64) {
	i := sort.Search(len(x.segs), func(i int) bool { return x.segs[i].from >= from })
	if i < len(x.segs) && x.segs[i].from == from {
		x.segs = append(x.segs[:i], x.segs[i+1:]...)
	}
}

func (x *partitionIndex) addCoarse(p point) {
	i := sort.Search(len(x.coarse), func(i int) bool { return x.coarse[i].up >= p.up })
	if i < len(x.coarse) && x.coarse[i].up == p.up {
		x.coarse[i] = p
		return
	}
	x.coarse = append(x.coarse, point{})
	copy(x.coarse[i+1:], x.coarse[i:])
	x.coarse[i] = p
}

// thin keeps at most max segments: the oldest half beyond the bound is
// turned into coarse points, of which at most max/2 are kept, spaced
// exponentially towards the past as MM2's OffsetSyncStore does. It reports
// whether anything was dropped.
func (x *partitionIndex) thin(maxSegs int) bool {
	if maxSegs < 2 || len(x.segs) <= maxSegs {
		return false
	}
	drop := len(x.segs) - maxSegs/2
	for _, s := range x.segs[:drop] {
		x.coarse = append(x.coarse, point{s.from, s.down})
	}
	x.segs = append([]segment(nil), x.segs[drop:]...)
	x.thinned = true
	// Keep the newest coarse points densely and the older ones
	// exponentially sparser: walking backwards, keep a point when it is at
	// least twice as far from the newest as the last one kept.
	if limit := maxSegs / 2; len(x.coarse) > limit {
		// The oldest point is always kept: it is where the known history
		// begins.
		newest := x.coarse[len(x.coarse)-1].up
		kept := []point{x.coarse[len(x.coarse)-1]}
		gap := int64(1)
		for i := len(x.coarse) - 2; i > 0 && len(kept) < limit-1; i-- {
			if newest-x.coarse[i].up >= gap {
				kept = append(kept, x.coarse[i])
				gap *= 2
			}
		}
		kept = append(kept, x.coarse[0])
		for i, j := 0, len(kept)-1; i < j; i, j = i+1, j-1 {
			kept[i], kept[j] = kept[j], kept[i]
		}
		x.coarse = kept
	}
	return true
}

// translate returns the downstream offset a group committed at upstream
// offset u (the next record it would read) should resume from, and how it
// was derived. ok is false when nothing is known about the partition.
//
// The rule: resume right after the downstream copy of the last replicated
// record before u. Records written downstream between two replicated
// records (transaction markers, writes of other producers) are therefore
// read, and none of the group's records are skipped or read twice.
func (x *partitionIndex) translate(u int64) (down int64, mode Mode, ok bool) {
	if len(x.segs) == 0 {
		if len(x.coarse) > 0 {
			return x.approximate(u)
		}
		if x.pos == nil {
			return 0, 0, false
		}
		switch {
		case u == x.pos.Next:
			return x.pos.DownNext, ModeExact, true
		case u < x.pos.Next:
			return x.pos.DownNext, ModeBefore, true
		default:
			return x.pos.DownNext, ModeBeyond, true
		}
	}
	// The last segment starting before u holds, or precedes, record u-1.
	i := sort.Search(len(x.segs), func(i int) bool { return x.segs[i].from >= u }) - 1
	if i < 0 {
		first := x.segs[0]
		if len(x.coarse) > 0 {
			// What precedes first is known only coarsely: thinned
			// history, or another replicator's syncs.
			return x.approximate(u)
		}
		if u == first.from {
			return first.down, ModeExact, true
		}
		return first.down, ModeBefore, true
	}
	s := x.segs[i]
	if u-1 <= s.last {
		return s.down + (u - s.from), ModeExact, true
	}
	after := s.lastDown() + 1
	if i+1 < len(x.segs) {
		if u == x.segs[i+1].from {
			return after, ModeExact, true
		}
		return after, ModeGap, true
	}
	// Past the last replicated record: is u still within what the
	// replicator has read (gaps and markers after the last record)?
	if x.pos != nil && u <= x.pos.Next {
		if u == x.pos.Next {
			return after, ModeExact, true
		}
		return after, ModeGap, true
	}
	return after, ModeBeyond, true
}

// approximate applies MM2's rule to the thinned history: right after the
// nearest known record before u. Records between that one and u are read
// again; none is skipped.
func (x *partitionIndex) approximate(u int64) (int64, Mode, bool) {
	i := sort.Search(len(x.coarse), func(i int) bool { return x.coarse[i].up >= u }) - 1
	if i < 0 {
		return x.coarse[0].down, ModeBefore, true
	}
	return x.coarse[i].down + 1, ModeApproximate, true
}

// upstream is translate's inverse, for failing back: a group committed
// downstream offset d on the remote partition (the next copy it would
// read); it resumes on the upstream partition at the first record whose
// copy is at or after d. Every record whose copy it read lies before that
// offset, none after. Past the last copy it resumes after everything
// copied (pos.Next when the position is there). Where only thinned or
// imported history is known, it resumes after the nearest known copy
// before d (ModeApproximate: records may be read again, never skipped).
func (x *partitionIndex) upstream(d int64) (up int64, mode Mode, ok bool) {
	i := sort.Search(len(x.segs), func(i int) bool { return x.segs[i].lastDown() >= d })
	switch {
	case i < len(x.segs) && d >= x.segs[i].down:
		s := x.segs[i]
		return s.from + (d - s.down), ModeExact, true
	case i < len(x.segs) && (i > 0 || len(x.coarse) == 0):
		// d falls before this segment: in a gap (markers, other
		// producers' records), or before everything copied.
		if i == 0 {
			return x.segs[0].from, ModeBefore, true
		}
		return x.segs[i].from, ModeGap, true
	case i == len(x.segs) && len(x.segs) > 0:
		next := x.segs[i-1].last + 1
		if x.pos != nil && x.pos.Next > next && d >= x.pos.DownNext {
			next = x.pos.Next // transaction markers upstream after the last copy
		}
		return next, ModeExact, true
	case len(x.coarse) > 0:
		j := sort.Search(len(x.coarse), func(j int) bool { return x.coarse[j].down >= d }) - 1
		if j < 0 {
			return x.coarse[0].up, ModeBefore, true
		}
		return x.coarse[j].up + 1, ModeApproximate, true
	case x.pos != nil:
		return x.pos.Next, ModeExact, true
	}
	return 0, 0, false
}

// Upstream translates a downstream offset that a group committed on tp's
// remote partition back to tp (see partitionIndex.upstream): for a
// failback, the offset to resume from on the cluster the records were
// copied from. ok is false when the index knows nothing of tp.
func (x *Index) Upstream(tp TopicPartition, downstream int64) (Translation, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	p := x.parts[tp]
	if p == nil {
		return Translation{}, false
	}
	up, mode, ok := p.upstream(downstream)
	return Translation{Upstream: up, Downstream: downstream, Mode: mode}, ok
}

// TopicPartition names an upstream partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// Translation is the result of translating one committed offset.
type Translation struct {
	Upstream, Downstream int64
	Mode                 Mode
}

// Index holds the offset map of one flow in memory: every segment read from
// the offset map topic, per upstream partition, bounded by a number of
// segments per partition (older history is thinned and translated
// approximately). It is safe for concurrent use.
type Index struct {
	mu          sync.RWMutex
	parts       map[TopicPartition]*partitionIndex
	maxSegments int
	// onThin is called (without the lock) when a partition's history is
	// thinned for the first time.
	onThin func(TopicPartition)
}

// DefaultMaxSegments bounds the exact history kept in memory per partition
// (24 bytes each: 1.5 MiB per partition at most). A partition needs one
// segment per upstream gap (transaction marker, compacted-away record) or
// downstream discontinuity (restart, foreign write); plain topics need one
// per mm2go restart.
const DefaultMaxSegments = 65536

// NewIndex returns an empty index keeping at most maxSegments exact
// segments per partition (0 means DefaultMaxSegments). onThin, if not nil,
// is called once per partition when its history is first thinned.
func NewIndex(maxSegments int, onThin func(TopicPartition)) *Index {
	if maxSegments <= 0 {
		maxSegments = DefaultMaxSegments
	}
	return &Index{parts: make(map[TopicPartition]*partitionIndex), maxSegments: maxSegments, onThin: onThin}
}

// Apply adds one decoded offset map record.
func (x *Index) Apply(r offsetmap.Record) {
	var tp TopicPartition
	switch {
	case r.Segment != nil:
		tp = TopicPartition{r.Segment.Topic, r.Segment.Partition}
	case r.Position != nil:
		tp = TopicPartition{r.Position.Topic, r.Position.Partition}
	case r.Imported != nil:
		tp = TopicPartition{r.Imported.Topic, r.Imported.Partition}
	default:
		return
	}
	x.mu.Lock()
	p := x.parts[tp]
	if p == nil {
		if r.Deleted {
			x.mu.Unlock()
			return
		}
		p = &partitionIndex{}
		x.parts[tp] = p
	}
	var thinnedNow bool
	switch {
	case r.Segment != nil && r.Deleted:
		p.remove(r.Segment.From)
	case r.Segment != nil:
		p.put(segment{from: r.Segment.From, last: r.Segment.Last, down: r.Segment.Down})
		wasThinned := p.thinned
		if p.thin(x.maxSegments) && !wasThinned {
			thinnedNow = true
		}
	case r.Imported != nil && r.Deleted:
	case r.Imported != nil:
		// Another replicator's sync from before mm2go: known only coarsely.
		p.addCoarse(point{r.Imported.Upstream, r.Imported.Downstream})
	case r.Deleted:
		p.pos = nil
	default:
		pos := *r.Position
		p.pos = &pos
	}
	x.mu.Unlock()
	if thinnedNow && x.onThin != nil {
		x.onThin(tp)
	}
}

// Translate translates a committed upstream offset of tp. ok is false when
// the index knows nothing of tp (no record of it was replicated and no
// position was stored).
func (x *Index) Translate(tp TopicPartition, upstream int64) (Translation, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	p := x.parts[tp]
	if p == nil {
		return Translation{}, false
	}
	down, mode, ok := p.translate(upstream)
	return Translation{Upstream: upstream, Downstream: down, Mode: mode}, ok
}

// ForeignRun returns the first downstream offset in [from, below) that
// holds no replicated record although replicated records surround it: a
// record another producer wrote into the remote partition between two
// copies (identity policy, producers switched before replication
// finished). A consumer that resumes at a translation above such records
// never reads them. Gaps found to hold only control records (ClassifyGaps)
// are not foreign; gaps not read yet are (the live sync waits for them
// instead, see UnreadGap).
func (x *Index) ForeignRun(tp TopicPartition, from, below int64) (int64, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	p := x.parts[tp]
	if p == nil {
		return 0, false
	}
	for g := range p.gaps(from, below) {
		if !p.markers[g] {
			return max(g[0], from), true
		}
	}
	return 0, false
}

// gaps yields, in order, the gaps between x's segments (downstream offsets
// [from, to) that hold no replicated record) that reach into [from, below).
func (x *partitionIndex) gaps(from, below int64) iter.Seq[[2]int64] {
	return func(yield func([2]int64) bool) {
		for i := 0; i+1 < len(x.segs); i++ {
			g := [2]int64{x.segs[i].lastDown() + 1, x.segs[i+1].down}
			if g[1] <= g[0] || g[1] <= from {
				continue
			}
			if g[0] >= below || !yield(g) {
				return
			}
		}
	}
}

// gapRetry is how long a gap whose reading failed is left alone.
const gapRetry = time.Minute

// unreadGaps returns, per partition, the gaps between its segments not
// classified yet, leaving out those whose reading failed less than
// gapRetry before now.
func (x *Index) unreadGaps(now time.Time) map[TopicPartition][][2]int64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make(map[TopicPartition][][2]int64)
	for tp, p := range x.parts {
		for g := range p.gaps(0, math.MaxInt64) {
			if p.markers[g] || p.foreign[g] {
				continue
			}
			if at, ok := p.unreadable[g]; ok && now.Sub(at) < gapRetry {
				continue
			}
			out[tp] = append(out[tp], g)
		}
	}
	return out
}

// classified records what reading the gap g of tp found: only control
// records (control), other records, or nothing because it failed (failed,
// at now).
func (x *Index) classified(tp TopicPartition, g [2]int64, control, failed bool, now time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	p := x.parts[tp]
	if p == nil {
		return
	}
	switch {
	case failed:
		if p.unreadable == nil {
			p.unreadable = make(map[[2]int64]time.Time)
		}
		p.unreadable[g] = now
	case control:
		if p.markers == nil {
			p.markers = make(map[[2]int64]bool)
		}
		p.markers[g] = true
		delete(p.unreadable, g)
	default:
		if p.foreign == nil {
			p.foreign = make(map[[2]int64]bool)
		}
		p.foreign[g] = true
		delete(p.unreadable, g)
	}
}

// UnreadGap reports whether a gap between replicated records of tp that
// lies in [from, below) has not been read yet (ClassifyGaps): not known to
// be a marker nor another producer's records, and no read of it failed.
// The live sync waits for such a gap to be read rather than lower an
// offset to it: a fencing writer puts one into every remote partition at
// each start.
func (x *Index) UnreadGap(tp TopicPartition, from, below int64) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	p := x.parts[tp]
	if p == nil {
		return false
	}
	for g := range p.gaps(from, below) {
		if _, failed := p.unreadable[g]; !failed && !p.markers[g] && !p.foreign[g] {
			return true
		}
	}
	return false
}

// Position returns where copying of tp stands, if known.
func (x *Index) Position(tp TopicPartition) (offsetmap.Position, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	p := x.parts[tp]
	if p == nil || p.pos == nil {
		return offsetmap.Position{}, false
	}
	return *p.pos, true
}

// Stats returns the number of partitions, the exact segments held, and the
// partitions whose history was thinned.
func (x *Index) Stats() (partitions, segments, thinned int) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	for _, p := range x.parts {
		partitions++
		segments += len(p.segs)
		if p.thinned {
			thinned++
		}
	}
	return partitions, segments, thinned
}

// LoadIndex reads the offset map topic (offsetmap.Topic of the flow's
// source) from its start to its current end into a new Index that keeps at
// most maxSegments exact segments per partition (0 means
// DefaultMaxSegments). reader must be a client without group options built
// with itopic.ReaderOpts; it can be reused afterwards. A missing topic
// gives an empty index. Records that do not decode are skipped. It returns
// an error, and no index, when the topic cannot be listed or read.
func LoadIndex(ctx context.Context, reader *kgo.Client, topic string, maxSegments int) (*Index, error) {
	idx := NewIndex(maxSegments, nil)
	if err := offsetmap.Read(ctx, reader, topic, idx.Apply, nil); err != nil {
		return nil, err
	}
	return idx, nil
}

package replicator

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/internal/itopic"
	"github.com/mm2go/mm2go/internal/offsetmap"
	"github.com/mm2go/mm2go/policy"
)

// newPart is a source partition about to be copied.
type newPart struct {
	topic, remote string
	partition     int32
}

// planned is where a new partition starts, the pairs of records found
// already copied after the offset map's last segment, and the source
// partition's end offset as plan listed it (-1: not listed).
type planned struct {
	start
	tail [][2]int64 // (upstream, downstream) of records the target already holds
	end  int64
}

// sourceOffsets are the source's offsets of the topics with partitions
// not copied yet, listed in the background (listSourceOffsets) while
// discovery readies the target for them (remote topics, fencing): two round
// trips to a source in another region that a start does not wait for in
// turn. starts are the log starts, ends the ends plan resumes and measures
// lag by (the last stable offsets with read_committed), high the high
// watermarks (ends itself with read_uncommitted; with read_committed listed
// only where a position is stored, see anchored).
type sourceOffsets struct {
	topics             map[string]bool // the topics listed
	done               chan struct{}
	starts, ends, high kadm.ListedOffsets
	err                error
}

// listSourceOffsets starts listing the source's offsets of topics.
func (r *Replicator) listSourceOffsets(ctx context.Context, topics []string) *sourceOffsets {
	so := &sourceOffsets{topics: make(map[string]bool, len(topics)), done: make(chan struct{})}
	for _, t := range topics {
		so.topics[t] = true
	}
	if len(topics) == 0 {
		close(so.done)
		return so
	}
	committed := r.o.Flow.SourceIsolationLevel == config.ReadCommitted
	high := !committed || r.anchored(so.topics)
	go func() {
		defer close(so.done)
		var g errgroup.Group
		adm, cluster := r.o.SourceAdmin, r.o.Flow.Source
		listInto(ctx, &g, &so.starts, "start", cluster, adm.ListStartOffsets, topics)
		if high {
			listInto(ctx, &g, &so.high, "end", cluster, adm.ListEndOffsets, topics)
		}
		if committed {
			ends, what := r.endLister()
			listInto(ctx, &g, &so.ends, what, cluster, ends, topics)
		}
		so.err = g.Wait()
		if !committed {
			so.ends = so.high
		}
	}()
	return so
}

// endLister lists the source's ends that plan resumes by: the last stable
// offsets with read_committed, the high watermarks otherwise; what names
// them in errors.
func (r *Replicator) endLister() (list func(context.Context, ...string) (kadm.ListedOffsets, error), what string) {
	if r.o.Flow.SourceIsolationLevel == config.ReadCommitted {
		return r.o.SourceAdmin.ListCommittedOffsets, "last stable"
	}
	return r.o.SourceAdmin.ListEndOffsets, "end"
}

// listInto lists the offsets of topics with fn in g, into out; the error
// names what was listed and on which cluster.
func listInto(ctx context.Context, g *errgroup.Group, out *kadm.ListedOffsets, what, cluster string, fn func(context.Context, ...string) (kadm.ListedOffsets, error), topics []string) {
	g.Go(func() (err error) {
		if *out, err = fn(ctx, topics...); err != nil {
			return fmt.Errorf("list %s offsets on %s: %w", what, cluster, err)
		}
		return nil
	})
}

// settled returns when the listing is done.
func (so *sourceOffsets) settled() { <-so.done }

// covers reports whether so lists the topics of parts.
func (so *sourceOffsets) covers(parts []newPart) bool {
	for _, p := range parts {
		if !so.topics[p.topic] {
			return false
		}
	}
	return true
}

// anchored reports whether a partition of topics has a position stored
// (progress or offset map), which checkAnchors holds against the source's
// high watermarks.
func (r *Replicator) anchored(topics map[string]bool) bool {
	for t := range topics {
		if len(r.stored[t]) > 0 {
			return true
		}
	}
	for k := range r.maps {
		if topics[k.topic] {
			return true
		}
	}
	return false
}

// wait returns when the listing is done, with its error, or ctx's.
func (so *sourceOffsets) wait(ctx context.Context) error {
	select {
	case <-so.done:
		return so.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// plan decides where each new partition resumes.
//
// The last record known to be copied (the anchor) comes from mm2go's
// offset map: the newest segment's end, or the position. Records the target
// acknowledged after the map was last written, before a crash, sit on the
// target after it; plan reads them and the source records after the anchor,
// and resumes after the last one that matches (key, value, headers,
// timestamp), so a crash copies nothing twice. A partition never copied
// before is anchored where the reset policy starts and at the remote
// partition's log start, so a crash before the first flush is handled too.
// Progress stored without an offset map (by Apache MM2) resumes right after
// the stored offset.
// A partition of a remote topic created moments ago (fresh) starts empty;
// one whose end cannot be listed is left out and counted in r.deferred, to
// be planned again shortly. A remote partition in marked (remote topic and
// partition) got the abort marker of this start's fencing as its last
// offset: that offset is no copy to look for, so after a clean stop nothing
// is read.
func (r *Replicator) plan(ctx context.Context, parts []newPart, fresh map[string]bool, marked map[tp]bool, src *sourceOffsets) (map[tp]planned, error) {
	if len(parts) == 0 {
		return nil, nil
	}
	var remotes []string
	seen := map[string]bool{}
	for _, p := range parts {
		if !seen[p.remote] {
			seen[p.remote] = true
			remotes = append(remotes, p.remote)
		}
	}
	// The target's two listings at once, while the source's (src) may
	// still be on their way.
	var dstEnds, dstStarts kadm.ListedOffsets
	var g errgroup.Group
	listInto(ctx, &g, &dstEnds, "end", r.o.Flow.Target, r.o.TargetAdmin.ListEndOffsets, remotes)
	listInto(ctx, &g, &dstStarts, "start", r.o.Flow.Target, r.o.TargetAdmin.ListStartOffsets, remotes)
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if err := src.wait(ctx); err != nil {
		return nil, err
	}
	targetEnd, targetStart := listed(dstEnds), listed(dstStarts)
	sourceStart, sourceEnd := listed(src.starts), listed(src.ends)

	// Partitions another replicator (Apache MM2) copied before mm2go: its
	// offset syncs say where its last copies are and let old offsets
	// translate.
	var legacy map[tp][]policy.OffsetSync
	for _, p := range parts {
		k := tp{p.topic, p.partition}
		if _, ok := r.stored[p.topic][p.partition]; ok && r.maps[k].last == nil && r.maps[k].pos == nil {
			var err error
			if legacy, err = r.legacySyncs(ctx); err != nil {
				return nil, err
			}
			break
		}
	}

	out := make(map[tp]planned, len(parts))
	type tailJob struct {
		p      newPart
		after  int64 // upstream offset of the anchor
		target itopic.Range
	}
	var tails []tailJob
	for _, p := range parts {
		k := tp{p.topic, p.partition}
		// A marked partition's last offset is this start's abort marker.
		var marker int64
		if marked[tp{p.remote, p.partition}] {
			marker = 1
		}
		e, ok := targetEnd[tp{p.remote, p.partition}]
		if !ok && fresh[p.remote] {
			e, ok = marker, true // just created: empty but for the marker
		}
		if !ok {
			// A remote topic just created by another task, say: tried
			// again shortly (see refreshLoop).
			r.deferred++
			r.log.Debug("no end offset for remote partition yet; planned again shortly",
				zap.String("target_topic", p.remote), zap.Int32("partition", p.partition))
			continue
		}
		stored := int64(-1)
		if s, ok := r.stored[p.topic][p.partition]; ok {
			stored = s
		}
		st := start{stored: stored, downNext: e}
		// The anchor is the last record known to be copied, as (upstream,
		// downstream) offsets; the target's records after it are matched
		// against the source's.
		ms := r.maps[k]
		var anchorUp, anchorDown int64
		switch {
		case ms.last != nil:
			last := *ms.last
			anchorUp, anchorDown, st.open = last.Last, last.LastDown(), &last
		case ms.pos != nil:
			anchorUp, anchorDown = ms.pos.Next-1, ms.pos.DownNext-1
		case stored >= 0 && len(legacy[k]) > 0:
			// Progress without mm2go's offset map: Apache MM2 stored it.
			// Its newest offset sync is its last acknowledged copy.
			ss := legacy[k]
			last := ss[len(ss)-1]
			anchorUp, anchorDown = last.UpstreamOffset, last.DownstreamOffset
			for _, s := range ss {
				st.imported = append(st.imported, offsetmap.Imported{Topic: s.Topic, Partition: s.Partition, Upstream: s.UpstreamOffset, Downstream: s.DownstreamOffset})
			}
			r.log.Info("taking over a partition copied before: resuming after the last copy the previous replicator's offset syncs name",
				zap.String("topic", p.topic), zap.Int32("partition", p.partition),
				zap.Int64("stored_offset", stored), zap.Int64("offset", anchorUp+1), zap.Int("offset_syncs", len(ss)))
		case stored >= 0:
			// Progress without mm2go's offset map nor offset syncs: it
			// does not say where the records sit on the target.
			st.from = stored + 1
			out[k] = planned{start: st}
			continue
		case r.o.Flow.SourceAutoOffsetReset == config.OffsetResetLatest:
			anchorUp, anchorDown = sourceEnd[k]-1, targetStart[tp{p.remote, p.partition}]-1
		default:
			anchorUp, anchorDown = sourceStart[k]-1, targetStart[tp{p.remote, p.partition}]-1
		}
		st.from = anchorUp + 1
		before := e - marker // the end before this start's abort marker
		switch {
		case before == anchorDown+1:
			if ms.pos != nil && ms.pos.DownNext == before && ms.pos.Next > st.from {
				st.from = ms.pos.Next // transaction markers after the last record
			}
		case before > anchorDown+1:
			tails = append(tails, tailJob{p: p, after: anchorUp, target: itopic.Range{From: anchorDown + 1, To: e}})
		default:
			r.m.error(r.flow, reasonTargetTruncated)
			r.log.Warn("remote partition holds fewer records than mm2go copied (truncated or recreated); copying goes on from where it stopped",
				zap.String("topic", p.topic), zap.Int32("partition", p.partition), zap.String("target_topic", p.remote),
				zap.Int64("offset", st.from), zap.Int64("target_end_offset", e))
			st.open = nil
			st.from = max(st.from, stored+1)
		}
		out[k] = planned{start: st}
	}
	// The lag starts from the end offsets listed here: no listing of its
	// own (a round trip) before the copy starts.
	for k, pl := range out {
		pl.end = -1
		if e, ok := sourceEnd[k]; ok {
			pl.end = e
		}
		out[k] = pl
	}
	if len(tails) == 0 {
		return out, nil
	}

	// Read the target's records after the last known copy, and as many
	// source records after it, then match them in order. The source's ends
	// are listed again first: src was listed before this start's fencing,
	// and the writer it fenced (a paused holder of the task, a second
	// instance) may have copied records written after that listing. Read
	// only up to the old ends, their copies on the target's tail would not
	// match and be copied again.
	tailParts := make([]newPart, 0, len(tails))
	for _, j := range tails {
		tailParts = append(tailParts, j.p)
	}
	var relisted kadm.ListedOffsets
	var lg errgroup.Group
	list, what := r.endLister()
	listInto(ctx, &lg, &relisted, what, r.o.Flow.Source, list, topicsOf(tailParts))
	if err := lg.Wait(); err != nil {
		return nil, err
	}
	tailEnd := listed(relisted)
	dstRanges := make(map[string]map[int32]itopic.Range)
	srcRanges := make(map[string]map[int32]itopic.Range)
	want := make(map[tp]int)
	for _, j := range tails {
		if dstRanges[j.p.remote] == nil {
			dstRanges[j.p.remote] = make(map[int32]itopic.Range)
		}
		dstRanges[j.p.remote][j.p.partition] = j.target
		if srcRanges[j.p.topic] == nil {
			srcRanges[j.p.topic] = make(map[int32]itopic.Range)
		}
		k := tp{j.p.topic, j.p.partition}
		// Records retention removed since cannot be read: the source's
		// first record left is matched within the tail instead (below).
		srcRanges[j.p.topic][j.p.partition] = itopic.Range{From: max(j.after+1, sourceStart[k]), To: tailEnd[k]}
		want[k] = int(j.target.To - j.target.From)
	}
	dstRecs := make(map[tp][]*kgo.Record)
	if err := itopic.ReadRanges(ctx, r.o.TargetReader, dstRanges, func(rec *kgo.Record) bool {
		if !rec.Attrs.IsControl() {
			k := tp{rec.Topic, rec.Partition}
			dstRecs[k] = append(dstRecs[k], rec)
		}
		return true
	}); err != nil {
		return nil, fmt.Errorf("read copied tail on %s: %w", r.o.Flow.Target, err)
	}
	srcRecs := make(map[tp][]*kgo.Record)
	if err := itopic.ReadRanges(ctx, r.o.SourceReader, srcRanges, func(rec *kgo.Record) bool {
		k := tp{rec.Topic, rec.Partition}
		if !rec.Attrs.IsControl() {
			srcRecs[k] = append(srcRecs[k], rec)
		}
		return len(srcRecs[k]) < want[k]
	}); err != nil {
		return nil, fmt.Errorf("read source tail on %s: %w", r.o.Flow.Source, err)
	}
	for _, j := range tails {
		k := tp{j.p.topic, j.p.partition}
		dst, src := dstRecs[tp{j.p.remote, j.p.partition}], srcRecs[k]
		pl := out[k]
		skip := 0
		if gap := sourceStart[k] - (j.after + 1); gap > 0 {
			skip = r.tailAfterRetention(j.p, dst, src, gap, sourceStart[k])
			pl.from = max(pl.from, sourceStart[k])
		}
		dst = dst[skip:]
		n := 0
		for n < len(dst) && n < len(src) && policy.CopyDiff(src[n], dst[n]) == 0 {
			pl.tail = append(pl.tail, [2]int64{src[n].Offset, dst[n].Offset})
			pl.from = src[n].Offset + 1
			n++
		}
		out[k] = pl
		if n > 0 {
			r.log.Info("found records copied before a crash; resuming after them",
				zap.String("topic", j.p.topic), zap.Int32("partition", j.p.partition), zap.Int("records", n), zap.Int64("offset", pl.from))
		}
		// Transaction markers (the fence's abort markers among them) take
		// offsets but are no one's records.
		if n < len(dst) {
			r.m.error(r.flow, reasonForeignRecords)
			r.log.Warn("remote partition holds records after the last copied one that are not the source's next records (another producer?); copying resumes after the last matching one",
				zap.String("topic", j.p.topic), zap.Int32("partition", j.p.partition), zap.String("target_topic", j.p.remote),
				zap.Int64("offset", pl.from), zap.Int("unmatched", len(dst)-n))
		}
	}
	return out, nil
}

// tailAfterRetention handles a copied tail whose first source records
// retention removed before the restart could compare them (gap records
// below the log start, start): the tail's records before the one equal to
// the source's first record left (all of them when none is) were copied
// from the removed ones and are kept unmapped; the rest of the gap was
// never copied and is counted lost. It returns how many tail records come
// before the source's first one.
func (r *Replicator) tailAfterRetention(p newPart, dst, src []*kgo.Record, gap, start int64) int {
	skip := 0
	for skip < len(dst) && (len(src) == 0 || policy.CopyDiff(src[0], dst[skip]) != 0) {
		skip++
	}
	if lost := gap - int64(skip); lost > 0 {
		r.m.sourceLost(r.flow, p.topic, lost)
		r.m.error(r.flow, reasonSourceGap)
	}
	r.log.Warn("records copied before a crash whose source records retention removed since: kept on the target without offset map entries; copying resumes at the source's log start",
		zap.String("topic", p.topic), zap.Int32("partition", p.partition), zap.String("target_topic", p.remote),
		zap.Int("copied_unmapped", skip), zap.Int64("lost", max(gap-int64(skip), 0)), zap.Int64("log_start_offset", start))
	return skip
}

// legacySyncs reads the flow's MM2 offset-syncs topic and returns its
// syncs per partition in the order written. A missing topic reads as none.
func (r *Replicator) legacySyncs(ctx context.Context) (map[tp][]policy.OffsetSync, error) {
	f := r.o.Flow
	topic, reader := r.o.Policy.OffsetSyncsTopic(f.Target), r.o.SourceReader
	if f.OffsetSyncsTopicLocation == config.LocationTarget {
		topic, reader = r.o.Policy.OffsetSyncsTopic(f.Source), r.o.TargetReader
	}
	out := make(map[tp][]policy.OffsetSync)
	err := itopic.ReadAll(ctx, reader, topic, func(rec *kgo.Record) {
		s, err := policy.DecodeOffsetSync(rec.Key, rec.Value)
		if err != nil {
			return
		}
		k := tp{s.Topic, s.Partition}
		out[k] = append(out[k], s)
	})
	if err != nil {
		return nil, fmt.Errorf("read offset syncs %s: %w", topic, err)
	}
	return out, nil
}

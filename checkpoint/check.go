package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/mm2go/mm2go/policy"
)

// FailureReason says why a failover is not safe yet.
type FailureReason string

const (
	// ReasonNoSourceOffsets means the group has no committed offset on a
	// replicated topic of the source, so there is nothing to fail over.
	ReasonNoSourceOffsets FailureReason = "no_source_offsets"
	// ReasonSourceEndUnknown means the source's end offset of the partition could
	// not be listed.
	ReasonSourceEndUnknown FailureReason = "source_end_unknown"
	// ReasonNoProgress means the replicator has stored no position for the
	// partition yet.
	ReasonNoProgress FailureReason = "no_replication_progress"
	// ReasonReplicationBehind means records of the partition remain to be copied.
	ReasonReplicationBehind FailureReason = "replication_behind"
	// ReasonNotTranslated means the offset map knows nothing of the partition.
	ReasonNotTranslated FailureReason = "not_translated"
	// ReasonInexact means the translation is approximate (thinned history) or
	// beyond what has been replicated.
	ReasonInexact FailureReason = "inexact_translation"
	// ReasonTargetMissing means the target group has no offset for the partition.
	ReasonTargetMissing FailureReason = "target_offset_missing"
	// ReasonTargetDiffers means the target group has another offset than the
	// translation.
	ReasonTargetDiffers FailureReason = "target_offset_differs"
	// ReasonGroupActive means the target group has members.
	ReasonGroupActive FailureReason = "group_active"
	// ReasonSourceActive means the group has members on the source: its
	// consumers still run there, and the offset they will commit last is
	// not known yet.
	ReasonSourceActive FailureReason = "source_group_active"
)

// Failure is one reason a group cannot fail over yet.
type Failure struct {
	// Topic and Partition name the source partition; Partition is -1 and
	// Topic "" for a failure of the whole group.
	Topic     string
	Partition int32
	// RemoteTopic is the partition's topic on the target, "" when the
	// failure is about the source side or the whole group.
	RemoteTopic string
	Reason      FailureReason
	// Detail is a human-readable explanation with the offsets involved.
	Detail string
	// Behind is, for ReasonReplicationBehind, the source offsets not
	// replicated yet.
	Behind int64
}

// GroupCheck is the outcome of Check for one group.
type GroupCheck struct {
	Group string
	// State and Members describe the group on the target ("" and 0 when it
	// does not exist there).
	State   string
	Members int
	// Partitions is the number of source partitions checked: every
	// partition of every replicated topic the group has a committed offset
	// on.
	Partitions int
	// Offsets are the group's translated offsets.
	Offsets  []GroupOffset
	Failures []Failure
}

// Report is the outcome of Check.
type Report struct {
	Groups []GroupCheck
}

// Safe reports whether every group checked can be switched to the target
// now. A report without groups is not safe: nothing was verified.
func (r Report) Safe() bool {
	if len(r.Groups) == 0 {
		return false
	}
	for _, g := range r.Groups {
		if len(g.Failures) > 0 {
			return false
		}
	}
	return true
}

// Failures returns every failure of every group, in report order.
func (r Report) Failures() []Failure {
	var out []Failure
	for _, g := range r.Groups {
		out = append(out, g.Failures...)
	}
	return out
}

// CheckOptions configure Check.
type CheckOptions struct {
	// ReadCommitted says that the flow reads the source with
	// isolation.level=read_committed (mm2go's default): replication is then
	// complete at the source's last stable offset, otherwise at its high
	// watermark.
	ReadCommitted bool
}

// Check tells whether the consumer groups can be switched from the source to
// the target now, the "failover check" command. For each group it checks
// every partition of the replicated topics the group has committed offsets
// on:
//
//   - replication caught up: the replicator's stored position (idx) is at
//     or past the source's end offset (last stable offset with
//     opts.ReadCommitted, high watermark otherwise);
//   - the target group has exactly the translated offset committed, and the
//     translation is exact (not approximate, not beyond what is replicated);
//   - the target group has no members, and the source group has none
//     either (its consumers were stopped, so its commit is final).
//
// idx must be loaded recently (LoadIndex): positions are stored at every
// offset.flush.interval.ms. The source's offsets, end offsets and the target
// groups are each fetched in one batched request. Listing failures are
// returned as errors without a report.
func Check(ctx context.Context, srcAdm, tgtAdm *kadm.Client, idx *Index, sel policy.TopicSelector, source string, groups []string, opts CheckOptions) (Report, error) {
	var rep Report
	if len(groups) == 0 {
		return rep, nil
	}
	groups = append([]string(nil), groups...)
	sort.Strings(groups)

	srcListed, err := srcAdm.ListGroups(ctx)
	if err != nil {
		return rep, fmt.Errorf("list groups on the source: %w", err)
	}
	srcOffs := srcAdm.FetchManyOffsets(ctx, groups...)
	offsets := make(map[string][]GroupOffset, len(groups))
	topicSet := make(map[string]bool)
	for _, g := range groups {
		r, ok := srcOffs[g]
		switch {
		case !ok:
			return rep, fmt.Errorf("fetch source offsets of group %s: %w", g, errGroupMissing)
		case r.Err != nil && !errors.Is(r.Err, kerr.GroupIDNotFound):
			return rep, fmt.Errorf("fetch source offsets of group %s: %w", g, r.Err)
		}
		offsets[g] = translateFetched(idx, sel, source, r.Fetched, "")
		for _, o := range offsets[g] {
			topicSet[o.Topic] = true
		}
	}

	ends := make(kadm.ListedOffsets)
	if len(topicSet) > 0 {
		topics := make([]string, 0, len(topicSet))
		for t := range topicSet {
			topics = append(topics, t)
		}
		sort.Strings(topics)
		var err error
		if opts.ReadCommitted {
			ends, err = srcAdm.ListCommittedOffsets(ctx, topics...)
		} else {
			ends, err = srcAdm.ListEndOffsets(ctx, topics...)
		}
		if err != nil {
			return rep, fmt.Errorf("list end offsets on the source: %w", err)
		}
	}

	desc, err := describeTargetGroups(ctx, tgtAdm, groups)
	if err != nil {
		return rep, fmt.Errorf("describe groups on the target: %w", err)
	}
	tgtOffs := tgtAdm.FetchManyOffsets(ctx, groups...)

	for _, g := range groups {
		d := desc[g]
		if d.err != nil {
			return rep, d.err
		}
		tr, ok := tgtOffs[g]
		switch {
		case !ok:
			return rep, fmt.Errorf("fetch target offsets of group %s: %w", g, errGroupMissing)
		case tr.Err != nil && !errors.Is(tr.Err, kerr.GroupIDNotFound):
			return rep, fmt.Errorf("fetch target offsets of group %s: %w", g, tr.Err)
		}
		gc := GroupCheck{Group: g, State: d.state, Members: d.members, Offsets: offsets[g]}
		if l, ok := srcListed[g]; ok && l.State != groupStateEmpty && l.State != groupStateDead {
			gc.Failures = append(gc.Failures, Failure{Partition: -1, Reason: ReasonSourceActive,
				Detail: fmt.Sprintf("group has members on the source (state %s); stop its consumers there first", l.State)})
		}
		if !d.idle() {
			gc.Failures = append(gc.Failures, Failure{Partition: -1, Reason: ReasonGroupActive,
				Detail: fmt.Sprintf("group has %d members on the target (state %s)", d.members, d.state)})
		}
		if len(gc.Offsets) == 0 {
			gc.Failures = append(gc.Failures, Failure{Partition: -1, Reason: ReasonNoSourceOffsets,
				Detail: "group has no committed offset on a replicated topic of the source"})
		}
		gc.Failures = append(gc.Failures, checkReplication(idx, gc.Offsets, ends, opts.ReadCommitted, &gc.Partitions)...)
		target := checkTarget(idx, gc.Offsets, tr.Fetched)
		if !d.exists {
			hintMissing(target)
		}
		gc.Failures = append(gc.Failures, target...)
		rep.Groups = append(rep.Groups, gc)
	}
	return rep, nil
}

// checkReplication checks that every partition of the topics in offs is
// replicated up to the source's end offset, counting the partitions in n.
func checkReplication(idx *Index, offs []GroupOffset, ends kadm.ListedOffsets, readCommitted bool, n *int) []Failure {
	end := "high watermark"
	if readCommitted {
		end = "last stable offset"
	}
	var out []Failure
	seen := make(map[string]bool)
	for _, o := range offs {
		if seen[o.Topic] {
			continue
		}
		seen[o.Topic] = true
		ps := ends[o.Topic]
		parts := make([]int32, 0, len(ps))
		for p := range ps {
			parts = append(parts, p)
		}
		sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
		for _, p := range parts {
			if p < 0 {
				continue // the topic no longer exists on the source
			}
			*n++
			e := ps[p].Offset
			pos, ok := idx.Position(TopicPartition{o.Topic, p})
			switch {
			case ps[p].Err != nil:
				out = append(out, Failure{Topic: o.Topic, Partition: p, Reason: ReasonSourceEndUnknown,
					Detail: fmt.Sprintf("list %s: %v", end, ps[p].Err)})
			case !ok:
				out = append(out, Failure{Topic: o.Topic, Partition: p, Reason: ReasonNoProgress,
					Detail: fmt.Sprintf("no replication position stored; source %s is %d", end, e)})
			case pos.Next < e:
				out = append(out, Failure{Topic: o.Topic, Partition: p, Reason: ReasonReplicationBehind, Behind: e - pos.Next,
					Detail: fmt.Sprintf("replicated up to %d, source %s is %d (%d behind)", pos.Next, end, e, e-pos.Next)})
			}
		}
	}
	return out
}

// hintMissing says, on the first missing offset of a group that does not
// exist on the target, when the exact sync commits into it.
func hintMissing(fs []Failure) {
	for i := range fs {
		if fs[i].Reason == ReasonTargetMissing {
			fs[i].Detail += "; the group does not exist on the target: the sync commits into it once it saw the group's consumers stop on the source, or once a consumer of the group started on the target (`mm2go offsets apply` commits now)"
			return
		}
	}
}

// checkTarget checks that the target group has exactly the translated
// offsets, that they are exact, and that no other producer's records lie
// between them and the group's offset.
func checkTarget(idx *Index, offs []GroupOffset, cur kadm.OffsetResponses) []Failure {
	var out []Failure
	for _, o := range offs {
		f := Failure{Topic: o.Topic, Partition: o.Partition, RemoteTopic: o.RemoteTopic}
		have := currentOffset(cur, o.RemoteTopic, o.Partition)
		foreign, overlap := int64(0), false
		if o.Known {
			foreign, overlap = noLoss(idx, TopicPartition{o.Topic, o.Partition}, o.Translation.Downstream, have)
		}
		switch {
		case overlap:
			f.Reason = ReasonForeignRecords
			f.Detail = fmt.Sprintf("records of other producers on %s from offset %d lie between replicated records below the translation %d (source offset %d): no offset both reads them and avoids delivering the replicated records after them again; mm2go commits %d so none is lost",
				o.RemoteTopic, foreign, o.Translation.Downstream, o.SourceOffset, foreign)
		case !o.Known:
			f.Reason = ReasonNotTranslated
			f.Detail = fmt.Sprintf("source offset %d: nothing of the partition is in the offset map", o.SourceOffset)
		case o.Translation.Mode == ModeApproximate || o.Translation.Mode == ModeBeyond:
			f.Reason = ReasonInexact
			f.Detail = fmt.Sprintf("source offset %d translates to %d (%s)", o.SourceOffset, o.Translation.Downstream, o.Translation.Mode)
		case have < 0:
			f.Reason = ReasonTargetMissing
			f.Detail = fmt.Sprintf("target group has no offset; want %d (source offset %d)", o.Translation.Downstream, o.SourceOffset)
		case have != o.Translation.Downstream:
			f.Reason = ReasonTargetDiffers
			f.Detail = fmt.Sprintf("target group has %d; want %d (source offset %d)", have, o.Translation.Downstream, o.SourceOffset)
		default:
			continue
		}
		out = append(out, f)
	}
	return out
}

package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/mm2go/mm2go/policy"
)

// AppliedOffset is an offset committed to a target group.
type AppliedOffset struct {
	Topic     string // target topic
	Partition int32
	Offset    int64
	// Previous is the offset the group had before, -1 for none.
	Previous int64
	// LocalInit is set for the log-start offset of a local topic (see the
	// package documentation), not a translated offset.
	LocalInit bool
}

// appliedList prints applied offsets as topic/partition=offset (previous
// offset), for the debug log.
type appliedList []AppliedOffset

func (l appliedList) String() string {
	var b strings.Builder
	for i, a := range l {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s/%d=%d (was %d)", a.Topic, a.Partition, a.Offset, a.Previous)
	}
	return b.String()
}

// SkippedOffset is an offset not committed to a target group.
type SkippedOffset struct {
	Topic     string // target topic
	Partition int32
	// Offset is the offset that would have been committed (-1 when it is
	// unknown, for SkipNotTranslated).
	Offset int64
	// Current is the group's offset on the target, -1 for none or unknown.
	Current int64
	Reason  SkipReason
}

// wantOffset is an offset to commit unless the target group has it or more.
type wantOffset struct {
	topic     string
	partition int32
	offset    int64
	metadata  string
	localInit bool
}

// currentOffset returns the group's committed target offset of a partition,
// -1 for none. Non-Java clients may have committed -1 to reset it; that
// counts as none, as in MM2.
func currentOffset(cur kadm.OffsetResponses, topic string, partition int32) int64 {
	if o, ok := cur.Lookup(topic, partition); ok && o.Err == nil && o.At >= 0 {
		return o.At
	}
	return -1
}

// plan splits wants into the offsets to commit and the skipped ones: an
// offset is committed only where the group has none or a smaller one,
// unless allowRewind.
func plan(wants []wantOffset, cur kadm.OffsetResponses, allowRewind bool) (kadm.Offsets, []AppliedOffset, []SkippedOffset) {
	commit := make(kadm.Offsets)
	var applied []AppliedOffset
	var skipped []SkippedOffset
	for _, w := range wants {
		have := currentOffset(cur, w.topic, w.partition)
		switch {
		case have == w.offset:
			skipped = append(skipped, SkippedOffset{w.topic, w.partition, w.offset, have, SkipUpToDate})
			continue
		case have > w.offset && !allowRewind:
			skipped = append(skipped, SkippedOffset{w.topic, w.partition, w.offset, have, SkipWouldRewind})
			continue
		}
		commit.Add(kadm.Offset{Topic: w.topic, Partition: w.partition, At: w.offset, LeaderEpoch: -1, Metadata: w.metadata})
		applied = append(applied, AppliedOffset{w.topic, w.partition, w.offset, have, w.localInit})
	}
	return commit, applied, skipped
}

// isMembershipError reports whether the broker refused an admin commit
// because the group has (or just got) members: classic groups answer
// UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION (or REBALANCE_IN_PROGRESS while
// rebalancing), consumer-protocol groups UNKNOWN_MEMBER_ID or a member-epoch
// error.
func isMembershipError(err error) bool {
	for _, e := range []error{kerr.UnknownMemberID, kerr.IllegalGeneration, kerr.RebalanceInProgress,
		kerr.StaleMemberEpoch, kerr.FencedMemberEpoch, kerr.FencedInstanceID, kerr.NonEmptyGroup} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// commitOffsets commits offsets to group with the admin form of OffsetCommit
// (no member, generation -1), which the broker accepts only while the group
// has no members. becameActive reports a refusal for membership; the
// commit is then not retried. Other per-partition failures are returned
// joined; ok holds the partitions committed.
func commitOffsets(ctx context.Context, adm *kadm.Client, group string, offsets kadm.Offsets) (ok kadm.Offsets, becameActive bool, err error) {
	if len(offsets) == 0 {
		return nil, false, nil
	}
	resps, err := adm.CommitOffsets(ctx, group, offsets)
	if err != nil {
		return nil, false, fmt.Errorf("commit offsets of group %s: %w", group, err)
	}
	ok = make(kadm.Offsets)
	var errs []error
	resps.Each(func(r kadm.OffsetResponse) {
		switch {
		case r.Err == nil:
			ok.Add(r.Offset)
		case isMembershipError(r.Err):
			becameActive = true
		default:
			errs = append(errs, fmt.Errorf("commit offset of group %s on %s[%d]: %w", group, r.Topic, r.Partition, r.Err))
		}
	})
	if becameActive {
		// The broker refuses the whole commit for membership; anything
		// reported as committed alongside would be inconsistent, so report
		// nothing as committed.
		return nil, true, errors.Join(errs...)
	}
	return ok, false, errors.Join(errs...)
}

// keepCommitted returns the applied offsets that are in ok.
func keepCommitted(applied []AppliedOffset, ok kadm.Offsets) []AppliedOffset {
	var out []AppliedOffset
	for _, a := range applied {
		if _, in := ok.Lookup(a.Topic, a.Partition); in {
			out = append(out, a)
		}
	}
	return out
}

// localTopic returns the local topic of a remote topic under the default
// policy: "<source><sep><topic>" -> "<topic>". ok is false for other
// policies, for topics not named after source, and for heartbeats topics.
func localTopic(p policy.Policy, source, remote string) (string, bool) {
	if p.Kind() != policy.KindDefault || p.IsHeartbeatsTopic(remote) {
		return "", false
	}
	if src, ok := p.TopicSource(remote); !ok || src != source {
		return "", false
	}
	local, ok := p.UpstreamTopic(remote)
	if !ok || local == remote || p.FormatRemoteTopic(source, local) != remote {
		return "", false
	}
	return local, true
}

// localStarts lists the log-start offsets of the local topics of remotes on
// the target in one request: local topic -> partition -> offset. Topics
// that do not exist, or of which a partition could not be listed, are left
// out; the error reports the latter.
func localStarts(ctx context.Context, adm *kadm.Client, p policy.Policy, source string, remotes []string) (map[string]map[int32]int64, error) {
	seen := make(map[string]bool)
	var locals []string
	for _, r := range remotes {
		if l, ok := localTopic(p, source, r); ok && !seen[l] {
			seen[l] = true
			locals = append(locals, l)
		}
	}
	out := make(map[string]map[int32]int64)
	if len(locals) == 0 {
		return out, nil
	}
	sort.Strings(locals)
	listed, err := adm.ListStartOffsets(ctx, locals...)
	var errs []error
	if err != nil {
		errs = append(errs, fmt.Errorf("list start offsets of local topics: %w", err))
	}
	for topic, ps := range listed {
		bad := false
		starts := make(map[int32]int64, len(ps))
		for p, o := range ps {
			switch {
			case errors.Is(o.Err, kerr.UnknownTopicOrPartition) && p < 0:
				bad = true // the topic does not exist
			case o.Err != nil:
				bad = true
				errs = append(errs, fmt.Errorf("list start offset of %s[%d]: %w", topic, p, o.Err))
			default:
				starts[p] = o.Offset
			}
		}
		if !bad && len(starts) > 0 {
			out[topic] = starts
		}
	}
	return out, errors.Join(errs...)
}

// localInits returns the offsets that initialize the local topics of a
// group: for each local topic of the group's remote topics on which the
// group has no committed offset at all, the log-start offset of every
// partition.
func localInits(p policy.Policy, source string, remotes []string, starts map[string]map[int32]int64, cur kadm.OffsetResponses) []wantOffset {
	var out []wantOffset
	seen := make(map[string]bool)
	for _, r := range remotes {
		local, ok := localTopic(p, source, r)
		if !ok || seen[local] {
			continue
		}
		seen[local] = true
		ps, ok := starts[local]
		if !ok || hasCommitted(cur, local) {
			continue
		}
		for part, off := range ps {
			out = append(out, wantOffset{topic: local, partition: part, offset: off, localInit: true})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].topic != out[j].topic {
			return out[i].topic < out[j].topic
		}
		return out[i].partition < out[j].partition
	})
	return out
}

// hasCommitted reports whether the group has a committed offset on any
// partition of topic.
func hasCommitted(cur kadm.OffsetResponses, topic string) bool {
	for _, o := range cur[topic] {
		if o.Err == nil && o.At >= 0 {
			return true
		}
	}
	return false
}

package checkpoint

import (
	"context"
	"errors"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/internal/metric"
	"github.com/mm2go/mm2go/policy"
)

// sync commits the last checkpoints into the target's consumer groups that
// have no members, never rewinding an offset (MM2's syncGroupOffset with the
// race closed by the broker; see the package documentation). One
// ListGroups, DescribeGroups, ConsumerGroupDescribe and OffsetFetch request
// serves all groups; each group gets one OffsetCommit.
func (c *Checkpointer) sync(ctx context.Context) {
	byGroup := c.st.byGroup()
	if len(byGroup) == 0 {
		return
	}
	groups := make([]string, 0, len(byGroup))
	for g := range byGroup {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	c.classifyGaps(ctx)

	actx, cancel := context.WithTimeout(ctx, c.o.Flow.AdminTimeout)
	defer cancel()
	adm := c.o.TargetAdmin
	desc, err := describeTargetGroups(actx, adm, groups)
	if err != nil {
		c.fail(ctx, metric.Reason(err, reasonDescribe), "describe target groups; group offsets synced at the next interval", err)
		return
	}
	var idle []string
	for _, g := range groups {
		d := desc[g]
		switch {
		case d.err != nil:
			c.fail(ctx, metric.Reason(d.err, reasonDescribe), "describe target group; its offsets are synced at the next interval", d.err, zap.String("group", g))
		case !d.idle():
			c.m.skippedOffsets(c.flow, SkipActive, len(byGroup[g]))
			c.log.Debug("target group has members; offsets not synced", zap.String("group", g), zap.String("state", d.state), zap.Int("members", d.members))
		default:
			idle = append(idle, g)
		}
	}
	if len(idle) == 0 {
		return
	}
	cur := adm.FetchManyOffsets(actx, idle...)

	var starts map[string]map[int32]int64
	if c.o.InitLocalTopics {
		var remotes []string
		for _, g := range idle {
			remotes = append(remotes, remoteTopicsOf(byGroup[g])...)
		}
		starts, err = localStarts(actx, adm, c.o.Policy, c.o.Flow.Source, remotes)
		if err != nil {
			c.fail(ctx, metric.Reason(err, reasonTopicList), "list local topics on the target; those not listed are initialized at the next interval", err)
		}
	}

	var committed []string
	for _, g := range idle {
		r, ok := cur[g]
		switch {
		case !ok:
			c.fail(ctx, reasonOffsetFetch, "fetch target group offsets; synced at the next interval", errGroupMissing, zap.String("group", g))
			continue
		case r.Err != nil && !errors.Is(r.Err, kerr.GroupIDNotFound):
			c.fail(ctx, metric.Reason(r.Err, reasonOffsetFetch), "fetch target group offsets; synced at the next interval", r.Err, zap.String("group", g))
			continue
		}
		cps := byGroup[g]
		wants := make([]wantOffset, 0, len(cps))
		for _, cp := range cps {
			off := cp.DownstreamOffset
			if up, ok := upstreamOf(c.o.Policy, c.o.Flow.Source, cp.Topic); ok {
				cur := currentOffset(r.Fetched, cp.Topic, cp.Partition)
				if c.idx != nil && c.idx.UnreadGap(TopicPartition{up, cp.Partition}, max(cur, 0), off) {
					continue // synced once a round read the gap (a fencing writer's marker, most likely)
				}
				if f, moved := noLoss(c.idx, TopicPartition{up, cp.Partition}, off, cur); moved {
					c.m.translated(c.flow, ModeOverlap)
					c.warnOverlap(g, cp, f)
					off = f
				}
			}
			wants = append(wants, wantOffset{topic: cp.Topic, partition: cp.Partition, offset: off, metadata: cp.Metadata})
		}
		if c.o.InitLocalTopics {
			wants = append(wants, localInits(c.o.Policy, c.o.Flow.Source, remoteTopicsOf(cps), starts, r.Fetched)...)
		}
		offsets, applied, skipped := plan(wants, r.Fetched, false)
		for _, s := range skipped {
			c.m.skippedOffsets(c.flow, s.Reason, 1)
		}
		if len(applied) == 0 {
			continue
		}
		ok2, becameActive, err := commitOffsets(actx, adm, g, offsets)
		if becameActive {
			c.m.skippedOffsets(c.flow, SkipBecameActive, len(applied))
			c.log.Info("target group got members before its offsets were committed; the broker refused the commit, nothing was rewound",
				zap.String("group", g), zap.Int("offsets", len(applied)))
			continue
		}
		if err != nil {
			c.fail(ctx, metric.Reason(err, reasonCommit), "commit offsets to target group; retried at the next interval", err, zap.String("group", g))
		}
		done := keepCommitted(applied, ok2)
		if len(done) == 0 {
			continue
		}
		committed = append(committed, g)
		c.m.syncedOffsets(c.flow, len(done))
		var inits int
		for _, a := range done {
			if a.LocalInit {
				inits++
			}
		}
		if inits > 0 {
			c.log.Info("local topic offsets of target group set to the log start", zap.String("group", g), zap.Int("offsets", inits))
		}
		c.log.Debug("group offsets synced", zap.String("group", g), zap.Int("offsets", len(done)))
	}
	c.checkJoined(ctx, committed)
}

// checkJoined describes groups whose offsets were just committed and
// reports those that got a member meanwhile. The commit itself was safe
// (the broker accepts it only from an empty group); the report says that a
// consumer started right around a sync, worth a look if it also read from
// the source.
func (c *Checkpointer) checkJoined(ctx context.Context, groups []string) {
	if len(groups) == 0 {
		return
	}
	actx, cancel := context.WithTimeout(ctx, c.o.Flow.AdminTimeout)
	defer cancel()
	after, err := describeTargetGroups(actx, c.o.TargetAdmin, groups)
	if err != nil {
		c.fail(ctx, metric.Reason(err, reasonDescribe), "describe target groups after committing offsets", err)
		return
	}
	for _, g := range groups {
		if a := after[g]; a.err == nil && a.members > 0 {
			c.m.error(c.flow, reasonMemberJoined)
			c.log.Warn("target group got members right after its offsets were committed",
				zap.String("group", g), zap.String("state", a.state), zap.Int("members", a.members))
		}
	}
}

// remoteTopicsOf returns the downstream topics of checkpoints.
func remoteTopicsOf(cps []policy.Checkpoint) []string {
	out := make([]string, 0, len(cps))
	for _, cp := range cps {
		out = append(out, cp.Topic)
	}
	return out
}

// warnOverlap logs, once per group, partition and offset, that a group's
// offset was moved back to another producer's records (ModeOverlap).
// classifyGaps reads the gaps between replicated records on the target that
// the index has not read yet (Index.ClassifyGaps), before offsets are
// planned: a fencing writer's abort markers are not other producers'
// records. It uses the checkpoints reader, idle after start; the sync and
// the watch run after start, one of them.
func (c *Checkpointer) classifyGaps(ctx context.Context) {
	err := c.idx.ClassifyGaps(ctx, c.o.CheckpointReader, func(t string) string {
		return c.o.Policy.FormatRemoteTopic(c.o.Flow.Source, t)
	})
	if err != nil && ctx.Err() == nil {
		c.log.Warn("read gaps between replicated records on the target; until read, a gap counts as other producers' records and a group's offset is not synced past it; tried again in a minute",
			zap.Error(err))
	}
}

func (c *Checkpointer) warnOverlap(group string, cp policy.Checkpoint, to int64) {
	key := overlapKey{group, cp.Topic, cp.Partition, to}
	c.mu.Lock()
	seen := c.overlaps[key]
	if c.overlaps == nil {
		c.overlaps = make(map[overlapKey]bool)
	}
	c.overlaps[key] = true
	c.mu.Unlock()
	if seen {
		return
	}
	c.log.Warn("other producers wrote to the remote partition between replicated records; the group's offset is set to the first of them so none is lost, and the replicated records after it will be delivered again (switch producers only after replication caught up)",
		zap.String("group", group), zap.String("topic", cp.Topic), zap.Int32("partition", cp.Partition),
		zap.Int64("offset", to), zap.Int64("translated_offset", cp.DownstreamOffset))
}

type overlapKey struct {
	group, topic string
	partition    int32
	offset       int64
}

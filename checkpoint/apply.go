package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/policy"
)

// ErrGroupActive is returned, wrapped, by Apply when the group has members
// on the target, or got one before the commit reached the broker (which
// then refused it). Nothing was committed.
var ErrGroupActive = errors.New("group has members on the target")

// ApplyOptions configure Apply.
type ApplyOptions struct {
	// AllowRewind commits a translated offset even where the target group
	// has a larger one. Off by default: a rewind makes the group read
	// records again.
	AllowRewind bool
	// InitLocalTopics sets the group's offsets on local topics to their log
	// start, as group-offset sync does (see the package documentation). It
	// needs Policy and Source.
	InitLocalTopics bool
	// Policy is the flow's replication policy.
	Policy policy.Policy
	// Source is the alias of the flow's source cluster.
	Source string
	// Index, when set, lowers a translation to the first record other
	// producers wrote between replicated records above the group's target
	// offset (see ModeOverlap), so that none is lost.
	Index *Index
}

// ApplyResult says what Apply did.
type ApplyResult struct {
	// Committed are the offsets committed, sorted by topic and partition.
	Committed []AppliedOffset
	// Skipped are the offsets not committed and why.
	Skipped []SkippedOffset
	// MemberJoined reports that the group had a member when it was
	// described again right after the commit: a consumer started while the
	// offsets were applied.
	MemberJoined bool
	// Overlaps are the committed offsets lowered below their translation
	// to other producers' records (ModeOverlap): the replicated records
	// from there on are delivered again.
	Overlaps []AppliedOffset
}

// Apply commits translated offsets (from Translate) into group on the
// target cluster, the "offsets apply" command. It refuses, returning an
// error wrapping ErrGroupActive, when the group has members. Offsets are
// committed only where the group has none or a smaller one unless
// opts.AllowRewind; offsets that are not Known are skipped. With
// opts.InitLocalTopics it also initializes local topics.
//
// The commit uses the admin form of OffsetCommit, which the broker refuses
// once a member joined; that refusal also returns ErrGroupActive, with
// every offset in Skipped as SkipBecameActive. Other per-partition commit
// failures are returned joined together with a partial result (the offsets
// that were committed). Listing failures return an empty result.
func Apply(ctx context.Context, tgtAdm *kadm.Client, group string, offs []GroupOffset, opts ApplyOptions) (ApplyResult, error) {
	var res ApplyResult
	desc, err := describeTargetGroups(ctx, tgtAdm, []string{group})
	if err != nil {
		return res, fmt.Errorf("describe group %s on the target: %w", group, err)
	}
	d := desc[group]
	switch {
	case d.err != nil:
		return res, d.err
	case !d.idle():
		return res, fmt.Errorf("apply offsets of group %s (state %s, %d members): %w", group, d.state, d.members, ErrGroupActive)
	}
	cur, err := tgtAdm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		cur, err = nil, nil
	}
	if err != nil {
		return res, fmt.Errorf("fetch target offsets of group %s: %w", group, err)
	}

	var wants []wantOffset
	var remotes []string
	for _, o := range offs {
		if !o.Known {
			res.Skipped = append(res.Skipped, SkippedOffset{o.RemoteTopic, o.Partition, -1, currentOffset(cur, o.RemoteTopic, o.Partition), SkipNotTranslated})
			continue
		}
		off := o.Translation.Downstream
		if f, moved := noLoss(opts.Index, TopicPartition{o.Topic, o.Partition}, off, currentOffset(cur, o.RemoteTopic, o.Partition)); moved {
			off = f
			res.Overlaps = append(res.Overlaps, AppliedOffset{Topic: o.RemoteTopic, Partition: o.Partition, Offset: f, Previous: currentOffset(cur, o.RemoteTopic, o.Partition)})
		}
		wants = append(wants, wantOffset{topic: o.RemoteTopic, partition: o.Partition, offset: off, metadata: o.Metadata})
		remotes = append(remotes, o.RemoteTopic)
	}
	if opts.InitLocalTopics {
		starts, err := localStarts(ctx, tgtAdm, opts.Policy, opts.Source, remotes)
		if err != nil {
			return ApplyResult{}, fmt.Errorf("initialize local topics of group %s: %w", group, err)
		}
		wants = append(wants, localInits(opts.Policy, opts.Source, remotes, starts, cur)...)
	}
	offsets, applied, skipped := plan(wants, cur, opts.AllowRewind)
	res.Skipped = append(res.Skipped, skipped...)
	if len(applied) == 0 {
		return res, nil
	}
	ok, becameActive, err := commitOffsets(ctx, tgtAdm, group, offsets)
	if becameActive {
		for _, a := range applied {
			res.Skipped = append(res.Skipped, SkippedOffset{a.Topic, a.Partition, a.Offset, a.Previous, SkipBecameActive})
		}
		return res, fmt.Errorf("commit offsets of group %s: the broker refused them for membership: %w", group, ErrGroupActive)
	}
	res.Committed = keepCommitted(applied, ok)
	sort.Slice(res.Committed, func(i, j int) bool {
		a, b := res.Committed[i], res.Committed[j]
		return a.Topic < b.Topic || a.Topic == b.Topic && a.Partition < b.Partition
	})
	if len(res.Committed) > 0 {
		if after, derr := describeTargetGroups(ctx, tgtAdm, []string{group}); derr == nil {
			res.MemberJoined = after[group].members > 0
		}
	}
	return res, err
}

// LastCheckpoints reads the checkpoints topic of the flow source->target
// on the target (topic, with reader, a client built with itopic.ReaderOpts)
// and returns group's last checkpoint per partition as offsets for Apply
// (mode ModeCheckpoint), sorted by topic and partition, and when the newest
// of them was written (zero without any). It needs only the target
// cluster: it is the disaster path, when the source cannot be reached.
//
// A checkpoint translates the source group's commit as it was at the last
// emission (emit.checkpoints.interval.seconds), so a consumer started from
// it may read again what the group consumed afterwards: at least once,
// bounded by mm2go_checkpoint_age_seconds of the group. Checkpoints that do
// not decode are skipped. A read failure is returned with no result.
func LastCheckpoints(ctx context.Context, reader *kgo.Client, topic string, p policy.Policy, source, group string) ([]GroupOffset, time.Time, error) {
	gf, err := policy.NewFilter([]string{".*"}, nil)
	if err != nil {
		return nil, time.Time{}, err
	}
	st := newStore()
	if err := st.load(ctx, reader, topic, gf, nil, func(*kgo.Record, error) {}); err != nil {
		return nil, time.Time{}, err
	}
	var out []GroupOffset
	for _, cp := range st.byGroup()[group] {
		up, _ := upstreamOf(p, source, cp.Topic)
		out = append(out, GroupOffset{
			Topic:        up,
			Partition:    cp.Partition,
			RemoteTopic:  cp.Topic,
			SourceOffset: cp.UpstreamOffset,
			Metadata:     cp.Metadata,
			Translation:  Translation{Upstream: cp.UpstreamOffset, Downstream: cp.DownstreamOffset, Mode: ModeCheckpoint},
			Known:        true,
		})
	}
	newest, _ := st.newestOf(group)
	return out, newest, nil
}

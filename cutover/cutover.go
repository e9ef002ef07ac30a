// Package cutover is `mm2go cutover`: the seed scenario's switch of
// producers and consumers from a flow's source to its target as one
// resumable command. Its steps, each idempotent and recorded with its time
// in a state file:
//
//  1. preflight: both clusters answer; the flow's topics, their remote
//     topics and the groups' translations are there; the lag now.
//  2. fence (optional): DENY WRITE ACLs on the source for the flow's topics,
//     so that no producer writes there any more; recorded before they are
//     created, so that Unfence removes exactly them.
//  3. drain: the source's end offsets stay unchanged for a quiet period
//     (the producers were fenced or switched), then replication reaches
//     them on every partition.
//  4. groups: the groups have no members on the source (their consumers
//     were stopped), so their commits are final.
//  5. offsets: the groups' final offsets, translated exactly, are
//     committed into the target groups (never rewinding one), with the
//     local topics initialized at their log start.
//  6. verify: every record copied in the verify window is compared with its
//     source record.
//
// Started again with the same state file, a cutover skips the steps done
// and continues with the next one. The package does not copy records or
// translate offsets itself: mm2go must be running the flow, and the
// translation is package checkpoint's.
package cutover

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/checkpoint"
	"github.com/mm2go/mm2go/policy"
	"github.com/mm2go/mm2go/verify"
)

// Step names, in the order they run.
const (
	StepPreflight = "preflight"
	StepFence     = "fence"
	StepDrain     = "drain"
	StepGroups    = "groups"
	StepOffsets   = "offsets"
	StepVerify    = "verify"
)

// Options configure a cutover.
type Options struct {
	Flow   string // the flow's name, SOURCE->TARGET
	Source string // the source cluster's alias
	Sel    policy.TopicSelector
	Groups []string

	// Fence makes the fence step create DENY WRITE ACLs for Principals
	// (default User:*) on the source's topics of the flow.
	Fence      bool
	Principals []string
	// KeepOpen lets the fence allow every operation to User:* on topics no
	// ACL names, besides the DENY WRITE (see fence).
	KeepOpen bool
	// ReadCommitted: replication is complete at the last stable offset
	// (the flow reads read_committed), otherwise at the high watermark.
	ReadCommitted bool
	// Quiet is how long the source's end offsets must stay unchanged
	// before they count as final (default 2 s).
	Quiet time.Duration
	// Interval is the pause between two looks while a step waits
	// (default 500 ms).
	Interval time.Duration
	// VerifySince starts the verify step's comparison at the records
	// written this long before the cutover started; 0 skips the step.
	VerifySince time.Duration
	// DryRun runs preflight and says what the other steps would do,
	// changing nothing.
	DryRun bool

	SourceAdmin, TargetAdmin *kadm.Client
	// SourceClient is SourceAdmin's client: the fence asks each source
	// broker whether it enforces the ACLs.
	SourceClient *kgo.Client
	// LoadIndex reads the flow's offset map.
	LoadIndex func(context.Context) (*checkpoint.Index, error)
	// Back loads the offset map of the reverse flow (target -> source),
	// kept on the source, for a failback (see backOffsets); nil: none.
	Back func(context.Context) (*checkpoint.Index, error)
	// Verify runs verify.Run for the flow's topics from since.
	Verify func(ctx context.Context, since time.Time) (*verify.Report, error)

	// Out receives the cutover's log: one timestamped line per event.
	Out io.Writer
	// Save stores the state (the state file); called after every step.
	Save func(*State) error
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// ErrStateMismatch is returned when the state file belongs to another
// flow or other groups.
var ErrStateMismatch = errors.New("the state file is of another cutover")

type run struct {
	o  Options
	st *State
}

// Run performs the cutover's steps not done yet in st (a new cutover when
// st is nil) and returns the state. The error names the step that failed;
// the state holds every step completed before it.
func Run(ctx context.Context, o Options, st *State) (*State, error) {
	if o.Quiet <= 0 {
		o.Quiet = 2 * time.Second
	}
	if o.Interval <= 0 {
		o.Interval = 500 * time.Millisecond
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if len(o.Principals) == 0 {
		o.Principals = []string{"User:*"}
	}
	groups := slices.Clone(o.Groups)
	sort.Strings(groups)
	groups = slices.Compact(groups)
	if len(groups) == 0 {
		return nil, errors.New("no consumer group named: a cutover switches groups (--group)")
	}
	o.Groups = groups
	resumed := st != nil
	switch {
	case st == nil:
		st = &State{Version: stateVersion, Flow: o.Flow, Groups: groups, Started: o.Now()}
	case st.Flow != o.Flow || !slices.Equal(st.Groups, groups):
		return st, fmt.Errorf("%w: flow %s, groups %s (this one: flow %s, groups %s)", ErrStateMismatch,
			st.Flow, strings.Join(st.Groups, ","), o.Flow, strings.Join(groups, ","))
	}
	r := &run{o: o, st: st}
	if resumed {
		r.logf("continuing the cutover started %s (%d steps done)", st.Started.Format(time.RFC3339), len(st.Steps))
	}
	steps := []struct {
		name string
		do   func(context.Context) (string, error)
	}{
		{StepPreflight, r.preflight},
		{StepFence, r.fence},
		{StepDrain, r.drain},
		{StepGroups, r.groupsIdle},
		{StepOffsets, r.offsets},
		{StepVerify, r.verify},
	}
	for _, s := range steps {
		if d, ok := st.done(s.name); ok {
			r.logf("%s: done at %s: %s", s.name, d.Done.Format(time.RFC3339), d.Detail)
			continue
		}
		if o.DryRun && s.name != StepPreflight {
			r.logf("%s: %s", s.name, r.wouldDo(ctx, s.name))
			continue
		}
		began := o.Now()
		detail, err := s.do(ctx)
		if err != nil {
			return st, fmt.Errorf("%s: %w", s.name, err)
		}
		r.logf("%s: %s", s.name, detail)
		if o.DryRun {
			continue
		}
		st.Steps = append(st.Steps, Step{Name: s.name, Started: began, Done: o.Now(), Detail: detail})
		if err := o.Save(st); err != nil {
			return st, fmt.Errorf("%s: save the state: %w", s.name, err)
		}
	}
	if !o.DryRun {
		now := o.Now()
		st.Finished = &now
		if err := o.Save(st); err != nil {
			return st, fmt.Errorf("save the state: %w", err)
		}
	}
	return st, nil
}

func (r *run) logf(format string, args ...any) {
	if r.o.Out != nil {
		_, _ = fmt.Fprintf(r.o.Out, "%s %s\n", r.o.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
}

// wait calls look every interval until it reports done or fails, logging
// its status when it changes and at least every 10 s.
func (r *run) wait(ctx context.Context, look func(context.Context) (done bool, status string, err error)) error {
	var last string
	var said time.Time
	t := time.NewTicker(r.o.Interval)
	defer t.Stop()
	for {
		done, status, err := look(ctx)
		if err != nil || done {
			return err
		}
		if status != last || r.o.Now().Sub(said) >= 10*time.Second {
			r.logf("waiting: %s", status)
			last, said = status, r.o.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %s)", ctx.Err(), status)
		case <-t.C:
		}
	}
}

// topics returns the flow's topics: those preflight found, or the source's
// topics the flow replicates now (dry run).
func (r *run) topics(ctx context.Context) ([]string, error) {
	if len(r.st.Topics) > 0 {
		return r.st.Topics, nil
	}
	return FlowTopics(ctx, r.o.SourceAdmin, r.o.Sel)
}

// FlowTopics lists, sorted, the source topics a flow replicates
// (heartbeats topics aside): those a cutover fences and waits for.
func FlowTopics(ctx context.Context, adm *kadm.Client, sel policy.TopicSelector) ([]string, error) {
	md, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("list topics on the source: %w", err)
	}
	var out []string
	for _, d := range md.Sorted() {
		if d.Err == nil && sel.ShouldReplicate(d.Topic) && !sel.Policy.IsHeartbeatsTopic(d.Topic) {
			out = append(out, d.Topic)
		}
	}
	return out, nil
}

// preflight checks that the cutover can work and says where things stand.
func (r *run) preflight(ctx context.Context) (string, error) {
	o := r.o
	topics, err := r.topics(ctx)
	if err != nil {
		return "", err
	}
	if len(topics) == 0 {
		return "", fmt.Errorf("the source has no topic the flow %s replicates", o.Flow)
	}
	srcMD, err := o.SourceAdmin.ListTopics(ctx, topics...)
	if err != nil {
		return "", fmt.Errorf("describe the flow's topics on the source: %w", err)
	}
	remotes := make([]string, 0, len(topics))
	for _, t := range topics {
		remotes = append(remotes, checkpoint.RemoteTopic(o.Sel.Policy, o.Source, o.Sel.TargetAlias, t))
	}
	tgtMD, err := o.TargetAdmin.ListTopics(ctx, remotes...)
	if err != nil {
		return "", fmt.Errorf("list the remote topics on the target: %w", err)
	}
	var problems []string
	partitions := 0
	for i, t := range topics {
		n := len(srcMD[t].Partitions)
		partitions += n
		d, ok := tgtMD[remotes[i]]
		switch {
		case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			problems = append(problems, fmt.Sprintf("remote topic %s of %s is not on the target", remotes[i], t))
		case d.Err != nil:
			problems = append(problems, fmt.Sprintf("remote topic %s: %v", remotes[i], d.Err))
		case len(d.Partitions) < n:
			problems = append(problems, fmt.Sprintf("remote topic %s has %d partitions, %s has %d", remotes[i], len(d.Partitions), t, n))
		}
	}
	if len(problems) > 0 {
		return "", fmt.Errorf("is mm2go running the flow? %s", strings.Join(problems, "; "))
	}
	idx, err := o.LoadIndex(ctx)
	if err != nil {
		return "", err
	}
	for _, g := range o.Groups {
		offs, err := checkpoint.Translate(ctx, o.SourceAdmin, idx, o.Sel, o.Source, g, "")
		if err != nil {
			return "", err
		}
		if len(offs) == 0 {
			return "", fmt.Errorf("group %s has no committed offset on a topic the flow replicates", g)
		}
		for _, off := range offs {
			if !off.Known {
				return "", fmt.Errorf("group %s: the offset map knows nothing of %s[%d]: is mm2go running the flow?", g, off.Topic, off.Partition)
			}
		}
	}
	behind, records, err := r.behind(ctx, idx, topics, nil)
	if err != nil {
		return "", err
	}
	r.st.Topics = topics
	return fmt.Sprintf("%s, %s, %s; replication %s behind on %s",
		count(len(topics), "topic"), count(partitions, "partition"), count(len(o.Groups), "group"),
		count(int(records), "record"), count(len(behind), "partition")), nil
}

// ends lists the source's end offsets of topics.
func (r *run) ends(ctx context.Context, topics []string) (map[checkpoint.TopicPartition]int64, error) {
	return Ends(ctx, r.o.SourceAdmin, topics, r.o.ReadCommitted)
}

// Ends lists the end offsets of topics on a flow's source: the last stable
// offsets when the flow reads read_committed (where replication is
// complete), the high watermarks otherwise.
func Ends(ctx context.Context, adm *kadm.Client, topics []string, readCommitted bool) (map[checkpoint.TopicPartition]int64, error) {
	var l kadm.ListedOffsets
	var err error
	if readCommitted {
		l, err = adm.ListCommittedOffsets(ctx, topics...)
	} else {
		l, err = adm.ListEndOffsets(ctx, topics...)
	}
	if err == nil {
		err = l.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list end offsets on the source: %w", err)
	}
	out := make(map[checkpoint.TopicPartition]int64)
	l.Each(func(o kadm.ListedOffset) {
		out[checkpoint.TopicPartition{Topic: o.Topic, Partition: o.Partition}] = o.Offset
	})
	return out, nil
}

// behind returns the partitions whose copy has not reached ends (the
// source's ends now when nil) and how many records they lack.
func (r *run) behind(ctx context.Context, idx *checkpoint.Index, topics []string, ends map[checkpoint.TopicPartition]int64) ([]checkpoint.TopicPartition, int64, error) {
	if ends == nil {
		var err error
		if ends, err = r.ends(ctx, topics); err != nil {
			return nil, 0, err
		}
	}
	b, n := Behind(idx, ends)
	return b, n, nil
}

// Behind returns, sorted, the partitions whose copy (the replicator's
// position in idx) has not reached ends, and how many offsets they lack.
func Behind(idx *checkpoint.Index, ends map[checkpoint.TopicPartition]int64) ([]checkpoint.TopicPartition, int64) {
	var out []checkpoint.TopicPartition
	var records int64
	for tp, end := range ends {
		next := int64(0)
		if pos, ok := idx.Position(tp); ok {
			next = pos.Next
		}
		if next < end {
			out = append(out, tp)
			records += end - next
		}
	}
	sortTPs(out)
	return out, records
}

func sortTPs(tps []checkpoint.TopicPartition) {
	sort.Slice(tps, func(i, j int) bool {
		if tps[i].Topic != tps[j].Topic {
			return tps[i].Topic < tps[j].Topic
		}
		return tps[i].Partition < tps[j].Partition
	})
}

// drain waits until nothing is written to the source any more and
// replication has copied everything.
func (r *run) drain(ctx context.Context) (string, error) {
	topics := r.st.Topics
	var prev map[checkpoint.TopicPartition]int64
	var stable time.Time
	var written int64
	err := r.wait(ctx, func(ctx context.Context) (bool, string, error) {
		ends, err := r.ends(ctx, topics)
		if err != nil {
			return false, "", err
		}
		if prev == nil || !equalEnds(prev, ends) {
			written = sumDiff(prev, ends)
			prev, stable = ends, r.o.Now()
		}
		if r.o.Now().Sub(stable) >= r.o.Quiet {
			return true, "", nil
		}
		status := "the source's end offsets to stay unchanged for " + r.o.Quiet.String()
		if written > 0 {
			status = fmt.Sprintf("%d records written to the flow's topics on the source since the last look: producers still write there (switch them, or use --fence)", written)
		}
		return false, status, nil
	})
	if err != nil {
		return "", err
	}
	var total int64
	r.st.Ends = r.st.Ends[:0]
	for tp, end := range prev {
		r.st.Ends = append(r.st.Ends, PartitionEnd{Topic: tp.Topic, Partition: tp.Partition, End: end})
		total += end
	}
	sort.Slice(r.st.Ends, func(i, j int) bool {
		a, b := r.st.Ends[i], r.st.Ends[j]
		return a.Topic < b.Topic || (a.Topic == b.Topic && a.Partition < b.Partition)
	})
	began := r.o.Now()
	err = r.wait(ctx, func(ctx context.Context) (bool, string, error) {
		idx, err := r.o.LoadIndex(ctx)
		if err != nil {
			return false, "", err
		}
		behind, records, err := r.behind(ctx, idx, topics, prev)
		if err != nil || len(behind) == 0 {
			return err == nil, "", err
		}
		return false, fmt.Sprintf("replication: %d records on %d partitions to copy (first %s[%d]); is mm2go running the flow?",
			records, len(behind), behind[0].Topic, behind[0].Partition), nil
	})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("the source's ends were unchanged for %s (%s); replication reached them %s later",
		r.o.Quiet, count(len(prev), "partition"), r.o.Now().Sub(began).Round(time.Millisecond)), nil
}

func equalEnds(a, b map[checkpoint.TopicPartition]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// sumDiff is how far b's ends are past a's.
func sumDiff(a, b map[checkpoint.TopicPartition]int64) int64 {
	if a == nil {
		return 0
	}
	var n int64
	for k, v := range b {
		if w, ok := a[k]; ok && v > w {
			n += v - w
		}
	}
	return n
}

// groupsIdle waits until no group has members on the source.
func (r *run) groupsIdle(ctx context.Context) (string, error) {
	err := r.wait(ctx, func(ctx context.Context) (bool, string, error) {
		active, err := r.activeOnSource(ctx)
		if err != nil || len(active) == 0 {
			return err == nil, "", err
		}
		return false, "groups with members on the source (stop their consumers there): " + strings.Join(active, ", "), nil
	})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s without members on the source: their commits are final", count(len(r.o.Groups), "group")), nil
}

// activeOnSource returns the groups that have members on the source, with
// their state.
func (r *run) activeOnSource(ctx context.Context) ([]string, error) {
	listed, err := r.o.SourceAdmin.ListGroups(ctx)
	if err != nil {
		return nil, fmt.Errorf("list groups on the source: %w", err)
	}
	var active []string
	for _, g := range r.o.Groups {
		if l, ok := listed[g]; ok && l.State != "Empty" && l.State != "Dead" {
			active = append(active, fmt.Sprintf("%s (%s)", g, l.State))
		}
	}
	return active, nil
}

// offsets commits each group's final offsets, translated, into the target
// group, or finds them there already.
func (r *run) offsets(ctx context.Context) (string, error) {
	o := r.o
	results := make(map[string]GroupResult)
	err := r.wait(ctx, func(ctx context.Context) (bool, string, error) {
		idx, err := o.LoadIndex(ctx)
		if err != nil {
			return false, "", err
		}
		var waiting []string
		for _, g := range o.Groups {
			if _, ok := results[g]; ok {
				continue
			}
			res, why, err := r.syncGroup(ctx, idx, g)
			if err != nil {
				return false, "", err
			}
			if why != "" {
				waiting = append(waiting, why)
				continue
			}
			results[g] = res
			r.logf("offsets: group %s: %s %s, %s of local topics initialized", g, count(len(res.Offsets), "offset"), res.How, count(res.LocalInitialized, "partition"))
		}
		return len(waiting) == 0, strings.Join(waiting, "; "), nil
	})
	if err != nil {
		return "", err
	}
	r.st.Offsets = r.st.Offsets[:0]
	committed := 0
	for _, g := range o.Groups {
		r.st.Offsets = append(r.st.Offsets, results[g])
		if results[g].How == howCommitted {
			committed++
		}
	}
	return fmt.Sprintf("every group has its exact offsets on the target (%d committed now, %d had them)", committed, len(o.Groups)-committed), nil
}

const (
	howCommitted = "committed"
	howThere     = "already there"
)

// SyncGroup is the offsets step for one group, once: it translates g's
// final offsets (with idx, and back through o.Back) and commits them into
// the idle target group, never rewinding it. It returns why the group
// cannot have them yet ("" when it has them): a partition not copied yet,
// or members on the target without them. --stop-at-end uses it.
func SyncGroup(ctx context.Context, o Options, idx *checkpoint.Index, g string) (GroupResult, string, error) {
	r := &run{o: o, st: &State{}}
	return r.syncGroup(ctx, idx, g)
}

// syncGroup translates g's final offsets and commits them into the target
// group. It returns why it must wait ("" when done).
func (r *run) syncGroup(ctx context.Context, idx *checkpoint.Index, g string) (GroupResult, string, error) {
	o := r.o
	// One fetch of the group's source offsets for both translations.
	fetched, err := o.SourceAdmin.FetchOffsets(ctx, g)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return GroupResult{}, "", fmt.Errorf("fetch the offsets of group %s on the source: %w", g, err)
	}
	offs := checkpoint.TranslateFetched(idx, o.Sel, o.Source, fetched)
	res := GroupResult{Group: g}
	for _, off := range offs {
		switch {
		case !off.Known:
			return res, fmt.Sprintf("group %s: %s[%d] not in the offset map", g, off.Topic, off.Partition), nil
		case off.Translation.Mode == checkpoint.ModeBeyond:
			return res, fmt.Sprintf("group %s: %s[%d] offset %d not replicated yet", g, off.Topic, off.Partition, off.SourceOffset), nil
		case off.Translation.Mode == checkpoint.ModeApproximate:
			return res, "", fmt.Errorf("group %s: %s[%d] offset %d translates only approximately (the offset map's history was thinned)", g, off.Topic, off.Partition, off.SourceOffset)
		}
		res.Offsets = append(res.Offsets, GroupOffset{Topic: off.Topic, Partition: off.Partition, SourceOffset: off.SourceOffset,
			RemoteTopic: off.RemoteTopic, TargetOffset: off.Translation.Downstream, Mode: off.Translation.Mode.String()})
	}
	back, err := r.backOffsets(ctx, g, fetched)
	if err != nil {
		return res, "", err
	}
	for _, b := range back {
		res.Offsets = append(res.Offsets, GroupOffset{Topic: b.Topic, Partition: b.Partition, SourceOffset: b.SourceOffset,
			RemoteTopic: b.RemoteTopic, TargetOffset: b.Translation.Downstream, Mode: "back, " + b.Translation.Mode.String()})
	}
	// The offsets translated back first: the local topics are then no
	// longer without offsets, and are not set to their log start.
	var applied checkpoint.ApplyResult
	if len(back) > 0 {
		applied, err = checkpoint.Apply(ctx, o.TargetAdmin, g, back, checkpoint.ApplyOptions{})
	}
	if err == nil {
		var more checkpoint.ApplyResult
		more, err = checkpoint.Apply(ctx, o.TargetAdmin, g, offs, checkpoint.ApplyOptions{
			InitLocalTopics: true, Policy: o.Sel.Policy, Source: o.Source, Index: idx,
		})
		applied.Committed = append(applied.Committed, more.Committed...)
		applied.Overlaps = append(applied.Overlaps, more.Overlaps...)
	}
	switch {
	case errors.Is(err, checkpoint.ErrGroupActive):
		// Consumers run on the target: fine if they started from the
		// translation (committed before, by mm2go's group-offset sync).
		short, err := r.targetShort(ctx, g, res.Offsets)
		if err != nil {
			return res, "", err
		}
		if short != "" {
			return res, fmt.Sprintf("group %s has members on the target but not its offsets (%s): they are committed once it is empty", g, short), nil
		}
		res.How = howThere
		return res, "", nil
	case err != nil:
		return res, "", err
	}
	res.How = howThere
	for _, c := range applied.Committed {
		if c.LocalInit {
			res.LocalInitialized++
		} else {
			res.How = howCommitted
		}
	}
	for i := range res.Offsets {
		for _, ov := range applied.Overlaps {
			if ov.Topic == res.Offsets[i].RemoteTopic && ov.Partition == res.Offsets[i].Partition {
				res.Offsets[i].TargetOffset, res.Offsets[i].Mode = ov.Offset, checkpoint.ModeOverlap.String()
			}
		}
	}
	// Apply commits nothing below what the group has: check that what it
	// has is not below the translation either.
	if short, err := r.targetShort(ctx, g, res.Offsets); err != nil || short != "" {
		if err == nil {
			err = fmt.Errorf("group %s: the target group's offsets are below the translation after the commit: %s", g, short)
		}
		return res, "", err
	}
	return res, "", nil
}

// backOffsets translates g's offsets (fetched) on the source's remote topics of the
// target ("<target>.<topic>": what the group read of the target's records
// while the target was the primary) back to <topic> on the target, through
// the offset map of the reverse flow (Options.Back): a failback resumes
// the group on the target's own topics where it stopped reading their
// copies. Partitions that map knows nothing of are left alone.
func (r *run) backOffsets(ctx context.Context, g string, fetched kadm.OffsetResponses) ([]checkpoint.GroupOffset, error) {
	o := r.o
	if o.Back == nil {
		return nil, nil
	}
	var mine []kadm.OffsetResponse
	fetched.Each(func(off kadm.OffsetResponse) {
		if src, ok := o.Sel.Policy.TopicSource(off.Topic); ok && src == o.Sel.TargetAlias && off.Err == nil && off.At >= 0 {
			mine = append(mine, off)
		}
	})
	if len(mine) == 0 {
		return nil, nil
	}
	idx, err := o.Back(ctx)
	if err != nil {
		return nil, err
	}
	var out []checkpoint.GroupOffset
	for _, off := range mine {
		up, ok := o.Sel.Policy.UpstreamTopic(off.Topic)
		if !ok {
			continue
		}
		tr, ok := idx.Upstream(checkpoint.TopicPartition{Topic: up, Partition: off.Partition}, off.At)
		if !ok {
			r.logf("offsets: group %s: %s[%d] is not in the offset map of %s->%s: its offset on %s is left as it is", g, off.Topic, off.Partition, o.Sel.TargetAlias, o.Source, up)
			continue
		}
		out = append(out, checkpoint.GroupOffset{Topic: off.Topic, Partition: off.Partition, RemoteTopic: up, SourceOffset: off.At,
			Translation: checkpoint.Translation{Upstream: off.At, Downstream: tr.Upstream, Mode: tr.Mode}, Known: true, Metadata: off.Metadata})
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Topic < out[j].Topic || (out[i].Topic == out[j].Topic && out[i].Partition < out[j].Partition)
	})
	return out, nil
}

// targetShort names the first partition on which the target group has no
// offset or one below want ("" when none).
func (r *run) targetShort(ctx context.Context, g string, want []GroupOffset) (string, error) {
	cur, err := r.o.TargetAdmin.FetchOffsets(ctx, g)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return "", fmt.Errorf("fetch the offsets of group %s on the target: %w", g, err)
	}
	for _, w := range want {
		c, ok := cur.Lookup(w.RemoteTopic, w.Partition)
		if !ok || c.Err != nil || c.At < w.TargetOffset {
			have := int64(-1)
			if ok {
				have = c.At
			}
			return fmt.Sprintf("%s[%d] at %d, translation %d", w.RemoteTopic, w.Partition, have, w.TargetOffset), nil
		}
	}
	return "", nil
}

// verify compares the records copied in the verify window.
func (r *run) verify(ctx context.Context) (string, error) {
	if r.o.VerifySince <= 0 || r.o.Verify == nil {
		return "skipped (--verify-since 0)", nil
	}
	since := r.st.Started.Add(-r.o.VerifySince)
	rep, err := r.o.Verify(ctx, since)
	if err != nil {
		return "", err
	}
	sum := &VerifySummary{Since: since, Partitions: len(rep.Partitions), OK: rep.OK(),
		Matched: rep.Totals.Matched, Missing: rep.Totals.Missing.Count, Duplicated: rep.Totals.Duplicated.Count,
		Differing: rep.Totals.Differing.Count, Extra: rep.Totals.Extra.Count}
	for _, p := range rep.Partitions {
		if !p.OK() && len(sum.Problems) < 10 {
			sum.Problems = append(sum.Problems, fmt.Sprintf("%s[%d]: missing %d (first at source offset %d), duplicated %d, differing %d, extra %d%s",
				p.Topic, p.Partition, p.Missing.Count, p.Missing.FirstSource, p.Duplicated.Count, p.Differing.Count, p.Extra.Count, msgSuffix(p.Error)))
		}
	}
	r.st.Verify = sum
	detail := fmt.Sprintf("%s since %s on %s: %d matched, %d missing, %d duplicated, %d differing, %d extra",
		count(int(sum.Matched+sum.Missing+sum.Differing), "record"), since.Format(time.RFC3339), count(sum.Partitions, "partition"), sum.Matched, sum.Missing, sum.Duplicated, sum.Differing, sum.Extra)
	if !sum.OK {
		return "", fmt.Errorf("the target does not hold exactly what the source held: %s; %s", detail, strings.Join(sum.Problems, "; "))
	}
	return detail, nil
}

// count is "1 thing" or "n things".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// wouldDo says what a step would do (dry run).
func (r *run) wouldDo(ctx context.Context, step string) string {
	o := r.o
	switch step {
	case StepFence:
		if !o.Fence {
			return "no fence (--fence not given): the producers must be switched by hand"
		}
		return fmt.Sprintf("would create DENY WRITE ACLs on the source for %s on %d topics (%s)",
			strings.Join(o.Principals, ", "), len(r.st.Topics), strings.Join(r.st.Topics, ", "))
	case StepDrain:
		return fmt.Sprintf("would wait for the source's ends to stay unchanged for %s, then for replication to reach them", o.Quiet)
	case StepGroups:
		active, err := r.activeOnSource(ctx)
		if err != nil {
			return err.Error()
		}
		if len(active) == 0 {
			return "no group has members on the source now"
		}
		return "would wait for these groups to have no members on the source: " + strings.Join(active, ", ")
	case StepOffsets:
		return "would commit each group's final offsets, translated, into the target group (never rewinding it) and initialize its local topics"
	case StepVerify:
		if o.VerifySince <= 0 {
			return "would be skipped (--verify-since 0)"
		}
		return fmt.Sprintf("would verify the records written since %s", r.st.Started.Add(-o.VerifySince).Format(time.RFC3339))
	}
	return ""
}

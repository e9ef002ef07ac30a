package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/internal/metric"
	"github.com/mm2go/mm2go/policy"
)

// The exact group-offset sync (mm2go.sync.group.offsets.mode = exact, the
// default) gives a target group offsets only when a consumer may safely
// start from them:
//
//   - while the source group has members (any state but Empty or Dead), the
//     target group gets no translated offsets, and offsets this sync
//     committed earlier are deleted again (only where the target group is
//     empty and still holds exactly what the sync committed);
//   - once the source group is empty, its current committed offsets (read
//     at that moment, never an older checkpoint) are translated and
//     committed into the empty target group, partition by partition as soon
//     as replication has passed them (a translation in mode beyond waits),
//     never rewinding what the target group has;
//   - but only into a target group that asked for them (see asked): the
//     source group was seen consuming and is empty now, or the group exists
//     on the target. Offsets committed into idle groups that nobody switched
//     would stay in place while the source group consumed again unseen (no
//     process running the flow, say), and a consumer switched afterwards
//     would start from them.
//
// A consumer switched to the target at any moment therefore finds either no
// offset (with auto.offset.reset=none it fails and is restarted) or the
// exact one, never a stale one. The source group's state is polled every
// mm2go.sync.group.offsets.watch.interval.ms with one ListGroups request per
// source broker; only groups that are empty have their offsets fetched
// (batched per coordinator), and the target is asked only about groups
// whose source offsets changed, whose state changed, or whose last round
// left something to do; once a minute every group is looked at again.
//
// What the rule cannot see: a group whose consumers commit without joining
// it (assign() with a group.id) is always empty, so its current commit is
// synced at every round and a consumer switched while the source consumer
// still commits re-reads what it consumed after that round; and a source
// group that is empty only for a moment (every member restarted at once)
// gets the exact offsets of that moment, removed again when it has members;
// and a group whose consumers come and go on the source within one round
// (a watch interval plus the round's requests, seconds only when the
// clusters are overloaded) leaves the offsets of before it until the next
// round commits the new ones.

// syncMarker is the commit metadata of offsets the exact sync commits when
// the source commit carries none; with it, and with what the process
// remembers committing, the sync recognizes its own offsets and removes
// them while the source group has members.
func syncMarker(flow string) string { return "mm2go-sync:" + flow }

// switchState is what the exact sync remembers between rounds. Only the
// watch loop touches it.
type switchState struct {
	// active holds, per source group, whether it had members at the last
	// round; a group seen with members for the first time has its target
	// offsets cleaned up.
	active map[string]bool
	// done holds, per empty source group, the fingerprint of the source
	// offsets whose translations are all in the target group, and when.
	done map[string]doneAt
	// ours holds the offsets the sync committed per target group.
	ours map[string]map[TopicPartition]int64
	// consumed holds the source groups seen consuming since the process
	// started: with members, or with a commit that changed between two
	// rounds. Their target groups get offsets when they are empty; other
	// groups' only once they exist on the target (see asked).
	consumed map[string]bool
	// commits holds each empty source group's fingerprint at the last
	// round.
	commits map[string]string

	// mu guards the maps done and ours (not their inner maps) while a
	// round syncs several groups at once; each group's inner map belongs
	// to the goroutine of that group.
	mu sync.Mutex
}

// oursOf returns the offsets the sync committed into group g (nil if none).
func (sw *switchState) oursOf(g string) map[TopicPartition]int64 {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.ours[g]
}

// oursFor is oursOf, creating the map if needed.
func (sw *switchState) oursFor(g string) map[TopicPartition]int64 {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.ours[g] == nil {
		sw.ours[g] = make(map[TopicPartition]int64)
	}
	return sw.ours[g]
}

// switchParallel is how many groups a round commits into at once: with
// many groups becoming empty together (a whole application switched), one
// commit round trip after the other would hold the last one back for
// seconds.
const switchParallel = 16

type doneAt struct {
	fingerprint string
	until       time.Time // when the group is looked at again all the same
}

func newSwitchState() *switchState {
	return &switchState{active: map[string]bool{}, done: map[string]doneAt{}, ours: map[string]map[TopicPartition]int64{},
		consumed: map[string]bool{}, commits: map[string]string{}}
}

// switchPlan is what one round does to one target group.
type switchPlan struct {
	// wants are the offsets to commit unless the group has them or more.
	wants []wantOffset
	// pending are the source partitions whose translation waits for
	// replication (mode beyond).
	pending []GroupOffset
	// untranslated counts partitions the offset map knows nothing of.
	untranslated int
	// localMissing is set when a local topic of the group's remote topics
	// was not found on the target (local initialization on).
	localMissing bool
}

// planSwitch translates the current commits of an empty source group (only
// those on topics sel replicates) into the offsets to commit on the target:
// exact, gap, before and approximate translations are wanted, beyond ones
// are pending. With local, the local topics of the remote topics are
// initialized at their log start (starts) where the group has no offset on
// them. Translations that other producers' records on the target would make
// skip records are lowered to the first of them (noLoss). marker is the
// metadata for commits whose source commit has none.
func planSwitch(idx *Index, sel policy.TopicSelector, source string, src, tgt kadm.OffsetResponses, local bool, starts map[string]map[int32]int64, marker string) switchPlan {
	var p switchPlan
	var remotes []string
	for _, o := range translateFetched(idx, sel, source, src, "") {
		switch {
		case !o.Known:
			p.untranslated++
			continue
		case o.Translation.Mode == ModeBeyond:
			p.pending = append(p.pending, o)
			continue
		}
		off := o.Translation.Downstream
		cur := currentOffset(tgt, o.RemoteTopic, o.Partition)
		if idx != nil && idx.UnreadGap(TopicPartition{o.Topic, o.Partition}, max(cur, 0), off) {
			// A gap not read yet (a fencing writer's marker, most
			// likely): committed once the next round read it.
			p.pending = append(p.pending, o)
			continue
		}
		if f, moved := noLoss(idx, TopicPartition{o.Topic, o.Partition}, off, cur); moved {
			off = f
		}
		md := o.Metadata
		if md == "" {
			md = marker
		}
		p.wants = append(p.wants, wantOffset{topic: o.RemoteTopic, partition: o.Partition, offset: off, metadata: md})
		remotes = append(remotes, o.RemoteTopic)
	}
	if local {
		p.wants = append(p.wants, localInits(sel.Policy, source, remotes, starts, tgt)...)
		for _, r := range remotes {
			if l, ok := localTopic(sel.Policy, source, r); ok {
				if _, there := starts[l]; !there {
					p.localMissing = true
				}
			}
		}
	}
	return p
}

// removals returns the partitions of remote topics of the flow on which
// the target group holds an offset the sync committed: its metadata is
// marker, or it is exactly what ours says the sync committed.
func removals(p policy.Policy, source string, sel policy.TopicSelector, tgt kadm.OffsetResponses, ours map[TopicPartition]int64, marker string) kadm.TopicsSet {
	out := make(kadm.TopicsSet)
	tgt.Each(func(o kadm.OffsetResponse) {
		if o.Err != nil || o.At < 0 {
			return
		}
		up, ok := upstreamOf(p, source, o.Topic)
		if !ok || !sel.ShouldReplicate(up) {
			return
		}
		mine, remembered := ours[TopicPartition{o.Topic, o.Partition}]
		if o.Metadata == marker || (remembered && mine == o.At) {
			out.Add(o.Topic, o.Partition)
		}
	})
	return out
}

// fingerprint names the replicated commits of a group: equal fingerprints,
// equal commits.
func fingerprint(sel policy.TopicSelector, offs kadm.OffsetResponses) string {
	var parts []string
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Err == nil && o.At >= 0 && sel.ShouldReplicate(o.Topic) {
			parts = append(parts, fmt.Sprintf("%s/%d=%d", o.Topic, o.Partition, o.At))
		}
	})
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// watch is one round of the exact group-offset sync (see the top of this
// file).
func (c *Checkpointer) watch(ctx context.Context) { c.round(ctx, true) }

// guard is the part of a round that needs neither the offset map nor the
// checkpoints: removing the offsets the sync committed from target groups
// whose source groups have members. It runs from the checkpointer's start
// until those are loaded (seconds on a large flow), so that a restarted
// process does not leave a stale offset in place meanwhile.
func (c *Checkpointer) guard(ctx context.Context) { c.round(ctx, false) }

// round is one round of the exact sync; without full it stops after the
// groups that got members were cleaned up.
func (c *Checkpointer) round(ctx context.Context, full bool) {
	if full {
		c.classifyGaps(ctx)
	}
	actx, cancel := context.WithTimeout(ctx, c.o.Flow.AdminTimeout)
	defer cancel()
	listed, err := c.o.SourceAdmin.ListGroups(actx)
	if err != nil {
		c.fail(ctx, metric.Reason(err, reasonGroupList), "list source groups; group offsets synced at the next round", err)
		return
	}
	sw := c.sw
	var empty, newlyActive []string
	seen := make(map[string]bool)
	for name, l := range listed {
		if !isConsumerGroup(l) || !c.groupsF.Match(name) || l.State == groupStateDead {
			continue
		}
		seen[name] = true
		if l.State == groupStateEmpty {
			empty = append(empty, name)
			continue
		}
		delete(sw.done, name)
		sw.consumed[name] = true
		if !sw.active[name] {
			newlyActive = append(newlyActive, name)
		}
	}
	for g := range sw.active {
		if !seen[g] {
			delete(sw.active, g)
			delete(sw.done, g)
			delete(sw.ours, g)
			delete(sw.consumed, g)
			delete(sw.commits, g)
		}
	}
	for _, g := range empty {
		sw.active[g] = false
	}
	sort.Strings(empty)
	sort.Strings(newlyActive)
	// First what cannot wait: offsets committed while a group was empty
	// are stale once it has members again.
	if len(newlyActive) > 0 {
		c.cleanActive(ctx, actx, newlyActive)
	}
	if !full {
		return
	}

	src := make(map[string]kadm.OffsetResponses)
	var work []string
	if len(empty) > 0 {
		fetched := c.o.SourceAdmin.FetchManyOffsets(actx, empty...)
		for _, g := range empty {
			offs, ok := c.offsetsOf(ctx, fetched, g, "fetch source group offsets; synced at the next round")
			if !ok {
				continue
			}
			fp := fingerprint(c.sel, offs)
			if !sw.consumed[g] {
				last, ok := sw.commits[g]
				sw.consumed[g] = (ok && last != fp) || c.st.moved(g) || c.movedSinceCheckpoint(g, offs)
			}
			sw.commits[g] = fp
			if fp == "" {
				continue // nothing on a replicated topic
			}
			if d, ok := sw.done[g]; ok && d.fingerprint == fp && time.Now().Before(d.until) {
				continue
			}
			src[g] = offs
			work = append(work, g)
		}
	}
	if len(work) == 0 {
		return
	}
	// Commits go only into idle target groups.
	desc, err := describeTargetGroups(actx, c.o.TargetAdmin, work)
	if err != nil {
		c.fail(ctx, metric.Reason(err, reasonDescribe), "describe target groups; group offsets synced at the next round", err)
		return
	}
	var idle []string
	for _, g := range work {
		switch d := desc[g]; {
		case d.err != nil:
			c.fail(ctx, metric.Reason(d.err, reasonDescribe), "describe target group; its offsets are synced at the next round", d.err, zap.String("group", g))
		case !d.idle():
			c.m.skippedOffsets(c.flow, SkipActive, 1)
			c.log.Debug("target group has members; offsets not synced", zap.String("group", g), zap.String("state", d.state), zap.Int("members", d.members))
		case !asked(sw.consumed[g], d):
			c.log.Debug("source group is empty and was not seen consuming; its target group gets offsets once a consumer of it starts there",
				zap.String("group", g))
		default:
			idle = append(idle, g)
		}
	}
	if len(idle) == 0 {
		return
	}
	tgt := c.o.TargetAdmin.FetchManyOffsets(actx, idle...)
	var starts map[string]map[int32]int64
	if c.o.InitLocalTopics {
		// The remote topics' names need no translation (planSwitch
		// translates once, per group).
		var remotes []string
		f := c.o.Flow
		for _, g := range idle {
			for topic := range src[g] {
				if c.sel.ShouldReplicate(topic) {
					remotes = append(remotes, RemoteTopic(c.o.Policy, f.Source, f.Target, topic))
				}
			}
		}
		if len(remotes) > 0 {
			starts, err = localStarts(actx, c.o.TargetAdmin, c.o.Policy, c.o.Flow.Source, remotes)
			if err != nil {
				c.fail(ctx, metric.Reason(err, reasonTopicList), "list local topics on the target; those not listed are initialized at the next round", err)
			}
		}
	}
	var (
		mu        sync.Mutex
		committed []string
		wg        sync.WaitGroup
		slots     = make(chan struct{}, switchParallel)
	)
	for _, g := range idle {
		offs, ok := c.offsetsOf(ctx, tgt, g, "fetch target group offsets; synced at the next round")
		if !ok {
			continue
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			if c.syncEmpty(actx, g, src[g], offs, starts) {
				mu.Lock()
				committed = append(committed, g)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sort.Strings(committed)
	c.checkJoined(ctx, committed)
}

// asked reports whether the target group of an empty source group wants
// offsets: the source group was seen consuming (and stopped: it is empty
// now), or the group exists on the target, because a consumer of it started
// there (with auto.offset.reset=none it failed and left an empty group) or
// it holds offsets already. Seen consuming means: by this process, with
// members or with a commit that changed between two rounds (assign() with
// a group.id); or by any process running the flow, as its checkpoints tell
// (the checkpoints topic holds two of a partition with different upstream
// offsets), which is how a process restarted at the switch knows; or the
// group committed an offset its last checkpoint does not have. A group idle
// on the source that nobody switched gets no offsets: they would stay in
// place if its consumers came back to the source while no process ran the
// flow, and a consumer switched to the target afterwards would start from
// them.
func asked(consumed bool, d targetGroup) bool { return consumed || d.exists }

// movedSinceCheckpoint reports whether one of the group's committed offsets
// on a replicated topic differs from the upstream offset of its last
// checkpoint. A partition without a checkpoint tells nothing: a group
// committed before any process ran the flow has none.
func (c *Checkpointer) movedSinceCheckpoint(g string, offs kadm.OffsetResponses) bool {
	f := c.o.Flow
	moved := false
	offs.Each(func(o kadm.OffsetResponse) {
		if moved || o.Err != nil || o.At < 0 || !c.sel.ShouldReplicate(o.Topic) {
			return
		}
		up, ok := c.st.upstream(g, RemoteTopic(c.o.Policy, f.Source, f.Target, o.Topic), o.Partition)
		moved = ok && up != o.At
	})
	return moved
}

// switchRecheck is how often the exact sync looks at a target group again
// although its source group's commit did not change.
const switchRecheck = time.Minute

// cleanActive removes the offsets the sync committed into the target groups
// of groups that just got members on the source. It skips describing the
// target groups, to be one round trip sooner: the broker itself refuses to
// delete offsets of a topic the target group's members are subscribed to.
func (c *Checkpointer) cleanActive(ctx, actx context.Context, groups []string) {
	tgt := c.o.TargetAdmin.FetchManyOffsets(actx, groups...)
	for _, g := range groups {
		offs, ok := c.offsetsOf(ctx, tgt, g, "fetch target group offsets; cleaned up at the next round")
		if ok && c.removeOurs(actx, g, offs) {
			c.sw.active[g] = true
		}
	}
}

// offsetsOf returns group g's offsets from a batched fetch; a group that
// does not exist has none. A failure is logged and counted with msg, and ok
// is false.
func (c *Checkpointer) offsetsOf(ctx context.Context, fetched kadm.FetchOffsetsResponses, g, msg string) (kadm.OffsetResponses, bool) {
	r, ok := fetched[g]
	switch {
	case !ok:
		c.fail(ctx, reasonOffsetFetch, msg, errGroupMissing, zap.String("group", g))
		return nil, false
	case errors.Is(r.Err, kerr.GroupIDNotFound):
		return nil, true
	case r.Err != nil:
		c.fail(ctx, metric.Reason(r.Err, reasonOffsetFetch), msg, r.Err, zap.String("group", g))
		return nil, false
	}
	return r.Fetched, true
}

// syncEmpty commits the translations of an empty source group's offsets
// into the idle target group g. It reports whether anything was committed.
func (c *Checkpointer) syncEmpty(ctx context.Context, g string, src, tgt kadm.OffsetResponses, starts map[string]map[int32]int64) bool {
	sw := c.sw
	sp := planSwitch(c.idx, c.sel, c.o.Flow.Source, src, tgt, c.o.InitLocalTopics, starts, c.marker)
	c.m.skippedOffsets(c.flow, SkipNotReplicated, len(sp.pending))
	if len(sp.pending) > 0 {
		o := sp.pending[0]
		pos, _ := c.idx.Position(TopicPartition{o.Topic, o.Partition})
		c.log.Debug("source group is empty; its offsets wait for replication", zap.String("group", g),
			zap.Int("partitions", len(sp.pending)), zap.String("topic", o.Topic), zap.Int32("partition", o.Partition),
			zap.Int64("offset", o.SourceOffset), zap.Int64("replicated_to", pos.Next))
	}
	// An offset the sync committed for an older commit of the group is
	// stale where the new commit waits for replication: remove it, so that
	// no consumer starts from it meanwhile.
	if stale := c.staleOurs(g, sp.pending, tgt); len(stale) > 0 && !c.deleteOurs(ctx, g, stale, "source group committed offsets replication has not reached yet; older offsets synced into the target group were removed until it has") {
		return false
	}
	c.m.skippedOffsets(c.flow, SkipNotTranslated, sp.untranslated)
	offsets, applied, skipped := plan(sp.wants, tgt, false)
	for _, s := range skipped {
		c.m.skippedOffsets(c.flow, s.Reason, 1)
	}
	// Done with this commit of the group when every partition is
	// translated and committed; partitions the offset map does not know yet
	// are tried again at the next round.
	finished := len(sp.pending) == 0 && sp.untranslated == 0
	if len(applied) > 0 {
		ok, becameActive, err := commitOffsets(ctx, c.o.TargetAdmin, g, offsets)
		switch {
		case becameActive:
			c.m.skippedOffsets(c.flow, SkipBecameActive, len(applied))
			c.log.Info("target group got members before its offsets were committed; the broker refused the commit",
				zap.String("group", g), zap.Int("offsets", len(applied)))
			return false
		case err != nil:
			finished = false
			c.fail(ctx, metric.Reason(err, reasonCommit), "commit offsets to target group; retried at the next round", err, zap.String("group", g))
		}
		done := keepCommitted(applied, ok)
		if len(done) < len(applied) {
			finished = false
		}
		ours := sw.oursFor(g)
		for _, a := range done {
			if !a.LocalInit {
				ours[TopicPartition{a.Topic, a.Partition}] = a.Offset
			}
		}
		if len(done) > 0 {
			c.m.syncedOffsets(c.flow, len(done))
			c.log.Info("source group is empty; its final offsets were translated and committed into the target group",
				zap.String("group", g), zap.Int("offsets", len(done)), zap.Int("waiting_for_replication", len(sp.pending)))
			if ce := c.log.Check(zap.DebugLevel, "offsets committed into the target group"); ce != nil {
				ce.Write(zap.String("group", g), zap.Stringer("offsets", appliedList(done)))
			}
		}
		if finished {
			c.markDone(g, src, sp.localMissing)
		}
		return len(done) > 0
	}
	if finished {
		c.markDone(g, src, sp.localMissing)
	}
	return false
}

// markDone records that the group's commit src is synced. A group with a
// local topic not there yet (its producers' topic on the target, created
// later) is looked at again every sync.group.offsets.interval.seconds, so
// that it is initialized soon after it appears; others once a minute.
func (c *Checkpointer) markDone(g string, src kadm.OffsetResponses, localMissing bool) {
	again := switchRecheck
	if localMissing {
		again = min(again, c.o.Flow.SyncGroupOffsetsInterval)
	}
	c.sw.mu.Lock()
	c.sw.done[g] = doneAt{fingerprint(c.sel, src), time.Now().Add(again)}
	c.sw.mu.Unlock()
}

// staleOurs returns the target partitions of pending on which the target
// group holds an offset the sync committed.
func (c *Checkpointer) staleOurs(g string, pending []GroupOffset, tgt kadm.OffsetResponses) kadm.TopicsSet {
	mine := removals(c.o.Policy, c.o.Flow.Source, c.sel, tgt, c.sw.oursOf(g), c.marker)
	out := make(kadm.TopicsSet)
	for _, o := range pending {
		if _, ok := mine[o.RemoteTopic][o.Partition]; ok {
			out.Add(o.RemoteTopic, o.Partition)
		}
	}
	return out
}

// removeOurs deletes the offsets the sync committed into the idle target
// group g, whose source group has members again. It reports whether the
// group is clean.
func (c *Checkpointer) removeOurs(ctx context.Context, g string, tgt kadm.OffsetResponses) bool {
	rm := removals(c.o.Policy, c.o.Flow.Source, c.sel, tgt, c.sw.oursOf(g), c.marker)
	return c.deleteOurs(ctx, g, rm, "source group has members again; offsets synced into the target group while it was empty were removed, so that no consumer starts from them")
}

// deleteOurs deletes the offsets rm of the target group g, logging why at
// info level. It reports whether they are gone.
func (c *Checkpointer) deleteOurs(ctx context.Context, g string, rm kadm.TopicsSet, why string) bool {
	n := 0
	for _, ps := range rm {
		n += len(ps)
	}
	if n == 0 {
		return true
	}
	resp, err := c.o.TargetAdmin.DeleteOffsets(ctx, g, rm)
	if err == nil {
		err = resp.Error()
	}
	switch {
	case errors.Is(err, kerr.GroupSubscribedToTopic) || errors.Is(err, kerr.NonEmptyGroup):
		// Consumers of the group run on the target: they own its offsets now.
		c.log.Debug("target group has members; stale synced offsets left to them", zap.String("group", g), zap.Error(err))
		return true
	case err != nil:
		c.fail(ctx, metric.Reason(err, reasonCommit), "remove stale synced offsets from target group; retried at the next round", err, zap.String("group", g))
		return false
	}
	ours := c.sw.oursOf(g)
	for t, ps := range rm {
		for p := range ps {
			delete(ours, TopicPartition{t, p})
		}
	}
	c.m.removedOffsets(c.flow, n)
	c.log.Info(why, zap.String("group", g), zap.Int("offsets", n))
	return true
}

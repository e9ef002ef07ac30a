package replicator

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/internal/offsetmap"
	"github.com/mm2go/mm2go/policy"
)

// What mm2go does with a source topic that was deleted and recreated.
//
// Progress (MM2's and mm2go's) is a position in one incarnation of a source
// topic. A recreated topic starts again at offset 0, so resuming at the
// stored position would skip the new topic's first records, or jump back
// and copy again what is already on the target (MM2 does either, silently:
// it keeps the stored offset and its consumer resets when out of range).
// mm2go instead:
//
//   - detects it: the topic ID (kadm.TopicDetail.ID) differs from the one
//     copied, which mm2go remembers while it runs and stores in a header of
//     its offset map positions (offsetmap.TopicIDHeader) so that a restart knows it
//     too; without a stored ID (progress written by Apache MM2, or a broker
//     without topic IDs) a stored position beyond the partition's end
//     offset shows that the source went backwards (recreated, or truncated
//     by an unclean leader election);
//   - if the remote topic is empty (nothing was ever written to it, for
//     instance because the operator deleted it and mm2go created it anew),
//     forgets the stored progress and offset map of the topic and copies
//     the new incarnation from its start (as auto.offset.reset says): there
//     is nothing on the target it could duplicate or contradict;
//   - otherwise stops copying the topic and keeps it blocked: logged at
//     error level once, counted in mm2go_replicator_errors_total with reason
//     source_recreated, its partitions shown by
//     mm2go_replicator_partitions_blocked. The operator decides: deleting
//     the remote topic on the target makes mm2go start over as above (the
//     old incarnation's copy is lost with it, and consumer groups on the
//     target must be reset); keeping the remote topic keeps it blocked.
//
// Records of the old incarnation that were not copied before the deletion
// are lost with it; records removed by retention before they were copied
// are counted by checkContinuity (mm2go_replicator_source_records_lost_total).

// incarnations tracks which incarnation of each source topic the flow
// copies, and the topics blocked because the source was recreated.
type incarnations struct {
	mu  sync.Mutex
	ids map[string]kadm.TopicID // source topic -> incarnation copied (read by the flush)

	// Refresh goroutine only: source topic -> the incarnation not copied.
	blocked map[string]kadm.TopicID
}

func newIncarnations() *incarnations {
	return &incarnations{ids: make(map[string]kadm.TopicID), blocked: make(map[string]kadm.TopicID)}
}

func (in *incarnations) id(topic string) (kadm.TopicID, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	id, ok := in.ids[topic]
	return id, ok
}

func (in *incarnations) set(topic string, id kadm.TopicID) {
	if id == (kadm.TopicID{}) {
		return
	}
	in.mu.Lock()
	in.ids[topic] = id
	in.mu.Unlock()
}

func (in *incarnations) forget(topic string) {
	in.mu.Lock()
	delete(in.ids, topic)
	in.mu.Unlock()
}

// load takes the incarnations recorded in the offset map positions.
func (in *incarnations) load(maps map[tp]mapState) {
	for k, ms := range maps {
		if ms.pos != nil && ms.id != (kadm.TopicID{}) {
			in.set(k.topic, ms.id)
		}
	}
}

// stopTopics stops copying the named source topics: their partitions are
// marked removed and dropped from the consumer, and what they acknowledged
// is kept in r.stored and r.maps, so that copying resumes there if the same
// incarnation comes back. It returns the partitions removed. Refresh
// goroutine only.
func (r *Replicator) stopTopics(topics []string) []*partition {
	var removed []*partition
	var purge []string
	r.mu.Lock()
	for _, t := range topics {
		ps, ok := r.parts[t]
		if !ok {
			continue
		}
		purge = append(purge, t)
		delete(r.parts, t)
		if r.stored[t] == nil {
			r.stored[t] = make(map[int32]int64)
		}
		for i, p := range ps {
			p.removed.Store(true)
			removed = append(removed, p)
			if p.inflight.Load() > 0 {
				if r.unsettled == nil {
					r.unsettled = make(map[tp]*partition)
				}
				r.unsettled[tp{t, i}] = p
			}
			r.stored[t][i] = p.acked.Load()
			p.mu.Lock()
			if p.segOpen {
				last := p.seg
				r.maps[tp{t, i}] = mapState{last: &last}
			}
			p.mu.Unlock()
		}
	}
	r.mu.Unlock()
	// Purging (not only removing the partitions) also drops the client's
	// memory of the topic ID, so that a recreated topic can be consumed
	// when it is added again.
	r.src.PurgeTopicsFromConsuming(purge...)
	// Their gauges would keep their last values (and the lag alerts
	// firing) for as long as the process runs.
	for _, t := range purge {
		var parts []int32
		for _, p := range removed {
			if p.topic == t {
				parts = append(parts, p.partition)
			}
		}
		r.m.forgetTopic(r.flow, r.task, t, parts)
	}
	for _, p := range removed {
		r.mm2.Forget(p.remote, p.partition)
	}
	return removed
}

// checkIncarnations compares the topic IDs of the listed source topics with
// the incarnations copied, and handles each recreated topic (see
// onRecreated). Blocked topics are looked at again: their remote topic may
// be empty now. fresh names the remote topics created in this refresh.
func (r *Replicator) checkIncarnations(ctx context.Context, want map[string]kadm.TopicDetail, remoteOf map[string]string, fresh map[string]bool) {
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		d := want[name]
		if d.ID == (kadm.TopicID{}) {
			continue
		}
		if blockedID, ok := r.inc.blocked[name]; ok {
			if blockedID != d.ID {
				r.inc.blocked[name] = d.ID // recreated once more; still not the copied one
			}
			r.onRecreated(ctx, name, remoteOf[name], d, fresh, "")
			continue
		}
		if known, ok := r.inc.id(name); ok && known != d.ID {
			r.onRecreated(ctx, name, remoteOf[name], d, fresh,
				"the source topic has a new topic ID: it was deleted and recreated")
		}
	}
}

// checkAnchors drops from news the partitions of topics whose stored
// position lies beyond the source partition's end offset: the source went
// backwards (recreated, or truncated), so the position does not belong to
// what the partition holds now. It handles such topics with onRecreated and
// returns the partitions that may be planned.
func (r *Replicator) checkAnchors(ctx context.Context, news []newPart, want map[string]kadm.TopicDetail, fresh map[string]bool, src *sourceOffsets) []newPart {
	anchors := make(map[tp]int64)
	for _, np := range news {
		k := tp{np.topic, np.partition}
		next := int64(-1)
		if ms := r.maps[k]; ms.last != nil {
			next = ms.last.Last + 1
		} else if ms.pos != nil {
			next = ms.pos.Next
		}
		if s, ok := r.stored[np.topic][np.partition]; ok {
			next = max(next, s+1)
		}
		if next <= 0 {
			continue
		}
		anchors[k] = next
	}
	if len(anchors) == 0 {
		return news
	}
	// The high watermark, whatever the isolation level: Apache MM2 reads
	// uncommitted records and may have stored a position past the last
	// stable offset; only one past the high watermark is impossible.
	if err := src.wait(ctx); err != nil {
		return news // plan reports the failure
	}
	ends := src.high
	bad := make(map[string]bool)
	remoteOf := make(map[string]string)
	var badTopics []string
	for _, np := range news {
		k := tp{np.topic, np.partition}
		next, ok := anchors[k]
		if !ok || bad[np.topic] {
			continue
		}
		if o, ok := ends.Lookup(np.topic, np.partition); ok && o.Err == nil && next > o.Offset {
			bad[np.topic] = true
			badTopics = append(badTopics, np.topic)
			remoteOf[np.topic] = np.remote
			r.log.Warn("source partition ends before the position mm2go copied up to",
				zap.String("topic", np.topic), zap.Int32("partition", np.partition),
				zap.Int64("offset", next), zap.Int64("end_offset", o.Offset))
		}
	}
	if len(badTopics) == 0 {
		return news
	}
	restart := make(map[string]bool)
	for _, t := range badTopics {
		restart[t] = r.onRecreated(ctx, t, remoteOf[t], want[t], fresh,
			"a source partition ends before the position mm2go copied up to: the topic was recreated or truncated")
	}
	out := news[:0]
	for _, np := range news {
		if !bad[np.topic] || restart[np.topic] {
			out = append(out, np)
		}
	}
	return out
}

// onRecreated handles a source topic whose partitions no longer hold what
// mm2go copied from them (see the comment at the top of this file). why is
// the detection, or "" for a topic blocked before. It reports whether the
// topic may be copied again, from the new incarnation's start.
func (r *Replicator) onRecreated(ctx context.Context, topic, remote string, d kadm.TopicDetail, fresh map[string]bool, why string) bool {
	for _, p := range r.stopTopics([]string{topic}) {
		p.epoch.Add(1) // late acknowledgements belong to the old incarnation
	}
	empty := fresh[remote]
	if !empty {
		empty = r.remoteEmpty(ctx, topic, remote)
	}
	if empty {
		err := r.forgetTopic(ctx, topic, remote)
		if err == nil {
			_, wasBlocked := r.inc.blocked[topic]
			delete(r.inc.blocked, topic)
			r.inc.set(topic, d.ID)
			if !wasBlocked {
				r.m.error(r.flow, reasonSourceRecreated)
			}
			r.log.Warn("source topic recreated and its remote topic is empty: stored progress forgotten, copying the new topic from its start",
				zap.String("topic", topic), zap.String("target_topic", remote), zap.String("topic_id", d.ID.String()))
			return true
		}
		r.m.error(r.flow, reasonSourceRecreated)
		r.log.Warn("forget the progress of a recreated source topic; retried at the next refresh",
			zap.String("topic", topic), zap.String("target_topic", remote), zap.Error(err))
	}
	if why == "" {
		return false // blocked before and logged then
	}
	if blockedID, ok := r.inc.blocked[topic]; ok && blockedID == d.ID {
		return false
	}
	r.inc.blocked[topic] = d.ID
	r.m.error(r.flow, reasonSourceRecreated)
	r.log.Error("source topic recreated after mm2go copied from it; copying of the topic stopped so that nothing is copied from a wrong offset. "+
		"To copy the new topic from its start, delete the remote topic on the target cluster: mm2go creates it again and starts over. "+
		"Keep the remote topic and the topic stays blocked",
		zap.String("topic", topic), zap.String("target_topic", remote), zap.String("target_cluster", r.o.Flow.Target),
		zap.String("topic_id", d.ID.String()), zap.String("detail", why))
	return false
}

// remoteEmpty reports whether every partition of the remote topic this task
// copies to has end offset 0: nothing was ever written to it. (Another task
// may have started copying the new incarnation into its partitions.)
func (r *Replicator) remoteEmpty(ctx context.Context, topic, remote string) bool {
	ends, err := r.o.TargetAdmin.ListEndOffsets(ctx, remote)
	if err != nil {
		return false
	}
	n := 0
	empty := true
	ends.Each(func(o kadm.ListedOffset) {
		if !r.owns(topic, o.Partition) {
			return
		}
		n++
		if o.Err != nil || o.Offset != 0 {
			empty = false
		}
	})
	return empty && n > 0
}

// forgetTopic deletes what the flow stored about a source topic: its
// progress in the Connect offsets topic and its segments and positions in
// the offset map (tombstones), and the clients' memory of the topic and its
// remote topic, so that copying starts as for a topic never copied.
func (r *Replicator) forgetTopic(ctx context.Context, topic, remote string) error {
	parts := make(map[int32]bool)
	for p := range r.stored[topic] {
		if r.owns(topic, p) {
			parts[p] = true
		}
	}
	// A flush under way may still write the stopped partitions' state; it
	// must be done before the map is read and the tombstones follow.
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	var tombs []*kgo.Record
	st, _, err := offsetmap.Load(ctx, r.o.TargetReader, r.mapTopic)
	if err != nil {
		return err
	}
	for k, p := range st {
		if k.Topic == topic && r.owns(topic, k.Partition) {
			parts[k.Partition] = true
			tombs = append(tombs, p.Tombstones(r.mapTopic)...)
		}
	}
	for p := range parts {
		key := policy.SourceOffsetKey{Cluster: r.o.Flow.Source, Topic: topic, Partition: p}.Encode()
		tombs = append(tombs, &kgo.Record{Topic: r.pg.topic, Partition: policy.ConnectOffsetPartition(key, r.pg.partitions), Key: key})
	}
	if len(tombs) > 0 {
		if err := r.o.Target.ProduceSync(ctx, tombs...).FirstErr(); err != nil {
			return fmt.Errorf("write tombstones for %s: %w", topic, err)
		}
	}
	for p := range parts {
		delete(r.stored[topic], p)
	}
	for k := range r.maps {
		if k.topic == topic && parts[k.partition] {
			delete(r.maps, k)
		}
	}
	r.inc.forget(topic)
	r.src.PurgeTopicsFromConsuming(topic)
	r.o.SourceReader.PurgeTopicsFromClient(topic)
	r.o.Target.PurgeTopicsFromProducing(remote)
	r.o.TargetReader.PurgeTopicsFromConsuming(remote)
	return nil
}

// updateBlocked sets the blocked-partitions gauge from the topics listed.
func (r *Replicator) updateBlocked(want map[string]kadm.TopicDetail) {
	n := 0
	for t := range r.inc.blocked {
		n += r.ownedOf(t, want[t])
	}
	r.m.setBlocked(r.flow, r.task, n)
}

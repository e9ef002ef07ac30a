package replicator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/internal/loop"
	"github.com/mm2go/mm2go/policy"
)

// refreshLoop rediscovers topics every refresh.topics.interval.seconds
// (with refresh.topics.enabled), and sooner while partitions found by the
// last discovery wait for their remote partition: every deferRetry until
// none does, whatever the refresh settings.
func (r *Replicator) refreshLoop(ctx context.Context) error {
	f := r.o.Flow
	periodic := f.RefreshTopicsEnabled && f.RefreshTopicsInterval > 0
	for {
		wait, run := nextRefresh(periodic, f.RefreshTopicsInterval, r.deferred)
		if !loop.Sleep(ctx, wait) {
			return ctx.Err()
		}
		if !run {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, f.AdminTimeout)
		err := r.refresh(rctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			r.m.error(r.flow, reasonDiscovery)
			r.log.Warn("discover topics; retried at the next interval", zap.Error(err))
		}
		r.discoveries.Add(1)
	}
}

// nextRefresh returns how long to wait for the next discovery and whether
// to run it then: every interval when discovery is periodic, every
// deferRetry while partitions wait (deferred), and otherwise never (a long
// wait, then look again).
func nextRefresh(periodic bool, interval time.Duration, deferred int) (time.Duration, bool) {
	switch {
	case deferred > 0:
		return deferRetry, true
	case periodic:
		return interval, true
	default:
		return time.Hour, false
	}
}

// deferRetry is how soon discovery runs again when it left partitions for
// later because the target was not ready for them (a remote topic just
// created or grown, whose partitions the producer does not know yet).
const deferRetry = time.Second

// refresh lists the source topics the flow selects, creates or grows their
// remote topics, and starts copying partitions not copied yet. Failures of
// single topics are logged and counted and the topic is tried again at the
// next refresh; only a failure to list topics at all is returned.
func (r *Replicator) refresh(ctx context.Context) error {
	r.readers.Lock()
	defer r.readers.Unlock()
	srcTopics, err := listTopicsAgain(ctx, r.o.SourceAdmin, r.copiedTopicNames())
	if err != nil {
		return fmt.Errorf("list topics on %s: %w", r.o.Flow.Source, err)
	}
	want := make(map[string]kadm.TopicDetail)
	for name, d := range srcTopics {
		if d.IsInternal || d.Err != nil || !r.sel.ShouldReplicate(name) || r.ownedOf(name, d) == 0 {
			continue
		}
		want[name] = d
	}
	r.dropVanished(srcTopics, want)
	defer r.updateBlocked(want)
	if len(want) == 0 {
		return nil
	}

	src := r.listSourceOffsets(ctx, r.uncopied(want))
	defer src.settled() // no listing outlives the refresh

	remotes := make([]string, 0, len(want))
	remoteOf := make(map[string]string, len(want))
	for name := range want {
		rt := r.o.Policy.FormatRemoteTopic(r.o.Flow.Source, name)
		remoteOf[name] = rt
		remotes = append(remotes, rt)
	}
	dstTopics, err := r.o.TargetAdmin.ListTopics(ctx, remotes...)
	if err != nil {
		return fmt.Errorf("list topics on %s: %w", r.o.Flow.Target, err)
	}

	var create []string
	for name := range want {
		if d, ok := dstTopics[remoteOf[name]]; !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			create = append(create, name)
		}
	}
	sort.Strings(create)
	created, fresh := r.createRemoteTopics(ctx, create, want, remoteOf)
	r.checkIncarnations(ctx, want, remoteOf, fresh)

	var news []newPart
	r.deferred = 0
	maps.DeleteFunc(r.unsettled, func(_ tp, p *partition) bool { return p.inflight.Load() == 0 })
	for name, d := range want {
		if _, blocked := r.inc.blocked[name]; blocked {
			continue // source recreated; see recreate.go
		}
		rt := remoteOf[name]
		remoteParts := 0
		if dd, ok := dstTopics[rt]; ok && dd.Err == nil {
			remoteParts = len(dd.Partitions)
		}
		if created[name] {
			remoteParts = len(d.Partitions)
		}
		if remoteParts == 0 {
			if dd, ok := dstTopics[rt]; ok && settling(dd.Err) {
				// Just created (here or by another task): the metadata
				// does not show its partitions yet.
				r.deferred += r.ownedOf(name, d)
				r.log.Debug("remote topic not ready; its partitions are tried again shortly",
					zap.String("target_topic", rt), zap.NamedError("listed", dd.Err))
			}
			continue
		}
		if remoteParts < len(d.Partitions) {
			if r.growRemote(ctx, rt, len(d.Partitions)) {
				remoteParts = len(d.Partitions)
			}
		}
		for _, pd := range d.Partitions.Sorted() {
			if !r.owns(name, pd.Partition) {
				continue // another task's
			}
			if int(pd.Partition) >= remoteParts {
				continue // the remote topic cannot hold it yet; retried next refresh
			}
			if r.lookup(name, pd.Partition) == nil {
				if r.inFlightBefore(name, pd.Partition) {
					r.deferred++
					continue
				}
				if !r.producerKnows(rt, pd.Partition) {
					// The producer knows the remote topic with fewer
					// partitions (or it was just created and not every
					// leader is known) and would fail the records at
					// once: retried in deferRetry.
					r.o.Target.ForceMetadataRefresh()
					r.deferred++
					r.log.Debug("remote partition not known to the producer yet; tried again shortly",
						zap.String("target_topic", rt), zap.Int32("partition", pd.Partition))
					continue
				}
				news = append(news, newPart{topic: name, remote: rt, partition: pd.Partition})
			}
		}
	}
	if !src.covers(news) {
		// A topic whose partitions were copied when the listing started
		// (then found recreated, say) is listed now.
		src = r.listSourceOffsets(ctx, topicsOf(news))
		defer src.settled()
	}
	news = r.checkAnchors(ctx, news, want, fresh, src)
	var marked map[tp]bool
	if r.fw != nil && len(news) > 0 {
		var err error
		if marked, err = r.fw.fenceBeforePlan(ctx, news); err != nil {
			return err
		}
	}
	plans, err := r.plan(ctx, news, fresh, marked, src)
	if err != nil {
		return err
	}
	add := make(map[string]map[int32]kgo.Offset)
	r.mu.Lock()
	for _, np := range news {
		pl, ok := plans[tp{np.topic, np.partition}]
		if !ok {
			continue
		}
		p := newPartition(np.topic, np.remote, np.partition, pl.start, r.o.Flow.OffsetLagMax, r.m.partitionMetrics(r.flow, np.topic))
		p.mm2 = r.mm2.Partition(np.topic, np.remote, np.partition, &p.inflight)
		for _, pair := range pl.tail {
			p.observe(pair[0], pair[1], false)
			p.acked.Store(pair[0])
		}
		p.next, p.lastData = pl.from, pl.from-1
		p.end.Store(pl.end) // -1, as newPartition leaves it, where plan listed none
		if r.parts[np.topic] == nil {
			r.parts[np.topic] = make(map[int32]*partition)
		}
		r.parts[np.topic][np.partition] = p
		if add[np.topic] == nil {
			add[np.topic] = make(map[int32]kgo.Offset)
		}
		add[np.topic][np.partition] = kgo.NewOffset().At(pl.from)
	}
	r.mu.Unlock()
	for t := range add {
		if _, known := r.inc.id(t); !known {
			r.inc.set(t, want[t].ID) // the incarnation copied from now on
		}
	}
	if len(add) > 0 {
		r.src.AddConsumePartitions(add)
		if r.fw != nil {
			listed := make(map[string]kadm.TopicDetail, len(add))
			for t := range add {
				listed[t] = want[t]
			}
			r.fw.learnSource(listed)
		} else {
			// The consumer would learn of partitions added to a topic it
			// already reads only at its next metadata refresh
			// (metadata.max.age.ms, 5 min by default).
			r.src.ForceMetadataRefresh()
		}
	}
	return nil
}

// listTopicsAgain lists every topic of a cluster, and asks again by name for
// those of copied that the listing left out. kgo answers a listing of every
// topic from its metadata cache (for metadata.max.age's minimum, 5 s by
// default), and a request failing for a partition with
// NOT_LEADER_FOR_PARTITION (a ListOffsets of the lag loop right after a
// leader moved, say) takes that partition's topic out of the cache: the next
// cached listing lacks the topic although it exists. Asked for by name, a
// topic missing from the cache is fetched from a broker; one that is really
// gone comes back with UNKNOWN_TOPIC_OR_PARTITION (or not at all).
func listTopicsAgain(ctx context.Context, adm *kadm.Client, copied []string) (kadm.TopicDetails, error) {
	listed, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, t := range copied {
		if _, ok := listed[t]; !ok {
			missing = append(missing, t)
		}
	}
	if len(missing) == 0 {
		return listed, nil
	}
	again, err := adm.ListTopics(ctx, missing...)
	if err != nil {
		return nil, err
	}
	for t, d := range again {
		listed[t] = d
	}
	return listed, nil
}

// inFlightBefore reports whether records of the partition's copy stopped
// earlier in this run (its topic taken for gone, say, and now found again)
// were in flight to the target at the last refresh. The partition is planned once they
// are settled: landing after its target tail was read, they would be
// copied again.
func (r *Replicator) inFlightBefore(topic string, partition int32) bool {
	p := r.unsettled[tp{topic, partition}]
	if p == nil {
		return false
	}
	r.log.Debug("records of the partition's stopped copy still in flight; planned once they are settled",
		zap.String("topic", topic), zap.Int32("partition", partition))
	return true
}

// ownedOf returns how many partitions of a source topic this task copies.
func (r *Replicator) ownedOf(topic string, d kadm.TopicDetail) int {
	n := 0
	for p := range d.Partitions {
		if r.owns(topic, p) {
			n++
		}
	}
	return n
}

// settling reports whether a remote topic listed with err is one whose
// creation the cluster has not finished propagating: no error (but no
// partitions), no leader yet, or not known yet by the broker asked.
func settling(err error) bool {
	return err == nil || errors.Is(err, kerr.LeaderNotAvailable) || errors.Is(err, kerr.UnknownTopicOrPartition)
}

// dropVanished stops copying topics that no longer exist on the source (or
// are no longer selected). Their remote topics are left alone, as MM2 does.
// A topic listed with an error (leader election, say) is kept.
func (r *Replicator) dropVanished(listed kadm.TopicDetails, want map[string]kadm.TopicDetail) {
	var gone []string
	r.mu.Lock()
	for t := range r.parts {
		if _, ok := want[t]; ok {
			continue
		}
		if d, ok := listed[t]; ok && d.Err != nil && !errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			continue
		}
		gone = append(gone, t)
	}
	r.mu.Unlock()
	if len(gone) == 0 {
		return
	}
	sort.Strings(gone)
	// Keep the stored offsets: if the topic comes back (filter change)
	// copying resumes where it stopped. A recreated topic is recognised by
	// its new topic ID (recreate.go).
	r.stopTopics(gone)
	for _, t := range gone {
		r.m.error(r.flow, reasonTopicDeleted)
		r.log.Warn("source topic gone or no longer selected; copying stopped", zap.String("topic", t))
	}
}

// topicsOf returns the source topics of parts, each once, sorted.
func topicsOf(parts []newPart) []string {
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		out = append(out, p.topic)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// uncopied returns the topics of want with a partition this task owns and
// does not copy yet, sorted.
func (r *Replicator) uncopied(want map[string]kadm.TopicDetail) []string {
	var out []string
	for name, d := range want {
		if _, blocked := r.inc.blocked[name]; blocked {
			continue
		}
		for _, pd := range d.Partitions {
			if r.owns(name, pd.Partition) && r.lookup(name, pd.Partition) == nil {
				out = append(out, name)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

// createRemoteTopics creates the remote topics of the named source topics
// with the source's partition count, the flow's replication factor and the
// source's non-default configs that the flow does not exclude (MM2's
// creation mode). It returns which source topics have a remote topic now,
// and the remote topics it created (empty ones).
//
// Topics with the same partition count and configs go in one CreateTopics
// request: the controller answers each request after creating its topics,
// so one request per topic made a flow's first start wait for the
// controller once per topic (100 new topics on 3-node clusters: 3.7-5.4 s).
func (r *Replicator) createRemoteTopics(ctx context.Context, topics []string, details map[string]kadm.TopicDetail, remoteOf map[string]string) (exists, fresh map[string]bool) {
	created := make(map[string]bool, len(topics))
	fresh = make(map[string]bool, len(topics))
	if len(topics) == 0 {
		return created, fresh
	}
	configs := r.sourceConfigs(ctx, topics)
	for _, g := range creationGroups(topics, details, configs) {
		remotes := make([]string, len(g.topics))
		for i, t := range g.topics {
			remotes[i] = remoteOf[t]
		}
		resps, err := r.o.TargetAdmin.CreateTopics(ctx, g.partitions, r.o.Flow.ReplicationFactor, configs[g.topics[0]], remotes...)
		for i, t := range g.topics {
			rt := remotes[i]
			resp, answered := resps[rt]
			topicErr := err
			switch {
			case err != nil:
			case !answered:
				topicErr = fmt.Errorf("no answer for %s", rt)
			default:
				topicErr = resp.Err
			}
			switch {
			case topicErr == nil:
				created[t] = true
				fresh[rt] = true
				r.m.topicCreated(r.flow)
				r.log.Info("remote topic created", zap.String("topic", t), zap.String("target_topic", rt),
					zap.Int32("partitions", resp.NumPartitions), zap.Int16("replication_factor", resp.ReplicationFactor))
			case errors.Is(topicErr, kerr.TopicAlreadyExists):
				created[t] = true
			default:
				r.m.error(r.flow, reasonTopicCreate)
				r.log.Warn("create remote topic; retried at the next refresh", zap.String("topic", t), zap.String("target_topic", rt), zap.Error(topicErr))
			}
		}
	}
	return created, fresh
}

// creationGroup is source topics whose remote topics are created alike: the
// same partition count and configs.
type creationGroup struct {
	partitions int32
	topics     []string // sorted
}

// creationGroups groups topics (sorted) by partition count and configs, in
// the order of each group's first topic.
func creationGroups(topics []string, details map[string]kadm.TopicDetail, configs map[string]map[string]*string) []creationGroup {
	var groups []creationGroup
	index := map[string]int{}
	for _, t := range topics {
		n := int32(len(details[t].Partitions))
		keys := slices.Sorted(maps.Keys(configs[t]))
		k := fmt.Sprint(n)
		for _, key := range keys {
			k += "\x00" + key + "=" + *configs[t][key]
		}
		i, ok := index[k]
		if !ok {
			i = len(groups)
			index[k] = i
			groups = append(groups, creationGroup{partitions: n})
		}
		groups[i].topics = append(groups[i].topics, t)
	}
	return groups
}

// sourceConfigs returns, per topic, the configs MM2 copies when it creates a
// remote topic: set on the topic (not defaults, unless use.defaults.from is
// source), not static broker values, not sensitive, not excluded.
func (r *Replicator) sourceConfigs(ctx context.Context, topics []string) map[string]map[string]*string {
	out := make(map[string]map[string]*string, len(topics))
	filter, err := policy.NewFilter([]string{".*"}, r.o.Flow.ConfigPropertiesExclude)
	if err != nil {
		r.log.Warn("compile config.properties.exclude; remote topics created without source configs", zap.Error(err))
		return out
	}
	rcs, err := r.o.SourceAdmin.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		r.log.Warn("describe source topic configs; remote topics created without them", zap.Error(err))
		return out
	}
	useSourceDefaults := r.o.Flow.UseDefaultsFrom == config.DefaultsFromSource
	for _, rc := range rcs {
		if rc.Err != nil {
			continue
		}
		m := make(map[string]*string)
		for _, c := range rc.Configs {
			if c.Sensitive || c.Value == nil || c.Source == kmsg.ConfigSourceStaticBrokerConfig || !filter.Match(c.Key) {
				continue
			}
			if c.Source == kmsg.ConfigSourceDefaultConfig && !useSourceDefaults {
				continue
			}
			m[c.Key] = c.Value
		}
		out[rc.Name] = m
	}
	return out
}

// growRemote adds partitions to a remote topic that has fewer than its
// source. It reports whether the remote topic has n partitions now.
func (r *Replicator) growRemote(ctx context.Context, remote string, n int) bool {
	resp, err := r.o.TargetAdmin.UpdatePartitions(ctx, n, remote)
	if err == nil {
		err = resp.Error()
	}
	if err != nil && !errors.Is(err, kerr.InvalidPartitions) {
		r.m.error(r.flow, reasonPartitions)
		r.log.Warn("grow remote topic; retried at the next refresh", zap.String("target_topic", remote), zap.Int("partitions", n), zap.Error(err))
		return false
	}
	if err != nil {
		return false
	}
	r.log.Info("remote topic grown", zap.String("target_topic", remote), zap.Int("partitions", n))
	// The producer learns of new partitions only at its next metadata
	// refresh (metadata.max.age.ms, 5 min by default) and refuses records
	// for them until then. The broker may answer a refresh right after the
	// change with the old partitions, so it is repeated until they show.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		r.o.Target.ForceMetadataRefresh()
		if !loop.Sleep(wctx, 250*time.Millisecond) {
			return false // a later refresh adds the partitions
		}
		if r.producerKnows(remote, int32(n-1)) {
			return true
		}
	}
}

// producerKnows reports whether the target producer can write to partition
// p of a remote topic: its metadata has the partition, or it has not loaded
// the topic yet (it then loads it when the first record comes).
func (r *Replicator) producerKnows(remote string, p int32) bool {
	if leader, _, _ := r.o.Target.PartitionLeader(remote, p); leader >= 0 {
		return true
	}
	leader, _, _ := r.o.Target.PartitionLeader(remote, 0)
	return leader < 0
}

package checkpoint

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/internal/metric"
	"github.com/mm2go/mm2go/policy"
)

// RemoteTopic returns the name under which a checkpoint of flow
// source->target names topic, a topic of the source cluster (MM2's
// renameTopicPartition): a topic that came from target returns
// to its original name ("target2.topic3" -> "topic3"), any other is the
// remote topic the policy gives it ("topic3" -> "source1.topic3" under the
// default policy, unchanged under the identity policy).
func RemoteTopic(p policy.Policy, source, target, topic string) string {
	if src, ok := p.TopicSource(topic); ok && src == target {
		return p.OriginalTopic(topic)
	}
	return p.FormatRemoteTopic(source, topic)
}

// emit writes the checkpoints of every selected group whose translation
// moved (see shouldEmit), then updates the age gauges.
func (c *Checkpointer) emit(ctx context.Context) {
	groups := c.currentGroups()
	if groups == nil {
		// The groups could not be selected yet; try now rather than wait
		// for the next refresh.
		c.refreshGroups(ctx)
		groups = c.currentGroups()
	}
	if len(groups) > 0 {
		actx, cancel := context.WithTimeout(ctx, c.o.Flow.AdminTimeout)
		ts := time.Now()
		fetched := c.o.SourceAdmin.FetchManyOffsets(actx, groups...)
		cps := c.checkpoints(ctx, groups, fetched)
		if c.write(actx, ts, c.st.filter(cps)) {
			c.m.emitted(c.flow)
		}
		cancel()
	} else {
		c.m.emitted(c.flow)
	}
	now := time.Now()
	for _, g := range groups {
		if t, ok := c.st.newestOf(g); ok {
			c.m.setAge(c.flow, g, now.Sub(t))
		}
	}
}

// checkpoints translates the committed offsets of groups on replicated
// topics, sorted by group, topic and partition. Partitions the index knows
// nothing about get no checkpoint.
func (c *Checkpointer) checkpoints(ctx context.Context, groups []string, fetched kadm.FetchOffsetsResponses) []policy.Checkpoint {
	f := c.o.Flow
	var cps []policy.Checkpoint
	for _, g := range groups {
		r, ok := fetched[g]
		switch {
		case !ok:
			c.fail(ctx, reasonOffsetFetch, "fetch committed offsets of group; retried at the next interval",
				errGroupMissing, zap.String("group", g))
			continue
		case errors.Is(r.Err, kerr.GroupIDNotFound):
			continue
		case r.Err != nil:
			c.fail(ctx, metric.Reason(r.Err, reasonOffsetFetch), "fetch committed offsets of group; retried at the next interval",
				r.Err, zap.String("group", g))
			continue
		}
		for _, o := range r.Fetched.Sorted() {
			if o.Err != nil || o.At < 0 || !c.sel.ShouldReplicate(o.Topic) {
				continue
			}
			tr, ok := c.idx.Translate(TopicPartition{o.Topic, o.Partition}, o.At)
			if !ok {
				continue
			}
			c.m.translated(c.flow, tr.Mode)
			cps = append(cps, policy.Checkpoint{
				Group:            g,
				Topic:            RemoteTopic(c.o.Policy, f.Source, f.Target, o.Topic),
				Partition:        o.Partition,
				UpstreamOffset:   o.At,
				DownstreamOffset: tr.Downstream,
				Metadata:         o.Metadata,
			})
		}
	}
	return cps
}

// write produces checkpoints to partition 0 of the checkpoints topic with
// record timestamp ts, waits for the target's acknowledgements and records
// the acknowledged ones as the last checkpoints. It reports whether every
// checkpoint was written.
func (c *Checkpointer) write(ctx context.Context, ts time.Time, cps []policy.Checkpoint) bool {
	if len(cps) == 0 {
		return true
	}
	recs := make([]*kgo.Record, 0, len(cps))
	sent := make([]policy.Checkpoint, 0, len(cps))
	for _, cp := range cps {
		key, err := cp.Key()
		var value []byte
		if err == nil {
			value, err = cp.Value()
		}
		if err != nil {
			c.fail(ctx, reasonEncode, "encode checkpoint; skipped", err, zap.String("group", cp.Group), zap.String("topic", cp.Topic))
			continue
		}
		recs = append(recs, &kgo.Record{Topic: c.cpTopic, Partition: 0, Key: key, Value: value, Timestamp: ts})
		sent = append(sent, cp)
	}
	if len(recs) == 0 {
		return false
	}
	results := c.o.Target.ProduceSync(ctx, recs...)
	var acked []policy.Checkpoint
	var errs []error
	for i, r := range results {
		if r.Err != nil {
			errs = append(errs, r.Err)
			continue
		}
		acked = append(acked, sent[i])
	}
	now := time.Now()
	c.st.put(now, acked...)
	c.m.written(c.flow, len(acked))
	latency := float64(now.Sub(ts).Microseconds()) / 1000
	for _, cp := range acked {
		c.o.MM2.Checkpoint(c.o.Flow.Source, c.o.Flow.Target, cp.Group, cp.Topic, cp.Partition, latency)
	}
	if err := errors.Join(errs...); err != nil {
		c.fail(ctx, metric.Reason(err, reasonProduce), "write checkpoints; retried at the next interval", err,
			zap.String("topic", c.cpTopic), zap.Int("failed", len(errs)), zap.Int("written", len(acked)))
	}
	if len(acked) > 0 {
		c.log.Debug("checkpoints written", zap.String("topic", c.cpTopic), zap.Int("checkpoints", len(acked)))
	}
	return len(errs) == 0
}

// errGroupMissing reports a group absent from a batched response.
var errGroupMissing = errors.New("group missing from the response")

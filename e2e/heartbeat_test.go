package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/policy"
)

// heartbeatsOf returns the heartbeats keyed (source, target) in topic on the
// cluster at seeds, in offset order. The topic is shared with every other
// test and with Apache MM2 runs, so records of other aliases are skipped.
func heartbeatsOf(t *testing.T, seeds []string, topic, source, target string) ([]policy.Heartbeat, []*kgo.Record) {
	t.Helper()
	var hbs []policy.Heartbeat
	var recs []*kgo.Record
	for _, rs := range readAll(t, seeds, topic) {
		for _, r := range rs {
			hb, err := policy.DecodeHeartbeat(r.Key, r.Value)
			require.NoError(t, err, "record at %s[%d]@%d", topic, r.Partition, r.Offset)
			if hb.SourceAlias == source && hb.TargetAlias == target {
				hbs = append(hbs, hb)
				recs = append(recs, r)
			}
		}
	}
	return hbs, recs
}

// topicShape returns the partition count and cleanup.policy of topic.
func topicShape(t *testing.T, adm *kadm.Client, topic string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	td, err := adm.ListTopics(ctx, topic)
	require.NoError(t, err)
	require.NoError(t, td[topic].Err, "topic %s", topic)
	cfgs, err := adm.DescribeTopicConfigs(ctx, topic)
	require.NoError(t, err)
	rc, err := cfgs.On(topic, nil)
	require.NoError(t, err)
	var cleanup string
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" {
			cleanup = c.MaybeValue()
		}
	}
	return len(td[topic].Partitions), cleanup
}

// TestIntegrationHeartbeats checks MM2's monitoring loop on real Kafka with
// the default emit.heartbeats.enabled=true: the enabled flow src->dst writes
// heartbeats keyed (src,dst) into "heartbeats" on dst; the disabled flow
// dst->src still writes (dst,src) into "heartbeats" on src, which src->dst
// replicates to "<src>.heartbeats" on dst. `mm2go topology` then sees src
// one hop upstream of dst.
func TestIntegrationHeartbeats(t *testing.T) {
	beside(t)
	e := newEnv(t)
	cfg := e.config("emit.heartbeats.interval.seconds = 1", e.src+"->"+e.dst+".topics = t"+e.id+"-.*, heartbeats")
	p := e.start("-c", cfg, "--web.listen-address", "")

	remoteHeartbeats := e.remote("heartbeats")
	eventually(t, time.Minute, "heartbeats of both directions on the target", func() bool {
		if records(t, e.dstAdm, remoteHeartbeats) == 0 {
			return false
		}
		own, _ := heartbeatsOf(t, targetSeeds, "heartbeats", e.src, e.dst)
		back, _ := heartbeatsOf(t, targetSeeds, remoteHeartbeats, e.dst, e.src)
		return len(own) >= 5 && len(back) >= 2
	})
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM, 30*time.Second), "clean exit after SIGTERM")

	// The flow's own heartbeats: MM2's bytes, partition 0, no headers, the
	// record timestamp equal to the value's, one per interval.
	own, recs := heartbeatsOf(t, targetSeeds, "heartbeats", e.src, e.dst)
	for i, hb := range own {
		r := recs[i]
		require.Equal(t, int32(0), r.Partition)
		require.Empty(t, r.Headers)
		require.Equal(t, hb.Timestamp, r.Timestamp.UnixMilli())
		want, err := policy.Heartbeat{SourceAlias: e.src, TargetAlias: e.dst}.Key()
		require.NoError(t, err)
		require.Equal(t, want, r.Key)
		if i > 0 {
			gap := time.Duration(hb.Timestamp-own[i-1].Timestamp) * time.Millisecond
			require.GreaterOrEqual(t, gap, 500*time.Millisecond, "heartbeats %d and %d", i-1, i)
			require.Less(t, gap, 10*time.Second, "heartbeats %d and %d", i-1, i)
		}
	}

	// The heartbeats topics MM2 creates: compacted, one partition.
	for _, c := range []struct {
		name string
		adm  *kadm.Client
	}{{"target", e.dstAdm}, {"source", e.srcAdm}} {
		parts, cleanup := topicShape(t, c.adm, "heartbeats")
		require.Equal(t, 1, parts, "partitions of heartbeats on the %s", c.name)
		require.Equal(t, "compact", cleanup, "cleanup.policy of heartbeats on the %s", c.name)
	}

	// The reverse heartbeats arrive replicated, records unchanged.
	back, backRecs := heartbeatsOf(t, targetSeeds, remoteHeartbeats, e.dst, e.src)
	require.NotEmpty(t, back)
	for i, r := range backRecs {
		require.Equal(t, back[i].Timestamp, r.Timestamp.UnixMilli())
	}

	// MirrorClient's view of the target: src is one hop upstream.
	top := e.start("topology", "-c", cfg, "--timeout", "30s")
	require.Equal(t, 0, top.wait(t, time.Minute), top.out.String())
	out := top.out.String()
	section := out[strings.Index(out, "cluster "+e.dst+" "):]
	require.Contains(t, section, remoteHeartbeats)
	require.Regexp(t, fmt.Sprintf(`(?m)^  %s +1 +\d+$`, e.src), section)
}

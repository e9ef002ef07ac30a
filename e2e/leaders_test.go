package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestIntegrationLeadersMove: the leaders of the copied partitions move on
// both three-node clusters, three times, while a producer writes: every
// record reaches the target once and in order, the copy goes on after each
// move, and the topic is never stopped as gone. On kfake a move made the
// batches mode send to the old target leader until kgo's cached metadata
// aged out, and a cached listing of topics without the moved one stopped
// its copy (replicator's TestBatchesModeLeadersMovedInCache and
// TestListTopicsAgain).
func TestIntegrationLeadersMove(t *testing.T) {
	need3Kafka(t)
	beside(t)
	e, srcAdm, dstAdm := newEnv3(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const partitions = 6
	topic := "lm" + e.id
	remote := e.src + "." + topic
	createTopics(ctx, t, srcAdm, partitions, []string{topic}) // replication factor 3
	t.Cleanup(func() { deleteSuiteTopics(t, srcAdm, dstAdm, e.id) })

	lines := append(e.flow3Lines(topic),
		"replication.factor = 3",
		"refresh.topics.interval.seconds = 1",
		"heartbeats.replication.enabled = false",
		"emit.heartbeats.enabled = false",
		"emit.checkpoints.enabled = false",
	)
	cfg := filepath.Join(e.dir, "mm2.properties")
	require.NoError(t, os.WriteFile(cfg, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	mm := e.start(mmArgs(cfg)...)

	cl, err := kgo.NewClient(kgo.SeedBrokers(source3Seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	stopProducing := produceEvery(cl, topic, partitions, 60, 20*time.Millisecond, 0) // about 3,000 records/s
	defer func() {
		if stopProducing != nil {
			_ = stopProducing()
		}
	}()
	eventually(t, time.Minute, "records on the target", func() bool { return records(t, dstAdm, remote) > 0 })
	for range 3 {
		moveLeaders(ctx, t, srcAdm, topic)
		moveLeaders(ctx, t, dstAdm, remote)
		copied := records(t, dstAdm, remote)
		eventually(t, 30*time.Second, "the copy going on after the move", func() bool { return records(t, dstAdm, remote) > copied+1000 })
	}
	require.NoError(t, stopProducing())
	stopProducing = nil

	produced := records(t, srcAdm, topic)
	eventually(t, time.Minute, "every record on the target", func() bool { return records(t, dstAdm, remote) >= produced })
	want, got := readAll(t, source3Seeds, topic), readAll(t, target3Seeds, remote)
	for p := range int32(partitions) {
		require.Equal(t, recsOf(want[p]), recsOf(got[p]), "partition %d: every record once, in order", p)
	}
	require.NotContains(t, mm.out.String(), "source topic gone", "the topic was never taken for gone")
}

// moveLeaders moves the leader of each partition of topic to another of its
// replicas: the replicas' order rotated, then a preferred leader election.
func moveLeaders(ctx context.Context, t *testing.T, adm *kadm.Client, topic string) {
	t.Helper()
	leaders := func() map[int32]int32 {
		md, err := adm.Metadata(ctx, topic)
		require.NoError(t, err)
		out := map[int32]int32{}
		for p, d := range md.Topics[topic].Partitions {
			out[p] = d.Leader
		}
		return out
	}
	md, err := adm.ListTopics(ctx, topic)
	require.NoError(t, err)
	var req kadm.AlterPartitionAssignmentsReq
	var set kadm.TopicsSet
	for p, d := range md[topic].Partitions {
		require.Len(t, d.Replicas, 3, "%s[%d]'s replicas", topic, p)
		req.Assign(topic, p, append(slices.Clone(d.Replicas[1:]), d.Replicas[0]))
		set.Add(topic, p)
	}
	before := leaders()
	resps, err := adm.AlterPartitionAssignments(ctx, req)
	require.NoError(t, err)
	require.NoError(t, resps.Error())
	elected, err := adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, set)
	require.NoError(t, err)
	for _, ps := range elected {
		for _, r := range ps {
			if r.Err != nil && !errors.Is(r.Err, kerr.ElectionNotNeeded) {
				require.NoError(t, r.Err, "elect the leader of %s[%d]", r.Topic, r.Partition)
			}
		}
	}
	eventually(t, 30*time.Second, "every leader of "+topic+" moved", func() bool {
		now := leaders()
		for p, l := range before {
			if now[p] == l || now[p] < 0 {
				return false
			}
		}
		return true
	})
}

// recsOf is recOf of each of rs.
func recsOf(rs []*kgo.Record) []rec {
	out := make([]rec, 0, len(rs))
	for _, r := range rs {
		out = append(out, recOf(r))
	}
	return out
}

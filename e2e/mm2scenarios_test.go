package e2e

// MM2's own integration scenarios (MirrorConnectorsIntegrationBaseTest,
// IdentityReplicationIntegrationTest and DedicatedMirrorIntegrationTest)
// ported to the mm2go binary on real Kafka: replication in both directions with
// heartbeats and checkpoints on both sides, a topic created after start,
// topic-config sync with excluded keys, source and target defaults,
// replicate-from-latest, empty partitions, partition growth and ACL sync, each
// under the default policy and, where MM2 runs it, under the identity policy
// (one-way only, as IdentityReplicationIntegrationTest).
//
// The tests run in parallel with each other, one mm2go process each, with MM2's
// test intervals of one second.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/mm2go/mm2go/policy"
)

const identityPolicy = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"

// scenario is one MM2 scenario's clusters, policy and mm2go file.
type scenario struct {
	*env
	identity bool
}

// newScenario is a scenario on the shared clusters whose topics (all
// carry the test's id) are deleted from both clusters when the test ends,
// so that they do not pile up for later tests to replicate.
func newScenario(t *testing.T, identity bool) scenario {
	t.Helper()
	s := scenario{env: newEnv(t), identity: identity}
	t.Cleanup(func() {
		for _, adm := range []*kadm.Client{s.srcAdm, s.dstAdm} {
			names := scTopicsContaining(t, adm, s.id)
			if len(names) == 0 {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if _, err := adm.DeleteTopics(ctx, names...); err != nil {
				t.Logf("delete the test's topics: %v", err)
			}
			cancel()
		}
	})
	return s
}

// scTopicsContaining lists a cluster's topics whose name contains part.
func scTopicsContaining(t *testing.T, adm *kadm.Client, part string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	td, err := adm.ListTopics(ctx)
	if err != nil {
		t.Logf("list topics: %v", err)
		return nil
	}
	var out []string
	for _, n := range td.Names() {
		if strings.Contains(n, part) {
			out = append(out, n)
		}
	}
	return out
}

// scRemote is the name of a source topic on the target under the
// scenario's policy.
func (s scenario) scRemote(topic string) string {
	if s.identity {
		return topic
	}
	return s.src + "." + topic
}

// scConfig writes the scenario's MM2 file: MM2's integration test settings
// with the test's aliases, topics and groups, plus extra lines.
func (s scenario) scConfig(bothWays bool, extra ...string) string {
	s.t.Helper()
	src, dst, id := s.src, s.dst, s.id
	lines := []string{
		"clusters = " + src + ", " + dst,
		copyModeLine(src, dst),
		// MM2's scenarios expect the offsets of its own copies: a fresh
		// topic copied from offset 0 lands 1:1, which the abort marker of
		// fencing (the batches mode's default) would shift by one.
		"mm2go.copy.fencing = none",
		src + ".bootstrap.servers = " + strings.Join(sourceSeeds, ","),
		dst + ".bootstrap.servers = " + strings.Join(targetSeeds, ","),
		src + "->" + dst + ".enabled = true",
		dst + "->" + src + ".enabled = " + strconv.FormatBool(bothWays),
		// MM2's: topics=test-topic-.*, primary.test-topic-.*, backup.test-topic-.*
		// The shared test clusters hold the heartbeats topics of every
		// other test (and their copies of each other's), which MM2's
		// default heartbeats.replication.enabled=true would all copy; so
		// the heartbeats topics of this test are named in the filter
		// instead, the copies included to show they are not copied back.
		fmt.Sprintf(`topics = t%s-.*, %s\.t%s-.*, %s\.t%s-.*, heartbeats, %s\.heartbeats, %s\.heartbeats`, id, src, id, dst, id, src, dst),
		"heartbeats.replication.enabled = false",
		"groups = g" + id + "-.*",
		"replication.factor = 1",
		"offset-syncs.topic.replication.factor = 1",
		"checkpoints.topic.replication.factor = 1",
		"heartbeats.topic.replication.factor = 1",
		src + ".offset.storage.replication.factor = 1",
		dst + ".offset.storage.replication.factor = 1",
		src + ".offset.flush.interval.ms = 500",
		dst + ".offset.flush.interval.ms = 500",
		"refresh.topics.interval.seconds = 1",
		"refresh.groups.interval.seconds = 1",
		"emit.checkpoints.interval.seconds = 1",
		"emit.heartbeats.interval.seconds = 1",
		"sync.topic.configs.interval.seconds = 1",
		"sync.topic.acls.interval.seconds = 1",
		`config.properties.exclude = delete\.retention\..*`,
	}
	if s.identity {
		lines = append(lines, "replication.policy.class = "+identityPolicy)
	}
	lines = append(lines, extra...)
	path := filepath.Join(s.dir, "mm2.properties")
	require.NoError(s.t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	return path
}

// scCreate creates a topic on the cluster of adm.
func scCreate(t *testing.T, adm *kadm.Client, topic string, partitions int32, configs map[string]string) {
	t.Helper()
	cfg := make(map[string]*string, len(configs))
	for k, v := range configs {
		cfg[k] = kadm.StringPtr(v)
	}
	createTopicOn(t, adm, topic, partitions, cfg)
}

// scProducer is a client writing to chosen partitions of a cluster.
func scProducer(t *testing.T, seeds []string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond), kgo.MetadataMinAge(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// scCfg is a described topic config.
type scCfg struct {
	Value  string
	Source kmsg.ConfigSource
}

// scTopicConfigs describes a topic's configs by name; nil if the topic does
// not exist (yet).
func scTopicConfigs(t *testing.T, adm *kadm.Client, topic string) map[string]scCfg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return nil
	}
	rc, err := rcs.On(topic, nil)
	if err != nil || rc.Err != nil {
		return nil
	}
	out := make(map[string]scCfg)
	for _, c := range rc.Configs {
		out[c.Key] = scCfg{Value: c.MaybeValue(), Source: c.Source}
	}
	return out
}

func scAlter(t *testing.T, adm *kadm.Client, topic string, ops ...kadm.AlterConfig) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resps, err := adm.AlterTopicConfigs(ctx, ops, topic)
	require.NoError(t, err)
	for _, r := range resps {
		require.NoError(t, r.Err, "alter %s", topic)
	}
}

func scSet(k, v string) kadm.AlterConfig {
	return kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: kadm.StringPtr(v)}
}

// scCommit commits a group's offsets on a cluster, as a consumer that read
// up to them would (MM2's tests commit every assigned partition, an empty
// one at 0).
func scCommit(t *testing.T, adm *kadm.Client, group, topic string, at map[int32]int64) {
	t.Helper()
	var os kadm.Offsets
	for p, o := range at {
		os.Add(kadm.Offset{Topic: topic, Partition: p, At: o, LeaderEpoch: -1})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, adm.CommitAllOffsets(ctx, group, os))
}

// scCheckpoints returns the newest checkpoint of group per partition of
// topic in the checkpoints topic cpTopic of a cluster (nil while the topic
// is empty or missing).
func scCheckpoints(t *testing.T, seeds []string, adm *kadm.Client, cpTopic, group, topic string) map[int32]policy.Checkpoint {
	t.Helper()
	if records(t, adm, cpTopic) == 0 {
		return nil
	}
	out := make(map[int32]policy.Checkpoint)
	for _, rs := range readAll(t, seeds, cpTopic) {
		for _, r := range rs {
			cp, err := policy.DecodeCheckpoint(r.Key, r.Value)
			require.NoError(t, err)
			if cp.Group == group && cp.Topic == topic {
				out[cp.Partition] = cp
			}
		}
	}
	return out
}

// scDownstream reduces checkpoints to their downstream offsets.
func scDownstream(cps map[int32]policy.Checkpoint) map[int32]int64 {
	out := make(map[int32]int64, len(cps))
	for p, cp := range cps {
		out[p] = cp.DownstreamOffset
	}
	return out
}

// scRecords reads a topic's records per partition, as compared by the tests.
func scRecords(t *testing.T, seeds []string, topic string) map[int32][]rec {
	t.Helper()
	out := make(map[int32][]rec)
	for p, rs := range readAll(t, seeds, topic) {
		for _, r := range rs {
			out[p] = append(out[p], recOf(r))
		}
	}
	return out
}

// scPartitions is a topic's partition count (0 if missing).
func scPartitions(t *testing.T, adm *kadm.Client, topic string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	td, err := adm.ListTopics(ctx, topic)
	if err != nil || td[topic].Err != nil {
		return 0
	}
	return len(td[topic].Partitions)
}

// scTopicsWithPrefix lists a cluster's topics starting with prefix.
func scTopicsWithPrefix(t *testing.T, adm *kadm.Client, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	td, err := adm.ListTopics(ctx)
	require.NoError(t, err)
	var out []string
	for _, n := range td.Names() {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	return out
}

const noAuthorizerLog = "no ACL authorizer is configured on the source cluster, so no topic ACL syncing will take place"

// TestIntegrationMM2ActiveActive ports MM2's testReplication: A->B and B->A
// in one mm2go process. Each side's topic arrives on the other under the
// other's alias with its records and configs, heartbeats and checkpoints
// flow both ways, topics created after start are picked up on both sides,
// and nothing is copied back to where it came from.
func TestIntegrationMM2ActiveActive(t *testing.T) {
	t.Parallel()
	s := newScenario(t, false)
	t1 := s.topic("1")
	group := "g" + s.id + "-1"
	compacted := s.topic("compacted")
	scCreate(t, s.srcAdm, t1, 3, nil)
	scCreate(t, s.dstAdm, t1, 3, nil)
	scCreate(t, s.srcAdm, compacted, 1, map[string]string{"cleanup.policy": "compact"})
	dstProducer := scProducer(t, targetSeeds)
	var seqA, seqB int
	sentA := produceN(t, s.srcCl, []string{t1}, 3, 30, &seqA)[t1]
	sentB := produceN(t, dstProducer, []string{t1}, 3, 30, &seqB)[t1]
	// The groups have read everything on both sides.
	scCommit(t, s.srcAdm, group, t1, map[int32]int64{0: 10, 1: 10, 2: 10})
	scCommit(t, s.dstAdm, group, t1, map[int32]int64{0: 10, 1: 10, 2: 10})

	cfg := s.scConfig(true)
	p := s.start("-c", cfg, "--web.listen-address", "")
	onB, onA := s.src+"."+t1, s.dst+"."+t1
	eventually(t, time.Minute, "both remote topics complete", func() bool {
		return records(t, s.dstAdm, onB) == 30 && records(t, s.srcAdm, onA) == 30
	})
	require.Equal(t, sentA, scRecords(t, targetSeeds, onB), "records of %s", onB)
	require.Equal(t, sentB, scRecords(t, sourceSeeds, onA), "records of %s", onA)
	eventually(t, 30*time.Second, "the compacted topic replicated with its config", func() bool {
		return scTopicConfigs(t, s.dstAdm, s.src+"."+compacted)["cleanup.policy"].Value == "compact"
	})

	t.Run("heartbeats on both sides", func(t *testing.T) {
		eventually(t, time.Minute, "heartbeats and their remote copies", func() bool {
			if records(t, s.dstAdm, s.src+".heartbeats") == 0 || records(t, s.srcAdm, s.dst+".heartbeats") == 0 {
				return false
			}
			own, _ := heartbeatsOf(t, targetSeeds, "heartbeats", s.src, s.dst)
			back, _ := heartbeatsOf(t, sourceSeeds, "heartbeats", s.dst, s.src)
			ownRemote, _ := heartbeatsOf(t, targetSeeds, s.src+".heartbeats", s.dst, s.src)
			backRemote, _ := heartbeatsOf(t, sourceSeeds, s.dst+".heartbeats", s.src, s.dst)
			return len(own) > 0 && len(back) > 0 && len(ownRemote) > 0 && len(backRemote) > 0
		})
	})

	t.Run("checkpoints on both sides", func(t *testing.T) {
		want := map[int32]int64{0: 10, 1: 10, 2: 10}
		eventually(t, time.Minute, "checkpoints of the group on both sides", func() bool {
			b := scDownstream(scCheckpoints(t, targetSeeds, s.dstAdm, s.src+".checkpoints.internal", group, onB))
			a := scDownstream(scCheckpoints(t, sourceSeeds, s.srcAdm, s.dst+".checkpoints.internal", group, onA))
			return fmt.Sprint(b) == fmt.Sprint(want) && fmt.Sprint(a) == fmt.Sprint(want)
		})
	})

	t.Run("topics created after start on both sides", func(t *testing.T) {
		t2, t3 := s.topic("2"), s.topic("3")
		scCreate(t, s.srcAdm, t2, 3, nil)
		scCreate(t, s.dstAdm, t3, 3, nil)
		sent2 := produceN(t, s.srcCl, []string{t2}, 1, 10, &seqA)[t2] // partition 0, as MM2's test
		sent3 := produceN(t, dstProducer, []string{t3}, 1, 10, &seqB)[t3]
		eventually(t, time.Minute, "new topics replicated", func() bool {
			return records(t, s.dstAdm, s.src+"."+t2) == 10 && records(t, s.srcAdm, s.dst+"."+t3) == 10
		})
		require.Equal(t, sent2, scRecords(t, targetSeeds, s.src+"."+t2))
		require.Equal(t, sent3, scRecords(t, sourceSeeds, s.dst+"."+t3))
		require.Equal(t, 3, scPartitions(t, s.dstAdm, s.src+"."+t2))
	})

	t.Run("nothing copied back to its origin", func(t *testing.T) {
		// Topics created now are found by later refreshes on both sides:
		// once they are copied, refreshes ran that would have (wrongly)
		// picked up the remote topics too.
		t4, t5 := s.topic("4"), s.topic("5")
		scCreate(t, s.srcAdm, t4, 1, nil)
		scCreate(t, s.dstAdm, t5, 1, nil)
		produceN(t, s.srcCl, []string{t4}, 1, 1, &seqA)
		produceN(t, dstProducer, []string{t5}, 1, 1, &seqB)
		eventually(t, time.Minute, "topics created later replicated", func() bool {
			return records(t, s.dstAdm, s.src+"."+t4) == 1 && records(t, s.srcAdm, s.dst+"."+t5) == 1
		})
		require.Empty(t, scTopicsWithPrefix(t, s.dstAdm, s.src+"."+s.dst+"."), "topics of %s copied back to it", s.dst)
		require.Empty(t, scTopicsWithPrefix(t, s.srcAdm, s.dst+"."+s.src+"."), "topics of %s copied back to it", s.src)
		require.EqualValues(t, 30, records(t, s.dstAdm, onB))
		require.EqualValues(t, 30, records(t, s.srcAdm, onA))
	})

	require.Equal(t, 0, p.stop(t, syscall.SIGTERM, 30*time.Second), "clean exit after SIGTERM")
	// The shared brokers have no authorizer: MM2's advice, once per flow.
	require.Equal(t, 2, strings.Count(p.out.String(), noAuthorizerLog), "ACL sync info lines")
}

// TestIntegrationMM2OneWay runs MM2's one-way scenarios in one mm2go process
// per policy: replication with heartbeats and checkpoints
// (testReplication, IdentityReplicationIntegrationTest), a topic created
// after start (testSingleNodeCluster), an empty partition
// (testReplicationWithEmptyPartition), config sync with an excluded key
// (testSyncTopicConfigs), target defaults (testReplicateTargetDefault),
// partition growth (testCreatePartitionsUseProvidedForwardingAdmin) and ACL
// sync against brokers without an authorizer.
func TestIntegrationMM2OneWay(t *testing.T) {
	t.Parallel()
	for _, identity := range []bool{false, true} {
		name := "default policy"
		if identity {
			name = "identity policy"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newScenario(t, identity)
			main, empty, withCfg, tgtDefault, grow := s.topic("1"), s.topic("empty"), s.topic("with-config"), s.topic("target-default"), s.topic("grow")
			group, emptyGroup := "g"+s.id+"-1", "g"+s.id+"-empty"
			compacted := s.topic("compacted")
			scCreate(t, s.srcAdm, main, 3, nil)
			scCreate(t, s.srcAdm, compacted, 1, map[string]string{"cleanup.policy": "compact"})
			scCreate(t, s.srcAdm, empty, 4, nil)
			scCreate(t, s.srcAdm, withCfg, 1, map[string]string{"delete.retention.ms": "1000", "retention.bytes": "1000"})
			scCreate(t, s.srcAdm, tgtDefault, 1, map[string]string{"retention.bytes": "1000"})
			scCreate(t, s.srcAdm, grow, 2, nil)
			var seq int
			sent := produceN(t, s.srcCl, []string{main}, 3, 30, &seq)[main]
			produceN(t, s.srcCl, []string{empty}, 3, 30, &seq) // partitions 0-2; 3 stays empty
			sentGrow := produceN(t, s.srcCl, []string{grow}, 2, 10, &seq)[grow]
			scCommit(t, s.srcAdm, group, main, map[int32]int64{0: 10, 1: 10, 2: 10})
			scCommit(t, s.srcAdm, emptyGroup, empty, map[int32]int64{0: 10, 1: 10, 2: 10, 3: 0})

			p := s.start("-c", s.scConfig(false), "--web.listen-address", "")
			remote := s.scRemote(main)
			eventually(t, time.Minute, remote+" complete", func() bool { return records(t, s.dstAdm, remote) == 30 })
			require.Equal(t, sent, scRecords(t, targetSeeds, remote))
			eventually(t, 30*time.Second, "the compacted topic replicated with its config", func() bool {
				return scTopicConfigs(t, s.dstAdm, s.scRemote(compacted))["cleanup.policy"].Value == "compact"
			})

			t.Run("heartbeats and checkpoints", func(t *testing.T) {
				// The disabled flow dst->src still emits heartbeats into src,
				// which come back as <src>.heartbeats under both policies.
				eventually(t, time.Minute, "heartbeats", func() bool {
					if records(t, s.dstAdm, s.src+".heartbeats") == 0 {
						return false
					}
					own, _ := heartbeatsOf(t, targetSeeds, "heartbeats", s.src, s.dst)
					back, _ := heartbeatsOf(t, targetSeeds, s.src+".heartbeats", s.dst, s.src)
					return len(own) > 0 && len(back) > 0
				})
				want := map[int32]int64{0: 10, 1: 10, 2: 10}
				eventually(t, time.Minute, "checkpoints", func() bool {
					got := scDownstream(scCheckpoints(t, targetSeeds, s.dstAdm, s.src+".checkpoints.internal", group, remote))
					return fmt.Sprint(got) == fmt.Sprint(want)
				})
				// One-way: nothing flows from dst to src but heartbeats.
				require.Empty(t, scTopicsWithPrefix(t, s.srcAdm, s.dst+"."+"t"+s.id))
			})

			t.Run("topic created after start", func(t *testing.T) {
				late := s.topic("late")
				created := time.Now()
				scCreate(t, s.srcAdm, late, 3, nil)
				sentLate := produceN(t, s.srcCl, []string{late}, 3, 30, &seq)[late]
				eventually(t, time.Minute, "late topic replicated", func() bool { return records(t, s.dstAdm, s.scRemote(late)) == 30 })
				t.Logf("topic created after start replicated within %.1fs", time.Since(created).Seconds())
				require.Equal(t, sentLate, scRecords(t, targetSeeds, s.scRemote(late)))
			})

			t.Run("empty partition", func(t *testing.T) {
				// The group's offset on the empty partition translates to 0.
				want := map[int32]int64{0: 10, 1: 10, 2: 10, 3: 0}
				eventually(t, time.Minute, "checkpoints of all four partitions", func() bool {
					got := scDownstream(scCheckpoints(t, targetSeeds, s.dstAdm, s.src+".checkpoints.internal", emptyGroup, s.scRemote(empty)))
					return fmt.Sprint(got) == fmt.Sprint(want)
				})
				require.Equal(t, 4, scPartitions(t, s.dstAdm, s.scRemote(empty)))
			})

			t.Run("config sync with an excluded key", func(t *testing.T) {
				r := s.scRemote(withCfg)
				got := scTopicConfigs(t, s.dstAdm, r)
				require.Equal(t, "1000", got["retention.bytes"].Value, "copied at creation")
				require.Equal(t, kmsg.ConfigSourceDefaultConfig, got["delete.retention.ms"].Source, "excluded at creation")
				scAlter(t, s.dstAdm, r, scSet("delete.retention.ms", "2000"), scSet("retention.bytes", "2000"))
				// Config changes reach the brokers through the metadata log:
				// wait until the excluded key's new value is visible, so the
				// checks below do not read the old one.
				eventually(t, 30*time.Second, "the altered configs visible", func() bool {
					return scTopicConfigs(t, s.dstAdm, r)["delete.retention.ms"].Value == "2000"
				})
				eventually(t, 30*time.Second, "retention.bytes synced back", func() bool {
					return scTopicConfigs(t, s.dstAdm, r)["retention.bytes"].Value == "1000"
				})
				require.Equal(t, "2000", scTopicConfigs(t, s.dstAdm, r)["delete.retention.ms"].Value, "the excluded key is never touched")
			})

			t.Run("target defaults", func(t *testing.T) {
				r := s.scRemote(tgtDefault)
				require.Equal(t, "1000", scTopicConfigs(t, s.dstAdm, r)["retention.bytes"].Value)
				scAlter(t, s.srcAdm, tgtDefault, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: "retention.bytes"})
				eventually(t, 30*time.Second, "retention.bytes back to the target default", func() bool {
					c := scTopicConfigs(t, s.dstAdm, r)["retention.bytes"]
					return c.Source == kmsg.ConfigSourceDefaultConfig && c.Value == "-1"
				})
			})

			t.Run("partition growth", func(t *testing.T) {
				r := s.scRemote(grow)
				eventually(t, time.Minute, r+" complete", func() bool { return records(t, s.dstAdm, r) == 10 })
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				resp, err := s.srcAdm.UpdatePartitions(ctx, 4, grow)
				require.NoError(t, err)
				require.NoError(t, resp.Error())
				eventually(t, 30*time.Second, grow+" grown", func() bool { return scPartitions(t, s.srcAdm, grow) == 4 })
				// A new client, so that it knows the new partitions.
				more := produceN(t, scProducer(t, sourceSeeds), []string{grow}, 4, 20, &seq)[grow]
				eventually(t, time.Minute, r+" grown and complete", func() bool {
					return scPartitions(t, s.dstAdm, r) == 4 && records(t, s.dstAdm, r) == 30
				})
				want := make(map[int32][]rec)
				for p, rs := range sentGrow {
					want[p] = append(want[p], rs...)
				}
				for p, rs := range more {
					want[p] = append(want[p], rs...)
				}
				require.Equal(t, want, scRecords(t, targetSeeds, r))
			})

			t.Run("ACL sync without an authorizer", func(t *testing.T) {
				// Several rounds have run by now: MM2's advice once, at info.
				require.Equal(t, 1, strings.Count(p.out.String(), noAuthorizerLog), "ACL sync info lines")
			})

			require.Equal(t, 0, p.stop(t, syscall.SIGTERM, 30*time.Second), "clean exit after SIGTERM")
		})
	}
}

// TestIntegrationMM2SourceDefaultsAndLatest runs, per policy, MM2's
// testReplicateSourceDefault (use.defaults.from=source, set per flow as MM2
// requires) and testReplicateFromLatest (<src>.consumer.auto.offset.reset=
// latest) in one mm2go process.
func TestIntegrationMM2SourceDefaultsAndLatest(t *testing.T) {
	t.Parallel()
	for _, identity := range []bool{false, true} {
		name := "default policy"
		if identity {
			name = "identity policy"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newScenario(t, identity)
			defaults, latest, sentinel := s.topic("source-default"), s.topic("latest"), s.topic("sentinel")
			scCreate(t, s.srcAdm, defaults, 1, nil)
			scCreate(t, s.srcAdm, latest, 3, nil)
			scCreate(t, s.srcAdm, sentinel, 1, nil)
			var seq int
			produceN(t, s.srcCl, []string{latest}, 3, 30, &seq) // before start: not replicated

			cfg := s.scConfig(false,
				s.src+"->"+s.dst+".use.defaults.from = source",
				s.src+".consumer.auto.offset.reset = latest")
			p := s.start("-c", cfg, "--web.listen-address", "")

			t.Run("replicate from latest", func(t *testing.T) {
				// A record on the sentinel topic that arrives proves that
				// copying started (a record written before would be skipped).
				eventually(t, time.Minute, "a sentinel record replicated", func() bool {
					produceN(t, s.srcCl, []string{sentinel}, 1, 1, &seq)
					time.Sleep(300 * time.Millisecond)
					return records(t, s.dstAdm, s.scRemote(sentinel)) > 0
				})
				sent := produceN(t, s.srcCl, []string{latest}, 3, 30, &seq)[latest]
				r := s.scRemote(latest)
				eventually(t, time.Minute, "the new records replicated", func() bool { return records(t, s.dstAdm, r) >= 30 })
				time.Sleep(time.Second)
				require.EqualValues(t, 30, records(t, s.dstAdm, r), "only records produced after start")
				require.Equal(t, sent, scRecords(t, targetSeeds, r), "10 per partition, the new ones")
			})

			t.Run("source defaults", func(t *testing.T) {
				r := s.scRemote(defaults)
				eventually(t, time.Minute, r+" created", func() bool { return scTopicConfigs(t, s.dstAdm, r) != nil })
				srcDefault := scTopicConfigs(t, s.srcAdm, defaults)["retention.bytes"]
				require.Equal(t, kmsg.ConfigSourceDefaultConfig, srcDefault.Source)
				scAlter(t, s.dstAdm, r, scSet("delete.retention.ms", "2000"), scSet("retention.bytes", "2000"))
				// Config changes reach the brokers through the metadata log:
				// wait until the excluded key's new value is visible, so the
				// checks below do not read the old one.
				eventually(t, 30*time.Second, "the altered configs visible", func() bool {
					return scTopicConfigs(t, s.dstAdm, r)["delete.retention.ms"].Value == "2000"
				})
				eventually(t, 30*time.Second, "retention.bytes set to the source default", func() bool {
					c := scTopicConfigs(t, s.dstAdm, r)["retention.bytes"]
					return c.Value == srcDefault.Value && c.Source == kmsg.ConfigSourceDynamicTopicConfig
				})
				require.Equal(t, "-1", srcDefault.Value)
				require.Equal(t, "2000", scTopicConfigs(t, s.dstAdm, r)["delete.retention.ms"].Value, "the excluded key is never touched")
			})

			require.Equal(t, 0, p.stop(t, syscall.SIGTERM, 30*time.Second), "clean exit after SIGTERM")
		})
	}
}

// TestIntegrationMM2ACLSync ports testSyncTopicACLsUseProvidedForwardingAdmin
// to a real StandardAuthorizer. It starts a cluster of its own with an
// authorizer (the shared ones have none) and runs a flow X->Y whose two
// aliases both name it: the remote topic X.<topic> lives next to its source,
// so one extra broker suffices. Literal topic ACLs are copied, ALLOW WRITE is
// dropped, ALLOW ALL becomes ALLOW READ, PREFIXED ACLs are not copied, and an
// ACL removed on the source stays on the target. No copy mode touches ACLs:
// the first pass runs it.
func TestIntegrationMM2ACLSync(t *testing.T) { firstPassOnly(testMM2ACLSync)(t) }

func testMM2ACLSync(t *testing.T) {
	t.Parallel()
	needKafka(t)
	seeds := scAuthorizerCluster(t)
	id := uid(t)
	x, y := "x"+id, "y"+id
	topic := "t" + id + "-acl"
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds), kgo.MetadataMinAge(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	scCreate(t, adm, topic, 1, nil)
	scACL(t, adm, topic, kadm.ACLPatternLiteral, "User:dummy", kadm.OpDescribe, true)
	scACL(t, adm, topic, kadm.ACLPatternLiteral, "User:admin", kadm.OpAll, true)
	scACL(t, adm, topic, kadm.ACLPatternLiteral, "User:writer", kadm.OpWrite, true)
	scACL(t, adm, topic, kadm.ACLPatternLiteral, "User:bad", kadm.OpRead, false)
	scACL(t, adm, "t"+id+"-", kadm.ACLPatternPrefixed, "User:prefixed", kadm.OpRead, true)

	dir := t.TempDir()
	lines := []string{
		"clusters = " + x + ", " + y,
		copyModeLine(x, y),
		x + ".bootstrap.servers = " + seeds,
		y + ".bootstrap.servers = " + seeds,
		x + "->" + y + ".enabled = true",
		x + "->" + y + ".topics = t" + id + "-.*",
		y + "->" + x + ".enabled = false",
		// One cluster on both sides: no heartbeats, which would be
		// replicated into themselves (X.heartbeats, X.X.heartbeats, ...).
		"emit.heartbeats.enabled = false",
		"heartbeats.replication.enabled = false",
		"emit.checkpoints.enabled = false",
		"replication.factor = 1",
		"offset-syncs.topic.replication.factor = 1",
		y + ".offset.storage.replication.factor = 1",
		y + ".offset.flush.interval.ms = 500",
		"refresh.topics.interval.seconds = 1",
		"sync.topic.acls.interval.seconds = 1",
	}
	path := filepath.Join(dir, "mm2.properties")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	e := &env{t: t, id: id, dir: dir}
	p := e.start("-c", path, "--web.listen-address", "")

	remote := x + "." + topic
	want := []string{
		remote + " User:admin * READ ALLOW",
		remote + " User:bad * READ DENY",
		remote + " User:dummy * DESCRIBE ALLOW",
	}
	eventually(t, time.Minute, "ACLs of "+remote, func() bool { return fmt.Sprint(scACLsOf(t, adm, remote)) == fmt.Sprint(want) })

	// Removed on the source, kept on the target.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = adm.DeleteACLs(ctx, kadm.NewACLs().Topics(topic).ResourcePatternType(kadm.ACLPatternLiteral).
		Allow("User:dummy").AllowHosts("*").Operations(kadm.OpDescribe))
	require.NoError(t, err)
	// An ACL added after the removal is copied by a later round, which
	// would have removed the other from the target too.
	scACL(t, adm, topic, kadm.ACLPatternLiteral, "User:later", kadm.OpRead, true)
	want = append(want, remote+" User:later * READ ALLOW")
	eventually(t, time.Minute, "the ACL added later copied", func() bool { return len(scACLsOf(t, adm, remote)) == len(want) })
	require.Equal(t, want, scACLsOf(t, adm, remote))
	require.Empty(t, scACLsOf(t, adm, x+".t"+id+"-"), "PREFIXED ACLs are not copied")
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM, 30*time.Second), "clean exit after SIGTERM")
	require.NotContains(t, p.out.String(), noAuthorizerLog)
}

// scACL creates one topic ACL for host *.
func scACL(t *testing.T, adm *kadm.Client, topic string, pattern kadm.ACLPattern, principal string, op kadm.ACLOperation, allow bool) {
	t.Helper()
	b := kadm.NewACLs().Topics(topic).ResourcePatternType(pattern).Operations(op)
	if allow {
		b.Allow(principal).AllowHosts("*")
	} else {
		b.Deny(principal).DenyHosts("*")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := adm.CreateACLs(ctx, b)
	require.NoError(t, err)
	for _, r := range res {
		require.NoError(t, r.Err)
	}
}

// scACLsOf lists the ACLs of a literal topic resource as sorted
// "topic principal host OPERATION PERMISSION" lines.
func scACLsOf(t *testing.T, adm *kadm.Client, topic string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := adm.DescribeACLs(ctx, kadm.NewACLs().Topics(topic).ResourcePatternType(kadm.ACLPatternLiteral).
		Allow().AllowHosts().Deny().DenyHosts().Operations())
	require.NoError(t, err)
	var out []string
	for _, r := range res {
		require.NoError(t, r.Err)
		for _, a := range r.Described {
			out = append(out, fmt.Sprintf("%s %s %s %s %s", a.Name, a.Principal, a.Host, a.Operation, a.Permission))
		}
	}
	sort.Strings(out)
	return out
}

// scAuthorizerCluster starts a one-node Kafka cluster with the
// StandardAuthorizer (every client is ANONYMOUS, a super user) and returns
// its bootstrap address.
func scAuthorizerCluster(t *testing.T) string {
	t.Helper()
	return ownCluster(t, "mm2acl", "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\nsuper.users=User:ANONYMOUS").bootstrap
}

// testCluster is a one-node Kafka cluster of one test's own.
type testCluster struct {
	t            *testing.T
	script, name string
	bootstrap    string
}

// ownCluster starts a one-node Kafka cluster named prefix plus the test's
// id on free ports below 32768, with extraProps (lines k=v separated by
// "\n") in its server.properties, and stops it when the test ends.
func ownCluster(t *testing.T, prefix, extraProps string) *testCluster {
	t.Helper()
	return ownClusterWith(t, prefix, func(int) string { return extraProps })
}

// ownClusterWith is ownCluster with the extra properties made for the
// cluster's port (its listeners, say) and more environment for
// kafka-cluster.sh (KAFKA_JVM_OPTS, KAFKA_READY_PROBE, ...).
func ownClusterWith(t *testing.T, prefix string, props func(port int) string, env ...string) *testCluster {
	t.Helper()
	c := &testCluster{t: t, script: filepath.Join(testbedDir(), "kafka-cluster.sh"), name: prefix + uid(t)}
	port := scFreePortPair(t)
	cmd := exec.Command(c.script, "start", c.name, strconv.Itoa(port), strconv.Itoa(port+1000))
	cmd.Env = append(os.Environ(), env...)
	if extra := props(port); extra != "" {
		cmd.Env = append(cmd.Env, "KAFKA_EXTRA_PROPS="+extra)
	}
	out, err := cmd.CombinedOutput()
	t.Cleanup(func() {
		if out, err := exec.Command(c.script, "stop", c.name).CombinedOutput(); err != nil {
			t.Logf("stop cluster %s: %v\n%s", c.name, err, out)
		}
	})
	require.NoError(t, err, "start cluster %s:\n%s", c.name, out)
	c.bootstrap = "127.0.0.1:" + strconv.Itoa(port)
	return c
}

// run runs kafka-cluster.sh with args on the cluster (term 1, restart-node 1).
func (c *testCluster) run(args ...string) {
	c.t.Helper()
	out, err := exec.Command(c.script, append([]string{args[0], c.name}, args[1:]...)...).CombinedOutput()
	require.NoError(c.t, err, "kafka-cluster.sh %v %s:\n%s", args, c.name, out)
}

// scFreePortPair returns a port p in [21000, 28000) such that p and p+1000
// (the controller) are free, avoiding the ephemeral range and the shared
// clusters' ports.
func scFreePortPair(t *testing.T) int {
	t.Helper()
	for range 100 {
		p := 21000 + rand.IntN(7000)
		if p%1000 == 92 || p%1000 == 192 {
			continue
		}
		a, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		b, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1000))
		_ = a.Close()
		if err != nil {
			continue
		}
		_ = b.Close()
		return p
	}
	t.Fatal("no free port pair found")
	return 0
}

package e2e

import (
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mm2go/mm2go/policy"
)

// TestIntegrationInterop checks mm2go against the real Apache MirrorMaker 2
// (testbed/mm2.sh, the Maven Central jars of Kafka 4.3.1) and against MM2's
// own client code (testbed/java: RemoteClusterUtils and MM2's record
// classes, built here with Maven once per run). The subtests share the
// Java build and run one after the other: each starts JVMs.
func TestIntegrationInterop(t *testing.T) {
	// Its own topics and aliases; mostly waiting on MM2's JVM: it runs
	// beside the other parallel tests.
	t.Parallel()
	in := newInterop(t)
	t.Run("RemoteClusterUtils", func(t *testing.T) { testInteropRemoteClusterUtils(t, in) })
	t.Run("TakeoverByMM2", func(t *testing.T) { testInteropTakeoverByMM2(t, in) })
	t.Run("TakeoverFromMM2", func(t *testing.T) { testInteropTakeoverFromMM2(t, in) })
}

// testInteropRemoteClusterUtils checks that on a target mm2go replicates
// into, with a consumer group committed on the source and checkpoints
// emitted, MM2's RemoteClusterUtils (translateOffsets, upstreamClusters,
// replicationHops, checkpointTopics, heartbeatTopics) answers what
// `mm2go offsets translate` and `mm2go topology` print.
func testInteropRemoteClusterUtils(t *testing.T, in *interop) {
	e := newEnv(t)
	a, b := e.topic("a"), e.topic("b")
	e.createTopic(a, 3, nil)
	e.createTopic(b, 3, nil)
	var seq int
	produceN(t, e.srcCl, []string{a, b}, 3, 600, &seq)
	ends := partitionEnds(t, e.srcAdm, a, b)

	// A stopped application: caught up on some partitions, behind on
	// others, at the start of one, and with no offset on b[1].
	group := "g" + e.id + "-app"
	committed := map[string]map[int32]int64{
		a: {0: ends[tpKey(a, 0)], 1: 17, 2: 0},
		b: {0: ends[tpKey(b, 0)], 2: 5},
	}
	e.commitGroup(group, committed)

	cfg := e.interopConfig("mm2go.properties")
	p := e.start("-c", cfg, "--web.listen-address", "")
	cpTopic := e.src + ".checkpoints.internal"
	waitFor(t, 90*time.Second, "records, heartbeats and the group's checkpoints on the target", func() string {
		switch {
		case !e.replicated(a, b):
			return "records not all copied"
		case records(t, e.dstAdm, e.remote("heartbeats")) == 0:
			return "no heartbeats in " + e.remote("heartbeats")
		case records(t, e.dstAdm, cpTopic) == 0:
			return "no checkpoints in " + cpTopic
		}
		latest := latestCheckpoints(e.checkpoints(), group)
		for topic, ps := range committed {
			for part, at := range ps {
				// Nothing but mm2go writes the remote topics, so a record
				// keeps its offset: the exact translation is the offset.
				if c, ok := latest[tpKey(e.remote(topic), part)]; !ok || c.DownstreamOffset != at {
					return fmt.Sprintf("checkpoint of %s[%d] for %d: %v (found: %t)", e.remote(topic), part, at, c, ok)
				}
			}
		}
		return ""
	})
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM, 30*time.Second), "clean exit after SIGTERM")

	rows := e.translateCLI(cfg, group)
	before := e.topologyCLI(cfg, e.dst)
	// replicationHops for our source, the target itself, an unknown alias
	// and up to ten other upstream clusters of the shared target.
	hops := []string{e.src, e.dst, "nosuch" + e.id}
	for _, u := range sortedKeys(before.hops) {
		if len(hops) < 13 && u != e.src {
			hops = append(hops, u)
		}
	}
	java := in.remoteClusterUtils(t, targetSeeds, e.src, group, hops...)
	after := e.topologyCLI(cfg, e.dst)

	// translateOffsets: one entry per committed partition, equal to mm2go's
	// translation and to the committed offset; the metadata comes along.
	got := java.translated()
	require.Len(t, got, 5, "RemoteClusterUtils.translateOffsets: %+v", java.TranslateOffsets)
	require.Len(t, rows, 5, "mm2go offsets translate rows")
	for topic, ps := range committed {
		for part, at := range ps {
			k := tpKey(e.remote(topic), part)
			require.Equal(t, at, got[k], "RemoteClusterUtils.translateOffsets %s", k)
			require.Equal(t, at, rows[k].Target, "mm2go offsets translate %s", k)
			require.Equal(t, "exact", rows[k].Mode, "mm2go offsets translate %s", k)
		}
	}
	for _, o := range java.TranslateOffsets {
		require.Equal(t, fmt.Sprintf("m-%s-%d", policy.New(policy.KindDefault, ".", true, "").OriginalTopic(o.Topic), o.Partition), o.Metadata, "metadata of %s[%d]", o.Topic, o.Partition)
	}

	// The topology: the target is shared with other tests, so the lists are
	// compared with two of mm2go's taken around MM2's.
	requireBetween(t, "heartbeatTopics", e.id, java.HeartbeatTopics, before.heartbeats, after.heartbeats)
	requireBetween(t, "checkpointTopics", e.id, java.CheckpointTopics, before.checkpoints, after.checkpoints)
	requireBetween(t, "upstreamClusters", e.id, java.UpstreamClusters, sortedKeys(before.hops), sortedKeys(after.hops))
	require.Contains(t, java.HeartbeatTopics, e.remote("heartbeats"))
	require.Contains(t, java.CheckpointTopics, cpTopic)
	require.Contains(t, java.UpstreamClusters, e.src)
	require.Equal(t, 1, java.ReplicationHops[e.src], "RemoteClusterUtils.replicationHops(%s)", e.src)
	require.Equal(t, 1, before.hops[e.src], "mm2go topology: hops of %s", e.src)
	require.Equal(t, -1, java.ReplicationHops[e.dst], "RemoteClusterUtils.replicationHops(%s)", e.dst)
	require.NotContains(t, before.hops, e.dst, "mm2go topology lists the target as its own upstream")
	require.Equal(t, -1, java.ReplicationHops["nosuch"+e.id])
	for _, u := range hops[3:] {
		if before.hops[u] == after.hops[u] {
			require.Equal(t, before.hops[u], java.ReplicationHops[u], "replicationHops(%s)", u)
		}
	}
	t.Logf("RemoteClusterUtils agrees with mm2go: %d translated offsets, %d upstream clusters, %d heartbeats topics, %d checkpoints topics, hops compared for %d clusters",
		len(got), len(java.UpstreamClusters), len(java.HeartbeatTopics), len(java.CheckpointTopics), len(hops))
}

// testInteropTakeoverByMM2 checks the handover from mm2go to Apache MM2:
// mm2go replicates a flow and is stopped with SIGTERM; Apache MM2 started
// on the same flow continues from mm2go's progress
// (mm2-offsets.<src>.internal), copying nothing twice and missing nothing,
// and its checkpoint connector translates the group from the offset syncs
// mm2go wrote. MM2's and mm2go's decoders agree on every offset-sync and
// checkpoint record.
func testInteropTakeoverByMM2(t *testing.T, in *interop) {
	e := newEnv(t)
	a, b := e.topic("a"), e.topic("b")
	e.createTopic(a, 3, nil)
	e.createTopic(b, 3, nil)
	var seq int
	produceN(t, e.srcCl, []string{a, b}, 3, 600, &seq)
	ends := partitionEnds(t, e.srcAdm, a, b)

	// Topic a gets no records after the handover, so MM2 writes no offset
	// syncs for it: its checkpoints for a can only come from mm2go's.
	group := "g" + e.id + "-app"
	mid := ends[tpKey(a, 1)] / 3
	committed := map[string]map[int32]int64{
		a: {0: 0, 1: mid, 2: ends[tpKey(a, 2)]},
		b: {0: ends[tpKey(b, 0)]},
	}
	e.commitGroup(group, committed)

	// mm2go writes offset syncs but no checkpoints, so that the
	// checkpoints topic is MM2's alone.
	cfg := e.interopConfig("mm2go.properties", "emit.checkpoints.enabled = false")
	p := e.start("-c", cfg, "--web.listen-address", "")
	eventually(t, time.Minute, "mm2go copied everything", func() bool { return e.replicated(a, b) })
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM, 30*time.Second), "clean exit after SIGTERM")
	require.True(t, e.progressAtEnd(a, b), "progress stored by mm2go at SIGTERM: %v, source ends %v", e.storedProgress(a, b), ends)
	mm2goSyncs := e.offsetSyncs()
	for part := range int32(3) {
		// MM2's rule: the newest position is sent at every offset commit,
		// the last one at shutdown included.
		last := lastSync(mm2goSyncs, a, part)
		end := ends[tpKey(a, part)]
		require.Equal(t, policy.OffsetSync{Topic: a, Partition: part, UpstreamOffset: end - 1, DownstreamOffset: end - 1}, last,
			"newest offset sync mm2go wrote for %s[%d]", a, part)
	}
	t.Logf("mm2go stopped after copying %d records; it wrote %d offset syncs", seq, len(mm2goSyncs))

	sent := seq
	produceN(t, e.srcCl, []string{b}, 3, 300, &seq)
	name := "interop-" + e.id + "-by-mm2"
	in.startMM2(t, name, e.interopConfig("mm2.properties", append(e.mm2Only(), e.dst+"->"+e.src+".emit.heartbeats.enabled = false")...))
	start := time.Now()
	cpTopic := e.src + ".checkpoints.internal"
	waitFor(t, 2*time.Minute, "Apache MM2 to copy the new records and checkpoint the group", func() string {
		switch {
		case !e.replicated(a, b):
			return "records not all copied"
		case records(t, e.dstAdm, cpTopic) == 0:
			return "no checkpoints in " + cpTopic
		}
		if latest := latestCheckpoints(e.checkpoints(), group); len(latest) != 4 {
			return fmt.Sprintf("checkpoints of 4 partitions wanted, got %v", latest)
		}
		return ""
	})
	t.Logf("Apache MM2 copied the %d new records and emitted checkpoints %.1fs after its start-up", seq-sent, time.Since(start).Seconds())
	in.stopMM2(t, name)

	e.requireCopiedOnce("mm2go, then Apache MM2", a, b)

	// Both decoders read both writers' offset syncs alike; mm2go's come
	// first and are unchanged.
	syncs := e.offsetSyncs()
	requireSameOffsetSyncs(t, in.javaRecords(t, "offset-syncs", sourceSeeds, "mm2-offset-syncs."+e.dst+".internal"), syncs)
	require.Equal(t, mm2goSyncs, syncs[:len(mm2goSyncs)])
	for _, s := range syncs[len(mm2goSyncs):] {
		require.NotEqual(t, a, s.Topic, "Apache MM2 wrote an offset sync for %s, which got no new records: %v", a, s)
	}
	cps := e.checkpoints()
	requireSameCheckpoints(t, in.javaRecords(t, "checkpoints", targetSeeds, cpTopic), cps)

	// MM2's checkpoints, from mm2go's syncs for a and from either for b.
	latest := latestCheckpoints(cps, group)
	rows := e.translateCLI(cfg, group)
	for topic, ps := range committed {
		for part, at := range ps {
			k := tpKey(e.remote(topic), part)
			c := latest[k]
			require.Equal(t, at, c.UpstreamOffset, "upstream offset of MM2's checkpoint %v", c)
			require.Equal(t, fmt.Sprintf("m-%s-%d", topic, part), c.Metadata, "metadata of MM2's checkpoint %v", c)
			require.Equal(t, at, rows[k].Target, "mm2go offsets translate %s (exact)", k)
			if topic == a {
				cand := syncTranslations(mm2goSyncs, a, part, at)
				require.Contains(t, cand, c.DownstreamOffset, "MM2's checkpoint %v is not derived from mm2go's offset syncs", c)
			}
			if topic == a && part == 1 {
				// Behind the newest sync, MM2 resumes right after an
				// earlier sync: never past mm2go's exact answer.
				require.LessOrEqual(t, c.DownstreamOffset, at, "MM2's checkpoint %v skips records", c)
				t.Logf("group behind the newest sync at %s[1]@%d: MM2 says %d (its +1 rule), mm2go says %d (exact)", a, at, c.DownstreamOffset, rows[k].Target)
				continue
			}
			require.Equal(t, at, c.DownstreamOffset, "MM2's checkpoint %v", c)
		}
	}

	// MM2's client API reads MM2's checkpoints as mm2go decoded them.
	got := in.remoteClusterUtils(t, targetSeeds, e.src, group).translated()
	require.Len(t, got, len(latest))
	for k, c := range latest {
		require.Equal(t, c.DownstreamOffset, got[k], "RemoteClusterUtils.translateOffsets %s", k)
	}
}

// testInteropTakeoverFromMM2 checks the handover from Apache MM2 to mm2go:
// Apache MM2 replicates a flow and is stopped with SIGTERM; mm2go started
// on the same file continues from MM2's progress, copying nothing twice and
// missing nothing. MM2's offset syncs and checkpoints decode alike with
// MM2's classes and mm2go's policy package, mm2go keeps MM2's checkpoints
// monotonic, and its translation of the group agrees with MM2's where MM2's
// is exact and never skips a record MM2 copied.
func testInteropTakeoverFromMM2(t *testing.T, in *interop) {
	e := newEnv(t)
	a, b := e.topic("a"), e.topic("b")
	e.createTopic(a, 3, nil)
	e.createTopic(b, 3, nil)
	var seq int
	produceN(t, e.srcCl, []string{a, b}, 3, 600, &seq)
	ends := partitionEnds(t, e.srcAdm, a, b)

	// Caught up on a[0] and b[0] at the handover, behind on a[1].
	group := "g" + e.id + "-app"
	mid := ends[tpKey(a, 1)] / 3
	committed := map[string]map[int32]int64{
		a: {0: ends[tpKey(a, 0)], 1: mid},
		b: {0: ends[tpKey(b, 0)]},
	}
	e.commitGroup(group, committed)

	// One file for both: mm2go reads MM2's file unchanged.
	cfg := e.interopConfig("mm2.properties", append(e.mm2Only(), e.dst+"->"+e.src+".emit.heartbeats.enabled = false")...)
	name := "interop-" + e.id + "-from-mm2"
	in.startMM2(t, name, cfg)
	start := time.Now()
	cpTopic := e.src + ".checkpoints.internal"
	waitFor(t, 2*time.Minute, "Apache MM2 to copy everything, store its progress and checkpoint the group", func() string {
		switch {
		case !e.replicated(a, b):
			return "records not all copied"
		case !e.progressAtEnd(a, b):
			return fmt.Sprintf("stored progress %v, source ends %v", e.storedProgress(a, b), ends)
		case records(t, e.dstAdm, cpTopic) == 0:
			return "no checkpoints in " + cpTopic
		}
		latest := latestCheckpoints(e.checkpoints(), group)
		_, behind := latest[tpKey(e.remote(a), 1)]
		if !behind || latest[tpKey(e.remote(a), 0)].DownstreamOffset != ends[tpKey(a, 0)] ||
			latest[tpKey(e.remote(b), 0)].DownstreamOffset != ends[tpKey(b, 0)] {
			return fmt.Sprintf("checkpoints %v", latest)
		}
		return ""
	})
	t.Logf("Apache MM2 copied %d records, stored its progress and checkpointed the group %.1fs after its start-up", seq, time.Since(start).Seconds())
	in.stopMM2(t, name)
	require.True(t, e.progressAtEnd(a, b), "progress stored by Apache MM2: %v, source ends %v", e.storedProgress(a, b), ends)

	// MM2's records, decoded by MM2's classes and by mm2go's.
	mm2Syncs := e.offsetSyncs()
	requireSameOffsetSyncs(t, in.javaRecords(t, "offset-syncs", sourceSeeds, "mm2-offset-syncs."+e.dst+".internal"), mm2Syncs)
	mm2Cps := e.checkpoints()
	requireSameCheckpoints(t, in.javaRecords(t, "checkpoints", targetSeeds, cpTopic), mm2Cps)
	mm2Latest := latestCheckpoints(mm2Cps, group)
	t.Logf("Apache MM2 wrote %d offset syncs and %d checkpoints, e.g. %v and %v", len(mm2Syncs), len(mm2Cps), mm2Syncs[0], mm2Latest[tpKey(e.remote(a), 1)])

	sent := seq
	produceN(t, e.srcCl, []string{a, b}, 3, 300, &seq)
	addr := freePort(t)
	p := e.start("-c", cfg, "--web.listen-address", addr)
	start = time.Now()
	eventually(t, time.Minute, "mm2go copied the new records", func() bool { return e.replicated(a, b) })
	t.Logf("mm2go copied the %d new records %.1fs after its start", seq-sent, time.Since(start).Seconds())
	// A checkpoint round that began after the copy: what mm2go checkpoints
	// of the group, it has written by its end.
	copied := float64(time.Now().UnixMilli()) / 1000
	eventually(t, time.Minute, "a checkpoint round after the copy", func() bool {
		return scrape(t, addr, `mm2go_checkpoint_last_emit_timestamp_seconds{flow="`+e.src+`->`+e.dst+`"}`) > copied+0.5
	})
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM, 30*time.Second), "clean exit after SIGTERM")

	e.requireCopiedOnce("Apache MM2, then mm2go", a, b)
	require.True(t, e.progressAtEnd(a, b), "progress stored by mm2go: %v", e.storedProgress(a, b))

	// mm2go appended its syncs after MM2's; MM2's classes read them.
	syncs := e.offsetSyncs()
	require.Equal(t, mm2Syncs, syncs[:len(mm2Syncs)])
	requireSameOffsetSyncs(t, in.javaRecords(t, "offset-syncs", sourceSeeds, "mm2-offset-syncs."+e.dst+".internal"), syncs)
	cps := e.checkpoints()
	require.Equal(t, mm2Cps, cps[:len(mm2Cps)])
	requireSameCheckpoints(t, in.javaRecords(t, "checkpoints", targetSeeds, cpTopic), cps)
	latest := latestCheckpoints(cps, group)
	got := in.remoteClusterUtils(t, targetSeeds, e.src, group).translated()
	require.Len(t, got, len(latest))
	for k, c := range latest {
		require.Equal(t, c.DownstreamOffset, got[k], "RemoteClusterUtils.translateOffsets %s", k)
	}

	// Where MM2's translation is exact (caught up at the handover), mm2go
	// gives the same answer and, having read MM2's checkpoints, writes no
	// checkpoint of its own for it.
	rows := e.translateCLI(cfg, group)
	for _, k := range []string{tpKey(e.remote(a), 0), tpKey(e.remote(b), 0)} {
		require.Equal(t, mm2Latest[k].DownstreamOffset, rows[k].Target, "mm2go offsets translate %s vs MM2's checkpoint %v", k, mm2Latest[k])
		require.Equal(t, mm2Latest[k], latest[k], "newest checkpoint of %s", k)
		require.Equal(t, countCheckpoints(mm2Cps, group, k), countCheckpoints(cps, group, k), "checkpoints of %s: mm2go repeated MM2's", k)
	}

	// Behind the handover point the records on the target are MM2's copies.
	// A translation past MM2's checkpoint may not skip any of them: record
	// mid sits at offset mid downstream (nothing else writes the topic).
	k := tpKey(e.remote(a), 1)
	t.Logf("group behind the handover point at %s[1]@%d (copied by MM2 up to %d): MM2's checkpoint %d, mm2go offsets translate %d (%s), newest checkpoint %d",
		a, mid, ends[tpKey(a, 1)]-1, mm2Latest[k].DownstreamOffset, rows[k].Target, rows[k].Mode, latest[k].DownstreamOffset)
	require.LessOrEqual(t, rows[k].Target, mid,
		"mm2go offsets translate %s: group at %d, but mm2go's answer skips the records MM2 copied from %d on (MM2's checkpoint says %d)",
		k, mid, mid, mm2Latest[k].DownstreamOffset)
	require.LessOrEqual(t, latest[k].DownstreamOffset, mid,
		"newest checkpoint of %s after mm2go took over: %v skips records MM2 copied (MM2's own: %v)", k, latest[k], mm2Latest[k])
}

// lastSync returns the newest offset sync of a partition.
func lastSync(syncs []policy.OffsetSync, topic string, partition int32) policy.OffsetSync {
	var last policy.OffsetSync
	for _, s := range syncs {
		if s.Topic == topic && s.Partition == partition {
			last = s
		}
	}
	return last
}

// countCheckpoints counts group's checkpoints of a downstream partition
// (tpKey).
func countCheckpoints(cps []policy.Checkpoint, group, key string) int {
	n := 0
	for _, c := range cps {
		if c.Group == group && tpKey(c.Topic, c.Partition) == key {
			n++
		}
	}
	return n
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

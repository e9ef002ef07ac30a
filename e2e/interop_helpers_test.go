package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/mm2go/mm2go/internal/ktest"
	"github.com/mm2go/mm2go/policy"
)

// interop runs what the interoperability tests need besides mm2go: Apache
// MirrorMaker 2 through testbed/mm2.sh and the Java program in
// testbed/java, which calls MM2's own client code (RemoteClusterUtils) and
// record decoders (OffsetSync, Checkpoint).
type interop struct {
	testbed string   // the testbed directory
	env     []string // environment of the scripts: KAFKA_ROOT from MM2GO_KAFKA_ROOT
}

// newInterop builds the Java program (testbed/java/build.sh: mvn package
// against the testbed's Kafka version, skipped when nothing changed). With
// real Kafka configured the build must succeed; there is no skip.
func newInterop(t *testing.T) *interop {
	t.Helper()
	needKafka(t)
	dir := testbedDir()
	env := os.Environ()
	if root := os.Getenv("MM2GO_KAFKA_ROOT"); root != "" {
		env = append(env, "KAFKA_ROOT="+root)
	}
	in := &interop{testbed: dir, env: env}
	start := time.Now()
	out, err := in.script(10*time.Minute, filepath.Join("java", "build.sh"))
	require.NoError(t, err, "build the Java interop program (Maven, Java 17):\n%s", out)
	t.Logf("Java interop program ready in %.1fs", time.Since(start).Seconds())
	return in
}

// script runs a testbed script and returns its stdout and stderr together.
func (in *interop) script(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(in.testbed, name), args...)
	cmd.Env = in.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// java runs the interop program and returns its stdout, the JSON answer.
func (in *interop) java(t *testing.T, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(in.testbed, "java", "run.sh"), args...)
	cmd.Env = in.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, err, "java interop %v; stderr:\n%s", args, tail(stderr.String(), 40))
	return stdout.Bytes()
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// javaClientAnswer is what MM2's RemoteClusterUtils returned.
type javaClientAnswer struct {
	TranslateOffsets []struct {
		Topic     string `json:"topic"`
		Partition int32  `json:"partition"`
		Offset    int64  `json:"offset"`
		Metadata  string `json:"metadata"`
	} `json:"translateOffsets"`
	UpstreamClusters []string       `json:"upstreamClusters"`
	CheckpointTopics []string       `json:"checkpointTopics"`
	HeartbeatTopics  []string       `json:"heartbeatTopics"`
	ReplicationHops  map[string]int `json:"replicationHops"`
}

// translated returns TranslateOffsets keyed "topic/partition".
func (a javaClientAnswer) translated() map[string]int64 {
	out := make(map[string]int64, len(a.TranslateOffsets))
	for _, o := range a.TranslateOffsets {
		out[tpKey(o.Topic, o.Partition)] = o.Offset
	}
	return out
}

// remoteClusterUtils calls RemoteClusterUtils against the cluster at seeds:
// translateOffsets(remoteAlias, group) and the topology methods, with
// replicationHops for each of hops. The cluster must hold
// <remoteAlias>.checkpoints.internal, or translateOffsets waits a minute.
func (in *interop) remoteClusterUtils(t *testing.T, seeds []string, remoteAlias, group string, hops ...string) javaClientAnswer {
	t.Helper()
	args := []string{"client", strings.Join(seeds, ","), remoteAlias, group, "30000"}
	for _, h := range hops {
		args = append(args, "--hops", h)
	}
	var a javaClientAnswer
	out := in.java(t, args...)
	require.NoError(t, json.Unmarshal(out, &a), "answer of RemoteClusterUtils: %s", out)
	return a
}

// javaRecord is one record of an MM2 internal topic as MM2's own
// deserializeRecord decoded it.
type javaRecord struct {
	Partition        int32  `json:"partition"`
	Offset           int64  `json:"offset"`
	Topic            string `json:"topic"`
	TopicPartition   int32  `json:"topicPartition"`
	UpstreamOffset   int64  `json:"upstreamOffset"`
	DownstreamOffset int64  `json:"downstreamOffset"`
	Group            string `json:"group"`
	Metadata         string `json:"metadata"`
	String           string `json:"string"`
	Error            string `json:"error"`
}

// javaRecords reads topic on the cluster at seeds with a Java consumer and
// decodes every record with MM2's OffsetSync or Checkpoint class (kind
// "offset-syncs" or "checkpoints"). A record MM2 cannot decode fails the
// test.
func (in *interop) javaRecords(t *testing.T, kind string, seeds []string, topic string) []javaRecord {
	t.Helper()
	var rs []javaRecord
	out := in.java(t, "records", kind, strings.Join(seeds, ","), topic, "60000")
	require.NoError(t, json.Unmarshal(out, &rs), "records of %s: %s", topic, out)
	for _, r := range rs {
		require.Empty(t, r.Error, "MM2 cannot decode %s[%d]@%d", topic, r.Partition, r.Offset)
	}
	return rs
}

// startMM2 starts Apache MirrorMaker 2 (dedicated mode) on cfg as instance
// name and returns once it logged its start-up. The test's cleanup stops
// it if it still runs and shows its log when the test failed.
func (in *interop) startMM2(t *testing.T, name, cfg string) {
	t.Helper()
	start := time.Now()
	out, err := in.script(3*time.Minute, "mm2.sh", "start", name, cfg)
	require.NoError(t, err, "mm2.sh start %s:\n%s", name, out)
	t.Logf("Apache MM2 %q started in %.1fs", name, time.Since(start).Seconds())
	t.Cleanup(func() {
		if t.Failed() {
			if logs, err := in.script(time.Minute, "mm2.sh", "logs", name); err == nil {
				t.Logf("Apache MM2 %q log (tail):\n%s", name, tail(logs, 60))
			}
		}
		_, _ = in.script(2*time.Minute, "mm2.sh", "stop", name)
	})
}

// stopMM2 stops MM2 instance name with SIGTERM and waits for its exit.
func (in *interop) stopMM2(t *testing.T, name string) {
	t.Helper()
	start := time.Now()
	out, err := in.script(2*time.Minute, "mm2.sh", "stop", name)
	require.NoError(t, err, "mm2.sh stop %s:\n%s", name, out)
	require.Contains(t, out, "stopped", "mm2.sh stop %s", name)
	t.Logf("Apache MM2 %q stopped (SIGTERM) in %.1fs", name, time.Since(start).Seconds())
}

// interopConfig writes a properties file that both Apache MM2 and mm2go run
// on: the flow src->dst for the test's topics (t<id>-.*) and groups
// (g<id>-.*), replication factors of 1, MM2's worker settings for
// single-broker clusters, progress flushed every second and one-second
// refresh and checkpoint intervals, plus extra lines. It returns the path.
func (e *env) interopConfig(name string, extra ...string) string {
	e.t.Helper()
	flow := e.src + "->" + e.dst
	lines := []string{
		"clusters = " + e.src + ", " + e.dst,
		copyModeLine(e.src, e.dst),
		// MM2 reads the same file; the tests compare its offsets and
		// mm2go's 1:1 (a fresh topic copied from offset 0), which the
		// abort marker of fencing (the batches mode's default) would
		// shift by one.
		"mm2go.copy.fencing = none",
		e.src + ".bootstrap.servers = " + strings.Join(sourceSeeds, ","),
		e.dst + ".bootstrap.servers = " + strings.Join(targetSeeds, ","),
		flow + ".enabled = true",
		flow + ".topics = t" + e.id + "-.*",
		flow + ".groups = g" + e.id + "-.*",
		e.dst + "->" + e.src + ".enabled = false",
		"replication.factor = 1",
		"offset-syncs.topic.replication.factor = 1",
		"checkpoints.topic.replication.factor = 1",
		"heartbeats.topic.replication.factor = 1",
		"refresh.topics.interval.seconds = 1",
		"refresh.groups.interval.seconds = 1",
		"emit.checkpoints.interval.seconds = 1",
		"sync.topic.acls.enabled = false",
		"tasks.max = 1",
		"dedicated.mode.enable.internal.rest = false",
	}
	// The Connect worker of each herder: the one writing into dst, and
	// the one MM2 starts for dst->src's heartbeats unless disabled.
	for _, alias := range []string{e.src, e.dst} {
		lines = append(lines,
			alias+".offset.storage.replication.factor = 1",
			alias+".status.storage.replication.factor = 1",
			alias+".config.storage.replication.factor = 1",
			alias+".offset.flush.interval.ms = 1000",
		)
	}
	lines = append(lines, extra...)
	path := filepath.Join(e.dir, name)
	require.NoError(e.t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	return path
}

// mm2Only are lines only Apache MM2 needs: plugin discovery through
// ServiceLoader manifests (start-up ~2 s faster, see testbed/README.md).
func (e *env) mm2Only() []string {
	return []string{
		"plugin.discovery = service_load",
		e.src + ".plugin.discovery = service_load",
		e.dst + ".plugin.discovery = service_load",
	}
}

// tpKey names a topic partition in maps.
func tpKey(topic string, partition int32) string {
	return topic + "/" + strconv.Itoa(int(partition))
}

// commitGroup commits offsets (topic -> partition -> offset) for group on
// the source, with metadata "m-<topic>-<partition>", as an admin commit:
// the group has no members, like a stopped consumer application.
func (e *env) commitGroup(group string, offsets map[string]map[int32]int64) {
	e.t.Helper()
	offs := make(kadm.Offsets)
	for topic, ps := range offsets {
		for p, at := range ps {
			offs.Add(kadm.Offset{Topic: topic, Partition: p, At: at, LeaderEpoch: -1, Metadata: fmt.Sprintf("m-%s-%d", topic, p)})
		}
	}
	require.NoError(e.t, e.srcAdm.CommitAllOffsets(e.ctx(), group, offs))
}

// partitionEnds returns the end offset of every partition of topics on a
// cluster, keyed by tpKey.
func partitionEnds(t *testing.T, adm *kadm.Client, topics ...string) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topics...)
	require.NoError(t, err)
	out := make(map[string]int64)
	ends.Each(func(o kadm.ListedOffset) {
		require.NoError(t, o.Err, "end offset of %s[%d]", o.Topic, o.Partition)
		out[tpKey(o.Topic, o.Partition)] = o.Offset
	})
	return out
}

// replicated reports whether every partition of the topics holds as many
// records on the target (under their remote names) as on the source: records,
// not end offsets, which count the abort markers of the batches mode's
// fencing too.
func (e *env) replicated(topics ...string) bool {
	e.t.Helper()
	src := partitionEnds(e.t, e.srcAdm, topics...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tp := range topics {
		got, err := ktest.RecordsPer(ctx, e.dstAdm, e.remote(tp))
		if err != nil {
			return false
		}
		for p := int32(0); ; p++ {
			want, ok := src[tpKey(tp, p)]
			if !ok {
				break
			}
			if got[p] != want {
				return false
			}
		}
	}
	return true
}

// requireCopiedOnce compares every partition of topics on the source with
// its remote partition on the target: the same values in the same order,
// so the same number of records, none missing and none written twice (the
// tests' values are unique). It logs the counts per partition.
func (e *env) requireCopiedOnce(what string, topics ...string) {
	e.t.Helper()
	for _, tp := range topics {
		src := readAll(e.t, sourceSeeds, tp)
		dst := readAll(e.t, targetSeeds, e.remote(tp))
		parts := make([]int32, 0, len(src))
		for p := range src {
			parts = append(parts, p)
		}
		slices.Sort(parts)
		var counts []string
		for _, p := range parts {
			want := make([]string, len(src[p]))
			for i, r := range src[p] {
				want[i] = string(r.Value)
			}
			got := make([]string, len(dst[p]))
			seen := make(map[string]int, len(dst[p]))
			dups := 0
			for i, r := range dst[p] {
				got[i] = string(r.Value)
				if seen[got[i]]++; seen[got[i]] == 2 {
					dups++
				}
			}
			counts = append(counts, fmt.Sprintf("[%d] source %d target %d", p, len(want), len(got)))
			require.Zero(e.t, dups, "%s: values written twice to %s[%d]", what, e.remote(tp), p)
			require.Equal(e.t, want, got, "%s: records of %s[%d] (source %d, target %d)", what, e.remote(tp), p, len(want), len(got))
		}
		require.Len(e.t, dst, len(src), "%s: partitions of %s holding records", what, e.remote(tp))
		e.t.Logf("%s: %s -> %s: %s, no duplicates", what, tp, e.remote(tp), strings.Join(counts, ", "))
	}
}

// storedProgress returns the source offsets stored in
// mm2-offsets.<src>.internal for the flow's MirrorSourceConnector, the last
// copied upstream offset per partition of topics, keyed by tpKey.
func (e *env) storedProgress(topics ...string) map[string]int64 {
	e.t.Helper()
	out := make(map[string]int64)
	for _, rs := range readAll(e.t, targetSeeds, policy.ConnectOffsetsTopic(e.src)) {
		for _, r := range rs {
			co, err := policy.DecodeConnectOffset(r.Key, r.Value)
			require.NoError(e.t, err, "record %s", r.Key)
			if co.Source == nil || co.Source.Cluster != e.src || !slices.Contains(topics, co.Source.Topic) {
				continue
			}
			k := tpKey(co.Source.Topic, co.Source.Partition)
			if co.Deleted {
				delete(out, k)
				continue
			}
			out[k] = co.Offset
		}
	}
	return out
}

// progressAtEnd reports whether the stored progress of every partition of
// topics is the source's last offset.
func (e *env) progressAtEnd(topics ...string) bool {
	e.t.Helper()
	stored := e.storedProgress(topics...)
	for k, end := range partitionEnds(e.t, e.srcAdm, topics...) {
		if got, ok := stored[k]; end > 0 && (!ok || got != end-1) {
			return false
		}
	}
	return true
}

// offsetSyncs decodes, with mm2go's policy package, every record of the
// flow's offset-syncs topic on the source (location "source", MM2's
// default), in offset order.
func (e *env) offsetSyncs() []policy.OffsetSync {
	e.t.Helper()
	topic := "mm2-offset-syncs." + e.dst + ".internal"
	var out []policy.OffsetSync
	for _, r := range readAll(e.t, sourceSeeds, topic)[0] {
		s, err := policy.DecodeOffsetSync(r.Key, r.Value)
		require.NoError(e.t, err, "%s@%d", topic, r.Offset)
		out = append(out, s)
	}
	return out
}

// checkpoints decodes, with policy.DecodeCheckpoint, every record of the
// flow's checkpoints topic on the target, in offset order.
func (e *env) checkpoints() []policy.Checkpoint {
	e.t.Helper()
	topic := e.src + ".checkpoints.internal"
	var out []policy.Checkpoint
	for _, r := range readAll(e.t, targetSeeds, topic)[0] {
		c, err := policy.DecodeCheckpoint(r.Key, r.Value)
		require.NoError(e.t, err, "%s@%d", topic, r.Offset)
		out = append(out, c)
	}
	return out
}

// latestCheckpoints returns group's newest checkpoint per downstream
// partition, keyed by tpKey.
func latestCheckpoints(cps []policy.Checkpoint, group string) map[string]policy.Checkpoint {
	out := make(map[string]policy.Checkpoint)
	for _, c := range cps {
		if c.Group == group {
			out[tpKey(c.Topic, c.Partition)] = c
		}
	}
	return out
}

// requireSameOffsetSyncs checks that MM2's OffsetSync class and mm2go's
// policy package decode the same records alike, down to the toString form.
func requireSameOffsetSyncs(t *testing.T, java []javaRecord, goSyncs []policy.OffsetSync) {
	t.Helper()
	require.Len(t, java, len(goSyncs), "offset-sync records decoded by MM2 and by mm2go")
	for i, j := range java {
		g := goSyncs[i]
		require.Equal(t, policy.OffsetSync{Topic: j.Topic, Partition: j.TopicPartition, UpstreamOffset: j.UpstreamOffset, DownstreamOffset: j.DownstreamOffset}, g, "offset sync %d", i)
		require.Equal(t, j.String, g.String(), "offset sync %d", i)
	}
}

// requireSameCheckpoints is requireSameOffsetSyncs for MM2's Checkpoint
// class and policy.DecodeCheckpoint.
func requireSameCheckpoints(t *testing.T, java []javaRecord, goCps []policy.Checkpoint) {
	t.Helper()
	require.Len(t, java, len(goCps), "checkpoint records decoded by MM2 and by mm2go")
	for i, j := range java {
		g := goCps[i]
		require.Equal(t, policy.Checkpoint{Group: j.Group, Topic: j.Topic, Partition: j.TopicPartition, UpstreamOffset: j.UpstreamOffset, DownstreamOffset: j.DownstreamOffset, Metadata: j.Metadata}, g, "checkpoint %d", i)
		require.Equal(t, j.String, g.String(), "checkpoint %d", i)
	}
}

// cliTranslation is one row of `mm2go offsets translate`.
type cliTranslation struct {
	Topic        string
	Partition    int32
	SourceOffset int64
	RemoteTopic  string
	Target       int64 // -1 when mm2go knows nothing of the partition
	Mode         string
}

// translateCLI runs `mm2go offsets translate -c cfg --group group` and
// returns its rows keyed by the remote topic partition (tpKey).
func (e *env) translateCLI(cfg, group string) map[string]cliTranslation {
	e.t.Helper()
	p := e.start("offsets", "translate", "-c", cfg, "--group", group, "--timeout", "30s")
	require.Equal(e.t, 0, p.wait(e.t, time.Minute), p.out.String())
	out := make(map[string]cliTranslation)
	lines := strings.Split(strings.TrimSpace(p.out.String()), "\n")
	header := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "SOURCE TOPIC") })
	require.GreaterOrEqual(e.t, header, 0, "no table in:\n%s", p.out.String())
	for _, l := range lines[header+1:] {
		f := strings.Fields(l)
		require.GreaterOrEqual(e.t, len(f), 6, "row %q", l)
		part, err := strconv.ParseInt(f[1], 10, 32)
		require.NoError(e.t, err, "row %q", l)
		src, err := strconv.ParseInt(f[2], 10, 64)
		require.NoError(e.t, err, "row %q", l)
		row := cliTranslation{Topic: f[0], Partition: int32(part), SourceOffset: src, RemoteTopic: f[3], Target: -1, Mode: strings.Join(f[5:], " ")}
		if f[4] != "-" {
			row.Target, err = strconv.ParseInt(f[4], 10, 64)
			require.NoError(e.t, err, "row %q", l)
		}
		out[tpKey(row.RemoteTopic, row.Partition)] = row
	}
	e.t.Logf("mm2go offsets translate --group %s:\n%s", group, p.out.String())
	return out
}

// topologyView is the section of one cluster in `mm2go topology`.
type topologyView struct {
	heartbeats, checkpoints []string
	hops                    map[string]int // upstream cluster -> hops
}

// topologyCLI runs `mm2go topology -c cfg` and returns the section of
// cluster alias.
func (e *env) topologyCLI(cfg, alias string) topologyView {
	e.t.Helper()
	p := e.start("topology", "-c", cfg, "--timeout", "30s")
	require.Equal(e.t, 0, p.wait(e.t, time.Minute), p.out.String())
	out := p.out.String()
	i := strings.Index(out, "cluster "+alias+" (")
	require.GreaterOrEqual(e.t, i, 0, "no section for %s in:\n%s", alias, out)
	section, _, _ := strings.Cut(out[i:], "\n\n")
	section = strings.TrimRight(section, "\n")
	v := topologyView{hops: make(map[string]int)}
	list := func(s string) []string {
		if s == "none" {
			return nil
		}
		return strings.Split(s, ", ")
	}
	inTable := false
	for _, l := range strings.Split(section, "\n")[1:] {
		switch {
		case strings.HasPrefix(l, "  heartbeats topics: "):
			v.heartbeats = list(strings.TrimPrefix(l, "  heartbeats topics: "))
		case strings.HasPrefix(l, "  checkpoints topics: "):
			v.checkpoints = list(strings.TrimPrefix(l, "  checkpoints topics: "))
		case strings.HasPrefix(l, "  upstream clusters: none"):
		case strings.HasPrefix(strings.TrimSpace(l), "upstream"):
			inTable = true
		case inTable:
			f := strings.Fields(l)
			require.Len(e.t, f, 3, "upstream row %q", l)
			h, err := strconv.Atoi(f[1])
			require.NoError(e.t, err, "upstream row %q", l)
			v.hops[f[0]] = h
		default:
			e.t.Fatalf("unexpected topology line %q", l)
		}
	}
	return v
}

// requireBetween checks a listing taken by MM2's code against two taken by
// mm2go just before and just after it: the cluster is shared with other
// tests, which may create or delete topics meanwhile. Everything both of
// mm2go's listings hold must be in MM2's, and everything in MM2's must be in
// one of mm2go's, but for another test's name (not containing own) that
// existed only in between: created after the first listing and deleted
// before the second (src3a978ad6.heartbeats in a full run).
func requireBetween(t *testing.T, what, own string, mm2 []string, before, after []string) {
	t.Helper()
	for _, s := range before {
		if slices.Contains(after, s) {
			require.Contains(t, mm2, s, "%s: MM2's RemoteClusterUtils misses what mm2go lists", what)
		}
	}
	for _, s := range mm2 {
		if slices.Contains(before, s) || slices.Contains(after, s) {
			continue
		}
		require.NotContains(t, s, own, "%s: MM2's RemoteClusterUtils lists %s, mm2go does not", what, s)
		t.Logf("%s: %s, another test's, existed only between mm2go's two listings", what, s)
	}
}

// syncTranslations is what MM2's OffsetSyncStore may answer for a group at
// upstream offset u from syncs of one partition: for a retained sync s with
// s.up <= u, s.down if u == s.up, else s.down + 1. Which syncs
// the store retains depends on its slot replacement, so every candidate is
// listed.
func syncTranslations(syncs []policy.OffsetSync, topic string, partition int32, u int64) []int64 {
	var out []int64
	for _, s := range syncs {
		if s.Topic != topic || s.Partition != partition || s.UpstreamOffset > u {
			continue
		}
		d := s.DownstreamOffset
		if s.UpstreamOffset != u {
			d++
		}
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out
}

// waitFor polls cond every 200ms until it returns "" or timeout passes,
// then fails with the last thing cond said was missing.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		missing := cond()
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, missing)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/checkpoint"
	"github.com/mm2go/mm2go/cutover"
	"github.com/mm2go/mm2go/internal/ktest"
	"github.com/mm2go/mm2go/internal/offsetmap"
)

// cutoverResult is what testdata/cutover.py reports.
type cutoverResult struct {
	Produced         int      `json:"produced"`
	ProducedOnSource int      `json:"produced_on_source"`
	Refused          int      `json:"refused_by_fence"`
	Received         int      `json:"received"`
	Missing          int      `json:"missing"`
	Duplicated       int      `json:"duplicated"`
	Unexpected       int      `json:"unexpected"`
	MissingSample    []string `json:"missing_sample"`
	DuplicatedSample []any    `json:"duplicated_sample"`
	Restarts         int      `json:"restarts"`
	Errors           []string `json:"errors"`
}

// TestIntegrationCutover runs the seed scenario with `mm2go cutover --fence`
// on the three-node clusters, the source enforcing ACLs: a producer writes
// steadily to the source and a group (auto.offset.reset=none, auto-commit)
// reads it, both confluent-kafka. The cutover fences the source's
// producers; the producer, refused, moves to the target and sends the
// refused records again there. The cutover is SIGKILLed while it waits for
// the consumers to leave the source, the consumer is switched, and the
// cutover started again with the same state file finishes: final offsets on
// the target, verified copy, report. The consumer must then have received
// every record once. --unfence removes exactly the fence's ACLs.
func TestIntegrationCutover(t *testing.T) { firstPassOnly(testCutover)(t) }

func testCutover(t *testing.T) {
	beside(t)
	need3(t)
	e, srcAdm, dstAdm := newEnv3(t)
	id, src, dst := e.id, e.src, e.dst
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	const partitions = 6
	topic, group := "co"+id, "gco"+id
	remote := src + "." + topic
	createTopics(ctx, t, srcAdm, partitions, []string{topic})
	createTopics(ctx, t, dstAdm, partitions, []string{topic}) // the local topic the producer moves to
	t.Cleanup(func() { deleteSuiteTopics(t, srcAdm, dstAdm, id) })
	commitAtLogStart(ctx, t, srcAdm, group, topic, partitions)

	flow := src + "->" + dst
	cfg := filepath.Join(e.dir, "mm2.properties")
	require.NoError(t, os.WriteFile(cfg, []byte(strings.Join(append(e.flow3Lines(topic),
		flow+".groups = "+group,
		// The cutover commits the final offsets itself.
		"sync.group.offsets.enabled = false",
		"heartbeats.replication.enabled = false",
		"emit.heartbeats.enabled = false",
		"sync.topic.acls.enabled = false",
	), "\n")+"\n"), 0o600))
	e.start(mmArgs(cfg)...)
	eventually(t, time.Minute, "remote topic created", func() bool {
		md, err := dstAdm.ListTopics(ctx, remote)
		return err == nil && md.Error() == nil && len(md[remote].Partitions) == partitions
	})

	control := t.TempDir()
	spec, err := json.Marshal(map[string]any{
		"source": strings.Join(source3Seeds, ","), "target": strings.Join(target3Seeds, ","),
		"topic": topic, "remote": remote, "local": topic, "group": group,
		"partitions": partitions, "rate": 500, "control": control,
	})
	require.NoError(t, err)
	app := exec.CommandContext(ctx, "python3", filepath.Join("testdata", "cutover.py"))
	app.Stdin = bytes.NewReader(spec)
	var appOut, appErr syncBuffer
	app.Stdout, app.Stderr = &appOut, &appErr
	require.NoError(t, app.Start())
	appDone := make(chan error, 1)
	go func() { appDone <- app.Wait() }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cutover.py:\n%s", appErr.String())
		}
	})
	touch := func(name string) { require.NoError(t, os.WriteFile(filepath.Join(control, name), nil, 0o600)) }
	time.Sleep(4 * time.Second) // traffic on the source, read by the group there
	// ... and copied: the offset map knows every partition from its start,
	// where the group's offsets are. The flow's first start on fresh
	// clusters waits seconds for the target's transaction coordinator to
	// load (mm2go's fencing, the producers' idempotence).
	mapReader := ktest.Client(t, target3Seeds)
	eventually(t, time.Minute, "the offset map knows every partition", func() bool {
		idx, err := checkpoint.LoadIndex(ctx, mapReader, offsetmap.Topic(src), 0)
		if err != nil {
			return false
		}
		for p := range int32(partitions) {
			if _, ok := idx.Translate(checkpoint.TopicPartition{Topic: topic, Partition: p}, 0); !ok {
				return false
			}
		}
		return true
	})

	state := filepath.Join(e.dir, "cutover.json")
	args := []string{"cutover", "-c", cfg, "--group", group, "--fence", "--fence-keep-open", "--state", state, "--verify-since", "10m"}
	// A dry run says what it would do and changes nothing.
	code, dry, dryErr := runBinary(t, append(args, "--dry-run")...)
	require.Zerof(t, code, "%s%s", dry, dryErr)
	require.Contains(t, dry, "would create DENY WRITE ACLs on the source for User:* on 1 topics ("+topic+")")
	require.Contains(t, dry, "would wait for these groups to have no members on the source: "+group)
	require.NoFileExists(t, state)
	first := e.start(args...)
	eventually(t, 2*time.Minute, "the first cutover fenced the source and waits for the group", func() bool {
		return strings.Contains(first.out.String(), "waiting: groups with members on the source")
	})
	require.Equal(t, -1, first.stop(t, syscall.SIGKILL, 10*time.Second), "SIGKILLed")
	st, err := cutover.LoadState(state)
	require.NoError(t, err)
	require.NotNil(t, st)
	var done []string
	for _, s := range st.Steps {
		done = append(done, s.Name)
	}
	require.Equal(t, []string{cutover.StepPreflight, cutover.StepFence, cutover.StepDrain}, done, "steps done before the SIGKILL")

	touch("switch-consumer")
	second := e.start(args...)
	select {
	case <-second.done:
	case <-ctx.Done():
		t.Fatalf("the second cutover did not finish:\n%s", second.out.String())
	}
	out := second.out.String()
	require.Zerof(t, second.cmd.ProcessState.ExitCode(), "second cutover:\n%s", out)
	require.Contains(t, out, "continuing the cutover")
	t.Logf("the second cutover:\n%s", out)

	time.Sleep(3 * time.Second) // the producer goes on writing to the target
	touch("stop-producer")
	select {
	case err := <-appDone:
		require.NoError(t, err, "cutover.py:\n%s", appErr.String())
	case <-ctx.Done():
		t.Fatalf("cutover.py did not finish:\n%s", appErr.String())
	}
	var res cutoverResult
	require.NoError(t, json.Unmarshal(bytes.TrimSpace([]byte(appOut.String())), &res), "cutover.py: %q", appOut.String())
	t.Logf("cutover.py: %+v", res)
	require.Empty(t, res.Errors)
	require.Positive(t, res.Refused, "the fence refused no record: the producer never saw it")
	require.Positive(t, res.ProducedOnSource)
	require.Greater(t, res.Produced, res.ProducedOnSource+res.Refused, "nothing produced on the target after the switch")
	require.Zerof(t, res.Missing, "records missing, e.g. %v", res.MissingSample)
	require.Zerof(t, res.Duplicated, "records received twice, e.g. %v", res.DuplicatedSample)
	require.Zero(t, res.Unexpected)

	un := exec.CommandContext(ctx, binary, "cutover", "--unfence", "-c", cfg, "--state", state)
	unOut, err := un.CombinedOutput()
	require.NoError(t, err, "%s", unOut)
	require.Contains(t, string(unOut), "removed 2 ")
	acls, err := srcAdm.DescribeACLs(ctx, kadm.NewACLs().Topics(topic).ResourcePatternType(kadm.ACLPatternLiteral).
		Allow().AllowHosts().Deny().DenyHosts().Operations())
	require.NoError(t, err)
	for _, d := range acls {
		require.NoError(t, d.Err)
		require.Empty(t, d.Described, "ACLs left on %s after --unfence", topic)
	}
}

// TestIntegrationFailback runs `mm2go cutover` on the reverse flow after a
// failover: the group read the primary's records on the secondary, from
// their copies in <primary>.<topic>, further than its last commit on the
// primary. Failing back, the cutover translates that offset back through
// the forward flow's offset map, so the group resumes on the primary's own
// topic right after the last copy it read (never at its old commit there,
// which would deliver those records again), and gets the exact offsets of
// what it read on the secondary's local topic in <secondary>.<topic>.
func TestIntegrationFailback(t *testing.T) { firstPassOnly(testFailback)(t) }

func testFailback(t *testing.T) {
	beside(t)
	e := newEnv(t)
	ctx := e.ctx()
	topic, group := e.topic("fb"), "gfb"+e.id
	e.createTopic(topic, 3, nil)
	createTopicOn(t, e.dstAdm, topic, 3, nil) // the secondary's local topic
	seq := 0
	produceN(t, e.srcCl, []string{topic}, 3, 90, &seq)

	// Phase 1, the failover: the forward flow copies the primary's topic.
	fwd := e.start(mmArgs(e.config())...)
	remote := e.remote(topic)
	eventually(t, time.Minute, "90 records copied", func() bool {
		n, err := ktest.Records(ctx, e.dstAdm, remote)
		return err == nil && n == 90
	})
	require.Equal(t, 0, fwd.stop(t, syscall.SIGTERM, 30*time.Second))

	// The group's last commit on the primary was at 10 per partition; on
	// the secondary it read the copies up to source offset 20, and 5
	// records of the local topic, which producers wrote there.
	old, onRemote, onLocal := make(kadm.Offsets), make(kadm.Offsets), make(kadm.Offsets)
	fwdIdx, err := checkpoint.LoadIndex(ctx, e.dstCl, offsetmap.Topic(e.src), 0)
	require.NoError(t, err)
	for p := range int32(3) {
		old.Add(kadm.Offset{Topic: topic, Partition: p, At: 10, LeaderEpoch: -1})
		tr, ok := fwdIdx.Translate(checkpoint.TopicPartition{Topic: topic, Partition: p}, 20)
		require.True(t, ok)
		require.Equal(t, checkpoint.ModeExact, tr.Mode)
		onRemote.Add(kadm.Offset{Topic: remote, Partition: p, At: tr.Downstream, LeaderEpoch: -1})
		onLocal.Add(kadm.Offset{Topic: topic, Partition: p, At: 5, LeaderEpoch: -1})
	}
	dstProd, err := kgo.NewClient(kgo.SeedBrokers(targetSeeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer dstProd.Close()
	local := 0
	produceN(t, dstProd, []string{topic}, 3, 15, &local)
	require.NoError(t, e.srcAdm.CommitAllOffsets(ctx, group, old))
	require.NoError(t, e.dstAdm.CommitAllOffsets(ctx, group, onRemote))
	require.NoError(t, e.dstAdm.CommitAllOffsets(ctx, group, onLocal))

	// Phase 2, the failback: the reverse flow copies the local topic back.
	back := e.dst + "->" + e.src
	cfg := filepath.Join(e.dir, "back.properties")
	require.NoError(t, os.WriteFile(cfg, []byte(strings.Join([]string{
		"clusters = " + e.src + ", " + e.dst, copyModeLine(e.src, e.dst),
		e.src + ".bootstrap.servers = " + strings.Join(sourceSeeds, ","),
		e.dst + ".bootstrap.servers = " + strings.Join(targetSeeds, ","),
		e.src + "->" + e.dst + ".enabled = false",
		back + ".enabled = true",
		back + ".topics = " + topic,
		back + ".groups = " + group,
		"sync.group.offsets.enabled = false",
		"replication.factor = 1", "offset-syncs.topic.replication.factor = 1", "checkpoints.topic.replication.factor = 1",
		"heartbeats.topic.replication.factor = 1", "heartbeats.replication.enabled = false", "emit.heartbeats.enabled = false",
		e.src + ".offset.storage.replication.factor = 1", "refresh.topics.interval.seconds = 1",
	}, "\n")+"\n"), 0o600))
	e.start(mmArgs(cfg)...)
	bt := e.dst + "." + topic
	eventually(t, time.Minute, "the reverse flow copied the local topic", func() bool {
		n, err := ktest.Records(ctx, e.srcAdm, bt)
		return err == nil && n == 15
	})
	code, out, errOut := runBinary(t, "cutover", "-c", cfg, "--flow", back, "--group", group,
		"--state", filepath.Join(e.dir, "failback.json"), "--verify-since", "72h", "--quiet", "500ms") // produceN's records are 48 h old
	require.Equal(t, 0, code, "cutover %s:\n%s%s", back, out, errOut)
	t.Logf("failback cutover:\n%s", out)
	require.Contains(t, out, "back, exact")
	require.Contains(t, out, "15 matched, 0 missing, 0 duplicated")

	got, err := e.srcAdm.FetchOffsets(ctx, group)
	require.NoError(t, err)
	backIdx, err := checkpoint.LoadIndex(ctx, e.srcCl, offsetmap.Topic(e.dst), 0)
	require.NoError(t, err)
	for p := range int32(3) {
		o, ok := got.Lookup(topic, p)
		require.True(t, ok)
		require.EqualValues(t, 20, o.At, "%s[%d]: after the last copy read on the secondary, not the old commit", topic, p)
		want, ok := backIdx.Translate(checkpoint.TopicPartition{Topic: topic, Partition: p}, 5)
		require.True(t, ok)
		require.Equal(t, checkpoint.ModeExact, want.Mode)
		tr, ok := got.Lookup(bt, p)
		require.True(t, ok, "%s[%d] has an offset", bt, p)
		require.Equal(t, want.Downstream, tr.At, "%s[%d]: right after the copies of the 5 records read on the secondary", bt, p)
	}
}

// TestIntegrationStopAtEnd runs a one-shot migration: mm2go --stop-at-end
// copies the backlog the source holds when it starts, commits the idle
// group's translated offsets into the target group, verifies every copied
// record, and exits 0.
func TestIntegrationStopAtEnd(t *testing.T) { firstPassOnly(testStopAtEnd)(t) }

func testStopAtEnd(t *testing.T) {
	beside(t)
	e := newEnv(t)
	ctx := e.ctx()
	topic, group := e.topic("eot"), "geot"+e.id
	e.createTopic(topic, 3, nil)
	seq := 0
	produceN(t, e.srcCl, []string{topic}, 3, 600, &seq)
	commitAtLogStart(ctx, t, e.srcAdm, group, topic, 3)
	offs := make(kadm.Offsets)
	for p := range int32(3) {
		offs.Add(kadm.Offset{Topic: topic, Partition: p, At: 50, LeaderEpoch: -1})
	}
	require.NoError(t, e.srcAdm.CommitAllOffsets(ctx, group, offs))

	p := e.start(append(mmArgs(e.config(e.src+"->"+e.dst+".groups = "+group)), "--stop-at-end")...)
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("mm2go --stop-at-end did not exit:\n%s", p.out.String())
	}
	require.Zerof(t, p.cmd.ProcessState.ExitCode(), "%s", p.out.String())
	require.Contains(t, p.out.String(), "every copied record verified")
	require.Contains(t, p.out.String(), `"matched": 600`)

	remote := e.remote(topic)
	n, err := ktest.Records(ctx, e.dstAdm, remote)
	require.NoError(t, err)
	require.EqualValues(t, 600, n)
	idx, err := checkpoint.LoadIndex(ctx, e.dstCl, offsetmap.Topic(e.src), 0)
	require.NoError(t, err)
	got, err := e.dstAdm.FetchOffsets(ctx, group)
	require.NoError(t, err)
	for p := range int32(3) {
		want, ok := idx.Translate(checkpoint.TopicPartition{Topic: topic, Partition: p}, 50)
		require.True(t, ok)
		o, ok := got.Lookup(remote, p)
		require.True(t, ok, "%s[%d] synced", remote, p)
		require.Equal(t, want.Downstream, o.At, "%s[%d]", remote, p)
	}
}

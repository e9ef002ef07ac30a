// Package e2e holds end-to-end tests of the mm2go binary against real Apache
// Kafka clusters. They run when MM2GO_TEST_SEEDS (source) and
// MM2GO_TEST_TARGET_SEEDS (target) are set, which the project's test command
// does after starting two clusters with testbed/env.sh; otherwise they skip.
//
// Tests share the two clusters: each test uses its own cluster aliases and
// topic prefix, so internal topics and remote topics never collide.
package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/internal/fence"
	"github.com/mm2go/mm2go/internal/ktest"
	"github.com/mm2go/mm2go/policy"
)

var (
	sourceSeeds, targetSeeds []string
	binary                   string // path of the mm2go binary under test
)

func TestMain(m *testing.M) {
	if s := os.Getenv("MM2GO_TEST_SEEDS"); s != "" {
		sourceSeeds = strings.Split(s, ",")
	}
	if s := os.Getenv("MM2GO_TEST_TARGET_SEEDS"); s != "" {
		targetSeeds = strings.Split(s, ",")
	}
	code := func() int {
		if len(sourceSeeds) > 0 {
			dir, err := os.MkdirTemp("", "mm2go-e2e-bin-")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer os.RemoveAll(dir)
			binary = filepath.Join(dir, "mm2go")
			args := []string{"build", "-o", binary}
			if raceEnabled {
				args = append(args, "-race")
				// A race-built process sleeps a second at exit by default
				// (GORACE's atexit_sleep_ms), which the tests that time a
				// SIGTERM's exit would count as mm2go's drain.
				if err := os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")); err != nil {
					fmt.Fprintln(os.Stderr, err)
					return 1
				}
			}
			cmd := exec.Command("go", append(args, "github.com/mm2go/mm2go/cmd/mm2go")...)
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				fmt.Fprintln(os.Stderr, "build mm2go:", err)
				return 1
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

// needKafka skips the test unless real clusters are configured.
func needKafka(t *testing.T) {
	t.Helper()
	if len(sourceSeeds) == 0 || len(targetSeeds) == 0 {
		t.Skip("MM2GO_TEST_SEEDS and MM2GO_TEST_TARGET_SEEDS are not set; run the README's test command to start real Kafka")
	}
}

// uid is a short random id that keeps a test's names apart from others'.
func uid(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// env is one test's view of the two clusters.
type env struct {
	t              *testing.T
	id             string // unique per test
	src, dst       string // cluster aliases
	srcCl, dstCl   *kgo.Client
	srcAdm, dstAdm *kadm.Client
	dir            string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	needKafka(t)
	id := uid(t)
	e := &env{t: t, id: id, src: "src" + id, dst: "dst" + id, dir: t.TempDir()}
	var err error
	// A short metadata cache age: the tests poll for topics that do not
	// exist yet, and kgo would otherwise remember them as missing for 5s.
	fresh := kgo.MetadataMinAge(100 * time.Millisecond)
	e.srcCl, err = kgo.NewClient(kgo.SeedBrokers(sourceSeeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond), fresh)
	require.NoError(t, err)
	t.Cleanup(e.srcCl.Close)
	e.dstCl, err = kgo.NewClient(kgo.SeedBrokers(targetSeeds...), fresh)
	require.NoError(t, err)
	t.Cleanup(e.dstCl.Close)
	e.srcAdm, e.dstAdm = kadm.NewClient(e.srcCl), kadm.NewClient(e.dstCl)
	return e
}

// topic is a source topic name unique to the test.
func (e *env) topic(name string) string { return "t" + e.id + "-" + name }

// remote is the name of a source topic on the target under the default policy.
func (e *env) remote(topic string) string { return e.src + "." + topic }

func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	e.t.Cleanup(cancel)
	return ctx
}

// createTopic creates a source topic.
func (e *env) createTopic(name string, partitions int32, configs map[string]*string) {
	e.t.Helper()
	createTopicOn(e.t, e.srcAdm, name, partitions, configs)
}

// createTopicOn creates a topic with adm's cluster and waits until its
// metadata shows a leader for each partition. Listed or written right after
// its creation, a topic may be unknown yet to the broker asked (on a busy
// machine): a producer gives up on it after a few retries, an offset
// listing fails at once.
func createTopicOn(t *testing.T, adm *kadm.Client, name string, partitions int32, configs map[string]*string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := adm.CreateTopic(ctx, partitions, 1, configs, name)
	require.NoError(t, err, "create topic %s", name)
	eventually(t, 30*time.Second, "topic "+name+" with a leader for each partition", func() bool {
		md, err := adm.Metadata(ctx, name)
		d, ok := md.Topics[name]
		if err != nil || !ok || d.Err != nil || len(d.Partitions) != int(partitions) {
			return false
		}
		for _, p := range d.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return false
			}
		}
		return true
	})
}

// config writes an MM2 properties file for the flow src->dst that
// replicates the test's topics, with test-friendly intervals, plus extra
// lines, and returns its path.
func (e *env) config(extra ...string) string {
	e.t.Helper()
	lines := []string{
		"clusters = " + e.src + ", " + e.dst,
		copyModeLine(e.src, e.dst),
		e.src + ".bootstrap.servers = " + strings.Join(sourceSeeds, ","),
		e.dst + ".bootstrap.servers = " + strings.Join(targetSeeds, ","),
		e.src + "->" + e.dst + ".enabled = true",
		e.src + "->" + e.dst + ".topics = t" + e.id + "-.*",
		e.dst + "->" + e.src + ".enabled = false",
		"replication.factor = 1",
		"offset-syncs.topic.replication.factor = 1",
		"checkpoints.topic.replication.factor = 1",
		"heartbeats.topic.replication.factor = 1",
		// The clusters are shared by every test: replicating every
		// heartbeats topic (MM2's default) would copy other tests' remote
		// heartbeats topics again and again. Tests that want heartbeats
		// replicated name them in their topics.
		"heartbeats.replication.enabled = false",
		e.dst + ".offset.storage.replication.factor = 1",
		e.dst + ".offset.flush.interval.ms = 500",
		"refresh.topics.interval.seconds = 1",
	}
	lines = append(lines, extra...)
	path := filepath.Join(e.dir, "mm2.properties")
	require.NoError(e.t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	return path
}

// proc is a running mm2go process.
type proc struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs the mm2go binary with args; the test's cleanup kills it if it
// still runs and logs its output when the test failed.
func (e *env) start(args ...string) *proc {
	e.t.Helper()
	p := &proc{cmd: exec.Command(binary, args...), out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	require.NoError(e.t, p.cmd.Start())
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	e.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if e.t.Failed() {
			e.t.Logf("mm2go %v output:\n%s", args, p.out.String())
		}
	})
	return p
}

// signal sends sig and, for SIGTERM, waits up to timeout for a clean exit.
func (p *proc) stop(t *testing.T, sig syscall.Signal, timeout time.Duration) int {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig))
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("mm2go did not exit within %s after %s", timeout, sig)
	}
	return p.cmd.ProcessState.ExitCode()
}

// wait waits for the process to exit on its own and returns its exit code.
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("mm2go did not exit within %s", timeout)
	}
	return p.cmd.ProcessState.ExitCode()
}

// rec is what the tests compare of a record.
type rec struct {
	Key, Value []byte
	KeyNil     bool
	Headers    []kgo.RecordHeader
	Timestamp  int64 // ms
}

func recOf(r *kgo.Record) rec {
	return rec{Key: r.Key, KeyNil: r.Key == nil, Value: r.Value, Headers: r.Headers, Timestamp: r.Timestamp.UnixMilli()}
}

// readAll reads every record of topic up to its current end, per partition,
// waiting until the end offsets are at least min (per partition sum) or the
// deadline passes.
func readAll(t *testing.T, seeds []string, topic string) map[int32][]*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords()) // a partition may end with a transaction marker
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	require.NoError(t, err)
	want := make(map[int32]int64)
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	out := make(map[int32][]*kgo.Record)
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "reading %s: still waiting for partitions %v", topic, want)
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("fetch %s[%d]: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				out[r.Partition] = append(out[r.Partition], r)
			}
			if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	return out
}

// setTopicConfig sets one config of a topic and waits until the broker
// describes it so: KRaft applies it through the metadata log, and a record
// produced right after the alter may still meet the old value.
func setTopicConfig(t *testing.T, adm *kadm.Client, topic, key, value string) {
	t.Helper()
	resps, err := adm.AlterTopicConfigs(context.Background(), []kadm.AlterConfig{{Name: key, Value: &value}}, topic)
	require.NoError(t, err)
	for _, r := range resps {
		require.NoError(t, r.Err, "alter %s of %s", key, topic)
	}
	eventually(t, 30*time.Second, key+" of "+topic+" at "+value, func() bool {
		rcs, err := adm.DescribeTopicConfigs(context.Background(), topic)
		if err != nil {
			return false
		}
		rc, err := rcs.On(topic, nil)
		if err != nil {
			return false
		}
		for _, c := range rc.Configs {
			if c.Key == key {
				return c.MaybeValue() == value
			}
		}
		return false
	})
}

// taskOwners maps each task of the flows from the source alias src to the
// instance id running it, once the flow's group on the target is stable and
// every one of its tasks runs; nil otherwise.
func taskOwners(t *testing.T, dstAdm *kadm.Client, src string, tasks int) map[int32]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := fence.Describe(ctx, dstAdm, policy.LeaseGroup(src), policy.LeaseTopic(src))
	if err != nil || st.State != "Stable" || st.Tasks != tasks || len(st.Unowned()) > 0 {
		return nil
	}
	out := make(map[int32]string)
	for _, m := range st.Members {
		for _, task := range m.Tasks {
			out[task] = m.InstanceID
		}
	}
	return out
}

// eventually polls cond every 200ms until it returns true or timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// records counts the records of topic on a cluster (0 if it is missing):
// not its end offsets, which count the transaction markers of the batches
// copy mode's fencing too.
func records(t *testing.T, adm *kadm.Client, topic string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := ktest.Records(ctx, adm, topic)
	if err != nil {
		return 0
	}
	return n
}

// copyModeLine is the properties lines that run the suite in the copy mode
// named by MM2GO_TEST_COPY_MODE (testbed/test.sh runs the replicator's and
// the end-to-end tests once more with "records", and the failover tests
// with "exactly-once": the record mode with
// <cluster>.exactly.once.source.support = enabled for each of clusters), or
// an empty line (the default, the batches mode).
func copyModeLine(clusters ...string) string {
	switch mode := os.Getenv("MM2GO_TEST_COPY_MODE"); mode {
	case "":
		return ""
	case "exactly-once":
		lines := []string{"mm2go.copy.mode = records"}
		for _, c := range clusters {
			lines = append(lines, c+".exactly.once.source.support = enabled")
		}
		return strings.Join(lines, "\n")
	default:
		return "mm2go.copy.mode = " + mode
	}
}

// exactlyOnce reports whether the suite's flows copy exactly once.
func exactlyOnce() bool { return os.Getenv("MM2GO_TEST_COPY_MODE") == "exactly-once" }

// firstPassOnly runs test only in the suite's first pass (the default copy
// mode): testbed/test.sh runs the end-to-end tests again in the record copy
// mode, where test would check nothing that depends on the mode.
// beside runs t beside the other parallel tests, after the serial ones. For
// a test whose topics, groups and aliases are its own, which stops no shared
// broker and bounds no duration that a busy machine could exceed: most of
// its time is spent waiting on mm2go and the brokers.
func beside(t *testing.T) {
	t.Helper()
	t.Parallel()
}

func firstPassOnly(test func(*testing.T)) func(*testing.T) {
	return func(t *testing.T) {
		t.Helper()
		if copyModeLine() != "" {
			t.Skip("the same in both copy modes; the first pass runs it")
		}
		test(t)
	}
}

// fenced reports whether the suite's flows fence with an abort marker (the
// batches mode's default), which puts one into every remote partition at
// each start: a fresh topic's copies then start at offset 1, not 0.
// (Exactly-once flows fence too, without a marker at start.)
func fenced() bool {
	mode := os.Getenv("MM2GO_TEST_COPY_MODE")
	return (mode == "" || mode == "batches") && os.Getenv("MM2GO_TEST_FENCING") != "none"
}

// fencingLine is the properties line that sets the writer fencing named by
// MM2GO_TEST_FENCING ("none" or "epoch"), or an empty line: the default,
// epoch in the batches mode. Every start of a fencing flow puts an abort
// marker into every remote partition, which the sync and the failover check
// must tell from other producers' records.
func fencingLine() string {
	if fencing := os.Getenv("MM2GO_TEST_FENCING"); fencing != "" {
		return "mm2go.copy.fencing = " + fencing
	}
	return ""
}

// testbedDir is the test bed's directory (MM2GO_TESTBED, else ../testbed),
// absolute where it can be made so.
func testbedDir() string {
	if dir := os.Getenv("MM2GO_TESTBED"); dir != "" {
		return dir
	}
	dir := filepath.Join("..", "testbed")
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return dir
}

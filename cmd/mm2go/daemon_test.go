package main

import (
	"bytes"
	"context"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/internal/ktest"
)

func newCluster(t *testing.T) *kfake.Cluster {
	t.Helper()
	return ktest.Fake(t, 1)
}

func testConfig(t *testing.T, src, dst *kfake.Cluster, extra ...string) *config.Config {
	t.Helper()
	props := append([]string{
		"clusters = A, B",
		"A.bootstrap.servers = " + strings.Join(src.ListenAddrs(), ","),
		"B.bootstrap.servers = " + strings.Join(dst.ListenAddrs(), ","),
		"A->B.enabled = true",
		"replication.factor = 1",
		"offset-syncs.topic.replication.factor = 1",
		"checkpoints.topic.replication.factor = 1",
		"heartbeats.topic.replication.factor = 1",
		"B.offset.storage.replication.factor = 1",
		"B.offset.flush.interval.ms = 100",
		"refresh.topics.interval.seconds = 1",
	}, extra...)
	cfg, _, err := config.Parse([]byte(strings.Join(props, "\n")), t.TempDir())
	require.NoError(t, err)
	return cfg
}

// TestDaemon boots the whole daemon in process against two kfake clusters
// and checks the copied data, the HTTP endpoints and a bounded shutdown.
func TestDaemon(t *testing.T) {
	src, dst := newCluster(t), newCluster(t)
	ordersOn(t, src)(100)
	ctx := context.Background()

	reg := prometheus.NewRegistry()
	d, err := newDaemon(daemonOptions{
		Config: testConfig(t, src, dst), Log: zaptest.NewLogger(t), Level: zap.NewAtomicLevel(),
		Registry: reg, ListenAddress: "127.0.0.1:0", DrainTimeout: 5 * time.Second,
	})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()

	dcl, err := kgo.NewClient(kgo.SeedBrokers(dst.ListenAddrs()...))
	require.NoError(t, err)
	defer dcl.Close()
	dadm := kadm.NewClient(dcl)
	require.Eventually(t, func() bool {
		n, err := ktest.Records(ctx, dadm, "A.orders")
		return err == nil && n == 100
	}, 20*time.Second, 50*time.Millisecond)

	base := "http://" + d.Addr()
	require.Equal(t, "ok\n", get(t, base+"/healthz"))
	require.Eventually(t, func() bool { return get(t, base+"/readyz") == "ready\n" }, 10*time.Second, 50*time.Millisecond)
	metrics := get(t, base+"/metrics")
	for _, name := range []string{
		`mm2go_replicator_records_total{flow="A->B",topic="orders"} 100`,
		`mm2go_flow_up{flow="A->B"} 1`,
		`mm2go_build_info{`,
		`mm2go_kgo_`,
		`go_goroutines`,
	} {
		require.Contains(t, metrics, name)
	}
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	for _, p := range problems {
		if !strings.HasPrefix(p.Metric, "mm2go_kgo_") { // kprom's names are its own
			t.Errorf("metric lint: %s: %s", p.Metric, p.Text)
		}
	}

	stopped := time.Now()
	d.Stop()
	require.NoError(t, <-done)
	require.Less(t, time.Since(stopped), 10*time.Second, "shutdown is bounded")
}

// ordersOn creates the topic "orders" (2 partitions) on c and returns a
// function that writes n records to it, round robin.
func ordersOn(t *testing.T, c *kfake.Cluster) (produce func(n int)) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	_, err = kadm.NewClient(cl).CreateTopic(context.Background(), 2, 1, nil, "orders")
	require.NoError(t, err)
	return func(n int) {
		t.Helper()
		var rs []*kgo.Record
		for i := range n {
			rs = append(rs, &kgo.Record{Topic: "orders", Partition: int32(i % 2), Value: []byte{byte(i)}})
		}
		require.NoError(t, cl.ProduceSync(context.Background(), rs...).FirstErr())
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// TestRunExitCodes checks what run returns: 2 with the key named for a bad
// file and bad flags, 1 for a port in use, 0 for version and validate of a
// good file.
func TestRunExitCodes(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.properties")
	require.NoError(t, os.WriteFile(bad, []byte("clusters = a, b\na.bootstrap.servers = x:1\nb.bootstrap.servers = y:1\na->b.enabled = true\nreplication.factor = two\n"), 0o600))
	good := filepath.Join(dir, "good.properties")
	require.NoError(t, os.WriteFile(good, []byte("clusters = a, b\na.bootstrap.servers = x:1\nb.bootstrap.servers = y:1\na->b.enabled = true\n"), 0o600))
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = busy.Close() })

	tests := []struct {
		name   string
		args   []string
		code   int
		output string
	}{
		{"bad file", []string{"-c", bad, "--web.listen-address", ""}, exitUsage, "replication.factor"},
		{"bad file, MM2's positional form", []string{bad}, exitUsage, `"two"`},
		{"MM2's form with flags after the file", []string{good, "--clusters", "z", "--web.listen-address", ""}, exitUsage, `unknown cluster "z"`},
		{"two files", []string{good, bad}, exitUsage, "unexpected arguments"},
		{"missing file", []string{"-c", filepath.Join(dir, "none.properties")}, exitUsage, "none.properties"},
		{"no file", nil, exitUsage, "-c FILE is required"},
		{"bad flag", []string{"--nope"}, exitUsage, "nope"},
		{"bad log level", []string{"-c", good, "--log.level", "loud"}, exitUsage, "log.level"},
		{"unknown target cluster", []string{"-c", good, "--clusters", "z", "--web.listen-address", ""}, exitUsage, `unknown cluster "z"`},
		{"validate bad", []string{"validate", "-c", bad}, exitUsage, "replication.factor"},
		{"validate good", []string{"validate", "-c", good}, exitOK, "flow a->b"},
		{"version", []string{"version"}, exitOK, "mm2go dev"},
		// A taken port is a runtime failure, not a bad file (exit 1).
		{"metrics port in use", []string{"-c", good, "--web.listen-address", busy.Addr().String()}, exitFailure, "address already in use"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			code := run(tt.args, &out, &out)
			require.Equal(t, tt.code, code, out.String())
			require.Contains(t, out.String(), tt.output)
		})
	}
}

// TestDemo runs the embedded demo for a few seconds: it must replicate every
// record it produced.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	code := run([]string{"demo", "--duration", "4s", "--web.listen-address", "", "--rate", "500"}, &out, &out)
	require.Equal(t, exitOK, code, out.String())
	require.Contains(t, out.String(), "OK: every record was replicated")
	require.Contains(t, out.String(), "primary.orders")
	// The count is of the producer's records only (no heartbeats or
	// checkpoints): what was produced, exactly.
	m := regexp.MustCompile(`produced (\d+) records, the secondary holds (\d+) in their remote topics`).FindStringSubmatch(out.String())
	require.NotNil(t, m, out.String())
	require.Equal(t, m[1], m[2], out.String())
}

// TestDaemonReload: a reload restarts only the flows whose settings changed,
// and a configuration without flows is refused while the old one runs on.
func TestDaemonReload(t *testing.T) {
	src, dst := newCluster(t), newCluster(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(src.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	ctx := context.Background()
	_, err = kadm.NewClient(cl).CreateTopics(ctx, 1, 1, nil, "orders", "payments")
	require.NoError(t, err)
	require.NoError(t, cl.ProduceSync(ctx,
		&kgo.Record{Topic: "orders", Value: []byte("o")}, &kgo.Record{Topic: "payments", Value: []byte("p")}).FirstErr())

	reg := prometheus.NewRegistry()
	d, err := newDaemon(daemonOptions{
		Config: testConfig(t, src, dst, "A->B.topics = orders"), Log: zaptest.NewLogger(t), Level: zap.NewAtomicLevel(),
		Registry: reg, DrainTimeout: 5 * time.Second,
	})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		d.Stop()
		if err := <-done; err != nil {
			t.Logf("daemon: %v", err)
		}
	})

	dcl, err := kgo.NewClient(kgo.SeedBrokers(dst.ListenAddrs()...), kgo.MetadataMinAge(50*time.Millisecond))
	require.NoError(t, err)
	defer dcl.Close()
	dadm := kadm.NewClient(dcl)
	copied := func(topic string) bool {
		n, err := ktest.Records(ctx, dadm, topic)
		return err == nil && n == 1
	}
	require.Eventually(t, func() bool { return copied("A.orders") }, 20*time.Second, 50*time.Millisecond)
	handles := func() map[string]*flowHandle {
		d.mu.Lock()
		defer d.mu.Unlock()
		return maps.Clone(d.flows)
	}
	before := handles()
	require.Contains(t, before, "A->B")
	require.Contains(t, before, "B->A", "heartbeat-only pair")

	// Changed topics: A->B restarts, B->A (unchanged) keeps running.
	require.NoError(t, d.Reload(ctx, testConfig(t, src, dst, "A->B.topics = orders, payments")))
	after := handles()
	require.NotSame(t, before["A->B"], after["A->B"])
	require.Same(t, before["B->A"], after["B->A"])
	require.Eventually(t, func() bool { return copied("A.payments") }, 20*time.Second, 50*time.Millisecond)
	require.InDelta(t, 1, testutil.ToFloat64(d.m.reload), 0)

	// Same file again: nothing restarts.
	require.NoError(t, d.Reload(ctx, testConfig(t, src, dst, "A->B.topics = orders, payments")))
	require.Same(t, after["A->B"], handles()["A->B"])

	// No enabled flow: refused, the old flows run on.
	noFlows, _, err := config.Parse([]byte("clusters = A, B\nA.bootstrap.servers = "+src.ListenAddrs()[0]+
		"\nB.bootstrap.servers = "+dst.ListenAddrs()[0]+"\nA->B.enabled = false\nB->A.enabled = true\nB->A.emit.heartbeats.enabled = false\n"), t.TempDir())
	require.NoError(t, err)
	d.o.Targets = []string{"B"}
	require.Error(t, d.Reload(ctx, noFlows))
	require.InDelta(t, 0, testutil.ToFloat64(d.m.reload), 0)
	require.Same(t, after["A->B"], handles()["A->B"])
}

// TestStopBeforeRun: Stop before Run returns at once and releases the
// listener; a Run after it returns at once.
func TestStopBeforeRun(t *testing.T) {
	src := newCluster(t)
	d, err := newDaemon(daemonOptions{Config: testConfig(t, src, src), Log: zap.NewNop(), ListenAddress: "127.0.0.1:0"})
	require.NoError(t, err)
	addr := d.Addr()
	stopped := make(chan struct{})
	go func() { d.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop before Run did not return")
	}
	_, err = net.DialTimeout("tcp", addr, time.Second)
	require.Error(t, err, "the listener is closed")
	require.NoError(t, d.Run(context.Background()))
}

// TestDaemonFirstApplyFails: flows that cannot be started make Run return
// an error (the process exits 1), and "started" is never logged.
func TestDaemonFirstApplyFails(t *testing.T) {
	src := newCluster(t)
	core, logs := observer.New(zap.InfoLevel)
	d, err := newDaemon(daemonOptions{Config: testConfig(t, src, src), Log: zap.New(core)})
	require.NoError(t, err)
	// What newDaemon checked no longer holds when Run starts the flows.
	d.o.Targets = []string{"C"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = d.Run(ctx)
	require.ErrorContains(t, err, "start flows")
	require.Zero(t, logs.FilterMessage("mm2go started").Len())
}

// TestDaemonReloadForgetsRemovedFlows: a reload that removes a flow (its
// cluster left the file) deletes the flow's series; a flow that only
// restarts keeps them.
func TestDaemonReloadForgetsRemovedFlows(t *testing.T) {
	a, b, c := newCluster(t), newCluster(t), newCluster(t)
	parse := func(clusters string, enabled ...string) *config.Config {
		props := []string{"clusters = " + clusters,
			"A.bootstrap.servers = " + strings.Join(a.ListenAddrs(), ","),
			"B.bootstrap.servers = " + strings.Join(b.ListenAddrs(), ","),
			"C.bootstrap.servers = " + strings.Join(c.ListenAddrs(), ","),
			"replication.factor = 1", "offset-syncs.topic.replication.factor = 1",
			"checkpoints.topic.replication.factor = 1", "heartbeats.topic.replication.factor = 1",
			"offset.storage.replication.factor = 1"}
		for _, f := range enabled {
			props = append(props, f+".enabled = true")
		}
		cfg, _, err := config.Parse([]byte(strings.Join(props, "\n")), t.TempDir())
		require.NoError(t, err)
		return cfg
	}
	reg := prometheus.NewRegistry()
	d, err := newDaemon(daemonOptions{Config: parse("A, B, C", "A->B", "A->C"), Log: zaptest.NewLogger(t), Level: zap.NewAtomicLevel(),
		Registry: reg, DrainTimeout: 5 * time.Second})
	require.NoError(t, err)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		d.Stop()
		if err := <-done; err != nil {
			t.Logf("daemon: %v", err)
		}
	})

	flows := func(name string) map[string]bool {
		out := make(map[string]bool)
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "flow" {
						out[l.GetValue()] = true
					}
				}
			}
		}
		return out
	}
	require.Eventually(t, func() bool { return flows("mm2go_flow_up")["A->C"] && flows("mm2go_flow_up")["A->B"] }, 20*time.Second, 50*time.Millisecond)
	require.True(t, flows("mm2go_flow_restarts_total")["A->C"])

	require.NoError(t, d.Reload(ctx, parse("A, B", "A->B")))
	for _, name := range []string{"mm2go_flow_up", "mm2go_flow_restarts_total", "mm2go_flow_worker_restarts_total", "mm2go_flow_tasks_lost_total", "mm2go_flow_tasks", "mm2go_flow_tasks_configured", "mm2go_flow_group_generation", "mm2go_flow_rebalances_total", "mm2go_flow_rebalance_seconds_total"} {
		for f := range flows(name) {
			require.NotContains(t, f, "C", "%s{flow=%q} after C left the file", name, f)
		}
	}
	require.True(t, flows("mm2go_flow_restarts_total")["A->B"], "the remaining flow keeps its series")
}

// TestDaemonReloadDrainsFlowsTogether: a reload that stops several flows
// stops them together, so it takes one drain however many flows it changes,
// and /readyz answers while they drain. (Before, they drained one after
// another under the daemon's lock: N drains, and /readyz blocked.)
func TestDaemonReloadDrainsFlowsTogether(t *testing.T) {
	src, dst := newCluster(t), newCluster(t)
	cfg := testConfig(t, src, dst)
	d, err := newDaemon(daemonOptions{Config: cfg, Log: zaptest.NewLogger(t), Level: zap.NewAtomicLevel(),
		Registry: prometheus.NewRegistry(), DrainTimeout: 5 * time.Second})
	require.NoError(t, err)
	d.m = newDaemonMetrics(prometheus.NewRegistry())

	// Three running flows that the new file drops; each takes drain to
	// stop once cancelled.
	const drain = 600 * time.Millisecond
	for _, name := range []string{"X->Y1", "X->Y2", "X->Y3"} {
		ctx, cancel := context.WithCancel(context.Background())
		h := &flowHandle{fr: &flowRunner{flow: &config.Flow{}}, cancel: cancel, done: make(chan struct{})}
		go func() {
			<-ctx.Done()
			time.Sleep(drain)
			close(h.done)
		}()
		d.flows[name] = h
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		for _, h := range d.flows {
			<-h.done
		}
	}()
	start := time.Now()
	applied := make(chan error, 1)
	go func() { applied <- d.apply(ctx, cfg) }()

	// /readyz answers while the flows drain.
	time.Sleep(drain / 4)
	answered := make(chan int, 1)
	go func() {
		rec := httptest.NewRecorder()
		d.ready(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		answered <- rec.Code
	}()
	select {
	case <-answered:
	case err := <-applied:
		t.Fatalf("the reload finished (%v) before /readyz was asked: no drain to overlap", err)
	case <-time.After(drain / 2):
		t.Fatal("/readyz blocked while flows drained")
	}
	require.NoError(t, <-applied)
	took := time.Since(start)
	require.Less(t, took, 2*drain, "three flows drained one after another (%s)", took)
	require.Contains(t, d.flows, "A->B")
	for _, name := range []string{"X->Y1", "X->Y2", "X->Y3"} {
		require.NotContains(t, d.flows, name)
	}
}

// TestTargetOutage: while the target does not answer, /readyz reports the
// flow not ready, naming the cluster, once UnreachableAfter passed, and
// the unreachable gauge grows; the task is lost with the flow's group
// session (its coordinator is on the target), and its lag gauge stays and
// follows the source. When the target answers again, all goes back.
func TestTargetOutage(t *testing.T) {
	src, dst := newCluster(t), newCluster(t)
	produce := ordersOn(t, src)
	produce(100)
	ctx := context.Background()
	down := ktest.Outage(dst)
	reg := prometheus.NewRegistry()
	d, err := newDaemon(daemonOptions{
		Config: testConfig(t, src, dst), Log: zaptest.NewLogger(t), Level: zap.NewAtomicLevel(),
		Registry: reg, ListenAddress: "127.0.0.1:0", DrainTimeout: time.Second,
		UnreachableAfter: time.Second, LagInterval: 100 * time.Millisecond,
	})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		down.Store(false)
		d.Stop()
		require.NoError(t, <-done)
	}()
	base := "http://" + d.Addr()
	ready := func() (int, string) {
		resp, err := http.Get(base + "/readyz")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	gauge := func(name string, labels map[string]string) (float64, bool) {
		return seriesValue(t, base+"/metrics", name, labels)
	}
	lag := func() float64 {
		v, ok := gauge("mm2go_replicator_lag_records", map[string]string{"flow": "A->B", "topic": "orders"})
		if !ok {
			return -1 // no series
		}
		return v
	}
	unreachable := func() float64 {
		v, _ := gauge("mm2go_flow_cluster_unreachable_seconds", map[string]string{"flow": "A->B", "cluster": "target"})
		return v
	}
	require.Eventually(t, func() bool { code, _ := ready(); return code == http.StatusOK && lag() == 0 }, 20*time.Second, 50*time.Millisecond)

	down.Store(true)
	outage := time.Now()
	var body string
	require.Eventually(t, func() bool { _, body = ready(); return strings.Contains(body, "target B unreachable") }, 10*time.Second, 50*time.Millisecond)
	require.GreaterOrEqual(t, time.Since(outage), time.Second, "not before UnreachableAfter")
	require.Contains(t, body, "not ready: [A->B (target B unreachable for ")
	require.GreaterOrEqual(t, unreachable(), 0.5, "set at each check, every LagInterval")
	require.Eventually(t, func() bool {
		lost, _ := gauge("mm2go_flow_tasks_lost_total", map[string]string{"flow": "A->B"})
		running, _ := gauge("mm2go_flow_tasks", map[string]string{"flow": "A->B"})
		return lost == 1 && running == 0
	}, 20*time.Second, 50*time.Millisecond, "the task lost with the group session, its heartbeats unanswered")
	produce(50)
	require.Eventually(t, func() bool { return lag() == 50 }, 10*time.Second, 50*time.Millisecond,
		"the lag of the lost task follows the source while the target is down")

	down.Store(false)
	require.Eventually(t, func() bool { code, _ := ready(); return code == http.StatusOK && lag() == 0 && unreachable() == 0 },
		20*time.Second, 50*time.Millisecond)
}

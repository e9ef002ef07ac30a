package main

// The tests in this file hold the files in deploy/ to the code: every metric
// and label the Grafana dashboard and the Prometheus alert rules query exists
// in /metrics of a running daemon; the rules load the way `promtool check
// rules` loads them; the systemd unit passes `systemd-analyze verify`; the
// environment file passes only flags mm2go has; every key the example
// properties file documents loads.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.yaml.in/yaml/v3"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/internal/ktest"
)

// deployDir is the repository's deploy/ directory, seen from this package.
const deployDir = "../../deploy"

// isTargetSeries reports whether Prometheus records the series itself for
// every scrape target; such a series is never in /metrics.
func isTargetSeries(name string) bool {
	switch name {
	case "up", "scrape_duration_seconds", "scrape_samples_scraped":
		return true
	}
	return false
}

// isTargetLabel reports whether Prometheus attaches the label to every
// scraped series (the target's labels); it is never in /metrics.
func isTargetLabel(name string) bool {
	return name == "job" || name == "instance"
}

// metricUse is a metric a query selects, with the labels the query relies on
// it having: those its matchers name and the "by" labels of the aggregations
// around it.
type metricUse struct {
	where  string
	metric string
	labels []string
}

// TestDeployMetricsExist runs a daemon on two kfake clusters, provokes the
// events behind the metrics that appear only when something happens (a flow
// failure, a refused record, source records deleted before they were copied,
// failed and broken connections, a failing worker, checkpoint and heartbeat
// errors), and checks that every metric and label the dashboard and the
// alert rules use is in its /metrics.
func TestDeployMetricsExist(t *testing.T) {
	uses := append(dashboardUses(t), alertUses(t)...)
	require.NotEmpty(t, uses)

	ctx := context.Background()
	src, dst := newCluster(t), newCluster(t)
	seed := func() *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(src.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		require.NoError(t, err)
		return cl
	}
	produce := func(cl *kgo.Client, partition int32, n int) {
		t.Helper()
		var rs []*kgo.Record
		for i := range n {
			rs = append(rs, &kgo.Record{Topic: "orders", Partition: partition, Value: []byte{byte(i)}})
		}
		require.NoError(t, cl.ProduceSync(ctx, rs...).FirstErr())
	}
	cl := seed()
	adm := kadm.NewClient(cl)
	_, err := adm.CreateTopic(ctx, 2, 1, nil, "orders")
	require.NoError(t, err)
	produce(cl, 0, 50)
	produce(cl, 1, 50)
	// A consumer group with committed offsets, so that checkpoints,
	// translations and group-offset sync have something to work on.
	offs := make(kadm.Offsets)
	offs.Add(kadm.Offset{Topic: "orders", Partition: 0, At: 40, LeaderEpoch: -1})
	offs.Add(kadm.Offset{Topic: "orders", Partition: 1, At: 40, LeaderEpoch: -1})
	_, err = adm.CommitOffsets(ctx, "billing", offs)
	require.NoError(t, err)
	// Closed now, so that the broken connection below hits the daemon's clients.
	cl.Close()
	// On the target the group is further already: group-offset sync skips
	// it (would_rewind) instead of rewinding it.
	dcl, err := kgo.NewClient(kgo.SeedBrokers(dst.ListenAddrs()...))
	require.NoError(t, err)
	// (The remote topic must exist for the commit; mm2go finds it there.)
	_, err = kadm.NewClient(dcl).CreateTopic(ctx, 2, 1, nil, "A.orders")
	require.NoError(t, err)
	ahead := make(kadm.Offsets)
	ahead.Add(kadm.Offset{Topic: "A.orders", Partition: 0, At: 45, LeaderEpoch: -1})
	resp, err := kadm.NewClient(dcl).CommitOffsets(ctx, "billing", ahead)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	dcl.Close()

	// Three seed brokers nobody listens on before the live one: kgo starts
	// at a random seed, so the daemon's clients (a dozen) fail to connect
	// now and then (kgo connect errors) and go on with the live seed.
	deadSeeds := ktest.DeadAddrs(t, 3)
	seeds := func(c *kfake.Cluster) string {
		return strings.Join(append(slices.Clone(deadSeeds), c.ListenAddrs()...), ",")
	}

	// The flow's first start fails: mm2go cannot create its progress topic.
	dst.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.CreateTopics}, Topic: "mm2-offsets.A.internal", Err: kerr.UnknownServerError})
	// The target refuses a record once: record_too_large, a stalled partition.
	dst.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "A.orders", Err: kerr.MessageTooLarge})
	// A heartbeat write fails once.
	dst.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "heartbeats", Err: kerr.TopicAuthorizationFailed})
	// The checkpoints topic cannot be created: the checkpoint worker fails
	// and is restarted while replication goes on (three faults, as the
	// first may hit the flow's failing first start).
	dst.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.CreateTopics}, Topic: "A.checkpoints.internal", Err: kerr.UnknownServerError, Count: 3})
	// Listing the source's groups fails: a checkpoint error (three faults:
	// the first may hit the checkpointer of the flow's failing first start,
	// which is stopped before it counts anything).
	src.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ListGroups}, TopLevel: true, Err: kerr.UnknownServerError, Count: 3})

	props := []string{
		"clusters = A, B",
		"A.bootstrap.servers = " + seeds(src),
		"B.bootstrap.servers = " + seeds(dst),
		"A->B.enabled = true",
		"A->B.topics = orders",
		"A->B.sync.group.offsets.enabled = true",
		"replication.factor = 1",
		"offset-syncs.topic.replication.factor = 1",
		"checkpoints.topic.replication.factor = 1",
		"heartbeats.topic.replication.factor = 1",
		"B.offset.storage.replication.factor = 1",
		"B.offset.flush.interval.ms = 100",
		"refresh.topics.interval.seconds = 1",
		"refresh.groups.interval.seconds = 1",
		"emit.checkpoints.interval.seconds = 1",
		"sync.group.offsets.interval.seconds = 1",
	}
	cfg, _, err := config.Parse([]byte(strings.Join(props, "\n")), t.TempDir())
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	var logs lockedBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon log:\n%s", logs.String())
		}
	})
	log, lvl, err := newLogger(&logs, "info", logJSON, reg)
	require.NoError(t, err)
	d, err := newDaemon(daemonOptions{
		Config: cfg, Log: log, Level: lvl, Registry: reg, ListenAddress: "127.0.0.1:0",
		DrainTimeout: 5 * time.Second, PartitionMetrics: true,
	})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		d.Stop()
		require.NoError(t, <-done)
	}()
	metricsURL := "http://" + d.Addr() + "/metrics"
	value := func(name string, match map[string]string) (float64, bool) {
		return seriesValue(t, metricsURL, name, match)
	}

	// The flow restarted after its failed start and copied everything.
	require.Eventually(t, func() bool {
		n, _ := value("mm2go_replicator_records_total", map[string]string{"flow": "A->B", "topic": "orders"})
		return n == 100
	}, time.Minute, 100*time.Millisecond) // the flow's group may rebalance while a loaded machine starves it
	restarts, ok := value("mm2go_flow_restarts_total", map[string]string{"flow": "A->B"})
	require.True(t, ok)
	require.GreaterOrEqual(t, restarts, 1.0)

	// Source records deleted by retention while partition 0 is stalled
	// are counted as lost once the partition is retried.
	refuse := dst.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "A.orders", Partitions: []int32{0}, Err: kerr.MessageTooLarge, Count: -1})
	tooLarge := map[string]string{"flow": "A->B", "reason": "record_too_large"}
	before, _ := value("mm2go_replicator_errors_total", tooLarge)
	cl = seed()
	defer cl.Close()
	produce(cl, 0, 10) // offsets 50..59, refused by the target
	// Stalled once the target refused a single record (the batches mode
	// first sends a refused batch again in halves).
	require.Eventually(t, func() bool {
		n, _ := value("mm2go_replicator_errors_total", tooLarge)
		return n > before
	}, 20*time.Second, 50*time.Millisecond)
	require.NoError(t, src.DeleteRecords("orders", 0, 60))
	produce(cl, 0, 5) // offsets 60..64
	refuse.Remove()
	require.Eventually(t, func() bool {
		n, _ := value("mm2go_replicator_source_records_lost_total", map[string]string{"flow": "A->B", "topic": "orders"})
		return n > 0
	}, 30*time.Second, 100*time.Millisecond)

	// The source broker drops the next connection that asks for metadata
	// (topic discovery does every second): kgo read errors and disconnects.
	src.ControlKey(int16(kmsg.Metadata), func(kmsg.Request) (kmsg.Response, error, bool) {
		return nil, errors.New("test: drop the connection"), true
	})

	deadline := time.Now().Add(60 * time.Second)
	missing := missingUses(uses, scrape(t, metricsURL))
	for len(missing) > 0 && time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
		missing = missingUses(uses, scrape(t, metricsURL))
	}
	require.Empty(t, missing, "used by deploy/ but not in /metrics")
}

// missingUses returns one line per use whose metric or label is not in the
// scrape.
func missingUses(uses []metricUse, scraped map[string]map[string]bool) []string {
	var out []string
	for _, u := range uses {
		if isTargetSeries(u.metric) {
			continue
		}
		have, ok := scraped[u.metric]
		if !ok {
			out = append(out, fmt.Sprintf("%s: metric %s", u.where, u.metric))
			continue
		}
		for _, l := range u.labels {
			if !isTargetLabel(l) && !have[l] {
				out = append(out, fmt.Sprintf("%s: label %q of %s", u.where, l, u.metric))
			}
		}
	}
	return out
}

// TestMissingUses checks the comparison itself, so that the end-to-end test
// cannot pass by comparing nothing.
func TestMissingUses(t *testing.T) {
	scraped := map[string]map[string]bool{
		"mm2go_flow_up":             {"flow": true},
		"mm2go_x_seconds_bucket":    {"flow": true, "le": true},
		"process_cpu_seconds_total": {},
	}
	tests := []struct {
		name string
		uses []metricUse
		want []string
	}{
		{"present with its labels", []metricUse{{"q", "mm2go_flow_up", []string{"flow", "instance"}}}, nil},
		{"target series and labels", []metricUse{{"q", "up", []string{"job"}}, {"q", "process_cpu_seconds_total", []string{"job", "instance"}}}, nil},
		{"histogram buckets", []metricUse{{"q", "mm2go_x_seconds_bucket", []string{"flow", "le"}}}, nil},
		{"unknown metric", []metricUse{{"q", "mm2go_flow_down", nil}}, []string{"q: metric mm2go_flow_down"}},
		{"unknown label", []metricUse{{"q", "mm2go_flow_up", []string{"topic"}}}, []string{`q: label "topic" of mm2go_flow_up`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, missingUses(tt.uses, scraped))
		})
	}
}

// lockedBuffer is an io.Writer for the daemon's log that tests can read.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// scrape reads /metrics and returns every series name (with _bucket, _sum
// and _count for histograms and summaries) and the label names it has.
func scrape(t *testing.T, url string) map[string]map[string]bool {
	t.Helper()
	out := make(map[string]map[string]bool)
	for _, mf := range scrapeFamilies(t, url) {
		names := []string{mf.GetName()}
		extra := map[string]string{}
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			names = []string{mf.GetName() + "_bucket", mf.GetName() + "_sum", mf.GetName() + "_count"}
			extra[mf.GetName()+"_bucket"] = "le"
		case dto.MetricType_SUMMARY:
			names = append(names, mf.GetName()+"_sum", mf.GetName()+"_count")
			extra[mf.GetName()] = "quantile"
		}
		for _, n := range names {
			ls := make(map[string]bool)
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					ls[lp.GetName()] = true
				}
			}
			if e, ok := extra[n]; ok {
				ls[e] = true
			}
			out[n] = ls
		}
	}
	return out
}

func scrapeFamilies(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return mfs
}

// seriesValue returns the value of the counter or gauge series of name whose
// labels include match.
func seriesValue(t *testing.T, url, name string, match map[string]string) (float64, bool) {
	t.Helper()
	mf, ok := scrapeFamilies(t, url)[name]
	if !ok {
		return 0, false
	}
	for _, m := range mf.GetMetric() {
		have := make(map[string]string)
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		matches := true
		for k, v := range match {
			matches = matches && have[k] == v
		}
		if !matches {
			continue
		}
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue(), true
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// grafanaVar matches Grafana's variable forms: $name, ${name}, ${name:fmt}.
var grafanaVar = regexp.MustCompile(`\$\{?(\w+)(?::\w+)?\}?`)

// promQL replaces Grafana's variables in expr with what Grafana would send:
// a duration for the interval variables, a regex matching everything for
// the dashboard's own variables (all of which are used in =~ matchers).
func promQL(expr string) string {
	return grafanaVar.ReplaceAllStringFunc(expr, func(v string) string {
		name := grafanaVar.FindStringSubmatch(v)[1]
		switch name {
		case "__rate_interval", "__interval", "__range":
			return "5m"
		default:
			return ".*"
		}
	})
}

// labelValues matches a Grafana variable query label_values(selector, label).
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

// dashboardUses parses every panel query and variable query of the
// dashboard.
func dashboardUses(t *testing.T) []metricUse {
	t.Helper()
	var dash dashboard
	b, err := os.ReadFile(filepath.Join(deployDir, "grafana", "mm2go.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &dash))
	var uses []metricUse
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			where := fmt.Sprintf("dashboard panel %q query %s", p.Title, tg.RefID)
			uses = append(uses, exprUses(t, where, promQL(tg.Expr))...)
		}
	}
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		where := fmt.Sprintf("dashboard variable %q", v.Name)
		m := labelValues.FindStringSubmatch(v.Query.Query)
		require.NotNil(t, m, "%s: want label_values(selector, label), got %q", where, v.Query.Query)
		us := exprUses(t, where, promQL(m[1]))
		require.Len(t, us, 1, where)
		us[0].labels = append(us[0].labels, m[2])
		uses = append(uses, us...)
	}
	return uses
}

// dashboard is the part of Grafana's dashboard JSON the tests read.
type dashboard struct {
	UID    string `json:"uid"`
	Title  string `json:"title"`
	Panels []struct {
		ID         int             `json:"id"`
		Type       string          `json:"type"`
		Title      string          `json:"title"`
		Datasource json.RawMessage `json:"datasource"`
		GridPos    struct{ H, W, X, Y int }
		Targets    []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name  string     `json:"name"`
			Type  string     `json:"type"`
			Query queryField `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// UnmarshalJSON accepts a variable's query both as Grafana's object form and
// as a plain string (the datasource variable's "prometheus").
func (q *queryField) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		q.Query = s
		return nil
	}
	type plain queryField
	return json.Unmarshal(b, (*plain)(q))
}

type queryField struct {
	Query string `json:"query"`
}

// alertUses parses every rule of the alert rules file.
func alertUses(t *testing.T) []metricUse {
	t.Helper()
	groups := loadRules(t)
	var uses []metricUse
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			uses = append(uses, exprUses(t, "alert "+r.Alert, r.Expr)...)
		}
	}
	return uses
}

// loadRules loads deploy/prometheus/alerts.yml as `promtool check rules`
// does: rulefmt.ParseFile with unknown fields rejected, UTF-8 names and
// the default PromQL parser, which checks every expression, label and
// annotation template.
func loadRules(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	groups, errs := rulefmt.ParseFile(filepath.Join(deployDir, "prometheus", "alerts.yml"), false,
		model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	require.Empty(t, errs)
	return groups
}

// exprUses returns the metrics expr selects, each with the labels its
// matchers name and the grouping labels of the aggregations around it.
func exprUses(t *testing.T, where, expr string) []metricUse {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	require.NoError(t, err, "%s: %s", where, expr)
	var uses []metricUse
	parser.Inspect(e, func(n parser.Node, path []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		u := metricUse{where: where, metric: vs.Name}
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel {
				if u.metric == "" && m.Type == labels.MatchEqual {
					u.metric = m.Value
				}
				continue
			}
			u.labels = append(u.labels, m.Name)
		}
		require.NotEmpty(t, u.metric, "%s: a selector without a metric name: %s", where, vs)
		for _, p := range path {
			if a, ok := p.(*parser.AggregateExpr); ok && !a.Without {
				u.labels = append(u.labels, a.Grouping...)
			}
		}
		uses = append(uses, u)
		return nil
	})
	require.NotEmpty(t, uses, "%s: no metric in %s", where, expr)
	return uses
}

// TestDeployAlertRules checks the rules file as `promtool check rules` would
// (see loadRules) and the conventions of ours: unique alert names, a
// severity, and summary, description and runbook annotations.
func TestDeployAlertRules(t *testing.T) {
	groups := loadRules(t)
	seen := make(map[string]bool)
	n := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			n++
			t.Run(r.Alert, func(t *testing.T) {
				require.NotEmpty(t, r.Alert, "only alerting rules: %s", r.Expr)
				require.False(t, seen[r.Alert], "duplicate alert name")
				seen[r.Alert] = true
				require.Contains(t, []string{"critical", "warning"}, r.Labels["severity"])
				for _, a := range []string{"summary", "description", "runbook"} {
					require.NotEmpty(t, strings.TrimSpace(r.Annotations[a]), "annotation %s", a)
				}
			})
		}
	}
	require.GreaterOrEqual(t, n, 8)
}

// TestDeployDashboard checks the dashboard's structure: unique panel ids,
// every query panel on the ${datasource} variable with distinct refIds,
// panels inside Grafana's 24-column grid, and the variables the queries use.
func TestDeployDashboard(t *testing.T) {
	var dash dashboard
	b, err := os.ReadFile(filepath.Join(deployDir, "grafana", "mm2go.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &dash))
	require.Equal(t, "mm2go", dash.UID)
	ids := make(map[int]bool)
	for _, p := range dash.Panels {
		require.False(t, ids[p.ID], "duplicate panel id %d", p.ID)
		ids[p.ID] = true
		require.LessOrEqual(t, p.GridPos.X+p.GridPos.W, 24, "panel %q", p.Title)
		if p.Type == "row" {
			continue
		}
		require.JSONEq(t, `{"type":"prometheus","uid":"${datasource}"}`, string(p.Datasource), "panel %q", p.Title)
		refs := make(map[string]bool)
		for _, tg := range p.Targets {
			require.False(t, refs[tg.RefID], "panel %q: duplicate refId %s", p.Title, tg.RefID)
			refs[tg.RefID] = true
		}
	}
	var vars []string
	for _, v := range dash.Templating.List {
		vars = append(vars, v.Name)
	}
	require.Equal(t, []string{"datasource", "job", "instance", "flow"}, vars)
}

// TestDeploySystemdUnit checks the unit's essentials, its stop timeout
// against mm2go's shutdown bound, and runs `systemd-analyze verify` on it
// where systemd is installed.
func TestDeploySystemdUnit(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployDir, "mm2go.service"))
	require.NoError(t, err)
	unit := string(b)
	settings := make(map[string][]string)
	for _, line := range strings.Split(unit, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		require.True(t, ok, "line %q", line)
		settings[k] = append(settings[k], v)
	}
	for k, want := range map[string]string{
		"Type":                     "notify",
		"User":                     "mm2go",
		"EnvironmentFile":          "-/etc/default/mm2go",
		"ExecStart":                "/usr/local/bin/mm2go -c /etc/mm2go/mm2.properties $MM2GO_OPTS",
		"ExecReload":               "/bin/kill -HUP $MAINPID",
		"Restart":                  "on-failure",
		"RestartPreventExitStatus": fmt.Sprint(exitUsage),
		"KillSignal":               "SIGTERM",
		"ProtectSystem":            "strict",
		"ProtectHome":              "yes",
		"PrivateTmp":               "yes",
		"NoNewPrivileges":          "yes",
		"CapabilityBoundingSet":    "",
		"RestrictAddressFamilies":  "AF_UNIX AF_INET AF_INET6",
		"MemoryDenyWriteExecute":   "yes",
	} {
		require.Equal(t, []string{want}, settings[k], k)
	}
	require.NotEmpty(t, settings["RestartSec"])
	require.NotEmpty(t, settings["LimitNOFILE"])

	// TimeoutStopSec must exceed the shutdown bound: the flows drain in
	// parallel, each within --drain-timeout, then the HTTP server gets 5s
	// (daemon.Run); 10s more cover closing the clients and slow hosts.
	fs := newFlagSetForTest()
	drain, err := time.ParseDuration(fs.Lookup("drain-timeout").DefValue)
	require.NoError(t, err)
	require.Len(t, settings["TimeoutStopSec"], 1)
	stop, err := time.ParseDuration(settings["TimeoutStopSec"][0])
	require.NoError(t, err)
	require.GreaterOrEqual(t, stop, drain+5*time.Second+10*time.Second)

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed; the checks above ran")
	}
	// verify needs the ExecStart binary to exist: point it at this test
	// binary, which changes nothing else in the unit.
	self, err := os.Executable()
	require.NoError(t, err)
	dir := t.TempDir()
	path := filepath.Join(dir, "mm2go.service")
	require.NoError(t, os.WriteFile(path, []byte(strings.ReplaceAll(unit, "/usr/local/bin/mm2go", self)), 0o644))
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	require.NoError(t, err, string(out))
	// verify exits 0 even for unknown keys and bad values; it only prints
	// them, so any output is a failure.
	require.Empty(t, strings.TrimSpace(string(out)))
}

// newFlagSetForTest returns a flag set with the flags every long-running
// command registers, for their defaults.
func newFlagSetForTest() *flag.FlagSet {
	var cf commonFlags
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	cf.register(fs, ":9464")
	return fs
}

// TestDeployEnvFile checks that MM2GO_OPTS in the environment file holds
// only flags mm2go accepts, and that every flag its comments document exists
// with the default they state.
func TestDeployEnvFile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployDir, "mm2go.env"))
	require.NoError(t, err)
	env := make(map[string]string)
	documented := regexp.MustCompile(`^#\s+--([a-z.\-]+)=(\S*)`)
	var flags [][2]string
	for _, line := range strings.Split(string(b), "\n") {
		if m := documented.FindStringSubmatch(line); m != nil {
			flags = append(flags, [2]string{m[1], m[2]})
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		require.True(t, ok, "line %q", line)
		env[k] = v
	}
	opts := strings.Fields(env["MM2GO_OPTS"])
	require.NotEmpty(t, opts)

	// The flags parse: run gets as far as reading the (missing) file.
	missing := filepath.Join(t.TempDir(), "missing.properties")
	var out bytes.Buffer
	code := run(append([]string{"-c", missing}, opts...), &out, &out)
	require.Equal(t, exitUsage, code, out.String())
	require.Contains(t, out.String(), "missing.properties")
	require.NotContains(t, out.String(), "flag provided but not defined")

	out.Reset()
	require.Equal(t, exitOK, run([]string{"run", "-h"}, &out, &out))
	help := out.String()
	require.NotEmpty(t, flags)
	for _, f := range flags {
		t.Run(f[0], func(t *testing.T) {
			entry := regexp.MustCompile(`(?m)^  -` + regexp.QuoteMeta(f[0]) + `[ \n](?:.*\n)?(?:\s+\t.*\n?)*`).FindString(help)
			require.NotEmpty(t, entry, "flag --%s not in `mm2go run -h`:\n%s", f[0], help)
			switch {
			case strings.HasPrefix(f[1], "ALIAS"), f[1] == "", f[1] == "0", f[1] == "false":
				// The flag package prints no default for zero values.
				require.NotContains(t, entry, "(default", "documented without a default")
			default:
				require.Regexp(t, `\(default "?`+regexp.QuoteMeta(f[1])+`"?\)`, entry)
			}
		})
	}
}

// TestDeployPropertiesFile loads the example properties file, then every
// commented-out "#key = value" line of it switched on one at a time (with
// the lines it needs, such as security.protocol for TLS keys): each must
// load without an unknown-key warning and without an error other than a
// missing certificate file under /etc/mm2go (the example host's).
func TestDeployPropertiesFile(t *testing.T) {
	path := filepath.Join(deployDir, "mm2.properties")
	var out bytes.Buffer
	require.Equal(t, exitOK, run([]string{"validate", "-c", path}, &out, &out), out.String())
	require.Contains(t, out.String(), "flow primary->secondary")

	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var active []string
	documented := regexp.MustCompile(`^#([A-Za-z0-9][^\s=]*) = ?(.*)$`)
	var lines []string
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case documented.MatchString(line):
			lines = append(lines, line)
		case !strings.HasPrefix(line, "#"):
			active = append(active, line)
		}
	}
	require.Greater(t, len(lines), 60)
	keys := make(map[string]bool)
	for _, line := range lines {
		m := documented.FindStringSubmatch(line)
		key, value := m[1], m[2]
		require.False(t, keys[key], "%s documented twice", key)
		keys[key] = true
		t.Run(key, func(t *testing.T) {
			data := slices.Clone(active)
			// Lines that only load together, and the protocol under
			// which TLS and SASL settings are checked at all.
			alias, rest, _ := strings.Cut(key, ".")
			switch {
			case strings.HasPrefix(key, "config.providers"):
				data = append(data, companions(lines, documented, "config.providers")...)
			case strings.HasPrefix(rest, "ssl.truststore."):
				data = append(data, alias+".security.protocol = SSL")
				data = append(data, companions(lines, documented, alias+".ssl.truststore.")...)
			case strings.HasPrefix(rest, "ssl.keystore."):
				data = append(data, alias+".security.protocol = SSL")
				data = append(data, companions(lines, documented, alias+".ssl.keystore.")...)
			case strings.HasPrefix(rest, "ssl."):
				data = append(data, alias+".security.protocol = SSL")
			case strings.HasPrefix(rest, "sasl."):
				data = append(data, alias+".security.protocol = SASL_PLAINTEXT")
				data = append(data, companions(lines, documented, alias+".sasl.")...)
			}
			if strings.Contains(strings.Join(data, "\n")+value, "${env:") && !strings.HasPrefix(key, "config.providers") {
				// A reference needs its provider and variable.
				data = append(data, "config.providers = env",
					"config.providers.env.class = org.apache.kafka.common.config.provider.EnvVarConfigProvider")
			}
			data = append(data, line[1:])
			for _, v := range regexp.MustCompile(`\$\{env:(\w+)\}`).FindAllStringSubmatch(strings.Join(data, "\n"), -1) {
				t.Setenv(v[1], "test-secret")
			}
			_, warns, err := config.Parse([]byte(strings.Join(data, "\n")), t.TempDir())
			for _, w := range warns {
				require.False(t, w.Key == key && strings.Contains(w.Message, "unknown"), "%s", w)
			}
			if err != nil {
				// The example's certificate files exist only on its host.
				for _, e := range strings.Split(err.Error(), "\n") {
					require.Regexp(t, `^[^:]+\.ssl\.(trust|key)store\.location: cannot read file /etc/mm2go/\S+ .*no such file or directory`, e)
				}
			}
		})
	}
}

// companions returns the documented lines whose key starts with prefix,
// switched on.
func companions(lines []string, documented *regexp.Regexp, prefix string) []string {
	var out []string
	for _, l := range lines {
		if m := documented.FindStringSubmatch(l); strings.HasPrefix(m[1], prefix) {
			out = append(out, l[1:])
		}
	}
	return out
}

// TestDeployKubernetes parses deploy/kubernetes/mm2go.yaml and holds it to
// the code: the ConfigMap's MM2 file loads, the container's arguments are
// flags mm2go has (each pod its own --instance-id), the probes and the
// Service and ServiceMonitor use the port mm2go listens on, the grace
// period covers the drain, and the PodDisruptionBudget, the Service and the
// ServiceMonitor select the Deployment's pods. The Dockerfile's entry point
// runs the same way.
func TestDeployKubernetes(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployDir, "kubernetes", "mm2go.yaml"))
	require.NoError(t, err)
	docs := map[string]map[string]any{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		kind, _ := d["kind"].(string)
		require.NotEmpty(t, kind)
		docs[kind] = d
	}
	for _, k := range []string{"ConfigMap", "Secret", "Deployment", "PodDisruptionBudget", "Service", "ServiceMonitor"} {
		require.Contains(t, docs, k)
	}
	get := func(v any, path ...any) any {
		t.Helper()
		for _, p := range path {
			switch k := p.(type) {
			case string:
				m, ok := v.(map[string]any)
				require.Truef(t, ok, "%v: not a map at %q", path, k)
				v = m[k]
			case int:
				l, ok := v.([]any)
				require.Truef(t, ok && len(l) > k, "%v: no item %d", path, k)
				v = l[k]
			}
		}
		return v
	}

	// The MM2 file loads.
	props := filepath.Join(t.TempDir(), "mm2.properties")
	require.NoError(t, os.WriteFile(props, []byte(get(docs["ConfigMap"], "data", "mm2.properties").(string)), 0o600))
	_, _, err = config.Load(props)
	require.NoError(t, err)

	dep := docs["Deployment"]
	require.GreaterOrEqual(t, get(dep, "spec", "replicas").(int), 2, "a standby")
	pod := get(dep, "spec", "template")
	c := get(pod, "spec", "containers", 0)
	var args []string
	for _, a := range get(c, "args").([]any) {
		args = append(args, strings.ReplaceAll(a.(string), "$(POD_NAME)", "mm2go-7d9f-abcde"))
	}
	require.Contains(t, args, "--instance-id=mm2go-7d9f-abcde", "each pod joins the flows' groups as itself")
	require.Equal(t, "metadata.name", get(c, "env", 0, "valueFrom", "fieldRef", "fieldPath"))
	require.Equal(t, "POD_NAME", get(c, "env", 0, "name"))
	// The arguments parse: mm2go gets as far as reading the file.
	i := slices.Index(args, "-c")
	require.Positive(t, i)
	require.Equal(t, "/etc/mm2go/mm2.properties", args[i+1])
	require.Equal(t, "/etc/mm2go/mm2.properties", get(c, "volumeMounts", 0, "mountPath"))
	missing := filepath.Join(t.TempDir(), "missing.properties")
	argv := slices.Clone(args)
	argv[i+1] = missing
	var out bytes.Buffer
	require.Equal(t, exitUsage, run(argv, &out, &out), out.String())
	require.Contains(t, out.String(), "missing.properties")

	port := get(c, "ports", 0, "containerPort").(int)
	require.Contains(t, args, fmt.Sprintf("--web.listen-address=:%d", port))
	require.Equal(t, "/healthz", get(c, "livenessProbe", "httpGet", "path"))
	require.Equal(t, "/readyz", get(c, "readinessProbe", "httpGet", "path"))
	require.Equal(t, "http", get(c, "ports", 0, "name"))
	require.Equal(t, "http", get(c, "readinessProbe", "httpGet", "port"))
	require.GreaterOrEqual(t, get(pod, "spec", "terminationGracePeriodSeconds").(int), 10+20, "--drain-timeout (10 s) and the clients' close")

	labels := get(pod, "metadata", "labels").(map[string]any)
	for _, sel := range []any{
		get(docs["PodDisruptionBudget"], "spec", "selector", "matchLabels"),
		get(docs["Service"], "spec", "selector"),
		get(dep, "spec", "selector", "matchLabels"),
	} {
		for k, v := range sel.(map[string]any) {
			require.Equal(t, v, labels[k], "selector %s", k)
		}
	}
	require.Equal(t, "http", get(docs["Service"], "spec", "ports", 0, "targetPort"))
	for k, v := range get(docs["ServiceMonitor"], "spec", "selector", "matchLabels").(map[string]any) {
		require.Equal(t, v, get(docs["Service"], "metadata", "labels").(map[string]any)[k])
	}
	require.Equal(t, "http", get(docs["ServiceMonitor"], "spec", "endpoints", 0, "port"))
	require.Equal(t, "/metrics", get(docs["ServiceMonitor"], "spec", "endpoints", 0, "path"))
	require.Equal(t, get(docs["Secret"], "metadata", "name"), get(pod, "spec", "volumes", 1, "secret", "secretName"))

	// The image's default command is the same daemon.
	df, err := os.ReadFile("../../Dockerfile")
	require.NoError(t, err)
	var cmd []string
	for _, line := range strings.Split(string(df), "\n") {
		if rest, ok := strings.CutPrefix(line, "CMD "); ok {
			require.NoError(t, json.Unmarshal([]byte(rest), &cmd))
		}
	}
	require.Equal(t, []string{"run", "-c", "/etc/mm2go/mm2.properties"}, cmd)
	require.Contains(t, string(df), "FROM scratch")
}

// TestDeployAlertsFire runs `promtool test rules` with the cases of
// testdata/alerts_test.yml on the shipped rules with their annotations
// removed: each alert fires in a case made for it, with the labels it
// names, and not where it must not. Every alert must have both kinds of
// case.
func TestDeployAlertsFire(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian's prometheus package; .ci/run installs it)")
	}
	raw, err := os.ReadFile(filepath.Join(deployDir, "prometheus", "alerts.yml"))
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Name  string           `yaml:"name"`
			Rules []map[string]any `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	alerts := make(map[string]bool)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			delete(r, "annotations")
			alerts[r["alert"].(string)] = true
		}
	}
	dir := t.TempDir()
	stripped, err := yaml.Marshal(rules)
	require.NoError(t, err)
	rulesPath := filepath.Join(dir, "rules.yml")
	require.NoError(t, os.WriteFile(rulesPath, stripped, 0o600))

	cases, err := os.ReadFile(filepath.Join("testdata", "alerts_test.yml"))
	require.NoError(t, err)
	var parsed struct {
		Tests []struct {
			AlertRuleTest []struct {
				AlertName string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	require.NoError(t, yaml.Unmarshal(cases, &parsed))
	fires, quiet := make(map[string]bool), make(map[string]bool)
	for _, tc := range parsed.Tests {
		for _, a := range tc.AlertRuleTest {
			require.True(t, alerts[a.AlertName], "a case for %s, which alerts.yml does not have", a.AlertName)
			if len(a.ExpAlerts) > 0 {
				fires[a.AlertName] = true
			} else {
				quiet[a.AlertName] = true
			}
		}
	}
	for name := range alerts {
		require.True(t, fires[name], "no case in which %s fires", name)
		require.True(t, quiet[name], "no case in which %s must not fire", name)
	}
	casesPath := filepath.Join(dir, "alerts_test.yml")
	require.NoError(t, os.WriteFile(casesPath, bytes.Replace(cases, []byte("[RULES]"), []byte("["+rulesPath+"]"), 1), 0o600))
	out, err := exec.Command(promtool, "test", "rules", casesPath).CombinedOutput()
	require.NoError(t, err, "promtool test rules:\n%s", out)
}

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// dashboardQueries returns every PromQL query of a Grafana dashboard: the
// panels' expressions and the template variables' queries.
func dashboardQueries(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var d any
	require.NoError(t, json.Unmarshal(data, &d))
	seen := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if e, ok := v["expr"].(string); ok && e != "" {
				seen[e] = true
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(d)
	out := make([]string, 0, len(seen))
	for e := range seen {
		out = append(out, e)
	}
	sort.Strings(out)
	return out
}

// constantByNature are dashboard queries whose value does not change while
// records are copied, in MM2 as in mm2go: the connectors and tasks a worker
// runs, whether it is rebalancing, its thread count. The test checks their
// values instead.
// The test's file runs one copying flow (3 connectors in MM2) and the
// reverse one for heartbeats only (MM2's heartbeat connector).
var constantByNature = map[string]float64{
	"kafka_connect_worker_connector_count":          4,
	"kafka_connect_coordinator_assigned_connectors": 4,
	"kafka_connect_worker_task_count":               1,
	"kafka_connect_coordinator_assigned_tasks":      1,
	"kafka_connect_worker_rebalance_rebalancing":    0,
	"jvm_threads_current":                           -1, // any positive number
}

// TestIntegrationMM2MetricNames runs every query of Strimzi's
// KafkaMirrorMaker2 dashboard (e2e/testdata/strimzi) in a real Prometheus
// that scrapes `mm2go --metrics.mm2-names` while it copies a topic written
// continuously and checkpoints a group committing on the source: every
// query answers, and every one that follows the copy moves. The labels
// Strimzi's PodMonitor adds from the pod (strimzi_io_kind,
// strimzi_io_cluster, kubernetes_pod_name) come from the scrape
// configuration, as docs/metrics.md tells operators to set them. The one
// query left out is container_cpu_usage_seconds_total: the kubelet's
// cAdvisor exports it for every container, MM2 does not.
func TestIntegrationMM2MetricNames(t *testing.T) { firstPassOnly(testMM2MetricNames)(t) }

func testMM2MetricNames(t *testing.T) {
	t.Parallel() // mostly waiting: it runs beside the other parallel tests
	e := newEnv(t)
	topic := e.topic("names")
	e.createTopic(topic, 3, nil)
	group := "g" + e.id

	ctx, cancel := context.WithCancel(e.ctx())
	defer cancel()
	done := make(chan struct{})
	// The producer's records are stamped 10 s in the past until the watch
	// below, then with the time they are written: the windowed minimums of
	// record age and latency drop when it switches.
	var behind atomic.Int64
	behind.Store(int64(10 * time.Second))
	go func() { // 200 records/s, and a group that reads them on the source
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			var recs []*kgo.Record
			for j := range 20 {
				recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(j % 3), Value: []byte(fmt.Sprintf("v-%d-%d", i, j)),
					Timestamp: time.Now().Add(-time.Duration(behind.Load()))})
			}
			if err := e.srcCl.ProduceSync(ctx, recs...).FirstErr(); err != nil && ctx.Err() == nil {
				t.Errorf("produce: %v", err)
				return
			}
			if i%10 == 0 {
				ends, err := e.srcAdm.ListEndOffsets(ctx, topic)
				if err == nil {
					_, _ = e.srcAdm.CommitOffsets(ctx, group, ends.Offsets())
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	defer func() { cancel(); <-done }()

	addr := freePort(t)
	e.start("-c", e.config(
		"emit.checkpoints.interval.seconds = 1",
		// The burst below takes seconds to copy, not one scrape interval:
		// records in flight and buffered bytes are seen by several scrapes.
		"mm2go.throttle.bytes.per.second = 8000000",
		"refresh.groups.interval.seconds = 1",
		"groups = "+group,
		fencingLine(),
	), "--web.listen-address", addr, "--metrics.mm2-names", "--lag-interval", "1s")
	p := startPrometheus(t, []promTarget{{addr: addr, labels: map[string]string{
		"strimzi_io_kind":     "KafkaMirrorMaker2",
		"strimzi_io_cluster":  "mm2go-e2e",
		"kubernetes_pod_name": "mm2go-0",
	}}})

	var queries []string
	for _, q := range dashboardQueries(t, "testdata/strimzi/strimzi-kafka-mirror-maker-2.json") {
		if strings.Contains(q, "container_cpu_usage_seconds_total") {
			continue
		}
		q = strings.NewReplacer("$strimzi_mirror_maker_cluster_name", "mm2go-e2e", "$kubernetes_namespace", "default").Replace(q)
		if v, ok := strings.CutPrefix(q, "query_result("); ok { // a template variable
			q = strings.TrimSuffix(v, ")")
		}
		if strings.HasPrefix(q, "kafka_connect_worker_connector_count{namespace=") {
			continue // the same variable with the namespace label of Kubernetes
		}
		queries = append(queries, q)
	}
	require.GreaterOrEqual(t, len(queries), 25, "the dashboard's queries")

	for _, q := range queries {
		eventually(t, 90*time.Second, "an answer to "+q, func() bool { return len(p.query(q)) > 0 })
	}
	// Watch for 35 s, more than one of Kafka's 30-s samples; 8 s in, the
	// producer's records turn current (the minimums drop), and a burst of
	// 50 MB gives the copy a backlog (lag, records in flight) to work off,
	// of records stamped an hour ago (their age and latency raise the
	// maximums).
	from := time.Now()
	time.Sleep(8 * time.Second)
	behind.Store(0)
	for range 10 {
		recs := make([]*kgo.Record, 0, 5000)
		for j := range 5000 {
			// Random values: zeros would compress to a few percent of the
			// throttle's bytes, and the burst would be copied between two
			// scrapes.
			big := make([]byte, 1024)
			rand.Read(big)
			recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(j % 3), Value: big, Timestamp: time.Now().Add(-time.Hour)})
		}
		require.NoError(t, e.srcCl.ProduceSync(ctx, recs...).FirstErr())
	}
	time.Sleep(time.Until(from.Add(35 * time.Second)))
	to := time.Now()
	var still []string
	for _, q := range queries {
		rs := p.queryRange(q, from, to)
		require.NotEmpty(t, rs, q)
		name := metricOf(q)
		if want, ok := constantByNature[name]; ok {
			for _, s := range rs {
				for _, v := range s.Values {
					if want < 0 {
						require.Positive(t, promValue(v[1]), q)
					} else {
						require.Equal(t, want, promValue(v[1]), q)
					}
				}
			}
			continue
		}
		if strings.Contains(name, "_min") { // and no larger than the maximum
			hi := p.queryRange(strings.Replace(q, "_min", "_max", 1), from, to)
			require.Len(t, hi, len(rs), q)
			for i, s := range rs {
				lo := promValue(s.Values[len(s.Values)-1][1])
				require.False(t, math.IsNaN(lo), q)
				require.LessOrEqual(t, lo, promValue(hi[i].Values[len(hi[i].Values)-1][1]), q)
			}
		}
		if !moved(rs) {
			still = append(still, q)
		}
	}
	require.Empty(t, still, "queries that did not move while records were copied")
}

// metricOf returns the first metric name of a query.
func metricOf(q string) string {
	for _, f := range strings.FieldsFunc(q, func(r rune) bool { return strings.ContainsRune("(){}, ", r) }) {
		if strings.HasPrefix(f, "kafka_") || strings.HasPrefix(f, "jvm_") {
			return f
		}
	}
	return ""
}

// moved reports whether any series of a range answer took two values.
func moved(rs []promSeries) bool {
	for _, s := range rs {
		for _, v := range s.Values[1:] {
			if promValue(v[1]) != promValue(s.Values[0][1]) {
				return true
			}
		}
	}
	return false
}

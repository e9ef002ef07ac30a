package mm2metrics

import (
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func TestWindow(t *testing.T) {
	nan := math.NaN()
	type rec struct {
		at int64
		v  float64
	}
	for _, tc := range []struct {
		name        string
		recs        []rec
		at          int64
		lo, hi, avg float64
		rate        float64
	}{
		{name: "empty", at: 1000, lo: nan, hi: nan, avg: nan, rate: 0},
		{name: "one sample", recs: []rec{{1000, 4}, {2000, 2}}, at: 3000, lo: 2, hi: 4, avg: 3, rate: 6.0 / 30},
		{name: "two samples", recs: []rec{{1000, 4}, {31_000, 10}}, at: 45_000, lo: 4, hi: 10, avg: 7, rate: 14.0 / 45},
		{name: "first expired", recs: []rec{{1000, 4}, {31_000, 10}}, at: 61_000, lo: 10, hi: 10, avg: 10, rate: 10.0 / 31},
		{name: "slot reused", recs: []rec{{1000, 4}, {61_000, 1}}, at: 62_000, lo: 1, hi: 1, avg: 1, rate: 1.0 / 30},
		{name: "all expired", recs: []rec{{1000, 4}}, at: 90_000, lo: nan, hi: nan, avg: nan, rate: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w window
			for _, r := range tc.recs {
				w.record(r.at, r.v)
			}
			lo, hi, avg := w.stats(tc.at)
			for _, c := range []struct{ got, want float64 }{{lo, tc.lo}, {hi, tc.hi}, {avg, tc.avg}} {
				if math.IsNaN(c.want) {
					require.True(t, math.IsNaN(c.got), "got %v, want NaN", c.got)
				} else {
					require.InDelta(t, c.want, c.got, 1e-9)
				}
			}
			require.InDelta(t, tc.rate, w.rate(tc.at), 1e-9)
		})
	}
}

// fakeOwn is mm2go's registry with one copying flow up running two tasks,
// one flow down, one emitting heartbeats only, and a consumer's and a
// producer's byte counters.
func fakeOwn() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	up := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "mm2go_flow_up", Help: "h"}, []string{"flow"})
	tasks := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "mm2go_flow_tasks", Help: "h"}, []string{"flow"})
	configured := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "mm2go_flow_tasks_configured", Help: "h"}, []string{"flow"})
	read := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mm2go_kgo_read_bytes_total", Help: "h"}, []string{"client_id", "node_id"})
	write := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mm2go_kgo_write_bytes_total", Help: "h"}, []string{"client_id", "node_id"})
	reg.MustRegister(up, tasks, configured, read, write)
	up.WithLabelValues("A->B").Set(1)
	up.WithLabelValues("B->A").Set(0)
	up.WithLabelValues("B->C").Set(1) // heartbeats only
	configured.WithLabelValues("A->B").Set(2)
	tasks.WithLabelValues("A->B").Set(2)
	read.WithLabelValues("A->B|mm2go|replication-consumer", "1").Add(100)
	read.WithLabelValues("A->B|mm2go|replication-consumer", "2").Add(50)
	read.WithLabelValues("A->B|mm2go|replication-producer", "1").Add(7)
	write.WithLabelValues("A->B|mm2go|replication-producer", "1").Add(300)
	return reg
}

func TestExporter(t *testing.T) {
	e := New(fakeOwn())
	clock := time.UnixMilli(1_000_000)
	e.now = func() time.Time { return clock }
	reg := prometheus.NewRegistry()
	reg.MustRegister(e)

	task := e.Task("A", "B", 0, 1000)
	var inflight atomic.Int64
	p := task.Partition("orders", "A.orders", 3, &inflight)
	p.Polled(clock, 250)
	inflight.Store(4)
	p.Acked(clock, 10, 500, 40)
	p.Acked(clock, 10, 300, 60)
	p.SetLag(7)
	task.Committed(3 * time.Millisecond)
	e.Checkpoint("A", "B", "g", "A.orders", 3, 12)

	want := `
# HELP kafka_connect_mirror_mirrorsourceconnector_record_count MirrorMaker 2's kafka_connect_mirror_mirrorsourceconnector_record_count, computed by mm2go (--metrics.mm2-names).
# TYPE kafka_connect_mirror_mirrorsourceconnector_record_count gauge
kafka_connect_mirror_mirrorsourceconnector_record_count{partition="3",source="A",target="B",topic="A.orders"} 20
# HELP kafka_connect_mirror_mirrorsourceconnector_replication_latency_ms_avg MirrorMaker 2's kafka_connect_mirror_mirrorsourceconnector_replication_latency_ms_avg, computed by mm2go (--metrics.mm2-names).
# TYPE kafka_connect_mirror_mirrorsourceconnector_replication_latency_ms_avg gauge
kafka_connect_mirror_mirrorsourceconnector_replication_latency_ms_avg{partition="3",source="A",target="B",topic="A.orders"} 50
# HELP kafka_consumer_fetch_manager_records_lag MirrorMaker 2's kafka_consumer_fetch_manager_records_lag, computed by mm2go (--metrics.mm2-names).
# TYPE kafka_consumer_fetch_manager_records_lag gauge
kafka_consumer_fetch_manager_records_lag{clientid="\"A->B|MirrorSourceConnector-0|replication-consumer\"",partition="3",topic="orders"} 7
# HELP kafka_connect_source_task_source_record_active_count MirrorMaker 2's kafka_connect_source_task_source_record_active_count, computed by mm2go (--metrics.mm2-names).
# TYPE kafka_connect_source_task_source_record_active_count gauge
kafka_connect_source_task_source_record_active_count{connector="\"MirrorSourceConnector\"",source="A",target="B",task="0"} 4
# HELP kafka_producer_buffer_available_bytes MirrorMaker 2's kafka_producer_buffer_available_bytes, computed by mm2go (--metrics.mm2-names).
# TYPE kafka_producer_buffer_available_bytes gauge
kafka_producer_buffer_available_bytes{clientid="\"A->B|connector-producer-MirrorSourceConnector-0\""} 840
# HELP kafka_connect_mirror_mirrorcheckpointconnector_checkpoint_latency_ms MirrorMaker 2's kafka_connect_mirror_mirrorcheckpointconnector_checkpoint_latency_ms, computed by mm2go (--metrics.mm2-names).
# TYPE kafka_connect_mirror_mirrorcheckpointconnector_checkpoint_latency_ms gauge
kafka_connect_mirror_mirrorcheckpointconnector_checkpoint_latency_ms{group="g",partition="3",source="A",target="B",topic="A.orders"} 12
# HELP kafka_connect_worker_connector_count MirrorMaker 2's kafka_connect_worker_connector_count, computed by mm2go (--metrics.mm2-names).
# TYPE kafka_connect_worker_connector_count gauge
kafka_connect_worker_connector_count 4
# HELP kafka_connect_worker_task_count MirrorMaker 2's kafka_connect_worker_task_count, computed by mm2go (--metrics.mm2-names).
# TYPE kafka_connect_worker_task_count gauge
kafka_connect_worker_task_count 2
# HELP kafka_connect_worker_rebalance_rebalancing MirrorMaker 2's kafka_connect_worker_rebalance_rebalancing, computed by mm2go (--metrics.mm2-names).
# TYPE kafka_connect_worker_rebalance_rebalancing gauge
kafka_connect_worker_rebalance_rebalancing 0
# HELP kafka_consumer_incoming_byte_total MirrorMaker 2's kafka_consumer_incoming_byte_total, computed by mm2go (--metrics.mm2-names).
# TYPE kafka_consumer_incoming_byte_total counter
kafka_consumer_incoming_byte_total{clientid="\"A->B|mm2go|replication-consumer\""} 150
# HELP kafka_producer_outgoing_byte_total MirrorMaker 2's kafka_producer_outgoing_byte_total, computed by mm2go (--metrics.mm2-names).
# TYPE kafka_producer_outgoing_byte_total counter
kafka_producer_outgoing_byte_total{clientid="\"A->B|mm2go|replication-producer\""} 300
`
	names := []string{
		sourcePrefix + "record_count", sourcePrefix + "replication_latency_ms_avg",
		"kafka_consumer_fetch_manager_records_lag", "kafka_connect_source_task_source_record_active_count",
		"kafka_producer_buffer_available_bytes", checkpointPrefix + "checkpoint_latency_ms",
		"kafka_connect_worker_connector_count", "kafka_connect_worker_task_count",
		"kafka_connect_worker_rebalance_rebalancing", "kafka_consumer_incoming_byte_total",
		"kafka_producer_outgoing_byte_total",
	}
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), names...))

	// The byte rate covers one whole sample at least: 800 bytes in 30 s.
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP kafka_connect_mirror_mirrorsourceconnector_byte_rate MirrorMaker 2's kafka_connect_mirror_mirrorsourceconnector_byte_rate, computed by mm2go (--metrics.mm2-names).
# TYPE kafka_connect_mirror_mirrorsourceconnector_byte_rate gauge
kafka_connect_mirror_mirrorsourceconnector_byte_rate{partition="3",source="A",target="B",topic="A.orders"} 26.666666666666668
`), sourcePrefix+"byte_rate"))

	// Series go with what they describe.
	task.Forget("A.orders", 3)
	e.ForgetCheckpoints("A", "B", "")
	n, err := testutil.GatherAndCount(reg, sourcePrefix+"record_count", checkpointPrefix+"checkpoint_latency_ms")
	require.NoError(t, err)
	require.Zero(t, n)
	// A task started again before the old one closed keeps its series.
	again := e.Task("A", "B", 0, 0)
	task.Close()
	n, err = testutil.GatherAndCount(reg, "kafka_connect_source_task_source_record_active_count")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	again.Close()
	n, err = testutil.GatherAndCount(reg, "kafka_connect_source_task_source_record_active_count")
	require.NoError(t, err)
	require.Zero(t, n)

	// A nil exporter records nothing and does not fail.
	var none *Exporter
	none.Task("A", "B", 0, 0).Partition("t", "A.t", 0, nil).Acked(clock, 1, 1, 1)
	none.Checkpoint("A", "B", "g", "A.t", 0, 1)
}

func TestRuntimeSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(New(prometheus.NewRegistry()))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
		if mf.GetName() == "jvm_memory_used_bytes" {
			for _, m := range mf.GetMetric() {
				require.Positive(t, m.GetGauge().GetValue(), m.String())
			}
		}
	}
	for _, name := range []string{"jvm_memory_used_bytes", "jvm_threads_current", "jvm_gc_collection_seconds"} {
		require.True(t, got[name], name)
	}
}

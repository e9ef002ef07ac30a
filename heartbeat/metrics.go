package heartbeat

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mm2go/mm2go/internal/metric"
)

// Error reasons, the values of the reason label of mm2go_heartbeat_errors_total.
// Keep the set small and stable: dashboards and alerts match on it.
const (
	reasonProduce = "produce"
)

// metrics are the heartbeat emitter's Prometheus metrics.
type metrics struct {
	records *prometheus.CounterVec
	last    *prometheus.GaugeVec
	errors  *prometheus.CounterVec
}

// newMetrics registers the metrics with reg; with a nil reg they are
// registered nowhere and count for nobody.
// Every flow's emitter, and every restart of one, shares the collectors
// registered first, each writing only its own flow label.
func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		records: metric.Shared(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mm2go_heartbeat_records_total",
			Help: "Heartbeat records the target acknowledged, by flow (MM2's heartbeat task writes one per emit.heartbeats.interval.seconds).",
		}, []string{"flow"})),
		last: metric.Shared(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mm2go_heartbeat_last_timestamp_seconds",
			Help: "Timestamp carried by the last heartbeat the target acknowledged, in seconds since the Unix epoch.",
		}, []string{"flow"})),
		errors: metric.Shared(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mm2go_heartbeat_errors_total",
			Help: "Heartbeat writes that failed, by flow and reason; every one is also logged and retried at the next interval.",
		}, []string{"flow", "reason"})),
	}
}

// init creates the flow's series at zero, so that a flow that never wrote a
// heartbeat shows up as such instead of being absent.
func (m *metrics) init(flow string) {
	m.records.WithLabelValues(flow)
}

func (m *metrics) written(flow string, ts time.Time) {
	m.records.WithLabelValues(flow).Inc()
	m.last.WithLabelValues(flow).Set(float64(ts.UnixMilli()) / 1000)
}

// stopped deletes the flow's last-heartbeat timestamp: this emitter no
// longer runs (another instance may run the flow's heartbeats now).
func (m *metrics) stopped(flow string) {
	m.last.DeleteLabelValues(flow)
}

func (m *metrics) error(flow, reason string) {
	m.errors.WithLabelValues(flow, reason).Inc()
}

package replicator

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Error reasons, the values of the reason label. Keep the set small and
// stable: dashboards and alerts match on it.
const (
	reasonProduce        = "produce"
	reasonRecordTooLarge = "record_too_large"
	reasonAuthorization  = "authorization"
	reasonTopicCreate    = "topic_create"
	reasonPartitions     = "partition_create"
	reasonDiscovery      = "discovery"
	reasonProgressWrite  = "progress_write"
	reasonFetch          = "fetch"
	reasonSourceGap      = "source_records_lost"
	reasonSourceRewound  = "source_rewound"
	reasonTopicDeleted   = "source_topic_deleted"
)

// metrics are the replicator's Prometheus metrics. A nil *metrics is valid
// and records nothing.
type metrics struct {
	records       *prometheus.CounterVec
	bytes         *prometheus.CounterVec
	lag           *prometheus.GaugeVec
	errors        *prometheus.CounterVec
	lost          *prometheus.CounterVec
	partitions    *prometheus.GaugeVec
	stalled       *prometheus.GaugeVec
	topicsCreated *prometheus.CounterVec
	flushes       *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	if reg == nil {
		return nil
	}
	f := promauto.With(reg)
	return &metrics{
		records: f.NewCounterVec(prometheus.CounterOpts{
			Name: "mm2go_replicator_records_total",
			Help: "Records the target acknowledged, by flow and source topic (replaces MM2's record-count).",
		}, []string{"flow", "topic"}),
		bytes: f.NewCounterVec(prometheus.CounterOpts{
			Name: "mm2go_replicator_bytes_total",
			Help: "Key, value and header bytes of records the target acknowledged, by flow and source topic (MM2's byte-count counts values only).",
		}, []string{"flow", "topic"}),
		lag: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mm2go_replicator_lag_records",
			Help: "Source offsets not yet acknowledged by the target, summed over the topic's partitions.",
		}, []string{"flow", "topic"}),
		errors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "mm2go_replicator_errors_total",
			Help: "Errors by reason; every one is also logged.",
		}, []string{"flow", "reason"}),
		lost: f.NewCounterVec(prometheus.CounterOpts{
			Name: "mm2go_replicator_source_records_lost_total",
			Help: "Source offsets removed by retention before they were copied.",
		}, []string{"flow", "topic"}),
		partitions: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mm2go_replicator_partitions",
			Help: "Source partitions assigned to the flow.",
		}, []string{"flow"}),
		stalled: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mm2go_replicator_partitions_stalled",
			Help: "Source partitions whose copying is paused after a write failure and retried with backoff.",
		}, []string{"flow"}),
		topicsCreated: f.NewCounterVec(prometheus.CounterOpts{
			Name: "mm2go_replicator_topics_created_total",
			Help: "Remote topics created on the target.",
		}, []string{"flow"}),
		flushes: f.NewCounterVec(prometheus.CounterOpts{
			Name: "mm2go_replicator_progress_flushes_total",
			Help: "Writes of source progress to the Connect offsets topic on the target.",
		}, []string{"flow"}),
	}
}

func (m *metrics) partitionMetrics(flow, topic string) partitionMetrics {
	if m == nil {
		return partitionMetrics{records: prometheus.NewCounter(prometheus.CounterOpts{Name: "unused"}), bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "unused"})}
	}
	return partitionMetrics{
		records: m.records.WithLabelValues(flow, topic),
		bytes:   m.bytes.WithLabelValues(flow, topic),
	}
}

func (m *metrics) error(flow, reason string) {
	if m != nil {
		m.errors.WithLabelValues(flow, reason).Inc()
	}
}

func (m *metrics) sourceLost(flow, topic string, n int64) {
	if m != nil {
		m.lost.WithLabelValues(flow, topic).Add(float64(n))
	}
}

func (m *metrics) setLag(flow, topic string, lag int64) {
	if m != nil {
		m.lag.WithLabelValues(flow, topic).Set(float64(lag))
	}
}

func (m *metrics) setPartitions(flow string, assigned, stalled int) {
	if m != nil {
		m.partitions.WithLabelValues(flow).Set(float64(assigned))
		m.stalled.WithLabelValues(flow).Set(float64(stalled))
	}
}

func (m *metrics) topicCreated(flow string) {
	if m != nil {
		m.topicsCreated.WithLabelValues(flow).Inc()
	}
}

func (m *metrics) flushed(flow string) {
	if m != nil {
		m.flushes.WithLabelValues(flow).Inc()
	}
}

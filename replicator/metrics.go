package replicator

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mm2go/mm2go/internal/metric"
)

// Error reasons, the values of the reason label. Keep the set small and
// stable: dashboards and alerts match on it.
const (
	reasonProduce         = "produce"
	reasonRecordTooLarge  = "record_too_large"
	reasonAuthorization   = "authorization"
	reasonTopicCreate     = "topic_create"
	reasonPartitions      = "partition_create"
	reasonDiscovery       = "discovery"
	reasonProgressWrite   = "progress_write"
	reasonFetch           = "fetch"
	reasonSourceGap       = "source_records_lost"
	reasonSourceRewound   = "source_rewound"
	reasonTopicDeleted    = "source_topic_deleted"
	reasonOffsetMap       = "offset_map"
	reasonOffsetSyncs     = "offset_syncs_write"
	reasonTargetTruncated = "target_truncated"
	reasonForeignRecords  = "foreign_records"
)

// metrics are the replicator's Prometheus metrics, shared by every
// replicator on the same registry (one per flow, rebuilt on restart). A nil
// *metrics is valid and records nothing.
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
	syncs         *prometheus.CounterVec
	segments      *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	if reg == nil {
		return nil
	}
	counter := func(o prometheus.CounterOpts, labels ...string) *prometheus.CounterVec {
		return metric.Shared(reg, prometheus.NewCounterVec(o, labels))
	}
	gauge := func(o prometheus.GaugeOpts, labels ...string) *prometheus.GaugeVec {
		return metric.Shared(reg, prometheus.NewGaugeVec(o, labels))
	}
	return &metrics{
		records: counter(prometheus.CounterOpts{
			Name: "mm2go_replicator_records_total",
			Help: "Records the target acknowledged, by flow and source topic (replaces MM2's record-count).",
		}, "flow", "topic"),
		bytes: counter(prometheus.CounterOpts{
			Name: "mm2go_replicator_bytes_total",
			Help: "Key, value and header bytes of records the target acknowledged, by flow and source topic (MM2's byte-count counts values only).",
		}, "flow", "topic"),
		lag: gauge(prometheus.GaugeOpts{
			Name: "mm2go_replicator_lag_records",
			Help: "Source offsets not yet acknowledged by the target, summed over the topic's partitions.",
		}, "flow", "topic"),
		errors: counter(prometheus.CounterOpts{
			Name: "mm2go_replicator_errors_total",
			Help: "Errors by reason; every one is also logged.",
		}, "flow", "reason"),
		lost: counter(prometheus.CounterOpts{
			Name: "mm2go_replicator_source_records_lost_total",
			Help: "Source offsets removed by retention before they were copied.",
		}, "flow", "topic"),
		partitions: gauge(prometheus.GaugeOpts{
			Name: "mm2go_replicator_partitions",
			Help: "Source partitions assigned to the flow.",
		}, "flow"),
		stalled: gauge(prometheus.GaugeOpts{
			Name: "mm2go_replicator_partitions_stalled",
			Help: "Source partitions whose copying is paused after a write failure and retried with backoff.",
		}, "flow"),
		topicsCreated: counter(prometheus.CounterOpts{
			Name: "mm2go_replicator_topics_created_total",
			Help: "Remote topics created on the target.",
		}, "flow"),
		flushes: counter(prometheus.CounterOpts{
			Name: "mm2go_replicator_progress_flushes_total",
			Help: "Writes of source progress to the Connect offsets topic on the target.",
		}, "flow"),
		syncs: counter(prometheus.CounterOpts{
			Name: "mm2go_replicator_offset_syncs_total",
			Help: "Records written to MM2's offset-syncs topic.",
		}, "flow"),
		segments: counter(prometheus.CounterOpts{
			Name: "mm2go_replicator_offset_map_segments_total",
			Help: "Segment records written to mm2go's offset map (one per run of contiguous offsets, rewritten as it grows).",
		}, "flow"),
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

func (m *metrics) flushWrote(flow string, syncs, segments int) {
	if m != nil {
		m.syncs.WithLabelValues(flow).Add(float64(syncs))
		m.segments.WithLabelValues(flow).Add(float64(segments))
	}
}

package replicator

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mm2go/mm2go/internal/metric"
)

// Error reasons, the values of the reason label. Keep the set small and
// stable: dashboards and alerts match on it.
const (
	reasonProduce         = "produce"
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
	reasonConfigSync      = "topic_config_sync"
	reasonACLSync         = "acl_sync"
	reasonSourceRecreated = "source_recreated"
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
	lagSeconds    *prometheus.GaugeVec
	partitionLag  *prometheus.GaugeVec
	topics        *prometheus.GaugeVec
	age           *prometheus.HistogramVec
	latency       *prometheus.HistogramVec
	configsSynced *prometheus.CounterVec
	aclsSynced    *prometheus.CounterVec
	aclsSkipped   *prometheus.CounterVec
	cfgOverrides  *prometheus.CounterVec
	blocked       *prometheus.GaugeVec
	batches       *prometheus.CounterVec
	throttled     *prometheus.CounterVec
	refetched     *prometheus.CounterVec
	txns          *prometheus.CounterVec
	txnSeconds    *prometheus.HistogramVec
	txnRecords    *prometheus.HistogramVec
}

// latencyBuckets are the buckets of the record age and replication latency
// histograms, in seconds: 1 ms to about 5 minutes.
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 2.5, 14)

// newMetrics registers the metrics with reg; with a nil reg they are
// registered nowhere and count for nobody.
func newMetrics(reg prometheus.Registerer) *metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return metric.Shared(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return metric.Shared(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels))
	}
	return &metrics{
		records: counter("mm2go_replicator_records_total",
			"Records the target acknowledged, by flow and source topic (replaces MM2's record-count).",
			"flow", "topic"),
		refetched: counter("mm2go_replicator_fetch_refetched_bytes_total",
			"Fetched bytes the batches copy mode dropped: a batch cut off at the end of a response (fetched again whole by the next request), or bytes an earlier response had brought (what the overlapping requests of mm2go.fetch.overlap.enabled cost on the link); summed over the flow's tasks in this process.",
			"flow"),
		throttled: counter("mm2go_replicator_throttled_seconds_total",
			"Time the copy waited to stay within mm2go.throttle.bytes.per.second (summed over the flow's tasks in this process).",
			"flow"),
		batches: counter("mm2go_replicator_batches_total",
			"Batches the target acknowledged in the batches copy mode (mm2go.copy.mode=batches), by flow and path: forwarded as fetched, or reencoded by mm2go.",
			"flow", "path"),
		bytes: counter("mm2go_replicator_bytes_total",
			"Key, value and header bytes of records the target acknowledged, by flow and source topic (MM2's byte-count counts values only); batches forwarded as fetched count their size as sent (compressed).",
			"flow", "topic"),
		lag: gauge("mm2go_replicator_lag_records",
			"Source offsets not yet acknowledged by the target, summed over the topic's partitions this task copies.",
			"flow", "topic", "task"),
		errors: counter("mm2go_replicator_errors_total",
			"Errors by reason; every one is also logged.",
			"flow", "reason"),
		lost: counter("mm2go_replicator_source_records_lost_total",
			"Source offsets removed by retention before they were copied.",
			"flow", "topic"),
		partitions: gauge("mm2go_replicator_partitions",
			"Source partitions the flow's task copies (on the instance running the task).",
			"flow", "task"),
		stalled: gauge("mm2go_replicator_partitions_stalled",
			"Source partitions whose copying is paused after a write failure and retried with backoff.",
			"flow", "task"),
		topicsCreated: counter("mm2go_replicator_topics_created_total",
			"Remote topics created on the target.",
			"flow"),
		flushes: counter("mm2go_replicator_progress_flushes_total",
			"Writes of source progress to the Connect offsets topic on the target.",
			"flow"),
		syncs: counter("mm2go_replicator_offset_syncs_total",
			"Records written to MM2's offset-syncs topic.",
			"flow"),
		lagSeconds: gauge("mm2go_replicator_lag_seconds",
			"Age of the oldest source record not yet copied, the largest over the topic's partitions this task copies (0 when caught up).",
			"flow", "topic", "task"),
		partitionLag: gauge("mm2go_replicator_partition_lag_records",
			"Source offsets not yet acknowledged by the target, per partition (dropped with --metrics.partitions=false).",
			"flow", "topic", "partition"),
		topics: gauge("mm2go_replicator_topics",
			"Source topics the flow's task copies partitions of.",
			"flow", "task"),
		age: metric.Shared(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mm2go_replicator_record_age_seconds",
			Help:    "Age of records when fetched from the source: now minus the record timestamp (MM2's record-age-ms).",
			Buckets: latencyBuckets,
		}, []string{"flow"})),
		latency: metric.Shared(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mm2go_replicator_replication_latency_seconds",
			Help:    "End-to-end latency: from the record timestamp on the source to the target's acknowledgement (MM2's replication-latency-ms).",
			Buckets: latencyBuckets,
		}, []string{"flow"})),
		configsSynced: counter("mm2go_replicator_topic_configs_synced_total",
			"Remote topics whose configs a topic-config sync round set from their source topic (every round counts every topic it altered).",
			"flow"),
		aclsSynced: counter("mm2go_replicator_acls_synced_total",
			"Topic ACL bindings an ACL sync round created on the target (every round creates every eligible binding again; Kafka ignores one that exists).",
			"flow"),
		cfgOverrides: counter("mm2go_replicator_topic_config_overrides_removed_total",
			"Values set on remote topics by someone else than mm2go that topic-config sync replaced with the source topic's (each topic and key is logged once per flow run; mm2go.sync.topic.configs.keep keeps them).",
			"flow"),
		aclsSkipped: counter("mm2go_replicator_acls_skipped_total",
			"Source topic ACLs of replicated topics an ACL sync round did not copy (mm2go.sync.topic.acls.mode; each is logged once per flow run).",
			"flow"),
		blocked: gauge("mm2go_replicator_partitions_blocked",
			"Source partitions not copied until an operator acts: their source topic was recreated or truncated after mm2go copied from it (reason source_recreated).",
			"flow", "task"),
		txns: counter("mm2go_replicator_transactions_total",
			"Transactions of an exactly-once flow (exactly.once.source.support=enabled) by result: committed, or aborted (after a write the target refused; the step is copied again).",
			"flow", "result"),
		txnSeconds: metric.Shared(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mm2go_replicator_transaction_seconds",
			Help:    "Time from an exactly-once flow's first record of a transaction to the end of its commit.",
			Buckets: latencyBuckets,
		}, []string{"flow"})),
		txnRecords: metric.Shared(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mm2go_replicator_transaction_records",
			Help:    "Copied records per committed transaction of an exactly-once flow.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}, []string{"flow"})),
		segments: counter("mm2go_replicator_offset_map_segments_total",
			"Segment records written to mm2go's offset map (one per run of contiguous offsets, rewritten as it grows).",
			"flow"),
	}
}

func (m *metrics) partitionMetrics(flow, topic string) partitionMetrics {
	m.lost.WithLabelValues(flow, topic) // at zero: see alertedReasons
	return partitionMetrics{
		records: m.records.WithLabelValues(flow, topic),
		bytes:   m.bytes.WithLabelValues(flow, topic),
	}
}

// Paths of mm2go_replicator_batches_total.
const (
	pathForwarded = "forwarded"
	pathReencoded = "reencoded"
)

func (m *metrics) batchSent(flow, path string) {
	m.batches.WithLabelValues(flow, path).Inc()
}

func (m *metrics) error(flow, reason string) {
	m.errors.WithLabelValues(flow, reason).Inc()
}

func (m *metrics) sourceLost(flow, topic string, n int64) {
	m.lost.WithLabelValues(flow, topic).Add(float64(n))
}

func (m *metrics) setLag(flow, topic, task string, lag int64) {
	m.lag.WithLabelValues(flow, topic, task).Set(float64(lag))
}

func (m *metrics) setPartitions(flow, task string, assigned, stalled int) {
	m.partitions.WithLabelValues(flow, task).Set(float64(assigned))
	m.stalled.WithLabelValues(flow, task).Set(float64(stalled))
}

func (m *metrics) topicCreated(flow string) {
	m.topicsCreated.WithLabelValues(flow).Inc()
}

func (m *metrics) refetchedAdd(flow string, n int) {
	if n > 0 {
		m.refetched.WithLabelValues(flow).Add(float64(n))
	}
}

func (m *metrics) throttledFor(flow string, d time.Duration) {
	m.throttled.WithLabelValues(flow).Add(d.Seconds())
}

// Results of mm2go_replicator_transactions_total.
const (
	txnCommitted = "committed"
	txnAborted   = "aborted"
)

func (m *metrics) txnEnded(flow, result string, took time.Duration, records int) {
	m.txns.WithLabelValues(flow, result).Inc()
	if result == txnCommitted {
		m.txnSeconds.WithLabelValues(flow).Observe(took.Seconds())
		m.txnRecords.WithLabelValues(flow).Observe(float64(records))
	}
}

func (m *metrics) flushed(flow string) {
	m.flushes.WithLabelValues(flow).Inc()
}

func (m *metrics) flushWrote(flow string, syncs, segments int) {
	m.syncs.WithLabelValues(flow).Add(float64(syncs))
	m.segments.WithLabelValues(flow).Add(float64(segments))
}

// observers returns the histogram observers of a flow.
func (m *metrics) observers(flow string) (age, latency prometheus.Observer) {
	return m.age.WithLabelValues(flow), m.latency.WithLabelValues(flow)
}

func (m *metrics) setLagSeconds(flow, topic, task string, s float64) {
	m.lagSeconds.WithLabelValues(flow, topic, task).Set(s)
}

func (m *metrics) setPartitionLag(flow, topic string, partition int32, lag int64) {
	m.partitionLag.WithLabelValues(flow, topic, strconv.Itoa(int(partition))).Set(float64(lag))
}

func (m *metrics) setTopics(flow, task string, n int) {
	m.topics.WithLabelValues(flow, task).Set(float64(n))
}

// forgetTopic deletes the gauges of a source topic the task no longer
// copies (deleted on the source, or no longer selected).
func (m *metrics) forgetTopic(flow, task, topic string, partitions []int32) {
	m.lag.DeleteLabelValues(flow, topic, task)
	m.lagSeconds.DeleteLabelValues(flow, topic, task)
	for _, p := range partitions {
		m.partitionLag.DeleteLabelValues(flow, topic, strconv.Itoa(int(p)))
	}
}

// forgetTask deletes the gauges of a flow's task, and the partition lag of
// the partitions it copied: the task stopped on this instance (the process
// stops, or the task moved to another instance, which exports them now).
// Counters stay: they only grow, and a task coming back adds to them.
func (m *metrics) forgetTask(flow, task string, parts []tp) {
	byTask := prometheus.Labels{"flow": flow, "task": task}
	for _, g := range []*prometheus.GaugeVec{m.lag, m.lagSeconds, m.partitions, m.stalled, m.topics, m.blocked} {
		g.DeletePartialMatch(byTask)
	}
	for _, k := range parts {
		m.partitionLag.DeleteLabelValues(flow, k.topic, strconv.Itoa(int(k.partition)))
	}
}

// alertedReasons are the error reasons the shipped alert rules take the
// increase of: their series exist at zero before the first error, since
// Prometheus sees no increase in a series whose first sample already
// counts it (one record too large would never alert).
var alertedReasons = []string{
	metric.ReasonRecordTooLarge, metric.ReasonAuthorization, reasonTargetTruncated, reasonForeignRecords,
	reasonSourceRewound, reasonSourceRecreated, reasonTopicCreate, reasonPartitions, reasonConfigSync, reasonACLSync,
}

// touch creates the flow's sync and alerted error series at zero, so that
// they are exported before the first sync round or error counts anything.
func (m *metrics) touch(flow, task string) {
	for _, r := range alertedReasons {
		m.errors.WithLabelValues(flow, r)
	}
	m.configsSynced.WithLabelValues(flow)
	m.aclsSynced.WithLabelValues(flow)
	m.aclsSkipped.WithLabelValues(flow)
	m.cfgOverrides.WithLabelValues(flow)
	m.blocked.WithLabelValues(flow, task)
}

func (m *metrics) configsSyncedAdd(flow string, n int) {
	if n > 0 {
		m.configsSynced.WithLabelValues(flow).Add(float64(n))
	}
}

func (m *metrics) aclsSyncedAdd(flow string, n int) {
	if n > 0 {
		m.aclsSynced.WithLabelValues(flow).Add(float64(n))
	}
}

func (m *metrics) configOverridesRemovedAdd(flow string, n int) {
	if n > 0 {
		m.cfgOverrides.WithLabelValues(flow).Add(float64(n))
	}
}

func (m *metrics) aclsSkippedAdd(flow string, n int) {
	if n > 0 {
		m.aclsSkipped.WithLabelValues(flow).Add(float64(n))
	}
}

func (m *metrics) setBlocked(flow, task string, n int) {
	m.blocked.WithLabelValues(flow, task).Set(float64(n))
}

package replicator

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mm2go/mm2go/internal/metric"
)

// Error reasons of topic-config sync, ACL sync and source topic recreation
// (values of the reason label of mm2go_replicator_errors_total).
const (
	reasonConfigSync      = "topic_config_sync"
	reasonACLSync         = "acl_sync"
	reasonSourceRecreated = "source_recreated"
)

// syncMetrics are the metrics of topic-config sync, ACL sync and recreated
// source topics. Like metrics, they are shared by every replicator on the
// registry, and a nil *syncMetrics records nothing.
type syncMetrics struct {
	configsSynced *prometheus.CounterVec
	aclsSynced    *prometheus.CounterVec
	blocked       *prometheus.GaugeVec
}

func newSyncMetrics(reg prometheus.Registerer) *syncMetrics {
	if reg == nil {
		return nil
	}
	return &syncMetrics{
		configsSynced: metric.Shared(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mm2go_replicator_topic_configs_synced_total",
			Help: "Remote topics whose configs a topic-config sync round set from their source topic (every round counts every topic it altered).",
		}, []string{"flow"})),
		aclsSynced: metric.Shared(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mm2go_replicator_acls_synced_total",
			Help: "Topic ACL bindings an ACL sync round created on the target (every round creates every eligible binding again; Kafka ignores one that exists).",
		}, []string{"flow"})),
		blocked: metric.Shared(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mm2go_replicator_partitions_blocked",
			Help: "Source partitions not copied until an operator acts: their source topic was recreated or truncated after mm2go copied from it (reason source_recreated).",
		}, []string{"flow"})),
	}
}

// touch creates the flow's series at zero, so that they are exported
// before the first sync round counts anything.
func (m *syncMetrics) touch(flow string) {
	if m != nil {
		m.configsSynced.WithLabelValues(flow)
		m.aclsSynced.WithLabelValues(flow)
		m.blocked.WithLabelValues(flow)
	}
}

func (m *syncMetrics) configsSyncedAdd(flow string, n int) {
	if m != nil && n > 0 {
		m.configsSynced.WithLabelValues(flow).Add(float64(n))
	}
}

func (m *syncMetrics) aclsSyncedAdd(flow string, n int) {
	if m != nil && n > 0 {
		m.aclsSynced.WithLabelValues(flow).Add(float64(n))
	}
}

func (m *syncMetrics) setBlocked(flow string, n int) {
	if m != nil {
		m.blocked.WithLabelValues(flow).Set(float64(n))
	}
}

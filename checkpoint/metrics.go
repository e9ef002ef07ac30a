package checkpoint

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mm2go/mm2go/internal/metric"
)

// Error reasons, the values of the reason label of
// mm2go_checkpoint_errors_total. Keep the set small and stable: dashboards
// and alerts match on it.
const (
	reasonGroupList    = "group_list"           // listing source groups or their offsets for discovery
	reasonOffsetFetch  = "offset_fetch"         // fetching committed offsets (source or target)
	reasonProduce      = "produce"              // writing checkpoints
	reasonEncode       = "encode"               // a group or topic name too long for a checkpoint
	reasonMapRead      = "offset_map_read"      // reading the offset map topic
	reasonMalformedMap = "offset_map_malformed" // an offset map record that does not decode
	reasonMalformed    = "checkpoint_malformed" // a checkpoint record that does not decode
	reasonDescribe     = "group_describe"       // describing target groups
	reasonTopicList    = "topic_list"           // listing target topics or their start offsets
	reasonCommit       = "commit"               // a commit the target refused for another reason than membership
	reasonMemberJoined = "member_joined"        // a member joined right after a successful commit
)

// SkipReason says why an offset was not committed to a target group. The
// values are also the reason label of
// mm2go_checkpoint_group_offsets_skipped_total.
type SkipReason string

const (
	// SkipActive means the group has members on the target.
	SkipActive SkipReason = "active"
	// SkipBecameActive means the broker refused the commit because a member
	// joined after the group was described.
	SkipBecameActive SkipReason = "became_active"
	// SkipWouldRewind means the target group has a larger offset; committing
	// would make it read records again.
	SkipWouldRewind SkipReason = "would_rewind"
	// SkipUpToDate means the target group already has this offset.
	SkipUpToDate SkipReason = "up_to_date"
	// SkipNotTranslated means the offset map knows nothing about the partition.
	SkipNotTranslated SkipReason = "not_translated"
	// SkipNotReplicated means the exact sync waits until replication has passed
	// the source group's committed offset (its translation is in mode
	// beyond).
	SkipNotReplicated SkipReason = "not_replicated"
)

// metrics are the checkpointer's Prometheus metrics.
type metrics struct {
	checkpoints  *prometheus.CounterVec
	translations *prometheus.CounterVec
	age          *prometheus.GaugeVec
	synced       *prometheus.CounterVec
	removed      *prometheus.CounterVec
	skipped      *prometheus.CounterVec
	segments     *prometheus.GaugeVec
	degraded     *prometheus.GaugeVec
	errors       *prometheus.CounterVec
	groups       *prometheus.GaugeVec
	lastEmit     *prometheus.GaugeVec
}

// newMetrics registers the metrics with reg; with a nil reg they are
// registered nowhere and count for nobody.
// Every flow's checkpointer, and every restart of one, registers the same
// collectors: the first registration wins and later checkpointers share it,
// each writing only its own flow label.
func newMetrics(reg prometheus.Registerer) *metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return metric.Shared(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return metric.Shared(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels))
	}
	return &metrics{
		checkpoints: counter("mm2go_checkpoint_checkpoints_total",
			"Checkpoint records the target acknowledged, by flow (MM2's checkpoint task).", "flow"),
		translations: counter("mm2go_checkpoint_translations_total",
			"Committed source offsets translated for checkpoints, by flow and how the translation was derived (exact, gap, beyond, before, approximate).", "flow", "mode"),
		lastEmit: gauge("mm2go_checkpoint_last_emit_timestamp_seconds",
			"When the flow last completed a checkpoint round (all selected groups fetched, translated and written), in seconds since the Unix epoch; it stops moving when checkpointing is stuck.", "flow"),
		age: gauge("mm2go_checkpoint_age_seconds",
			"Seconds since the newest checkpoint of the group was written, updated at every emission interval.", "flow", "group"),
		synced: counter("mm2go_checkpoint_group_offsets_synced_total",
			"Partition offsets committed into target consumer groups by group-offset sync.", "flow"),
		removed: counter("mm2go_checkpoint_group_offsets_removed_total",
			"Partition offsets the exact group-offset sync removed from target groups because their source group had members again.", "flow"),
		skipped: counter("mm2go_checkpoint_group_offsets_skipped_total",
			"Partition offsets group-offset sync did not commit, by reason (active, became_active, would_rewind, up_to_date, not_translated, not_replicated).", "flow", "reason"),
		segments: gauge("mm2go_checkpoint_index_segments",
			"Exact offset map segments held in memory by the translation index.", "flow"),
		degraded: gauge("mm2go_checkpoint_index_degraded_partitions",
			"Partitions whose oldest history was thinned out of memory and translates approximately (MM2's rule).", "flow"),
		errors: counter("mm2go_checkpoint_errors_total",
			"Errors by reason; every one is also logged, and periodic work is retried at the next interval.", "flow", "reason"),
		groups: gauge("mm2go_checkpoint_groups",
			"Source consumer groups the flow checkpoints.", "flow"),
	}
}

// init creates the flow's series at zero, so that a flow that never wrote a
// checkpoint shows up as such instead of being absent.
func (m *metrics) init(flow string) {
	// The alert on stale checkpoints takes the increase of the errors: at
	// zero before the first one, which Prometheus would not see as one.
	for _, r := range []string{reasonGroupList, reasonOffsetFetch, reasonProduce, reasonMapRead, metric.ReasonAuthorization, metric.ReasonTimeout} {
		m.errors.WithLabelValues(flow, r)
	}
	m.checkpoints.WithLabelValues(flow)
	m.synced.WithLabelValues(flow)
	m.removed.WithLabelValues(flow)
	m.segments.WithLabelValues(flow)
	m.degraded.WithLabelValues(flow)
	m.groups.WithLabelValues(flow)
}

// stopped deletes the flow's gauges: this checkpointer no longer runs (the
// flow was removed, or the task that runs it moved to another instance,
// which exports them now). Counters stay.
func (m *metrics) stopped(flow string) {
	byFlow := prometheus.Labels{"flow": flow}
	for _, g := range []*prometheus.GaugeVec{m.lastEmit, m.age, m.segments, m.degraded, m.groups} {
		g.DeletePartialMatch(byFlow)
	}
}

func (m *metrics) emitted(flow string) {
	m.lastEmit.WithLabelValues(flow).SetToCurrentTime()
}

func (m *metrics) written(flow string, n int) {
	m.checkpoints.WithLabelValues(flow).Add(float64(n))
}

func (m *metrics) translated(flow string, mode Mode) {
	m.translations.WithLabelValues(flow, mode.String()).Inc()
}

func (m *metrics) setAge(flow, group string, since time.Duration) {
	m.age.WithLabelValues(flow, group).Set(since.Seconds())
}

func (m *metrics) dropAge(flow, group string) {
	m.age.DeleteLabelValues(flow, group)
}

func (m *metrics) syncedOffsets(flow string, n int) {
	m.synced.WithLabelValues(flow).Add(float64(n))
}

func (m *metrics) removedOffsets(flow string, n int) {
	m.removed.WithLabelValues(flow).Add(float64(n))
}

func (m *metrics) skippedOffsets(flow string, reason SkipReason, n int) {
	if n > 0 {
		m.skipped.WithLabelValues(flow, string(reason)).Add(float64(n))
	}
}

func (m *metrics) setIndex(flow string, segments, degraded int) {
	m.segments.WithLabelValues(flow).Set(float64(segments))
	m.degraded.WithLabelValues(flow).Set(float64(degraded))
}

func (m *metrics) error(flow, reason string) {
	m.errors.WithLabelValues(flow, reason).Inc()
}

func (m *metrics) setGroups(flow string, n int) {
	m.groups.WithLabelValues(flow).Set(float64(n))
}

package verify

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mm2go/mm2go/internal/metric"
)

// Metrics are the series of a continuous verification (mm2go verify
// --follow): what each round compared, and how far each partition is
// verified, so that a dashboard shows "verified up to offset X".
type Metrics struct {
	records *prometheus.CounterVec
	offset  *prometheus.GaugeVec
	rounds  *prometheus.CounterVec
	last    *prometheus.GaugeVec
}

// NewMetrics registers the metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	return &Metrics{
		records: metric.Shared(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mm2go_verify_records_total",
			Help: "Records compared by mm2go verify --follow, by result: matched, missing, duplicated, differing, extra (every result but matched is a finding, logged with its offsets).",
		}, []string{"flow", "topic", "result"})),
		offset: metric.Shared(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mm2go_verify_source_offset",
			Help: "The source offset up to which a partition is verified (exclusive): every record below it was compared with its copy or explained.",
		}, []string{"flow", "topic", "partition"})),
		rounds: metric.Shared(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mm2go_verify_rounds_total",
			Help: "Rounds of mm2go verify --follow, by outcome: ok, findings, error (a cluster or partition could not be read).",
		}, []string{"flow", "outcome"})),
		last: metric.Shared(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mm2go_verify_last_round_timestamp_seconds",
			Help: "When the last round of mm2go verify --follow ended, in seconds since the Unix epoch.",
		}, []string{"flow"})),
	}
}

// Round records a round's report (nil when the round failed).
func (m *Metrics) Round(flow string, rep *Report) {
	m.last.WithLabelValues(flow).Set(float64(time.Now().UnixMilli()) / 1000)
	if rep == nil {
		m.rounds.WithLabelValues(flow, "error").Inc()
		return
	}
	outcome := "ok"
	for i := range rep.Partitions {
		p := &rep.Partitions[i]
		switch {
		case p.Error != "":
			outcome = "error"
		case !p.OK() && outcome == "ok":
			outcome = "findings"
		}
		for _, r := range []struct {
			result string
			n      int64
		}{{"matched", p.Matched}, {"missing", p.Missing.Count}, {"duplicated", p.Duplicated.Count},
			{"differing", p.Differing.Count}, {"extra", p.Extra.Count}} {
			c := m.records.WithLabelValues(flow, p.Topic, r.result) // every result exported from the start
			if r.n > 0 {
				c.Add(float64(r.n))
			}
		}
		if p.Error == "" {
			m.offset.WithLabelValues(flow, p.Topic, strconv.Itoa(int(p.Partition))).Set(float64(p.SourceTo))
		}
	}
	m.rounds.WithLabelValues(flow, outcome).Inc()
}

package verify

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func TestMetricsRound(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	m.Round("A->B", &Report{Partitions: []Partition{
		{Topic: "t", Partition: 0, SourceTo: 40, Matched: 38, Missing: Finding{Count: 2}},
		{Topic: "t", Partition: 1, SourceTo: 7, Error: "read t[1]: unknown topic"},
	}})
	m.Round("A->B", &Report{Partitions: []Partition{{Topic: "t", Partition: 0, SourceTo: 50, Matched: 10}}})
	m.Round("A->B", nil)
	require.Equal(t, 48.0, testutil.ToFloat64(m.records.WithLabelValues("A->B", "t", "matched")))
	require.Equal(t, 2.0, testutil.ToFloat64(m.records.WithLabelValues("A->B", "t", "missing")))
	require.Zero(t, testutil.ToFloat64(m.records.WithLabelValues("A->B", "t", "extra")))
	require.Equal(t, 50.0, testutil.ToFloat64(m.offset.WithLabelValues("A->B", "t", "0")))
	require.Zero(t, testutil.CollectAndCount(m.offset, "mm2go_verify_source_offset")-1, "a partition that failed has no offset")
	require.Equal(t, 2.0, testutil.ToFloat64(m.rounds.WithLabelValues("A->B", "error")), "the round with a partition not read, and the failed one")
	require.Equal(t, 1.0, testutil.ToFloat64(m.rounds.WithLabelValues("A->B", "ok")))
	require.Zero(t, testutil.ToFloat64(m.rounds.WithLabelValues("A->B", "findings")), "a partition error outranks findings")
}

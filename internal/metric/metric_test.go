package metric

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func TestShared(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "x_total", Help: "x"}
	a := Shared(reg, prometheus.NewCounterVec(opts, []string{"flow"}))
	b := Shared(reg, prometheus.NewCounterVec(opts, []string{"flow"}))
	require.Same(t, a, b)
	a.WithLabelValues("f").Inc()
	require.InDelta(t, 1, testGather(t, reg), 0)

	require.Panics(t, func() {
		Shared(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "other help"}, []string{"flow"}))
	})
	c := Shared[*prometheus.CounterVec](nil, prometheus.NewCounterVec(opts, []string{"flow"}))
	require.NotNil(t, c)
}

func testGather(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	return mfs[0].GetMetric()[0].GetCounter().GetValue()
}

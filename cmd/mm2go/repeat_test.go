package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestRepeatCore(t *testing.T) {
	now := time.Unix(1000, 0)
	obs, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(newRepeatCore(obs, 30*time.Second, func() time.Time { return now })).With(zap.String("flow", "A->B"))

	// A storm of one cause (a deleted topic's partitions, say): one line.
	for p := range 547 {
		log.Warn("fetch from source", zap.String("topic", "gone"), zap.Int32("partition", int32(p%6)), zap.Error(errString("UNKNOWN_TOPIC_ID")))
	}
	// Another cause, and lower levels, pass.
	log.Warn("fetch from source", zap.String("topic", "other"))
	log.Info("flow started")
	log.Info("flow started")
	require.Equal(t, 4, logs.Len())

	// After the window, the next line of the cause carries the count.
	now = now.Add(31 * time.Second)
	log.Warn("fetch from source", zap.String("topic", "gone"), zap.Int32("partition", 0))
	last := logs.All()[logs.Len()-1]
	require.Equal(t, int64(546), last.ContextMap()["repeated"])
	now = now.Add(time.Second)
	log.Warn("fetch from source", zap.String("topic", "gone"), zap.Int32("partition", 0))
	require.Equal(t, 5, logs.Len())
}

// TestLoggerCountsWrittenLines: mm2go_log_messages_total counts the lines
// written, not those the repeat window left out.
func TestLoggerCountsWrittenLines(t *testing.T) {
	var out bytes.Buffer
	reg := prometheus.NewRegistry()
	log, _, err := newLogger(&out, "info", logConsole, reg)
	require.NoError(t, err)
	for range 10 {
		log.Warn("same cause", zap.String("topic", "t"))
	}
	require.Equal(t, 1, strings.Count(out.String(), "same cause"))
	require.Equal(t, 1.0, testutil.ToFloat64(counterOf(t, reg, "mm2go_log_messages_total", "warn")))
}

// counterOf returns the collector of metric name with label level.
func counterOf(t *testing.T, reg *prometheus.Registry, name, level string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "level" && l.GetValue() == level {
					c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
					c.Add(m.GetCounter().GetValue())
					return c
				}
			}
		}
	}
	t.Fatalf("no %s{level=%q}", name, level)
	return nil
}

type errString string

func (e errString) Error() string { return string(e) }

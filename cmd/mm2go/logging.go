package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kzap"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// logFormat is the --log.format flag's value.
type logFormat string

const (
	logConsole logFormat = "console"
	logJSON    logFormat = "json"
)

// newLogger builds the root logger. Every entry written is also counted in
// mm2go_log_messages_total{level} on reg. Warnings and errors of one cause
// (logger, message, and the flow, topic, group and reason fields) are
// written once per 30 s; the next line of the cause says how many were left
// out (field "repeated").
func newLogger(w io.Writer, level string, format logFormat, reg prometheus.Registerer) (*zap.Logger, zap.AtomicLevel, error) {
	lvl, err := zap.ParseAtomicLevel(strings.ToLower(level))
	if err != nil {
		return nil, lvl, fmt.Errorf("--log.level: %w (want debug, info, warn or error)", err)
	}
	var enc zapcore.Encoder
	switch format {
	case logJSON:
		ec := zap.NewProductionEncoderConfig()
		ec.EncodeTime = zapcore.ISO8601TimeEncoder
		enc = zapcore.NewJSONEncoder(ec)
	case logConsole:
		ec := zap.NewDevelopmentEncoderConfig()
		ec.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		enc = zapcore.NewConsoleEncoder(ec)
	default:
		return nil, lvl, fmt.Errorf("--log.format: unknown format %q (want console or json)", format)
	}
	counter := promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
		Name: "mm2go_log_messages_total",
		Help: "Log entries written, by level.",
	}, []string{"level"})
	core := zapcore.RegisterHooks(zapcore.NewCore(enc, zapcore.AddSync(w), lvl), func(e zapcore.Entry) error {
		counter.WithLabelValues(e.Level.String()).Inc()
		return nil
	})
	// Warnings and errors of one cause are written once per repeatWindow;
	// the counter counts the lines written.
	log := zap.New(newRepeatCore(core, repeatWindow, time.Now))
	return log, lvl, nil
}

// kgoLogger routes franz-go's logs into zap. franz-go logs connection churn at
// info, so its entries are one level quieter than the daemon's: at the
// default info level only its warnings and errors appear.
func kgoLogger(log *zap.Logger, lvl zap.AtomicLevel) kgo.Logger {
	return kzap.New(log.Named("kgo"), kzap.LevelFn(func() kgo.LogLevel {
		switch l := lvl.Level(); {
		case l <= zapcore.DebugLevel:
			return kgo.LogLevelInfo
		case l <= zapcore.WarnLevel:
			return kgo.LogLevelWarn
		default:
			return kgo.LogLevelError
		}
	}))
}

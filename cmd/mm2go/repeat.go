package main

import (
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// repeatWindow is how long warnings and errors of one cause are logged once:
// the first line of a cause is written, the others within the window are
// counted, and the first line after it carries the count (field "repeated").
const repeatWindow = 30 * time.Second

// causeFields are the fields that, with the logger name, level and message,
// make up the cause of a warning or an error. Others (partition, offset, the
// error text) vary between repetitions of one cause.
var causeFields = map[string]bool{"flow": true, "topic": true, "target_topic": true, "group": true, "reason": true, "source_cluster": true, "target_cluster": true}

// repeatCore writes warnings and errors of one cause at most once per
// window (see repeatWindow); debug and info entries pass unchanged. Cores
// made by With share its memory.
type repeatCore struct {
	zapcore.Core
	window time.Duration
	now    func() time.Time
	ctx    []zapcore.Field // fields added by With, for the cause
	st     *repeatState
}

type repeatState struct {
	mu    sync.Mutex
	cause map[string]*repeats
}

type repeats struct {
	since   time.Time // when the cause's last line was written
	dropped int       // entries of it left out since
}

func newRepeatCore(c zapcore.Core, window time.Duration, now func() time.Time) *repeatCore {
	return &repeatCore{Core: c, window: window, now: now, st: &repeatState{cause: make(map[string]*repeats)}}
}

func (c *repeatCore) With(fields []zapcore.Field) zapcore.Core {
	return &repeatCore{Core: c.Core.With(fields), window: c.window, now: c.now,
		ctx: append(append([]zapcore.Field(nil), c.ctx...), fields...), st: c.st}
}

func (c *repeatCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if e.Level < zapcore.WarnLevel {
		return c.Core.Check(e, ce)
	}
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *repeatCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	if e.Level < zapcore.WarnLevel {
		return c.Core.Write(e, fields) // not reached: Check hands these to the wrapped core
	}
	key := e.LoggerName + "\x00" + e.Level.String() + "\x00" + e.Message
	for _, fs := range [][]zapcore.Field{c.ctx, fields} {
		for _, f := range fs {
			if causeFields[f.Key] {
				key += "\x00" + f.Key + "=" + f.String
			}
		}
	}
	now := c.now()
	c.st.mu.Lock()
	r := c.st.cause[key]
	if r != nil && now.Sub(r.since) < c.window {
		r.dropped++
		c.st.mu.Unlock()
		return nil
	}
	dropped := 0
	if r != nil {
		dropped = r.dropped
	}
	c.st.cause[key] = &repeats{since: now}
	if len(c.st.cause) > 10000 { // forget causes that went quiet
		for k, v := range c.st.cause {
			if now.Sub(v.since) >= c.window && v.dropped == 0 {
				delete(c.st.cause, k)
			}
		}
	}
	c.st.mu.Unlock()
	if dropped > 0 {
		fields = append(fields, zap.Int("repeated", dropped))
	}
	// Through Check, so that wrapped cores that write from Check (hooks)
	// see the entry as usual.
	if ce := c.Core.Check(e, nil); ce != nil {
		ce.Write(fields...)
	}
	return nil
}

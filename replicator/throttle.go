package replicator

import (
	"context"
	"sync"
	"time"

	"github.com/mm2go/mm2go/internal/loop"
)

// throttle limits the bytes a task copies per second
// (mm2go.throttle.bytes.per.second, shared out over the flow's tasks). It
// is a token bucket holding one second of bytes that may go into debt: a
// fetch larger than the bucket passes, and the next ones wait until the
// debt is paid off, so the rate holds over any period longer than a fetch.
type throttle struct {
	rate float64 // bytes per second, > 0

	mu    sync.Mutex
	avail float64 // bytes that may pass now; negative: debt
	last  time.Time
	now   func() time.Time
}

// newThrottle returns a throttle of rate bytes per second, or nil for no
// limit.
func newThrottle(rate float64) *throttle {
	if rate <= 0 {
		return nil
	}
	return &throttle{rate: rate, avail: rate, last: time.Now(), now: time.Now}
}

// debit takes n bytes and returns how long the caller must wait before it
// takes more: zero while the bucket holds them.
func (t *throttle) debit(n int) time.Duration {
	if t == nil || n <= 0 {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.avail = min(t.rate, t.avail+now.Sub(t.last).Seconds()*t.rate) - float64(n)
	t.last = now
	if t.avail >= 0 {
		return 0
	}
	return time.Duration(-t.avail / t.rate * float64(time.Second))
}

// throttled waits, when the flow has a throttle, as long as copying n more
// bytes requires, and counts the wait.
func (r *Replicator) throttled(ctx context.Context, n int) {
	if d := r.throttle.debit(n); d > 0 {
		r.m.throttledFor(r.flow, d)
		loop.Sleep(ctx, d)
	}
}

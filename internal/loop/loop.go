// Package loop holds the timing every long-running worker of mm2go uses: a
// periodic loop, a sleep that ends with its context, and an exponential
// backoff.
package loop

import (
	"context"
	"time"
)

// Every calls fn every d, the first time d after it is called, until ctx
// ends. A call that takes longer than d delays the next one; missed ticks
// are not made up.
func Every(ctx context.Context, d time.Duration, fn func(context.Context)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fn(ctx)
	}
}

// Sleep waits for d or until ctx ends, and reports whether it waited the
// whole d.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Backoff is an exponential backoff: Next returns Min, then twice the
// previous value, up to Max. The zero value's Next returns zero.
type Backoff struct {
	Min, Max time.Duration
	cur      time.Duration
}

// Next returns the next delay.
func (b *Backoff) Next() time.Duration {
	if b.cur == 0 {
		b.cur = b.Min
	} else {
		b.cur = min(2*b.cur, max(b.Max, b.Min))
	}
	return b.cur
}

// Reset makes the next delay Min again.
func (b *Backoff) Reset() { b.cur = 0 }

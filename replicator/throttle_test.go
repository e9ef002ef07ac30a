package replicator

import (
	"context"
	"crypto/rand"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestThrottleDebit(t *testing.T) {
	require.Nil(t, newThrottle(0), "no limit")
	require.Zero(t, (*throttle)(nil).debit(1<<20))

	t0 := time.Unix(1000, 0)
	now := t0
	th := newThrottle(1000) // bytes per second
	th.last, th.now = t0, func() time.Time { return now }
	for _, step := range []struct {
		after time.Duration // since the previous step
		n     int
		wait  time.Duration
	}{
		{0, 600, 0},                      // from the full bucket (1,000)
		{0, 400, 0},                      // empty now
		{0, 500, 500 * time.Millisecond}, // 500 of debt
		{500 * time.Millisecond, 0, 0},   // nothing taken, nothing owed
		{500 * time.Millisecond, 2500, 2 * time.Second}, // a fetch larger than the bucket: debt of 2,000
		{10 * time.Second, 100, 0},                      // the bucket refills to one second's worth, no more
		{0, 900, 0},
		{0, 1, time.Millisecond},
	} {
		now = now.Add(step.after)
		require.Equal(t, step.wait, th.debit(step.n), "at %s, %d bytes", now.Sub(t0), step.n)
	}
}

// TestThrottleHoldsTheRate: a backlog copied with a limit takes as long as
// the limit says, in both copy modes: at least the backlog less the
// bucket's second and one fetch, at the rate, within 15 %; and the waits
// for the limit add up to no more than the whole backlog at the rate,
// within 15 %. Without the limit it takes a tenth of a second. (The copy's
// own time is no upper bound: on a loaded machine, with the end-to-end
// tests beside it, the copy took 5.45 s where it takes 3.8 s alone.)
func TestThrottleHoldsTheRate(t *testing.T) {
	b := newBed(t)
	const fetch = 64 << 10 // bytes of one fetch, at most
	b.srcOpts = []kgo.Opt{kgo.FetchMaxBytes(fetch), kgo.FetchMaxPartitionBytes(fetch / 2)}
	b.createTopic(b.srcAdm, "orders", 2, nil)
	const records, size = 600, 4096
	b.produceSized("orders", 2, records, size)
	const rate = 512 << 10 // bytes per second
	reg := prometheus.NewRegistry()
	start := time.Now()
	stop := b.run(b.flow("mm2go.throttle.bytes.per.second = "+strconv.Itoa(rate)), reg)
	b.read("A.orders", records)
	took := time.Since(start)
	require.NoError(t, stop())
	total := float64(records * size)
	lo := time.Duration(0.85 * (total - rate - fetch) / rate * float64(time.Second))
	hi := time.Duration(1.15 * total / rate * float64(time.Second))
	require.GreaterOrEqual(t, took, lo, "copied %.0f bytes in %s with a limit of %d/s", total, took, rate)
	waited := time.Duration(sumOf(t, reg, "mm2go_replicator_throttled_seconds_total", nil) * float64(time.Second))
	require.Positive(t, waited)
	require.LessOrEqual(t, waited, hi, "waited %s for a limit of %d/s on %.0f bytes", waited, rate, total)
}

// produceSized writes n records of size random (incompressible) bytes to
// topic, spread over its partitions, in small batches.
func (b *bed) produceSized(topic string, partitions int32, n, size int) {
	b.t.Helper()
	// A few records per request: small batches, so that a fetch is small.
	for i := 0; i < n; i += 8 {
		var rs []*kgo.Record
		for j := i; j < min(i+8, n); j++ {
			v := make([]byte, size)
			_, _ = rand.Read(v)
			rs = append(rs, &kgo.Record{Topic: topic, Partition: int32(j) % partitions, Value: v})
		}
		require.NoError(b.t, b.srcCl.ProduceSync(context.Background(), rs...).FirstErr())
	}
}

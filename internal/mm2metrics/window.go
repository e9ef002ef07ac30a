package mm2metrics

import "math"

// Kafka's metrics keep two samples of 30 seconds for every windowed stat
// (metrics.num.samples=2, metrics.sample.window.ms=30000): min, max, avg and
// rate cover the current sample and the one before it.
const (
	sampleMs = 30_000
	samples  = 2
)

// window is one windowed stat as Kafka's SampledStat keeps it. Not safe for
// concurrent use; its owner locks.
type window struct {
	s [samples]sample
}

type sample struct {
	index    int64 // now / sampleMs when the sample was started
	n        int64
	sum      float64
	min, max float64
}

// record adds v at time now (Unix ms).
func (w *window) record(now int64, v float64) {
	i := now / sampleMs
	s := &w.s[i%samples]
	if s.index != i || s.n == 0 {
		*s = sample{index: i, min: v, max: v}
	}
	s.n++
	s.sum += v
	s.min = min(s.min, v)
	s.max = max(s.max, v)
}

// live calls f with every sample that has not expired at now.
func (w *window) live(now int64, f func(s *sample)) {
	i := now / sampleMs
	for k := range w.s {
		if s := &w.s[k]; s.n > 0 && s.index > i-samples {
			f(s)
		}
	}
}

// stats returns the minimum, maximum and mean of the live samples, NaN
// each when there are none (as Kafka reports them).
func (w *window) stats(now int64) (lo, hi, avg float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	var n int64
	var sum float64
	w.live(now, func(s *sample) {
		lo, hi = min(lo, s.min), max(hi, s.max)
		n += s.n
		sum += s.sum
	})
	if n == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	return lo, hi, sum / float64(n)
}

// rate returns the sum of the live samples per second of the time they
// cover, at least one whole sample (Kafka's Rate measures elapsed time
// from the oldest sample's start and never less than samples-1 windows).
func (w *window) rate(now int64) float64 {
	var sum float64
	oldest := int64(math.MaxInt64)
	w.live(now, func(s *sample) {
		sum += s.sum
		oldest = min(oldest, s.index*sampleMs)
	})
	if oldest == math.MaxInt64 {
		return 0
	}
	elapsed := max(now-oldest, (samples-1)*sampleMs)
	return sum / (float64(elapsed) / 1000)
}

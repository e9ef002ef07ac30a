package main

import (
	"fmt"
	"strconv"
	"strings"
)

// The throttle phase: mm2go's catch-up of the backlog with a per-flow byte
// rate (mm2go.throttle.bytes.per.second) set so that the copy takes about
// -throttle-seconds, in both copy modes. The limit counts what a task
// fetched: in the batches mode the batches as the source stores them (the
// backlog's log bytes), in the record mode each record's key, value and
// headers (the backlog's payload). The phase checks that the rate over the
// copy, from its first record on the target to its last, is within 10 % of
// the limit.

// throttleContenders returns the two throttled contenders, their limits
// taken from the backlog's sizes.
func throttleContenders(logBytes, payloadBytes int64, seconds float64) []*contender {
	mk := func(name, mode string, counted int64, what string) *contender {
		limit := int64(float64(counted) / seconds)
		props := []string{"mm2go.throttle.bytes.per.second = " + strconv.FormatInt(limit, 10)}
		if mode != "" {
			props = append(props, mode)
		}
		return &contender{
			name: name, kind: kindMM2go, props: props, throttle: limit, throttled: counted,
			about: fmt.Sprintf("mm2go, `%s` (%s / %.0f s, counted as %s)", strings.Join(props, "; "), what, seconds, what),
		}
	}
	return []*contender{
		mk("mm2go-throttled", "", logBytes, "the backlog's stored batches"),
		mk("mm2go-records-throttled", recordsMode, payloadBytes, "the backlog's keys, values and headers"),
	}
}

// throttleRate is the bytes a throttled run counted per second from its
// first record on the target to its last, and its ratio to the limit.
func throttleRate(c *contender, r runResult) (rate, ratio float64) {
	copying := (r.Wall - r.First).Seconds()
	if copying <= 0 || c.throttle <= 0 {
		return 0, 0
	}
	rate = float64(c.throttled) / copying
	return rate, rate / float64(c.throttle)
}

// throttleSection reports the throttle phase: per run, the limit, the
// measured rate and whether it is within 10 %.
func (b *bench) throttleSection() string {
	var s strings.Builder
	s.WriteString("\nThrottle phase (`mm2go.throttle.bytes.per.second`; the rate from the first record on the target to the last):\n\n")
	s.WriteString("| contender | round | limit MB/s | copy s | measured MB/s | measured / limit | within 10 % |\n|---|--:|--:|--:|--:|--:|---|\n")
	for _, r := range b.results {
		if r.Phase != "throttle" {
			continue
		}
		c := b.contender(r.Contender)
		if c == nil || !r.OK {
			fmt.Fprintf(&s, "| %s | %d | – | – | – | – | no: %s |\n", r.Contender, r.Round, r.Err)
			continue
		}
		rate, x := throttleRate(c, r)
		within := "no"
		if x >= 0.9 && x <= 1.1 {
			within = "yes"
		}
		fmt.Fprintf(&s, "| %s | %d | %.2f | %.1f | %.2f | %.3f | %s |\n", r.Contender, r.Round,
			float64(c.throttle)/1e6, (r.Wall - r.First).Seconds(), rate/1e6, x, within)
	}
	return s.String()
}

// contender returns the contender named name, nil if none.
func (b *bench) contender(name string) *contender {
	for _, c := range b.reps {
		if c.name == name {
			return c
		}
	}
	return nil
}

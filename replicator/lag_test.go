package replicator

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/mm2go/mm2go/internal/ktest"
)

// TestLagMovesDuringOutages: while the target does not answer, the copy and
// the flush stall, but the lag keeps following the source; while the source
// does not answer either, the age of the oldest uncopied record keeps
// growing. Both go back to 0 when the clusters answer again.
func TestLagMovesDuringOutages(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "t", 2, nil)
	b.produce("t", 2, 0, 100)
	srcDown, dstDown := ktest.Outage(b.src), ktest.Outage(b.dst)
	reg := prometheus.NewRegistry()
	b.run(b.flow(), reg)
	b.read("A.t", 100)
	lag := func() float64 { return sumOf(t, reg, "mm2go_replicator_lag_records", map[string]string{"topic": "t"}) }
	age := func() float64 { return sumOf(t, reg, "mm2go_replicator_lag_seconds", map[string]string{"topic": "t"}) }
	waitFor(t, "lag 0", func() bool { return lag() == 0 })

	dstDown.Store(true)
	b.produce("t", 2, 100, 500)
	waitFor(t, "the lag to follow the source while the target is down", func() bool { return lag() == 500 })
	first := age()
	waitFor(t, "the age of the oldest uncopied record to grow", func() bool { return age() > first })

	srcDown.Store(true)
	first = age()
	waitFor(t, "the age to grow while neither cluster answers", func() bool { return age() > first+0.2 })
	require.Equal(t, 500.0, lag(), "the ends listed last")

	srcDown.Store(false)
	dstDown.Store(false)
	waitFor(t, "the copy to catch up after the outage", func() bool { return lag() == 0 && age() == 0 })
	b.read("A.t", 600)
}

// TestWatchAfterStop: a stopped replicator's Watch keeps its lag gauges
// following the source until its context ends, then deletes them when told.
func TestWatchAfterStop(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "t", 2, nil)
	b.produce("t", 2, 0, 100)
	reg := prometheus.NewRegistry()
	stop := b.run(b.flow(), reg)
	b.read("A.t", 100)
	lag := func() (int, float64) {
		return seriesOf(t, reg, "mm2go_replicator_lag_records", map[string]string{"topic": "t"})
	}
	waitFor(t, "lag 0", func() bool { n, l := lag(); return n == 1 && l == 0 })
	require.NoError(t, stop())
	n, _ := lag()
	require.Zero(t, n, "a stopped task's gauges are deleted")

	b.produce("t", 2, 100, 50)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.last.Watch(ctx, b.srcAdm, func() bool { return true })
	}()
	waitFor(t, "the watch to follow the source", func() bool { n, l := lag(); return n == 1 && l == 50 })
	cancel()
	<-done
	n, _ = lag()
	require.Zero(t, n, "deleted when the watch ends with forget")
}

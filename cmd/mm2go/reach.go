package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/internal/loop"
)

// reach follows whether a cluster answers a flow's checks.
type reach struct {
	failingSince atomic.Int64 // unix ns when the first check since the last success started; 0: answering
}

// observe records the result of a check started at started and returns how
// long the cluster has not answered: 0 after a success, else since the
// start of the first failed check.
func (c *reach) observe(err error, started time.Time) time.Duration {
	if err == nil {
		c.failingSince.Store(0)
		return 0
	}
	c.failingSince.CompareAndSwap(0, started.UnixNano())
	return time.Since(time.Unix(0, c.failingSince.Load()))
}

// down returns how long the cluster has not answered, 0 if it answered the
// last check.
func (c *reach) down() time.Duration {
	if since := c.failingSince.Load(); since != 0 {
		return time.Since(time.Unix(0, since))
	}
	return 0
}

// defaultProbeInterval is how often a flow checks that its clusters
// answer, and how long each check may take.
const defaultProbeInterval = 5 * time.Second

// probe checks every interval, until ctx ends, that the flow's source and
// target answer a ping (each check allowed interval), for /readyz and
// mm2go_flow_cluster_unreachable_seconds. It runs for the flow, not for
// its tasks: a target that stops answering takes the tasks from this
// instance (the flow's group lives there), and the check must go on.
func (fr *flowRunner) probe(ctx context.Context, src, dst *kgo.Client, interval time.Duration) {
	check := func(ctx context.Context, cl *kgo.Client, r *reach, cluster string) {
		started := time.Now()
		cctx, cancel := context.WithTimeout(ctx, interval)
		err := ping(cctx, cl)
		cancel()
		if ctx.Err() != nil {
			return // stopping: not the cluster's fault
		}
		if err != nil {
			fr.log.Debug("the "+cluster+" cluster did not answer", zap.Error(err))
		}
		fr.m.unreachable(fr.flow.Name(), cluster, r.observe(err, started))
	}
	var wg sync.WaitGroup
	for _, c := range []struct {
		cl      *kgo.Client
		r       *reach
		cluster string
	}{{src, &fr.srcReach, "source"}, {dst, &fr.dstReach, "target"}} {
		wg.Go(func() {
			check(ctx, c.cl, c.r, c.cluster)
			loop.Every(ctx, interval, func(ctx context.Context) { check(ctx, c.cl, c.r, c.cluster) })
		})
	}
	wg.Wait()
}

// startProbe starts the flow's probe with clients of its own, when the flow
// replicates, and returns what stops it.
func (fr *flowRunner) startProbe(ctx context.Context) (stop func()) {
	f := fr.flow
	interval := fr.lagInterval
	if interval <= 0 {
		interval = defaultProbeInterval
	}
	if !f.Enabled {
		return func() {}
	}
	src, err := fr.client(config.RoleSourceAdmin, kgo.ClientID(f.Client(config.RoleSourceAdmin).ID+"-probe"))
	if err != nil {
		fr.log.Warn("no check that the clusters answer", zap.Error(err))
		return func() {}
	}
	dst, err := fr.client(config.RoleTargetAdmin, kgo.ClientID(f.Client(config.RoleTargetAdmin).ID+"-probe"))
	if err != nil {
		src.Close()
		fr.log.Warn("no check that the clusters answer", zap.Error(err))
		return func() {}
	}
	srcAdm := kadm.NewClient(src)
	fr.probeSrc.Store(srcAdm)
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		fr.probe(pctx, src, dst, interval)
	}()
	return func() {
		cancel()
		<-done
		fr.probeSrc.Store(nil)
		dst.Close()
		src.Close()
	}
}

// unreachable says which of the flow's clusters has not answered for
// after or longer ("target B unreachable for 1m5s"), "" when none has or
// after is 0.
func (fr *flowRunner) unreachable(after time.Duration) string {
	if after <= 0 {
		return ""
	}
	for _, c := range []struct {
		cluster string
		r       *reach
	}{{"source " + fr.flow.Source, &fr.srcReach}, {"target " + fr.flow.Target, &fr.dstReach}} {
		if d := c.r.down(); d >= after {
			return fmt.Sprintf("%s unreachable for %s", c.cluster, d.Round(time.Second))
		}
	}
	return ""
}

package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/internal/fence"
	"github.com/mm2go/mm2go/policy"
)

// TestTaskRevokedWhileStartingIsNoFailure: a task taken from this instance
// while its workers start (their requests then fail with the cancelled
// context) stops quietly; it is not a failure that restarts the flow and
// leaves the group.
func TestTaskRevokedWhileStartingIsNoFailure(t *testing.T) {
	dst := newCluster(t)
	createTopicsN(t, dst, 2, policy.LeaseTopic("A"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	join := func() *fence.Lease {
		l, err := fence.Join(fence.LeaseOptions{
			Client: func(opts ...kgo.Opt) (*kgo.Client, error) {
				return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(dst.ListenAddrs()...)}, opts...)...)
			},
			Group: policy.LeaseGroup("A"), Topic: policy.LeaseTopic("A"),
			Session: 6 * time.Second, Heartbeat: 500 * time.Millisecond, Rebalance: 10 * time.Second,
		})
		require.NoError(t, err)
		t.Cleanup(l.Close)
		return l
	}
	fr := &flowRunner{flow: &config.Flow{Source: "A", Target: "B"}, log: zaptest.NewLogger(t),
		m: newDaemonMetrics(prometheus.NewRegistry())}
	// Workers that are still starting when the task goes: the request under
	// way fails because its context ended.
	starting := func(ctx context.Context, _, _ int) error {
		<-ctx.Done()
		return errors.New("ensure progress topic: describe topic after create: UNKNOWN_TOPIC_OR_PARTITION")
	}

	a := join()
	results := make(chan error, 2)
	for range 2 {
		g, err := a.Wait(ctx)
		require.NoError(t, err)
		go func() { results <- fr.runTask(ctx, g, 2, starting) }()
	}
	join() // takes one of the two tasks from a
	select {
	case err := <-results:
		require.NoError(t, err, "a revoked task is no failure")
	case <-ctx.Done():
		t.Fatal("no task was revoked")
	}
}

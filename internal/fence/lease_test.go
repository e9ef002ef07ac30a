package fence

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func joinTest(t *testing.T, seeds []string, group, topic string) *Lease {
	t.Helper()
	return joinAs(t, seeds, group, topic, "")
}

func joinAs(t *testing.T, seeds []string, group, topic, instance string) *Lease {
	t.Helper()
	l, err := Join(LeaseOptions{
		Client: func(opts ...kgo.Opt) (*kgo.Client, error) {
			return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
		},
		Group: group, Topic: topic,
		Session: 6 * time.Second, Heartbeat: 500 * time.Millisecond, Rebalance: 10 * time.Second,
		InstanceID: instance,
	})
	require.NoError(t, err)
	return l
}

func leaseCluster(t *testing.T) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	defer cl.Close()
	_, err = kadm.NewClient(cl).CreateTopic(context.Background(), 1, 1, nil, "lease")
	require.NoError(t, err)
	return c.ListenAddrs()
}

// TestLeaseStaticRestart: a static member that crashed (its client closed
// without leaving) and restarts with the same instance id gets the lease
// back at once, not after the session timeout (6 s here).
func TestLeaseStaticRestart(t *testing.T) {
	seeds := leaseCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := joinAs(t, seeds, "g", "lease", "host-1")
	ga, err := a.Wait(ctx)
	require.NoError(t, err)
	ga.Release()
	a.cl.Close() // a crash: no leave

	start := time.Now()
	b := joinAs(t, seeds, "g", "lease", "host-1")
	defer b.Close()
	gb, err := b.Wait(ctx)
	require.NoError(t, err)
	defer gb.Release()
	require.Less(t, time.Since(start), 3*time.Second, "the restarted member waited for the old session")
}

// TestLeaseSameInstanceTwice: a second live process with the same instance
// id takes the lease; the first loses it and is told to stop.
func TestLeaseSameInstanceTwice(t *testing.T) {
	seeds := leaseCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := joinAs(t, seeds, "g", "lease", "host-1")
	defer a.Close()
	ga, err := a.Wait(ctx)
	require.NoError(t, err)

	b := joinAs(t, seeds, "g", "lease", "host-1")
	defer b.Close()
	gb, err := b.Wait(ctx)
	require.NoError(t, err)
	defer gb.Release()
	select {
	case <-ga.Context().Done():
	case <-ctx.Done():
		t.Fatal("the first process kept the lease")
	}
	ga.Release()
	select {
	case <-a.Fenced():
	case <-ctx.Done():
		t.Fatal("the first process was not told it was fenced")
	}
	_, err = a.Wait(ctx)
	require.ErrorIs(t, err, ErrInstanceFenced)
}

// TestLeaseOneHolderAtATime: of two members one holds the lease; the other
// gets it only after the first released it (its revocation waits), and a
// member that joins later does not take it away.
func TestLeaseOneHolderAtATime(t *testing.T) {
	seeds := leaseCluster(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	a := joinTest(t, seeds, "g", "lease")
	ga, err := a.Wait(ctx)
	require.NoError(t, err)
	b := joinTest(t, seeds, "g", "lease")
	defer b.Close()

	// b joined: a keeps the lease (sticky), b waits. Wait for the group
	// to have settled with two members before looking.
	require.Eventually(t, func() bool {
		d, err := kadm.NewClient(cl).DescribeGroups(ctx, "g")
		return err == nil && len(d["g"].Members) == 2 && d["g"].State == "Stable"
	}, 30*time.Second, 50*time.Millisecond)
	require.NoError(t, ga.Context().Err(), "a lost the lease when b joined")

	got := make(chan *Grant, 1)
	var gotAt time.Time
	go func() {
		g, err := b.Wait(ctx)
		if err == nil {
			gotAt = time.Now()
			got <- g
		}
	}()
	// b is in the group without the lease (its empty assignment came).
	require.Eventually(t, b.Standing, 10*time.Second, 20*time.Millisecond, "b standing by")
	require.NoError(t, ga.Context().Err(), "a lost the lease when b joined")

	// a leaves: its grant ends first, and b's starts only after a released.
	released := make(chan time.Time, 1)
	go func() {
		<-ga.Context().Done()
		time.Sleep(300 * time.Millisecond) // the flow draining
		released <- time.Now()
		ga.Release()
	}()
	a.Close()
	var gb *Grant
	select {
	case gb = <-got:
	case <-ctx.Done():
		t.Fatal("b never got the lease")
	}
	at := <-released
	require.Truef(t, gotAt.After(at), "b got the lease %s before a released it", at.Sub(gotAt))
	defer gb.Release() // before b.Close, which waits for it
	require.NoError(t, gb.Context().Err())
	require.Greater(t, gb.Generation, ga.Generation)
}

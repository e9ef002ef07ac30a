package fence

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/internal/ktest"
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
	return taskCluster(t, 1)
}

// taskCluster starts a cluster with the task topic "lease" of tasks
// partitions.
func taskCluster(t *testing.T, tasks int32) []string {
	t.Helper()
	c := ktest.Fake(t, 1)
	_, err := kadm.NewClient(ktest.Client(t, c.ListenAddrs())).CreateTopic(context.Background(), tasks, 1, nil, "lease")
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

// TestLeaseSpreadsTasks: three tasks over two members: each task runs on
// exactly one member, both members run some; when one leaves, the other
// gets its tasks only after it released them, and keeps its own (the
// cooperative protocol moves only what must move).
func TestLeaseSpreadsTasks(t *testing.T) {
	seeds := taskCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// A member runs each task it is given until its grant ends, then takes
	// a while to stop (a task draining; longer than the group takes to
	// assign a task again) and releases it.
	const drain = 1500 * time.Millisecond
	type member struct {
		mu       sync.Mutex
		running  map[int32]*Grant
		gotAt    map[int32]time.Time // when each task was last given
		released time.Time           // when a grant was last released
	}
	run := func(l *Lease, m *member) {
		for {
			g, err := l.Wait(ctx)
			if err != nil {
				return
			}
			m.mu.Lock()
			m.running[g.Task], m.gotAt[g.Task] = g, time.Now()
			m.mu.Unlock()
			go func() {
				<-g.Context().Done()
				time.Sleep(drain)
				m.mu.Lock()
				if m.running[g.Task] == g {
					delete(m.running, g.Task)
				}
				m.released = time.Now()
				m.mu.Unlock()
				g.Release()
			}()
		}
	}
	tasks := func(m *member) []int32 {
		m.mu.Lock()
		defer m.mu.Unlock()
		var out []int32
		for task, g := range m.running {
			if g.Context().Err() == nil {
				out = append(out, task)
			}
		}
		slices.Sort(out)
		return out
	}
	newMember := func() *member {
		return &member{running: map[int32]*Grant{}, gotAt: map[int32]time.Time{}}
	}
	a, b := joinTest(t, seeds, "g", "lease"), joinTest(t, seeds, "g", "lease")
	defer b.Close()
	ma, mb := newMember(), newMember()
	go run(a, ma)
	go run(b, mb)
	require.Eventually(t, func() bool {
		ta, tb := tasks(ma), tasks(mb)
		return len(ta) > 0 && len(tb) > 0 && len(ta)+len(tb) == 3 &&
			!slices.ContainsFunc(ta, func(x int32) bool { return slices.Contains(tb, x) })
	}, 30*time.Second, 20*time.Millisecond, "tasks spread over both members")
	movedAway := tasks(ma)
	kept := make(map[int32]*Grant)
	mb.mu.Lock()
	maps.Copy(kept, mb.running)
	mb.mu.Unlock()

	a.Close() // a's grants end; a releases them after drain
	require.Eventually(t, func() bool { return len(tasks(mb)) == 3 }, 30*time.Second, 20*time.Millisecond, "b runs every task")
	require.Eventually(t, func() bool {
		ma.mu.Lock()
		defer ma.mu.Unlock()
		return len(ma.running) == 0
	}, 10*time.Second, 20*time.Millisecond, "a released its tasks")
	ma.mu.Lock()
	releasedAt := ma.released
	ma.mu.Unlock()
	mb.mu.Lock()
	defer mb.mu.Unlock()
	for _, task := range movedAway {
		require.Truef(t, mb.gotAt[task].After(releasedAt), "b got task %d %s before a released it", task, releasedAt.Sub(mb.gotAt[task]))
	}
	for task, g := range kept {
		require.Same(t, g, mb.running[task], "b's own task %d was revoked and assigned again", task)
		require.NoError(t, g.Context().Err())
	}
}

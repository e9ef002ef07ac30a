package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/internal/fence"
	"github.com/mm2go/mm2go/policy"
)

// flowFile writes a file with the flow A->B between src and dst, plus extra
// lines, and returns its path.
func flowFile(t *testing.T, src, dst *kfake.Cluster, extra ...string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "mm2.properties")
	require.NoError(t, os.WriteFile(file, []byte(strings.Join(append([]string{
		"clusters = A, B",
		"A.bootstrap.servers = " + strings.Join(src.ListenAddrs(), ","),
		"B.bootstrap.servers = " + strings.Join(dst.ListenAddrs(), ","),
		"A->B.enabled = true",
	}, extra...), "\n")+"\n"), 0o600))
	return file
}

// TestStatus runs `mm2go status` on a flow nobody runs, then on one of two
// tasks with two instances in its group, then after they left.
func TestStatus(t *testing.T) {
	src, dst := newCluster(t), newCluster(t)
	createTopicsN(t, dst, 2, policy.LeaseTopic("A"))
	createTopicsN(t, src, 4, "orders")
	file := flowFile(t, src, dst)
	status := func(args ...string) (int, string) {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"status", "-c", file}, args...), &stdout, &stderr)
		return code, stdout.String() + stderr.String()
	}

	code, out := status()
	require.Equal(t, exitFailure, code, out)
	require.Contains(t, out, "flow A->B: NOT RUNNING: no instance ever joined the group A-mm2go on B")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// An instance runs every task it is given until its grant ends.
	join := func(id string) *fence.Lease {
		l, err := fence.Join(fence.LeaseOptions{
			Client: func(opts ...kgo.Opt) (*kgo.Client, error) {
				return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(dst.ListenAddrs()...)}, opts...)...)
			},
			Group: policy.LeaseGroup("A"), Topic: policy.LeaseTopic("A"),
			Session: 6 * time.Second, Heartbeat: 500 * time.Millisecond, Rebalance: 10 * time.Second,
			InstanceID: id,
		})
		require.NoError(t, err)
		go func() {
			for {
				g, err := l.Wait(ctx)
				if err != nil {
					return
				}
				context.AfterFunc(g.Context(), g.Release)
			}
		}()
		return l
	}
	a := join("host-1")
	b := join("host-2")

	require.Eventually(t, func() bool {
		code, out = status("--partitions")
		return code == exitOK && strings.Contains(out, "on 2 instance(s)")
	}, 30*time.Second, 100*time.Millisecond, out)
	require.Contains(t, out, "flow A->B: 2 of 2 task(s) running on 2 instance(s); group A-mm2go on B (Stable), 2 member(s)")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 6, out)
	require.Regexp(t, `^  INSTANCE +TASKS +PARTITIONS +HOST +CLIENT`, lines[1])
	// orders' 4 partitions are dealt round robin over the 2 tasks.
	require.Regexp(t, `^  host-[12] +0 +2 `, lines[2])
	require.Regexp(t, `^  host-[12] +1 +2 `, lines[3])
	first := policy.TaskOf("orders", 0, 2)
	require.Contains(t, out, fmt.Sprintf("task %d: orders[0,2]", first))
	require.Contains(t, out, fmt.Sprintf("task %d: orders[1,3]", 1-first))

	a.Close()
	b.Close()
	require.Eventually(t, func() bool {
		code, out = status()
		return code == exitFailure && strings.Contains(out, "run nowhere")
	}, 30*time.Second, 100*time.Millisecond, out)
	require.Contains(t, out, "flow A->B: NOT RUNNING: task(s) 0,1 run nowhere (0 of 2 running); group A-mm2go on B (Empty), 0 member(s)")
}

func createTopicsN(t *testing.T, c *kfake.Cluster, partitions int32, topics ...string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	defer cl.Close()
	_, err = kadm.NewClient(cl).CreateTopics(context.Background(), partitions, 1, nil, topics...)
	require.NoError(t, err)
}

// TestFailoverCheckNoGroups: `mm2go failover check` on a flow whose topics
// no group reads says so and how to name one, instead of a bare NOT SAFE.
func TestFailoverCheckNoGroups(t *testing.T) {
	src, dst := newCluster(t), newCluster(t)
	createTopicsN(t, src, 2, "orders")
	file := flowFile(t, src, dst, "A->B.groups = orders-.*")
	var stdout, stderr bytes.Buffer
	code := run([]string{"failover", "check", "-c", file, "--timeout", "20s"}, &stdout, &stderr)
	require.Equal(t, exitFailure, code, stdout.String()+stderr.String())
	require.Contains(t, stderr.String(), "no consumer group on A has offsets on the topics flow A->B replicates (groups = orders-.*, groups.exclude = ")
	require.Contains(t, stderr.String(), "name a group with --group")
	require.NotContains(t, stdout.String(), "NOT SAFE")
}

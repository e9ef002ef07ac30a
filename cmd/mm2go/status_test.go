package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/internal/fence"
	"github.com/mm2go/mm2go/policy"
)

// TestStatus runs `mm2go status` on a flow nobody runs, then on one with
// two instances in its lease group.
func TestStatus(t *testing.T) {
	src, dst := newCluster(t), newCluster(t)
	createTopics(t, dst, policy.LeaseTopic("A"))
	file := filepath.Join(t.TempDir(), "mm2.properties")
	require.NoError(t, os.WriteFile(file, []byte(strings.Join([]string{
		"clusters = A, B",
		"A.bootstrap.servers = " + strings.Join(src.ListenAddrs(), ","),
		"B.bootstrap.servers = " + strings.Join(dst.ListenAddrs(), ","),
		"A->B.enabled = true",
	}, "\n")+"\n"), 0o600))
	status := func() (int, string) {
		var stdout, stderr bytes.Buffer
		code := run([]string{"status", "-c", file}, &stdout, &stderr)
		return code, stdout.String() + stderr.String()
	}

	code, out := status()
	require.Equal(t, exitFailure, code, out)
	require.Contains(t, out, "flow A->B: NOT RUNNING: no instance ever joined the lease group A-mm2go on B")

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
		t.Cleanup(l.Close)
		return l
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g, err := join("host-1").Wait(ctx)
	require.NoError(t, err)
	defer g.Release()
	standby := join("host-2")
	require.Eventually(t, standby.Standing, 30*time.Second, 50*time.Millisecond)

	require.Eventually(t, func() bool {
		code, out = status()
		return code == exitOK && strings.Contains(out, "2 instance(s)")
	}, 30*time.Second, 100*time.Millisecond, out)
	require.Contains(t, out, "flow A->B: running on host-1; lease group A-mm2go on B (Stable), 2 instance(s)")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, out)
	require.Regexp(t, `^  host-1 +runs the flow `, lines[2])
	require.Regexp(t, `^  host-2 +standby `, lines[3])
}

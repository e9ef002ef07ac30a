package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
)

// createTopics creates one-partition topics on c.
func createTopics(t *testing.T, c *kfake.Cluster, topics ...string) {
	t.Helper()
	createTopicsN(t, c, 1, topics...)
}

// TestTopology runs `mm2go topology` on a chain A->B->C of kfake clusters
// whose topics are those MM2 leaves behind, plus a cluster without
// bootstrap.servers.
func TestTopology(t *testing.T) {
	a, b, c := newCluster(t), newCluster(t), newCluster(t)
	createTopics(t, a, "heartbeats", "orders")
	createTopics(t, b, "heartbeats", "A.heartbeats", "A.orders", "A.checkpoints.internal", "mm2-offsets.A.internal", "payments")
	createTopics(t, c, "heartbeats", "B.heartbeats", "B.A.heartbeats", "B.A.orders", "B.payments", "B.checkpoints.internal")

	seeds := func(k *kfake.Cluster) string { return strings.Join(k.ListenAddrs(), ",") }
	file := filepath.Join(t.TempDir(), "mm2.properties")
	require.NoError(t, os.WriteFile(file, []byte(strings.Join([]string{
		"clusters = A, B, C, D",
		"A.bootstrap.servers = " + seeds(a),
		"B.bootstrap.servers = " + seeds(b),
		"C.bootstrap.servers = " + seeds(c),
		"A->B.enabled = true",
		"B->C.enabled = true",
	}, "\n")+"\n"), 0o600))

	var stdout, stderr bytes.Buffer
	code := runTopology([]string{"-c", file}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	want := strings.Join([]string{
		"cluster A (" + seeds(a) + "): 2 topics",
		"  heartbeats topics: heartbeats",
		"  checkpoints topics: none",
		"  upstream clusters: none",
		"",
		"cluster B (" + seeds(b) + "): 6 topics",
		"  heartbeats topics: A.heartbeats, heartbeats",
		"  checkpoints topics: A.checkpoints.internal",
		"  upstream  hops  remote topics",
		"  A         1     2",
		"",
		"cluster C (" + seeds(c) + "): 6 topics",
		"  heartbeats topics: B.A.heartbeats, B.heartbeats, heartbeats",
		"  checkpoints topics: B.checkpoints.internal",
		"  upstream  hops  remote topics",
		"  A         2     0",
		"  B         1     4",
		"",
		"cluster D: no bootstrap.servers; skipped",
		"",
	}, "\n")
	require.Equal(t, want, stdout.String())
}

func TestTopologyErrors(t *testing.T) {
	a := newCluster(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "mm2.properties")
	require.NoError(t, os.WriteFile(file, []byte(strings.Join([]string{
		"clusters = A, B",
		"A.bootstrap.servers = " + strings.Join(a.ListenAddrs(), ","),
		"B.bootstrap.servers = 127.0.0.1:1",
		"A->B.enabled = true",
	}, "\n")+"\n"), 0o600))
	bad := filepath.Join(dir, "bad.properties")
	require.NoError(t, os.WriteFile(bad, []byte("clusters = A, B\nA->B.enabled = true\n"), 0o600))

	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"unreachable cluster", []string{"-c", file, "--timeout", "1s"}, exitFailure,
			"cluster B (127.0.0.1:1): unavailable", "list topics of cluster B"},
		{"positional file", []string{file, "--timeout", "1s"}, exitUsage, "", "unexpected arguments"},
		{"no file", nil, exitUsage, "", "-c FILE is required"},
		{"bad file", []string{"-c", bad}, exitUsage, "", "bootstrap.servers"},
		{"bad flag", []string{"--nope"}, exitUsage, "", "nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := runTopology(tt.args, &stdout, &stderr)
			require.Equal(t, tt.code, code, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
			require.Contains(t, stdout.String(), tt.stdout)
			require.Contains(t, stderr.String(), tt.stderr)
			if tt.name == "unreachable cluster" {
				require.Contains(t, stdout.String(), "cluster A ("+strings.Join(a.ListenAddrs(), ",")+"): 0 topics", "the reachable cluster is still printed")
			}
		})
	}
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// testbed runs the project's real-Kafka scripts (testbed/*.sh) with the
// benchmark's own KAFKA_ROOT, so its clusters never touch the test suite's.
type testbed struct {
	dir  string   // absolute path of testbed/
	root string   // KAFKA_ROOT of the benchmark's clusters
	env  []string // environment of every script, e.g. KAFKA_JVM_PROFILE
}

// cmd returns the command that runs testbed/<script> with args and the
// benchmark's KAFKA_ROOT, plus extra environment entries.
func (tb testbed) cmd(ctx context.Context, env []string, script string, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, filepath.Join(tb.dir, script), args...)
	c.Env = append(os.Environ(), "KAFKA_ROOT="+tb.root)
	c.Env = append(append(c.Env, tb.env...), env...)
	return c
}

// run runs a script to completion and returns its stdout; stderr is
// included in the error.
func (tb testbed) run(ctx context.Context, script string, args ...string) (string, error) {
	return tb.runEnv(ctx, nil, script, args...)
}

// runEnv is run with extra environment entries.
func (tb testbed) runEnv(ctx context.Context, env []string, script string, args ...string) (string, error) {
	c := tb.cmd(ctx, env, script, args...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		return stdout.String(), fmt.Errorf("run %s %s: %w\n%s", script, strings.Join(args, " "), err, tailLines(stderr.String(), 30))
	}
	return stdout.String(), nil
}

// healthy reports whether cluster name runs and answers on port.
func (tb testbed) healthy(ctx context.Context, name string, port int) bool {
	if _, err := tb.run(ctx, "kafka-cluster.sh", "healthy", name); err != nil {
		return false
	}
	b, err := os.ReadFile(filepath.Join(tb.root, name, "bootstrap"))
	return err == nil && strings.TrimSpace(string(b)) == "127.0.0.1:"+strconv.Itoa(port)
}

// start starts a single-node cluster and returns its bootstrap address.
// The controller listens on port+1000. env adds to the script's
// environment (KAFKA_EXTRA_PROPS).
func (tb testbed) start(ctx context.Context, name string, port int, env []string) (string, error) {
	out, err := tb.runEnv(ctx, env, "kafka-cluster.sh", "start", name, strconv.Itoa(port), strconv.Itoa(port+1000))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out), nil
}

// stop stops a cluster and deletes its data.
func (tb testbed) stop(ctx context.Context, name string) error {
	_, err := tb.run(ctx, "kafka-cluster.sh", "stop", name)
	return err
}

// brokerPid returns the pid of node 1 of cluster name.
func (tb testbed) brokerPid(name string) (int, error) {
	b, err := os.ReadFile(filepath.Join(tb.root, name, "node1", "pid"))
	if err != nil {
		return 0, fmt.Errorf("read broker pid of %s: %w", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("parse broker pid of %s: %w", name, err)
	}
	return pid, nil
}

// dataDir is the log directory of node 1 of cluster name.
func (tb testbed) dataDir(name string) string {
	return filepath.Join(tb.root, name, "node1", "data")
}

// dirSize sums the sizes of the log segments (*.log) in the partition
// directories <prefix><partition> under dir. Index files are left out: Kafka
// preallocates them sparse, so their size says nothing.
func dirSize(dir, prefix string) int64 {
	var sum int64
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	for _, e := range entries {
		// Partition directories are <topic>-<partition>; a deleted topic's
		// wait as <topic>-<partition>.<id>-delete and do not count.
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if _, err := strconv.Atoi(rest); !ok || err != nil {
			continue
		}
		_ = filepath.WalkDir(filepath.Join(dir, e.Name()), func(path string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() && strings.HasSuffix(path, ".log") {
				if fi, err := d.Info(); err == nil {
					sum += fi.Size()
				}
			}
			return nil
		})
	}
	return sum
}

// tailLines returns the last n lines of s.
func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

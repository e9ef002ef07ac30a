package replicator

import (
	"context"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/mm2go/mm2go/policy"
)

// TestTasksSplitPartitions: two tasks of a flow copy disjoint shares of the
// source partitions (policy.TaskOf), together every record once; a task
// that stops deletes its gauges, and started again (as on another instance)
// resumes where it stopped.
func TestTasksSplitPartitions(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "orders", 6, nil)
	b.createTopic(b.srcAdm, "single", 1, nil)
	// Without periodic discovery: a task that finds the remote topic just
	// created by the other, not ready yet, tries again on its own.
	f := b.flow("refresh.topics.enabled = false")
	reg := prometheus.NewRegistry()

	sent := b.produce("orders", 6, 0, 600)
	single := b.produce("single", 1, 0, 50)
	b.tasks = 2
	b.task = 0
	stop0 := b.run(f, reg)
	b.task = 1
	stop1 := b.run(f, reg)

	got := b.read("A.orders", 600)
	require.Equal(t, sent, got)
	require.Equal(t, single, b.read("A.single", 50))

	gauge := func(name, task string) float64 {
		return sumOf(t, reg, name, map[string]string{"task": task})
	}
	want := map[string]int{}
	for p := range int32(6) {
		want[strconv.Itoa(policy.TaskOf("orders", p, 2))]++
	}
	want[strconv.Itoa(policy.TaskOf("single", 0, 2))]++
	require.Positive(t, want["0"])
	require.Positive(t, want["1"])
	waitFor(t, "each task's partitions gauge", func() bool {
		return gauge("mm2go_replicator_partitions", "0") == float64(want["0"]) &&
			gauge("mm2go_replicator_partitions", "1") == float64(want["1"])
	})

	require.NoError(t, stop1())
	for _, name := range []string{"mm2go_replicator_partitions", "mm2go_replicator_lag_records", "mm2go_replicator_topics"} {
		n, _ := seriesOf(t, reg, name, map[string]string{"task": "1"})
		require.Zero(t, n, "%s: a stopped task's gauges are deleted", name)
		n, _ = seriesOf(t, reg, name, map[string]string{"task": "0"})
		require.Positive(t, n, "%s of the running task", name)
	}

	// Task 1 again, after more records: every record once.
	more := b.produce("orders", 6, 600, 600)
	for p, rs := range more {
		sent[p] = append(sent[p], rs...)
	}
	b.task = 1
	b.run(f, reg)
	require.Equal(t, sent, b.read("A.orders", 1200))
	require.NoError(t, stop0())
}

// TestDeletedTopicLeavesNoSeries: the lag gauges of a source topic that is
// deleted go with it; before, they kept their last values (and the lag
// alerts firing) until the process restarted.
func TestDeletedTopicLeavesNoSeries(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "gone", 2, nil)
	b.createTopic(b.srcAdm, "stays", 1, nil)
	b.produce("gone", 2, 0, 20)
	b.produce("stays", 1, 0, 10)
	reg := prometheus.NewRegistry()
	b.run(b.flow(), reg)
	b.read("A.gone", 20)
	lag := func(topic string) int {
		n, _ := seriesOf(t, reg, "mm2go_replicator_lag_records", map[string]string{"topic": topic})
		return n
	}
	waitFor(t, "lag series of both topics", func() bool { return lag("gone") == 1 && lag("stays") == 1 })

	resps, err := b.srcAdm.DeleteTopics(context.Background(), "gone")
	require.NoError(t, err)
	require.NoError(t, resps.Error())
	waitFor(t, "the deleted topic's series gone", func() bool {
		n, _ := seriesOf(t, reg, "mm2go_replicator_lag_seconds", map[string]string{"topic": "gone"})
		return lag("gone") == 0 && n == 0
	})
	require.Equal(t, 1, lag("stays"), "the other topic keeps its series")
}

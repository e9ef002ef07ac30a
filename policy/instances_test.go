package policy

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTransactionalID(t *testing.T) {
	require.Equal(t, "A-mm2go-A->B-0", TransactionalID("A", "B", 0))
	require.Equal(t, "A-mm2go-A->B-11", TransactionalID("A", "B", 11))
}

func TestTaskOf(t *testing.T) {
	for _, tc := range []struct {
		topic     string
		partition int32
		tasks     int
		want      int
	}{
		{"orders", 0, 1, 0},
		{"orders", 7, 0, 0}, // no tasks configured: one
		{"orders", 0, 3, keyPartition([]byte("orders"), 3)},
		{"orders", 1, 3, (keyPartition([]byte("orders"), 3) + 1) % 3},
	} {
		require.Equal(t, tc.want, TaskOf(tc.topic, tc.partition, tc.tasks), "%s-%d of %d", tc.topic, tc.partition, tc.tasks)
	}
}

func TestTaskOfSpreadsEveryTopic(t *testing.T) {
	// 4 topics x 12 partitions over 3 tasks: each task copies 4 partitions
	// of each topic; and topics of one partition are spread over the tasks,
	// not all given to task 0.
	for _, tasks := range []int{2, 3, 4, 6} {
		total := make([]int, tasks)
		for i := range 4 {
			topic := fmt.Sprintf("t%d", i)
			per := make([]int, tasks)
			for p := range int32(12) {
				n := TaskOf(topic, p, tasks)
				require.True(t, n >= 0 && n < tasks)
				per[n]++
				total[n]++
			}
			for n := range per {
				require.Equal(t, 12/tasks, per[n], "topic %s, task %d of %d", topic, n, tasks)
			}
		}
	}
	single := make(map[int]int)
	for i := range 60 {
		single[TaskOf(fmt.Sprintf("topic-%d", i), 0, 3)]++
	}
	for n := range 3 {
		require.Greater(t, single[n], 10, "task %d of 3 gets partition 0 of %d of 60 topics", n, single[n])
	}
}

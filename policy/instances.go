package policy

import "strconv"

// Names of what coordinates mm2go instances on a flow's target cluster
// (internal/fence): the group they join, its task topic and the
// transactional ids whose epochs fence the flow's writers; and which task
// copies which source partition.

// LeaseGroup is the group every instance running flows from sourceAlias
// joins on the target: "<source>-mm2go" (MM2's Connect workers of the same
// flow use "<source>-mm2").
func LeaseGroup(sourceAlias string) string { return sourceAlias + "-mm2go" }

// LeaseTopic is the group's topic on the target,
// "mm2go-tasks.<source>.internal": one partition per task of the flow; the
// member a partition is assigned to runs that task. It is never written.
func LeaseTopic(sourceAlias string) string { return "mm2go-tasks." + sourceAlias + ".internal" }

// TransactionalID is the transactional id of the writer of task task of a
// flow, "<source>-mm2go-<source>-><target>-<task>", after MM2's
// "<group>-<connector>-<task>".
func TransactionalID(sourceAlias, targetAlias string, task int) string {
	return LeaseGroup(sourceAlias) + "-" + sourceAlias + "->" + targetAlias + "-" + strconv.Itoa(task)
}

// TaskOf returns which of tasks tasks copies partition partition of a
// source topic: the topic's partitions are dealt round robin, starting at a
// task that depends on the topic's name, so that every task gets its share
// of each topic and of topics with fewer partitions than tasks. It depends
// on nothing but its arguments: every instance computes the same owner, and
// a topic discovered later moves no partition of another.
func TaskOf(topic string, partition int32, tasks int) int {
	if tasks <= 1 {
		return 0
	}
	start := keyPartition([]byte(topic), tasks) // Java's partition of the name as a key
	return (start + int(partition)) % tasks
}

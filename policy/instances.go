package policy

// Names of what coordinates mm2go instances on a flow's target cluster
// (internal/fence): the group they join, its lease topic and the
// transactional id whose epoch fences the flow's writer.

// LeaseGroup is the group every instance running flows from sourceAlias
// joins on the target: "<source>-mm2go" (MM2's Connect workers of the same
// flow use "<source>-mm2").
func LeaseGroup(sourceAlias string) string { return sourceAlias + "-mm2go" }

// LeaseTopic is the group's topic on the target,
// "mm2go-tasks.<source>.internal": one partition per task of the flow (one
// task today: the partition's owner runs the flow). It is never written.
func LeaseTopic(sourceAlias string) string { return "mm2go-tasks." + sourceAlias + ".internal" }

// TransactionalID is the transactional id of a flow's writer to the target,
// "<source>-mm2go-<source>-><target>-0" (task 0), after MM2's
// "<group>-<connector>-<task>".
func TransactionalID(sourceAlias, targetAlias string) string {
	return LeaseGroup(sourceAlias) + "-" + sourceAlias + "->" + targetAlias + "-0"
}

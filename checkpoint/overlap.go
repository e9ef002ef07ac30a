package checkpoint

import "github.com/mm2go/mm2go/policy"

// ReasonForeignRecords fails a failover check when other producers' records
// lie on the target between replicated records, below the translation and
// above where the group is: no offset then avoids both a loss and a
// re-delivery (see ModeOverlap). It happens when producers are switched to
// the target before replication of the source's tail finished, under the
// identity policy.
const ReasonForeignRecords FailureReason = "foreign_records"

// noLoss lowers a translated offset to the first record of another
// producer between the group's current target offset (its start, without
// one) and the translation, so that none is skipped. moved reports that it
// did; the replicated records from there to the translation are then
// delivered again.
func noLoss(idx *Index, tp TopicPartition, translated, current int64) (offset int64, moved bool) {
	if idx == nil {
		return translated, false
	}
	if f, ok := idx.ForeignRun(tp, max(current, 0), translated); ok {
		return f, true
	}
	return translated, false
}

// upstreamOf returns the source topic whose remote topic is remote under
// flow source->target's policy: remote itself under the identity policy,
// remote without "<source><sep>" under the default policy.
func upstreamOf(p policy.Policy, source, remote string) (string, bool) {
	if p.FormatRemoteTopic(source, remote) == remote {
		return remote, true
	}
	if up, ok := p.UpstreamTopic(remote); ok && p.FormatRemoteTopic(source, up) == remote {
		return up, true
	}
	return "", false
}

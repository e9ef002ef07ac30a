package policy

// TopicSelector decides whether the flow source->TargetAlias replicates a topic of the source
// cluster, as MirrorSourceConnector.shouldReplicateTopic does:
//
//	(Topics.Match(topic) || (HeartbeatsReplication && Policy.IsHeartbeatsTopic(topic)))
//	    && !Policy.IsInternalTopic(topic) && !Policy.IsCycle(topic, TargetAlias)
type TopicSelector struct {
	// Policy is the flow's replication policy.
	Policy Policy
	// Topics is the flow's topic filter ("topics" / "topics.exclude"); nil matches nothing.
	Topics *Filter
	// HeartbeatsReplication is "heartbeats.replication.enabled" (default true): heartbeat topics
	// are replicated even when Topics rejects them.
	HeartbeatsReplication bool
	// TargetAlias is the alias of the flow's target cluster, used for cycle detection.
	TargetAlias string
}

// ShouldReplicate reports whether topic, a topic of the flow's source cluster, is replicated.
func (s TopicSelector) ShouldReplicate(topic string) bool {
	wanted := s.Topics.Match(topic) || (s.HeartbeatsReplication && s.Policy.IsHeartbeatsTopic(topic))
	return wanted && !s.Policy.IsInternalTopic(topic) && !s.Policy.IsCycle(topic, s.TargetAlias)
}

package policy

import "slices"

// This file holds MM2's MirrorClient topology logic: what the topic names of one
// cluster say about the replication flows that reach it. The functions take the cluster's topic
// list instead of an admin client, so listing the topics (and closing the client) stays with the
// caller. Unlike Java, which returns sets, they return sorted slices without duplicates, so output
// built from them is stable.

// HeartbeatTopics returns the heartbeats topics among topics, local ("heartbeats") and remote
// ("A.heartbeats", "B.A.heartbeats"): the topics IsHeartbeatsTopic accepts, sorted.
func (p Policy) HeartbeatTopics(topics []string) []string {
	return sortedMatching(topics, p.IsHeartbeatsTopic)
}

// CheckpointTopics returns the checkpoints topics among topics ("A.checkpoints.internal"; a bare
// "checkpoints.internal" does not qualify): the topics IsCheckpointsTopic accepts, sorted.
func (p Policy) CheckpointTopics(topics []string) []string {
	return sortedMatching(topics, p.IsCheckpointsTopic)
}

// UpstreamClusters returns the aliases of every cluster whose heartbeats reach this cluster,
// directly or over several hops: for each heartbeats topic, every source found by following
// TopicSource and UpstreamTopic until a topic has no source or a source repeats (the identity
// policy could otherwise loop). {"heartbeats", "source1.heartbeats", "source1.source2.heartbeats"}
// gives [source1 source2]. The result is sorted; an alias may be "" when a topic starts with the
// separator (".heartbeats"), as in Java.
func (p Policy) UpstreamClusters(topics []string) []string {
	var out []string
	for _, t := range p.HeartbeatTopics(topics) {
		out = append(out, p.allSources(t)...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// allSources is MirrorClient.allSources: the sources along topic's upstream path, in order, each
// once.
func (p Policy) allSources(topic string) []string {
	var sources []string
	src, ok := p.TopicSource(topic)
	for ok && !slices.Contains(sources, src) {
		sources = append(sources, src)
		if topic, ok = p.UpstreamTopic(topic); !ok {
			break
		}
		src, ok = p.TopicSource(topic)
	}
	return sources
}

// ReplicationHops returns the shortest number of replication hops from cluster upstreamAlias to
// this cluster, measured on the heartbeats topics among topics ("A.heartbeats" is 1 hop from A,
// "B.A.heartbeats" 2), or -1 when no heartbeats topic comes from upstreamAlias.
func (p Policy) ReplicationHops(topics []string, upstreamAlias string) int {
	best := -1
	for _, t := range p.HeartbeatTopics(topics) {
		if h := p.countHops(t, upstreamAlias); h != -1 && (best == -1 || h < best) {
			best = h
		}
	}
	return best
}

// countHops is MirrorClient.countHopsForTopic: the position of alias on topic's upstream path
// (1 for the direct source), or -1 when the path ends, or repeats a source, before reaching it.
func (p Policy) countHops(topic, alias string) int {
	var visited []string
	for hops := 1; ; hops++ {
		src, ok := p.TopicSource(topic)
		switch {
		case !ok:
			return -1
		case src == alias:
			return hops
		case slices.Contains(visited, src):
			// The identity policy names a topic's upstream after the topic itself, so its
			// path never ends; a repeated source means alias is not on it.
			return -1
		}
		visited = append(visited, src)
		if topic, ok = p.UpstreamTopic(topic); !ok {
			return -1
		}
	}
}

// RemoteTopics returns the topics among topics that were replicated from another cluster: not
// internal (IsInternalTopic) and with a source (TopicSource), sorted. Under the identity policy
// with a source alias every non-internal topic counts except a bare "heartbeats".
func (p Policy) RemoteTopics(topics []string) []string {
	return sortedMatching(topics, p.isRemoteTopic)
}

// RemoteTopicsFrom returns the remote topics among topics (see RemoteTopics) replicated directly
// from cluster alias: "alias.orders" but not "other.alias.orders". The result is sorted.
func (p Policy) RemoteTopicsFrom(topics []string, alias string) []string {
	return sortedMatching(topics, func(t string) bool {
		src, ok := p.TopicSource(t)
		return ok && src == alias && !p.IsInternalTopic(t)
	})
}

func (p Policy) isRemoteTopic(topic string) bool {
	if p.IsInternalTopic(topic) {
		return false
	}
	_, ok := p.TopicSource(topic)
	return ok
}

// sortedMatching returns the distinct topics that match keep, sorted.
func sortedMatching(topics []string, keep func(string) bool) []string {
	var out []string
	for _, t := range topics {
		if keep(t) {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

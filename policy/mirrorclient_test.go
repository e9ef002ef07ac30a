package policy

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The cases below are MM2's MirrorClientTest (connect-mirror-client) and MirrorClient's documented
// examples, run against the topic-list functions that replace MirrorClient's listTopics calls.

func TestMirrorClientTopicClasses(t *testing.T) {
	dot := New(KindDefault, "", true, "")
	tests := []struct {
		topic      string
		heartbeat  bool
		checkpoint bool
	}{
		{topic: "heartbeats", heartbeat: true},
		{topic: "source1.heartbeats", heartbeat: true},
		{topic: "source2.source1.heartbeats", heartbeat: true},
		{topic: "heartbeats!"},
		{topic: "!heartbeats"},
		{topic: "source1heartbeats"},
		{topic: "source1-heartbeats"},
		{topic: "source1.checkpoints.internal", checkpoint: true},
		{topic: "checkpoints.internal"},
		{topic: "checkpoints-internal"},
		{topic: "checkpoints.internal!"},
		{topic: "!checkpoints.internal"},
		{topic: "source1checkpointsinternal"},
	}
	for _, tc := range tests {
		t.Run(tc.topic, func(t *testing.T) {
			require.Equal(t, tc.heartbeat, len(dot.HeartbeatTopics([]string{tc.topic})) == 1, "heartbeats topic")
			require.Equal(t, tc.checkpoint, len(dot.CheckpointTopics([]string{tc.topic})) == 1, "checkpoints topic")
		})
	}
}

func TestMirrorClientCountHops(t *testing.T) {
	dot := New(KindDefault, "", true, "")
	identity := New(KindIdentity, "", true, "source")
	tests := []struct {
		name   string
		p      Policy
		topic  string
		source string
		want   int
	}{
		{"local topic", dot, "topic", "source", -1},
		{"topic named like the source", dot, "source", "source", -1},
		{"source as a prefix without separator", dot, "sourcetopic", "source", -1},
		{"other source", dot, "source1.topic", "source2", -1},
		{"one hop", dot, "source1.topic", "source1", 1},
		{"direct source of two hops", dot, "source2.source1.topic", "source2", 1},
		{"two hops", dot, "source2.source1.topic", "source1", 2},
		{"three hops", dot, "source3.source2.source1.topic", "source1", 3},
		{"not on the path", dot, "source3.source2.source1.topic", "source4", -1},
		{"identity, its source", identity, "topic1", "source", 1},
		{"identity, a cycle ends the walk", identity, "topic1", "other", -1},
		{"identity, no source alias", New(KindIdentity, "", true, ""), "topic1", "source", -1},
		{"identity, heartbeats follow the default", identity, "b.a.heartbeats", "a", 2},
		{"custom separator", New(KindDefault, "__", true, ""), "b__a__topic", "a", 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.p.countHops(tc.topic, tc.source))
		})
	}
}

func TestMirrorClientTopology(t *testing.T) {
	dot := New(KindDefault, "", true, "")
	identity := New(KindIdentity, "", true, "source")
	// Topic lists of MirrorClientTest.
	hbTopics := []string{"topic1", "topic2", "heartbeats", "source1.heartbeats", "source2.source1.heartbeats", "source3.heartbeats"}
	hopsTopics := []string{"topic1", "topic2", "heartbeats", "source1.heartbeats", "source1.source2.heartbeats", "source3.heartbeats"}
	upTopics := []string{"topic1", "topic2", "heartbeats", "source1.heartbeats", "source1.source2.heartbeats", "source3.source4.source5.heartbeats"}
	cpTopics := []string{"topic1", "topic2", "checkpoints.internal", "source1.checkpoints.internal", "source2.source1.checkpoints.internal", "source3.checkpoints.internal"}
	remote := []string{"topic1", "topic2", "topic3", "source1.topic4", "source1.source2.topic5", "source3.source4.source5.topic6"}
	remoteSep := []string{"topic1", "topic2", "topic3", "source1__topic4", "source1__source2__topic5", "source3__source4__source5__topic6"}

	tests := []struct {
		name string
		got  any
		want any
	}{
		{"heartbeat topics", dot.HeartbeatTopics(hbTopics),
			[]string{"heartbeats", "source1.heartbeats", "source2.source1.heartbeats", "source3.heartbeats"}},
		{"checkpoint topics", dot.CheckpointTopics(cpTopics),
			[]string{"source1.checkpoints.internal", "source2.source1.checkpoints.internal", "source3.checkpoints.internal"}},
		{"hops from source1", dot.ReplicationHops(hopsTopics, "source1"), 1},
		{"hops from source2", dot.ReplicationHops(hopsTopics, "source2"), 2},
		{"hops from source3", dot.ReplicationHops(hopsTopics, "source3"), 1},
		{"hops from source4", dot.ReplicationHops(hopsTopics, "source4"), -1},
		{"hops take the shortest path", dot.ReplicationHops([]string{"b.a.heartbeats", "c.b.a.heartbeats", "a.heartbeats"}, "a"), 1},
		{"hops only count heartbeats topics", dot.ReplicationHops([]string{"a.orders", "heartbeats"}, "a"), -1},
		{"hops without topics", dot.ReplicationHops(nil, "a"), -1},
		{"upstream clusters", dot.UpstreamClusters(upTopics),
			[]string{"source1", "source2", "source3", "source4", "source5"}},
		{"upstream clusters, identity policy", identity.UpstreamClusters(upTopics),
			[]string{"source1", "source2", "source3", "source4", "source5"}},
		{"upstream clusters ignore data topics", dot.UpstreamClusters([]string{"a.orders", "b.a.orders", "heartbeats"}), []string(nil)},
		{"upstream clusters, duplicates once", dot.UpstreamClusters([]string{"b.heartbeats", "b.a.heartbeats", "a.heartbeats", "a.heartbeats"}),
			[]string{"a", "b"}},
		{"upstream clusters, a repeated source ends the walk", dot.UpstreamClusters([]string{"a.b.a.heartbeats"}), []string{"a", "b"}},
		{"upstream clusters, empty alias as in Java", dot.UpstreamClusters([]string{".heartbeats"}), []string{""}},
		{"remote topics", dot.RemoteTopics(remote),
			[]string{"source1.source2.topic5", "source1.topic4", "source3.source4.source5.topic6"}},
		{"remote topics, custom separator", New(KindDefault, "__", true, "").RemoteTopics(remoteSep),
			[]string{"source1__source2__topic5", "source1__topic4", "source3__source4__source5__topic6"}},
		{"remote topics, identity policy", identity.RemoteTopics([]string{"topic1", "topic2", "topic3", "heartbeats", "backup.heartbeats"}),
			[]string{"backup.heartbeats", "topic1", "topic2", "topic3"}},
		{"remote topics, identity policy without alias", New(KindIdentity, "", true, "").RemoteTopics([]string{"topic1", "backup.heartbeats"}),
			[]string{"backup.heartbeats"}},
		{"remote topics skip internal topics", dot.RemoteTopics([]string{"a.checkpoints.internal", "mm2-offsets.a.internal", "__consumer_offsets", "a.x-internal", "a.orders"}),
			[]string{"a.orders"}},
		{"remote topics from source1", dot.RemoteTopicsFrom(remote, "source1"), []string{"source1.source2.topic5", "source1.topic4"}},
		{"remote topics from source2 (not direct)", dot.RemoteTopicsFrom(remote, "source2"), []string(nil)},
		{"remote topics from source3", dot.RemoteTopicsFrom(remote, "source3"), []string{"source3.source4.source5.topic6"}},
		{"remote topics from, internal skipped", dot.RemoteTopicsFrom([]string{"a.checkpoints.internal", "a.heartbeats"}, "a"), []string{"a.heartbeats"}},
		{"remote topics from, identity policy", identity.RemoteTopicsFrom([]string{"topic1", "heartbeats", "backup.heartbeats"}, "source"), []string{"topic1"}},
		{"identity formats data topics unchanged", identity.FormatRemoteTopic("primary", "topic1"), "topic1"},
		{"identity source of a data topic", first(New(KindIdentity, "", true, "primary").TopicSource("topic1")), "primary"},
		{"identity formats heartbeats", identity.FormatRemoteTopic("backup", "heartbeats"), "backup.heartbeats"},
		{"identity source of heartbeats", first(identity.TopicSource("backup.heartbeats")), "backup"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.got)
		})
	}
}

package policy

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKind(t *testing.T) {
	tests := []struct {
		class   string
		want    Kind
		wantErr bool
	}{
		{class: "org.apache.kafka.connect.mirror.DefaultReplicationPolicy", want: KindDefault},
		{class: " org.apache.kafka.connect.mirror.IdentityReplicationPolicy ", want: KindIdentity},
		{class: "IdentityReplicationPolicy", wantErr: true},
		{class: "org.apache.kafka.connect.mirror.LegacyReplicationPolicy", wantErr: true},
		{class: "", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.class, func(t *testing.T) {
			got, err := ParseKind(tc.class)
			if tc.wantErr {
				require.ErrorContains(t, err, "unsupported replication policy class")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Equal(t, got, New(got, "", true, "").Kind())
		})
	}
	require.Equal(t, DefaultPolicyClass, KindDefault.String())
	require.Equal(t, IdentityPolicyClass, KindIdentity.String())
	require.Equal(t, "Kind(7)", Kind(7).String())
}

func TestDefaultPolicyNames(t *testing.T) {
	dot := New(KindDefault, "", true, "")
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"separator defaults to dot", dot.Separator(), "."},
		{"format remote topic", dot.FormatRemoteTopic("us-west", "orders"), "us-west.orders"},
		{"upstream of B.A.orders", first(dot.UpstreamTopic("B.A.orders")), "A.orders"},
		{"original of B.A.orders", dot.OriginalTopic("B.A.orders"), "orders"},
		{"original of a local topic", dot.OriginalTopic("orders"), "orders"},
		{"heartbeats topic", dot.HeartbeatsTopic(), "heartbeats"},
		{"offset syncs topic", dot.OffsetSyncsTopic("B"), "mm2-offset-syncs.B.internal"},
		{"checkpoints topic", dot.CheckpointsTopic("A"), "A.checkpoints.internal"},
		{"connect offsets topic", ConnectOffsetsTopic("A"), "mm2-offsets.A.internal"},
		{"custom separator", New(KindDefault, "__", true, "").FormatRemoteTopic("source1", "topic4"), "source1__topic4"},
		{"custom separator, offset syncs, internal on", New(KindDefault, "__", true, "").OffsetSyncsTopic("CLUSTER"), "mm2-offset-syncs__CLUSTER__internal"},
		{"custom separator, offset syncs, internal off", New(KindDefault, "__", false, "").OffsetSyncsTopic("CLUSTER"), "mm2-offset-syncs.CLUSTER.internal"},
		{"custom separator, checkpoints, internal on", New(KindDefault, "__", true, "").CheckpointsTopic("CLUSTER"), "CLUSTER__checkpoints__internal"},
		{"custom separator, checkpoints, internal off", New(KindDefault, "__", false, "").CheckpointsTopic("CLUSTER"), "CLUSTER.checkpoints.internal"},
		{"custom separator, heartbeats unchanged", New(KindDefault, "__", true, "").HeartbeatsTopic(), "heartbeats"},
		{"internal separator flag ignored without a separator", New(KindDefault, "", false, "").CheckpointsTopic("A"), "A.checkpoints.internal"},
		{"connect offsets topic ignores the separator", ConnectOffsetsTopic("B-1"), "mm2-offsets.B-1.internal"},
		{"zero value behaves like the default", Policy{}.FormatRemoteTopic("A", "t") + " " + Policy{}.CheckpointsTopic("A"), "A.t A.checkpoints.internal"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.got)
		})
	}
}

// first drops the ok of a (string, ok) pair.
func first(s string, _ bool) string { return s }

func TestDefaultPolicyTopicSource(t *testing.T) {
	// Outcomes of DefaultReplicationPolicy (connect-mirror-client 4.3.1) for each topic; ok=false is
	// Java's null.
	tests := []struct {
		sep      string
		topic    string
		source   string
		ok       bool
		upstream string
		original string
	}{
		{".", "us-west.orders", "us-west", true, "orders", "orders"},
		{".", "a.b.c", "a", true, "b.c", "c"},
		{".", "a.", "", false, "", "a."},
		{".", ".a", "", true, "a", "a"},
		{".", "a..b", "a", true, ".b", "b"},
		{".", "...", "", false, "", "..."},
		{".", "", "", false, "", ""},
		{".", ".", "", false, "", "."},
		{".", "a", "", false, "", "a"},
		{".", "..a", "", true, ".a", "a"},
		{".", "a.b.", "a", true, "b.", "b."},
		{".", "a.b..", "a", true, "b..", "b.."},
		{".", "..", "", false, "", ".."},
		{".", ".a.", "", true, "a.", "a."},
		{"__", "a___b", "a", true, "_b", "_b"},
		{"__", "a____b", "a", true, "__b", "b"},
		{"__", "___", "", true, "_", "_"},
		{"__", "__a", "", true, "a", "a"},
		{"__", "a__", "", false, "", "a__"},
		{"__", "a__b__c", "a", true, "b__c", "c"},
		{"__", "_a__b", "_a", true, "b", "b"},
		{"__", "source1.topic4", "", false, "", "source1.topic4"},
		{"_", "us-west.heartbeats", "", false, "", "us-west.heartbeats"},
	}
	for _, tc := range tests {
		t.Run(tc.sep+" "+tc.topic, func(t *testing.T) {
			p := New(KindDefault, tc.sep, true, "ignored")
			src, ok := p.TopicSource(tc.topic)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.source, src)
			up, ok := p.UpstreamTopic(tc.topic)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.upstream, up)
			require.Equal(t, tc.original, p.OriginalTopic(tc.topic))
		})
	}
}

func TestPolicyTopicClasses(t *testing.T) {
	dot := New(KindDefault, "", true, "")
	under := New(KindDefault, "_", true, "")
	underNoInternal := New(KindDefault, "_", false, "")
	tests := []struct {
		name  string
		check func(string) bool
		topic string
		want  bool
	}{
		// MirrorClientTest.testIsHeartbeatTopic.
		{"heartbeats", dot.IsHeartbeatsTopic, "heartbeats", true},
		{"heartbeats", dot.IsHeartbeatsTopic, "source1.heartbeats", true},
		{"heartbeats", dot.IsHeartbeatsTopic, "source2.source1.heartbeats", true},
		{"heartbeats", dot.IsHeartbeatsTopic, "heartbeats!", false},
		{"heartbeats", dot.IsHeartbeatsTopic, "!heartbeats", false},
		{"heartbeats", dot.IsHeartbeatsTopic, "source1heartbeats", false},
		{"heartbeats", dot.IsHeartbeatsTopic, "source1-heartbeats", false},
		{"heartbeats with _", under.IsHeartbeatsTopic, "us-west.heartbeats", false},
		{"heartbeats with _", under.IsHeartbeatsTopic, "us-west_heartbeats", true},
		// MirrorClientTest.testIsCheckpointTopic.
		{"checkpoints", dot.IsCheckpointsTopic, "source1.checkpoints.internal", true},
		{"checkpoints", dot.IsCheckpointsTopic, "checkpoints.internal", false},
		{"checkpoints", dot.IsCheckpointsTopic, "checkpoints-internal", false},
		{"checkpoints", dot.IsCheckpointsTopic, "checkpoints.internal!", false},
		{"checkpoints", dot.IsCheckpointsTopic, "!checkpoints.internal", false},
		{"checkpoints", dot.IsCheckpointsTopic, "source1checkpointsinternal", false},
		{"checkpoints with _", under.IsCheckpointsTopic, "A_checkpoints_internal", true},
		{"checkpoints with _", under.IsCheckpointsTopic, "A.checkpoints.internal", false},
		{"checkpoints with _, internal off", underNoInternal.IsCheckpointsTopic, "A.checkpoints.internal", true},
		// ReplicationPolicyTest.testInternalTopic.
		{"internal", dot.IsInternalTopic, "__consumer_offsets", true},
		{"internal", dot.IsInternalTopic, ".hiddentopic", true},
		{"internal", dot.IsInternalTopic, "mm2-offsets.CLUSTER.internal", true},
		{"internal", dot.IsInternalTopic, "mm2-offsets-CLUSTER-internal", true},
		{"internal", dot.IsInternalTopic, "mm2-offsets_CLUSTER_internal", false},
		{"internal", dot.IsInternalTopic, "orders", false},
		{"internal", dot.IsInternalTopic, "_single_underscore", false},
		{"internal with _", under.IsInternalTopic, "mm2-offset-syncs_B_internal", true},
		{"mm2 internal", dot.IsMM2InternalTopic, "A.checkpoints.internal", true},
		{"mm2 internal", dot.IsMM2InternalTopic, "mm2-offsets-A-internal", false},
		{"mm2 internal with _", under.IsMM2InternalTopic, "mm2-offset-syncs_B_internal", true},
		{"mm2 internal with _", under.IsMM2InternalTopic, "mm2-offset-syncs.B.internal", false},
		{"mm2 internal with _, internal off", underNoInternal.IsMM2InternalTopic, "mm2-offset-syncs.B.internal", true},
	}
	for _, tc := range tests {
		t.Run(tc.name+" "+tc.topic, func(t *testing.T) {
			require.Equal(t, tc.want, tc.check(tc.topic))
		})
	}
}

func TestIdentityPolicy(t *testing.T) {
	primary := New(KindIdentity, "", true, "primary")
	tests := []struct {
		name string
		got  any
		want any
	}{
		// MirrorClientTest.testIdentityReplicationTopicSource.
		{"format data topic", primary.FormatRemoteTopic("primary", "topic1"), "topic1"},
		{"source of data topic", pair(primary.TopicSource("topic1")), pair("primary", true)},
		{"format heartbeats", primary.FormatRemoteTopic("backup", "heartbeats"), "backup.heartbeats"},
		{"source of remote heartbeats", pair(primary.TopicSource("backup.heartbeats")), pair("backup", true)},
		{"source of local heartbeats", pair(primary.TopicSource("heartbeats")), pair("", false)},
		{"upstream of data topic is itself", pair(primary.UpstreamTopic("a.b")), pair("a.b", true)},
		{"upstream of remote heartbeats", pair(primary.UpstreamTopic("B.A.heartbeats")), pair("A.heartbeats", true)},
		{"original of data topic", primary.OriginalTopic("a.b"), "a.b"},
		{"original of remote heartbeats", primary.OriginalTopic("B.A.heartbeats"), "heartbeats"},
		{"heartbeat suffix quirk", primary.FormatRemoteTopic("backup", "myheartbeats"), "backup.myheartbeats"},
		{"is heartbeats", primary.IsHeartbeatsTopic("othersource.heartbeats"), true},
		{"custom separator for heartbeats", New(KindIdentity, "_", true, "p").FormatRemoteTopic("backup", "heartbeats"), "backup_heartbeats"},
		{"no source alias configured", pair(New(KindIdentity, "", true, "").TopicSource("topic1")), pair("", false)},
		{"internal topic names as default", primary.CheckpointsTopic("primary") + " " + primary.OffsetSyncsTopic("backup"), "primary.checkpoints.internal mm2-offset-syncs.backup.internal"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.got)
		})
	}
}

type result struct {
	s  string
	ok bool
}

func pair(s string, ok bool) result { return result{s, ok} }

func TestIsCycle(t *testing.T) {
	tests := []struct {
		name   string
		policy Policy
		topic  string
		want   bool
	}{
		// MirrorSourceConnectorTest.testNoCycles, flow source->target.
		{"default", New(KindDefault, "", true, ""), "target.topic1", true},
		{"default", New(KindDefault, "", true, ""), "target.source.topic1", true},
		{"default", New(KindDefault, "", true, ""), "source.target.topic1", true},
		{"default", New(KindDefault, "", true, ""), "target.source.target.topic1", true},
		{"default", New(KindDefault, "", true, ""), "source.target.source.topic1", true},
		{"default", New(KindDefault, "", true, ""), "topic1", false},
		{"default", New(KindDefault, "", true, ""), "source.topic1", false},
		{"default", New(KindDefault, "", true, ""), "C.A.orders", false},
		{"default", New(KindDefault, "", true, ""), "C.target.orders", true},
		{"default, separator _", New(KindDefault, "_", true, ""), "target.topic1", false},
		{"default, separator _", New(KindDefault, "_", true, ""), "source_target_topic1", true},
		// Identity: data topics are never cycles, heartbeats still are.
		{"identity", New(KindIdentity, "", true, "source"), "target.topic1", false},
		{"identity", New(KindIdentity, "", true, "source"), "source.target.source.topic1", false},
		{"identity", New(KindIdentity, "", true, "source"), "target.heartbeats", true},
		{"identity", New(KindIdentity, "", true, "source"), "source.target.heartbeats", true},
		{"identity", New(KindIdentity, "", true, "source"), "heartbeats", false},
		{"identity", New(KindIdentity, "", true, "source"), "othersource.heartbeats", false},
		// An identity policy whose source alias is the target: every data topic "came from" it.
		{"identity, alias is target", New(KindIdentity, "", true, "target"), "topic1", true},
	}
	for _, tc := range tests {
		t.Run(tc.name+" "+tc.topic, func(t *testing.T) {
			require.Equal(t, tc.want, tc.policy.IsCycle(tc.topic, "target"))
		})
	}
}

// FuzzPolicy checks that the name walks terminate and agree with each other for any topic,
// separator and alias: OriginalTopic is idempotent, and for the default policy TopicSource and
// UpstreamTopic agree and split the topic as "<source><sep><upstream>".
func FuzzPolicy(f *testing.F) {
	f.Add("B.A.orders", ".", "A", false)
	f.Add("x__y___", "__", "", true)
	f.Add("s1.heartbeats", "_", "src", true)
	f.Fuzz(func(t *testing.T, topic, sep, alias string, identity bool) {
		kind := KindDefault
		if identity {
			kind = KindIdentity
		}
		p := New(kind, sep, true, alias)
		orig := p.OriginalTopic(topic)
		require.Equal(t, orig, p.OriginalTopic(orig))
		_ = p.IsCycle(topic, alias)
		_ = p.IsHeartbeatsTopic(topic)
		src, ok := p.TopicSource(topic)
		up, upOK := p.UpstreamTopic(topic)
		if kind == KindDefault {
			require.Equal(t, ok, upOK)
			if ok {
				require.Equal(t, topic, src+p.Separator()+up)
			}
		}
	})
}

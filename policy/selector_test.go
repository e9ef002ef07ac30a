package policy

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func newTestFilter(t *testing.T, include, exclude []string) *Filter {
	t.Helper()
	f, err := NewFilter(include, exclude)
	require.NoError(t, err)
	return f
}

func TestTopicSelector(t *testing.T) {
	acceptAll := newTestFilter(t, []string{".*"}, nil)
	rejectAll := newTestFilter(t, nil, nil)
	defaults := newTestFilter(t, DefaultTopicsInclude(), DefaultTopicsExclude())
	dflt := New(KindDefault, "", true, "")
	identity := New(KindIdentity, "", true, "source")
	identityNoAlias := New(KindIdentity, "", true, "")

	tests := []struct {
		name       string
		sel        TopicSelector
		replicated []string
		skipped    []string
	}{
		{
			// MirrorSourceConnectorTest.testNoCycles (accept-all filter, flow source->target).
			name:       "cycle truth table, default policy",
			sel:        TopicSelector{Policy: dflt, Topics: acceptAll, HeartbeatsReplication: true, TargetAlias: "target"},
			replicated: []string{"topic1", "source.topic1"},
			skipped:    []string{"target.topic1", "target.source.topic1", "source.target.topic1", "target.source.target.topic1", "source.target.source.topic1"},
		},
		{
			// MirrorSourceConnectorTest.testIdentityReplication, with and without source.cluster.alias.
			name: "identity policy allows data cycles but not heartbeat cycles",
			sel:  TopicSelector{Policy: identity, Topics: acceptAll, HeartbeatsReplication: true, TargetAlias: "target"},
			replicated: []string{"target.topic1", "target.source.topic1", "source.target.topic1", "target.source.target.topic1",
				"source.target.source.topic1", "topic1", "othersource.topic1", "heartbeats", "othersource.heartbeats"},
			skipped: []string{"target.heartbeats", "target.source.heartbeats", "source.target.heartbeats", "target.source.target.heartbeats", "source.target.source.heartbeats"},
		},
		{
			name:       "identity policy without a source alias",
			sel:        TopicSelector{Policy: identityNoAlias, Topics: acceptAll, HeartbeatsReplication: true, TargetAlias: "target"},
			replicated: []string{"target.topic1", "topic1", "heartbeats", "othersource.heartbeats"},
			skipped:    []string{"target.heartbeats", "source.target.heartbeats"},
		},
		{
			// testReplicatesHeartbeatsByDefault.
			name:       "heartbeats replicated by default",
			sel:        TopicSelector{Policy: dflt, Topics: defaults, HeartbeatsReplication: true, TargetAlias: "target"},
			replicated: []string{"heartbeats", "us-west.heartbeats", "orders", "source.orders"},
			skipped:    []string{"__consumer_offsets", "mm2-offsets.source.internal", "source.checkpoints.internal", "x.replica", "a-internal", "target.orders"},
		},
		{
			// testReplicatesHeartbeatsDespiteFilter.
			name:       "heartbeats replicated despite a reject-all filter",
			sel:        TopicSelector{Policy: dflt, Topics: rejectAll, HeartbeatsReplication: true, TargetAlias: "target"},
			replicated: []string{"heartbeats", "us-west.heartbeats"},
			skipped:    []string{"orders", "target.heartbeats", "heartbeats-internal"},
		},
		{
			name:       "separator _: us-west.heartbeats is not a heartbeats topic",
			sel:        TopicSelector{Policy: New(KindDefault, "_", true, ""), Topics: rejectAll, HeartbeatsReplication: true, TargetAlias: "target"},
			replicated: []string{"heartbeats", "us-west_heartbeats"},
			skipped:    []string{"us-west.heartbeats"},
		},
		{
			// testDoesNotReplicateHeartbeatsWhenDisabled.
			name:    "heartbeats replication disabled",
			sel:     TopicSelector{Policy: dflt, Topics: newTestFilter(t, []string{"orders"}, nil), HeartbeatsReplication: false, TargetAlias: "target"},
			skipped: []string{"heartbeats", "us-west.heartbeats"},
		},
		{
			// testReplicatesHeartbeatsWhenDisabledButFilterAllows.
			name:       "heartbeats replication disabled but the filter allows them",
			sel:        TopicSelector{Policy: dflt, Topics: acceptAll, HeartbeatsReplication: false, TargetAlias: "target"},
			replicated: []string{"heartbeats", "us-west.heartbeats"},
		},
		{
			name:    "internal topics are never replicated, even if the filter accepts them",
			sel:     TopicSelector{Policy: dflt, Topics: acceptAll, HeartbeatsReplication: true, TargetAlias: "target"},
			skipped: []string{"__consumer_offsets", ".hidden", "mm2-offsets.source.internal", "mm2-offset-syncs.target.internal", "connect-configs-internal"},
		},
		{
			name:    "nil filter matches nothing",
			sel:     TopicSelector{Policy: dflt, TargetAlias: "target"},
			skipped: []string{"orders", "heartbeats"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, topic := range tc.replicated {
				require.True(t, tc.sel.ShouldReplicate(topic), "topic %q should be replicated", topic)
			}
			for _, topic := range tc.skipped {
				require.False(t, tc.sel.ShouldReplicate(topic), "topic %q should not be replicated", topic)
			}
		})
	}
}

package itopic_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/mm2go/mm2go/internal/itopic"
	"github.com/mm2go/mm2go/internal/ktest"
)

// TestEnsureCreated: the first call creates the compacted topic and says
// so; the next start (a new client) finds it and says it did not create it
// (a caller reads it then).
func TestEnsureCreated(t *testing.T) {
	c := ktest.Fake(t, 1)
	adm := kadm.NewClient(ktest.Client(t, c.ListenAddrs()))
	ctx := context.Background()
	spec := itopic.Spec{Name: "mm2-offsets.a.internal", Partitions: 5, ReplicationFactor: 1}

	n, created, err := itopic.EnsureCreated(ctx, adm, spec)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, int32(5), n)
	cfg, err := adm.DescribeTopicConfigs(ctx, spec.Name)
	require.NoError(t, err)
	require.NoError(t, cfg[0].Err)
	policy := ""
	for _, kv := range cfg[0].Configs {
		if kv.Key == "cleanup.policy" {
			policy = kv.MaybeValue()
		}
	}
	require.Equal(t, "compact", policy)

	// A new client: the first one caches the listing that found the topic
	// missing for kgo.MetadataMinAge.
	adm = kadm.NewClient(ktest.Client(t, c.ListenAddrs()))
	n, created, err = itopic.EnsureCreated(ctx, adm, spec)
	require.NoError(t, err)
	require.False(t, created, "a topic that exists is not created again")
	require.Equal(t, int32(5), n)

	// Ensure is the same without the report.
	n, err = itopic.Ensure(ctx, adm, itopic.Spec{Name: "other", Partitions: 2, ReplicationFactor: 1})
	require.NoError(t, err)
	require.Equal(t, int32(2), n)
}

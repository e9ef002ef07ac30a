package itopic_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

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

// TestReaderFetchesBounded: a reader's Fetch requests ask for at most 1 MiB,
// although the consumer settings it is built on (given first, as the
// daemon's clients are) ask for MM2's 50 MiB, and it still reads every
// record, including a batch larger than the bound.
func TestReaderFetchesBounded(t *testing.T) {
	c := ktest.Fake(t, 1)
	ctx := context.Background()
	adm := kadm.NewClient(ktest.Client(t, c.ListenAddrs()))
	_, err := itopic.Ensure(ctx, adm, itopic.Spec{Name: "internal", Partitions: 3, ReplicationFactor: 1})
	require.NoError(t, err)
	prod := ktest.Client(t, c.ListenAddrs(), kgo.ProducerBatchMaxBytes(16<<20), kgo.MaxBufferedBytes(64<<20))
	big := make([]byte, 5<<20)
	recs := []*kgo.Record{{Topic: "internal", Partition: 0, Key: []byte("big"), Value: big}}
	for i := range 300 {
		recs = append(recs, &kgo.Record{Topic: "internal", Partition: int32(i % 3), Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")})
	}
	require.NoError(t, prod.ProduceSync(ctx, recs...).FirstErr())

	var most atomic.Int32
	c.ControlKey(int16(kmsg.Fetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if m := kr.(*kmsg.FetchRequest).MaxBytes; m > most.Load() {
			most.Store(m)
		}
		return nil, nil, false
	})
	reader := ktest.Client(t, c.ListenAddrs(), append([]kgo.Opt{kgo.FetchMaxBytes(50 << 20)}, itopic.ReaderOpts()...)...)
	n := 0
	require.NoError(t, itopic.ReadAll(ctx, reader, "internal", func(*kgo.Record) { n++ }))
	require.Equal(t, 301, n)
	require.Positive(t, most.Load())
	require.LessOrEqual(t, most.Load(), int32(1<<20))
}

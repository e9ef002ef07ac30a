package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestIntegrationWholeBatches: a backlog of large batches (about 590 KB,
// over half of max.partition.fetch.bytes' 1 MiB) crosses from the source
// about once. The broker fills a partition of a Fetch response from its log
// byte for byte, so asking for 1 MiB brought one batch and most of the
// next, cut off, which was dropped and fetched again: about 0.7 bytes
// dropped for each byte copied. The batches mode asks for whole batches, by
// the sizes of the last response's, and what it drops
// (mm2go_replicator_fetch_refetched_bytes_total) stays under a fifth of
// what it copies. The remote topic holds every record, in order.
func TestIntegrationWholeBatches(t *testing.T) { firstPassOnly(testWholeBatches)(t) }

func testWholeBatches(t *testing.T) {
	e := newEnv(t)
	topic := e.topic("whole")
	const partitions, perPartition, valueSize = 2, 1500, 10_000
	e.createTopic(topic, partitions, nil)
	prod, err := kgo.NewClient(kgo.SeedBrokers(sourceSeeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(600_000),
		kgo.ProducerLinger(100*time.Millisecond))
	require.NoError(t, err)
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Random values: the batches keep their size on the broker.
	value := make([]byte, valueSize)
	_, _ = rand.Read(value)
	var failed atomic.Pointer[error]
	for i := range perPartition {
		for part := range int32(partitions) {
			v := append(fmt.Appendf(nil, "%08d", i), value[8:]...)
			prod.Produce(ctx, &kgo.Record{Topic: topic, Partition: part, Value: v}, func(_ *kgo.Record, err error) {
				if err != nil {
					failed.CompareAndSwap(nil, &err)
				}
			})
		}
	}
	require.NoError(t, prod.Flush(ctx))
	if err := failed.Load(); err != nil {
		require.NoError(t, *err, "produce the backlog")
	}

	addr := freePort(t)
	p := e.start("-c", e.config(), "--web.listen-address", addr)
	const want = partitions * perPartition
	eventually(t, time.Minute, "every record on the target", func() bool {
		return records(t, e.dstAdm, e.remote(topic)) >= want
	})
	series := fmt.Sprintf(`mm2go_replicator_fetch_refetched_bytes_total{flow="%s->%s"}`, e.src, e.dst)
	refetched := scrape(t, addr, series)
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM, 30*time.Second), "clean exit after SIGTERM")

	got := readAll(t, targetSeeds, e.remote(topic))
	for part := range int32(partitions) {
		require.Len(t, got[part], perPartition, "records of %s[%d]", e.remote(topic), part)
		for i, r := range got[part] {
			require.Equal(t, fmt.Sprintf("%08d", i), string(r.Value[:8]), "record %d of %s[%d]", i, e.remote(topic), part)
		}
	}
	copied := float64(want * valueSize)
	require.GreaterOrEqual(t, refetched, 0.0, "the metric is served")
	require.Less(t, refetched, copied/5, "bytes fetched twice, of %.0f copied", copied)
	t.Logf("%d records, %.1f MB copied; %.1f MB dropped and fetched again", want, copied/1e6, refetched/1e6)
}

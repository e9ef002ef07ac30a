package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestIntegrationFetchOverlap: overlapping fetches
// (mm2go.fetch.overlap.enabled) on real Kafka, every broker counted as far
// away (mm2go.fetch.far.threshold.ms = 0, as the loopback brokers are not):
// while plain records and transactions, committed and aborted, are written
// at a steady rate, two Fetch requests for the caught-up partitions are out
// on two connections, records come in both responses
// (mm2go_replicator_fetch_refetched_bytes_total grows), and the remote topic
// holds exactly the source's committed records, in order.
func TestIntegrationFetchOverlap(t *testing.T) { firstPassOnly(testFetchOverlap)(t) }

func testFetchOverlap(t *testing.T) {
	e := newEnv(t)
	topic := e.topic("overlap")
	const partitions = 4
	e.createTopic(topic, partitions, nil)
	addr := freePort(t)
	p := e.start("-c", e.config("mm2go.fetch.overlap.enabled = true", "mm2go.fetch.far.threshold.ms = 0"),
		"--web.listen-address", addr)
	eventually(t, time.Minute, "the flow started", func() bool { return strings.Contains(p.out.String(), "source broker is far away") })

	txn, err := kgo.NewClient(kgo.SeedBrokers(sourceSeeds...), kgo.TransactionalID("overlap"+e.id),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer txn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Four seconds of traffic: 8 plain records every 20 ms, and every
	// 200 ms a transaction of a record per partition, every other one
	// aborted.
	sent := map[string]map[int32][]rec{}
	var seq int
	for i := range 200 {
		merge(sent, produceN(t, e.srcCl, []string{topic}, partitions, 8, &seq))
		if i%10 == 5 {
			commit := (i/10)%2 == 0
			require.NoError(t, txn.BeginTransaction())
			for part := range int32(partitions) {
				r := &kgo.Record{Topic: topic, Partition: part, Key: []byte("txn"), Value: []byte(fmt.Sprintf("txn-%d", i)),
					Timestamp: time.Now().Add(-time.Hour).Truncate(time.Millisecond)}
				require.NoError(t, txn.ProduceSync(ctx, r).FirstErr())
				if commit {
					merge(sent, map[string]map[int32][]rec{topic: {part: {recOf(r)}}})
				}
			}
			require.NoError(t, txn.EndTransaction(ctx, kgo.TransactionEndTry(commit)))
		}
		time.Sleep(20 * time.Millisecond)
	}
	want := total(sent)
	eventually(t, time.Minute, "every committed record on the target", func() bool {
		return records(t, e.dstAdm, e.remote(topic)) >= want
	})
	series := fmt.Sprintf(`mm2go_replicator_fetch_refetched_bytes_total{flow="%s->%s"}`, e.src, e.dst)
	refetched := scrape(t, addr, series)
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM, 30*time.Second), "clean exit after SIGTERM")

	got := readAll(t, targetSeeds, e.remote(topic))
	for part, rs := range sent[topic] {
		gotRecs := make([]rec, len(got[part]))
		for i, r := range got[part] {
			gotRecs[i] = recOf(r)
		}
		require.Equal(t, rs, gotRecs, "records of %s[%d]", e.remote(topic), part)
	}
	require.Positive(t, refetched, "records fetched by both overlapping requests")
	t.Logf("%d records copied; %.0f bytes fetched twice", want, refetched)
}

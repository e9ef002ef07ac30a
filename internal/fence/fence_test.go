package fence

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/mm2go/mm2go/internal/ktest"
)

// clusters are the brokers the tests run on: an in-process fake, and the
// real single-node cluster of the test bed when MM2GO_TEST_SEEDS names it.
func clusters(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{"kfake": ktest.Fake(t, 3).ListenAddrs()}
	if s := os.Getenv("MM2GO_TEST_SEEDS"); s != "" {
		out["kafka"] = strings.Split(s, ",")
	}
	return out
}

func newTopic(ctx context.Context, t *testing.T, seeds []string, partitions int32) (*kgo.Client, string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	topic := fmt.Sprintf("fence-%d", time.Now().UnixNano())
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, -1, nil, topic)
	require.NoError(t, err)
	require.NoError(t, resp.Err)
	t.Cleanup(func() { _, _ = kadm.NewClient(cl).DeleteTopics(context.Background(), topic) })
	return cl, topic
}

// onEachCluster runs fn on each of the test clusters, with a new topic of
// the given partitions and a transactional id of the test's own.
func onEachCluster(t *testing.T, partitions int32, fn func(ctx context.Context, t *testing.T, seeds []string, cl *kgo.Client, topic, txnID string)) {
	for name, seeds := range clusters(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cl, topic := newTopic(ctx, t, seeds, partitions)
			fn(ctx, t, seeds, cl, topic, "fence-test-"+topic)
		})
	}
}

// TestAcquireFencesTheOlderEpoch: a writer of the transactional id (here a
// transactional producer with an open transaction and an acknowledged
// record) can neither write nor commit once Acquire ran, and nothing it
// wrote becomes visible to read_committed consumers; the new producer
// writes.
func TestAcquireFencesTheOlderEpoch(t *testing.T) {
	onEachCluster(t, 2, func(ctx context.Context, t *testing.T, seeds []string, cl *kgo.Client, topic, txnID string) {
		old, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.TransactionalID(txnID),
			kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.RecordRetries(3), kgo.ProducerLinger(0))
		require.NoError(t, err)
		defer old.Close()
		require.NoError(t, old.BeginTransaction())
		require.NoError(t, eventuallyProduce(ctx, old, &kgo.Record{Value: []byte("before"), Partition: 0}))

		p, err := Acquire(ctx, cl, txnID, 10*time.Second, map[string][]int32{topic: {0, 1}})
		require.NoError(t, err)
		require.GreaterOrEqual(t, p.ID, int64(0))

		err = old.ProduceSync(ctx, &kgo.Record{Value: []byte("after"), Partition: 1}).FirstErr()
		require.Errorf(t, err, "the fenced producer wrote")
		require.Error(t, old.EndTransaction(ctx, kgo.TryCommit), "the fenced producer committed")

		// Every partition holds the abort marker, and what the fenced
		// producer wrote before it is aborted.
		require.Empty(t, readCommitted(ctx, t, seeds, topic, 2))

		// Acquiring again fences the previous holder too, with a new epoch.
		p2, err := Acquire(ctx, cl, txnID, 10*time.Second, map[string][]int32{topic: {0, 1}})
		require.NoError(t, err)
		require.Equal(t, p.ID, p2.ID)
		require.Greater(t, p2.Epoch, p.Epoch)
	})
}

// TestAcquireFencesIdempotentBatches is how mm2go writes: plain idempotent
// batches (not transactional) with the producer id and epoch Acquire
// returned. After the next Acquire, a batch of the older epoch is refused,
// also on a partition the old writer wrote a moment before, and the new
// epoch writes.
func TestAcquireFencesIdempotentBatches(t *testing.T) {
	onEachCluster(t, 1, func(ctx context.Context, t *testing.T, _ []string, cl *kgo.Client, topic, txnID string) {
		parts := map[string][]int32{topic: {0}}
		old, err := Acquire(ctx, cl, txnID, 10*time.Second, parts)
		require.NoError(t, err)
		require.NoError(t, produceBatch(ctx, cl, topic, old, 0, "old-0"))
		require.NoError(t, produceBatch(ctx, cl, topic, old, 1, "old-1"))

		cur, err := Acquire(ctx, cl, txnID, 10*time.Second, parts)
		require.NoError(t, err)
		err = produceBatch(ctx, cl, topic, old, 2, "old-2")
		require.Truef(t, Fenced(err), "the older epoch wrote after the fence: %v", err)
		require.NoError(t, produceBatch(ctx, cl, topic, cur, 0, "new-0"))
		err = produceBatch(ctx, cl, topic, old, 2, "old-2")
		require.Truef(t, Fenced(err), "the older epoch wrote after the new one: %v", err)
	})
}

// produceBatch writes one record as a v2 batch of producer p with base
// sequence seq, and returns the partition's error.
func produceBatch(ctx context.Context, cl *kgo.Client, topic string, p Producer, seq int32, value string) error {
	var rec kmsg.Record
	rec.Value = []byte(value)
	body := rec.AppendTo(nil)[1:] // kmsg writes Length 0 first: one byte
	body = append(binary.AppendVarint(nil, int64(len(body))), body...)
	now := time.Now().UnixMilli()
	rb := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1, Magic: 2, FirstTimestamp: now, MaxTimestamp: now,
		ProducerID: p.ID, ProducerEpoch: p.Epoch, FirstSequence: seq, NumRecords: 1, Records: body,
	}
	b := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))                                          // length: after it
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli))) // CRC-32C from the attributes on

	md, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		return err
	}
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID = topic, md[topic].ID
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = b
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	raw, err := cl.Broker(int(md[topic].Partitions[0].Leader)).Request(ctx, req)
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(raw.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode)
}

func TestFenced(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("produce: %w", kerr.InvalidProducerEpoch), true},
		{kerr.ProducerFenced, true},
		{kerr.OutOfOrderSequenceNumber, false},
		{errors.New("broker gone"), false},
		{nil, false},
	} {
		require.Equal(t, tc.want, Fenced(tc.err), "%v", tc.err)
	}
}

func eventuallyProduce(ctx context.Context, cl *kgo.Client, r *kgo.Record) error {
	var err error
	for range 50 {
		if err = cl.ProduceSync(ctx, r).FirstErr(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// readCommitted returns the data records of topic's partitions that a
// read_committed consumer gets up to and including the first control record
// (the fence's abort marker) of each partition.
func readCommitted(ctx context.Context, t *testing.T, seeds []string, topic string, partitions int) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.KeepControlRecords(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	var got []string
	marked := map[int32]bool{}
	for len(marked) < partitions {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "no abort marker in every partition of %s", topic)
		fs.EachRecord(func(r *kgo.Record) {
			if r.Attrs.IsControl() {
				marked[r.Partition] = true
			} else if !marked[r.Partition] {
				got = append(got, string(r.Value))
			}
		})
	}
	return got
}

// TestAcquireWithDeadSeeds: a bootstrap list that names brokers that are
// down (one in maintenance, say) does not fail Acquire. kgo sends the
// coordinator lookup to one seed and returns its dial error as is; Acquire
// asks again, and kgo the next seed. On kfake only: the dial path is kgo's,
// and a real broker adds kgo's metadata retries (about 2 s per round).
func TestAcquireWithDeadSeeds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seeds := ktest.Fake(t, 3).ListenAddrs()
	_, topic := newTopic(ctx, t, seeds, 1)
	dead := ktest.DeadAddrs(t, 3)
	// A new client per round, whose first lookup goes to a random seed:
	// one of the dead three in 3 of 4 rounds.
	for i := range 10 {
		cl, err := kgo.NewClient(kgo.SeedBrokers(append(slices.Clone(dead), seeds...)...))
		require.NoError(t, err)
		_, err = Acquire(ctx, cl, "fence-test-"+topic, 10*time.Second, map[string][]int32{topic: {0}})
		cl.Close()
		require.NoError(t, err, "round %d", i)
	}
}

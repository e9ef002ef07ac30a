package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Record shape of every record the benchmark writes to a source topic: a
// 12-byte key, a value of valueSize bytes, and two headers.
const (
	keyLen        = 12 // "k" + 11 digits
	headerTrace   = "trace-id"
	headerTraceN  = 32 // hex characters
	headerOrigin  = "origin"
	headerOriginV = "mm2go-bench"
	// headerSent carries the send time (Unix nanoseconds, 8 bytes big
	// endian) in the latency phase, in place of the trace header.
	headerSent = "sent-ns"
	poolSize   = 1024 // distinct values and trace ids cycled through
)

// recordBytes is the payload of one record as the benchmark counts it for
// MB/s: key, value, header keys and header values.
func recordBytes(valueSize int) int64 {
	return int64(keyLen + valueSize + len(headerTrace) + headerTraceN + len(headerOrigin) + len(headerOriginV))
}

// shape produces the keys, values and headers of source records.
type shape struct {
	values [][]byte
	traces [][]byte
}

// newShape builds the value pool; values are valueSize bytes of JSON-like
// text with random words and random hex ids.
func newShape(valueSize int, seed uint64) *shape {
	// Words make the values look like text: lz4 finds repeats within a batch
	// (as in JSON or log lines) but every value differs.
	words := [...]string{
		"order", "customer", "payment", "shipped", "pending", "warehouse", "invoice", "amount",
		"currency", "EUR", "USD", "status", "created", "updated", "region", "eu-west-1", "us-east-2",
		"sku", "quantity", "discount", "session", "device", "android", "ios", "browser", "referrer",
		"campaign", "latitude", "longitude", "timestamp", "true", "false", "null", "priority",
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s := &shape{values: make([][]byte, poolSize), traces: make([][]byte, poolSize)}
	id := make([]byte, 8)
	for i := range s.values {
		var b bytes.Buffer
		for b.Len() < valueSize {
			for j := range id {
				id[j] = byte(rng.Uint32())
			}
			fmt.Fprintf(&b, `{"id":"%s","%s":"%s","%s":%d},`, hex.EncodeToString(id),
				words[rng.IntN(len(words))], words[rng.IntN(len(words))],
				words[rng.IntN(len(words))], rng.IntN(1_000_000))
		}
		s.values[i] = b.Bytes()[:valueSize]
		t := make([]byte, headerTraceN/2)
		for j := range t {
			t[j] = byte(rng.Uint32())
		}
		s.traces[i] = []byte(hex.EncodeToString(t))
	}
	return s
}

// record returns source record number i of a topic with the given
// partition count; record i goes to partition i mod partitions.
func (s *shape) record(topic string, i int64, partitions int32) *kgo.Record {
	key := make([]byte, 0, keyLen)
	key = append(key, 'k')
	n := strconv.AppendInt(nil, i, 10)
	for range keyLen - 1 - len(n) {
		key = append(key, '0')
	}
	key = append(key, n...)
	return &kgo.Record{
		Topic:     topic,
		Partition: int32(i % int64(partitions)),
		Key:       key,
		Value:     s.values[i%poolSize],
		Headers: []kgo.RecordHeader{
			{Key: headerTrace, Value: s.traces[(i/poolSize+i)%poolSize]},
			{Key: headerOrigin, Value: []byte(headerOriginV)},
		},
	}
}

// sourceTopic is a topic on the source with what verification needs.
type sourceTopic struct {
	name       string
	partitions int32
	ends       map[int32]int64 // end offset per partition
	last       map[int32]*kgo.Record
	records    int64
	bytes      int64 // payload as counted for MB/s
	diskBytes  int64 // size of its log on the broker (lz4 batches)
}

// produceBacklog creates topic on the source and writes n records of the
// shape, lz4-compressed by the producer, as fast as the cluster takes them.
func produceBacklog(ctx context.Context, seeds []string, topic string, partitions int32, n int64, s *shape, logf func(string, ...any)) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.Lz4Compression()),
		kgo.ProducerLinger(5*time.Millisecond),
		kgo.MaxBufferedRecords(200_000),
	)
	if err != nil {
		return fmt.Errorf("create backlog producer: %w", err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, topic); err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	var failed atomic.Value
	var wg sync.WaitGroup
	t0 := time.Now()
	next := t0.Add(5 * time.Second)
	for i := range n {
		if failed.Load() != nil {
			break
		}
		wg.Add(1)
		cl.Produce(ctx, s.record(topic, i, partitions), func(_ *kgo.Record, err error) {
			if err != nil {
				failed.CompareAndSwap(nil, err)
			}
			wg.Done()
		})
		if now := time.Now(); now.After(next) {
			next = now.Add(5 * time.Second)
			logf("backlog: %d of %d records produced (%.0f records/s)", i, n, float64(i)/now.Sub(t0).Seconds())
		}
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return fmt.Errorf("produce backlog: %w", err)
	}
	d := time.Since(t0)
	logf("backlog: %d records in %.1fs (%.0f records/s)", n, d.Seconds(), float64(n)/d.Seconds())
	return nil
}

// describeSource lists the end offsets of topic and reads its last record
// per partition.
func describeSource(ctx context.Context, seeds []string, topic string) (*sourceTopic, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	st := &sourceTopic{name: topic, ends: map[int32]int64{}}
	for p, o := range ends[topic] {
		if o.Err != nil {
			return nil, fmt.Errorf("list end offset of %s/%d: %w", topic, p, o.Err)
		}
		st.ends[p] = o.Offset
		st.records += o.Offset
	}
	st.partitions = int32(len(st.ends))
	if st.partitions == 0 {
		return nil, fmt.Errorf("topic %s does not exist", topic)
	}
	if st.last, err = lastRecords(ctx, seeds, topic, st.ends); err != nil {
		return nil, err
	}
	return st, nil
}

// lastRecords reads the record at end-1 of each partition with a non-empty
// end.
func lastRecords(ctx context.Context, seeds []string, topic string, ends map[int32]int64) (map[int32]*kgo.Record, error) {
	at := map[int32]kgo.Offset{}
	for p, e := range ends {
		if e > 0 {
			at[p] = kgo.NewOffset().At(e - 1)
		}
	}
	last := map[int32]*kgo.Record{}
	if len(at) == 0 {
		return last, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: at}))
	if err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for len(last) < len(at) {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read last records of %s (%d of %d): %w", topic, len(last), len(at), err)
		}
		var ferr error
		fs.EachError(func(_ string, p int32, err error) {
			if !errors.Is(err, kerr.UnknownTopicOrPartition) {
				ferr = fmt.Errorf("fetch %s/%d: %w", topic, p, err)
			}
		})
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset == ends[r.Partition]-1 {
				last[r.Partition] = r
			}
		})
	}
	return last, nil
}

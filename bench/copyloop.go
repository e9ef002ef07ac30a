package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// runCopyLoop is the "copyloop" subcommand: the smallest replicator that
// franz-go allows, as the ceiling a replicator can approach on these
// brokers. It creates the target topic with the source's partition count,
// reads the source topic from the start without a group, writes every record
// to the same partition of the target topic through an idempotent acks=all
// producer, and runs until SIGTERM or SIGINT. It stores no progress and
// checks nothing: that is what makes it the ceiling.
func runCopyLoop(args []string) int {
	fs := flag.NewFlagSet("copyloop", flag.ContinueOnError)
	src := fs.String("src", "", "source bootstrap servers")
	dst := fs.String("dst", "", "target bootstrap servers")
	topic := fs.String("topic", "", "source topic")
	to := fs.String("to", "", "target topic (created)")
	compression := fs.String("compression", "lz4", "producer compression: none, snappy, lz4 or zstd")
	linger := fs.Duration("linger", 10*time.Millisecond, "producer linger")
	fetchWait := fs.Duration("fetch-max-wait", 500*time.Millisecond, "consumer fetch.max.wait (the Java client's default; franz-go's is 5s)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *src == "" || *dst == "" || *topic == "" || *to == "" {
		fmt.Fprintln(os.Stderr, "copyloop: -src, -dst, -topic and -to are required")
		return 2
	}
	codec, ok := map[string]kgo.CompressionCodec{
		"none": kgo.NoCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
	}[*compression]
	if !ok {
		fmt.Fprintf(os.Stderr, "copyloop: unknown compression %q\n", *compression)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := copyLoop(ctx, strings.Split(*src, ","), strings.Split(*dst, ","), *topic, *to, codec, *linger, *fetchWait); err != nil {
		fmt.Fprintln(os.Stderr, "copyloop:", err)
		return 1
	}
	return 0
}

func copyLoop(ctx context.Context, srcSeeds, dstSeeds []string, topic, to string, codec kgo.CompressionCodec, linger, fetchWait time.Duration) error {
	src, err := kgo.NewClient(kgo.SeedBrokers(srcSeeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(fetchWait))
	if err != nil {
		return fmt.Errorf("create source client: %w", err)
	}
	defer src.Close()
	dst, err := kgo.NewClient(kgo.SeedBrokers(dstSeeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(codec), kgo.ProducerLinger(linger))
	if err != nil {
		return fmt.Errorf("create target client: %w", err)
	}
	defer dst.Close()

	td, err := kadm.NewClient(src).ListTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("describe %s: %w", topic, err)
	}
	d, ok := td[topic]
	if !ok || d.Err != nil {
		return fmt.Errorf("describe %s: missing or %w", topic, d.Err)
	}
	if _, err := kadm.NewClient(dst).CreateTopic(ctx, int32(len(d.Partitions)), 1, nil, to); err != nil {
		return fmt.Errorf("create %s: %w", to, err)
	}

	var failed atomic.Value
	promise := func(_ *kgo.Record, err error) {
		if err != nil && !errors.Is(err, context.Canceled) {
			failed.CompareAndSwap(nil, err)
		}
	}
	for {
		fetches := src.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		if err, _ := failed.Load().(error); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
		if err := fetches.Err(); err != nil {
			return fmt.Errorf("fetch: %w", err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			r.Topic = to
			dst.Produce(ctx, r, promise)
		})
	}
	flushCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := dst.Flush(flushCtx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	return nil
}

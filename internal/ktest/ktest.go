// Package ktest holds what the tests of several packages need of a Kafka
// cluster and that no production code uses.
package ktest

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Seeds returns the addresses of the brokers of the cluster adm talks to.
func Seeds(ctx context.Context, adm *kadm.Client) ([]string, error) {
	brokers, err := adm.ListBrokers(ctx)
	if err != nil {
		return nil, err
	}
	var seeds []string
	for _, b := range brokers {
		seeds = append(seeds, net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))))
	}
	return seeds, nil
}

// Records counts the records of topic below its current end offsets, not
// counting transaction markers (the batches copy mode's writer puts an
// abort marker into every remote partition when it starts, so there the
// end offsets are not the number of records). It reads with
// read_committed, as consumers of the target do. opts are added to the
// reading client's (a secured cluster's TLS and SASL, say).
func Records(ctx context.Context, adm *kadm.Client, topic string, opts ...kgo.Opt) (int64, error) {
	per, err := RecordsPer(ctx, adm, topic, opts...)
	var n int64
	for _, c := range per {
		n += c
	}
	return n, err
}

// RecordsPer is Records per partition (every partition of topic, 0 for an
// empty one).
func RecordsPer(ctx context.Context, adm *kadm.Client, topic string, opts ...kgo.Opt) (map[int32]int64, error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, err
	}
	out := make(map[int32]int64)
	want := make(map[int32]int64)
	ends.Each(func(o kadm.ListedOffset) {
		out[o.Partition] = 0
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	if len(want) == 0 {
		return out, nil
	}
	seeds, err := Seeds(ctx, adm)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.KeepControlRecords(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted())}, opts...)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return out, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				out[r.Partition]++
			}
			if r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	return out, nil
}

// Fake starts an in-process kfake cluster of n brokers, closed when the
// test ends. opts come after the broker count.
func Fake(t testing.TB, n int, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(n)}, opts...)...)
	if err != nil {
		t.Fatalf("start kfake cluster: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// Outage makes every request to c fail while the returned switch is on:
// kfake closes the connection, as a stopped broker would refuse it.
func Outage(c *kfake.Cluster) *atomic.Bool {
	var on atomic.Bool
	c.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if on.Load() {
			return nil, errors.New("outage"), true
		}
		return nil, nil, false
	})
	return &on
}

// Client returns a client of the brokers at seeds, closed when the test
// ends. opts come after the seeds.
func Client(t testing.TB, seeds []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// DeadAddrs returns n loopback addresses nobody listens on (a port just
// released): bootstrap brokers that refuse connections, as brokers that are
// down do.
func DeadAddrs(t testing.TB, n int) []string {
	t.Helper()
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen: %v", err)
		}
		out = append(out, l.Addr().String())
		if err := l.Close(); err != nil {
			t.Fatalf("close listener: %v", err)
		}
	}
	return out
}

package replicator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestGrowsRemoteTopic: partitions added to a source topic while it is
// copied are added to the remote topic and copied, although the target
// producer already knows the remote topic with fewer partitions.
func TestGrowsRemoteTopic(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "orders", 2, nil)
	first := b.produce("orders", 2, 0, 10)
	stop := b.run(b.flow(), nil)
	require.Equal(t, first, b.read("A.orders", 10))

	resp, err := b.srcAdm.UpdatePartitions(context.Background(), 4, "orders")
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	b.srcCl.ForceMetadataRefresh()
	waitFor(t, "the producer to see 4 partitions", func() bool {
		leader, _, _ := b.srcCl.PartitionLeader("orders", 3)
		return leader >= 0
	})
	more := b.produce("orders", 4, 10, 20)
	waitFor(t, "30 records on the target", func() bool { return b.copied("A.orders") == 30 })
	got := b.read("A.orders", 30)
	require.NoError(t, stop())

	md, err := b.dstAdm.ListTopics(context.Background(), "A.orders")
	require.NoError(t, err)
	require.Len(t, md["A.orders"].Partitions, 4)
	for p := range int32(4) {
		require.Equal(t, append(first[p], more[p]...), got[p], "partition %d", p)
	}
}

func TestNextRefresh(t *testing.T) {
	for _, tc := range []struct {
		periodic bool
		interval time.Duration
		deferred int
		wait     time.Duration
		run      bool
	}{
		{true, 10 * time.Minute, 0, 10 * time.Minute, true},
		{true, 10 * time.Minute, 3, deferRetry, true},  // partitions wait for their remote partition
		{false, 10 * time.Minute, 2, deferRetry, true}, // even without periodic discovery
		{false, 10 * time.Minute, 0, time.Hour, false},
	} {
		wait, run := nextRefresh(tc.periodic, tc.interval, tc.deferred)
		require.Equal(t, tc.wait, wait, "%+v", tc)
		require.Equal(t, tc.run, run, "%+v", tc)
	}
}

// TestListTopicsAgain: after a leader moved, a ListOffsets answered
// NOT_LEADER_FOR_PARTITION takes the topic out of kgo's metadata cache until
// the retry loads it again; a listing of every topic in between, answered
// from the cache, lacks the topic (a copy was stopped as "gone" for it in a
// run of TestBatchesModeSeveralLeaders, its lag loop's ListOffsets given up
// before the retry). Asked again by name the topic is found; one that does
// not exist is not.
func TestListTopicsAgain(t *testing.T) {
	b := newBedBrokers(t, 3)
	ctx := context.Background()
	b.createTopic(b.srcAdm, "moved", 6, nil)
	// Retries a second apart: the ListOffsets below gives up before its
	// retry, as the lag loop's did (it allows 50 ms in these tests).
	cl := newClient(t, b.src, kgo.RetryBackoffFn(func(int) time.Duration { return time.Second }))
	adm := kadm.NewClient(cl)
	_, err := adm.ListTopics(ctx) // cached: every topic
	require.NoError(t, err)
	moveLeaders(t, b.src, b.srcCl, "moved")
	lctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	ends, err := adm.ListEndOffsets(lctx, "moved") // to the old leaders, from the cache
	cancel()
	require.NoError(t, err)
	require.ErrorIs(t, ends.Error(), kerr.NotLeaderForPartition)

	cached, err := adm.ListTopics(ctx)
	require.NoError(t, err)
	require.NotContains(t, cached, "moved", "kgo's cached listing lacks the moved topic (if this fails, kgo keeps it now and the second look is spare)")
	listed, err := listTopicsAgain(ctx, adm, []string{"absent", "moved"})
	require.NoError(t, err)
	require.NoError(t, listed["moved"].Err)
	require.Len(t, listed["moved"].Partitions, 6)
	// Left out or listed with its error: either way refresh takes it for
	// gone.
	d, ok := listed["absent"]
	require.True(t, !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition), "a topic that does not exist is listed as %+v", d)
}

// TestTopicStoppedAndFoundAgain: a topic whose copy stopped (as
// dropVanished stops a topic it takes for gone) while the target held a
// Produce request of it and more of its batches waited, and that a later
// refresh finds again, resumes from the target's tail: every record once,
// in order, in every copy mode. Before, in the batches mode its partitions
// started over at sequence 0 under the same producer epoch, and the target
// took their first batches for duplicates of those sent before the stop:
// acknowledged, not written (300 of 900 records lost here). In the record
// mode the held records landed after the refresh had read the tail, and
// were copied again (300 duplicates): a refresh now waits for a stopped
// partition's records in flight before it plans the partition. In the
// batches mode, the refresh waits anyway: its fence needs nothing in flight.
func TestTopicStoppedAndFoundAgain(t *testing.T) {
	for _, tc := range []struct {
		mode []string
		// refreshWaits: the refresh that finds the topic again waits
		// for the held request itself, so the test cannot wait for it.
		refreshWaits bool
	}{
		{[]string{"mm2go.copy.mode = batches"}, true},
		{[]string{"mm2go.copy.mode = batches", "mm2go.copy.fencing = none"}, true},
		{[]string{"mm2go.copy.mode = batches", "B.exactly.once.source.support = enabled"}, false},
		{[]string{"mm2go.copy.mode = records"}, false},
		{[]string{"mm2go.copy.mode = records", "B.exactly.once.source.support = enabled"}, false},
	} {
		mode := tc.mode
		t.Run(strings.Join(mode, ", "), func(t *testing.T) {
			b := newBed(t)
			b.createTopic(b.srcAdm, "spread", 6, nil)
			stop := b.run(b.flow(mode...), prometheus.NewRegistry())
			want := map[int32][]record{}
			b.produceTo(want, "spread", 6, 0, 300)
			require.Equal(t, want, b.read("A.spread", 300))

			release := make(chan struct{})
			seen := b.holdProduce("A.spread", release, func(n int32) bool { return n == 1 })
			b.produceTo(want, "spread", 6, 300, 300)
			waitFor(t, "a Produce request of A.spread held", func() bool { return seen.Load() >= 1 })
			b.stopTopic("spread")
			if !tc.refreshWaits {
				b.waitDiscoveries(2) // found again while the request is held
			}
			close(release)
			b.produceTo(want, "spread", 6, 600, 300)
			require.Equal(t, want, b.read("A.spread", 900), "every record once, in order")
			require.NoError(t, stop())
		})
	}
}

// TestCreationGroups: topics are grouped by partition count and copied
// configs (in any order of keys; none described is none), groups in the
// order of their first topic.
func TestCreationGroups(t *testing.T) {
	parts := func(n int) kadm.TopicDetail {
		d := kadm.TopicDetail{Partitions: kadm.PartitionDetails{}}
		for i := range int32(n) {
			d.Partitions[i] = kadm.PartitionDetail{Partition: i}
		}
		return d
	}
	details := map[string]kadm.TopicDetail{"a": parts(3), "b": parts(3), "c": parts(3), "d": parts(6), "e": parts(3), "f": parts(3)}
	week, day := kadm.StringPtr("604800000"), kadm.StringPtr("86400000")
	configs := map[string]map[string]*string{
		"a": {"retention.ms": week, "cleanup.policy": kadm.StringPtr("delete")},
		"b": {},
		"c": {"cleanup.policy": kadm.StringPtr("delete"), "retention.ms": week},
		"d": {},
		"f": {"retention.ms": day, "cleanup.policy": kadm.StringPtr("delete")},
		// e: none described (the source's answer left it out)
	}
	require.Equal(t, []creationGroup{
		{partitions: 3, topics: []string{"a", "c"}},
		{partitions: 3, topics: []string{"b", "e"}},
		{partitions: 6, topics: []string{"d"}},
		{partitions: 3, topics: []string{"f"}},
	}, creationGroups([]string{"a", "b", "c", "d", "e", "f"}, details, configs))
	require.Empty(t, creationGroups(nil, details, configs))
}

// TestRemoteTopicsCreatedTogether: the remote topics of a flow's first
// start are created in one CreateTopics request per partition count and
// configs, each with its source's configs. Before, each topic had its own
// request, and the start waited for the controller once per topic.
func TestRemoteTopicsCreatedTogether(t *testing.T) {
	b := newBed(t)
	compact := map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}
	want := map[string]map[int32][]record{}
	for i := range 6 {
		name := fmt.Sprintf("many%d", i)
		var cfg map[string]*string
		if i%3 == 0 {
			cfg = compact
		}
		b.createTopic(b.srcAdm, name, 2, cfg)
		want[name] = b.produce(name, 2, 0, 10)
	}
	var requests, remotes atomic.Int32
	b.dst.ControlKey(int16(kmsg.CreateTopics), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		b.dst.KeepControl()
		n := int32(0)
		for _, rt := range kr.(*kmsg.CreateTopicsRequest).Topics {
			if strings.HasPrefix(rt.Topic, "A.many") {
				n++
			}
		}
		if n > 0 {
			requests.Add(1)
			remotes.Add(n)
		}
		return nil, nil, false
	})
	stop := b.run(b.flow("topics = many.*"), nil)
	for name, w := range want {
		require.Equal(t, w, b.read("A."+name, 10), name)
	}
	require.NoError(t, stop())
	require.EqualValues(t, 6, remotes.Load(), "remote topics created")
	require.EqualValues(t, 2, requests.Load(), "CreateTopics requests: one for the compacted topics, one for the others")
	rcs, err := b.dstAdm.DescribeTopicConfigs(context.Background(), "A.many0", "A.many1", "A.many3")
	require.NoError(t, err)
	for _, rc := range rcs {
		want := "compact"
		if rc.Name == "A.many1" {
			want = "delete"
		}
		got := ""
		for _, c := range rc.Configs {
			if c.Key == "cleanup.policy" {
				got = c.MaybeValue()
			}
		}
		require.Equal(t, want, got, rc.Name)
	}
}

package checkpoint

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/policy"
)

// syncBed prepares a flow whose group g committed t = {0: 40, 1: 50} on
// the source, which translates to A.t = {0: 40, 1: 60} on the target (t/1
// was copied to downstream offsets 10 higher).
func syncBed(t *testing.T) (*bed, *config.Flow) {
	t.Helper()
	b := newBed(t)
	f := b.flow("topics = t")
	createTopic(t, b.src, "t", 2)
	createTopic(t, b.dst, "A.t", 2)
	b.writeMap(
		mseg("t", 0, 0, 99, 0), mpos("t", 0, 100, 100),
		mseg("t", 1, 0, 99, 10), mpos("t", 1, 100, 110),
	)
	commit(t, b.srcAdm, "g", "t", map[int32]int64{0: 40, 1: 50}, "m")
	return b, f
}

// emitted starts a checkpointer and writes the checkpoints once.
func (b *bed) emitted(f *config.Flow, reg prometheus.Registerer, log *zap.Logger, tweak ...func(*Options)) *Checkpointer {
	b.t.Helper()
	c := b.started(f, reg, log, tweak...)
	c.emit(context.Background())
	require.NotEmpty(b.t, c.st.byGroup(), "checkpoints written")
	return c
}

func skippedCount(c *Checkpointer, r SkipReason) float64 {
	return testutil.ToFloat64(c.m.skipped.WithLabelValues("A->B", string(r)))
}

func TestSyncCommitsOnlyForward(t *testing.T) {
	tests := []struct {
		name    string
		target  map[int32]int64 // the target group's offsets before the sync
		want    []int64
		synced  float64
		skipped map[SkipReason]float64
	}{
		{name: "group absent on the target", want: []int64{40, 60}, synced: 2},
		{name: "never rewinds", target: map[int32]int64{0: 70, 1: 10}, want: []int64{70, 60}, synced: 1,
			skipped: map[SkipReason]float64{SkipWouldRewind: 1}},
		{name: "up to date", target: map[int32]int64{0: 40, 1: 60}, want: []int64{40, 60},
			skipped: map[SkipReason]float64{SkipUpToDate: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, f := syncBed(t)
			if tt.target != nil {
				commit(t, b.dstAdm, "g", "A.t", tt.target, "before")
			}
			c := b.emitted(f, prometheus.NewRegistry(), nil)
			c.sync(context.Background())
			require.Equal(t, tt.want, committed(t, b.dstAdm, "g", "A.t", 2))
			require.Equal(t, tt.synced, testutil.ToFloat64(c.m.synced.WithLabelValues("A->B")))
			for _, r := range []SkipReason{SkipWouldRewind, SkipUpToDate, SkipActive, SkipBecameActive} {
				require.Equal(t, tt.skipped[r], skippedCount(c, r), "skipped %s", r)
			}
			require.Zero(t, testutil.ToFloat64(c.m.errors.WithLabelValues("A->B", reasonCommit)))
		})
	}

	t.Run("commit carries the source metadata", func(t *testing.T) {
		b, f := syncBed(t)
		c := b.emitted(f, nil, nil)
		c.sync(context.Background())
		rs, err := b.dstAdm.FetchOffsets(context.Background(), "g")
		require.NoError(t, err)
		o, ok := rs.Lookup("A.t", 1)
		require.True(t, ok)
		require.Equal(t, "m", o.Metadata)
	})
}

func TestSyncSkipsActiveGroups(t *testing.T) {
	for _, nextGen := range []bool{false, true} {
		name := "classic"
		if nextGen {
			name = "consumer protocol"
		}
		t.Run(name, func(t *testing.T) {
			b, f := syncBed(t)
			b.member("g", "A.t", nextGen)
			listed, err := b.dstAdm.ListGroups(context.Background())
			require.NoError(t, err)
			wantType := groupTypeClassic
			if nextGen {
				wantType = groupTypeConsumer
			}
			require.Equal(t, wantType, listed["g"].GroupType, "the group is described with the right API")
			c := b.emitted(f, prometheus.NewRegistry(), nil)
			c.sync(context.Background())
			require.Equal(t, []int64{-1, -1}, committed(t, b.dstAdm, "g", "A.t", 2))
			require.Equal(t, 2.0, skippedCount(c, SkipActive))
			require.Zero(t, testutil.ToFloat64(c.m.synced.WithLabelValues("A->B")))
		})
	}

	t.Run("synced once the member left", func(t *testing.T) {
		b, f := syncBed(t)
		leave := b.member("g", "A.t", false)
		c := b.emitted(f, nil, nil)
		c.sync(context.Background())
		require.Equal(t, []int64{-1, -1}, committed(t, b.dstAdm, "g", "A.t", 2))
		leave()
		c.sync(context.Background())
		require.Equal(t, []int64{40, 60}, committed(t, b.dstAdm, "g", "A.t", 2))
	})
}

// TestSyncRaceWithJoiningMember simulates a consumer joining between the
// describe and the commit: the broker refuses the admin commit with
// UNKNOWN_MEMBER_ID. The refusal is counted as became_active, logged at
// info level and not retried.
func TestSyncRaceWithJoiningMember(t *testing.T) {
	b, f := syncBed(t)
	var commits atomic.Int32
	b.dst.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.dst.KeepControl()
		commits.Add(1)
		return refuseCommit(req.(*kmsg.OffsetCommitRequest), kerr.UnknownMemberID), nil, true
	})
	core, logs := observer.New(zap.InfoLevel)
	c := b.emitted(f, prometheus.NewRegistry(), zap.New(core))
	c.sync(context.Background())

	require.Equal(t, int32(1), commits.Load(), "one commit, not retried")
	require.Equal(t, 2.0, skippedCount(c, SkipBecameActive))
	require.Zero(t, testutil.ToFloat64(c.m.synced.WithLabelValues("A->B")))
	require.Zero(t, testutil.ToFloat64(c.m.errors.WithLabelValues("A->B", reasonCommit)))
	require.Equal(t, []int64{-1, -1}, committed(t, b.dstAdm, "g", "A.t", 2))
	entries := logs.FilterMessageSnippet("the broker refused the commit").All()
	require.Len(t, entries, 1)
	require.Equal(t, zap.InfoLevel, entries[0].Level)
}

// refuseCommit answers an OffsetCommit with err for every partition.
func refuseCommit(req *kmsg.OffsetCommitRequest, err *kerr.Error) *kmsg.OffsetCommitResponse {
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewOffsetCommitResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewOffsetCommitResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.ErrorCode = err.Code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// TestSyncReportsMemberJoinedAfterCommit: a member that is there when the
// group is described again right after a successful commit is reported.
func TestSyncReportsMemberJoinedAfterCommit(t *testing.T) {
	b, f := syncBed(t)
	commit(t, b.dstAdm, "g", "A.t", map[int32]int64{0: 1, 1: 1}, "") // the group exists: it is described
	var describes atomic.Int32
	b.dst.ControlKey(int16(kmsg.DescribeGroups), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if describes.Add(1) == 1 {
			b.dst.KeepControl()
			return nil, nil, false // the first describe is answered by the broker
		}
		resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
		g := kmsg.NewDescribeGroupsResponseGroup()
		g.Group, g.State, g.ProtocolType = "g", "PreparingRebalance", "consumer"
		m := kmsg.NewDescribeGroupsResponseGroupMember()
		m.MemberID, m.ClientID = "late-joiner", "consumer"
		g.Members = append(g.Members, m)
		resp.Groups = append(resp.Groups, g)
		return resp, nil, true
	})
	core, logs := observer.New(zap.InfoLevel)
	c := b.emitted(f, prometheus.NewRegistry(), zap.New(core))
	c.sync(context.Background())

	require.Equal(t, []int64{40, 60}, committed(t, b.dstAdm, "g", "A.t", 2))
	require.Equal(t, int32(2), describes.Load())
	require.Equal(t, 1.0, testutil.ToFloat64(c.m.errors.WithLabelValues("A->B", reasonMemberJoined)))
	entries := logs.FilterMessageSnippet("got members right after its offsets were committed").All()
	require.Len(t, entries, 1)
	require.Equal(t, zap.WarnLevel, entries[0].Level)
}

func TestSyncInitializesLocalTopics(t *testing.T) {
	setup := func(t *testing.T) (*bed, *config.Flow) {
		b, f := syncBed(t)
		createTopic(t, b.dst, "t", 2) // producers write here after the failover
		b.produceRaw("t", &kgo.Record{Value: []byte("1")}, &kgo.Record{Value: []byte("2")}, &kgo.Record{Value: []byte("3")},
			&kgo.Record{Value: []byte("4")}, &kgo.Record{Value: []byte("5")})
		require.NoError(t, b.dst.DeleteRecords("t", 0, 3))
		// g2 already consumes the local topic on the target.
		commit(t, b.srcAdm, "g2", "t", map[int32]int64{0: 10}, "")
		commit(t, b.dstAdm, "g2", "t", map[int32]int64{1: 7}, "")
		return b, f
	}

	t.Run("on", func(t *testing.T) {
		b, f := setup(t)
		core, logs := observer.New(zap.InfoLevel)
		c := b.emitted(f, prometheus.NewRegistry(), zap.New(core))
		c.sync(context.Background())
		require.Equal(t, []int64{3, 0}, committed(t, b.dstAdm, "g", "t", 2), "log-start offsets")
		require.Equal(t, []int64{40, 60}, committed(t, b.dstAdm, "g", "A.t", 2))
		require.Equal(t, []int64{-1, 7}, committed(t, b.dstAdm, "g2", "t", 2), "a group with an offset on the local topic is left alone")
		require.Equal(t, []int64{10, -1}, committed(t, b.dstAdm, "g2", "A.t", 2))
		require.Equal(t, 1, logs.FilterMessageSnippet("local topic offsets").Len())

		// Once set, the local offsets are never touched again.
		commit(t, b.dstAdm, "g", "t", map[int32]int64{0: 5}, "")
		c.sync(context.Background())
		require.Equal(t, []int64{5, 0}, committed(t, b.dstAdm, "g", "t", 2))
	})

	t.Run("off", func(t *testing.T) {
		b, f := setup(t)
		c := b.emitted(f, nil, nil, func(o *Options) { o.InitLocalTopics = false })
		c.sync(context.Background())
		require.Equal(t, []int64{-1, -1}, committed(t, b.dstAdm, "g", "t", 2))
		require.Equal(t, []int64{40, 60}, committed(t, b.dstAdm, "g", "A.t", 2))
	})
}

func TestRunSyncsGroupOffsets(t *testing.T) {
	b, f := syncBed(t)
	c := b.newCheckpointer(f, nil, nil)
	run(t, c)
	// g's consumer starts on the target, finds no offset and stops: the
	// exact sync commits into target groups that exist.
	b.member("g", "A.t", false)()
	waitFor(t, "group offsets synced", func() bool {
		got := committed(t, b.dstAdm, "g", "A.t", 2)
		return got[0] == 40 && got[1] == 60
	})
}

// TestSyncOnlyTopicsTheFlowReplicates: the checkpoints topic of a source is
// shared by every flow from it into the target. A flow replicating t must
// neither load nor commit the checkpoints another flow (replicating other)
// wrote there for a group of the same name.
func TestSyncOnlyTopicsTheFlowReplicates(t *testing.T) {
	b, f := syncBed(t) // this flow: topics = t; g committed t = {0: 40, 1: 50}
	f.GroupSyncMode = config.GroupSyncPeriodic
	createTopic(t, b.dst, "A.other", 1)
	cpTopic := defaultPolicy().CheckpointsTopic("A")
	createTopic(t, b.dst, cpTopic, 1)
	other := policy.Checkpoint{Group: "g", Topic: "A.other", Partition: 0, UpstreamOffset: 7, DownstreamOffset: 7}
	key, err := other.Key()
	require.NoError(t, err)
	value, err := other.Value()
	require.NoError(t, err)
	b.produceRaw(cpTopic, &kgo.Record{Key: key, Value: value})

	c := b.emitted(f, prometheus.NewRegistry(), nil)
	for _, cp := range c.st.byGroup()["g"] {
		require.Equal(t, "A.t", cp.Topic, "only checkpoints of the flow's topics are loaded")
	}
	c.sync(context.Background())
	require.Equal(t, []int64{40, 60}, committed(t, b.dstAdm, "g", "A.t", 2))
	require.Equal(t, []int64{-1}, committed(t, b.dstAdm, "g", "A.other", 1), "another flow's checkpoint is not committed")
}

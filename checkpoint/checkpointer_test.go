package checkpoint

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mm2go/mm2go/internal/metric"
	"github.com/mm2go/mm2go/internal/offsetmap"
	"github.com/mm2go/mm2go/policy"
)

func TestShouldEmit(t *testing.T) {
	cp := func(up, down int64) policy.Checkpoint {
		return policy.Checkpoint{Group: "g", Topic: "A.t", UpstreamOffset: up, DownstreamOffset: down}
	}
	tests := []struct {
		name      string
		last      *policy.Checkpoint
		cp        policy.Checkpoint
		wantEmits bool
	}{
		{"first checkpoint", nil, cp(10, 5), true},
		{"forward", &policy.Checkpoint{UpstreamOffset: 10, DownstreamOffset: 5}, cp(12, 7), true},
		{"unchanged", &policy.Checkpoint{UpstreamOffset: 10, DownstreamOffset: 5}, cp(10, 5), false},
		{"upstream forward, downstream same (upstream gap)", &policy.Checkpoint{UpstreamOffset: 10, DownstreamOffset: 5}, cp(12, 5), false},
		{"downstream backwards with upstream forward", &policy.Checkpoint{UpstreamOffset: 10, DownstreamOffset: 5}, cp(12, 4), false},
		{"downstream backwards with upstream same", &policy.Checkpoint{UpstreamOffset: 10, DownstreamOffset: 5}, cp(10, 3), false},
		{"upstream rewound", &policy.Checkpoint{UpstreamOffset: 10, DownstreamOffset: 5}, cp(4, 2), true},
		{"same upstream, downstream forward (replication caught up)", &policy.Checkpoint{UpstreamOffset: 10, DownstreamOffset: 5}, cp(10, 9), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var last policy.Checkpoint
			if tt.last != nil {
				last = *tt.last
			}
			require.Equal(t, tt.wantEmits, shouldEmit(tt.cp, last, tt.last != nil))
		})
	}
}

func TestRemoteTopic(t *testing.T) {
	// MirrorCheckpointTaskTest's renaming examples.
	p := policy.New(policy.KindDefault, "", true, "source1")
	tests := []struct{ topic, want string }{
		{"topic3", "source1.topic3"},
		{"target2.topic3", "topic3"},
		{"source6.topic7", "source1.source6.topic7"},
	}
	for _, tt := range tests {
		t.Run(tt.topic, func(t *testing.T) {
			require.Equal(t, tt.want, RemoteTopic(p, "source1", "target2", tt.topic))
		})
	}
	t.Run("identity keeps the name", func(t *testing.T) {
		id := policy.New(policy.KindIdentity, "", true, "source1")
		require.Equal(t, "topic3", RemoteTopic(id, "source1", "target2", "topic3"))
	})
}

func TestCheckpointsEmitted(t *testing.T) {
	b := newBed(t)
	f := b.flow("topics = t, u")
	createTopic(t, b.src, "t", 2)
	createTopic(t, b.src, "u", 1)
	createTopic(t, b.src, "skip", 1)
	createTopic(t, b.dst, "A.t", 2)
	createTopic(t, b.dst, "A.u", 1)
	b.writeMap(
		mseg("t", 0, 0, 99, 0), mpos("t", 0, 100, 100),
		mpos("u", 0, 0, 0), // empty source partition: only a position
	)
	commit(t, b.srcAdm, "g", "t", map[int32]int64{0: 50, 1: 10}, "m1")
	commit(t, b.srcAdm, "g", "u", map[int32]int64{0: 0}, "")
	commit(t, b.srcAdm, "g", "skip", map[int32]int64{0: 5}, "")
	commit(t, b.srcAdm, "console-consumer-1", "t", map[int32]int64{0: 20}, "") // excluded by groups.exclude
	commit(t, b.srcAdm, "h", "skip", map[int32]int64{0: 5}, "")                // no replicated topic

	reg := prometheus.NewRegistry()
	c := b.newCheckpointer(f, reg, nil)
	stop := run(t, c)
	before := time.Now()

	want := []policy.Checkpoint{
		{Group: "g", Topic: "A.t", Partition: 0, UpstreamOffset: 50, DownstreamOffset: 50, Metadata: "m1"},
		{Group: "g", Topic: "A.u", Partition: 0, UpstreamOffset: 0, DownstreamOffset: 0},
	}
	waitFor(t, "first checkpoints", func() bool { return b.countCheckpoints() >= 2 })
	require.ElementsMatch(t, want, b.checkpoints(), "no checkpoint without map data (t/1), for unselected groups or unreplicated topics")
	recs, err := b.checkpointRecords()
	require.NoError(t, err)
	for _, r := range recs {
		require.Equal(t, int32(0), r.Partition)
		require.Empty(t, r.Headers)
		require.WithinDuration(t, before, r.Timestamp, 5*time.Second)
	}

	// Nothing changed: several rounds write nothing more.
	waitEmitRounds(t, c, 3)
	require.Len(t, b.checkpoints(), 2, "unchanged checkpoints are not written again")

	// The group moves on, and map data for t/1 arrives while Run tails.
	commit(t, b.srcAdm, "g", "t", map[int32]int64{0: 60}, "m2")
	b.writeMap(mseg("t", 1, 0, 20, 5))
	waitFor(t, "new checkpoints", func() bool { return b.countCheckpoints() >= 4 })
	require.ElementsMatch(t, append(want,
		policy.Checkpoint{Group: "g", Topic: "A.t", Partition: 0, UpstreamOffset: 60, DownstreamOffset: 60, Metadata: "m2"},
		policy.Checkpoint{Group: "g", Topic: "A.t", Partition: 1, UpstreamOffset: 10, DownstreamOffset: 15, Metadata: "m1"},
	), b.checkpoints())

	require.Equal(t, 4.0, testutil.ToFloat64(c.m.checkpoints.WithLabelValues("A->B")))
	require.Equal(t, 1.0, testutil.ToFloat64(c.m.groups.WithLabelValues("A->B")))
	require.GreaterOrEqual(t, testutil.ToFloat64(c.m.translations.WithLabelValues("A->B", "exact")), 4.0)
	require.Equal(t, 2.0, testutil.ToFloat64(c.m.segments.WithLabelValues("A->B")))
	age := testutil.ToFloat64(c.m.age.WithLabelValues("A->B", "g"))
	require.GreaterOrEqual(t, age, 0.0)
	require.Less(t, age, 5.0)
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)

	// sync.group.offsets.enabled: the empty target group follows.
	waitFor(t, "group offsets synced", func() bool {
		return slices.Equal(committed(t, b.dstAdm, "g", "A.t", 2), []int64{60, 15}) &&
			slices.Equal(committed(t, b.dstAdm, "g", "A.u", 1), []int64{0})
	})
	require.NoError(t, stop())
}

// TestCheckpointsMonotonicAcrossRestart ports MirrorCheckpointTaskTest's
// restart case to exact translation: a checkpoint stored by an earlier run
// (or by MM2) is read at start, translations below it are suppressed while
// the group moves forward, and a group that rewinds on the source rewinds
// its checkpoint too.
func TestCheckpointsMonotonicAcrossRestart(t *testing.T) {
	b := newBed(t)
	f := b.flow("topics = t")
	createTopic(t, b.src, "t", 1)
	topic := defaultPolicy().CheckpointsTopic("A")
	stored := policy.Checkpoint{Group: "g", Topic: "A.t", Partition: 0, UpstreamOffset: 250, DownstreamOffset: 201}
	key, err := stored.Key()
	require.NoError(t, err)
	value, err := stored.Value()
	require.NoError(t, err)
	_, err = b.dstAdm.CreateTopic(context.Background(), 1, 1, nil, topic)
	require.NoError(t, err)
	badKey := []byte{0, 9}
	b.produceRaw(topic,
		&kgo.Record{Key: badKey, Value: []byte{1}}, // malformed: skipped and counted
		&kgo.Record{Key: key, Value: value},
	)
	// Upstream 100..499 was copied to downstream 26..425: 250 -> 176.
	b.writeMap(mseg("t", 0, 100, 499, 26), mpos("t", 0, 500, 426))

	commit(t, b.srcAdm, "g", "t", map[int32]int64{0: 250}, "")

	reg := prometheus.NewRegistry()
	c := b.started(f, reg, nil)
	require.Equal(t, 1.0, testutil.ToFloat64(c.m.errors.WithLabelValues("A->B", reasonMalformed)))
	ctx := context.Background()

	steps := []struct {
		name   string
		commit int64
		want   *policy.Checkpoint // nil: suppressed
	}{
		{"same upstream, lower downstream than stored", 250, nil},
		{"upstream forward, downstream still below stored", 260, nil},
		{"downstream past stored", 400, &policy.Checkpoint{Group: "g", Topic: "A.t", UpstreamOffset: 400, DownstreamOffset: 326}},
		{"unchanged", 400, nil},
		{"upstream rewound", 200, &policy.Checkpoint{Group: "g", Topic: "A.t", UpstreamOffset: 200, DownstreamOffset: 126}},
	}
	n := len(b.checkpoints(badKey))
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			commit(t, b.srcAdm, "g", "t", map[int32]int64{0: s.commit}, "")
			c.emit(ctx)
			cps := b.checkpoints(badKey)
			if s.want == nil {
				require.Len(t, cps, n)
				return
			}
			require.Len(t, cps, n+1)
			require.Equal(t, *s.want, cps[n])
			n++
		})
	}
}

func TestNoCheckpointsBeforeMapData(t *testing.T) {
	b := newBed(t)
	f := b.flow("topics = t")
	createTopic(t, b.src, "t", 1)
	commit(t, b.srcAdm, "g", "t", map[int32]int64{0: 7}, "")
	// The map topic does not even exist yet: Run must wait for it.
	c := b.newCheckpointer(f, nil, nil)
	run(t, c)
	waitEmitRounds(t, c, 3)
	require.Empty(t, b.checkpoints(), "MM2 emits no checkpoint without syncs")
	b.writeMap(mseg("t", 0, 0, 9, 3))
	waitFor(t, "checkpoint once the map exists", func() bool { return b.countCheckpoints() == 1 })
	require.Equal(t, policy.Checkpoint{Group: "g", Topic: "A.t", UpstreamOffset: 7, DownstreamOffset: 10}, b.checkpoints()[0])
}

func TestIndexDegradationIsReported(t *testing.T) {
	b := newBed(t)
	f := b.flow("topics = t")
	var recs []offsetmap.Record
	for i := range int64(10) {
		recs = append(recs, mseg("t", 0, i*10, i*10+8, i*9)) // a gap after every 9 records
	}
	b.writeMap(recs...)
	b.produceRaw(offsetmap.Topic("A"), &kgo.Record{Key: []byte{7}, Value: []byte{1}}) // malformed: skipped and counted
	reg := prometheus.NewRegistry()
	core, logs := observer.New(zap.WarnLevel)
	c := b.started(f, reg, zap.New(core), func(o *Options) { o.MaxSegments = 4 })
	require.Equal(t, 1.0, testutil.ToFloat64(c.m.degraded.WithLabelValues("A->B")))
	require.LessOrEqual(t, testutil.ToFloat64(c.m.segments.WithLabelValues("A->B")), 4.0)
	require.Equal(t, 1, logs.FilterMessageSnippet("offset map history thinned").Len())
	require.Equal(t, 1.0, testutil.ToFloat64(c.m.errors.WithLabelValues("A->B", reasonMalformedMap)))
}

// TestFailedWriteIsRetried: a checkpoint the target refused is not taken
// as written, so the next interval writes it again.
func TestFailedWriteIsRetried(t *testing.T) {
	b := newBed(t)
	f := b.flow("topics = t")
	createTopic(t, b.src, "t", 1)
	b.writeMap(mseg("t", 0, 0, 9, 0))
	commit(t, b.srcAdm, "g", "t", map[int32]int64{0: 5}, "")
	c := b.started(f, prometheus.NewRegistry(), nil)
	var refused atomic.Int32
	b.dst.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		refused.Add(1)
		r := req.(*kmsg.ProduceRequest)
		resp := r.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	c.emit(context.Background())
	require.Equal(t, int32(1), refused.Load())
	require.Equal(t, 1.0, testutil.ToFloat64(c.m.errors.WithLabelValues("A->B", metric.ReasonAuthorization)))
	require.Zero(t, c.st.count(), "not acknowledged, not remembered")

	c.emit(context.Background())
	require.Equal(t, []policy.Checkpoint{{Group: "g", Topic: "A.t", UpstreamOffset: 5, DownstreamOffset: 5}}, b.checkpoints())
	require.Equal(t, 1.0, testutil.ToFloat64(c.m.checkpoints.WithLabelValues("A->B")))
}

func TestRunFailsWhenCheckpointsCannotBeRead(t *testing.T) {
	b := newBed(t)
	f := b.flow()
	c := b.newCheckpointer(f, nil, nil)
	c.o.CheckpointReader.Close()
	err := c.Run(context.Background())
	require.ErrorIs(t, err, kgo.ErrClientClosed)
}

func TestGroupsSelected(t *testing.T) {
	// MirrorCheckpointConnectorTest's discovery example: g1
	// {t1,t2}, g2 {t2,t3}, g3 {t3}, g4 excluded; only t2 replicated.
	b := newBed(t)
	f := b.flow("topics = t2", "groups.exclude = g4")
	for _, tp := range []string{"t1", "t2", "t3"} {
		createTopic(t, b.src, tp, 1)
	}
	for g, topics := range map[string][]string{"g1": {"t1", "t2"}, "g2": {"t2", "t3"}, "g3": {"t3"}, "g4": {"t2"}} {
		for _, tp := range topics {
			commit(t, b.srcAdm, g, tp, map[int32]int64{0: 1}, "")
		}
	}
	got, err := SelectGroups(context.Background(), b.srcAdm, mustFilter(t, f.Groups, f.GroupsExclude), selector(t, f))
	require.NoError(t, err)
	require.Equal(t, []string{"g1", "g2"}, got)
	require.True(t, slices.IsSorted(got))
}

func mustFilter(t *testing.T, include, exclude []string) *policy.Filter {
	t.Helper()
	f, err := policy.NewFilter(include, exclude)
	require.NoError(t, err)
	return f
}

// TestStoppedCheckpointerDeletesItsGauges: a checkpointer stopped (its flow
// removed by a reload, or its task moved to another instance) deletes its
// gauges, on which the stale-checkpoints alert would fire for ever; the
// counters stay.
func TestStoppedCheckpointerDeletesItsGauges(t *testing.T) {
	b := newBed(t)
	f := b.flow("topics = t")
	createTopic(t, b.src, "t", 1)
	createTopic(t, b.dst, "A.t", 1)
	b.writeMap(mseg("t", 0, 0, 99, 0), mpos("t", 0, 100, 100))
	commit(t, b.srcAdm, "g", "t", map[int32]int64{0: 50}, "")
	reg := prometheus.NewRegistry()
	stop := run(t, b.newCheckpointer(f, reg, nil))
	gauges := []string{"mm2go_checkpoint_last_emit_timestamp_seconds", "mm2go_checkpoint_age_seconds",
		"mm2go_checkpoint_index_segments", "mm2go_checkpoint_groups"}
	waitFor(t, "the gauges exported", func() bool {
		for _, name := range gauges {
			if testutil.CollectAndCount(reg, name) == 0 {
				return false
			}
		}
		return true
	})
	require.NoError(t, stop())
	for _, name := range gauges {
		require.Zero(t, testutil.CollectAndCount(reg, name), "%s after the stop", name)
	}
	require.Equal(t, 1, testutil.CollectAndCount(reg, "mm2go_checkpoint_checkpoints_total"), "counters stay")
}

func TestKeepMissing(t *testing.T) {
	t0 := time.Unix(1000, 0)
	missing := map[string]time.Time{}
	step := func(old, listed []string, at time.Duration) []string {
		return keepMissing(old, listed, missing, t0.Add(at), 30*time.Second)
	}
	// A broker shutting down lists no group: both are kept.
	got := step([]string{"a", "b"}, nil, 0)
	require.Equal(t, []string{"a", "b"}, got)
	// b is back 10 s later; a still missing, kept.
	got = step(got, []string{"b", "c"}, 10*time.Second)
	require.Equal(t, []string{"a", "b", "c"}, got)
	require.Equal(t, map[string]time.Time{"a": t0}, missing)
	// a missing for 30 s: dropped.
	got = step(got, []string{"b", "c"}, 30*time.Second)
	require.Equal(t, []string{"b", "c"}, got)
	require.Empty(t, missing)
	// A group that comes back is no longer missing; missing again, it
	// counts from then.
	got = step(got, []string{"c"}, 40*time.Second)
	require.Equal(t, []string{"b", "c"}, got)
	got = step(got, []string{"b", "c"}, 50*time.Second)
	require.Empty(t, missing)
	got = step(got, []string{"c"}, 60*time.Second)
	require.Equal(t, []string{"b", "c"}, got)
	require.Equal(t, map[string]time.Time{"b": t0.Add(60 * time.Second)}, missing)
}

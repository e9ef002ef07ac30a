package checkpoint

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/internal/offsetmap"
	"github.com/mm2go/mm2go/policy"
)

// offs builds committed offsets: topic -> partition -> offset, with
// metadata md.
func offs(md string, byTopic map[string]map[int32]int64) kadm.OffsetResponses {
	out := make(kadm.OffsetResponses)
	for t, ps := range byTopic {
		for p, o := range ps {
			out.Add(kadm.OffsetResponse{Offset: kadm.Offset{Topic: t, Partition: p, At: o, LeaderEpoch: -1, Metadata: md}})
		}
	}
	return out
}

// switchIndex is t/0 copied 0..99 to 0..99 and t/1 copied 0..99 to 10..109,
// both replicated up to upstream 100.
func switchIndex() *Index {
	idx := NewIndex(0, nil)
	for _, r := range []offsetmap.Record{
		mseg("t", 0, 0, 99, 0), mpos("t", 0, 100, 100),
		mseg("t", 1, 0, 99, 10), mpos("t", 1, 100, 110),
	} {
		idx.Apply(r)
	}
	return idx
}

func allTopics(t *testing.T) policy.TopicSelector {
	t.Helper()
	f, err := policy.NewFilter([]string{"t", "u"}, nil)
	require.NoError(t, err)
	return policy.TopicSelector{Policy: defaultPolicy(), Topics: f, TargetAlias: "B"}
}

func TestPlanSwitch(t *testing.T) {
	const marker = "mm2go-sync:A->B"
	type want struct {
		topic     string
		partition int32
		offset    int64
		metadata  string
		localInit bool
	}
	tests := []struct {
		name         string
		src, tgt     kadm.OffsetResponses
		starts       map[string]map[int32]int64
		wants        []want
		pending      []int32 // partitions of t waiting for replication
		untranslated int
	}{
		{
			name:  "exact translations, marker where the source has no metadata",
			src:   offs("", map[string]map[int32]int64{"t": {0: 40, 1: 50}}),
			wants: []want{{"A.t", 0, 40, marker, false}, {"A.t", 1, 60, marker, false}},
		},
		{
			name:  "the source's metadata is kept",
			src:   offs("app", map[string]map[int32]int64{"t": {1: 100}}),
			wants: []want{{"A.t", 1, 110, "app", false}},
		},
		{
			name:    "a commit replication has not reached waits",
			src:     offs("", map[string]map[int32]int64{"t": {0: 100, 1: 101}}),
			wants:   []want{{"A.t", 0, 100, marker, false}},
			pending: []int32{1},
		},
		{
			name:         "a partition the offset map does not know is not translated",
			src:          offs("", map[string]map[int32]int64{"u": {0: 5}}),
			untranslated: 1,
		},
		{
			name:  "topics the flow does not replicate are left out",
			src:   offs("", map[string]map[int32]int64{"other": {0: 5}, "t": {0: 1}}),
			wants: []want{{"A.t", 0, 1, marker, false}},
		},
		{
			name:   "local topics are initialized at their log start once",
			src:    offs("", map[string]map[int32]int64{"t": {0: 40}}),
			starts: map[string]map[int32]int64{"t": {0: 3, 1: 0}},
			wants:  []want{{"A.t", 0, 40, marker, false}, {"t", 0, 3, "", true}, {"t", 1, 0, "", true}},
		},
		{
			name:   "local topics the group has offsets on are not touched",
			src:    offs("", map[string]map[int32]int64{"t": {0: 40}}),
			tgt:    offs("", map[string]map[int32]int64{"t": {1: 7}}),
			starts: map[string]map[int32]int64{"t": {0: 3, 1: 0}},
			wants:  []want{{"A.t", 0, 40, marker, false}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := planSwitch(switchIndex(), allTopics(t), "A", tt.src, tt.tgt, tt.starts != nil, tt.starts, marker)
			var got []want
			for _, w := range p.wants {
				got = append(got, want(w))
			}
			require.Equal(t, tt.wants, got)
			var pending []int32
			for _, o := range p.pending {
				pending = append(pending, o.Partition)
			}
			require.Equal(t, tt.pending, pending)
			require.Equal(t, tt.untranslated, p.untranslated)
		})
	}
}

func TestRemovals(t *testing.T) {
	const marker = "mm2go-sync:A->B"
	tests := []struct {
		name string
		tgt  kadm.OffsetResponses
		ours map[TopicPartition]int64
		want kadm.TopicsSet
	}{
		{name: "offsets with the marker", tgt: offs(marker, map[string]map[int32]int64{"A.t": {0: 4, 1: 5}}),
			want: kadm.TopicsSet{"A.t": {0: {}, 1: {}}}},
		{name: "offsets a consumer committed since are kept", tgt: offs("", map[string]map[int32]int64{"A.t": {0: 4}}),
			ours: map[TopicPartition]int64{{"A.t", 0}: 3}, want: kadm.TopicsSet{}},
		{name: "offsets remembered as the sync's own", tgt: offs("app", map[string]map[int32]int64{"A.t": {0: 4}}),
			ours: map[TopicPartition]int64{{"A.t", 0}: 4}, want: kadm.TopicsSet{"A.t": {0: {}}}},
		{name: "local topics and other flows' topics are not touched", tgt: offs(marker, map[string]map[int32]int64{"t": {0: 4}, "C.t": {0: 1}, "A.other": {0: 2}}),
			want: kadm.TopicsSet{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, removals(defaultPolicy(), "A", allTopics(t), tt.tgt, tt.ours, marker))
		})
	}
}

// TestSwitchSyncNeverCommitsAStaleOffset replays the sequence behind the
// duplicates of the failover scenario: the source group consumes and
// commits while a checkpoint of an older commit exists; a consumer started
// on the target in that window must find no offset (MM2's periodic rule
// gave it the older commit's translation, and it read the records between
// the two commits again). Once the source group is empty, its final commit
// is translated exactly; when it has members again, the offsets are removed.
func TestSwitchSyncNeverCommitsAStaleOffset(t *testing.T) {
	setup := func(t *testing.T, mode config.GroupSyncMode) (*bed, *Checkpointer, func()) {
		b, f := syncBed(t) // g committed t = {0: 40, 1: 50} on the source
		f.GroupSyncMode = mode
		leave := b.memberOf(b.src, "g", "t", false)
		c := b.emitted(f, prometheus.NewRegistry(), nil) // a checkpoint of {40, 50} is written
		if mode == config.GroupSyncExact {
			c.watch(context.Background()) // the sync sees g consume on the source
		}
		return b, c, leave
	}

	t.Run("periodic (MM2's rule) commits the older commit while the source group consumes", func(t *testing.T) {
		b, c, _ := setup(t, config.GroupSyncPeriodic)
		c.sync(context.Background())
		require.Equal(t, []int64{40, 60}, committed(t, b.dstAdm, "g", "A.t", 2), "what the switched consumer started from")
	})

	t.Run("exact", func(t *testing.T) {
		b, c, leave := setup(t, config.GroupSyncExact)
		ctx := context.Background()
		c.watch(ctx)
		require.Equal(t, []int64{-1, -1}, committed(t, b.dstAdm, "g", "A.t", 2), "no offset while the source group has members")

		// The source consumer commits its final offsets and leaves.
		leave()
		commit(t, b.srcAdm, "g", "t", map[int32]int64{0: 70, 1: 80}, "")
		c.watch(ctx)
		require.Equal(t, []int64{70, 90}, committed(t, b.dstAdm, "g", "A.t", 2), "the exact translation of the final commit")
		rs, err := b.dstAdm.FetchOffsets(ctx, "g")
		require.NoError(t, err)
		o, _ := rs.Lookup("A.t", 0)
		require.Equal(t, "mm2go-sync:A->B", o.Metadata)
		require.Equal(t, 2.0, testutil.ToFloat64(c.m.synced.WithLabelValues("A->B")))

		// Nothing changed: the next round leaves the target alone.
		c.watch(ctx)
		require.Equal(t, 2.0, testutil.ToFloat64(c.m.synced.WithLabelValues("A->B")))

		// A consumer starts on the source again: the offsets go.
		b.memberOf(b.src, "g", "t", false)
		c.watch(ctx)
		require.Equal(t, []int64{-1, -1}, committed(t, b.dstAdm, "g", "A.t", 2))
		require.Equal(t, 2.0, testutil.ToFloat64(c.m.removed.WithLabelValues("A->B")))
	})

	t.Run("exact syncs many groups of one round at once", func(t *testing.T) {
		b, c, leave := setup(t, config.GroupSyncExact)
		leave()
		const n = 3 * switchParallel
		for i := range n {
			commit(t, b.srcAdm, fmt.Sprintf("many-%d", i), "t", map[int32]int64{0: 30, 1: 30}, "")
		}
		c.watch(context.Background())
		require.Equal(t, 2.0, testutil.ToFloat64(c.m.synced.WithLabelValues("A->B")), "g only: the others were not seen consuming yet")
		// Their consumers (assign() with a group.id: no members) commit.
		for i := range n {
			commit(t, b.srcAdm, fmt.Sprintf("many-%d", i), "t", map[int32]int64{0: 40, 1: 50}, "")
		}
		c.watch(context.Background())
		for i := range n {
			require.Equal(t, []int64{40, 60}, committed(t, b.dstAdm, fmt.Sprintf("many-%d", i), "A.t", 2), "group many-%d", i)
		}
		require.Equal(t, []int64{40, 60}, committed(t, b.dstAdm, "g", "A.t", 2))
		require.Equal(t, float64(2*(n+1)), testutil.ToFloat64(c.m.synced.WithLabelValues("A->B")))
	})

	t.Run("exact gives a group nobody switched no offsets until a consumer of it starts on the target", func(t *testing.T) {
		// The sequence behind the duplicates of the SIGKILL trials: the
		// trial's group sat idle on the source (offsets 40, 50) and got them
		// synced; it then consumed on the source while no process ran the
		// flow, and the consumer switched to the target started from the
		// older offsets.
		b, f := syncBed(t)
		f.GroupSyncMode = config.GroupSyncExact
		ctx := context.Background()
		first := b.started(f, prometheus.NewRegistry(), nil)
		first.watch(ctx)
		require.Equal(t, []int64{-1, -1}, committed(t, b.dstAdm, "g", "A.t", 2), "nobody switched g")

		// g consumes on the source, unseen, and stops.
		b.memberOf(b.src, "g", "t", false)()
		commit(t, b.srcAdm, "g", "t", map[int32]int64{0: 70, 1: 80}, "") // its final commit
		next := b.started(f, prometheus.NewRegistry(), nil)              // a restarted process
		next.watch(ctx)
		require.Equal(t, []int64{-1, -1}, committed(t, b.dstAdm, "g", "A.t", 2), "nothing tells the restarted process that g consumed")

		// The switched consumer (auto.offset.reset=none) starts on the
		// target, finds no offset and stops: the group now exists there.
		b.member("g", "A.t", false)()
		next.watch(ctx)
		require.Equal(t, []int64{70, 90}, committed(t, b.dstAdm, "g", "A.t", 2), "the exact translation of g's final commit")
	})

	t.Run("a process restarted at the switch learns from the checkpoints that the group consumed", func(t *testing.T) {
		for _, tc := range []struct {
			name        string
			emitAgain   bool // the stopped process wrote a checkpoint of the final commit
			description string
		}{
			{"the final commit has no checkpoint yet", false, "g committed past its last checkpoint"},
			{"the final commit has a checkpoint", true, "two checkpoints of g with different upstream offsets"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				b, f := syncBed(t)
				f.GroupSyncMode = config.GroupSyncExact
				ctx := context.Background()
				stopped := b.emitted(f, prometheus.NewRegistry(), nil) // a checkpoint of {40, 50}
				b.memberOf(b.src, "g", "t", false)()
				commit(t, b.srcAdm, "g", "t", map[int32]int64{0: 70, 1: 80}, "") // g's final commit
				if tc.emitAgain {
					stopped.emit(ctx)
				}
				// The process stops before its sync committed anything.
				next := b.started(f, prometheus.NewRegistry(), nil)
				next.watch(ctx)
				require.Equal(t, []int64{70, 90}, committed(t, b.dstAdm, "g", "A.t", 2), tc.description)
			})
		}
	})

	t.Run("a restarted process removes stale synced offsets before it loaded the offset map", func(t *testing.T) {
		b, f := syncBed(t)
		f.GroupSyncMode = config.GroupSyncExact
		// An earlier process synced g while it was empty; g consumes on the
		// source again. Offsets someone else committed stay.
		commit(t, b.dstAdm, "g", "A.t", map[int32]int64{0: 40, 1: 60}, syncMarker("A->B"))
		commit(t, b.dstAdm, "other", "A.t", map[int32]int64{0: 5, 1: 5}, syncMarker("A->B"))
		commit(t, b.dstAdm, "g2", "A.t", map[int32]int64{0: 7, 1: 7}, "a consumer's")
		commit(t, b.srcAdm, "g2", "t", map[int32]int64{0: 7, 1: 7}, "")
		b.memberOf(b.src, "g", "t", false)
		b.memberOf(b.src, "g2", "t", false)
		c := b.newCheckpointer(f, prometheus.NewRegistry(), nil) // not started: nothing loaded
		c.guard(context.Background())
		require.Equal(t, []int64{-1, -1}, committed(t, b.dstAdm, "g", "A.t", 2), "stale synced offsets of an active group")
		require.Equal(t, []int64{7, 7}, committed(t, b.dstAdm, "g2", "A.t", 2), "offsets the sync did not commit")
		require.Equal(t, []int64{5, 5}, committed(t, b.dstAdm, "other", "A.t", 2), "a group without members on the source")
	})

	t.Run("exact waits for replication to pass the final commit", func(t *testing.T) {
		b, c, leave := setup(t, config.GroupSyncExact)
		ctx := context.Background()
		leave()
		c.watch(ctx)
		require.Equal(t, []int64{40, 60}, committed(t, b.dstAdm, "g", "A.t", 2))
		// The group consumed again (unseen by the sync) and committed
		// offsets of which t/1's is not replicated yet: the older offset
		// of t/1 is stale and goes.
		commit(t, b.srcAdm, "g", "t", map[int32]int64{0: 70, 1: 130}, "")
		c.watch(ctx)
		require.Equal(t, []int64{70, -1}, committed(t, b.dstAdm, "g", "A.t", 2), "t/1 is replicated up to 100 only")
		require.Equal(t, 1.0, skippedCount(c, SkipNotReplicated))
		require.Equal(t, 1.0, testutil.ToFloat64(c.m.removed.WithLabelValues("A->B")))

		c.idx.Apply(mseg("t", 1, 100, 139, 110))
		c.idx.Apply(mpos("t", 1, 140, 150))
		c.watch(ctx)
		require.Equal(t, []int64{70, 140}, committed(t, b.dstAdm, "g", "A.t", 2))
	})

	t.Run("exact tries again until the offset map knows the partitions", func(t *testing.T) {
		b, c, leave := setup(t, config.GroupSyncExact)
		ctx := context.Background()
		leave()
		known := c.idx
		c.idx = NewIndex(0, nil) // as if the offset map had not been read yet
		c.watch(ctx)
		require.Equal(t, []int64{-1, -1}, committed(t, b.dstAdm, "g", "A.t", 2))
		require.Equal(t, 2.0, skippedCount(c, SkipNotTranslated))
		c.idx = known
		c.watch(ctx)
		require.Equal(t, []int64{40, 60}, committed(t, b.dstAdm, "g", "A.t", 2))
	})

	t.Run("exact initializes a local topic created later", func(t *testing.T) {
		b, c, leave := setup(t, config.GroupSyncExact)
		c.o.Flow.SyncGroupOffsetsInterval = 0 // look again at once
		ctx := context.Background()
		leave()
		c.watch(ctx)
		require.Equal(t, []int64{40, 60}, committed(t, b.dstAdm, "g", "A.t", 2))
		createTopic(t, b.dst, "t", 2) // the producers' topic on the target
		waitFor(t, "the local topic initialized", func() bool {
			c.watch(ctx) // a round may still see the topic missing (metadata cache)
			return slices.Equal([]int64{0, 0}, committed(t, b.dstAdm, "g", "t", 2))
		})
	})

	t.Run("exact leaves a target group with members alone", func(t *testing.T) {
		b, c, leave := setup(t, config.GroupSyncExact)
		ctx := context.Background()
		leave()
		tgtLeave := b.member("g", "A.t", false)
		c.watch(ctx)
		require.Equal(t, []int64{-1, -1}, committed(t, b.dstAdm, "g", "A.t", 2))
		require.Equal(t, 1.0, skippedCount(c, SkipActive))
		tgtLeave()
		c.watch(ctx)
		require.Equal(t, []int64{40, 60}, committed(t, b.dstAdm, "g", "A.t", 2))
	})

	t.Run("exact never rewinds what a consumer on the target committed", func(t *testing.T) {
		b, c, leave := setup(t, config.GroupSyncExact)
		ctx := context.Background()
		leave()
		commit(t, b.dstAdm, "g", "A.t", map[int32]int64{0: 95, 1: 5}, "")
		c.watch(ctx)
		require.Equal(t, []int64{95, 60}, committed(t, b.dstAdm, "g", "A.t", 2))
		require.Equal(t, 1.0, skippedCount(c, SkipWouldRewind))
	})
}

// TestPlanSwitchWaitsForUnreadGaps: a gap between replicated records that
// no round has read yet (a fencing writer's abort marker, when it started
// moments ago) keeps the partition pending instead of lowering its offset
// to the gap, which delivered the records after it twice. Once read as a
// marker the translation is committed; read as another producer's record,
// or unreadable, the offset is lowered to it so that none is lost.
func TestPlanSwitchWaitsForUnreadGaps(t *testing.T) {
	const marker = "mm2go-sync:A->B"
	// t/0: copies of 0..49 at 0..49, a gap at 50, copies of 50..99 at
	// 51..100.
	index := func() *Index {
		idx := NewIndex(0, nil)
		for _, r := range []offsetmap.Record{mseg("t", 0, 0, 49, 0), mseg("t", 0, 50, 99, 51), mpos("t", 0, 100, 101)} {
			idx.Apply(r)
		}
		return idx
	}
	src := offs("", map[string]map[int32]int64{"t": {0: 80}})
	gap := [2]int64{50, 51}
	tp := TopicPartition{"t", 0}
	for _, c := range []struct {
		name    string
		read    func(idx *Index)
		offset  int64 // -1: pending
		pending bool
	}{
		{"unread", func(*Index) {}, -1, true},
		{"a marker", func(idx *Index) { idx.classified(tp, gap, true, false, time.Now()) }, 81, false},
		{"another producer's record", func(idx *Index) { idx.classified(tp, gap, false, false, time.Now()) }, 50, false},
		{"unreadable", func(idx *Index) { idx.classified(tp, gap, false, true, time.Now()) }, 50, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			idx := index()
			c.read(idx)
			p := planSwitch(idx, allTopics(t), "A", src, nil, false, nil, marker)
			if c.pending {
				require.Empty(t, p.wants)
				require.Len(t, p.pending, 1)
				return
			}
			require.Empty(t, p.pending)
			require.Len(t, p.wants, 1)
			require.Equal(t, c.offset, p.wants[0].offset)
		})
	}
}

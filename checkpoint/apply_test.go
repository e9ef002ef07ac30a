package checkpoint

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/internal/itopic"
	"github.com/mm2go/mm2go/internal/offsetmap"
	"github.com/mm2go/mm2go/policy"
)

// translated loads the offset map of A as the CLI does and translates the
// offsets of group g (see syncBed, plus u/0 which the map does not know).
func translated(t *testing.T, b *bed, f *config.Flow) []GroupOffset {
	t.Helper()
	idx, err := LoadIndex(context.Background(), b.client(b.dst, itopic.ReaderOpts()...), offsetmap.Topic("A"), 0)
	require.NoError(t, err)
	offs, err := Translate(context.Background(), b.srcAdm, idx, selector(t, f), "A", "g", "")
	require.NoError(t, err)
	return offs
}

func TestLoadIndexAndTranslate(t *testing.T) {
	b, _ := syncBed(t)
	f := b.flow("topics = t, u")
	createTopic(t, b.src, "u", 1)
	createTopic(t, b.src, "other", 1)
	commit(t, b.srcAdm, "g", "u", map[int32]int64{0: 3}, "")
	commit(t, b.srcAdm, "g", "other", map[int32]int64{0: 3}, "")

	offs := translated(t, b, f)
	require.Equal(t, []GroupOffset{
		{Topic: "t", Partition: 0, RemoteTopic: "A.t", SourceOffset: 40, Metadata: "m", Translation: Translation{40, 40, ModeExact}, Known: true},
		{Topic: "t", Partition: 1, RemoteTopic: "A.t", SourceOffset: 50, Metadata: "m", Translation: Translation{50, 60, ModeExact}, Known: true},
		{Topic: "u", Partition: 0, RemoteTopic: "A.u", SourceOffset: 3},
	}, offs, "unreplicated topics are left out; unknown partitions are marked")

	idx, err := LoadIndex(context.Background(), b.client(b.dst, itopic.ReaderOpts()...), offsetmap.Topic("A"), 0)
	require.NoError(t, err)
	sel := selector(t, f)
	only, err := Translate(context.Background(), b.srcAdm, idx, sel, "A", "g", "u")
	require.NoError(t, err)
	require.Len(t, only, 1)
	require.Equal(t, "u", only[0].Topic)

	_, err = Translate(context.Background(), b.srcAdm, idx, sel, "A", "g", "other")
	require.ErrorContains(t, err, "not replicated")

	none, err := Translate(context.Background(), b.srcAdm, idx, sel, "A", "nobody", "")
	require.NoError(t, err)
	require.Empty(t, none)

	empty, err := LoadIndex(context.Background(), b.client(b.dst, itopic.ReaderOpts()...), "missing.topic", 0)
	require.NoError(t, err)
	_, ok := empty.Translate(TopicPartition{"t", 0}, 1)
	require.False(t, ok)
}

func TestApply(t *testing.T) {
	t.Run("commits to an empty group", func(t *testing.T) {
		b, f := syncBed(t)
		res, err := Apply(context.Background(), b.dstAdm, "g", translated(t, b, f), ApplyOptions{})
		require.NoError(t, err)
		require.Equal(t, []AppliedOffset{{"A.t", 0, 40, -1, false}, {"A.t", 1, 60, -1, false}}, res.Committed)
		require.Empty(t, res.Skipped)
		require.False(t, res.MemberJoined)
		require.Equal(t, []int64{40, 60}, committed(t, b.dstAdm, "g", "A.t", 2))
	})

	t.Run("never rewinds unless allowed", func(t *testing.T) {
		b, f := syncBed(t)
		commit(t, b.dstAdm, "g", "A.t", map[int32]int64{0: 70, 1: 60}, "")
		res, err := Apply(context.Background(), b.dstAdm, "g", translated(t, b, f), ApplyOptions{})
		require.NoError(t, err)
		require.Empty(t, res.Committed)
		require.Equal(t, []SkippedOffset{{"A.t", 0, 40, 70, SkipWouldRewind}, {"A.t", 1, 60, 60, SkipUpToDate}}, res.Skipped)
		require.Equal(t, []int64{70, 60}, committed(t, b.dstAdm, "g", "A.t", 2))

		res, err = Apply(context.Background(), b.dstAdm, "g", translated(t, b, f), ApplyOptions{AllowRewind: true})
		require.NoError(t, err)
		require.Equal(t, []AppliedOffset{{"A.t", 0, 40, 70, false}}, res.Committed)
		require.Equal(t, []int64{40, 60}, committed(t, b.dstAdm, "g", "A.t", 2))
	})

	t.Run("refuses an active group", func(t *testing.T) {
		b, f := syncBed(t)
		b.member("g", "A.t", false)
		res, err := Apply(context.Background(), b.dstAdm, "g", translated(t, b, f), ApplyOptions{AllowRewind: true})
		require.ErrorIs(t, err, ErrGroupActive)
		require.Empty(t, res.Committed)
		require.Equal(t, []int64{-1, -1}, committed(t, b.dstAdm, "g", "A.t", 2))
	})

	t.Run("a member joining before the commit", func(t *testing.T) {
		b, f := syncBed(t)
		offs := translated(t, b, f)
		b.dst.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
			return refuseCommit(req.(*kmsg.OffsetCommitRequest), kerr.IllegalGeneration), nil, true
		})
		res, err := Apply(context.Background(), b.dstAdm, "g", offs, ApplyOptions{})
		require.ErrorIs(t, err, ErrGroupActive)
		require.Empty(t, res.Committed)
		require.Equal(t, []SkippedOffset{{"A.t", 0, 40, -1, SkipBecameActive}, {"A.t", 1, 60, -1, SkipBecameActive}}, res.Skipped)
	})

	t.Run("skips untranslated offsets", func(t *testing.T) {
		b, _ := syncBed(t)
		offs := []GroupOffset{{Topic: "t", Partition: 0, RemoteTopic: "A.t", SourceOffset: 5}}
		res, err := Apply(context.Background(), b.dstAdm, "g", offs, ApplyOptions{})
		require.NoError(t, err)
		require.Empty(t, res.Committed)
		require.Equal(t, []SkippedOffset{{"A.t", 0, -1, -1, SkipNotTranslated}}, res.Skipped)
	})

	t.Run("initializes local topics", func(t *testing.T) {
		b, f := syncBed(t)
		createTopic(t, b.dst, "t", 2)
		b.produceRaw("t", &kgo.Record{Value: []byte("1")}, &kgo.Record{Value: []byte("2")})
		require.NoError(t, b.dst.DeleteRecords("t", 0, 2))
		res, err := Apply(context.Background(), b.dstAdm, "g", translated(t, b, f),
			ApplyOptions{InitLocalTopics: true, Policy: defaultPolicy(), Source: "A"})
		require.NoError(t, err)
		require.Equal(t, []AppliedOffset{{"A.t", 0, 40, -1, false}, {"A.t", 1, 60, -1, false}, {"t", 0, 2, -1, true}, {"t", 1, 0, -1, true}}, res.Committed)
		require.Equal(t, []int64{2, 0}, committed(t, b.dstAdm, "g", "t", 2))
	})
}

func TestLocalTopic(t *testing.T) {
	def := defaultPolicy()
	tests := []struct {
		name   string
		p      policy.Policy
		remote string
		want   string
	}{
		{"remote topic", def, "A.orders", "orders"},
		{"remote of a remote", def, "A.C.orders", "C.orders"},
		{"other source", def, "C.orders", ""},
		{"not remote", def, "orders", ""},
		{"heartbeats", def, "A.heartbeats", ""},
		{"identity policy", policy.New(policy.KindIdentity, "", true, "A"), "orders", ""},
		{"custom separator", policy.New(policy.KindDefault, "__", true, "A"), "A__orders", "orders"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := localTopic(tt.p, "A", tt.remote)
			require.Equal(t, tt.want != "", ok)
			require.Equal(t, tt.want, got)
		})
	}
}

// TestLastCheckpointsWithoutTheSource is the disaster path: the source
// cluster is gone, and the group's last checkpoints, read from the target
// alone, are committed into the target group.
func TestLastCheckpointsWithoutTheSource(t *testing.T) {
	b, f := syncBed(t) // g committed t = {0: 40, 1: 50} -> A.t = {0: 40, 1: 60}
	c := b.emitted(f, nil, nil)
	// A later commit that was never checkpointed: it is lost with the source.
	commit(t, b.srcAdm, "g", "t", map[int32]int64{0: 45}, "")
	b.src.Close()

	reader := b.client(b.dst, itopic.ReaderOpts()...)
	offs, newest, err := LastCheckpoints(context.Background(), reader, c.cpTopic, defaultPolicy(), "A", "g")
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), newest, time.Minute)
	require.Equal(t, []GroupOffset{
		{Topic: "t", Partition: 0, RemoteTopic: "A.t", SourceOffset: 40, Metadata: "m", Translation: Translation{40, 40, ModeCheckpoint}, Known: true},
		{Topic: "t", Partition: 1, RemoteTopic: "A.t", SourceOffset: 50, Metadata: "m", Translation: Translation{50, 60, ModeCheckpoint}, Known: true},
	}, offs)

	res, err := Apply(context.Background(), b.dstAdm, "g", offs, ApplyOptions{})
	require.NoError(t, err)
	require.Len(t, res.Committed, 2)
	require.Equal(t, []int64{40, 60}, committed(t, b.dstAdm, "g", "A.t", 2))

	none, _, err := LastCheckpoints(context.Background(), reader, c.cpTopic, defaultPolicy(), "A", "other")
	require.NoError(t, err)
	require.Empty(t, none)
}

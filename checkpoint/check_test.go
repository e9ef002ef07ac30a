package checkpoint

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/internal/itopic"
	"github.com/mm2go/mm2go/internal/offsetmap"
)

// produceSource writes n records to partition p of topic on the source.
func (b *bed) produceSource(topic string, p int32, n int) {
	b.t.Helper()
	cl := b.client(b.src, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for range n {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: []byte("v")})
	}
	require.NoError(b.t, cl.ProduceSync(context.Background(), recs...).FirstErr())
}

func TestCheck(t *testing.T) {
	b := newBed(t)
	f := b.flow("topics = ok, behind, nopos, txn")
	ctx := context.Background()
	for topic, parts := range map[string]int32{"ok": 1, "behind": 1, "nopos": 2, "txn": 1, "other": 1} {
		createTopic(t, b.src, topic, parts)
	}
	for topic, parts := range map[string]int32{"A.ok": 1, "A.behind": 1, "A.nopos": 2, "A.txn": 1} {
		createTopic(t, b.dst, topic, parts)
	}
	b.produceSource("ok", 0, 10)
	b.produceSource("behind", 0, 10)
	b.produceSource("nopos", 0, 10)
	// An open transaction on txn: high watermark 1, last stable offset 0.
	txn := b.client(b.src, kgo.TransactionalID("open"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, txn.BeginTransaction())
	require.NoError(t, txn.ProduceSync(ctx, &kgo.Record{Topic: "txn", Partition: 0, Value: []byte("v")}).FirstErr())

	b.writeMap(
		mseg("ok", 0, 0, 9, 0), mpos("ok", 0, 10, 10),
		mseg("behind", 0, 0, 5, 0), mpos("behind", 0, 6, 6),
		mseg("nopos", 0, 0, 9, 0), mpos("nopos", 0, 10, 10), // nopos/1: nothing stored
		mpos("txn", 0, 0, 0),
	)
	type setup struct {
		source map[string]map[int32]int64 // committed on the source
		target map[string]map[int32]int64 // committed on the target
		member string                     // a live member on this target topic
		srcMem string                     // a live member on this source topic
	}
	groups := map[string]setup{
		"safe":    {source: map[string]map[int32]int64{"ok": {0: 7}}, target: map[string]map[int32]int64{"A.ok": {0: 7}}},
		"lag":     {source: map[string]map[int32]int64{"behind": {0: 3}}, target: map[string]map[int32]int64{"A.behind": {0: 3}}},
		"missing": {source: map[string]map[int32]int64{"ok": {0: 5}}},
		"differs": {source: map[string]map[int32]int64{"ok": {0: 5}}, target: map[string]map[int32]int64{"A.ok": {0: 4}}},
		"active":  {source: map[string]map[int32]int64{"ok": {0: 7}}, target: map[string]map[int32]int64{"A.ok": {0: 7}}, member: "A.ok"},
		"nomap":   {source: map[string]map[int32]int64{"nopos": {0: 10, 1: 0}}, target: map[string]map[int32]int64{"A.nopos": {0: 10, 1: 0}}},
		"beyond":  {source: map[string]map[int32]int64{"ok": {0: 12}}, target: map[string]map[int32]int64{"A.ok": {0: 10}}},
		"nothing": {source: map[string]map[int32]int64{"other": {0: 1}}},
		"txn":     {source: map[string]map[int32]int64{"txn": {0: 0}}, target: map[string]map[int32]int64{"A.txn": {0: 0}}},
		"srcbusy": {source: map[string]map[int32]int64{"ok": {0: 7}}, target: map[string]map[int32]int64{"A.ok": {0: 7}}, srcMem: "ok"},
	}
	var names []string
	for g, s := range groups {
		names = append(names, g)
		for topic, os := range s.source {
			commit(t, b.srcAdm, g, topic, os, "")
		}
		for topic, os := range s.target {
			commit(t, b.dstAdm, g, topic, os, "")
		}
		if s.member != "" {
			b.member(g, s.member, false)
		}
		if s.srcMem != "" {
			b.memberOf(b.src, g, s.srcMem, false)
		}
	}

	idx, err := LoadIndex(ctx, b.client(b.dst, itopic.ReaderOpts()...), offsetmap.Topic("A"), 0)
	require.NoError(t, err)
	sel := selector(t, f)

	type failure struct {
		topic     string
		partition int32
		reason    FailureReason
	}
	reasons := func(gc GroupCheck) []failure {
		var out []failure
		for _, f := range gc.Failures {
			out = append(out, failure{f.Topic, f.Partition, f.Reason})
			require.NotEmpty(t, f.Detail)
		}
		return out
	}
	want := map[string][]failure{
		"safe":    nil,
		"lag":     {{"behind", 0, ReasonReplicationBehind}},
		"missing": {{"ok", 0, ReasonTargetMissing}},
		"differs": {{"ok", 0, ReasonTargetDiffers}},
		"active":  {{"", -1, ReasonGroupActive}},
		"nomap":   {{"nopos", 1, ReasonNoProgress}, {"nopos", 1, ReasonNotTranslated}},
		"beyond":  {{"ok", 0, ReasonInexact}},
		"nothing": {{"", -1, ReasonNoSourceOffsets}},
		"txn":     nil,
		"srcbusy": {{"", -1, ReasonSourceActive}},
	}

	t.Run("read_committed", func(t *testing.T) {
		rep, err := Check(ctx, b.srcAdm, b.dstAdm, idx, sel, "A", names, CheckOptions{ReadCommitted: true})
		require.NoError(t, err)
		require.False(t, rep.Safe())
		require.Len(t, rep.Groups, len(groups))
		for _, gc := range rep.Groups {
			t.Run(gc.Group, func(t *testing.T) {
				require.Equal(t, want[gc.Group], reasons(gc))
				if gc.Group == "missing" {
					require.Contains(t, gc.Failures[0].Detail, "does not exist on the target", "when the sync commits into it")
				}
				if gc.Group == "differs" {
					require.NotContains(t, gc.Failures[0].Detail, "does not exist")
				}
			})
		}
		require.Len(t, rep.Failures(), 9)
	})

	t.Run("read_uncommitted compares with the high watermark", func(t *testing.T) {
		rep, err := Check(ctx, b.srcAdm, b.dstAdm, idx, sel, "A", []string{"txn"}, CheckOptions{})
		require.NoError(t, err)
		require.False(t, rep.Safe())
		require.Equal(t, []failure{{"txn", 0, ReasonReplicationBehind}}, reasons(rep.Groups[0]))
	})

	t.Run("safe groups", func(t *testing.T) {
		rep, err := Check(ctx, b.srcAdm, b.dstAdm, idx, sel, "A", []string{"safe", "txn"}, CheckOptions{ReadCommitted: true})
		require.NoError(t, err)
		require.True(t, rep.Safe())
		require.Equal(t, 1, rep.Groups[0].Partitions)
		require.Empty(t, rep.Failures())
	})

	t.Run("no groups is not safe", func(t *testing.T) {
		rep, err := Check(ctx, b.srcAdm, b.dstAdm, idx, sel, "A", nil, CheckOptions{})
		require.NoError(t, err)
		require.False(t, rep.Safe())
	})
}

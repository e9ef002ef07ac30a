package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/mm2go/mm2go/policy"
)

// GroupOffset is a consumer group's committed offset of one source
// partition and its translation to the target.
type GroupOffset struct {
	// Topic and Partition name the source partition.
	Topic     string
	Partition int32
	// RemoteTopic is the topic the partition is replicated to on the target
	// (see RemoteTopic); the partition number is the same.
	RemoteTopic string
	// SourceOffset is the group's committed offset on the source, the next
	// record it would read.
	SourceOffset int64
	// Metadata is the group's commit metadata, "" when it has none.
	Metadata string
	// Translation is the offset to resume from on the target and how it was
	// derived; meaningful only when Known.
	Translation Translation
	// Known is false when the offset map knows nothing of the partition (no
	// record of it replicated, no position stored): MM2 would write no
	// checkpoint for it.
	Known bool
}

// Translate fetches the committed offsets of group on the source and
// translates those of replicated topics (as sel decides; topic "" means all
// of them, otherwise only topic) with idx, sorted by topic and partition.
// The target names come from RemoteTopic with sel.TargetAlias. A group
// without committed offsets gives an empty result.
//
// It returns an error when topic is not replicated by the flow, or when the
// offsets cannot be fetched (possibly a *kadm.AuthError, wrapped).
func Translate(ctx context.Context, srcAdm *kadm.Client, idx *Index, sel policy.TopicSelector, source, group, topic string) ([]GroupOffset, error) {
	if topic != "" && !sel.ShouldReplicate(topic) {
		return nil, fmt.Errorf("translate offsets of group %s: topic %s is not replicated by the flow", group, topic)
	}
	fetched, err := srcAdm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fetch offsets of group %s: %w", group, err)
	}
	return translateFetched(idx, sel, source, fetched, topic), nil
}

// TranslateFetched is Translate for offsets the caller fetched already
// (all of the group's topics that sel replicates).
func TranslateFetched(idx *Index, sel policy.TopicSelector, source string, fetched kadm.OffsetResponses) []GroupOffset {
	return translateFetched(idx, sel, source, fetched, "")
}

// translateFetched translates the committed offsets of replicated topics in
// fetched (only topic's unless topic is "").
func translateFetched(idx *Index, sel policy.TopicSelector, source string, fetched kadm.OffsetResponses, topic string) []GroupOffset {
	var out []GroupOffset
	fetched.Each(func(o kadm.OffsetResponse) {
		if o.Err != nil || o.At < 0 || (topic != "" && o.Topic != topic) || !sel.ShouldReplicate(o.Topic) {
			return
		}
		tr, ok := idx.Translate(TopicPartition{o.Topic, o.Partition}, o.At)
		out = append(out, GroupOffset{
			Topic:        o.Topic,
			Partition:    o.Partition,
			RemoteTopic:  RemoteTopic(sel.Policy, source, sel.TargetAlias, o.Topic),
			SourceOffset: o.At,
			Metadata:     o.Metadata,
			Translation:  tr,
			Known:        ok,
		})
	})
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

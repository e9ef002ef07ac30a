package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/internal/itopic"
	"github.com/mm2go/mm2go/policy"
)

// applyMapRecord decodes one record of the offset map topic into idx.
func applyMapRecord(idx *Index, r *kgo.Record) error {
	rec, err := policy.DecodeOffsetMap(r.Key, r.Value)
	if err != nil {
		return err
	}
	idx.Apply(rec)
	return nil
}

// LoadIndex reads the offset map topic (policy.OffsetMapTopic of the flow's
// source) from its start to its current end into a new Index that keeps at
// most maxSegments exact segments per partition (0 means
// DefaultMaxSegments). reader must be a client without group options built
// with itopic.ReaderOpts; it can be reused afterwards. A missing topic
// gives an empty index. Records that do not decode are skipped. It returns
// an error, and no index, when the topic cannot be listed or read.
func LoadIndex(ctx context.Context, reader *kgo.Client, topic string, maxSegments int) (*Index, error) {
	idx := NewIndex(maxSegments, nil)
	md, err := kadm.NewClient(reader).ListTopics(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list topic %s: %w", topic, err)
	}
	if missing(md, topic) {
		return idx, nil
	}
	err = itopic.ReadAll(ctx, reader, topic, func(r *kgo.Record) {
		_ = applyMapRecord(idx, r) // malformed: skipped, as MM2 skips bad syncs
	})
	if err != nil {
		return nil, fmt.Errorf("read offset map %s: %w", topic, err)
	}
	return idx, nil
}

// mapRetryInterval is how often the tail looks for an offset map topic that
// did not exist yet, and how long it waits after a failed fetch.
const mapRetryInterval = time.Second

// mapFeed reads the offset map topic into an Index: first up to the end the
// topic has at start (load), then every record written after (tail), with
// the same client, whose partitions stay added in between.
type mapFeed struct {
	cl    *kgo.Client
	topic string
	idx   *Index
	added bool // partitions are added to cl

	malformed func(*kgo.Record, error) // a record that does not decode
	failed    func(error)              // a failed fetch while tailing
	applied   func()                   // after every fetch that changed the index
}

// missing reports whether a listing says the topic does not exist.
func missing(md kadm.TopicDetails, topic string) bool {
	d, ok := md[topic]
	return !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) || (len(d.Partitions) == 0 && d.Err == nil)
}

// load reads the topic from its log start to the last stable offset it has
// now. A missing topic reads as empty; tail then waits for it.
func (f *mapFeed) load(ctx context.Context) error {
	adm := kadm.NewClient(f.cl)
	md, err := adm.ListTopics(ctx, f.topic)
	if err != nil {
		return fmt.Errorf("list topic %s: %w", f.topic, err)
	}
	if missing(md, f.topic) {
		return nil
	}
	if d := md[f.topic]; d.Err != nil {
		return fmt.Errorf("list topic %s: %w", f.topic, d.Err)
	}
	starts, err := adm.ListStartOffsets(ctx, f.topic)
	if err != nil {
		return fmt.Errorf("list start offsets of %s: %w", f.topic, err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, f.topic)
	if err != nil {
		return fmt.Errorf("list end offsets of %s: %w", f.topic, err)
	}
	add := make(map[int32]kgo.Offset)
	want := make(map[int32]int64) // partition -> end offset still to reach
	var errs []error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			errs = append(errs, fmt.Errorf("list end offset of %s[%d]: %w", f.topic, o.Partition, o.Err))
			return
		}
		start := int64(0)
		if s, ok := starts.Lookup(f.topic, o.Partition); ok && s.Err == nil {
			start = s.Offset
		}
		add[o.Partition] = kgo.NewOffset().At(start)
		if o.Offset > start {
			want[o.Partition] = o.Offset
		}
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}
	f.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{f.topic: add})
	f.added = true
	for len(want) > 0 {
		fs := f.cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		var fetchErr error
		fs.EachError(func(t string, p int32, err error) {
			if fetchErr == nil {
				fetchErr = fmt.Errorf("read %s[%d]: %w", t, p, err)
			}
		})
		if fetchErr != nil {
			return fetchErr
		}
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			f.apply(fp.Records)
			if end, ok := want[fp.Partition]; ok && len(fp.Records) > 0 && fp.Records[len(fp.Records)-1].Offset+1 >= end {
				delete(want, fp.Partition)
			}
		})
	}
	return nil
}

// apply feeds records into the index; control records are skipped.
func (f *mapFeed) apply(recs []*kgo.Record) {
	for _, r := range recs {
		if r.Attrs.IsControl() {
			continue
		}
		if err := applyMapRecord(f.idx, r); err != nil && f.malformed != nil {
			f.malformed(r, err)
		}
	}
}

// tail keeps reading the topic until ctx is done, waiting for it to appear
// if load found none. Fetch failures are reported to failed and retried;
// tail returns nil when ctx is done and an error only when the client was
// closed under it.
func (f *mapFeed) tail(ctx context.Context) error {
	if !f.added {
		if f.waitForTopic(ctx) != nil {
			return nil // ctx is done: a normal stop
		}
	}
	for {
		fs := f.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if fs.IsClientClosed() {
			return fmt.Errorf("read %s: %w", f.topic, kgo.ErrClientClosed)
		}
		var failed bool
		fs.EachError(func(t string, p int32, err error) {
			failed = true
			if f.failed != nil {
				f.failed(fmt.Errorf("read %s[%d]: %w", t, p, err))
			}
		})
		var n int
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			n += len(fp.Records)
			f.apply(fp.Records)
		})
		if n > 0 && f.applied != nil {
			f.applied()
		}
		if failed && n == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(mapRetryInterval):
			}
		}
	}
}

// waitForTopic polls for the topic until it exists and adds its partitions
// from their log start. It returns ctx's error when ctx ends first.
func (f *mapFeed) waitForTopic(ctx context.Context) error {
	adm := kadm.NewClient(f.cl)
	t := time.NewTicker(mapRetryInterval)
	defer t.Stop()
	for {
		md, err := adm.ListTopics(ctx, f.topic)
		if err == nil && !missing(md, f.topic) && md[f.topic].Err == nil {
			add := make(map[int32]kgo.Offset)
			for p := range md[f.topic].Partitions {
				add[p] = kgo.NewOffset().AtStart()
			}
			f.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{f.topic: add})
			f.added = true
			return nil
		}
		if err != nil && ctx.Err() == nil && f.failed != nil {
			f.failed(fmt.Errorf("list topic %s: %w", f.topic, err))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

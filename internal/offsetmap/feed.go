package offsetmap

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/internal/itopic"
	"github.com/mm2go/mm2go/internal/loop"
)

// Read reads the offset map topic from its start to its current end,
// passing every record that decodes to fn in offset order; malformed, when
// not nil, gets the others. A missing topic reads as empty. cl: see
// itopic.ReadAll.
func Read(ctx context.Context, cl *kgo.Client, topic string, fn func(Record), malformed func(*kgo.Record, error)) error {
	_, err := readToEnd(ctx, cl, topic, fn, malformed)
	return err
}

func readToEnd(ctx context.Context, cl *kgo.Client, topic string, fn func(Record), malformed func(*kgo.Record, error)) (map[int32]int64, error) {
	ends, err := itopic.ReadToEnd(ctx, cl, topic, func(r *kgo.Record) { decodeTo(r, fn, malformed) })
	if err != nil {
		return nil, fmt.Errorf("read offset map %s: %w", topic, err)
	}
	return ends, nil
}

func decodeTo(r *kgo.Record, fn func(Record), malformed func(*kgo.Record, error)) {
	m, err := Decode(r.Key, r.Value)
	switch {
	case err == nil:
		fn(m)
	case malformed != nil:
		malformed(r, err)
	}
}

// RetryInterval is how often a Feed looks for an offset map topic that did
// not exist yet, and how long it waits after a failed fetch.
const RetryInterval = time.Second

// Feed follows the offset map topic: Load reads it up to the end it has at
// start, Tail then every record written after, with the same client (see
// itopic.ReadAll for what it must be), whose partitions stay added in
// between.
type Feed struct {
	Client *kgo.Client
	Topic  string

	Apply     func(Record)             // every record that decodes, in offset order per partition
	Malformed func(*kgo.Record, error) // a record that does not decode; may be nil
	Failed    func(error)              // a failed fetch or listing while tailing; may be nil
	Applied   func()                   // after every fetch that applied records; may be nil

	added bool // partitions are added to Client
}

// Load reads the topic from its log start to the last stable offset it has
// now. A missing topic reads as empty; Tail then waits for it.
func (f *Feed) Load(ctx context.Context) error {
	ends, err := readToEnd(ctx, f.Client, f.Topic, f.Apply, f.Malformed)
	if err != nil || ends == nil {
		return err
	}
	add := make(map[int32]kgo.Offset, len(ends))
	for p, o := range ends {
		add[p] = kgo.NewOffset().At(o)
	}
	f.Client.AddConsumePartitions(map[string]map[int32]kgo.Offset{f.Topic: add})
	f.added = true
	return nil
}

// Tail keeps reading the topic until ctx is done, waiting for it to appear
// if Load found none. Fetch failures are reported to Failed and retried;
// Tail returns nil when ctx is done and an error only when the client was
// closed under it.
func (f *Feed) Tail(ctx context.Context) error {
	if !f.added {
		if f.waitForTopic(ctx) != nil {
			return nil // ctx is done: a normal stop
		}
	}
	for {
		fs := f.Client.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if fs.IsClientClosed() {
			return fmt.Errorf("read %s: %w", f.Topic, kgo.ErrClientClosed)
		}
		var failed bool
		fs.EachError(func(t string, p int32, err error) {
			failed = true
			f.failed(fmt.Errorf("read %s[%d]: %w", t, p, err))
		})
		var n int
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			for _, r := range fp.Records {
				if !r.Attrs.IsControl() {
					n++
					decodeTo(r, f.Apply, f.Malformed)
				}
			}
		})
		if n > 0 && f.Applied != nil {
			f.Applied()
		}
		if failed && n == 0 && !loop.Sleep(ctx, RetryInterval) {
			return nil
		}
	}
}

func (f *Feed) failed(err error) {
	if f.Failed != nil {
		f.Failed(err)
	}
}

// waitForTopic polls for the topic until it exists and adds its partitions
// from their log start. It returns ctx's error when ctx ends first.
func (f *Feed) waitForTopic(ctx context.Context) error {
	adm := kadm.NewClient(f.Client)
	for {
		md, err := adm.ListTopics(ctx, f.Topic)
		if err == nil && !itopic.Missing(md, f.Topic) && md[f.Topic].Err == nil {
			add := make(map[int32]kgo.Offset)
			for p := range md[f.Topic].Partitions {
				add[p] = kgo.NewOffset().AtStart()
			}
			f.Client.AddConsumePartitions(map[string]map[int32]kgo.Offset{f.Topic: add})
			f.added = true
			return nil
		}
		if err != nil && ctx.Err() == nil {
			f.failed(fmt.Errorf("list topic %s: %w", f.Topic, err))
		}
		if !loop.Sleep(ctx, RetryInterval) {
			return ctx.Err()
		}
	}
}

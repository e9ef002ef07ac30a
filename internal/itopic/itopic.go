// Package itopic creates and reads the compacted internal topics that MM2 and
// mm2go keep on a cluster: the Connect offsets topic, offset-syncs,
// checkpoints and heartbeats.
//
// It owns two mechanics shared by the replicator, checkpoint and heartbeat
// workers, which may not import each other: creating such a topic the way
// MM2 does (tolerating the errors MM2 tolerates), and reading a topic from its
// start to its current end. It does not know what the records mean; decoding
// is the caller's business (see package policy).
package itopic

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/internal/loop"
)

// ReaderOpts are the options a client passed to ReadAll needs on top of its
// connection settings: read_committed, so that records of aborted
// transactions are skipped, and control records, so that the end is seen.
// Its fetches are bounded by readerFetchMax, whatever fetch.max.bytes the
// consumer's settings give.
func ReaderOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.FetchMaxBytes(readerFetchMax),
	}
}

// readerFetchMax bounds a reader's Fetch responses. Internal topics hold
// small records in small batches (an offset, a sync, a checkpoint): MM2's
// consumer default of 50 MiB across the 25 partitions of the progress topic
// is decoded into hundreds of thousands of records at once, all read at
// start-up. With 1,500 partitions copied and their internal topics not
// compacted yet (a 13 MB offset map, 16 MB of progress in batches of about
// five records), a flow's start peaked at 311-338 MiB of RSS; 223-259 MiB
// with 4 MiB, 114-146 MiB with 1 MiB, as fast (3.5-6.8 s to "flow
// started", the topics growing from run to run; three to eight runs each).
const readerFetchMax = 1 << 20

// Spec describes an internal topic to create.
type Spec struct {
	Name              string
	Partitions        int32
	ReplicationFactor int16
	// Configs are extra topic configs; cleanup.policy=compact is always set.
	Configs map[string]string
}

// Ensure creates the topic unless it exists and returns its partition count.
//
// Like MM2 (MirrorUtils.createCompactedTopic), TopicAlreadyExists is not an
// error, and neither are TopicAuthorizationFailed, ClusterAuthorizationFailed
// and UnsupportedVersion when the topic can still be described: an operator
// may have created it beforehand for a principal without create rights. Any
// other failure is returned wrapped, with the topic named.
func Ensure(ctx context.Context, adm *kadm.Client, s Spec) (int32, error) {
	n, _, err := EnsureCreated(ctx, adm, s)
	return n, err
}

// EnsureCreated is Ensure that also reports whether this call created the
// topic: then it holds nothing yet, and a caller that would read it from
// the start need not (a topic just created has no leaders everywhere yet,
// and reading it waits for them).
func EnsureCreated(ctx context.Context, adm *kadm.Client, s Spec) (n int32, created bool, err error) {
	if n, err := partitions(ctx, adm, s.Name); err == nil {
		return n, false, nil
	}
	cfg := map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}
	for k, v := range s.Configs {
		cfg[k] = kadm.StringPtr(v)
	}
	resp, err := adm.CreateTopic(ctx, s.Partitions, s.ReplicationFactor, cfg, s.Name)
	switch {
	case err == nil && resp.NumPartitions > 0:
		return resp.NumPartitions, true, nil
	case err == nil:
		created = true
	case errors.Is(err, kerr.TopicAlreadyExists),
		errors.Is(err, kerr.TopicAuthorizationFailed),
		errors.Is(err, kerr.ClusterAuthorizationFailed),
		errors.Is(err, kerr.UnsupportedVersion):
	default:
		return 0, false, fmt.Errorf("create topic %s: %w", s.Name, err)
	}
	// The client caches metadata (kgo.MetadataMinAge, 5s by default), so
	// the topic may look missing for a few seconds; retry until ctx ends.
	for {
		n, err := partitions(ctx, adm, s.Name)
		if err == nil {
			return n, created, nil
		}
		if !loop.Sleep(ctx, 200*time.Millisecond) {
			return 0, false, fmt.Errorf("describe topic %s after create: %w", s.Name, err)
		}
	}
}

func partitions(ctx context.Context, adm *kadm.Client, topic string) (int32, error) {
	md, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return 0, err
	}
	d, ok := md[topic]
	if !ok {
		return 0, kerr.UnknownTopicOrPartition
	}
	if d.Err != nil {
		return 0, d.Err
	}
	if len(d.Partitions) == 0 {
		return 0, kerr.UnknownTopicOrPartition
	}
	return int32(len(d.Partitions)), nil
}

// ReadAll reads every partition of topic from its log start to the last
// stable offset it has when ReadAll starts, calling fn for each record in
// offset order per partition. Control records are not passed to fn. A missing
// topic reads as empty.
//
// cl must be a client without group options, built with
// kgo.KeepControlRecords so that a partition ending in a transaction marker
// is seen to end (see ReaderOpts). ReadAll adds the partitions to cl and
// removes them before returning, so cl can be reused afterwards.
func ReadAll(ctx context.Context, cl *kgo.Client, topic string, fn func(*kgo.Record)) error {
	_, err := ReadToEnd(ctx, cl, topic, fn)
	return err
}

// ReadToEnd is ReadAll that also returns, per partition, the offset it read
// up to: the partition's last stable offset when it started, where a reader
// that follows the topic goes on. A missing topic returns a nil map.
func ReadToEnd(ctx context.Context, cl *kgo.Client, topic string, fn func(*kgo.Record)) (map[int32]int64, error) {
	adm := kadm.NewClient(cl)
	md, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list topic %s: %w", topic, err)
	}
	if Missing(md, topic) {
		return nil, nil
	}
	if d := md[topic]; d.Err != nil {
		return nil, fmt.Errorf("list topic %s: %w", topic, d.Err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list start offsets of %s: %w", topic, err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	ranges := make(map[int32]Range)
	reached := make(map[int32]int64)
	var listErr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			listErr = fmt.Errorf("list end offset of %s[%d]: %w", topic, o.Partition, o.Err)
			return
		}
		start := int64(0)
		if s, ok := starts.Lookup(topic, o.Partition); ok && s.Err == nil {
			start = s.Offset
		}
		ranges[o.Partition] = Range{From: start, To: o.Offset}
		reached[o.Partition] = max(start, o.Offset)
	})
	if listErr != nil {
		return nil, listErr
	}
	err = ReadRanges(ctx, cl, map[string]map[int32]Range{topic: ranges}, func(r *kgo.Record) bool {
		if !r.Attrs.IsControl() {
			fn(r)
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	return reached, nil
}

// Missing reports whether a listing says topic does not exist.
func Missing(md kadm.TopicDetails, topic string) bool {
	d, ok := md[topic]
	return !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) || (len(d.Partitions) == 0 && d.Err == nil)
}

// Range is the offsets [From, To) of one partition.
type Range struct{ From, To int64 }

// ReadRanges reads the given offset ranges, calling fn for every record in
// offset order per partition, control records included (check
// r.Attrs.IsControl). A partition is done when its range end is reached or
// fn returns false for one of its records. Records below a range's start
// that share its batch are not passed to fn.
//
// cl must be a client without group options, built with
// kgo.KeepControlRecords (see ReaderOpts), because a range may end in a
// transaction marker. ReadRanges adds the partitions to cl and removes them
// before returning.
func ReadRanges(ctx context.Context, cl *kgo.Client, ranges map[string]map[int32]Range, fn func(*kgo.Record) bool) error {
	add := make(map[string]map[int32]kgo.Offset)
	remove := make(map[string][]int32)
	todo := make(map[string]map[int32]int64) // end offsets still to reach
	for t, ps := range ranges {
		for p, r := range ps {
			if r.From >= r.To {
				continue
			}
			if add[t] == nil {
				add[t] = make(map[int32]kgo.Offset)
				todo[t] = make(map[int32]int64)
			}
			add[t][p] = kgo.NewOffset().At(r.From)
			todo[t][p] = r.To
			remove[t] = append(remove[t], p)
		}
	}
	if len(add) == 0 {
		return nil
	}
	cl.AddConsumePartitions(add)
	defer cl.RemoveConsumePartitions(remove)

	left := 0
	for _, ps := range todo {
		left += len(ps)
	}
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		var fetchErr error
		fs.EachError(func(t string, p int32, err error) {
			if _, ok := todo[t][p]; ok && fetchErr == nil {
				fetchErr = fmt.Errorf("read %s[%d]: %w", t, p, err)
			}
		})
		if fetchErr != nil {
			return fetchErr
		}
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			end, ok := todo[fp.Topic][fp.Partition]
			if !ok {
				return
			}
			for _, r := range fp.Records {
				if r.Offset >= end {
					break
				}
				more := fn(r)
				if !more || r.Offset+1 >= end {
					delete(todo[fp.Topic], fp.Partition)
					left--
					break
				}
			}
		})
	}
	return nil
}

// Package verify proves a flow's copy: it reads each source partition and
// its remote copy side by side, aligned through mm2go's offset map, and
// compares every record (key, value, headers, timestamp). What retention,
// compaction or the flow's progress explain is counted apart from what is
// missing, duplicated, differing or extra.
package verify

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/mm2go/mm2go/internal/itopic"
	"github.com/mm2go/mm2go/internal/offsetmap"
	"github.com/mm2go/mm2go/policy"
)

// Options say what to verify and with which clients.
type Options struct {
	Source string        // the flow's source cluster alias
	Policy policy.Policy // names the remote topics
	// Replicated says which source topics the flow copies: their
	// partitions without an entry in the offset map are reported as not
	// copied yet. Nil: only the map's topics are looked at.
	Replicated func(topic string) bool
	// Topics narrows the topics verified; nil: all.
	Topics *policy.Filter
	// Since, when set, starts each partition at its first record at or
	// after this time instead of the offset map's start.
	Since time.Time
	// From, when it has a partition, starts it at that source offset: where
	// the previous round of a continuous verification ended (its
	// Partition.SourceTo).
	From map[offsetmap.TP]int64

	SourceAdmin, TargetAdmin *kadm.Client
	// MapReader reads the offset map from the target (itopic.ReaderOpts).
	MapReader *kgo.Client
	// NewSourceReader and NewTargetReader make one reader per worker, with
	// itopic.ReaderOpts: read_committed, as a consumer of either side reads.
	NewSourceReader, NewTargetReader func() (*kgo.Client, error)
	// Workers is how many partitions are read at once (default 4).
	Workers int
}

// Report is what Run found.
type Report struct {
	Partitions []Partition `json:"partitions"`
	// Totals sums the partitions' counts (no first offsets, names or
	// ranges).
	Totals    Partition     `json:"totals"`
	Elapsed   time.Duration `json:"-"`                     // the JSON of mm2go verify has elapsed_seconds
	Malformed int           `json:"malformed_map_records"` // offset map records that did not decode
}

// OK reports whether every partition is a copy or explained.
func (r *Report) OK() bool {
	for i := range r.Partitions {
		if !r.Partitions[i].OK() {
			return false
		}
	}
	return true
}

// job is one partition to verify.
type job struct {
	p    Partition
	m    segments
	b    bounds
	skip bool // nothing to read
}

// Run verifies the copies of the offset map's partitions that o selects.
func Run(ctx context.Context, o Options) (*Report, error) {
	began := time.Now()
	// The map first, then the target's ends, then the source's: the map
	// cannot promise a copy the target's listed end does not hold, nor
	// a source record beyond the source's listed end.
	st, malformed, err := offsetmap.Load(ctx, o.MapReader, offsetmap.Topic(o.Source))
	if err != nil {
		return nil, err
	}
	wanted := func(t string) bool { return o.Topics == nil || o.Topics.Match(t) }
	byTopic := make(map[string][]offsetmap.TP)
	for tp, p := range st {
		if len(p.Segments) > 0 && wanted(tp.Topic) {
			byTopic[tp.Topic] = append(byTopic[tp.Topic], tp)
		}
	}
	if o.Replicated != nil {
		md, err := o.SourceAdmin.ListTopics(ctx)
		if err != nil {
			return nil, fmt.Errorf("source: list topics: %w", err)
		}
		for _, d := range md.Sorted() {
			if d.Err != nil || !o.Replicated(d.Topic) || !wanted(d.Topic) {
				continue
			}
			for _, p := range d.Partitions.Sorted() {
				tp := offsetmap.TP{Topic: d.Topic, Partition: p.Partition}
				if mp := st[tp]; mp == nil || len(mp.Segments) == 0 {
					byTopic[d.Topic] = append(byTopic[d.Topic], tp)
				}
			}
		}
	}
	rep := &Report{Malformed: malformed}
	if len(byTopic) == 0 {
		return rep, nil
	}
	topics := make([]string, 0, len(byTopic))
	remotes := make([]string, 0, len(byTopic))
	for t := range byTopic {
		topics = append(topics, t)
		remotes = append(remotes, o.Policy.FormatRemoteTopic(o.Source, t))
	}
	tgt, err := listRanges(ctx, o.TargetAdmin, remotes, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	compacted, err := compactedTopics(ctx, o.TargetAdmin, remotes)
	if err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	src, err := listRanges(ctx, o.SourceAdmin, topics, o.Since)
	if err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}

	var jobs []*job
	for _, t := range topics {
		remote := o.Policy.FormatRemoteTopic(o.Source, t)
		tps := byTopic[t]
		slices.SortFunc(tps, func(a, b offsetmap.TP) int { return int(a.Partition - b.Partition) })
		for _, tp := range tps {
			from, ok := o.From[tp]
			if !ok {
				from = -1
			}
			jobs = append(jobs, plan(tp, remote, st[tp], src, tgt, compacted[remote], from))
		}
	}
	if err := runJobs(ctx, o, jobs); err != nil {
		return nil, err
	}
	for _, j := range jobs {
		rep.Partitions = append(rep.Partitions, j.p)
		rep.Totals.sum(&j.p)
	}
	rep.Totals.DifferingFields = rep.Totals.fields.String()
	rep.Elapsed = time.Since(began)
	return rep, nil
}

// ranges are a cluster's listed offsets of some topics.
type ranges struct {
	start, end, since kadm.ListedOffsets // since: nil unless asked for
}

func (r ranges) lookup(topic string, p int32) (start, end, since int64, err error) {
	s, ok := r.start.Lookup(topic, p)
	e, ok2 := r.end.Lookup(topic, p)
	if !ok || !ok2 {
		return 0, 0, 0, fmt.Errorf("%s[%d]: no such partition", topic, p)
	}
	if err := errors.Join(s.Err, e.Err); err != nil {
		return 0, 0, 0, fmt.Errorf("%s[%d]: %w", topic, p, err)
	}
	since = -1
	if r.since != nil {
		if x, ok := r.since.Lookup(topic, p); ok && x.Err == nil {
			since = x.Offset
		}
	}
	return s.Offset, e.Offset, since, nil
}

// listRanges lists the log start and last stable offsets of topics, and
// when since is set the first offset at or after it.
func listRanges(ctx context.Context, adm *kadm.Client, topics []string, since time.Time) (ranges, error) {
	var r ranges
	var err error
	if r.start, err = adm.ListStartOffsets(ctx, topics...); err != nil {
		return r, fmt.Errorf("list start offsets: %w", err)
	}
	if r.end, err = adm.ListCommittedOffsets(ctx, topics...); err != nil {
		return r, fmt.Errorf("list end offsets: %w", err)
	}
	if !since.IsZero() {
		if r.since, err = adm.ListOffsetsAfterMilli(ctx, since.UnixMilli(), topics...); err != nil {
			return r, fmt.Errorf("list offsets after %s: %w", since.Format(time.RFC3339), err)
		}
	}
	return r, nil
}

// compactedTopics reports which topics' cleanup.policy has compact.
func compactedTopics(ctx context.Context, adm *kadm.Client, topics []string) (map[string]bool, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("describe topic configs: %w", err)
	}
	out := make(map[string]bool)
	for _, rc := range rcs {
		for _, c := range rc.Configs {
			if c.Key == "cleanup.policy" && c.Value != nil && strings.Contains(*c.Value, "compact") {
				out[rc.Name] = true
			}
		}
	}
	return out, nil
}

// plan sets the ranges one partition is read in: on the source from the
// map's first segment (or since) to the flow's position, capped by the
// source's log; on the target from the copy of the first record read to
// the target's end; resume, when not negative, is where a previous round
// ended. A partition without segments (mp nil or empty) is not read: its
// records are not copied yet.
func plan(tp offsetmap.TP, remote string, mp *offsetmap.Partition, src, tgt ranges, compacted bool, resume int64) *job {
	j := &job{p: Partition{Topic: tp.Topic, Partition: tp.Partition, RemoteTopic: remote}}
	srcStart, srcEnd, since, err := src.lookup(tp.Topic, tp.Partition)
	since = max(since, resume)
	if err == nil && (mp == nil || len(mp.Segments) == 0) {
		from := max(srcStart, since)
		j.p.SourceFrom, j.p.SourceTo = from, from
		j.p.NotCopied = max(0, srcEnd-from)
		j.skip = true
		return j
	}
	if err == nil {
		j.m = segments(mp.Segments)
		var tgtStart, tgtEnd int64
		tgtStart, tgtEnd, _, err = tgt.lookup(remote, tp.Partition)
		j.b.targetStart = tgtStart
		j.p.TargetTo = tgtEnd
	}
	if err != nil {
		j.p.Error = err.Error()
		j.skip = true
		return j
	}
	first := j.m[0]
	mapEnd := j.m[len(j.m)-1].Last + 1
	if pos := mp.Position; pos != nil {
		mapEnd = max(mapEnd, pos.Next)
	}
	from := max(srcStart, first.From, since)
	if since < 0 && first.From > srcStart {
		j.p.BeforeMap = min(first.From, srcEnd) - srcStart
	}
	to := min(srcEnd, mapEnd)
	j.p.NotCopied = max(0, srcEnd-max(mapEnd, from))
	j.p.SourceFrom, j.p.SourceTo = from, max(from, to)
	j.b.sourceTo = j.p.SourceTo
	j.b.targetCompacted = compacted
	j.p.TargetFrom = j.p.TargetTo
	for _, s := range j.m {
		if s.Last >= from {
			j.p.TargetFrom = s.Down + max(0, from-s.From)
			break
		}
	}
	j.p.TargetFrom = max(j.p.TargetFrom, j.b.targetStart)
	j.skip = j.p.SourceFrom >= j.p.SourceTo && j.p.TargetFrom >= j.p.TargetTo
	return j
}

// runJobs verifies the jobs, o.Workers at a time, each worker with a
// reader on each cluster.
func runJobs(ctx context.Context, o Options, jobs []*job) error {
	workers := o.Workers
	if workers <= 0 {
		workers = 4
	}
	workers = min(workers, len(jobs))
	var (
		mu   sync.Mutex
		next int
	)
	take := func() *job {
		mu.Lock()
		defer mu.Unlock()
		for next < len(jobs) {
			j := jobs[next]
			next++
			if !j.skip {
				return j
			}
		}
		return nil
	}
	g, ctx := errgroup.WithContext(ctx)
	for range workers {
		g.Go(func() error {
			srcCl, err := o.NewSourceReader()
			if err != nil {
				return err
			}
			defer srcCl.Close()
			dstCl, err := o.NewTargetReader()
			if err != nil {
				return err
			}
			defer dstCl.Close()
			for j := take(); j != nil; j = take() {
				if err := verifyPartition(ctx, srcCl, dstCl, j); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// verifyPartition reads a job's two ranges concurrently and compares them
// as they arrive; memory is bounded by the channels and the comparison's
// look-ahead. A range that cannot be read is the partition's Error.
func verifyPartition(ctx context.Context, srcCl, dstCl *kgo.Client, j *job) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	read := func(cl *kgo.Client, topic string, from, to int64) (*stream, func() error) {
		ch := make(chan *kgo.Record, 1024)
		var err error
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer close(ch)
			err = itopic.ReadRanges(ctx, cl, map[string]map[int32]itopic.Range{topic: {j.p.Partition: {From: from, To: to}}},
				func(r *kgo.Record) bool {
					if r.Attrs.IsControl() {
						return true
					}
					select {
					case ch <- r:
						return true
					case <-ctx.Done():
						return false
					}
				})
		}()
		s := &stream{next: func() (*kgo.Record, bool) { r, ok := <-ch; return r, ok }}
		return s, func() error { <-done; return err }
	}
	src, srcErr := read(srcCl, j.p.Topic, j.p.SourceFrom, j.p.SourceTo)
	dst, dstErr := read(dstCl, j.p.RemoteTopic, j.p.TargetFrom, j.p.TargetTo)
	compare(src, dst, j.m, j.b, &j.p)
	err := errors.Join(srcErr(), dstErr())
	if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		return err // the whole run is cancelled or timed out
	}
	if err != nil {
		j.p.Error = err.Error()
	}
	return nil
}

// sum adds p's counts to t.
func (t *Partition) sum(p *Partition) {
	t.Matched += p.Matched
	for _, f := range []struct{ to, from *Finding }{
		{&t.Missing, &p.Missing}, {&t.Duplicated, &p.Duplicated}, {&t.Differing, &p.Differing}, {&t.Extra, &p.Extra},
	} {
		f.to.Count += f.from.Count
	}
	t.fields |= p.fields
	t.RemovedFromSource += p.RemovedFromSource
	t.TargetRetention += p.TargetRetention
	t.BeforeMap += p.BeforeMap
	t.NotCopied += p.NotCopied
	t.AfterMap += p.AfterMap
	t.TargetCompacted += p.TargetCompacted
}

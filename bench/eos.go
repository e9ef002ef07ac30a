package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/policy"
)

// The exactly-once phase: the backlog copied by mm2go and by Apache MM2 with
// <target>.exactly.once.source.support = enabled (MM2's key, read by both),
// each committing records and progress in transactions on the target. The
// remote topic then holds a commit marker after every transaction, so a
// run is complete when the last record before every partition's last stable
// offset is the source's last record, and is verified by reading it whole
// with read_committed: every partition holds exactly the source's number of
// records, its last one equal to the source's.

// Names of the exactly-once contenders.
const (
	nameMM2goEOS    = "mm2go-eos"
	nameMM2EOS      = "mm2-eos"
	nameMM2TunedEOS = "mm2-tuned-eos"
)

// eosLines are the properties that turn exactly-once on in both tools: the
// worker key per target cluster and, for MM2, whose source consumer reads
// uncommitted records by default (its connector then declares no
// exactly-once support), read_committed.
var eosLines = []string{"{T}.exactly.once.source.support = enabled", "{S}.consumer.isolation.level = read_committed"}

// eosContenders returns the exactly-once profiles: mm2go, MM2 with
// defaults and the tuned MM2, each with eosLines.
func eosContenders(o *options) []*contender {
	tuned := splitProps(o.mm2Tuned)
	return []*contender{
		{name: nameMM2goEOS, kind: kindMM2go, eos: true, props: eosLines,
			about: "mm2go exactly once: `" + strings.Join(eosLines, "; ") + "` (records copied in transactions, one per poll)"},
		{name: nameMM2EOS, kind: kindMM2, eos: true, props: eosLines,
			about: "Apache MM2 dedicated mode exactly once: `" + strings.Join(eosLines, "; ") + "`"},
		{name: nameMM2TunedEOS, kind: kindMM2, eos: true, props: append(slices.Clone(tuned), eosLines...),
			env:   strings.Fields(o.mm2TunedEnv),
			about: "Apache MM2 tuned for throughput, exactly once: `" + strings.Join(append(slices.Clone(tuned), eosLines...), "; ") + "`"},
	}
}

// committedProgress is targetProgress for a transactional copy: copied is
// the sum of the last stable offsets (markers included), and the run is
// complete once every partition's last record before its last stable
// offset is the source's last record.
func (b *bench) committedProgress(ctx context.Context, remote string) (progress, error) {
	lso, err := b.dstAdm.ListCommittedOffsets(ctx, remote)
	if err != nil {
		var se *kadm.ShardErrors
		if !errors.As(err, &se) {
			return progress{}, err
		}
	}
	var pr progress
	ends := map[int32]int64{}
	for p, o := range lso[remote] {
		if o.Err == nil && p >= 0 {
			pr.copied += o.Offset
			ends[p] = o.Offset
		}
	}
	if pr.copied < b.src.records || len(ends) != len(b.src.ends) {
		return pr, nil
	}
	last, err := lastCommitted(ctx, b.dstSeeds, remote, ends)
	if err != nil {
		return pr, err
	}
	for p, want := range b.src.last {
		if r := last[p]; r == nil || policy.CopyDiff(want, r) != 0 {
			return pr, nil
		}
	}
	pr.complete = true
	return pr, nil
}

// lastCommitted returns per partition the committed data record just
// before the marker that ends at lso (the last stable offset), if there is
// one: a transactional writer's last transaction ends with its marker at
// lso-1.
func lastCommitted(ctx context.Context, seeds []string, topic string, lso map[int32]int64) (map[int32]*kgo.Record, error) {
	at := map[int32]kgo.Offset{}
	for p, e := range lso {
		if e >= 2 {
			at[p] = kgo.NewOffset().At(e - 2)
		}
	}
	last := map[int32]*kgo.Record{}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: at}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	seen := map[int32]bool{}
	for len(seen) < len(at) {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read the last committed records of %s: %w", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if seen[r.Partition] || r.Offset < lso[r.Partition]-2 {
				return
			}
			seen[r.Partition] = true
			if r.Offset == lso[r.Partition]-2 && !r.Attrs.IsControl() {
				last[r.Partition] = r
			}
		})
	}
	return last, nil
}

// verifyCommitted checks that a read_committed reader of remote sees
// exactly the source topic: per partition the source's number of records
// and its last record.
func (b *bench) verifyCommitted(ctx context.Context, remote string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	lso, err := b.dstAdm.ListCommittedOffsets(ctx, remote)
	if err != nil {
		return fmt.Errorf("verify: list committed offsets of %s: %w", remote, err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.dstSeeds...), kgo.ConsumeTopics(remote), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return fmt.Errorf("verify: create client: %w", err)
	}
	defer cl.Close()
	want := map[int32]int64{}
	lso.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	count := map[int32]int64{}
	last := map[int32]*kgo.Record{}
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("verify: read %s: %w", remote, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				count[r.Partition]++
				last[r.Partition] = r
			}
			if r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	var bad []string
	for p, n := range b.src.ends {
		if count[p] != n {
			bad = append(bad, fmt.Sprintf("partition %d: %d committed records, want %d", p, count[p], n))
		} else if r := last[p]; n > 0 && (r == nil || policy.CopyDiff(b.src.last[p], r) != 0) {
			bad = append(bad, fmt.Sprintf("partition %d: the last committed record differs from the source's", p))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("verify: %s", strings.Join(bad, "; "))
	}
	return nil
}

// eosSection reports the exactly-once phase: each contender's catch-up,
// CPU and memory, and mm2go's ratios to the best MM2 profile and to its own
// copy without transactions (mm2go-records, when it ran).
func eosSection(rows []*summaryRow) string {
	m := findRow(rows, nameMM2goEOS)
	if m == nil {
		return ""
	}
	var s strings.Builder
	s.WriteString("\nExactly-once (`<target>.exactly.once.source.support = enabled`; verified with read_committed):\n\n")
	s.WriteString("| contender | wall s | MB/s | CPU s | MB per CPU-s | peak RSS MiB | first record s |\n|---|--:|--:|--:|--:|--:|--:|\n")
	for _, n := range []string{nameMM2goEOS, nameMM2EOS, nameMM2TunedEOS, nameMM2goRecords, nameMM2go} {
		if r := findRow(rows, n); r != nil {
			fmt.Fprintf(&s, "| %s | %s | %s | %s | %s | %s | %s |\n", r.name, cell(r.wall, 1), cell(r.mbps, 1), cell(r.cpu, 1),
				cell(r.mbPerCPU, 1), cell(r.rss, 0), cell(r.first, 2))
		}
	}
	best := bestRow(rows, func(r *summaryRow) float64 { return r.mbps }, true, nameMM2EOS, nameMM2TunedEOS)
	if bestCPU := bestRow(rows, func(r *summaryRow) float64 { return r.mbPerCPU }, true, nameMM2EOS, nameMM2TunedEOS); best != nil && bestCPU != nil {
		fmt.Fprintf(&s, "\nmm2go exactly once against the best MM2 exactly once: %s× the MB/s (%s), %s× the MB per CPU-s (%s).",
			cell(m.mbps/best.mbps, 2), best.name, cell(m.mbPerCPU/bestCPU.mbPerCPU, 1), bestCPU.name)
	}
	if r := findRow(rows, nameMM2goRecords); r != nil {
		fmt.Fprintf(&s, " Its cost against mm2go's record mode without transactions: %s× the MB/s, %s× the MB per CPU-s.",
			cell(m.mbps/r.mbps, 2), cell(m.mbPerCPU/r.mbPerCPU, 2))
	}
	s.WriteString("\n")
	return s.String()
}

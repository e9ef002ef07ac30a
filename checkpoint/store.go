package checkpoint

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/mm2go/mm2go/internal/itopic"
	"github.com/mm2go/mm2go/policy"
)

// cpKey identifies a checkpoint: group and downstream partition.
type cpKey struct {
	group     string
	topic     string // downstream topic
	partition int32
}

func keyOf(cp policy.Checkpoint) cpKey { return cpKey{cp.Group, cp.Topic, cp.Partition} }

// shouldEmit is MM2's monotonic rule: a checkpoint is written
// when there is none yet for its partition, when the source group rewound
// (its upstream offset is smaller), or when it moves the downstream offset
// forward. Everything else, including an unchanged checkpoint, is
// suppressed, so checkpoints never move backwards unless the group did.
func shouldEmit(cp, last policy.Checkpoint, have bool) bool {
	return !have || cp.UpstreamOffset < last.UpstreamOffset || cp.DownstreamOffset > last.DownstreamOffset
}

// store holds the last checkpoint written per group and downstream
// partition, and when each group's newest checkpoint was written. It is
// safe for concurrent use.
type store struct {
	mu     sync.Mutex
	last   map[cpKey]policy.Checkpoint
	newest map[string]time.Time
	// movedG holds the groups of which two checkpoints of one partition
	// have different upstream offsets: the group consumed (or was reset)
	// while a process running the flow watched it.
	movedG map[string]bool
}

func newStore() *store {
	return &store{last: make(map[cpKey]policy.Checkpoint), newest: make(map[string]time.Time), movedG: make(map[string]bool)}
}

// filter returns the checkpoints among cps that shouldEmit allows.
func (s *store) filter(cps []policy.Checkpoint) []policy.Checkpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []policy.Checkpoint
	for _, cp := range cps {
		last, have := s.last[keyOf(cp)]
		if shouldEmit(cp, last, have) {
			out = append(out, cp)
		}
	}
	return out
}

// put records checkpoints written at ts.
func (s *store) put(ts time.Time, cps ...policy.Checkpoint) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cp := range cps {
		if last, ok := s.last[keyOf(cp)]; ok && last.UpstreamOffset != cp.UpstreamOffset {
			s.movedG[cp.Group] = true
		}
		s.last[keyOf(cp)] = cp
		if ts.After(s.newest[cp.Group]) {
			s.newest[cp.Group] = ts
		}
	}
}

// byGroup returns a copy of the checkpoints of every group, each group's
// sorted by topic and partition.
func (s *store) byGroup() map[string][]policy.Checkpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]policy.Checkpoint)
	for k, cp := range s.last {
		out[k.group] = append(out[k.group], cp)
	}
	for _, cps := range out {
		sort.Slice(cps, func(i, j int) bool {
			if cps[i].Topic != cps[j].Topic {
				return cps[i].Topic < cps[j].Topic
			}
			return cps[i].Partition < cps[j].Partition
		})
	}
	return out
}

// upstream returns the upstream offset of the group's last checkpoint of a
// downstream partition.
func (s *store) upstream(group, topic string, partition int32) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cp, ok := s.last[cpKey{group, topic, partition}]
	return cp.UpstreamOffset, ok
}

// moved reports whether the group's checkpoints show that its committed
// offsets moved: two checkpoints of one partition, read from the topic or
// written since, have different upstream offsets.
func (s *store) moved(group string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.movedG[group]
}

// count returns the number of checkpoints held.
func (s *store) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.last)
}

// newestOf returns when the group's newest checkpoint was written.
func (s *store) newestOf(group string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.newest[group]
	return t, ok
}

// load reads the checkpoints topic from its start to its end and keeps, for
// groups that match and checkpoints keep accepts (nil: all), the last
// checkpoint per group and downstream partition, as MM2's CheckpointStore
// does. Records that do not decode are skipped and counted; malformed is
// called for each.
//
// The topic is shared by every flow from the same source into the same
// target (several mm2go or MM2 instances with other topic filters), so a
// flow keeps only the checkpoints of topics it replicates.
func (s *store) load(ctx context.Context, reader *kgo.Client, topic string, groups *policy.Filter, keep func(policy.Checkpoint) bool, malformed func(*kgo.Record, error)) error {
	err := itopic.ReadAll(ctx, reader, topic, func(r *kgo.Record) {
		cp, err := policy.DecodeCheckpoint(r.Key, r.Value)
		if err != nil {
			malformed(r, err)
			return
		}
		if groups.Match(cp.Group) && (keep == nil || keep(cp)) {
			s.put(r.Timestamp, cp)
		}
	})
	if err != nil {
		return fmt.Errorf("read checkpoints from %s: %w", topic, err)
	}
	return nil
}

package fence

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Member is one process in a flow's group.
type Member struct {
	// InstanceID is the process's --instance-id ("" for a member without
	// one), ClientID and Host what the group coordinator knows of it.
	InstanceID, ClientID, Host string
	// Tasks are the task topic's partitions assigned to the member: the
	// flow's tasks it runs, sorted. None: it stands by.
	Tasks []int32
}

// Status is what the group coordinator tells of a flow's group.
type Status struct {
	// State is the group's state (Stable, PreparingRebalance, Empty, ...);
	// "" when the group does not exist: no instance ever ran the flow.
	State string
	// Tasks is the flow's number of tasks, the task topic's partitions (0
	// when the topic does not exist).
	Tasks   int
	Members []Member // those running tasks first (by their first task), then by instance id
}

// Unowned returns the tasks no member runs.
func (s Status) Unowned() []int32 {
	owned := make(map[int32]bool)
	for _, m := range s.Members {
		for _, t := range m.Tasks {
			owned[t] = true
		}
	}
	var out []int32
	for t := range int32(s.Tasks) {
		if !owned[t] {
			out = append(out, t)
		}
	}
	return out
}

// Describe returns the members of the group group (the flow's
// policy.LeaseGroup on its target) and the tasks, partitions of topic, each
// runs.
func Describe(ctx context.Context, adm *kadm.Client, group, topic string) (Status, error) {
	var st Status
	tds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return Status{}, fmt.Errorf("describe topic %s: %w", topic, err)
	}
	if td, ok := tds[topic]; ok && td.Err == nil {
		st.Tasks = len(td.Partitions)
	}
	ds, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return Status{}, fmt.Errorf("describe group %s: %w", group, err)
	}
	d, ok := ds[group]
	switch {
	case !ok:
		return Status{}, fmt.Errorf("describe group %s: missing from the response", group)
	case errors.Is(d.Err, kerr.GroupIDNotFound):
		return st, nil
	case d.Err != nil:
		return Status{}, fmt.Errorf("describe group %s: %w", group, d.Err)
	}
	st.State = d.State
	if d.State == "Dead" {
		st.State = ""
	}
	for _, m := range d.Members {
		mb := Member{ClientID: m.ClientID, Host: m.ClientHost}
		if m.InstanceID != nil {
			mb.InstanceID = *m.InstanceID
		}
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range a.Topics {
				if t.Topic == topic {
					mb.Tasks = append(mb.Tasks, t.Partitions...)
				}
			}
		}
		slices.Sort(mb.Tasks)
		st.Members = append(st.Members, mb)
	}
	sort.SliceStable(st.Members, func(i, j int) bool {
		a, b := st.Members[i], st.Members[j]
		if (len(a.Tasks) > 0) != (len(b.Tasks) > 0) {
			return len(a.Tasks) > 0
		}
		if len(a.Tasks) > 0 && a.Tasks[0] != b.Tasks[0] {
			return a.Tasks[0] < b.Tasks[0]
		}
		return a.InstanceID < b.InstanceID
	})
	return st, nil
}

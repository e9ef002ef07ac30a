package fence

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Member is one process in a flow's lease group.
type Member struct {
	// InstanceID is the process's --instance-id ("" for a member without
	// one), ClientID and Host what the group coordinator knows of it.
	InstanceID, ClientID, Host string
	// Holds reports whether the member is assigned the lease topic's
	// partition: it runs the flow.
	Holds bool
}

// Status is what the group coordinator tells of a flow's lease group.
type Status struct {
	// State is the group's state (Stable, PreparingRebalance, Empty, ...);
	// "" when the group does not exist: no instance ever ran the flow.
	State   string
	Members []Member // the holder first, then by instance id
}

// Holder returns the member holding the lease, if one does.
func (s Status) Holder() (Member, bool) {
	if len(s.Members) > 0 && s.Members[0].Holds {
		return s.Members[0], true
	}
	return Member{}, false
}

// Describe returns the members of the lease group group (the flow's
// policy.LeaseGroup on its target) and which one holds the lease, the
// single partition of topic.
func Describe(ctx context.Context, adm *kadm.Client, group, topic string) (Status, error) {
	ds, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return Status{}, fmt.Errorf("describe group %s: %w", group, err)
	}
	d, ok := ds[group]
	switch {
	case !ok:
		return Status{}, fmt.Errorf("describe group %s: missing from the response", group)
	case errors.Is(d.Err, kerr.GroupIDNotFound):
		return Status{}, nil
	case d.Err != nil:
		return Status{}, fmt.Errorf("describe group %s: %w", group, d.Err)
	}
	st := Status{State: d.State}
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
				if t.Topic == topic && len(t.Partitions) > 0 {
					mb.Holds = true
				}
			}
		}
		st.Members = append(st.Members, mb)
	}
	sort.SliceStable(st.Members, func(i, j int) bool {
		a, b := st.Members[i], st.Members[j]
		if a.Holds != b.Holds {
			return a.Holds
		}
		return a.InstanceID < b.InstanceID
	})
	return st, nil
}

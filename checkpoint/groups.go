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

// Group types and protocol types as ListGroups reports them. A classic group
// that only ever received admin commits has an empty protocol type; brokers
// older than Kafka 3.8 report no group type.
const (
	groupTypeClassic  = "classic"
	groupTypeConsumer = "consumer"
	protocolConsumer  = "consumer"
	groupStateEmpty   = "Empty"
	groupStateDead    = "Dead"
)

// isConsumerGroup reports whether a listed group is a consumer group, as
// Kafka's Admin.listConsumerGroups counts them: classic groups of the
// consumer protocol (or none) and groups of the consumer protocol of KIP-848.
// Connect, share and streams groups are not.
func isConsumerGroup(l kadm.ListedGroup) bool {
	switch l.GroupType {
	case "", groupTypeClassic, groupTypeConsumer:
	default:
		return false
	}
	return l.ProtocolType == "" || l.ProtocolType == protocolConsumer
}

// SelectGroups returns, sorted, the consumer groups of the source cluster
// that a flow checkpoints, as MM2's checkpoint connector finds them: every
// consumer group (classic or consumer protocol) whose name groups matches
// ("groups" / "groups.exclude"), kept only if it has a committed offset on a
// topic sel replicates. The committed offsets of all candidates are fetched
// in one batched request.
//
// Any failure, including that of a single broker or group, is returned
// without a partial result, so that a caller never drops a group because
// its coordinator was briefly unreachable. Errors may be *kadm.ShardErrors
// or *kadm.AuthError, wrapped.
func SelectGroups(ctx context.Context, srcAdm *kadm.Client, groups *policy.Filter, sel policy.TopicSelector) ([]string, error) {
	listed, err := srcAdm.ListGroups(ctx)
	if err != nil {
		return nil, fmt.Errorf("list groups: %w", err)
	}
	var candidates []string
	for name, l := range listed {
		if isConsumerGroup(l) && groups.Match(name) {
			candidates = append(candidates, name)
		}
	}
	if len(candidates) == 0 {
		return nil, nil
	}
	fetched := srcAdm.FetchManyOffsets(ctx, candidates...)
	var out []string
	var errs []error
	for _, name := range candidates {
		r, ok := fetched[name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("fetch offsets of group %s: missing from the response", name))
			continue
		case errors.Is(r.Err, kerr.GroupIDNotFound):
			continue // deleted since it was listed
		case r.Err != nil:
			errs = append(errs, fmt.Errorf("fetch offsets of group %s: %w", name, r.Err))
			continue
		}
		if hasReplicatedOffset(r.Fetched, sel) {
			out = append(out, name)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	sort.Strings(out)
	return out, nil
}

func hasReplicatedOffset(os kadm.OffsetResponses, sel policy.TopicSelector) bool {
	for topic, ps := range os {
		if !sel.ShouldReplicate(topic) {
			continue
		}
		for _, o := range ps {
			if o.Err == nil && o.At >= 0 {
				return true
			}
		}
	}
	return false
}

// targetGroup is what describing a group on the target told. The zero value
// is a group that does not exist.
type targetGroup struct {
	exists  bool
	state   string
	members int
	err     error // the group could not be described; treat as not idle
}

// idle reports whether offsets may be committed to the group: it was
// described, has no members and is in state Empty or Dead, or it does not
// exist. A group without members in another state is between two states
// (a rebalance whose members all left) and is left alone until it settles.
func (g targetGroup) idle() bool {
	if g.err != nil || g.members > 0 {
		return false
	}
	switch g.state {
	case "", groupStateEmpty, groupStateDead:
		return true
	default:
		return false
	}
}

// describeTargetGroups describes groups on the target with one ListGroups
// (to learn each group's type and whether it exists) and one DescribeGroups
// and one ConsumerGroupDescribe request for the classic and consumer-protocol
// groups among them. A group absent from the listing does not exist. The
// error is returned only when the listing fails: then no group can be told
// absent. Per-group failures are in the result.
func describeTargetGroups(ctx context.Context, adm *kadm.Client, groups []string) (map[string]targetGroup, error) {
	out := make(map[string]targetGroup, len(groups))
	if len(groups) == 0 {
		return out, nil
	}
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		return nil, fmt.Errorf("list groups: %w", err)
	}
	var classic, consumer []string
	for _, g := range groups {
		l, ok := listed[g]
		switch {
		case !ok:
			out[g] = targetGroup{}
		case l.GroupType == "" || l.GroupType == groupTypeClassic:
			classic = append(classic, g)
		case l.GroupType == groupTypeConsumer:
			consumer = append(consumer, g)
		default:
			out[g] = targetGroup{exists: true, state: l.State,
				err: fmt.Errorf("group %s is a %s group, not a consumer group", g, l.GroupType)}
		}
	}
	if len(classic) > 0 {
		ds, err := adm.DescribeGroups(ctx, classic...)
		putDescribed(out, "group", classic, ds, err, func(d kadm.DescribedGroup) (string, int, error) {
			return d.State, len(d.Members), d.Err
		})
	}
	if len(consumer) > 0 {
		ds, err := adm.DescribeConsumerGroups(ctx, consumer...)
		putDescribed(out, "consumer group", consumer, ds, err, func(d kadm.DescribedConsumerGroup) (string, int, error) {
			return d.State, len(d.Members), d.Err
		})
	}
	return out, nil
}

// putDescribed records in out what a describe request (of classic or of
// consumer groups, what) said of each of groups: err is the request's
// error, view reads a group's state, member count and error.
func putDescribed[D any](out map[string]targetGroup, what string, groups []string, ds map[string]D, err error, view func(D) (string, int, error)) {
	for _, g := range groups {
		d, ok := ds[g]
		if !ok {
			why := err
			if why == nil {
				why = errors.New("missing from the response")
			}
			out[g] = targetGroup{err: fmt.Errorf("describe %s %s: %w", what, g, why)}
			continue
		}
		state, members, derr := view(d)
		switch {
		case errors.Is(derr, kerr.GroupIDNotFound):
			out[g] = targetGroup{}
		case derr != nil:
			out[g] = targetGroup{err: fmt.Errorf("describe %s %s: %w", what, g, derr)}
		default:
			out[g] = targetGroup{exists: true, state: state, members: members}
		}
	}
}

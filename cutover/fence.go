package cutover

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// errNoAuthorizer explains SECURITY_DISABLED for the fence.
const errNoAuthorizer = "the source cluster has no ACL authorizer (authorizer.class.name), so it cannot fence its producers: switch them by hand and run the cutover without --fence"

// builder returns the fence's DENY ACLs: WRITE on each topic (literal
// name) for each principal, from any host.
func (f *Fence) builder() *kadm.ACLBuilder {
	return kadm.NewACLs().Topics(f.Topics...).Deny(f.Principals...).DenyHosts(f.Host).
		Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral)
}

// openBuilder returns the ALLOW ALL ACLs for User:* on the topics that had
// no ACL (KeptOpen), or nil.
func (f *Fence) openBuilder() *kadm.ACLBuilder {
	if len(f.KeptOpen) == 0 {
		return nil
	}
	return kadm.NewACLs().Topics(f.KeptOpen...).Allow(anyone).AllowHosts(f.Host).
		Operations(kadm.OpAll).ResourcePatternType(kadm.ACLPatternLiteral)
}

const anyone = "User:*"

// fence creates the DENY WRITE ACLs and waits until every source broker
// enforces them.
//
// A topic no ACL names is open to every principal only through the
// authorizer's allow.everyone.if.no.acl.found=true; one DENY ACL on it
// makes the authorizer refuse every operation that no ALLOW ACL grants, to
// every principal but super users: reads too, mm2go's own among them. Such
// topics are fenced only with KeepOpen, which also creates ALLOW ALL for
// User:* on them (DENY wins over ALLOW, so writes stay refused).
func (r *run) fence(ctx context.Context) (string, error) {
	if !r.o.Fence {
		return "no fence (--fence not given): the producers are switched by hand", nil
	}
	f := &Fence{Principals: r.o.Principals, Host: "*", Topics: r.st.Topics, Created: r.o.Now()}
	open, err := r.topicsWithoutACLs(ctx, f.Topics)
	if err != nil {
		return "", err
	}
	if len(open) > 0 && !r.o.KeepOpen {
		return "", fmt.Errorf("no ACL names %d of the flow's topics on the source (%s): a DENY WRITE ACL on them would also take "+
			"reading from every principal that is not a super user, mm2go's own too; with --fence-keep-open the fence also "+
			"allows every other operation to User:* on them (right when the source sets allow.everyone.if.no.acl.found=true)",
			len(open), strings.Join(open, ", "))
	}
	f.KeptOpen = open
	// Recorded before they exist: a crash right after creating them
	// leaves them in the state file for --unfence.
	r.st.Fence = f
	if err := r.o.Save(r.st); err != nil {
		return "", fmt.Errorf("save the state: %w", err)
	}
	// The ALLOW ACLs first: between the two requests the topics stay
	// readable.
	for _, b := range []*kadm.ACLBuilder{f.openBuilder(), f.builder()} {
		if b == nil {
			continue
		}
		if err := createACLs(ctx, r.o.SourceAdmin, b); err != nil {
			return "", err
		}
	}
	// The controller has them; each broker enforces them once it applied
	// the metadata record. Until every one describes them, a producer may
	// still write to a partition it leads.
	want := len(f.Topics) * len(f.Principals)
	err = r.wait(ctx, func(ctx context.Context) (bool, string, error) {
		lagging, err := r.brokersWithout(ctx, f, want)
		if err != nil || len(lagging) == 0 {
			return err == nil, "", err
		}
		return false, "source brokers not enforcing the fence yet: " + strings.Join(lagging, ", "), nil
	})
	if err != nil {
		return "", err
	}
	detail := fmt.Sprintf("DENY WRITE for %s on %s of the source (%s), enforced by every source broker: its producers get TOPIC_AUTHORIZATION_FAILED",
		strings.Join(f.Principals, ", "), count(len(f.Topics), "topic"), count(want, "ACL"))
	if len(open) > 0 {
		detail += fmt.Sprintf("; ALLOW ALL for User:* on the %s no ACL named", count(len(open), "topic"))
	}
	return detail, nil
}

// createACLs creates the ACLs of b on the source.
func createACLs(ctx context.Context, adm *kadm.Client, b *kadm.ACLBuilder) error {
	res, err := adm.CreateACLs(ctx, b)
	if err == nil {
		for _, c := range res {
			if c.Err != nil {
				err = fmt.Errorf("%s %s for %s on topic %s: %w%s", c.Permission, c.Operation, c.Principal, c.Name, c.Err, msgSuffix(c.ErrMessage))
				break
			}
		}
	}
	if errors.Is(err, kerr.SecurityDisabled) {
		return errors.New(errNoAuthorizer)
	}
	if err != nil {
		return fmt.Errorf("create ACLs on the source: %w", err)
	}
	return nil
}

// topicsWithoutACLs returns the topics that no ACL of the source names
// (literal, prefixed or wildcard).
func (r *run) topicsWithoutACLs(ctx context.Context, topics []string) ([]string, error) {
	res, err := r.o.SourceAdmin.DescribeACLs(ctx, kadm.NewACLs().Topics(topics...).ResourcePatternType(kadm.ACLPatternMatch).
		Allow().AllowHosts().Deny().DenyHosts().Operations())
	if err == nil {
		for _, d := range res {
			if d.Err != nil {
				err = d.Err
				break
			}
		}
	}
	if errors.Is(err, kerr.SecurityDisabled) {
		return nil, errors.New(errNoAuthorizer)
	}
	if err != nil {
		return nil, fmt.Errorf("describe the ACLs of the flow's topics on the source: %w", err)
	}
	named := make(map[string]bool)
	for _, d := range res {
		if d.Name != nil && len(d.Described) > 0 {
			named[*d.Name] = true
		}
	}
	var out []string
	for _, t := range topics {
		if !named[t] {
			out = append(out, t)
		}
	}
	return out, nil
}

// brokersWithout returns the source brokers that do not describe all want
// ACLs of f yet.
func (r *run) brokersWithout(ctx context.Context, f *Fence, want int) ([]string, error) {
	brokers, err := r.o.SourceAdmin.ListBrokers(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the source's brokers: %w", err)
	}
	var out []string
	for _, b := range brokers {
		n, err := describeOn(ctx, r.o.SourceClient.Broker(int(b.NodeID)), f)
		if err != nil {
			return nil, fmt.Errorf("describe ACLs on source broker %d: %w", b.NodeID, err)
		}
		if n < want {
			out = append(out, fmt.Sprintf("broker %d (%d of %d ACLs)", b.NodeID, n, want))
		}
	}
	return out, nil
}

// describeOn counts the ACLs of f that one broker describes: brokers answer
// DescribeAcls from the authorizer they enforce.
func describeOn(ctx context.Context, b *kgo.Broker, f *Fence) (int, error) {
	topics := make(map[string]bool, len(f.Topics))
	for _, t := range f.Topics {
		topics[t] = true
	}
	principals := make(map[string]bool, len(f.Principals))
	for _, p := range f.Principals {
		principals[p] = true
	}
	req := kmsg.NewPtrDescribeACLsRequest()
	req.ResourceType = kmsg.ACLResourceTypeTopic
	req.ResourcePatternType = kmsg.ACLResourcePatternTypeLiteral
	req.Operation = kmsg.ACLOperationWrite
	req.PermissionType = kmsg.ACLPermissionTypeDeny
	host := f.Host
	req.Host = &host
	resp, err := req.RequestWith(ctx, b)
	if err != nil {
		return 0, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return 0, fmt.Errorf("%w%s", err, msgSuffix(derefStr(resp.ErrorMessage)))
	}
	n := 0
	for _, res := range resp.Resources {
		if !topics[res.ResourceName] {
			continue
		}
		for _, a := range res.ACLs {
			if principals[a.Principal] {
				n++
			}
		}
	}
	return n, nil
}

// Unfence deletes exactly the ACLs the state's fence created and records
// when in st. It returns how many ACLs the source deleted (0 when they were
// gone already); a state without a fence is an error.
func Unfence(ctx context.Context, adm *kadm.Client, st *State, now time.Time) (int, error) {
	if st.Fence == nil {
		return 0, errors.New("the state file records no fence (the cutover ran without --fence, or before its fence step)")
	}
	// The DENY ACLs first: between the two requests the topics stay
	// readable.
	n := 0
	for _, b := range []*kadm.ACLBuilder{st.Fence.builder(), st.Fence.openBuilder()} {
		if b == nil {
			continue
		}
		res, err := adm.DeleteACLs(ctx, b)
		if err != nil {
			if errors.Is(err, kerr.SecurityDisabled) {
				return n, errors.New("the source cluster has no ACL authorizer any more: nothing to remove")
			}
			return n, fmt.Errorf("delete the fence's ACLs on the source: %w", err)
		}
		for _, d := range res {
			if d.Err != nil {
				return n, fmt.Errorf("delete the fence's ACLs on the source: %w%s", d.Err, msgSuffix(d.ErrMessage))
			}
			n += len(d.Deleted)
		}
	}
	st.Fence.Removed = &now
	return n, nil
}

func msgSuffix(m string) string {
	if m == "" {
		return ""
	}
	return " (" + m + ")"
}

func derefStr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

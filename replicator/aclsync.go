package replicator

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/policy"
)

// aclBinding is a literal topic ACL: who may (or may not) do what on a
// topic, from which host.
type aclBinding struct {
	Topic      string
	Principal  string
	Host       string
	Operation  kmsg.ACLOperation
	Permission kmsg.ACLPermissionType
}

// aclSync is the state of a flow's ACL sync loop.
type aclSync struct {
	r *Replicator
	// noAuthorizer is set once the source answered SECURITY_DISABLED, so
	// that MM2's advice is logged at info level once and later at debug.
	noAuthorizer bool
}

// aclSyncLoop copies the ACLs of the flow's source topics to their remote
// topics, once at start and then every sync.topic.acls.interval.seconds
// (MM2 default 600 s). Failures are logged and counted and never stop the
// flow.
func (r *Replicator) aclSyncLoop(ctx context.Context) error {
	s := &aclSync{r: r}
	return runEvery(ctx, r.o.Flow.SyncTopicAclsInterval, r.o.Flow.AdminTimeout, s.round)
}

// round runs one ACL sync as MM2's MirrorSourceConnector.syncTopicAcls
// does (spec §6.5): describe every topic ACL on the source; keep literal
// ones of replicated topics that do not allow WRITE; name the remote topic,
// turning ALLOW ALL into ALLOW READ; create them on the target. ACLs are
// only ever added: one removed on the source stays on the target. Without
// an authorizer on the source (SECURITY_DISABLED) the target is not
// contacted.
func (s *aclSync) round(ctx context.Context) {
	r := s.r
	described, err := describeTopicACLs(ctx, r.o.SourceAdmin)
	switch {
	case errors.Is(err, kerr.SecurityDisabled):
		if !s.noAuthorizer {
			s.noAuthorizer = true
			r.log.Info("no ACL authorizer is configured on the source cluster, so no topic ACL syncing will take place; consider setting sync.topic.acls.enabled=false",
				zap.String("source_cluster", r.o.Flow.Source))
		} else {
			r.log.Debug("source ACL authorizer still not found; skipping topic ACL sync", zap.String("source_cluster", r.o.Flow.Source))
		}
		return
	case err != nil:
		r.m.error(r.flow, reasonACLSync)
		if exc := javaAuthException(err); exc != "" {
			r.logAuthError(exc, fmt.Sprintf("describe topic ACLs on %s cluster", r.o.Flow.Source), err)
			return
		}
		r.log.Warn("describe source topic ACLs; retried at the next interval", zap.Error(err))
		return
	}
	bindings := remoteACLs(described, r.sel, r.o.Policy, r.o.Flow.Source)
	if len(bindings) == 0 {
		return
	}
	created, failed := createTopicACLs(ctx, r.o.TargetAdmin, bindings)
	r.m.aclsSyncedAdd(r.flow, created)
	if len(failed) > 0 {
		r.m.error(r.flow, reasonACLSync)
		topics := make([]string, 0, len(failed))
		for _, f := range failed {
			topics = append(topics, f.Topic)
		}
		first := failed[0].err
		if exc := javaAuthException(first); exc != "" {
			r.logAuthError(exc, fmt.Sprintf("create topic ACLs on %s cluster", r.o.Flow.Target), first)
		}
		r.log.Warn("could not sync ACLs of remote topics; retried at the next interval",
			zap.Int("acls", len(failed)), zap.Strings("target_topics", topics), zap.Error(first))
	}
	r.log.Debug("topic ACLs synced", zap.Int("acls", created))
}

// describeTopicACLs lists every topic ACL of a cluster: MM2's filter
// (resource TOPIC, any name, pattern ANY, any principal, host, operation
// and permission). Errors are the request's or the filter's (for example
// kerr.SecurityDisabled when the cluster has no authorizer).
func describeTopicACLs(ctx context.Context, adm *kadm.Client) ([]kadm.DescribedACL, error) {
	b := kadm.NewACLs().Topics().ResourcePatternType(kadm.ACLPatternAny).
		Allow().AllowHosts().Deny().DenyHosts().Operations()
	results, err := adm.DescribeACLs(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("describe topic ACLs: %w", err)
	}
	var out []kadm.DescribedACL
	for _, res := range results {
		if res.Err != nil {
			return nil, fmt.Errorf("describe topic ACLs: %w", res.Err)
		}
		out = append(out, res.Described...)
	}
	return out, nil
}

// remoteACLs turns the source's topic ACLs into the ACLs of their remote
// topics (spec §6.5): only LITERAL topic ACLs, without ALLOW WRITE (only
// mm2go writes to a remote topic), of topics the flow replicates (sel);
// ALLOW ALL becomes ALLOW READ for the same principal and host; DENY ALL,
// ALLOW READ, ALLOW DESCRIBE and the rest are copied as they are. PREFIXED
// ACLs are never copied. The result is sorted and has no duplicates.
func remoteACLs(described []kadm.DescribedACL, sel policy.TopicSelector, pol policy.Policy, source string) []aclBinding {
	seen := make(map[aclBinding]bool)
	var out []aclBinding
	for _, a := range described {
		if a.Type != kmsg.ACLResourceTypeTopic || a.Pattern != kmsg.ACLResourcePatternTypeLiteral {
			continue
		}
		if a.Permission == kmsg.ACLPermissionTypeAllow && a.Operation == kmsg.ACLOperationWrite {
			continue
		}
		if !sel.ShouldReplicate(a.Name) {
			continue
		}
		b := aclBinding{
			Topic:      pol.FormatRemoteTopic(source, a.Name),
			Principal:  a.Principal,
			Host:       a.Host,
			Operation:  a.Operation,
			Permission: a.Permission,
		}
		if b.Permission == kmsg.ACLPermissionTypeAllow && b.Operation == kmsg.ACLOperationAll {
			b.Operation = kmsg.ACLOperationRead
		}
		if seen[b] {
			continue
		}
		seen[b] = true
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool {
		x, y := out[i], out[j]
		switch {
		case x.Topic != y.Topic:
			return x.Topic < y.Topic
		case x.Principal != y.Principal:
			return x.Principal < y.Principal
		case x.Host != y.Host:
			return x.Host < y.Host
		case x.Permission != y.Permission:
			return x.Permission < y.Permission
		}
		return x.Operation < y.Operation
	})
	return out
}

// failedACL is a binding the target did not create, and why.
type failedACL struct {
	aclBinding
	err error
}

// createTopicACLs creates literal topic ACLs, one request per principal,
// host, permission and operation (kadm builds the cross product of its
// inputs, so bindings that differ only in the topic share a request). It
// returns how many were created and the ones that failed.
func createTopicACLs(ctx context.Context, adm *kadm.Client, bindings []aclBinding) (int, []failedACL) {
	type groupKey struct {
		principal, host string
		perm            kmsg.ACLPermissionType
		op              kmsg.ACLOperation
	}
	groups := make(map[groupKey][]aclBinding)
	var order []groupKey
	for _, b := range bindings {
		k := groupKey{b.Principal, b.Host, b.Permission, b.Operation}
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], b)
	}
	var created int
	var failed []failedACL
	for _, k := range order {
		bs := groups[k]
		topics := make([]string, len(bs))
		for i, b := range bs {
			topics[i] = b.Topic
		}
		req := kadm.NewACLs().Topics(topics...).ResourcePatternType(kadm.ACLPatternLiteral).Operations(k.op)
		if k.perm == kmsg.ACLPermissionTypeAllow {
			req.Allow(k.principal).AllowHosts(k.host)
		} else {
			req.Deny(k.principal).DenyHosts(k.host)
		}
		results, err := adm.CreateACLs(ctx, req)
		if err != nil {
			for _, b := range bs {
				failed = append(failed, failedACL{b, fmt.Errorf("create topic ACLs: %w", err)})
			}
			continue
		}
		for _, res := range results {
			if res.Err != nil {
				failed = append(failed, failedACL{aclBinding{Topic: res.Name, Principal: res.Principal, Host: res.Host, Operation: res.Operation, Permission: res.Permission}, res.Err})
				continue
			}
			created++
		}
	}
	return created, failed
}

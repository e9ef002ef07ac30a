package replicator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/policy"
)

// aclBinding is a topic ACL: who may (or may not) do what on a topic (or
// on the topics with a prefix), from which host.
type aclBinding struct {
	Topic      string
	Prefixed   bool // a PREFIXED ACL: Topic is the prefix
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
	// reported holds the skipped ACLs already logged, so that each is
	// logged once per run of the flow.
	reported map[skippedACL]bool
}

// aclSyncLoop copies the ACLs of the flow's source topics to their remote
// topics, once at start and then every sync.topic.acls.interval.seconds
// (MM2 default 600 s). Failures are logged and counted and never stop the
// flow.
func (r *Replicator) aclSyncLoop(ctx context.Context) error {
	s := &aclSync{r: r}
	return runEvery(ctx, r.o.Flow.SyncTopicAclsInterval, r.o.Flow.AdminTimeout, s.round)
}

// round runs one ACL sync like MM2's MirrorSourceConnector.syncTopicAcls:
// describe every topic ACL on the source; keep those of replicated topics
// that the mode's rule copies (remoteACLs); name the remote topic; create
// them on the target. ACLs are only ever added: one removed on the source
// stays on the target. Without an authorizer on the source
// (SECURITY_DISABLED) the target is not contacted.
func (s *aclSync) round(ctx context.Context) {
	r := s.r
	described, err := describeTopicACLs(ctx, r.o.SourceAdmin)
	switch {
	case stopped(ctx):
		return
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
	bindings, skipped := remoteACLs(described, r.sel, r.o.Policy, r.o.Flow.Source, r.o.Flow.ACLSyncMode)
	s.report(skipped)
	if len(bindings) == 0 {
		return
	}
	created, failed := createTopicACLs(ctx, r.o.TargetAdmin, bindings)
	r.m.aclsSyncedAdd(r.flow, created)
	if stopped(ctx) {
		return
	}
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

// report counts the skipped ACLs and logs, once each, those not logged yet.
func (s *aclSync) report(skipped []skippedACL) {
	r := s.r
	r.m.aclsSkippedAdd(r.flow, len(skipped))
	if s.reported == nil {
		s.reported = make(map[skippedACL]bool)
	}
	for _, k := range skipped {
		if s.reported[k] {
			continue
		}
		s.reported[k] = true
		msg := "topic ACL not copied to the remote topic: only ACLs that let principals read are (mm2go.sync.topic.acls.mode = read)"
		if k.Reason == "prefixed" {
			msg = "prefixed topic ACL not copied, as in MM2 (mm2go.sync.topic.acls.mode = mm2)"
		}
		r.log.Info(msg, zap.String("topic", k.Topic), zap.Bool("prefixed", k.Prefixed), zap.String("principal", k.Principal),
			zap.String("host", k.Host), zap.String("operation", k.Operation.String()), zap.String("permission", k.Permission.String()))
	}
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

// skippedACL is a source topic ACL that ACL sync does not copy, and why.
type skippedACL struct {
	aclBinding        // as on the source (Topic is the source topic or prefix)
	Prefixed   bool   // a PREFIXED ACL
	Reason     string // "operation" (not copied by the mode's rule) or "prefixed" (MM2's rule)
}

// copiesOperation reports whether mode copies an ACL of permission perm
// for operation op (ALLOW ALL is copied as ALLOW READ, see remoteACLs).
func copiesOperation(mode config.ACLSyncMode, perm kmsg.ACLPermissionType, op kmsg.ACLOperation) bool {
	if mode == config.ACLSyncMM2 {
		// MM2's shouldReplicateAcl: everything but ALLOW WRITE.
		return perm != kmsg.ACLPermissionTypeAllow || op != kmsg.ACLOperationWrite
	}
	switch op {
	case kmsg.ACLOperationRead, kmsg.ACLOperationDescribe, kmsg.ACLOperationAll:
		// ALLOW READ and DESCRIBE, ALLOW ALL as READ, and the DENY
		// entries that narrow them.
		return true
	}
	return false
}

// remoteACLs turns the source's topic ACLs into the ACLs of their remote
// topics, of topics the flow replicates (sel), as mode says: with
// config.ACLSyncRead only what lets principals read (ALLOW READ, DESCRIBE,
// ALLOW ALL as READ, DENY READ, DESCRIBE and ALL), literal and prefixed (the
// prefix mapped through the policy like a topic name: "orders." becomes
// "<source>.orders." under the default policy); with config.ACLSyncMM2 MM2's
// rule: only LITERAL ACLs, without ALLOW WRITE (only mm2go
// writes to a remote topic), ALLOW ALL as ALLOW READ, everything else as it
// is. The result is sorted and has no duplicates; skipped lists the ACLs of
// replicated topics the rule left out.
func remoteACLs(described []kadm.DescribedACL, sel policy.TopicSelector, pol policy.Policy, source string, mode config.ACLSyncMode) (out []aclBinding, skipped []skippedACL) {
	seen := make(map[aclBinding]bool)
	for _, a := range described {
		if a.Type != kmsg.ACLResourceTypeTopic {
			continue
		}
		prefixed := a.Pattern == kmsg.ACLResourcePatternTypePrefixed
		if !prefixed && a.Pattern != kmsg.ACLResourcePatternTypeLiteral {
			continue
		}
		src := aclBinding{Topic: a.Name, Principal: a.Principal, Host: a.Host, Operation: a.Operation, Permission: a.Permission}
		if prefixed {
			// A prefix covers topics the filter may or may not replicate;
			// it is skipped only when it names remote topics of the
			// target (a cycle back) or internal topics.
			back := pol.FormatRemoteTopic(sel.TargetAlias, "")
			if (back != "" && strings.HasPrefix(a.Name, back)) || strings.HasPrefix(a.Name, "__") {
				continue
			}
		} else if !sel.ShouldReplicate(a.Name) {
			continue
		}
		switch {
		case prefixed && mode == config.ACLSyncMM2:
			skipped = append(skipped, skippedACL{src, true, "prefixed"})
			continue
		case !copiesOperation(mode, a.Permission, a.Operation):
			skipped = append(skipped, skippedACL{src, prefixed, "operation"})
			continue
		}
		b := src
		b.Topic = pol.FormatRemoteTopic(source, a.Name)
		b.Prefixed = prefixed
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
		case x.Prefixed != y.Prefixed:
			return !x.Prefixed
		case x.Principal != y.Principal:
			return x.Principal < y.Principal
		case x.Host != y.Host:
			return x.Host < y.Host
		case x.Permission != y.Permission:
			return x.Permission < y.Permission
		}
		return x.Operation < y.Operation
	})
	return out, skipped
}

// failedACL is a binding the target did not create, and why.
type failedACL struct {
	aclBinding
	err error
}

// createTopicACLs creates topic ACLs, one request per principal, host,
// permission, operation and pattern type (kadm builds the cross product of its
// inputs, so bindings that differ only in the topic share a request). It
// returns how many were created and the ones that failed.
func createTopicACLs(ctx context.Context, adm *kadm.Client, bindings []aclBinding) (int, []failedACL) {
	type groupKey struct {
		principal, host string
		perm            kmsg.ACLPermissionType
		op              kmsg.ACLOperation
		prefixed        bool
	}
	groups := make(map[groupKey][]aclBinding)
	var order []groupKey
	for _, b := range bindings {
		k := groupKey{b.Principal, b.Host, b.Permission, b.Operation, b.Prefixed}
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
		pattern := kadm.ACLPatternLiteral
		if k.prefixed {
			pattern = kadm.ACLPatternPrefixed
		}
		req := kadm.NewACLs().Topics(topics...).ResourcePatternType(pattern).Operations(k.op)
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
				failed = append(failed, failedACL{aclBinding{Topic: res.Name, Prefixed: k.prefixed, Principal: res.Principal, Host: res.Host, Operation: res.Operation, Permission: res.Permission}, res.Err})
				continue
			}
			created++
		}
	}
	return created, failed
}

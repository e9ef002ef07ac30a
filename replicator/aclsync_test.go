package replicator

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zapcore"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/policy"
)

func TestRemoteACLs(t *testing.T) {
	topic := func(name string, pat kmsg.ACLResourcePatternType, principal string, op kmsg.ACLOperation, perm kmsg.ACLPermissionType) kadm.DescribedACL {
		return kadm.DescribedACL{Principal: principal, Host: "*", Type: kmsg.ACLResourceTypeTopic, Name: name, Pattern: pat, Operation: op, Permission: perm}
	}
	const (
		lit   = kmsg.ACLResourcePatternTypeLiteral
		pre   = kmsg.ACLResourcePatternTypePrefixed
		allow = kmsg.ACLPermissionTypeAllow
		deny  = kmsg.ACLPermissionTypeDeny
	)
	group := kadm.DescribedACL{Principal: "User:g", Host: "*", Type: kmsg.ACLResourceTypeGroup, Name: "orders", Pattern: lit, Operation: kmsg.ACLOperationRead, Permission: allow}
	all := []kadm.DescribedACL{
		topic("orders", lit, "User:writer", kmsg.ACLOperationWrite, allow),   // dropped: only mm2go writes remote topics
		topic("orders", lit, "User:admin", kmsg.ACLOperationAll, allow),      // becomes READ
		topic("orders", lit, "User:reader", kmsg.ACLOperationRead, allow),    // kept
		topic("orders", lit, "User:bad", kmsg.ACLOperationAll, deny),         // kept as is
		topic("orders", lit, "User:bad", kmsg.ACLOperationWrite, deny),       // DENY WRITE kept
		topic("orders", lit, "User:dummy", kmsg.ACLOperationDescribe, allow), // kept
		topic("orders", pre, "User:prefix", kmsg.ACLOperationRead, allow),    // dropped: PREFIXED
		topic("ord", lit, "User:reader", kmsg.ACLOperationRead, allow),       // dropped: not replicated
		topic("B.orders", lit, "User:reader", kmsg.ACLOperationRead, allow),  // dropped: a cycle back to B
		topic("__consumer_offsets", lit, "User:x", kmsg.ACLOperationRead, allow),
		topic("orders", lit, "User:both", kmsg.ACLOperationAll, allow),  // ALL -> READ ...
		topic("orders", lit, "User:both", kmsg.ACLOperationRead, allow), // ... and READ: one binding
		group,
	}
	all = append(all,
		topic("orders", lit, "User:ops", kmsg.ACLOperationDelete, allow),       // mm2 only
		topic("orders", lit, "User:ops", kmsg.ACLOperationAlter, allow),        // mm2 only
		topic("orders", lit, "User:ops", kmsg.ACLOperationAlterConfigs, allow), // mm2 only
		topic("orders", lit, "User:ops", kmsg.ACLOperationCreate, allow),       // mm2 only
		topic("orders", lit, "User:bad", kmsg.ACLOperationRead, deny),          // DENY READ narrows: kept
		topic("B.", pre, "User:prefix", kmsg.ACLOperationRead, allow),          // a cycle back to B: dropped
		topic("ord", pre, "User:prefix", kmsg.ACLOperationWrite, allow),        // WRITE: dropped
	)
	filter, err := policy.NewFilter([]string{"orders", "B\\..*", "__.*"}, nil)
	require.NoError(t, err)
	const (
		read  = kmsg.ACLOperationRead
		desc  = kmsg.ACLOperationDescribe
		opAll = kmsg.ACLOperationAll
		write = kmsg.ACLOperationWrite
	)
	b := func(topic string, prefixed bool, principal string, op kmsg.ACLOperation, perm kmsg.ACLPermissionType) aclBinding {
		return aclBinding{Topic: topic, Prefixed: prefixed, Principal: principal, Host: "*", Operation: op, Permission: perm}
	}
	for _, c := range []struct {
		name    string
		pol     policy.Policy
		mode    config.ACLSyncMode
		want    []aclBinding
		skipped []string // principal/operation of the skipped ACLs
	}{
		{
			name: "default policy, read (the default)",
			pol:  policy.New(policy.KindDefault, "", true, "A"),
			mode: config.ACLSyncRead,
			want: []aclBinding{
				b("A.orders", false, "User:admin", read, allow),
				b("A.orders", false, "User:bad", opAll, deny),
				b("A.orders", false, "User:bad", read, deny),
				b("A.orders", false, "User:both", read, allow),
				b("A.orders", false, "User:dummy", desc, allow),
				b("A.orders", false, "User:reader", read, allow),
				b("A.orders", true, "User:prefix", read, allow), // the prefix "orders" of remote topics
			},
			skipped: []string{"User:writer/WRITE", "User:bad/WRITE", "User:ops/DELETE", "User:ops/ALTER", "User:ops/ALTER_CONFIGS", "User:ops/CREATE", "User:prefix/WRITE"},
		},
		{
			name: "default policy, mm2 (MM2's rule)",
			pol:  policy.New(policy.KindDefault, "", true, "A"),
			mode: config.ACLSyncMM2,
			want: []aclBinding{
				b("A.orders", false, "User:admin", read, allow),
				b("A.orders", false, "User:bad", opAll, deny),
				b("A.orders", false, "User:bad", read, deny),
				b("A.orders", false, "User:bad", write, deny),
				b("A.orders", false, "User:both", read, allow),
				b("A.orders", false, "User:dummy", desc, allow),
				b("A.orders", false, "User:ops", kmsg.ACLOperationCreate, allow),
				b("A.orders", false, "User:ops", kmsg.ACLOperationDelete, allow),
				b("A.orders", false, "User:ops", kmsg.ACLOperationAlter, allow),
				b("A.orders", false, "User:ops", kmsg.ACLOperationAlterConfigs, allow),
				b("A.orders", false, "User:reader", read, allow),
			},
			skipped: []string{"User:writer/WRITE", "User:prefix/READ", "User:prefix/WRITE"},
		},
		{
			name: "identity policy, read",
			pol:  policy.New(policy.KindIdentity, "", true, "A"),
			mode: config.ACLSyncRead,
			want: []aclBinding{
				// Identity cannot see cycles: B.orders and B. are replicated as they are.
				b("B.", true, "User:prefix", read, allow),
				b("B.orders", false, "User:reader", read, allow),
				b("orders", false, "User:admin", read, allow),
				b("orders", false, "User:bad", opAll, deny),
				b("orders", false, "User:bad", read, deny),
				b("orders", false, "User:both", read, allow),
				b("orders", false, "User:dummy", desc, allow),
				b("orders", false, "User:reader", read, allow),
				b("orders", true, "User:prefix", read, allow),
			},
			skipped: []string{"User:writer/WRITE", "User:bad/WRITE", "User:ops/DELETE", "User:ops/ALTER", "User:ops/ALTER_CONFIGS", "User:ops/CREATE", "User:prefix/WRITE"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			sel := policy.TopicSelector{Policy: c.pol, Topics: filter, HeartbeatsReplication: true, TargetAlias: "B"}
			got, skipped := remoteACLs(all, sel, c.pol, "A", c.mode)
			require.Equal(t, c.want, got)
			var names []string
			for _, s := range skipped {
				names = append(names, s.Principal+"/"+s.Operation.String())
			}
			require.ElementsMatch(t, c.skipped, names)
		})
	}
}

// topicACLs lists a cluster's topic ACLs as bindings.
func topicACLs(t *testing.T, adm *kadm.Client) []aclBinding {
	t.Helper()
	described, err := describeTopicACLs(context.Background(), adm)
	require.NoError(t, err)
	var out []aclBinding
	for _, a := range described {
		out = append(out, aclBinding{Topic: a.Name, Prefixed: a.Pattern == kmsg.ACLResourcePatternTypePrefixed,
			Principal: a.Principal, Host: a.Host, Operation: a.Operation, Permission: a.Permission})
	}
	return out
}

func createACL(t *testing.T, adm *kadm.Client, topic string, pattern kadm.ACLPattern, principal string, op kadm.ACLOperation, allow bool) {
	t.Helper()
	b := kadm.NewACLs().Topics(topic).ResourcePatternType(pattern).Operations(op)
	if allow {
		b.Allow(principal).AllowHosts("*")
	} else {
		b.Deny(principal).DenyHosts("*")
	}
	res, err := adm.CreateACLs(context.Background(), b)
	require.NoError(t, err)
	for _, r := range res {
		require.NoError(t, r.Err)
	}
}

// TestACLSync copies the topic ACLs that let principals read (by default;
// never DELETE, ALTER, WRITE...), literal and prefixed, and never removes
// one.
func TestACLSync(t *testing.T) {
	b := newBed(t)
	b.createTopic(b.srcAdm, "orders", 1, nil)
	b.createTopic(b.srcAdm, "skipped", 1, nil)
	createACL(t, b.srcAdm, "orders", kadm.ACLPatternLiteral, "User:dummy", kadm.OpDescribe, true)
	createACL(t, b.srcAdm, "orders", kadm.ACLPatternLiteral, "User:admin", kadm.OpAll, true)
	createACL(t, b.srcAdm, "orders", kadm.ACLPatternLiteral, "User:writer", kadm.OpWrite, true)
	createACL(t, b.srcAdm, "orders", kadm.ACLPatternLiteral, "User:bad", kadm.OpAll, false)
	createACL(t, b.srcAdm, "ord", kadm.ACLPatternPrefixed, "User:prefix", kadm.OpRead, true)
	createACL(t, b.srcAdm, "skipped", kadm.ACLPatternLiteral, "User:dummy", kadm.OpRead, true)
	// Whoever may delete or reconfigure the source topic gets no such right
	// on its copy.
	createACL(t, b.srcAdm, "orders", kadm.ACLPatternLiteral, "User:ops", kadm.OpDelete, true)
	createACL(t, b.srcAdm, "orders", kadm.ACLPatternLiteral, "User:ops", kadm.OpAlter, true)
	// Someone else's ACL on the target stays.
	createACL(t, b.dstAdm, "A.orders", kadm.ACLPatternLiteral, "User:local", kadm.OpRead, true)

	reg := prometheus.NewRegistry()
	stop := b.run(b.flow("A->B.topics = orders", "sync.topic.acls.interval.seconds = 1"), reg)
	want := []aclBinding{
		{Topic: "A.orders", Principal: "User:admin", Host: "*", Operation: kmsg.ACLOperationRead, Permission: kmsg.ACLPermissionTypeAllow},
		{Topic: "A.orders", Principal: "User:bad", Host: "*", Operation: kmsg.ACLOperationAll, Permission: kmsg.ACLPermissionTypeDeny},
		{Topic: "A.orders", Principal: "User:dummy", Host: "*", Operation: kmsg.ACLOperationDescribe, Permission: kmsg.ACLPermissionTypeAllow},
		{Topic: "A.orders", Principal: "User:local", Host: "*", Operation: kmsg.ACLOperationRead, Permission: kmsg.ACLPermissionTypeAllow},
		{Topic: "A.ord", Prefixed: true, Principal: "User:prefix", Host: "*", Operation: kmsg.ACLOperationRead, Permission: kmsg.ACLPermissionTypeAllow},
	}
	waitFor(t, "ACLs on the target", func() bool { return len(topicACLs(t, b.dstAdm)) == len(want) })
	require.ElementsMatch(t, want, topicACLs(t, b.dstAdm))

	// Deleted on the source, kept on the target; added on the source,
	// added on the target.
	_, err := b.srcAdm.DeleteACLs(context.Background(), kadm.NewACLs().Topics("orders").ResourcePatternType(kadm.ACLPatternLiteral).
		Allow("User:dummy").AllowHosts("*").Operations(kadm.OpDescribe))
	require.NoError(t, err)
	createACL(t, b.srcAdm, "orders", kadm.ACLPatternLiteral, "User:late", kadm.OpRead, true)
	want = append(want, aclBinding{Topic: "A.orders", Principal: "User:late", Host: "*", Operation: kmsg.ACLOperationRead, Permission: kmsg.ACLPermissionTypeAllow})
	waitFor(t, "the new ACL on the target", func() bool { return len(topicACLs(t, b.dstAdm)) == len(want) })
	require.ElementsMatch(t, want, topicACLs(t, b.dstAdm))
	require.NoError(t, stop())
	require.GreaterOrEqual(t, sumOf(t, reg, "mm2go_replicator_acls_synced_total", map[string]string{"flow": "A->B"}), 4.0)
	require.GreaterOrEqual(t, sumOf(t, reg, "mm2go_replicator_acls_skipped_total", map[string]string{"flow": "A->B"}), 3.0, "WRITE, DELETE and ALTER")
	require.Zero(t, sumOf(t, reg, "mm2go_replicator_errors_total", map[string]string{"reason": reasonACLSync}))
}

// TestACLSyncWithoutAuthorizer: a source without an authorizer answers
// SECURITY_DISABLED (kfake does not, so it is injected): MM2's advice is
// logged once at info level, later rounds at debug, and the target is never
// asked to create ACLs. An authorization error is logged as MM2 does.
func TestACLSyncWithoutAuthorizer(t *testing.T) {
	for _, c := range []struct {
		name  string
		err   *kerr.Error
		check func(t *testing.T, b *bed, logs func(zapcore.Level, string) int, reg *prometheus.Registry)
	}{
		{
			name: "security disabled",
			err:  kerr.SecurityDisabled,
			check: func(t *testing.T, _ *bed, logs func(zapcore.Level, string) int, reg *prometheus.Registry) {
				const info = "no ACL authorizer is configured on the source cluster, so no topic ACL syncing will take place; consider setting sync.topic.acls.enabled=false"
				require.Equal(t, 1, logs(zapcore.InfoLevel, info))
				require.GreaterOrEqual(t, logs(zapcore.DebugLevel, "source ACL authorizer still not found; skipping topic ACL sync"), 1)
				require.Zero(t, sumOf(t, reg, "mm2go_replicator_errors_total", map[string]string{"reason": reasonACLSync}))
			},
		},
		{
			name: "not authorized",
			err:  kerr.ClusterAuthorizationFailed,
			check: func(t *testing.T, _ *bed, logs func(zapcore.Level, string) int, reg *prometheus.Registry) {
				require.GreaterOrEqual(t, logs(zapcore.ErrorLevel, "ClusterAuthorizationException occurred while trying to describe topic ACLs on A cluster"), 2)
				require.GreaterOrEqual(t, sumOf(t, reg, "mm2go_replicator_errors_total", map[string]string{"reason": reasonACLSync}), 2.0)
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBed(t)
			b.createTopic(b.srcAdm, "orders", 1, nil)
			createACL(t, b.srcAdm, "orders", kadm.ACLPatternLiteral, "User:dummy", kadm.OpRead, true)
			var rounds atomic.Int32
			b.src.ControlKey(int16(kmsg.DescribeACLs), func(kr kmsg.Request) (kmsg.Response, error, bool) {
				b.src.KeepControl()
				rounds.Add(1)
				resp := kr.(*kmsg.DescribeACLsRequest).ResponseKind().(*kmsg.DescribeACLsResponse)
				resp.ErrorCode = c.err.Code
				return resp, nil, true
			})
			creates := b.dst.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.CreateACLs}, Observe: true, Count: -1})
			log, observed := observedLogger(t)
			reg := prometheus.NewRegistry()
			stop := b.runLogged(b.flow("sync.topic.acls.interval.seconds = 1"), reg, log)
			b.produce("orders", 1, 0, 3)
			b.read("A.orders", 3)
			waitFor(t, "three ACL sync rounds", func() bool { return rounds.Load() >= 3 })
			require.NoError(t, stop())
			require.Zero(t, creates.Hits(), "the target was asked to create ACLs")
			count := func(level zapcore.Level, msgOrDetail string) int {
				n := 0
				for _, e := range observed.All() {
					if e.Level == level && (e.Message == msgOrDetail || e.ContextMap()["detail"] == msgOrDetail) {
						n++
					}
				}
				return n
			}
			c.check(t, b, count, reg)
		})
	}
}

// TestACLSyncRoundStoppedIsNoFailure: a round that the flow's stop cuts
// short (while describing on the source, or while creating on the target)
// is neither logged as a failure nor counted as an error.
func TestACLSyncRoundStoppedIsNoFailure(t *testing.T) {
	for _, at := range []string{"describe", "create"} {
		t.Run(at, func(t *testing.T) {
			b := newBed(t)
			b.createTopic(b.srcAdm, "orders", 1, nil)
			createACL(t, b.srcAdm, "orders", kadm.ACLPatternLiteral, "User:dummy", kadm.OpRead, true)
			ctx, cancel := context.WithCancel(context.Background())
			if at == "describe" {
				cancel()
			} else {
				b.dst.ControlKey(int16(kmsg.CreateACLs), func(kmsg.Request) (kmsg.Response, error, bool) {
					cancel()
					return nil, errors.New("the flow stopped"), true
				})
			}
			defer cancel()
			log, observed := observedLogger(t)
			reg := prometheus.NewRegistry()
			r, closeClients := b.replicator(b.flow("A->B.topics = orders"), reg, log)
			defer closeClients()
			(&aclSync{r: r}).round(ctx)
			require.Error(t, ctx.Err())
			require.Zero(t, observed.FilterLevelExact(zapcore.WarnLevel).Len(), "warnings: %v", observed.All())
			require.Zero(t, sumOf(t, reg, "mm2go_replicator_errors_total", map[string]string{"reason": reasonACLSync}))
		})
	}
}

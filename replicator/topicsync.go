package replicator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/internal/loop"
	"github.com/mm2go/mm2go/policy"
)

// runEvery runs round at once and then every interval until ctx ends, each
// round bounded by timeout. MM2 schedules its config and ACL syncs the same
// way: at a fixed rate, the first run right after the connector started.
func runEvery(ctx context.Context, interval, timeout time.Duration, round func(context.Context)) error {
	bounded := func(ctx context.Context) {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		round(rctx)
	}
	bounded(ctx)
	loop.Every(ctx, interval, bounded)
	return ctx.Err()
}

// stopped reports whether a round's context ended because the flow stops
// (not because the round timed out): what failed then is no failure.
func stopped(ctx context.Context) bool {
	return errors.Is(ctx.Err(), context.Canceled)
}

// configSyncLoop keeps the configs of the flow's remote topics in step with
// their source topics, once at start and then every
// sync.topic.configs.interval.seconds (MM2 default 600 s). Failures are
// logged and counted and never stop the flow.
func (r *Replicator) configSyncLoop(ctx context.Context) error {
	filter, err := policy.NewFilter([]string{".*"}, r.o.Flow.ConfigPropertiesExclude)
	if err != nil {
		r.m.error(r.flow, reasonConfigSync)
		r.log.Error("compile config.properties.exclude; topic configs are not synced", zap.Error(err))
		return nil
	}
	cs := &configSync{filter: filter, sourceDefaults: r.o.Flow.UseDefaultsFrom == config.DefaultsFromSource,
		last: make(map[string]map[string]*string), reported: make(map[[2]string]bool)}
	if len(r.o.Flow.TopicConfigsKeep) > 0 {
		if cs.keep, err = policy.NewFilter(r.o.Flow.TopicConfigsKeep, nil); err != nil {
			r.m.error(r.flow, reasonConfigSync)
			r.log.Error("compile mm2go.sync.topic.configs.keep; topic configs are not synced", zap.Error(err))
			return nil
		}
	}
	return runEvery(ctx, r.o.Flow.SyncTopicConfigsInterval, r.o.Flow.AdminTimeout, func(ctx context.Context) {
		r.syncTopicConfigs(ctx, cs)
	})
}

// configSync is the state of a flow's topic-config sync loop.
type configSync struct {
	filter         *policy.Filter // config.properties.exclude
	keep           *policy.Filter // mm2go.sync.topic.configs.keep; nil: none
	sourceDefaults bool           // use.defaults.from = source
	// last holds what the sync set per remote topic and key (nil value:
	// deleted), so that a changed value on the target tells a target-side
	// override from the sync's own earlier value.
	last map[string]map[string]*string
	// reported holds the (remote topic, key) overrides already logged.
	reported map[[2]string]bool
}

// dropKept removes the operations on keys the sync keeps.
func (cs *configSync) dropKept(ops []kadm.AlterConfig) []kadm.AlterConfig {
	if cs.keep == nil {
		return ops
	}
	out := ops[:0:0]
	for _, op := range ops {
		if !cs.keep.Match(op.Name) {
			out = append(out, op)
		}
	}
	return out
}

// overrides returns the keys of ops that change a value set on the remote
// topic by someone else than the sync (a dynamic topic config of the target
// that the operation deletes or replaces, other than what the sync itself
// set last).
func (cs *configSync) overrides(remote string, ops []kadm.AlterConfig, target map[string]kadm.Config) []string {
	var out []string
	for _, op := range ops {
		tc, ok := target[op.Name]
		if !ok || tc.Source != kmsg.ConfigSourceDynamicTopicConfig || tc.Value == nil {
			continue
		}
		if op.Op == kadm.SetConfig && op.Value != nil && *op.Value == *tc.Value {
			continue
		}
		if v, ok := cs.last[remote][op.Name]; ok && v != nil && *v == *tc.Value {
			continue
		}
		out = append(out, op.Name)
	}
	return out
}

// applied records what the sync set on a remote topic.
func (cs *configSync) applied(remote string, ops []kadm.AlterConfig) {
	m := cs.last[remote]
	if m == nil {
		m = make(map[string]*string)
		cs.last[remote] = m
	}
	for _, op := range ops {
		if op.Op == kadm.SetConfig {
			m[op.Name] = op.Value
		} else {
			m[op.Name] = nil
		}
	}
}

// copiedTopics returns the source topics being copied and their remote
// topics: MM2's "topics being replicated", the known source topics whose
// remote topic exists.
func (r *Replicator) copiedTopics() map[string]string {
	out := make(map[string]string)
	r.mu.Lock()
	defer r.mu.Unlock()
	for t, ps := range r.parts {
		for _, p := range ps {
			out[t] = p.remote
			break
		}
	}
	return out
}

// copiedTopicNames returns the names of the source topics being copied,
// sorted.
func (r *Replicator) copiedTopicNames() []string {
	return slices.Sorted(maps.Keys(r.copiedTopics()))
}

// syncTopicConfigs runs one round of MM2's periodic topic-config sync: the
// configs of every copied topic are described on the source and applied to
// its remote topic with IncrementalAlterConfigs (see alterOps). Topics whose
// changes are identical share one request. Errors are logged and counted per
// topic; the round goes on with the others.
//
// Before the changes are sent, the remote topics' configs are described
// once: a target-side override that a change removes (a value someone set on
// the remote topic, not the sync) is logged once per topic and key and
// counted in mm2go_replicator_topic_config_overrides_removed_total; keys in
// mm2go.sync.topic.configs.keep are never changed.
func (r *Replicator) syncTopicConfigs(ctx context.Context, cs *configSync) {
	remoteOf := r.copiedTopics()
	if len(remoteOf) == 0 {
		return
	}
	topics := make([]string, 0, len(remoteOf))
	for t := range remoteOf {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	rcs, err := r.o.SourceAdmin.DescribeTopicConfigs(ctx, topics...)
	if stopped(ctx) {
		return
	}
	if err != nil {
		// kadm may return the configs of the topics whose brokers answered.
		r.m.error(r.flow, reasonConfigSync)
		if exc := javaAuthException(err); exc != "" {
			r.logAuthError(exc, fmt.Sprintf("describe configs for topics %s on %s cluster", javaList(topics), r.o.Flow.Source), err)
		} else {
			r.log.Warn("describe source topic configs; retried at the next interval", zap.Error(err))
		}
		if len(rcs) == 0 {
			return
		}
	}

	// Group the remote topics by the changes they need, so that topics
	// with the same configs (most often: all defaults) share a request.
	groups := make(map[string][]string)
	opsOf := make(map[string][]kadm.AlterConfig)
	byRemote := make(map[string][]kadm.AlterConfig)
	var denied []string
	var deniedErr error
	for _, rc := range rcs {
		switch {
		case rc.Err == nil:
		case errors.Is(rc.Err, kerr.UnknownTopicOrPartition):
			continue // deleted since; the refresh notices
		case javaAuthException(rc.Err) != "":
			denied, deniedErr = append(denied, rc.Name), rc.Err
			continue
		default:
			r.m.error(r.flow, reasonConfigSync)
			r.log.Warn("describe source topic configs; retried at the next interval", zap.String("topic", rc.Name), zap.Error(rc.Err))
			continue
		}
		remote, ok := remoteOf[rc.Name]
		if !ok {
			continue
		}
		ops := cs.dropKept(alterOps(rc.Configs, cs.filter, cs.sourceDefaults))
		if len(ops) == 0 {
			continue
		}
		byRemote[remote] = ops
	}
	r.reportOverrides(ctx, cs, byRemote)
	for remote, ops := range byRemote {
		k := opsKey(ops)
		groups[k] = append(groups[k], remote)
		opsOf[k] = ops
	}
	if len(denied) > 0 {
		sort.Strings(denied)
		r.m.error(r.flow, reasonConfigSync)
		r.logAuthError(javaAuthException(deniedErr), fmt.Sprintf("describe configs for topics %s on %s cluster", javaList(denied), r.o.Flow.Source), deniedErr)
	}

	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var synced int
	for _, k := range keys {
		for _, remote := range r.alterRemoteConfigs(ctx, opsOf[k], groups[k]) {
			cs.applied(remote, opsOf[k])
			synced++
		}
	}
	r.m.configsSyncedAdd(r.flow, synced)
	r.log.Debug("topic configs synced", zap.Int("topics", synced))
}

// reportOverrides describes the remote topics about to be altered and logs
// (once per topic and key) and counts the target-side overrides the changes
// remove. A failed describe only skips the report.
func (r *Replicator) reportOverrides(ctx context.Context, cs *configSync, byRemote map[string][]kadm.AlterConfig) {
	if len(byRemote) == 0 {
		return
	}
	remotes := make([]string, 0, len(byRemote))
	for t := range byRemote {
		remotes = append(remotes, t)
	}
	sort.Strings(remotes)
	rcs, err := r.o.TargetAdmin.DescribeTopicConfigs(ctx, remotes...)
	if err != nil {
		r.log.Debug("describe remote topic configs; target-side overrides not reported this round", zap.Error(err))
	}
	for _, rc := range rcs {
		if rc.Err != nil {
			continue
		}
		target := make(map[string]kadm.Config, len(rc.Configs))
		for _, c := range rc.Configs {
			target[c.Key] = c
		}
		keys := cs.overrides(rc.Name, byRemote[rc.Name], target)
		r.m.configOverridesRemovedAdd(r.flow, len(keys))
		for _, k := range keys {
			if cs.reported[[2]string{rc.Name, k}] {
				continue
			}
			cs.reported[[2]string{rc.Name, k}] = true
			r.log.Warn("topic-config sync replaces a value set on the remote topic with the source topic's (MM2's rule); list the key in mm2go.sync.topic.configs.keep to keep it",
				zap.String("target_topic", rc.Name), zap.String("key", k), zap.String("target_value", strOr(target[k].Value)))
		}
	}
}

func strOr(v *string) string {
	if v == nil {
		return ""
	}
	return *v
}

// alterRemoteConfigs applies ops to the remote topics and returns those
// that were altered. A target without IncrementalAlterConfigs is logged at
// error level (MM2 fails its connector then; mm2go keeps copying records).
func (r *Replicator) alterRemoteConfigs(ctx context.Context, ops []kadm.AlterConfig, remotes []string) []string {
	sort.Strings(remotes)
	resps, err := r.o.TargetAdmin.AlterTopicConfigs(ctx, ops, remotes...)
	if stopped(ctx) {
		return nil
	}
	if err != nil {
		r.m.error(r.flow, reasonConfigSync)
		if errors.Is(err, kerr.UnsupportedVersion) {
			r.log.Error("target does not support IncrementalAlterConfigs; remote topic configs are not synced",
				zap.String("target_cluster", r.o.Flow.Target), zap.Strings("target_topics", remotes), zap.Error(err))
		} else {
			r.log.Warn("alter remote topic configs; retried at the next interval", zap.Strings("target_topics", remotes), zap.Error(err))
		}
		// kadm returns what the brokers that answered said.
	}
	var altered []string
	for _, resp := range resps {
		switch {
		case resp.Err == nil:
			altered = append(altered, resp.Name)
		case errors.Is(resp.Err, kerr.UnsupportedVersion):
			r.m.error(r.flow, reasonConfigSync)
			r.log.Error("target does not support IncrementalAlterConfigs; remote topic configs are not synced",
				zap.String("target_cluster", r.o.Flow.Target), zap.String("target_topic", resp.Name), zap.Error(resp.Err))
		default:
			r.m.error(r.flow, reasonConfigSync)
			r.log.Warn("could not alter configuration of remote topic; retried at the next interval",
				zap.String("target_topic", resp.Name), zap.String("message", resp.ErrMessage), zap.Error(resp.Err))
		}
	}
	return altered
}

// alterOps returns the incremental changes that make a remote topic's
// configs follow its source topic's, as MM2's periodic sync computes them
// (MirrorSourceConnector.targetConfig and incrementalAlterConfigs): a
// source entry takes part if it is not sensitive, not a static broker
// setting and not excluded by config.properties.exclude; a default-valued
// one (source DEFAULT_CONFIG) is deleted on the remote topic, which reverts
// it to the target's default, unless use.defaults.from=source
// (sourceDefaults), which sets it to the source's default; any other value
// is set. Excluded keys are never touched, so a target-side override of
// one survives. Entries without a value are not set. Kafka never reports a
// topic config as read-only, so MM2's read-only test has nothing to drop.
// The result is sorted by name.
func alterOps(cfgs []kadm.Config, filter *policy.Filter, sourceDefaults bool) []kadm.AlterConfig {
	var ops []kadm.AlterConfig
	for _, c := range cfgs {
		if c.Sensitive || c.Source == kmsg.ConfigSourceStaticBrokerConfig || !filter.Match(c.Key) {
			continue
		}
		if c.Source == kmsg.ConfigSourceDefaultConfig && !sourceDefaults {
			ops = append(ops, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: c.Key})
			continue
		}
		if c.Value == nil {
			continue
		}
		ops = append(ops, kadm.AlterConfig{Op: kadm.SetConfig, Name: c.Key, Value: c.Value})
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].Name < ops[j].Name })
	return ops
}

// opsKey is a canonical form of sorted ops, for grouping.
func opsKey(ops []kadm.AlterConfig) string {
	var b strings.Builder
	for _, o := range ops {
		fmt.Fprintf(&b, "%d\x00%s\x00", o.Op, o.Name)
		if o.Value != nil {
			b.WriteString("=")
			b.WriteString(*o.Value)
		}
		b.WriteString("\x00")
	}
	return b.String()
}

// javaAuthException returns the simple name of the Java exception MM2 logs
// for an authorization error, or "" when err is not one.
func javaAuthException(err error) string {
	switch {
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return "TopicAuthorizationException"
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		return "ClusterAuthorizationException"
	case errors.Is(err, kerr.GroupAuthorizationFailed):
		return "GroupAuthorizationException"
	}
	return ""
}

// logAuthError logs an authorization error at error level (a human must
// grant the permission) with MM2's wording in the detail field:
// "<Exception> occurred while trying to <what>".
func (r *Replicator) logAuthError(exception, what string, err error) {
	r.log.Error("not authorized; grant the permission or disable the sync",
		zap.String("exception", exception),
		zap.String("detail", exception+" occurred while trying to "+what),
		zap.Error(err))
}

// javaList formats names as Java's Collection.toString does: "[a, b]".
func javaList(names []string) string {
	return "[" + strings.Join(names, ", ") + "]"
}

package replicator

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mm2go/mm2go/policy"
)

// observedLogger logs to the test log and records every entry.
func observedLogger(t *testing.T) (*zap.Logger, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.DebugLevel)
	return zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core)), logs
}

// cfg is a described topic config.
type cfg struct {
	Value  string
	Source kmsg.ConfigSource
}

// topicConfigs describes a topic's configs, by name.
func topicConfigs(t *testing.T, adm *kadm.Client, topic string) map[string]cfg {
	t.Helper()
	rcs, err := adm.DescribeTopicConfigs(context.Background(), topic)
	require.NoError(t, err)
	rc, err := rcs.On(topic, nil)
	require.NoError(t, err)
	require.NoError(t, rc.Err)
	out := make(map[string]cfg)
	for _, c := range rc.Configs {
		out[c.Key] = cfg{Value: c.MaybeValue(), Source: c.Source}
	}
	return out
}

func alter(t *testing.T, adm *kadm.Client, topic string, ops ...kadm.AlterConfig) {
	t.Helper()
	resps, err := adm.AlterTopicConfigs(context.Background(), ops, topic)
	require.NoError(t, err)
	for _, r := range resps {
		require.NoError(t, r.Err)
	}
}

func TestAlterOps(t *testing.T) {
	v := kadm.StringPtr
	cfgs := []kadm.Config{
		{Key: "retention.bytes", Value: v("1000"), Source: kmsg.ConfigSourceDynamicTopicConfig},
		{Key: "cleanup.policy", Value: v("delete"), Source: kmsg.ConfigSourceDefaultConfig},
		{Key: "delete.retention.ms", Value: v("1000"), Source: kmsg.ConfigSourceDynamicTopicConfig},
		{Key: "min.insync.replicas", Value: v("2"), Source: kmsg.ConfigSourceDynamicTopicConfig},
		{Key: "message.timestamp.type", Value: v("CreateTime"), Source: kmsg.ConfigSourceDefaultConfig},
		{Key: "segment.ms", Value: v("3600000"), Source: kmsg.ConfigSourceStaticBrokerConfig},
		{Key: "retention.ms", Value: v("7200000"), Source: kmsg.ConfigSourceDynamicBrokerConfig},
		{Key: "segment.bytes", Value: v("1048576"), Source: kmsg.ConfigSourceDynamicDefaultBrokerConfig},
		{Key: "secret.thing", Source: kmsg.ConfigSourceDynamicTopicConfig, Sensitive: true},
		{Key: "no.value", Source: kmsg.ConfigSourceDefaultConfig},
	}
	mm2Exclude := []string{
		`follower\.replication\.throttled\.replicas`, `leader\.replication\.throttled\.replicas`,
		`message\.timestamp\.difference\.max\.ms`, `message\.timestamp\.type`,
		`unclean\.leader\.election\.enable`, `min\.insync\.replicas`,
	}
	set := func(k, val string) kadm.AlterConfig {
		return kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: v(val)}
	}
	del := func(k string) kadm.AlterConfig { return kadm.AlterConfig{Op: kadm.DeleteConfig, Name: k} }
	for _, c := range []struct {
		name           string
		exclude        []string
		sourceDefaults bool
		want           []kadm.AlterConfig
	}{
		{
			name:    "target defaults, MM2's exclusions",
			exclude: mm2Exclude,
			want: []kadm.AlterConfig{
				del("cleanup.policy"), set("delete.retention.ms", "1000"), del("no.value"),
				set("retention.bytes", "1000"), set("retention.ms", "7200000"), set("segment.bytes", "1048576"),
			},
		},
		{
			name:    "target defaults, delete.retention excluded too",
			exclude: append([]string{`delete\.retention\..*`}, mm2Exclude...),
			want: []kadm.AlterConfig{
				del("cleanup.policy"), del("no.value"),
				set("retention.bytes", "1000"), set("retention.ms", "7200000"), set("segment.bytes", "1048576"),
			},
		},
		{
			name:           "source defaults",
			exclude:        mm2Exclude,
			sourceDefaults: true,
			want: []kadm.AlterConfig{
				set("cleanup.policy", "delete"), set("delete.retention.ms", "1000"),
				set("retention.bytes", "1000"), set("retention.ms", "7200000"), set("segment.bytes", "1048576"),
			},
		},
		{
			name: "nothing excluded",
			want: []kadm.AlterConfig{
				del("cleanup.policy"), set("delete.retention.ms", "1000"), del("message.timestamp.type"),
				set("min.insync.replicas", "2"), del("no.value"),
				set("retention.bytes", "1000"), set("retention.ms", "7200000"), set("segment.bytes", "1048576"),
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := policy.NewFilter([]string{".*"}, c.exclude)
			require.NoError(t, err)
			require.Equal(t, c.want, alterOps(cfgs, f, c.sourceDefaults))
		})
	}
}

// captureAlters records the IncrementalAlterConfigs requests c receives,
// until stop is called, and lets c answer them.
func captureAlters(c *kfake.Cluster) (get func() []*kmsg.IncrementalAlterConfigsRequest, stop func()) {
	var mu sync.Mutex
	var reqs []*kmsg.IncrementalAlterConfigsRequest
	var stopped bool
	c.ControlKey(int16(kmsg.IncrementalAlterConfigs), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			c.DropControl()
			return nil, nil, false
		}
		c.KeepControl()
		reqs = append(reqs, kr.(*kmsg.IncrementalAlterConfigsRequest))
		return nil, nil, false
	})
	get = func() []*kmsg.IncrementalAlterConfigsRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]*kmsg.IncrementalAlterConfigsRequest(nil), reqs...)
	}
	stop = func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
	}
	return get, stop
}

// TestTopicConfigSync ports MM2's testSyncTopicConfigs,
// testReplicateTargetDefault and testReplicateSourceDefault to kfake.
func TestTopicConfigSync(t *testing.T) {
	t.Run("target defaults and excluded keys", func(t *testing.T) {
		b := newBed(t)
		b.createTopic(b.srcAdm, "conf", 2, map[string]*string{
			"retention.bytes": kadm.StringPtr("1000"), "delete.retention.ms": kadm.StringPtr("1000"),
			"cleanup.policy": kadm.StringPtr("compact"),
		})
		b.createTopic(b.srcAdm, "plain1", 1, nil)
		b.createTopic(b.srcAdm, "plain2", 1, nil)
		b.produce("conf", 2, 0, 4)
		reqs, stopCapture := captureAlters(b.dst)
		reg := prometheus.NewRegistry()
		stop := b.run(b.flow(`config.properties.exclude = delete\.retention\..*`, "sync.topic.configs.interval.seconds = 1"), reg)
		b.read("A.conf", 4)

		// Creation mode: non-default, not excluded.
		got := topicConfigs(t, b.dstAdm, "A.conf")
		require.Equal(t, "1000", got["retention.bytes"].Value)
		require.Equal(t, "compact", got["cleanup.policy"].Value)
		require.Equal(t, kmsg.ConfigSourceDefaultConfig, got["delete.retention.ms"].Source)

		// Overrides on the target: the excluded key survives, the others
		// follow the source (its value, or the target default).
		waitFor(t, "two sync rounds", func() bool { return len(reqs()) >= 4 })
		stopCapture()
		alter(t, b.dstAdm, "A.conf",
			kadm.AlterConfig{Op: kadm.SetConfig, Name: "delete.retention.ms", Value: kadm.StringPtr("2000")},
			kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.bytes", Value: kadm.StringPtr("2000")},
			kadm.AlterConfig{Op: kadm.SetConfig, Name: "max.message.bytes", Value: kadm.StringPtr("4321")})
		waitFor(t, "remote configs synced", func() bool {
			got := topicConfigs(t, b.dstAdm, "A.conf")
			return got["retention.bytes"].Value == "1000" && got["max.message.bytes"].Source == kmsg.ConfigSourceDefaultConfig
		})
		require.Equal(t, "2000", topicConfigs(t, b.dstAdm, "A.conf")["delete.retention.ms"].Value)

		// A source override removed: the remote topic reverts to the
		// target's default.
		alter(t, b.srcAdm, "conf", kadm.AlterConfig{Op: kadm.DeleteConfig, Name: "retention.bytes"})
		waitFor(t, "remote retention.bytes back to the default", func() bool {
			return topicConfigs(t, b.dstAdm, "A.conf")["retention.bytes"].Source == kmsg.ConfigSourceDefaultConfig
		})
		require.NoError(t, stop())
		require.GreaterOrEqual(t, sumOf(t, reg, "mm2go_replicator_topic_configs_synced_total", map[string]string{"flow": "A->B"}), 3.0)
		require.Zero(t, sumOf(t, reg, "mm2go_replicator_errors_total", map[string]string{"reason": reasonConfigSync}))

		// What a round sends: the two all-default topics share a request,
		// excluded keys are never in one, defaults are deleted.
		srcDefaults := map[string]bool{}
		for k, c := range topicConfigs(t, b.srcAdm, "plain1") {
			// The file's config.properties.exclude replaces MM2's default
			// list, as in MM2.
			if c.Source == kmsg.ConfigSourceDefaultConfig && !strings.HasPrefix(k, "delete.retention.") {
				srcDefaults[k] = true
			}
		}
		var sawShared bool
		for _, req := range reqs() {
			var names []string
			for _, res := range req.Resources {
				names = append(names, res.ResourceName)
				ops := map[string]kmsg.IncrementalAlterConfigOp{}
				for _, c := range res.Configs {
					require.NotContains(t, c.Name, "delete.retention", "excluded key in a request for %s", res.ResourceName)
					ops[c.Name] = c.Op
				}
				if res.ResourceName == "A.plain1" || res.ResourceName == "A.plain2" {
					require.Len(t, ops, len(srcDefaults), "ops for %s", res.ResourceName)
					for k := range srcDefaults {
						require.Equal(t, kmsg.IncrementalAlterConfigOpDelete, ops[k], "op on %s of %s", k, res.ResourceName)
					}
				}
			}
			if strings.Join(names, ",") == "A.plain1,A.plain2" {
				sawShared = true
			}
		}
		require.True(t, sawShared, "one request for the topics with identical configs")
	})

	t.Run("target-side overrides: reported once, kept when asked", func(t *testing.T) {
		b := newBed(t)
		b.createTopic(b.srcAdm, "conf", 1, nil)
		b.produce("conf", 1, 0, 1)
		log, observed := observedLogger(t)
		reg := prometheus.NewRegistry()
		stop := b.runLogged(b.flow("sync.topic.configs.interval.seconds = 1", `mm2go.sync.topic.configs.keep = retention\.ms`), reg, log)
		b.read("A.conf", 1)
		alter(t, b.dstAdm, "A.conf",
			kadm.AlterConfig{Op: kadm.SetConfig, Name: "max.message.bytes", Value: kadm.StringPtr("4321")},
			kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("3600000")})
		waitFor(t, "the override of max.message.bytes removed", func() bool {
			return topicConfigs(t, b.dstAdm, "A.conf")["max.message.bytes"].Source == kmsg.ConfigSourceDefaultConfig
		})
		// Rounds after the removal report nothing new.
		rounds := func() int { return len(observed.FilterMessage("topic configs synced").All()) }
		n := rounds()
		waitFor(t, "two more rounds", func() bool { return rounds() >= n+2 })
		require.NoError(t, stop())
		require.Equal(t, "3600000", topicConfigs(t, b.dstAdm, "A.conf")["retention.ms"].Value, "a kept key is not touched")
		require.Equal(t, 1.0, sumOf(t, reg, "mm2go_replicator_topic_config_overrides_removed_total", map[string]string{"flow": "A->B"}))
		warned := observed.FilterMessageSnippet("replaces a value set on the remote topic").All()
		require.Len(t, warned, 1)
		require.Equal(t, "max.message.bytes", warned[0].ContextMap()["key"])
		require.Equal(t, "4321", warned[0].ContextMap()["target_value"])
	})

	t.Run("source defaults", func(t *testing.T) {
		b := newBed(t)
		b.createTopic(b.srcAdm, "conf", 1, nil)
		b.produce("conf", 1, 0, 1)
		stop := b.run(b.flow(`config.properties.exclude = delete\.retention\..*`, "sync.topic.configs.interval.seconds = 1",
			"A->B.use.defaults.from = source"), nil)
		b.read("A.conf", 1)
		srcDefault := topicConfigs(t, b.srcAdm, "conf")["retention.bytes"].Value
		require.NotEmpty(t, srcDefault)
		alter(t, b.dstAdm, "A.conf",
			kadm.AlterConfig{Op: kadm.SetConfig, Name: "delete.retention.ms", Value: kadm.StringPtr("2000")},
			kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.bytes", Value: kadm.StringPtr("2000")})
		waitFor(t, "remote retention.bytes set to the source default", func() bool {
			c := topicConfigs(t, b.dstAdm, "A.conf")["retention.bytes"]
			return c.Value == srcDefault && c.Source == kmsg.ConfigSourceDynamicTopicConfig
		})
		require.Equal(t, "2000", topicConfigs(t, b.dstAdm, "A.conf")["delete.retention.ms"].Value)
		require.NoError(t, stop())
	})
}

// TestTopicConfigSyncErrors: failures of the sync are logged and counted
// and never stop copying.
func TestTopicConfigSyncErrors(t *testing.T) {
	for _, c := range []struct {
		name    string
		inject  func(b *bed)
		level   zapcore.Level
		message string
		detail  string
	}{
		{
			name: "target without IncrementalAlterConfigs",
			inject: func(b *bed) {
				b.dst.ControlKey(int16(kmsg.IncrementalAlterConfigs), func(kr kmsg.Request) (kmsg.Response, error, bool) {
					b.dst.KeepControl()
					req := kr.(*kmsg.IncrementalAlterConfigsRequest)
					resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
					for _, res := range req.Resources {
						rr := kmsg.NewIncrementalAlterConfigsResponseResource()
						rr.ResourceName, rr.ResourceType, rr.ErrorCode = res.ResourceName, res.ResourceType, kerr.UnsupportedVersion.Code
						resp.Resources = append(resp.Resources, rr)
					}
					return resp, nil, true
				})
			},
			level:   zapcore.ErrorLevel,
			message: "target does not support IncrementalAlterConfigs; remote topic configs are not synced",
		},
		{
			name: "target rejects a value",
			inject: func(b *bed) {
				b.dst.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.IncrementalAlterConfigs}, Err: kerr.InvalidConfig, Count: -1})
			},
			level:   zapcore.WarnLevel,
			message: "could not alter configuration of remote topic; retried at the next interval",
		},
		{
			name: "source denies describing configs",
			inject: func(b *bed) {
				b.src.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.DescribeConfigs}, Resource: "conf", Err: kerr.TopicAuthorizationFailed, Count: -1})
			},
			level:   zapcore.ErrorLevel,
			message: "not authorized; grant the permission or disable the sync",
			detail:  "TopicAuthorizationException occurred while trying to describe configs for topics [conf] on A cluster",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBed(t)
			b.createTopic(b.srcAdm, "conf", 1, map[string]*string{"retention.bytes": kadm.StringPtr("1000")})
			c.inject(b)
			log, logs := observedLogger(t)
			reg := prometheus.NewRegistry()
			stop := b.runLogged(b.flow("sync.topic.configs.interval.seconds = 1"), reg, log)
			waitFor(t, "the failure logged", func() bool {
				for _, e := range logs.FilterMessage(c.message).All() {
					if e.Level == c.level && (c.detail == "" || e.ContextMap()["detail"] == c.detail) {
						return true
					}
				}
				return false
			})
			// Copying goes on.
			b.produce("conf", 1, 0, 5)
			b.read("A.conf", 5)
			require.NoError(t, stop())
			require.GreaterOrEqual(t, sumOf(t, reg, "mm2go_replicator_errors_total", map[string]string{"reason": reasonConfigSync}), 1.0)
		})
	}
}

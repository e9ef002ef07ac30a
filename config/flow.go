package config

import (
	"cmp"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config is a loaded, validated and frozen MM2 dedicated-mode configuration.
// Treat it as read-only: a reload builds a new Config.
type Config struct {
	// Clusters lists the clusters in "clusters" order.
	Clusters []*Cluster
	// Flows holds every ordered pair (s,t), s != t, enabled or not, in the
	// order of MM2's clusterPairs, which iterates a java.util.HashSet of the
	// aliases (mm2go reproduces that order).
	Flows []*Flow
}

// Flow returns the flow source->target, or nil if there is none.
func (c *Config) Flow(source, target string) *Flow {
	for _, f := range c.Flows {
		if f.Source == source && f.Target == target {
			return f
		}
	}
	return nil
}

// EnabledFlows returns the flows with Enabled set, in Flows order.
func (c *Config) EnabledFlows() []*Flow {
	var out []*Flow
	for _, f := range c.Flows {
		if f.Enabled {
			out = append(out, f)
		}
	}
	return out
}

// Cluster returns the cluster with the given alias, or nil.
func (c *Config) Cluster(alias string) *Cluster {
	for _, cl := range c.Clusters {
		if cl.Alias == alias {
			return cl
		}
	}
	return nil
}

// Cluster is one entry of "clusters".
type Cluster struct {
	// Alias is the cluster's name in "clusters" and in key prefixes.
	Alias string
	// BootstrapServers is "<alias>.bootstrap.servers" (or the top-level
	// "bootstrap.servers", which MM2 uses for clusters without their own).
	// It is empty only for a cluster that takes part in no enabled flow.
	BootstrapServers []string
}

// Flow is one replication flow source->target with every setting resolved
// the way MM2 resolves it: connector settings are the top-level value
// overridden by "<source>-><target>.<key>"; worker settings come from the
// target cluster's "<target>.*" keys and the top-level worker prefixes.
type Flow struct {
	// Source is the source cluster alias.
	Source string
	// Target is the target cluster alias.
	Target string
	// Enabled is "<source>-><target>.enabled" (default false), tested like
	// MM2 does: the flow is enabled iff the value equals "true" ignoring case.
	Enabled bool

	// Topics is "topics", the regexes of topics to replicate (default .*).
	Topics []string
	// TopicsExclude is "topics.exclude" (default
	// .*[\-\.]internal, .*\.replica, __.*); excludes win over Topics.
	TopicsExclude []string
	// Groups is "groups", the regexes of consumer groups to checkpoint
	// (default .*).
	Groups []string
	// GroupsExclude is "groups.exclude" (default
	// console-consumer-.*, connect-.*, __.*).
	GroupsExclude []string
	// ConfigPropertiesExclude is "config.properties.exclude", the topic
	// config names never synced (default: the throttled-replica lists,
	// message.timestamp.difference.max.ms, message.timestamp.type,
	// unclean.leader.election.enable and min.insync.replicas).
	ConfigPropertiesExclude []string

	// ReplicationFactor is "replication.factor" for new remote topics
	// (default 2; -1 means the broker default).
	ReplicationFactor int16
	// OffsetSyncsTopicReplicationFactor is
	// "offset-syncs.topic.replication.factor" (default 3).
	OffsetSyncsTopicReplicationFactor int16
	// CheckpointsTopicReplicationFactor is
	// "checkpoints.topic.replication.factor" (default 3).
	CheckpointsTopicReplicationFactor int16
	// HeartbeatsTopicReplicationFactor is
	// "heartbeats.topic.replication.factor" (default 3).
	HeartbeatsTopicReplicationFactor int16

	// ReplicationPolicyClass is "replication.policy.class" (default
	// PolicyDefault). MM2's fully qualified class names and the simple names
	// DefaultReplicationPolicy and IdentityReplicationPolicy are accepted.
	ReplicationPolicyClass PolicyClass
	// ReplicationPolicySeparator is "replication.policy.separator" (default
	// "."), taken verbatim like MM2 does (no trimming).
	ReplicationPolicySeparator string
	// ReplicationPolicySeparatorSet records whether
	// "replication.policy.separator" was given: MM2 consults
	// ReplicationPolicyInternalTopicSeparatorEnabled only then.
	ReplicationPolicySeparatorSet bool
	// ReplicationPolicyInternalTopicSeparatorEnabled is
	// "replication.policy.internal.topic.separator.enabled" (default true):
	// whether a custom separator is also used in the checkpoints and
	// offset-syncs topic names.
	ReplicationPolicyInternalTopicSeparatorEnabled bool

	// RefreshTopicsEnabled is "refresh.topics.enabled" (default true). It is
	// false also when the interval is -1, which disables the task in MM2.
	RefreshTopicsEnabled bool
	// RefreshTopicsInterval is "refresh.topics.interval.seconds" (default
	// 600s).
	RefreshTopicsInterval time.Duration
	// RefreshGroupsEnabled is "refresh.groups.enabled" (default true; false
	// when the interval is -1).
	RefreshGroupsEnabled bool
	// RefreshGroupsInterval is "refresh.groups.interval.seconds" (default
	// 600s).
	RefreshGroupsInterval time.Duration
	// SyncTopicConfigsEnabled is "sync.topic.configs.enabled" (default true;
	// false when the interval is -1).
	SyncTopicConfigsEnabled bool
	// SyncTopicConfigsInterval is "sync.topic.configs.interval.seconds"
	// (default 600s).
	SyncTopicConfigsInterval time.Duration
	// SyncTopicAclsEnabled is "sync.topic.acls.enabled" (default true; false
	// when the interval is -1).
	SyncTopicAclsEnabled bool
	// SyncTopicAclsInterval is "sync.topic.acls.interval.seconds" (default
	// 600s).
	SyncTopicAclsInterval time.Duration
	// EmitHeartbeatsEnabled is "emit.heartbeats.enabled" (default true). MM2
	// emits heartbeats for a pair whenever this is true, even if the flow is
	// disabled (see Active).
	EmitHeartbeatsEnabled bool
	// EmitHeartbeatsInterval is "emit.heartbeats.interval.seconds" (default
	// 1s).
	EmitHeartbeatsInterval time.Duration
	// HeartbeatsReplicationEnabled is "heartbeats.replication.enabled"
	// (default true): replicate heartbeats topics even when Topics rejects
	// them.
	HeartbeatsReplicationEnabled bool
	// EmitCheckpointsEnabled is "emit.checkpoints.enabled" (default true;
	// false when the interval is -1, and when EmitOffsetSyncsEnabled is
	// false, because MM2's checkpoint connector refuses to run then).
	EmitCheckpointsEnabled bool
	// EmitCheckpointsInterval is "emit.checkpoints.interval.seconds"
	// (default 60s).
	EmitCheckpointsInterval time.Duration
	// SyncGroupOffsetsEnabled is "sync.group.offsets.enabled" (default
	// false). It is false also when the interval is -1 or
	// EmitCheckpointsEnabled is false: MM2 syncs group offsets inside the
	// checkpoint tasks.
	SyncGroupOffsetsEnabled bool
	// SyncGroupOffsetsInterval is "sync.group.offsets.interval.seconds"
	// (default 60s).
	SyncGroupOffsetsInterval time.Duration
	// EmitOffsetSyncsEnabled is "emit.offset-syncs.enabled" (default true).
	// MM2's checkpoint connector refuses to run without offset syncs, so
	// checkpoints and group-offset sync need it.
	EmitOffsetSyncsEnabled bool
	// OffsetSyncsTopicLocation is "offset-syncs.topic.location" (default
	// LocationSource).
	OffsetSyncsTopicLocation Location
	// ProvenanceHeaders is mm2go's "mm2go.provenance.headers": auto
	// (default), true or false. When on, every record the flow copies gets
	// a header "mm2go.origin" naming the cluster it was first produced on,
	// and records whose origin is the flow's target are not copied: the
	// loop guard MM2's identity policy lacks. auto turns it on for a flow
	// under the identity policy whose reverse flow is enabled too.
	ProvenanceHeaders bool
	provenanceMode    string
	// CopyMode is mm2go's "mm2go.copy.mode": CopyBatches (default)
	// forwards fetched batches whose records need no change as they are
	// (no decompression or recompression) and re-encodes the rest;
	// CopyRecords decodes fetched records and re-batches them through the
	// target producer. A flow with provenance headers copies records.
	CopyMode CopyMode
	// Fencing is mm2go's "mm2go.copy.fencing": FencingEpoch (the default in
	// the batches mode), with which the batches mode's writer fences older
	// writers of the flow (internal/fence), or FencingNone (always in the
	// record mode).
	Fencing Fencing
	// ExactlyOnce is "<target>.exactly.once.source.support = enabled" (the
	// Connect worker key MM2's dedicated mode reads per target cluster):
	// every copy step commits the copied records, the flow's progress and
	// its offset map in one transaction on the target, so that a
	// read_committed consumer of the target sees each source record once,
	// also after a crash. It copies records (CopyRecords) and fences with
	// its transactional id, not with mm2go.copy.fencing.
	ExactlyOnce bool
	// TransactionBoundary is "transaction.boundary" (Connect's source
	// connector key, given per flow): one transaction per poll of the source
	// (BoundaryPoll, the default) or per TransactionBoundaryInterval
	// ("transaction.boundary.interval.ms", default OffsetFlushInterval).
	TransactionBoundary         TransactionBoundary
	TransactionBoundaryInterval time.Duration
	// ThrottleBytesPerSecond is mm2go's "mm2go.throttle.bytes.per.second":
	// the most bytes of fetched source batches the flow copies per second,
	// over all its tasks in this process; 0 (the default) means no limit.
	ThrottleBytesPerSecond int64
	// FetchOverlap is mm2go's "mm2go.fetch.overlap.enabled" (default
	// false): in the batches mode, a far source broker (FetchFarThreshold)
	// whose partitions are caught up gets two Fetch requests for all of
	// them in flight, on two connections, each sent half a cycle (how long
	// a request with data takes) after the other, so that a new record
	// waits at most half a cycle for a request to reach the broker instead
	// of a whole one. Each record then crosses the link about twice while
	// caught up; the second copy is dropped.
	FetchOverlap bool
	// FetchFarThreshold is mm2go's "mm2go.fetch.far.threshold.ms" (default
	// 15 ms): in the batches mode, a source broker whose measured round
	// trip is at least this is far away: while its partitions are behind
	// they get larger fetches and two requests in flight, and while caught
	// up, with FetchOverlap, overlapping requests. 0 treats every broker
	// as far.
	FetchFarThreshold time.Duration
	// copyModeOrigin and fencingOrigin are the keys as written that set
	// CopyMode and Fencing, "" where they took their defaults.
	copyModeOrigin, fencingOrigin string
	// fetchOverlapOrigin is the key as written that set FetchOverlap.
	fetchOverlapOrigin string
	// TopicConfigsKeep is mm2go's "mm2go.sync.topic.configs.keep" (default
	// empty): regexes of topic config keys the periodic topic-config sync
	// never changes on a remote topic, so that target-side overrides of them
	// stay. Creation still copies them.
	TopicConfigsKeep []string
	// ACLSyncMode is mm2go's "mm2go.sync.topic.acls.mode": ACLSyncRead
	// (default) or ACLSyncMM2.
	ACLSyncMode ACLSyncMode
	// GroupSyncMode is mm2go's "mm2go.sync.group.offsets.mode": GroupSyncExact
	// (default) or GroupSyncPeriodic (MM2's rule).
	GroupSyncMode GroupSyncMode
	// GroupSyncWatchInterval is mm2go's
	// "mm2go.sync.group.offsets.watch.interval.ms" (default 250 ms): how
	// often the exact group-offset sync lists the source groups' states and
	// commits the final offsets of groups that became empty.
	GroupSyncWatchInterval time.Duration

	// OffsetLagMax is "offset.lag.max" (default 100): how far the newest
	// offset sync may fall behind before a new one is emitted.
	OffsetLagMax int64
	// UseDefaultsFrom is "<source>-><target>.use.defaults.from" (default
	// DefaultsFromTarget). MM2 ignores the key at top level, and so does
	// mm2go.
	UseDefaultsFrom DefaultsFrom
	// TasksMax is "tasks.max" (default 1): the number of tasks the flow is
	// split into when its task topic is created; the instances running the
	// file share them (cmd/mm2go, internal/fence).
	TasksMax int
	// AdminTimeout is "admin.timeout.ms" (default 60000 ms).
	AdminTimeout time.Duration
	// ConsumerPollTimeout is "consumer.poll.timeout.ms" (default 1000 ms).
	ConsumerPollTimeout time.Duration

	// OffsetStorageTopic is the worker's "offset.storage.topic" (default
	// mm2-offsets.<source>.internal), where source positions are stored on
	// the target.
	OffsetStorageTopic string
	// OffsetStoragePartitions is "offset.storage.partitions" (default 25;
	// -1 means the broker default).
	OffsetStoragePartitions int32
	// OffsetStorageReplicationFactor is "offset.storage.replication.factor"
	// (default 3; -1 means the broker default).
	OffsetStorageReplicationFactor int16
	// OffsetFlushInterval is "<target>.offset.flush.interval.ms". MM2's
	// default is 60000 ms; mm2go's default is 1000 ms so that progress is
	// stored often and a crash re-copies little.
	OffsetFlushInterval time.Duration

	// SourceAutoOffsetReset is the effective "auto.offset.reset" of the
	// source consumer (default earliest, MM2's choice); "none" is rejected.
	SourceAutoOffsetReset OffsetReset
	// SourceIsolationLevel is the effective "isolation.level" of the source
	// consumer. mm2go's default is read_committed (MM2's is
	// read_uncommitted, which copies aborted transactional records).
	SourceIsolationLevel IsolationLevel

	clients [6]*Client
}

// Name returns "source->target".
func (f *Flow) Name() string { return f.Source + "->" + f.Target }

// Active reports whether MM2 would run a herder for this pair: the flow is
// enabled or it emits heartbeats (MM2's clusterPairs).
func (f *Flow) Active() bool { return f.Enabled || f.EmitHeartbeatsEnabled }

// Certificate is a certificate a client of a flow presents (Kind "client")
// or trusts (Kind "trusted"), read from the file or value of Key.
type Certificate struct {
	Cluster  string
	Kind     string
	Subject  string
	NotAfter time.Time
	Key      string
}

// Certificates returns the certificates the flow's clients present or
// trust, each once, ordered by cluster, kind, key and subject.
func (f *Flow) Certificates() []Certificate {
	seen := map[Certificate]bool{}
	var out []Certificate
	for _, r := range Roles() {
		for _, c := range f.clients[r].certs {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	slices.SortFunc(out, func(a, b Certificate) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Key, b.Key), cmp.Compare(a.Subject, b.Subject))
	})
	return out
}

// Client returns the client settings for role r. It is never nil for the six
// roles and nil for anything else.
func (f *Flow) Client(r Role) *Client {
	if !r.valid() {
		return nil
	}
	return f.clients[r]
}

// Default values of MM2's connector settings.
const (
	defaultTopicsExclude           = `.*[\-\.]internal, .*\.replica, __.*`
	defaultGroupsExclude           = `console-consumer-.*, connect-.*, __.*`
	defaultConfigPropertiesExclude = `follower\.replication\.throttled\.replicas, leader\.replication\.throttled\.replicas, message\.timestamp\.difference\.max\.ms, message\.timestamp\.type, unclean\.leader\.election\.enable, min\.insync\.replicas`
	// defaultOffsetFlushInterval is mm2go's default, shorter than MM2's 60s.
	defaultOffsetFlushInterval = time.Second
)

// flowReader reads typed settings from a flow's connector or worker config.
type flowReader struct {
	p    *parser
	conf entries
}

// get returns the entry for key, if set.
func (r flowReader) get(key string) (entry, bool) {
	e, ok := r.conf[key]
	return e, ok
}

// boolean reads a Kafka BOOLEAN.
func (r flowReader) boolean(key string, def bool) bool {
	e, ok := r.get(key)
	if !ok {
		return def
	}
	b, ok := parseBool(e.value)
	if !ok {
		r.p.probs.errorf(e.origin, "not a boolean (got %s, want true or false)", got(e.origin, e.value))
		return def
	}
	return b
}

// integer reads a decimal integer in [lo, hi]; want describes the range.
func (r flowReader) integer(key string, def, lo, hi int64, want string) int64 {
	e, ok := r.get(key)
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(javaTrim(e.value), 10, 64)
	if err != nil {
		r.p.probs.errorf(e.origin, "not an integer (got %s, want %s)", got(e.origin, e.value), want)
		return def
	}
	if n < lo || n > hi {
		r.p.probs.errorf(e.origin, "out of range (got %s, want %s)", got(e.origin, e.value), want)
		return def
	}
	return n
}

// replicationFactor reads a replication factor: -1 or 1..32767.
func (r flowReader) replicationFactor(key string, def int16) int16 {
	n := r.integer(key, int64(def), -1, math.MaxInt16, "-1 (broker default) or 1..32767")
	if n == 0 {
		e, _ := r.get(key)
		r.p.probs.errorf(e.origin, "out of range (got %s, want -1 (broker default) or 1..32767)", got(e.origin, e.value))
		return def
	}
	return int16(n)
}

// list reads a Kafka LIST.
func (r flowReader) list(key, def string) []string {
	if e, ok := r.get(key); ok {
		return parseList(e.value)
	}
	return parseList(def)
}

// maxPatternBytes bounds the value of a pattern list key (topics,
// topics.exclude, groups, groups.exclude, config.properties.exclude): a
// longer one is an error, so that compiling it cannot take seconds and
// hundreds of megabytes.
const maxPatternBytes = 64 << 10

// regexList reads a LIST of regexes and compiles each the way mm2go's
// filters will (full match, RE2 syntax).
func (r flowReader) regexList(key, def string) []string {
	e, ok := r.get(key)
	if !ok {
		return r.list(key, def)
	}
	if len(e.value) > maxPatternBytes {
		r.p.probs.errorf(e.origin, "too long (got %d bytes, want at most %d: match topics or groups by prefix, e.g. orders\\..*, rather than listing each)", len(e.value), maxPatternBytes)
		return nil
	}
	l := r.list(key, def)
	for _, pat := range l {
		if _, err := regexp.Compile(`^(?:` + pat + `)$`); err != nil {
			r.p.probs.errorf(e.origin, "invalid regular expression %q (got %q, want RE2 syntax: %v)", pat, e.value, err)
		} else if strings.Count(pat, "{") != strings.Count(pat, "}") {
			r.p.probs.warn(e.origin, "pattern %q looks cut by the comma split of list values (MM2 splits a{1,3} into a{1 and 3}, too)", pat)
		}
	}
	return l
}

// interval reads an "<x>.enabled" / "<x>.interval.seconds" pair. A
// negative interval disables the task in MM2 (its scheduler skips it), so -1
// is accepted and turns enabled off; other values must be 1s or more.
func (r flowReader) interval(enabledKey, intervalKey string, defEnabled bool, def time.Duration) (bool, time.Duration) {
	enabled := r.boolean(enabledKey, defEnabled)
	secs := r.integer(intervalKey, int64(def/time.Second), -1, math.MaxInt64/int64(time.Second),
		"-1 (disabled) or 1..9223372036 seconds")
	if secs == 0 {
		e, _ := r.get(intervalKey)
		r.p.probs.errorf(e.origin, "out of range (got %s, want -1 (disabled) or 1..9223372036 seconds)", got(e.origin, e.value))
		secs = int64(def / time.Second)
	}
	if secs < 0 {
		return false, -time.Second
	}
	return enabled, time.Duration(secs) * time.Second
}

// choice reads a key whose value is one of def and others, case-insensitive;
// def when the key is not set. Another value is an error naming them all.
func choice[T ~string](r flowReader, key string, def T, others ...T) T {
	e, ok := r.get(key)
	if !ok {
		return def
	}
	all := append([]T{def}, others...)
	v := T(strings.ToLower(javaTrim(e.value)))
	if slices.Contains(all, v) {
		return v
	}
	names := make([]string, len(all))
	for i, a := range all {
		names[i] = string(a)
	}
	r.p.probs.errorf(e.origin, "invalid value (got %q, want %s or %s)", e.value, strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
	return def
}

// millis reads a LONG in milliseconds, at least lo ms.
func (r flowReader) millis(key string, def time.Duration, lo int64) time.Duration {
	maxMs := int64(math.MaxInt64 / int64(time.Millisecond))
	n := r.integer(key, int64(def/time.Millisecond), lo, maxMs, fmt.Sprintf("%d..%d milliseconds", lo, maxMs))
	return time.Duration(n) * time.Millisecond
}

// className reads a class-valued key whose only accepted value is MM2's
// default implementation (given by its fully qualified name).
func (r flowReader) className(key, fqcn string) {
	e, ok := r.get(key)
	if !ok {
		return
	}
	v := javaTrim(e.value)
	if v != fqcn && v != fqcn[strings.LastIndex(fqcn, ".")+1:] {
		r.p.probs.errorf(e.origin, "custom Java classes are not supported by mm2go (got %q, want %s)", v, fqcn)
	}
}

// buildFlow resolves every setting of flow s->t.
func (p *parser) buildFlow(s, t string) *Flow {
	conn := p.connectorConfig(s, t)
	r := flowReader{p: p, conf: conn}
	f := &Flow{Source: s, Target: t}

	if e, ok := p.raw.values[s+"->"+t+"."+keyEnabled]; ok {
		f.Enabled = strings.EqualFold(javaTrim(e), "true")
	}

	f.Topics = r.regexList(keyTopics, ".*")
	f.TopicsExclude = r.regexList(keyTopicsExclude, defaultTopicsExclude)
	f.Groups = r.regexList(keyGroups, ".*")
	f.GroupsExclude = r.regexList(keyGroupsExclude, defaultGroupsExclude)
	f.ConfigPropertiesExclude = r.regexList(keyConfigPropertiesExclude, defaultConfigPropertiesExclude)

	f.ReplicationFactor = r.replicationFactor(keyReplicationFactor, 2)
	f.OffsetSyncsTopicReplicationFactor = r.replicationFactor(keyOffsetSyncsRF, 3)
	f.CheckpointsTopicReplicationFactor = r.replicationFactor(keyCheckpointsRF, 3)
	f.HeartbeatsTopicReplicationFactor = r.replicationFactor(keyHeartbeatsRF, 3)

	f.ReplicationPolicyClass = PolicyDefault
	if e, ok := r.get(keyPolicyClass); ok {
		switch v := javaTrim(e.value); v {
		case string(PolicyDefault), "DefaultReplicationPolicy":
		case string(PolicyIdentity), "IdentityReplicationPolicy":
			f.ReplicationPolicyClass = PolicyIdentity
		default:
			p.probs.errorf(e.origin, "unsupported replication policy (got %q, want %s or %s)", v, PolicyDefault, PolicyIdentity)
		}
	}
	f.ReplicationPolicySeparator = "."
	if e, ok := r.get(keyPolicySeparator); ok {
		f.ReplicationPolicySeparator, f.ReplicationPolicySeparatorSet = e.value, true
		if e.value == "" {
			p.probs.errorf(e.origin, "empty separator (got \"\", want a non-empty string such as \".\" or \"_\")")
		}
	}
	f.ReplicationPolicyInternalTopicSeparatorEnabled = r.boolean(keyPolicyInternalSeparator, true)

	f.RefreshTopicsEnabled, f.RefreshTopicsInterval = r.interval(keyRefreshTopicsEnabled, keyRefreshTopicsInterval, true, 600*time.Second)
	f.RefreshGroupsEnabled, f.RefreshGroupsInterval = r.interval(keyRefreshGroupsEnabled, keyRefreshGroupsInterval, true, 600*time.Second)
	f.SyncTopicConfigsEnabled, f.SyncTopicConfigsInterval = r.interval(keySyncTopicConfigsEnabled, keySyncTopicConfigsInterval, true, 600*time.Second)
	f.SyncTopicAclsEnabled, f.SyncTopicAclsInterval = r.interval(keySyncTopicAclsEnabled, keySyncTopicAclsInterval, true, 600*time.Second)
	f.EmitCheckpointsEnabled, f.EmitCheckpointsInterval = r.interval(keyEmitCheckpointsEnabled, keyEmitCheckpointsInterval, true, 60*time.Second)
	f.SyncGroupOffsetsEnabled, f.SyncGroupOffsetsInterval = r.interval(keySyncGroupOffsetsEnabled, keySyncGroupOffsetsInterval, false, 60*time.Second)
	// A heartbeat interval of 0 or less makes MM2's heartbeat task spin, so
	// only positive values are accepted.
	f.EmitHeartbeatsEnabled = r.boolean(keyEmitHeartbeatsEnabled, true)
	f.EmitHeartbeatsInterval = time.Duration(r.integer(keyEmitHeartbeatsInterval, 1, 1, math.MaxInt64/int64(time.Second),
		"1..9223372036 seconds")) * time.Second
	f.HeartbeatsReplicationEnabled = r.boolean(keyHeartbeatsReplicationEnabled, true)

	f.EmitOffsetSyncsEnabled = r.boolean(keyEmitOffsetSyncsEnabled, true)
	f.OffsetSyncsTopicLocation = LocationSource
	if e, ok := r.get(keyOffsetSyncsLocation); ok {
		switch v := javaTrim(e.value); Location(v) {
		case LocationSource, LocationTarget:
			f.OffsetSyncsTopicLocation = Location(v)
		default:
			p.probs.errorf(e.origin, "invalid location (got %q, want source or target)", v)
		}
	}
	if e, ok := r.get(keyEmitOffsetSyncsEnabled); ok && !f.EmitOffsetSyncsEnabled {
		for _, k := range sortedKeys(conn) {
			if strings.HasPrefix(k, "offset-syncs-") || strings.HasPrefix(k, "offset-syncs.topic.") {
				p.probs.errorf(e.origin, "offset syncs are disabled while %s is set (got %q, want true, or remove the offset-syncs.* keys, as MM2's MirrorSourceConnector requires)",
					conn[k].origin, e.value)
				break
			}
		}
	}
	// MM2 syncs group offsets inside the checkpoint tasks, and the
	// checkpoint connector runs neither without checkpoints nor without
	// offset syncs (MirrorCheckpointConnector, MirrorCheckpointConfig.validate).
	if !f.EmitOffsetSyncsEnabled {
		f.EmitCheckpointsEnabled = false
	}
	if f.SyncGroupOffsetsEnabled && !f.EmitCheckpointsEnabled {
		f.SyncGroupOffsetsEnabled = false
		e, _ := r.get(keySyncGroupOffsetsEnabled)
		p.probs.warn(e.origin, "no effect for flow %s, as in MM2: group offsets are synced by the checkpoint tasks, which do not run without emit.checkpoints.enabled and emit.offset-syncs.enabled", f.Name())
	}
	f.OffsetLagMax = r.integer(keyOffsetLagMax, 100, 0, math.MaxInt64, "0..9223372036854775807")
	f.CopyMode = choice(r, keyCopyMode, CopyBatches, CopyRecords)
	if f.CopyMode == CopyBatches {
		f.Fencing = choice(r, keyFencing, FencingEpoch, FencingNone)
	} else {
		f.Fencing = choice(r, keyFencing, FencingNone, FencingEpoch)
	}
	f.ThrottleBytesPerSecond = r.integer(keyThrottle, 0, 0, math.MaxInt64, "0..9223372036854775807 bytes per second")
	f.FetchOverlap = r.boolean(keyFetchOverlap, false)
	f.FetchFarThreshold = r.millis(keyFetchFar, 15*time.Millisecond, 0)
	if e, ok := r.get(keyFetchOverlap); ok {
		f.fetchOverlapOrigin = e.origin
	}
	if e, ok := r.get(keyCopyMode); ok {
		f.copyModeOrigin = e.origin
	}
	if e, ok := r.get(keyFencing); ok {
		f.fencingOrigin = e.origin
	}
	f.TransactionBoundary = choice(r, keyTransactionBoundary, BoundaryPoll, BoundaryInterval)
	if f.Fencing == FencingEpoch && f.CopyMode != CopyBatches {
		p.probs.warn(f.fencingOrigin, "no effect for flow %s: only the batches copy mode (mm2go.copy.mode = batches) fences older writers", f.Name())
	}
	f.GroupSyncMode = choice(r, keyGroupSyncMode, GroupSyncExact, GroupSyncPeriodic)
	f.GroupSyncWatchInterval = r.millis(keyGroupSyncWatch, 250*time.Millisecond, 10)
	f.TopicConfigsKeep = r.regexList(keyConfigsKeep, "")
	f.ACLSyncMode = choice(r, keyACLSyncMode, ACLSyncRead, ACLSyncMM2)
	f.provenanceMode = "auto"
	if e, ok := r.get(keyProvenanceHeaders); ok {
		switch v := strings.ToLower(javaTrim(e.value)); v {
		case "auto", "true", "false":
			f.provenanceMode = v
		default:
			p.probs.errorf(e.origin, "invalid value (got %q, want auto, true or false)", e.value)
		}
	}

	f.UseDefaultsFrom = DefaultsFromTarget
	if e, ok := r.get(keyUseDefaultsFrom); ok && e.origin != keyUseDefaultsFrom {
		switch v := javaTrim(e.value); DefaultsFrom(v) {
		case DefaultsFromTarget, DefaultsFromSource:
			f.UseDefaultsFrom = DefaultsFrom(v)
		default:
			p.probs.errorf(e.origin, "invalid value (got %q, want source or target)", v)
		}
	}
	f.TasksMax = int(r.integer(keyTasksMax, 1, 1, math.MaxInt32, "1..2147483647"))
	f.AdminTimeout = r.millis(keyAdminTimeout, 60*time.Second, 1)
	f.ConsumerPollTimeout = r.millis(keyConsumerPollTimeout, time.Second, 0)

	r.className(keyTopicFilterClass, "org.apache.kafka.connect.mirror.DefaultTopicFilter")
	r.className(keyGroupFilterClass, "org.apache.kafka.connect.mirror.DefaultGroupFilter")
	r.className(keyConfigPropertyFilterClass, "org.apache.kafka.connect.mirror.DefaultConfigPropertyFilter")
	r.className(keyForwardingAdminClass, "org.apache.kafka.clients.admin.ForwardingAdmin")
	for _, kv := range [][2]string{{keySourceClusterAlias, s}, {keyTargetClusterAlias, t}} {
		if e, ok := r.get(kv[0]); ok && javaTrim(e.value) != kv[1] {
			p.probs.errorf(e.origin, "changing the cluster alias of a flow is not supported (got %q, want no such key)", e.value)
		}
	}

	w := flowReader{p: p, conf: p.workerConfig(t)}
	f.OffsetStorageTopic = "mm2-offsets." + s + ".internal"
	if e, ok := w.get(keyOffsetStorageTopic); ok {
		if v := javaTrim(e.value); v != "" {
			f.OffsetStorageTopic = v
		} else {
			p.probs.errorf(e.origin, "empty topic name (got \"\", want a topic name)")
		}
	}
	f.OffsetStoragePartitions = int32(w.integer(keyOffsetStoragePartitions, 25, -1, math.MaxInt32, "-1 (broker default) or 1..2147483647"))
	if f.OffsetStoragePartitions == 0 {
		e, _ := w.get(keyOffsetStoragePartitions)
		p.probs.errorf(e.origin, "out of range (got %q, want -1 (broker default) or 1..2147483647)", e.value)
		f.OffsetStoragePartitions = 25
	}
	f.OffsetStorageReplicationFactor = w.replicationFactor(keyOffsetStorageRF, 3)
	f.OffsetFlushInterval = w.millis(keyOffsetFlushInterval, defaultOffsetFlushInterval, 1)
	f.TransactionBoundaryInterval = r.millis(keyTransactionBoundaryInterval, f.OffsetFlushInterval, 1)

	for _, role := range Roles() {
		f.clients[role] = p.buildClient(f, conn, role)
	}
	src := f.clients[RoleSourceConsumer]
	f.SourceAutoOffsetReset, f.SourceIsolationLevel = src.autoOffsetReset, src.isolationLevel
	p.exactlyOnce(f, r, w)
	return f
}

// exactlyOnce reads the exactly-once keys of flow f: the worker's
// exactly.once.source.support (from the target cluster) and the connector's
// exactly.once.support.
func (p *parser) exactlyOnce(f *Flow, r, w flowReader) {
	support := "requested"
	se, setSupport := r.get(keyExactlyOnceSupport)
	if setSupport {
		support = strings.ToLower(javaTrim(se.value)) // checked by classify
	}
	e, ok := w.get(keyExactlyOnceSource)
	if !ok || strings.ToLower(javaTrim(e.value)) != "enabled" {
		if setSupport && support == "required" {
			p.probs.warn(se.origin, "no effect for flow %s: %s.%s is not enabled", f.Name(), f.Target, keyExactlyOnceSource)
		}
		return
	}
	f.ExactlyOnce = true
	if f.SourceIsolationLevel != ReadCommitted {
		// MM2's MirrorSourceConnector supports exactly-once only when its
		// consumer reads committed records.
		if support == "required" {
			p.probs.errorf(se.origin, "exactly-once support is required but the source consumer's isolation.level is read_uncommitted (want read_committed)")
		} else {
			p.probs.warn(e.origin, "flow %s: the source is read with isolation.level=read_uncommitted, so records of aborted source transactions are copied (once each)", f.Name())
		}
	}
	if f.copyModeOrigin != "" && f.CopyMode == CopyBatches {
		p.probs.warn(f.copyModeOrigin, "no effect for flow %s: exactly-once copies records one by one in transactions (mm2go.copy.mode = records)", f.Name())
	}
	if f.fencingOrigin != "" && f.Fencing == FencingEpoch {
		p.probs.warn(f.fencingOrigin, "no effect for flow %s: under exactly-once the transactional producer fences older writers itself", f.Name())
	}
	f.CopyMode, f.Fencing = CopyRecords, FencingNone
}

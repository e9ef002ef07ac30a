package config

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseList(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", []string{}},
		{"   ", []string{}},
		{"a", []string{"a"}},
		{" a , b ", []string{"a", "b"}},
		{"a,b", []string{"a", "b"}},
		{"a,,b", []string{"a", "", "b"}},
		{"a,", []string{"a", ""}},
		{"a\t,\tb", []string{"a", "b"}},
		{"a b, c", []string{"a b", "c"}},
		{"a{1,3}", []string{"a{1", "3}"}}, // the comma split quirk of Kafka's LIST type
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			require.Equal(t, tt.want, parseList(tt.in))
		})
	}
}

func TestParseBool(t *testing.T) {
	tests := []struct {
		in       string
		want, ok bool
	}{
		{"true", true, true},
		{"TRUE", true, true},
		{" True ", true, true},
		{"false", false, true},
		{"FaLsE", false, true},
		{"yes", false, false},
		{"1", false, false},
		{"", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, ok := parseBool(tt.in)
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.want, got)
		})
	}
}

// TestDefaults checks every documented default on a minimal file.
func TestDefaults(t *testing.T) {
	c, ws := mustLoad(t, twoClusters)
	require.Empty(t, ws)
	f := c.Flow("a", "b")
	require.True(t, f.Enabled)
	require.False(t, c.Flow("b", "a").Enabled)
	require.Equal(t, []string{".*"}, f.Topics)
	require.Equal(t, []string{`.*[\-\.]internal`, `.*\.replica`, `__.*`}, f.TopicsExclude)
	require.Equal(t, []string{".*"}, f.Groups)
	require.Equal(t, []string{"console-consumer-.*", "connect-.*", "__.*"}, f.GroupsExclude)
	require.Len(t, f.ConfigPropertiesExclude, 6)
	require.Equal(t, int16(2), f.ReplicationFactor)
	require.Equal(t, int16(3), f.OffsetSyncsTopicReplicationFactor)
	require.Equal(t, int16(3), f.CheckpointsTopicReplicationFactor)
	require.Equal(t, int16(3), f.HeartbeatsTopicReplicationFactor)
	require.Equal(t, PolicyDefault, f.ReplicationPolicyClass)
	require.Equal(t, ".", f.ReplicationPolicySeparator)
	require.False(t, f.ReplicationPolicySeparatorSet)
	require.True(t, f.ReplicationPolicyInternalTopicSeparatorEnabled)
	require.True(t, f.RefreshTopicsEnabled)
	require.Equal(t, 600*time.Second, f.RefreshTopicsInterval)
	require.True(t, f.RefreshGroupsEnabled)
	require.Equal(t, 600*time.Second, f.RefreshGroupsInterval)
	require.True(t, f.SyncTopicConfigsEnabled)
	require.Equal(t, 600*time.Second, f.SyncTopicConfigsInterval)
	require.True(t, f.SyncTopicAclsEnabled)
	require.Equal(t, 600*time.Second, f.SyncTopicAclsInterval)
	require.True(t, f.EmitHeartbeatsEnabled)
	require.Equal(t, time.Second, f.EmitHeartbeatsInterval)
	require.True(t, f.HeartbeatsReplicationEnabled)
	require.True(t, f.EmitCheckpointsEnabled)
	require.Equal(t, 60*time.Second, f.EmitCheckpointsInterval)
	require.False(t, f.SyncGroupOffsetsEnabled)
	require.Equal(t, 60*time.Second, f.SyncGroupOffsetsInterval)
	require.True(t, f.EmitOffsetSyncsEnabled)
	require.Equal(t, LocationSource, f.OffsetSyncsTopicLocation)
	require.Equal(t, int64(100), f.OffsetLagMax)
	require.Equal(t, DefaultsFromTarget, f.UseDefaultsFrom)
	require.Equal(t, 1, f.TasksMax)
	require.Equal(t, 60*time.Second, f.AdminTimeout)
	require.Equal(t, time.Second, f.ConsumerPollTimeout)
	require.Equal(t, "mm2-offsets.a.internal", f.OffsetStorageTopic)
	require.Equal(t, int32(25), f.OffsetStoragePartitions)
	require.Equal(t, int16(3), f.OffsetStorageReplicationFactor)
	require.Equal(t, time.Second, f.OffsetFlushInterval, "mm2go's default differs from MM2's 60000 ms")
	require.Equal(t, OffsetResetEarliest, f.SourceAutoOffsetReset)
	require.Equal(t, ReadCommitted, f.SourceIsolationLevel, "mm2go's default differs from MM2's read_uncommitted")
	require.Equal(t, "a->b", f.Name())
	require.True(t, f.Active())
	for _, r := range Roles() {
		require.NotNil(t, f.Client(r), r.String())
	}
	require.Nil(t, f.Client(Role(6)))
	require.Nil(t, f.Client(Role(-1)))
}

// TestSeedClusterPrefixedInternalTopicRFHasNoEffect records what MM2 does
// with "primary.checkpoints.topic.replication.factor=1" and its two
// siblings in the seed file: MM2's connectorBaseConfig hands "<alias>.*"
// keys to the connectors only as "source.cluster.*" / "target.cluster.*"
// properties, while MirrorCheckpointConfig, MirrorHeartbeatConfig and
// MirrorSourceConfig read the unprefixed keys. The three internal topics
// therefore keep replication factor 3 in MM2, and in mm2go, which warns
// that the keys have no effect. The cluster-prefixed Connect worker key
// primary.offset.storage.replication.factor does take effect, for the flow
// whose target is primary.
func TestSeedClusterPrefixedInternalTopicRFHasNoEffect(t *testing.T) {
	c, ws, err := Load("testdata/seed.properties")
	require.NoError(t, err)
	for _, f := range c.Flows {
		require.Equal(t, int16(3), f.CheckpointsTopicReplicationFactor, f.Name())
		require.Equal(t, int16(3), f.HeartbeatsTopicReplicationFactor, f.Name())
		require.Equal(t, int16(3), f.OffsetSyncsTopicReplicationFactor, f.Name())
		require.Equal(t, int16(2), f.ReplicationFactor, f.Name())
	}
	for _, k := range []string{"primary.checkpoints.topic.replication.factor",
		"primary.heartbeats.topic.replication.factor", "primary.offset-syncs.topic.replication.factor"} {
		require.True(t, hasWarning(ws, k, "no effect"), k)
	}
	require.Equal(t, int16(2), c.Flow("primary", "secondary").OffsetStorageReplicationFactor)
	require.Equal(t, int16(1), c.Flow("secondary", "primary").OffsetStorageReplicationFactor)
	require.True(t, c.Flow("primary", "secondary").SyncGroupOffsetsEnabled)
	require.False(t, c.Flow("secondary", "primary").SyncGroupOffsetsEnabled)
	require.Equal(t, []string{"b-1.example:9092", "b-2.example:9092"}, c.Cluster("secondary").BootstrapServers)
}

// TestConnectorSettingPrecedence: a flow override beats the top-level value,
// which beats the default; other flows keep the top-level value.
func TestConnectorSettingPrecedence(t *testing.T) {
	c, _ := mustLoad(t, twoClusters+`
b->a.enabled = true
replication.factor = 1
a->b.replication.factor = 5
topics = t1, t2
a->b.topics = only
emit.checkpoints.interval.seconds = 1
b->a.sync.topic.acls.enabled = false
refresh.topics.interval.seconds = -1
a->b.replication.policy.class = IdentityReplicationPolicy
b->a.replication.policy.class = org.apache.kafka.connect.mirror.DefaultReplicationPolicy
replication.policy.separator = _
replication.policy.internal.topic.separator.enabled = false
a->b.offset-syncs.topic.location = target
a->b.use.defaults.from = source
a->b.tasks.max = 123
a->b.offset.lag.max = 0
`)
	ab, ba := c.Flow("a", "b"), c.Flow("b", "a")
	require.Equal(t, int16(5), ab.ReplicationFactor)
	require.Equal(t, int16(1), ba.ReplicationFactor)
	require.Equal(t, []string{"only"}, ab.Topics)
	require.Equal(t, []string{"t1", "t2"}, ba.Topics)
	require.Equal(t, time.Second, ab.EmitCheckpointsInterval)
	require.True(t, ab.SyncTopicAclsEnabled)
	require.False(t, ba.SyncTopicAclsEnabled)
	require.False(t, ab.RefreshTopicsEnabled, "a -1 interval disables the task, as MM2's scheduler does")
	require.Equal(t, PolicyIdentity, ab.ReplicationPolicyClass)
	require.Equal(t, PolicyDefault, ba.ReplicationPolicyClass)
	require.Equal(t, "_", ab.ReplicationPolicySeparator)
	require.True(t, ab.ReplicationPolicySeparatorSet)
	require.False(t, ab.ReplicationPolicyInternalTopicSeparatorEnabled)
	require.Equal(t, LocationTarget, ab.OffsetSyncsTopicLocation)
	require.Equal(t, LocationSource, ba.OffsetSyncsTopicLocation)
	require.Equal(t, DefaultsFromSource, ab.UseDefaultsFrom)
	require.Equal(t, DefaultsFromTarget, ba.UseDefaultsFrom)
	require.Equal(t, 123, ab.TasksMax, "MirrorMakerConfigTest.testReplicationConfigProperties")
	require.Equal(t, int64(0), ab.OffsetLagMax)
}

// TestEnabledIsLenient follows MM2's clusterPairs, which enables a flow iff
// the value equals "true" ignoring case.
func TestEnabledIsLenient(t *testing.T) {
	tests := []struct {
		value   string
		enabled bool
		warns   bool
	}{
		{"true", true, false},
		{"TRUE", true, false},
		{"True ", true, false},
		{"false", false, false},
		{"yes", false, true},
		{"", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			c, ws, err := load(t, twoClusters+"b->a.enabled = "+tt.value+"\n", nil, "")
			require.NoError(t, err)
			require.Equal(t, tt.enabled, c.Flow("b", "a").Enabled)
			require.Equal(t, tt.warns, hasWarning(ws, "b->a.enabled", "not a boolean"))
		})
	}
}

// TestWorkerSettings: worker settings come from the target cluster, and a
// top-level worker key overrides the cluster key, as MM2's workerConfig
// copies it last. Top-level offset.flush.interval.ms is ignored, as in MM2.
func TestWorkerSettings(t *testing.T) {
	c, ws := mustLoad(t, twoClusters+`
b->a.enabled = true
b.offset.flush.interval.ms = 5000
offset.flush.interval.ms = 7000
a.offset.storage.topic = custom-offsets
b.offset.storage.partitions = 50
offset.storage.replication.factor = 1
a.offset.storage.replication.factor = 2
`)
	ab, ba := c.Flow("a", "b"), c.Flow("b", "a")
	require.Equal(t, 5*time.Second, ab.OffsetFlushInterval)
	require.Equal(t, time.Second, ba.OffsetFlushInterval)
	require.Equal(t, "mm2-offsets.a.internal", ab.OffsetStorageTopic)
	require.Equal(t, "custom-offsets", ba.OffsetStorageTopic)
	require.Equal(t, int32(50), ab.OffsetStoragePartitions)
	require.Equal(t, int32(25), ba.OffsetStoragePartitions)
	require.Equal(t, int16(1), ab.OffsetStorageReplicationFactor)
	require.Equal(t, int16(1), ba.OffsetStorageReplicationFactor)
	require.True(t, hasWarning(ws, "offset.flush.interval.ms", "ignored"))
	require.True(t, hasWarning(ws, "a.offset.storage.replication.factor", "overridden by the top-level"))
}

// TestSourceConsumerEffectiveSettings ports MM2's exactly-once support
// matrix for the isolation level (source.consumer.* beats consumer.*) and
// testReplicateFromLatest for the offset reset.
func TestSourceConsumerEffectiveSettings(t *testing.T) {
	tests := []struct {
		name      string
		extra     string
		reset     OffsetReset
		isolation IsolationLevel
	}{
		{"defaults", "", OffsetResetEarliest, ReadCommitted},
		{"cluster consumer", "a.consumer.auto.offset.reset = latest\na.consumer.isolation.level = read_committed\n",
			OffsetResetLatest, ReadCommitted},
		{"flow consumer", "a->b.consumer.isolation.level = READ_COMMITTED\n", OffsetResetEarliest, ReadCommitted},
		{"cluster beats flow", "a->b.consumer.isolation.level = read_committed\na.consumer.isolation.level = read_uncommitted\n",
			OffsetResetEarliest, ReadUncommitted},
		{"flow source.consumer beats cluster", "a.consumer.auto.offset.reset = earliest\na->b.source.consumer.auto.offset.reset = latest\n",
			OffsetResetLatest, ReadCommitted},
		{"target settings do not count", "b.consumer.auto.offset.reset = latest\nb.consumer.isolation.level = read_uncommitted\n", OffsetResetEarliest, ReadCommitted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := mustLoad(t, twoClusters+tt.extra)
			f := c.Flow("a", "b")
			require.Equal(t, tt.reset, f.SourceAutoOffsetReset)
			require.Equal(t, tt.isolation, f.SourceIsolationLevel)
		})
	}
}

// TestValidationErrors checks single problems and that every problem of a
// file is reported at once.
func TestValidationErrors(t *testing.T) {
	tests := []struct {
		name string
		text string
		want []string
	}{
		{"missing clusters", "a.bootstrap.servers = x:1\n", []string{"clusters: missing"}},
		{"empty clusters", "clusters = \n", []string{`clusters: empty (got "", want`}},
		{"no enabled flow", strings.Replace(twoClusters, "a->b.enabled = true", "a->b.enabled = false", 1),
			[]string{"no source->target replication flows"}},
		{"missing bootstrap", "clusters = a, b\na.bootstrap.servers = x:1\na->b.enabled = true\n",
			[]string{`b.bootstrap.servers: missing for cluster "b" of an enabled flow`}},
		{"unknown flow cluster", twoClusters + "a->c.topics = x\n",
			[]string{`a->c.topics: names no replication flow between configured clusters (got "a->c"`}},
		{"negative interval", twoClusters + "a->b.sync.group.offsets.interval.seconds = -2\n",
			[]string{`a->b.sync.group.offsets.interval.seconds: out of range (got "-2", want -1 (disabled) or 1..`}},
		{"regex names the pattern", twoClusters + "groups = ok.*, (bad\n",
			[]string{`groups: invalid regular expression "(bad" (got "ok.*, (bad"`}},
		{"java-only regex syntax", twoClusters + "topics = a*+\n",
			[]string{`topics: invalid regular expression "a*+"`}},
		{"offset syncs rule", twoClusters + "emit.offset-syncs.enabled = false\na->b.offset-syncs.topic.replication.factor = 1\n",
			[]string{"emit.offset-syncs.enabled: offset syncs are disabled while a->b.offset-syncs.topic.replication.factor is set"}},
		{"everything at once", "clusters = a, b\na->b.enabled = true\nreplication.factor = x\ntopics = (\n", []string{
			`replication.factor: not an integer (got "x"`,
			`topics: invalid regular expression "("`,
			"a.bootstrap.servers: missing",
			"b.bootstrap.servers: missing",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := loadErr(t, tt.text)
			for _, w := range tt.want {
				require.Contains(t, msg, w)
			}
		})
	}
}

// TestEmitOffsetSyncsDisabledWithoutOffsetSyncKeys is the valid variant of
// MM2's testReplicationWithoutOffsetSyncWillNotCreateOffsetSyncsTopic.
func TestEmitOffsetSyncsDisabledWithoutOffsetSyncKeys(t *testing.T) {
	c, _ := mustLoad(t, twoClusters+"emit.offset-syncs.enabled = false\n")
	require.False(t, c.Flow("a", "b").EmitOffsetSyncsEnabled)
}

// TestCheckpointDependencies: MM2's checkpoint connector does not run
// without offset syncs or with checkpoints disabled, and group offsets are
// synced only by its tasks.
func TestCheckpointDependencies(t *testing.T) {
	tests := []struct {
		name              string
		extra             string
		checkpoints, sync bool
		warns             bool
	}{
		{"defaults", "", true, false, false},
		{"sync on", "sync.group.offsets.enabled = true\n", true, true, false},
		{"no checkpoints", "sync.group.offsets.enabled = true\nemit.checkpoints.enabled = false\n", false, false, true},
		{"checkpoint interval -1", "a->b.sync.group.offsets.enabled = true\nemit.checkpoints.interval.seconds = -1\n", false, false, true},
		{"no offset syncs", "sync.group.offsets.enabled = true\nemit.offset-syncs.enabled = false\n", false, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, ws := mustLoad(t, twoClusters+tt.extra)
			f := c.Flow("a", "b")
			require.Equal(t, tt.checkpoints, f.EmitCheckpointsEnabled)
			require.Equal(t, tt.sync, f.SyncGroupOffsetsEnabled)
			warned := false
			for _, w := range ws {
				warned = warned || strings.Contains(w.Message, "group offsets are synced by the checkpoint tasks")
			}
			require.Equal(t, tt.warns, warned)
		})
	}
}

// TestProvenanceHeaders: mm2go.provenance.headers defaults to auto, which
// turns the loop guard on only for active/active under the identity policy.
func TestProvenanceHeaders(t *testing.T) {
	const identity = "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n"
	tests := []struct {
		name     string
		extra    string
		ab, ba   bool
		problems string
	}{
		{"default policy, one way", "", false, false, ""},
		{"default policy, both ways", "b->a.enabled = true\n", false, false, ""},
		{"identity, one way", identity, false, false, ""},
		{"identity, both ways", identity + "b->a.enabled = true\n", true, true, ""},
		{"forced on", "mm2go.provenance.headers = true\n", true, true, ""},
		{"forced off", identity + "b->a.enabled = true\na->b.mm2go.provenance.headers = false\n", false, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := mustLoad(t, twoClusters+tt.extra)
			require.Equal(t, tt.ab, c.Flow("a", "b").ProvenanceHeaders, "a->b")
			require.Equal(t, tt.ba, c.Flow("b", "a").ProvenanceHeaders, "b->a")
		})
	}
	_, _, err := load(t, twoClusters+"mm2go.provenance.headers = sometimes\n", nil, t.TempDir())
	require.ErrorContains(t, err, `mm2go.provenance.headers: invalid value (got "sometimes", want auto, true or false)`)
}

// TestCopyMode: mm2go.copy.mode defaults to batches, with
// mm2go.copy.fencing = epoch; both are set per flow; the record mode does not
// fence (an explicit epoch there is a warning); a flow with provenance
// headers copies records (a warning only where batches was asked for); a
// value other than the modes is refused with the key named.
func TestCopyMode(t *testing.T) {
	c, ws := mustLoad(t, twoClusters+"b->a.enabled = true\na->b.mm2go.copy.mode = Records\n")
	require.Equal(t, CopyRecords, c.Flow("a", "b").CopyMode)
	require.Equal(t, FencingNone, c.Flow("a", "b").Fencing)
	require.Equal(t, CopyBatches, c.Flow("b", "a").CopyMode)
	require.Equal(t, FencingEpoch, c.Flow("b", "a").Fencing)
	require.Empty(t, warnOnly(ws))

	c, _ = mustLoad(t, twoClusters+"mm2go.copy.fencing = none\n")
	require.Equal(t, CopyBatches, c.Flow("a", "b").CopyMode)
	require.Equal(t, FencingNone, c.Flow("a", "b").Fencing)

	_, ws = mustLoad(t, twoClusters+"a->b.mm2go.copy.mode = records\na->b.mm2go.copy.fencing = epoch\n")
	require.Len(t, warnOnly(ws), 1)
	require.Contains(t, warnOnly(ws)[0], "mm2go.copy.fencing: no effect for flow a->b")

	identity := twoClusters + "b->a.enabled = true\nreplication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n"
	c, ws = mustLoad(t, identity)
	for _, f := range c.Flows {
		require.True(t, f.ProvenanceHeaders, f.Name())
		require.Equal(t, CopyRecords, f.CopyMode, f.Name())
		require.Equal(t, FencingNone, f.Fencing, f.Name())
	}
	require.Empty(t, warnOnly(ws))
	_, ws = mustLoad(t, identity+"a->b.mm2go.copy.mode = batches\n")
	require.Len(t, warnOnly(ws), 1)
	require.Contains(t, warnOnly(ws)[0], "mm2go.copy.mode: no effect for flow a->b: provenance headers are added to records")

	_, _, err := load(t, twoClusters+"mm2go.copy.mode = bytes\n", nil, t.TempDir())
	require.ErrorContains(t, err, `mm2go.copy.mode: invalid value (got "bytes", want batches or records)`)
}

// TestFetchOverlap: mm2go.fetch.overlap.enabled is off by default, set per
// flow, and has no effect (a warning naming the key) on a flow that copies
// records; mm2go.fetch.far.threshold.ms is 15 by default, 0 or more.
func TestFetchOverlap(t *testing.T) {
	c, ws := mustLoad(t, twoClusters+"b->a.enabled = true\na->b.mm2go.fetch.overlap.enabled = true\n")
	require.Empty(t, warnOnly(ws))
	require.True(t, c.Flow("a", "b").FetchOverlap)
	require.False(t, c.Flow("b", "a").FetchOverlap)
	require.Equal(t, 15*time.Millisecond, c.Flow("a", "b").FetchFarThreshold)
	c, _ = mustLoad(t, twoClusters+"mm2go.fetch.far.threshold.ms = 0\n")
	require.Zero(t, c.Flow("a", "b").FetchFarThreshold)
	_, _, err := load(t, twoClusters+"mm2go.fetch.far.threshold.ms = -1\n", nil, t.TempDir())
	require.ErrorContains(t, err, "mm2go.fetch.far.threshold.ms")

	_, ws = mustLoad(t, twoClusters+"mm2go.fetch.overlap.enabled = true\na->b.mm2go.copy.mode = records\n")
	require.Len(t, warnOnly(ws), 1)
	require.Contains(t, warnOnly(ws)[0], "mm2go.fetch.overlap.enabled: no effect for flow a->b: only the batches copy mode")

	_, _, err = load(t, twoClusters+"mm2go.fetch.overlap.enabled = sometimes\n", nil, t.TempDir())
	require.ErrorContains(t, err, "mm2go.fetch.overlap.enabled")
}

// warnOnly returns the warnings (not the notes) of a load as "key: message".
func warnOnly(ws []Warning) []string {
	var out []string
	for _, w := range ws {
		if w.Level == LevelWarn {
			out = append(out, w.String())
		}
	}
	return out
}

// TestHugeValues: a 10 MB pattern list gives a short error at once (the
// value was printed twice in full, and a valid one of 9.7 MB took 18 s and
// 578 MB to compile), and long values are cut in every message.
func TestHugeValues(t *testing.T) {
	huge := strings.Repeat("topic-with-a-long-name-", 10<<20/23)
	before := cpuTime(t)
	_, _, err := Parse([]byte(twoClusters+"topics.exclude = "+huge+"\n"), t.TempDir())
	// CPU time, not wall time: the test may share the machine with brokers
	// (one run under load took 1.6 s of CPU; the defect took 18 s).
	limit := 3 * time.Second
	if raceEnabled {
		limit *= 10
	}
	require.Less(t, cpuTime(t)-before, limit, "18 s before the limit")
	require.ErrorContains(t, err, "topics.exclude: too long (got 104857")
	require.Less(t, len(err.Error()), 1024)

	_, _, err = Parse([]byte(twoClusters+"a->b.offset.lag.max = "+strings.Repeat("9", 100000)+"x\n"), t.TempDir())
	require.ErrorContains(t, err, "a->b.offset.lag.max")
	require.ErrorContains(t, err, "bytes left out")
	require.Less(t, len(err.Error()), 1024)
}

// cpuTime is the CPU time the test process used so far (user and system).
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestExactlyOnceKeys: <target>.exactly.once.source.support = enabled makes
// a flow into the target exactly-once (records, no epoch fencing of its
// own), with Connect's transaction boundary keys per flow and MM2's rule
// for exactly.once.support = required.
func TestExactlyOnceKeys(t *testing.T) {
	c, ws := mustLoad(t, twoClusters+"b.exactly.once.source.support = enabled\nb.offset.flush.interval.ms = 300\nmm2go.copy.mode = batches\n")
	f := c.Flow("a", "b")
	require.True(t, f.ExactlyOnce)
	require.Equal(t, CopyRecords, f.CopyMode)
	require.Equal(t, FencingNone, f.Fencing)
	require.Equal(t, BoundaryPoll, f.TransactionBoundary)
	require.Equal(t, 300*time.Millisecond, f.TransactionBoundaryInterval)
	require.True(t, hasWarning(ws, "mm2go.copy.mode", "exactly-once copies records"))
	require.False(t, c.Flow("b", "a").ExactlyOnce, "flows into a")

	c, _ = mustLoad(t, twoClusters+"b.exactly.once.source.support = enabled\na->b.transaction.boundary = interval\na->b.transaction.boundary.interval.ms = 250\n")
	f = c.Flow("a", "b")
	require.Equal(t, BoundaryInterval, f.TransactionBoundary)
	require.Equal(t, 250*time.Millisecond, f.TransactionBoundaryInterval)

	c, ws = mustLoad(t, twoClusters+"b.exactly.once.source.support = preparing\nexactly.once.source.support = enabled\na->b.exactly.once.support = required\n")
	require.False(t, c.Flow("a", "b").ExactlyOnce)
	require.Equal(t, CopyBatches, c.Flow("a", "b").CopyMode)
	require.True(t, hasWarning(ws, "exactly.once.source.support", "set <target>.exactly.once.source.support"))
	require.True(t, hasWarning(ws, "a->b.exactly.once.support", "not enabled"))

	require.Contains(t, loadErr(t, twoClusters+"b.exactly.once.source.support = enabled\na->b.transaction.boundary = connector\n"),
		`a->b.transaction.boundary: invalid value (got "connector", want poll or interval)`)
	require.Contains(t, loadErr(t, twoClusters+"b.exactly.once.source.support = enabled\na->b.exactly.once.support = required\na.consumer.isolation.level = read_uncommitted\n"),
		"isolation.level is read_uncommitted")
	_, ws = mustLoad(t, twoClusters+"b.exactly.once.source.support = enabled\na.consumer.isolation.level = read_uncommitted\n")
	require.True(t, hasWarning(ws, "b.exactly.once.source.support", "aborted source transactions are copied"))
	require.Contains(t, loadErr(t, twoClusters+"b.exactly.once.source.support = on\n"), "b.exactly.once.source.support: invalid value")
}

package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Dump renders the effective configuration as deterministic text: the
// clusters, then every flow with each setting under its MM2 key, then the
// effective properties of the flow's six clients. Secrets print as
// "<secret>". The format is for humans and golden tests, not for parsing.
func (c *Config) Dump() string {
	var sb strings.Builder
	aliases := make([]string, len(c.Clusters))
	for i, cl := range c.Clusters {
		aliases[i] = cl.Alias
	}
	fmt.Fprintf(&sb, "clusters = %s\n", strings.Join(aliases, ", "))
	for _, cl := range c.Clusters {
		fmt.Fprintf(&sb, "\ncluster %s\n", cl.Alias)
		fmt.Fprintf(&sb, "  bootstrap.servers = %s\n", strings.Join(cl.BootstrapServers, ","))
	}
	for _, f := range c.Flows {
		sb.WriteString("\n")
		f.dump(&sb, false)
	}
	return sb.String()
}

// Fingerprint returns a stable hash of every effective setting of the flow,
// including its clients' properties, the values of its secrets and the
// contents of the TLS files it read. Two loads give the same fingerprint
// for a flow exactly when the flow would run the same way, so a reload can
// restart only the flows whose fingerprint changed.
func (f *Flow) Fingerprint() string {
	var sb strings.Builder
	f.dump(&sb, true)
	sum := sha256.Sum256([]byte(sb.String()))
	return hex.EncodeToString(sum[:])
}

// dump writes one flow. With forHash, secrets are written as digests and
// the digests of files read are included.
func (f *Flow) dump(sb *strings.Builder, forHash bool) {
	line := func(k string, v any) { fmt.Fprintf(sb, "  %s = %v\n", k, v) }
	list := func(l []string) string { return strings.Join(l, ", ") }
	secs := func(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) }
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

	fmt.Fprintf(sb, "flow %s\n", f.Name())
	line(keyEnabled, f.Enabled)
	line(keyTopics, list(f.Topics))
	line(keyTopicsExclude, list(f.TopicsExclude))
	line(keyGroups, list(f.Groups))
	line(keyGroupsExclude, list(f.GroupsExclude))
	line(keyConfigPropertiesExclude, list(f.ConfigPropertiesExclude))
	line(keyReplicationFactor, f.ReplicationFactor)
	line(keyOffsetSyncsRF, f.OffsetSyncsTopicReplicationFactor)
	line(keyCheckpointsRF, f.CheckpointsTopicReplicationFactor)
	line(keyHeartbeatsRF, f.HeartbeatsTopicReplicationFactor)
	line(keyPolicyClass, f.ReplicationPolicyClass)
	sep := strconv.Quote(f.ReplicationPolicySeparator)
	if !f.ReplicationPolicySeparatorSet {
		sep += " (default)"
	}
	line(keyPolicySeparator, sep)
	line(keyPolicyInternalSeparator, f.ReplicationPolicyInternalTopicSeparatorEnabled)
	line(keyRefreshTopicsEnabled, f.RefreshTopicsEnabled)
	line(keyRefreshTopicsInterval, secs(f.RefreshTopicsInterval))
	line(keyRefreshGroupsEnabled, f.RefreshGroupsEnabled)
	line(keyRefreshGroupsInterval, secs(f.RefreshGroupsInterval))
	line(keySyncTopicConfigsEnabled, f.SyncTopicConfigsEnabled)
	line(keySyncTopicConfigsInterval, secs(f.SyncTopicConfigsInterval))
	line(keySyncTopicAclsEnabled, f.SyncTopicAclsEnabled)
	line(keySyncTopicAclsInterval, secs(f.SyncTopicAclsInterval))
	line(keyConfigsKeep, strings.Join(f.TopicConfigsKeep, ", "))
	line(keyACLSyncMode, f.ACLSyncMode)
	line(keyEmitHeartbeatsEnabled, f.EmitHeartbeatsEnabled)
	line(keyEmitHeartbeatsInterval, secs(f.EmitHeartbeatsInterval))
	line(keyHeartbeatsReplicationEnabled, f.HeartbeatsReplicationEnabled)
	line(keyEmitCheckpointsEnabled, f.EmitCheckpointsEnabled)
	line(keyEmitCheckpointsInterval, secs(f.EmitCheckpointsInterval))
	line(keySyncGroupOffsetsEnabled, f.SyncGroupOffsetsEnabled)
	line(keySyncGroupOffsetsInterval, secs(f.SyncGroupOffsetsInterval))
	line(keyGroupSyncMode, f.GroupSyncMode)
	line(keyGroupSyncWatch, ms(f.GroupSyncWatchInterval))
	line(keyEmitOffsetSyncsEnabled, f.EmitOffsetSyncsEnabled)
	line(keyOffsetSyncsLocation, f.OffsetSyncsTopicLocation)
	line(keyOffsetLagMax, f.OffsetLagMax)
	line(keyProvenanceHeaders, fmt.Sprintf("%v (%s)", f.ProvenanceHeaders, f.provenanceMode))
	line(keyCopyMode, f.CopyMode)
	line(keyFencing, f.Fencing)
	if f.ExactlyOnce {
		line(keyExactlyOnceSource+" (worker)", "enabled")
		line(keyTransactionBoundary, f.TransactionBoundary)
		if f.TransactionBoundary == BoundaryInterval {
			line(keyTransactionBoundaryInterval, ms(f.TransactionBoundaryInterval))
		}
	}
	line(keyThrottle, f.ThrottleBytesPerSecond)
	line(keyFetchOverlap, f.FetchOverlap)
	line(keyFetchFar, ms(f.FetchFarThreshold))
	line(keyUseDefaultsFrom, f.UseDefaultsFrom)
	line(keyTasksMax, f.TasksMax)
	line(keyAdminTimeout, ms(f.AdminTimeout))
	line(keyConsumerPollTimeout, ms(f.ConsumerPollTimeout))
	line(keyOffsetStorageTopic, f.OffsetStorageTopic)
	line(keyOffsetStoragePartitions, f.OffsetStoragePartitions)
	line(keyOffsetStorageRF, f.OffsetStorageReplicationFactor)
	line(keyOffsetFlushInterval, ms(f.OffsetFlushInterval))
	line("source.consumer."+keyAutoOffsetReset+" (effective)", f.SourceAutoOffsetReset)
	line("source.consumer."+keyIsolationLevel+" (effective)", f.SourceIsolationLevel)
	for _, r := range Roles() {
		c := f.clients[r]
		fmt.Fprintf(sb, "  client %s on %s (%s)\n", r, c.Cluster, c.SecurityProtocol)
		for _, p := range c.props {
			v := displayValue(p.key, p.value.Reveal())
			if forHash && isSecretKey(p.key) {
				sum := sha256.Sum256([]byte(p.value.Reveal()))
				v = "sha256:" + hex.EncodeToString(sum[:])
			}
			fmt.Fprintf(sb, "    %s = %s\n", p.key, v)
		}
		if forHash {
			for _, m := range c.material {
				fmt.Fprintf(sb, "    file %s\n", m)
			}
		}
	}
}

package config

import "strings"

// MM2 property names read by this package. They are never renamed.
const (
	keyClusters        = "clusters"
	keyConfigProviders = "config.providers"
	keyInternalRest    = "dedicated.mode.enable.internal.rest"

	keyEnabled                      = "enabled"
	keySourceClusterAlias           = "source.cluster.alias"
	keyTargetClusterAlias           = "target.cluster.alias"
	keyTopics                       = "topics"
	keyTopicsExclude                = "topics.exclude"
	keyGroups                       = "groups"
	keyGroupsExclude                = "groups.exclude"
	keyConfigPropertiesExclude      = "config.properties.exclude"
	keyReplicationFactor            = "replication.factor"
	keyOffsetSyncsRF                = "offset-syncs.topic.replication.factor"
	keyCheckpointsRF                = "checkpoints.topic.replication.factor"
	keyHeartbeatsRF                 = "heartbeats.topic.replication.factor"
	keyPolicyClass                  = "replication.policy.class"
	keyPolicySeparator              = "replication.policy.separator"
	keyPolicyInternalSeparator      = "replication.policy.internal.topic.separator.enabled"
	keyRefreshTopicsEnabled         = "refresh.topics.enabled"
	keyRefreshTopicsInterval        = "refresh.topics.interval.seconds"
	keyRefreshGroupsEnabled         = "refresh.groups.enabled"
	keyRefreshGroupsInterval        = "refresh.groups.interval.seconds"
	keySyncTopicConfigsEnabled      = "sync.topic.configs.enabled"
	keySyncTopicConfigsInterval     = "sync.topic.configs.interval.seconds"
	keySyncTopicAclsEnabled         = "sync.topic.acls.enabled"
	keySyncTopicAclsInterval        = "sync.topic.acls.interval.seconds"
	keyEmitHeartbeatsEnabled        = "emit.heartbeats.enabled"
	keyEmitHeartbeatsInterval       = "emit.heartbeats.interval.seconds"
	keyHeartbeatsReplicationEnabled = "heartbeats.replication.enabled"
	keyEmitCheckpointsEnabled       = "emit.checkpoints.enabled"
	keyEmitCheckpointsInterval      = "emit.checkpoints.interval.seconds"
	keySyncGroupOffsetsEnabled      = "sync.group.offsets.enabled"
	keySyncGroupOffsetsInterval     = "sync.group.offsets.interval.seconds"
	keyEmitOffsetSyncsEnabled       = "emit.offset-syncs.enabled"
	keyOffsetSyncsLocation          = "offset-syncs.topic.location"
	keyOffsetLagMax                 = "offset.lag.max"
	keyUseDefaultsFrom              = "use.defaults.from"
	keyTasksMax                     = "tasks.max"
	keyAdminTimeout                 = "admin.timeout.ms"
	keyConsumerPollTimeout          = "consumer.poll.timeout.ms"
	keyTopicFilterClass             = "topic.filter.class"
	keyGroupFilterClass             = "group.filter.class"
	keyConfigPropertyFilterClass    = "config.property.filter.class"
	keyForwardingAdminClass         = "forwarding.admin.class"
	keyExactlyOnceSupport           = "exactly.once.support"
	keyTransactionBoundary          = "transaction.boundary"
	keyTransactionBoundaryInterval  = "transaction.boundary.interval.ms"
	keyTransforms                   = "transforms"
	keyPredicates                   = "predicates"

	// keyProvenanceHeaders is mm2go's own key (no MM2 equivalent): whether
	// copied records carry a header naming their origin cluster, which
	// keeps active/active replication under the identity policy from
	// looping.
	keyProvenanceHeaders = "mm2go.provenance.headers"
	// keyCopyMode is mm2go's own key: how records are copied, decoded and
	// re-batched ("records") or fetched batches forwarded ("batches").
	keyCopyMode = "mm2go.copy.mode"
	// keyFencing is mm2go's own key: whether the batches mode's writer
	// fences older writers with its transactional id's epoch ("epoch") or
	// relies on the flow's lease alone ("none").
	keyFencing = "mm2go.copy.fencing"
	// keyThrottle is mm2go's own key: the most source bytes per second a
	// flow copies (0: no limit).
	keyThrottle = "mm2go.throttle.bytes.per.second"
	// keyFetchOverlap is mm2go's own key: whether the batches mode keeps a
	// second Fetch in flight to a far source broker whose partitions are
	// caught up, half a cycle after the first (lower latency, each record
	// crosses the link twice).
	keyFetchOverlap = "mm2go.fetch.overlap.enabled"
	// keyFetchFar is mm2go's own key: the round trip in milliseconds from
	// which the batches mode treats a source broker as far away.
	keyFetchFar = "mm2go.fetch.far.threshold.ms"
	// keyGroupSyncMode is mm2go's own key: when group-offset sync commits
	// into target groups ("exact": only once the source group is empty;
	// "periodic": MM2's rule).
	keyGroupSyncMode = "mm2go.sync.group.offsets.mode"
	// keyGroupSyncWatch is mm2go's own key: how often the exact group-offset
	// sync looks at the source groups' states, in milliseconds.
	keyGroupSyncWatch = "mm2go.sync.group.offsets.watch.interval.ms"
	// keyACLSyncMode is mm2go's own key: which topic ACLs ACL sync copies
	// ("read": only what lets principals read; "mm2": MM2's rule).
	keyACLSyncMode = "mm2go.sync.topic.acls.mode"
	// keyConfigsKeep is mm2go's own key: topic config keys that the
	// periodic topic-config sync never changes on remote topics.
	keyConfigsKeep = "mm2go.sync.topic.configs.keep"

	keyOffsetStorageTopic      = "offset.storage.topic"
	keyOffsetStoragePartitions = "offset.storage.partitions"
	keyOffsetStorageRF         = "offset.storage.replication.factor"
	keyOffsetFlushInterval     = "offset.flush.interval.ms"
	keyExactlyOnceSource       = "exactly.once.source.support"

	keyBootstrapServers = "bootstrap.servers"
	keyClientID         = "client.id"
	keySecurityProtocol = "security.protocol"
	keyAutoOffsetReset  = "auto.offset.reset"
	keyIsolationLevel   = "isolation.level"
	keyEnableAutoCommit = "enable.auto.commit"
)

// clientConfigKeys returns the names in MM2's CLIENT_CONFIG_DEF
// (MirrorClientConfig): bootstrap.servers, security.protocol and every client
// ssl.* and sasl.* key. Cluster-level values of these keys fan out to the
// cluster's producer, consumer and admin.
func clientConfigKeys() []string {
	return []string{
		keyBootstrapServers, keySecurityProtocol,
		"ssl.protocol", "ssl.provider", "ssl.cipher.suites", "ssl.enabled.protocols",
		"ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
		"ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.truststore.certificates",
		"ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
		"ssl.keymanager.algorithm", "ssl.trustmanager.algorithm", "ssl.endpoint.identification.algorithm",
		"ssl.secure.random.implementation", "ssl.engine.factory.class",
		"sasl.kerberos.service.name", "sasl.kerberos.kinit.cmd", "sasl.kerberos.ticket.renew.window.factor",
		"sasl.kerberos.ticket.renew.jitter", "sasl.kerberos.min.time.before.relogin",
		"sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
		"sasl.login.refresh.min.period.seconds", "sasl.login.refresh.buffer.seconds",
		"sasl.mechanism", "sasl.jaas.config", "sasl.client.callback.handler.class",
		"sasl.login.callback.handler.class", "sasl.login.class", "sasl.login.connect.timeout.ms",
		"sasl.login.read.timeout.ms", "sasl.login.retry.backoff.max.ms", "sasl.login.retry.backoff.ms",
		"sasl.oauthbearer.scope.claim.name", "sasl.oauthbearer.sub.claim.name",
		"sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.jwks.endpoint.url",
		"sasl.oauthbearer.jwks.endpoint.refresh.ms", "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
		"sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", "sasl.oauthbearer.clock.skew.seconds",
		"sasl.oauthbearer.expected.audience", "sasl.oauthbearer.expected.issuer",
		"sasl.oauthbearer.header.urlencode",
	}
}

// isClientConfigKey reports whether k is in CLIENT_CONFIG_DEF.
func isClientConfigKey(k string) bool {
	for _, c := range clientConfigKeys() {
		if c == k {
			return true
		}
	}
	return false
}

// isConnectorKey reports whether k is defined in the union of the
// MirrorSource, MirrorCheckpoint and MirrorHeartbeat ConfigDefs (which
// include Connect's ConnectorConfig). Only such keys survive at top level in
// MM2's connectorBaseConfig.
func isConnectorKey(k string) bool {
	switch k {
	// Connect ConnectorConfig.
	case "name", "connector.class", keyTasksMax, "tasks.max.enforce", "key.converter", "value.converter",
		"header.converter", keyTransforms, keyPredicates, "config.action.reload", "errors.retry.timeout",
		"errors.retry.delay.max.ms", "errors.tolerance", "errors.log.enable", "errors.log.include.messages":
		return true
	// MirrorConnectorConfig base.
	case keyEnabled, keySourceClusterAlias, keyTargetClusterAlias, keyAdminTimeout, keyPolicyClass,
		keyPolicySeparator, keyPolicyInternalSeparator, keyForwardingAdminClass, "metric.reporters",
		keySecurityProtocol:
		return true
	// MirrorSourceConfig.
	case keyTopics, keyTopicsExclude, keyConfigPropertiesExclude, keyTopicFilterClass,
		keyConfigPropertyFilterClass, keyConsumerPollTimeout, keyRefreshTopicsEnabled, keyRefreshTopicsInterval,
		keySyncTopicConfigsEnabled, keySyncTopicConfigsInterval, keySyncTopicAclsEnabled, keySyncTopicAclsInterval,
		keyReplicationFactor, keyOffsetSyncsRF, keyOffsetLagMax, keyOffsetSyncsLocation, keyEmitOffsetSyncsEnabled,
		keyHeartbeatsReplicationEnabled:
		return true
	// mm2go's own connector keys.
	case keyProvenanceHeaders, keyCopyMode, keyFencing, keyThrottle, keyFetchOverlap, keyFetchFar, keyGroupSyncMode, keyGroupSyncWatch, keyACLSyncMode, keyConfigsKeep:
		return true
	// MirrorCheckpointConfig.
	case keyGroups, keyGroupsExclude, keyGroupFilterClass, keyRefreshGroupsEnabled, keyRefreshGroupsInterval,
		keyEmitCheckpointsEnabled, keyEmitCheckpointsInterval, keySyncGroupOffsetsEnabled,
		keySyncGroupOffsetsInterval, keyCheckpointsRF:
		return true
	// MirrorHeartbeatConfig.
	case keyEmitHeartbeatsEnabled, keyEmitHeartbeatsInterval, keyHeartbeatsRF:
		return true
	}
	// withClientSslSupport / withClientSaslSupport.
	return k != keyBootstrapServers && isClientConfigKey(k)
}

// hasWorkerPrefix reports whether a top-level key is copied into every
// Connect worker config by MM2's workerConfig.
func hasWorkerPrefix(k string) bool {
	for _, p := range []string{"offset.storage", "config.storage", "status.storage", "key.converter",
		"value.converter", "header.converter", "task", "worker", "replication.policy"} {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// hasClientPrefix reports whether a cluster-level key is a client key in the
// sense of MM2's clientConfigsWithPrefix: it matches
// (^consumer.*|^producer.*|^admin.*), i.e. merely starts with one of the three
// words.
func hasClientPrefix(k string) bool {
	return strings.HasPrefix(k, "consumer") || strings.HasPrefix(k, "producer") || strings.HasPrefix(k, "admin")
}

// isSecretKey reports whether a key holds a secret whose value must never be
// printed. It matches Kafka's PASSWORD-typed client keys and anything that
// ends in "password" or "secret", with or without a prefix, and, so that a
// mistyped key does not print its value, any key that mentions a password,
// secret, JAAS config, token or credential.
func isSecretKey(k string) bool {
	for _, s := range []string{"sasl.jaas.config", "ssl.keystore.key", "ssl.keystore.certificate.chain",
		"ssl.truststore.certificates", "password", "secret"} {
		if strings.HasSuffix(k, s) {
			return true
		}
	}
	l := strings.ToLower(k)
	for _, s := range []string{"pass", "secret", "jaas", "token", "credential"} {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// removedKey returns the replacement of a key Kafka 4.0 removed from MM2.
func removedKey(k string) (replacement string, ok bool) {
	switch k {
	case "topics.blacklist":
		return "topics.exclude", true
	case "groups.blacklist":
		return "groups.exclude", true
	case "config.properties.blacklist":
		return "config.properties.exclude", true
	case "add.source.alias.to.metrics":
		return "nothing: the source tag is always present (and mm2go's metrics always carry a source label)", true
	case "use.incremental.alter.configs":
		return "nothing: topic configs are always synced with IncrementalAlterConfigs", true
	}
	return "", false
}

// workerKeyNotNeeded reports whether k is a Connect worker setting that MM2
// uses and mm2go has no use for (mm2go runs no Connect worker).
func workerKeyNotNeeded(k string) bool {
	for _, p := range []string{"status.storage.", "config.storage.", "key.converter", "value.converter",
		"header.converter", "task.", "worker.", "inter.worker.", "metrics.", "rest.", "admin.listeners",
		"listeners.https.", "producer.override.", "consumer.override.", "admin.override."} {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	switch k {
	case "group.id", keyClientID, "connect.protocol", "scheduled.rebalance.max.delay.ms", "offset.flush.timeout.ms",
		"session.timeout.ms", "heartbeat.interval.ms", "rebalance.timeout.ms", "worker.sync.timeout.ms",
		"worker.unsync.backoff.ms", "connector.client.config.override.policy", "topic.creation.enable",
		"topic.tracking.enable", "topic.tracking.allow.reset", "plugin.path", "plugin.discovery",
		"listeners", "access.control.allow.origin", "access.control.allow.methods",
		"response.http.headers.config", "rest.extension.classes", "ssl.client.auth",
		"metric.reporters", "auto.include.jmx.reporter", "request.timeout.ms", "retry.backoff.ms", "retry.backoff.max.ms", "reconnect.backoff.ms",
		"reconnect.backoff.max.ms", "metadata.max.age.ms", "connections.max.idle.ms", "receive.buffer.bytes",
		"send.buffer.bytes", "client.dns.lookup", "socket.connection.setup.timeout.ms",
		"socket.connection.setup.timeout.max.ms", "offset.storage.file.filename":
		return true
	}
	return false
}

// restKeyNotNeeded reports whether a top-level key configures MM2's internal
// REST server (KIP-710), which mm2go does not run.
func restKeyNotNeeded(k string) bool {
	if strings.HasPrefix(k, "rest.") || strings.HasPrefix(k, "listeners.https.") ||
		strings.HasPrefix(k, "admin.listeners") {
		return true
	}
	switch k {
	case "listeners", "access.control.allow.origin", "access.control.allow.methods",
		"response.http.headers.config", "ssl.client.auth", "rest.extension.classes":
		return true
	}
	return false
}

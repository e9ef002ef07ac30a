package config

import (
	"strings"
)

// classifyKeys looks at every key once and reports keys that are unknown,
// ignored, not needed by mm2go, or without effect in MM2 itself. Values of
// the keys mm2go uses are checked later, where they are parsed.
func (p *parser) classifyKeys() {
	if len(p.aliases) == 0 {
		return // without clusters no key can be told apart; "clusters" is reported
	}
	for _, k := range p.raw.keys {
		switch {
		case k == keyClusters || k == keyConfigProviders || strings.HasPrefix(k, keyConfigProviders+"."):
			// Parsed by parseClusters and parseProviders.
		case strings.Contains(k, "->"):
			p.classifyFlowKey(k)
		default:
			if alias, sub, ok := p.matchAlias(k); ok {
				p.classifyClusterKey(k, alias, sub)
			} else {
				p.classifyTopKey(k)
			}
		}
	}
}

// hasKey reports whether the file sets k.
func (p *parser) hasKey(k string) bool {
	_, ok := p.raw.values[k]
	return ok
}

// matchAlias returns the longest cluster alias that prefixes k with a dot.
func (p *parser) matchAlias(k string) (alias, sub string, ok bool) {
	for _, a := range p.aliases {
		if strings.HasPrefix(k, a+".") && len(a) > len(alias) {
			alias, sub, ok = a, k[len(a)+1:], true
		}
	}
	return alias, sub, ok
}

// matchFlow returns the source and target of a "<s>-><t>.<sub>" key.
func (p *parser) matchFlow(k string) (s, t, sub string, ok bool) {
	best := -1
	for _, a := range p.aliases {
		for _, b := range p.aliases {
			prefix := a + "->" + b + "."
			if a != b && strings.HasPrefix(k, prefix) && len(prefix) > best {
				s, t, sub, ok, best = a, b, k[len(prefix):], true, len(prefix)
			}
		}
	}
	return s, t, sub, ok
}

// classifyTopKey handles a key without cluster or flow prefix.
func (p *parser) classifyTopKey(k string) {
	v := p.raw.values[k]
	switch {
	case k == keyInternalRest:
		b, ok := parseBool(v)
		switch {
		case !ok:
			p.probs.errorf(k, "not a boolean (got %q, want true or false)", v)
		case b:
			p.probs.warn(k, "ignored: mm2go runs no internal REST server and does not coordinate several processes; run one mm2go per set of flows")
		default:
			p.probs.info(k, "not needed by mm2go, which runs no internal REST server")
		}
	case restKeyNotNeeded(k):
		p.probs.info(k, "not needed by mm2go, which runs no internal REST server")
	case k == keyEnabled:
		p.probs.errorf(k, "top-level enabled is not supported (got %q, want <source>-><target>.enabled per flow; MM2 would hand it to every connector of every flow)", v)
	case k == keyTransforms || k == keyPredicates:
		p.transformsKey(k, v)
	case isClientConfigKey(k):
		// Top-level bootstrap/security defaults fill every cluster.
		if k == keySecurityProtocol {
			p.checkSecurityProtocol(k, v)
		}
	case isConnectorKey(k):
		p.connectorKeyNote(k, v, "")
	case k == keyUseDefaultsFrom:
		p.probs.warn(k, "no effect at top level, as in MM2, whose connectorBaseConfig drops keys the connector ConfigDefs do not define; set <source>-><target>.use.defaults.from")
	case k == keyOffsetStorageTopic || k == keyOffsetStoragePartitions || k == keyOffsetStorageRF:
		// Worker settings copied into every flow.
	case k == keyOffsetFlushInterval:
		p.probs.warn(k, "ignored, as in MM2, which copies only <alias>.* and offset.storage*/config.storage*/status.storage*/... keys into worker configs; set <target>.offset.flush.interval.ms")
	case k == keyExactlyOnceSource:
		p.probs.warn(k, "ignored, as in MM2, where only <alias>.exactly.once.source.support reaches a worker; set <target>.exactly.once.source.support")
	case hasWorkerPrefix(k):
		p.probs.info(k, "not needed by mm2go, which runs no Connect worker")
	case strings.HasPrefix(k, "consumer.") || strings.HasPrefix(k, "producer.") || strings.HasPrefix(k, "admin."):
		p.probs.warn(k, "ignored, as in MM2 dedicated mode, where top-level client settings reach no client; use <alias>.%s or <source>-><target>.%s", k, k)
	default:
		if repl, ok := removedKey(k); ok {
			p.probs.warn(k, "removed in Kafka 4.0 and ignored; use %s", repl)
			return
		}
		if workerKeyNotNeeded(k) {
			p.probs.info(k, "not needed by mm2go, which runs no Connect worker")
			return
		}
		p.probs.warn(k, "unknown key, ignored")
	}
}

// classifyClusterKey handles "<alias>.<sub>".
func (p *parser) classifyClusterKey(k, alias, sub string) {
	v := p.raw.values[k]
	switch {
	case isClientConfigKey(sub):
		// Fans out to the cluster's clients; checked when they are built.
	case strings.HasPrefix(sub, "consumer.") || strings.HasPrefix(sub, "producer.") || strings.HasPrefix(sub, "admin."):
		// Client override; checked when the clients are built.
	case hasWorkerPrefix(sub) && p.hasKey(sub):
		p.probs.warn(k, "overridden by the top-level %s, as in MM2, whose workerConfig copies top-level worker keys over the cluster's", sub)
	case sub == keyOffsetStorageTopic || sub == keyOffsetStoragePartitions || sub == keyOffsetStorageRF ||
		sub == keyOffsetFlushInterval:
		// Worker settings of flows into this cluster.
	case sub == keyExactlyOnceSource:
		switch strings.ToLower(javaTrim(v)) {
		case "disabled", "enabled":
		case "preparing":
			p.probs.info(k, "mm2go needs no preparing step (it runs no Connect worker to roll): flows into %s copy without transactions until it is enabled", alias)
		default:
			p.probs.errorf(k, "invalid value (got %q, want disabled, preparing or enabled)", v)
		}
	case isConnectorKey(sub) || sub == keyUseDefaultsFrom:
		p.probs.warn(k, "no effect, as in MM2: <alias>.* keys reach the connectors only as source.cluster.*/target.cluster.* properties, which they do not read; set %s at top level or as <source>-><target>.%s", sub, sub)
	case workerKeyNotNeeded(sub):
		p.probs.info(k, "not needed by mm2go, which runs no Connect worker")
	case hasClientPrefix(sub):
		p.probs.warn(k, "unknown key, ignored (client settings are <alias>.consumer.*, <alias>.producer.* or <alias>.admin.*)")
	default:
		if _, ok := removedKey(sub); ok {
			p.probs.warn(k, "no effect, as in MM2 (and the key was removed in Kafka 4.0)")
			return
		}
		p.probs.warn(k, "unknown key for cluster %q, ignored", alias)
	}
}

// classifyFlowKey handles "<s>-><t>.<sub>".
func (p *parser) classifyFlowKey(k string) {
	v := p.raw.values[k]
	s, t, sub, ok := p.matchFlow(k)
	if !ok {
		i := strings.Index(k, "->")
		head, rest := k[:i], k[i+2:]
		if j := strings.Index(rest, "."); j >= 0 {
			rest = rest[:j]
		}
		if head == rest {
			p.probs.errorf(k, "source and target are the same cluster (got %q, want two different aliases from clusters)", head+"->"+rest)
		} else {
			p.probs.errorf(k, "names no replication flow between configured clusters (got %q, want <source>-><target>.<key> with both aliases from clusters = %s)",
				head+"->"+rest, strings.Join(p.aliases, ", "))
		}
		return
	}
	switch {
	case sub == keyEnabled:
		if _, ok := parseBool(v); !ok {
			p.probs.warn(k, "not a boolean (got %q), so the flow is disabled, as MM2's lenient check for \"true\" decides", v)
		}
	case sub == keyTransforms || sub == keyPredicates:
		p.transformsKey(k, v)
	case sub == keySourceClusterAlias || sub == keyTargetClusterAlias:
		// Checked by buildFlow.
	case isClientConfigKey(sub):
		if sub == keySecurityProtocol {
			p.checkSecurityProtocol(k, v)
		}
		p.probs.warn(k, "no effect, as in MM2: a connector-level %s reaches no client; use <alias>.%s, or <source>-><target>.consumer.%s (and producer./admin.)", sub, sub, sub)
	case isConnectorKey(sub):
		p.connectorKeyNote(k, v, s+"->"+t)
	case sub == keyUseDefaultsFrom:
		// Read by the config-property filter from the raw connector config.
	case strings.HasPrefix(sub, "producer.override."):
		// Applied to the target producer, as Connect applies it to the worker producer.
	case strings.HasPrefix(sub, "consumer.override.") || strings.HasPrefix(sub, "admin.override."):
		p.probs.info(k, "not needed by mm2go: MM2's connectors have no Connect-managed consumer or admin to override")
	case strings.HasPrefix(sub, "consumer.") || strings.HasPrefix(sub, "producer.") || strings.HasPrefix(sub, "admin."):
		// Step 2 of the client configs; checked when the clients are built.
	case strings.HasPrefix(sub, "source.cluster.") || strings.HasPrefix(sub, "target.cluster."):
		rest := sub[strings.Index(sub, ".cluster.")+len(".cluster."):]
		if !isClientConfigKey(rest) {
			p.probs.warn(k, "no effect, as in MM2: only bootstrap.servers, security.protocol, ssl.* and sasl.* of %s are read", sub[:strings.Index(sub, ".cluster.")+len(".cluster")])
		}
	case hasSideClientPrefix(sub):
		// Step 3 of the client configs; checked when the clients are built.
	case sub == keyExactlyOnceSupport:
		switch strings.ToLower(javaTrim(v)) {
		case "requested", "required":
		default:
			p.probs.errorf(k, "invalid value (got %q, want requested or required)", v)
		}
	case sub == keyTransactionBoundary || sub == keyTransactionBoundaryInterval:
		// Read with the flow; choice rejects "connector", which MM2's
		// connector cannot use (it defines no boundaries).
	case sub == "offsets.storage.topic":
		p.probs.warn(k, "ignored: mm2go keeps source offsets only in the worker offset.storage.topic")
	case strings.HasPrefix(sub, "topic.creation."):
		p.probs.info(k, "not needed by mm2go: remote topics are created by the replicator, like MM2's MirrorSourceConnector does")
	default:
		if repl, ok := removedKey(sub); ok {
			p.probs.warn(k, "removed in Kafka 4.0 and ignored; use %s", repl)
			return
		}
		p.probs.warn(k, "unknown key for flow %s->%s, ignored", s, t)
	}
}

// hasSideClientPrefix reports whether k starts with source.consumer.,
// target.admin. and so on.
func hasSideClientPrefix(k string) bool {
	for _, side := range []string{"source.", "target."} {
		for _, kind := range []clientKind{kindConsumer, kindProducer, kindAdmin} {
			if strings.HasPrefix(k, side+string(kind)+".") {
				return true
			}
		}
	}
	return false
}

// connectorKeyNote reports connector keys that mm2go accepts but ignores, or
// rejects. flow is "" for top-level keys.
func (p *parser) connectorKeyNote(k, _, flow string) {
	sub := k
	if flow != "" {
		sub = strings.TrimPrefix(k, flow+".")
	}
	switch sub {
	case "name", "connector.class":
		p.probs.warn(k, "ignored: mm2go has no connectors to name")
	case "key.converter", "value.converter", "header.converter", "tasks.max.enforce", "config.action.reload",
		"errors.retry.timeout", "errors.retry.delay.max.ms", "errors.tolerance", "errors.log.enable",
		"errors.log.include.messages":
		p.probs.info(k, "not needed by mm2go, which copies record bytes unchanged and has no Connect framework")
	case "metric.reporters":
		p.probs.info(k, "not needed by mm2go, which exposes Prometheus metrics")
	}
}

// transformsKey rejects Connect single message transforms, which mm2go
// cannot run: records would silently differ from what MM2 produced.
func (p *parser) transformsKey(k, v string) {
	if javaTrim(v) != "" {
		p.probs.errorf(k, "Connect transforms and predicates are not supported by mm2go (got %q, want empty)", v)
	}
}

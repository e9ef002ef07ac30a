package policy

import (
	"fmt"
	"strings"
)

// Kind selects the replication policy class, the value of MM2's replication.policy.class.
type Kind int

const (
	// KindDefault is org.apache.kafka.connect.mirror.DefaultReplicationPolicy, MM2's default: remote
	// topics are named <source alias><separator><topic>.
	KindDefault Kind = iota
	// KindIdentity is org.apache.kafka.connect.mirror.IdentityReplicationPolicy: remote topics keep
	// their names, except heartbeat topics, which are still prefixed so upstream discovery works.
	KindIdentity
)

// Java class names of the two policies, as written in replication.policy.class.
const (
	DefaultPolicyClass  = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
	IdentityPolicyClass = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
)

// String returns the Java class name of the policy, or "Kind(N)" for an unknown value.
func (k Kind) String() string {
	switch k {
	case KindDefault:
		return DefaultPolicyClass
	case KindIdentity:
		return IdentityPolicyClass
	default:
		return fmt.Sprintf("Kind(%d)", int(k))
	}
}

// ParseKind maps a replication.policy.class value to a Kind. Like Java's Class.forName it needs the
// fully qualified class name (surrounding spaces are ignored, as Kafka's ConfigDef trims class
// values); any other class, including custom policies, is an error because mm2go cannot load Java
// code.
func ParseKind(className string) (Kind, error) {
	switch strings.TrimSpace(className) {
	case DefaultPolicyClass:
		return KindDefault, nil
	case IdentityPolicyClass:
		return KindIdentity, nil
	default:
		return 0, fmt.Errorf("unsupported replication policy class %q (want %s or %s)",
			className, DefaultPolicyClass, IdentityPolicyClass)
	}
}

// DefaultSeparator is the default value of replication.policy.separator.
const DefaultSeparator = "."

// heartbeatsTopic is ReplicationPolicy.heartbeatsTopic(); MM2 4.0 does not let it be configured.
const heartbeatsTopic = "heartbeats"

// Policy is MM2's ReplicationPolicy: how remote topics are named, which topics are MM2's
// own, and where a topic came from. The zero value is NOT valid; use New. (It behaves like
// New(KindDefault, "", true, ""), but relying on that hides a missing constructor call.)
//
// A Policy is a small immutable value, safe to copy and to use from many goroutines.
type Policy struct {
	kind        Kind
	sep         string
	internalSep string
	sourceAlias string
}

// New returns a policy of the given kind.
//
// separator is replication.policy.separator; "" means the default ".". internalSeparator is
// replication.policy.internal.topic.separator.enabled (default true): when true the separator is
// also used in the names of the checkpoints and offset-syncs topics, when false those keep ".".
// Like Java, which only reads that key when a separator is configured, it only matters when
// separator is not "". sourceAlias is the identity policy's source.cluster.alias, returned by
// TopicSource for non-heartbeat topics; "" stands for Java's unset (null) alias. The default policy
// ignores it.
func New(kind Kind, separator string, internalSeparator bool, sourceAlias string) Policy {
	p := Policy{kind: kind, sep: DefaultSeparator, internalSep: DefaultSeparator, sourceAlias: sourceAlias}
	if separator != "" {
		p.sep = separator
		if internalSeparator {
			p.internalSep = separator
		}
	}
	return p
}

// Kind returns the policy class.
func (p Policy) Kind() Kind { return p.kind }

// Separator returns the separator between a source alias and a topic name in remote topics.
func (p Policy) Separator() string {
	if p.sep == "" {
		return DefaultSeparator
	}
	return p.sep
}

func (p Policy) internalSeparator() string {
	if p.internalSep == "" {
		return DefaultSeparator
	}
	return p.internalSep
}

// looksLikeHeartbeat is IdentityReplicationPolicy's test for topics it still renames. It is a
// suffix test, so "myheartbeats" qualifies too (a Java quirk kept on purpose).
func looksLikeHeartbeat(topic string) bool {
	return strings.HasSuffix(topic, heartbeatsTopic)
}

// FormatRemoteTopic returns the name that topic from cluster sourceAlias gets on the target:
// "<sourceAlias><sep><topic>" for the default policy; the unchanged topic for the identity
// policy, except that heartbeat-like topics are prefixed as by the default policy.
func (p Policy) FormatRemoteTopic(sourceAlias, topic string) string {
	if p.kind == KindIdentity && !looksLikeHeartbeat(topic) {
		return topic
	}
	return sourceAlias + p.Separator() + topic
}

// TopicSource returns the alias of the cluster a remote topic came from; ok is false where Java
// returns null (not a remote topic).
//
// The default policy splits topic on the separator with Java's String.split rules (trailing empty
// pieces dropped, a leading empty piece kept) and needs at least two pieces: "a.b.c" -> "a",
// ".a" -> "", "a." and "..." -> not remote. The identity policy returns its configured source
// alias (ok=false when it has none) except for heartbeat-like topics, which follow the default.
func (p Policy) TopicSource(topic string) (alias string, ok bool) {
	if p.kind == KindIdentity && !looksLikeHeartbeat(topic) {
		return p.sourceAlias, p.sourceAlias != ""
	}
	return p.defaultTopicSource(topic)
}

func (p Policy) defaultTopicSource(topic string) (string, bool) {
	parts := strings.Split(topic, p.Separator())
	for len(parts) > 0 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	if len(parts) < 2 {
		return "", false
	}
	return parts[0], true
}

// UpstreamTopic returns the name of topic on the cluster it was replicated from, which may itself
// be a remote topic; ok is false where Java returns null (not a remote topic). For the default
// policy that is topic without its leading "<source><sep>"; the identity policy returns topic
// itself, except for heartbeat-like topics, which follow the default.
func (p Policy) UpstreamTopic(topic string) (string, bool) {
	if p.kind == KindIdentity && !looksLikeHeartbeat(topic) {
		return topic, true
	}
	src, ok := p.defaultTopicSource(topic)
	if !ok {
		return "", false
	}
	return topic[len(src)+len(p.Separator()):], true
}

// OriginalTopic returns the name of the topic on the cluster where it was first produced, following
// UpstreamTopic until it reports no upstream or returns its input: "B.A.orders" -> "orders".
func (p Policy) OriginalTopic(topic string) string {
	for {
		up, ok := p.UpstreamTopic(topic)
		if !ok || up == topic {
			return topic
		}
		topic = up
	}
}

// HeartbeatsTopic returns the name of the heartbeats topic, always "heartbeats".
func (p Policy) HeartbeatsTopic() string { return heartbeatsTopic }

// OffsetSyncsTopic returns the name of the offset-syncs topic that carries the alias of the other
// cluster of a flow: "mm2-offset-syncs.<alias>.internal", with the internal separator instead of
// "." when one is in effect (see New).
func (p Policy) OffsetSyncsTopic(alias string) string {
	s := p.internalSeparator()
	return "mm2-offset-syncs" + s + alias + s + "internal"
}

// CheckpointsTopic returns the name of the checkpoints topic for source cluster alias:
// "<alias>.checkpoints.internal", with the internal separator instead of "." when one is in effect.
func (p Policy) CheckpointsTopic(alias string) string {
	return alias + p.checkpointsSuffix()
}

func (p Policy) checkpointsSuffix() string {
	s := p.internalSeparator()
	return s + "checkpoints" + s + "internal"
}

// IsHeartbeatsTopic reports whether topic is a heartbeats topic, local or remote: its original
// topic is "heartbeats" ("heartbeats", "A.heartbeats", "B.A.heartbeats"; not "A-heartbeats").
func (p Policy) IsHeartbeatsTopic(topic string) bool {
	return p.OriginalTopic(topic) == heartbeatsTopic
}

// IsCheckpointsTopic reports whether topic ends with the checkpoints suffix
// ("<sep>checkpoints<sep>internal" with the internal separator), so "A.checkpoints.internal"
// qualifies and "checkpoints.internal" does not.
func (p Policy) IsCheckpointsTopic(topic string) bool {
	return strings.HasSuffix(topic, p.checkpointsSuffix())
}

// IsMM2InternalTopic reports whether topic is one of MM2's internal topics: it ends with
// "<sep>internal" using the internal separator.
func (p Policy) IsMM2InternalTopic(topic string) bool {
	return strings.HasSuffix(topic, p.internalSeparator()+"internal")
}

// IsInternalTopic reports whether topic must never be replicated: an MM2 internal topic, a Kafka
// internal or hidden topic (prefix "__" or "."), or a Connect-style internal topic (suffix
// "-internal" or ".internal").
func (p Policy) IsInternalTopic(topic string) bool {
	return p.IsMM2InternalTopic(topic) ||
		strings.HasPrefix(topic, "__") || strings.HasPrefix(topic, ".") ||
		strings.HasSuffix(topic, "-internal") || strings.HasSuffix(topic, ".internal")
}

// IsCycle reports whether replicating topic to cluster targetAlias would send it back where it came
// from: some cluster on its upstream path, found by following TopicSource and
// UpstreamTopic, is targetAlias. It stops, reporting no cycle, when a topic has no source or is its
// own upstream, which is why the identity policy cannot detect cycles of data topics.
func (p Policy) IsCycle(topic, targetAlias string) bool {
	for {
		src, ok := p.TopicSource(topic)
		if !ok {
			return false
		}
		if src == targetAlias {
			return true
		}
		up, ok := p.UpstreamTopic(topic)
		if !ok || up == topic {
			return false
		}
		topic = up
	}
}

// ConnectOffsetsTopic is the offsets topic of MM2 dedicated mode's Connect worker for flows whose
// source is sourceAlias: "mm2-offsets.<sourceAlias>.internal". Connect's internal topic names always
// use ".", whatever the replication policy's separator.
func ConnectOffsetsTopic(sourceAlias string) string {
	return "mm2-offsets." + sourceAlias + ".internal"
}

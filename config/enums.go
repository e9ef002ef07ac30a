package config

// PolicyClass is the value of "replication.policy.class": the naming policy
// for remote and internal topics. Only MM2's two built-in policies exist in
// mm2go; any other class is rejected at load time.
type PolicyClass string

const (
	// PolicyDefault is MM2's DefaultReplicationPolicy: remote topics are
	// named "<source><separator><topic>". It is the default.
	PolicyDefault PolicyClass = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
	// PolicyIdentity is MM2's IdentityReplicationPolicy: remote topics keep
	// the source name (heartbeats are still prefixed).
	PolicyIdentity PolicyClass = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
)

// Location is the value of "offset-syncs.topic.location": which cluster of a
// flow holds its offset-syncs topic.
type Location string

const (
	// LocationSource puts mm2-offset-syncs.<target>.internal on the source
	// cluster. It is the default.
	LocationSource Location = "source"
	// LocationTarget puts mm2-offset-syncs.<source>.internal on the target
	// cluster.
	LocationTarget Location = "target"
)

// DefaultsFrom is the value of "use.defaults.from": where topic-config sync
// takes the value of a config the source topic leaves at its default.
type DefaultsFrom string

const (
	// DefaultsFromTarget deletes the override on the remote topic so the
	// target broker default applies. It is the default.
	DefaultsFromTarget DefaultsFrom = "target"
	// DefaultsFromSource sets the source broker's default on the remote
	// topic.
	DefaultsFromSource DefaultsFrom = "source"
)

// OffsetReset is the effective "auto.offset.reset" of a consumer: where
// reading starts for a partition without a stored position.
type OffsetReset string

const (
	// OffsetResetEarliest starts at the log start. It is MM2's default for
	// every consumer it builds.
	OffsetResetEarliest OffsetReset = "earliest"
	// OffsetResetLatest starts at the log end (replicate only new records).
	OffsetResetLatest OffsetReset = "latest"
)

// IsolationLevel is the effective "isolation.level" of a consumer.
type IsolationLevel string

const (
	// ReadUncommitted returns records of open and aborted transactions too.
	// It is the Kafka default.
	ReadUncommitted IsolationLevel = "read_uncommitted"
	// ReadCommitted returns only committed records.
	ReadCommitted IsolationLevel = "read_committed"
)

// SecurityProtocol is the value of "security.protocol" (matched
// case-insensitively, stored upper case).
type SecurityProtocol string

const (
	// SecurityPlaintext is an unauthenticated, unencrypted connection. It is
	// the default.
	SecurityPlaintext SecurityProtocol = "PLAINTEXT"
	// SecuritySSL is TLS without SASL.
	SecuritySSL SecurityProtocol = "SSL"
	// SecuritySASLPlaintext is SASL over an unencrypted connection.
	SecuritySASLPlaintext SecurityProtocol = "SASL_PLAINTEXT"
	// SecuritySASLSSL is SASL over TLS.
	SecuritySASLSSL SecurityProtocol = "SASL_SSL"
)

// usesTLS reports whether the protocol encrypts the connection.
func (p SecurityProtocol) usesTLS() bool { return p == SecuritySSL || p == SecuritySASLSSL }

// usesSASL reports whether the protocol authenticates with SASL.
func (p SecurityProtocol) usesSASL() bool {
	return p == SecuritySASLPlaintext || p == SecuritySASLSSL
}

// SASLMechanism is the value of "sasl.mechanism" for the mechanisms mm2go
// supports.
type SASLMechanism string

const (
	// SASLPlain is SASL/PLAIN with PlainLoginModule credentials.
	SASLPlain SASLMechanism = "PLAIN"
	// SASLScramSHA256 is SCRAM-SHA-256 with ScramLoginModule credentials.
	SASLScramSHA256 SASLMechanism = "SCRAM-SHA-256"
	// SASLScramSHA512 is SCRAM-SHA-512 with ScramLoginModule credentials.
	SASLScramSHA512 SASLMechanism = "SCRAM-SHA-512"
	// SASLOAuthBearer is OAUTHBEARER with OAuthBearerLoginModule: tokens of
	// the client-credentials grant, or unsecured development tokens.
	SASLOAuthBearer SASLMechanism = "OAUTHBEARER"
	// SASLAWSMSKIAM is Amazon MSK's IAM access control with IAMLoginModule
	// (OAUTHBEARER with IAMOAuthBearerLoginCallbackHandler is SASLOAuthBearer).
	SASLAWSMSKIAM SASLMechanism = "AWS_MSK_IAM"
	// SASLGSSAPI is Kerberos with the JDK's Krb5LoginModule (a keytab or a
	// ticket cache); Kafka's default mechanism.
	SASLGSSAPI SASLMechanism = "GSSAPI"
)

// Role names one of the six Kafka clients of a flow.
type Role int

const (
	// RoleSourceConsumer reads the records to replicate (and, with the
	// default offset-syncs location, the offset-syncs topic) from the source.
	RoleSourceConsumer Role = iota
	// RoleSourceProducer writes offset syncs to the source cluster.
	RoleSourceProducer
	// RoleSourceAdmin lists topics, groups, configs and ACLs on the source.
	RoleSourceAdmin
	// RoleTargetConsumer reads mm2go's own internal topics on the target.
	RoleTargetConsumer
	// RoleTargetProducer writes replicated records, checkpoints, heartbeats
	// and source offsets to the target.
	RoleTargetProducer
	// RoleTargetAdmin creates and configures topics and commits group
	// offsets on the target.
	RoleTargetAdmin
)

// Roles returns the six roles in declaration order.
func Roles() []Role {
	return []Role{RoleSourceConsumer, RoleSourceProducer, RoleSourceAdmin,
		RoleTargetConsumer, RoleTargetProducer, RoleTargetAdmin}
}

// valid reports whether r is one of the six roles.
func (r Role) valid() bool { return r >= RoleSourceConsumer && r <= RoleTargetAdmin }

// String returns the role as "source-consumer", "target-admin", ...
func (r Role) String() string {
	if !r.valid() {
		return "unknown-role"
	}
	return r.side() + "-" + string(r.kind())
}

// ClientRole returns the role suffix of the client.id, taken from MM2's role
// names (KAFKA-14838):
//
//	RoleSourceConsumer  replication-consumer          (MirrorSourceTask's source consumer)
//	RoleSourceProducer  offset-syncs-source-producer  (MirrorSourceTask's offset-syncs producer)
//	RoleSourceAdmin     replication-source-admin      (MirrorSourceConnector's source admin)
//	RoleTargetConsumer  checkpoints-target-consumer   (MirrorCheckpointTask's CheckpointStore consumer)
//	RoleTargetProducer  replication-producer          (no MM2 name: Connect's worker producer does this job)
//	RoleTargetAdmin     replication-target-admin      (MirrorSourceConnector's target admin)
func (r Role) ClientRole() string {
	switch r {
	case RoleSourceConsumer:
		return "replication-consumer"
	case RoleSourceProducer:
		return "offset-syncs-source-producer"
	case RoleSourceAdmin:
		return "replication-source-admin"
	case RoleTargetConsumer:
		return "checkpoints-target-consumer"
	case RoleTargetProducer:
		return "replication-producer"
	case RoleTargetAdmin:
		return "replication-target-admin"
	}
	return "unknown-role"
}

// isSource reports whether the role talks to the source cluster.
func (r Role) isSource() bool { return r <= RoleSourceAdmin }

// side returns "source" or "target".
func (r Role) side() string {
	if r.isSource() {
		return "source"
	}
	return "target"
}

// clientKind is the Kafka client type behind a role.
type clientKind string

const (
	kindConsumer clientKind = "consumer"
	kindProducer clientKind = "producer"
	kindAdmin    clientKind = "admin"
)

// kind returns the client type of the role.
func (r Role) kind() clientKind {
	switch r {
	case RoleSourceConsumer, RoleTargetConsumer:
		return kindConsumer
	case RoleSourceProducer, RoleTargetProducer:
		return kindProducer
	}
	return kindAdmin
}

// CopyMode is how a flow copies records ("mm2go.copy.mode").
type CopyMode string

const (
	// CopyRecords decodes fetched records and produces them through the
	// target client, which batches and compresses them anew. A flow with
	// provenance headers copies this way.
	CopyRecords CopyMode = "records"
	// CopyBatches forwards a fetched batch as it is (compressed as the
	// source stored it; only the producer fields and the CRC are
	// rewritten) when none of its records must change, and re-encodes the
	// others (transactional and compacted batches, batches with log-append
	// timestamps) and small batches, several into one. It is the default.
	CopyBatches CopyMode = "batches"
)

// TransactionBoundary is where an exactly-once flow ends its transactions
// ("transaction.boundary", Connect's source connector key).
type TransactionBoundary string

const (
	// BoundaryPoll commits what one poll of the source brought (Connect's
	// default).
	BoundaryPoll TransactionBoundary = "poll"
	// BoundaryInterval commits every transaction.boundary.interval.ms.
	BoundaryInterval TransactionBoundary = "interval"
)

// Fencing is whether a flow's writer fences older writers ("mm2go.copy.fencing").
type Fencing string

const (
	// FencingNone relies on the flow's lease alone (always in the record
	// mode).
	FencingNone Fencing = "none"
	// FencingEpoch makes the batches mode's writer bump its transactional
	// id's epoch and write an abort marker into every remote partition at
	// each start, so that an older writer cannot write any more. It is the
	// batches mode's default.
	FencingEpoch Fencing = "epoch"
)

// GroupSyncMode is when group-offset sync commits translated offsets into
// target groups ("mm2go.sync.group.offsets.mode").
type GroupSyncMode string

const (
	// GroupSyncExact is the default: a target group gets offsets only while
	// the source group has no members, then the exact translation of the
	// source group's final commit as soon as replication has passed it, and
	// offsets mm2go committed are removed again while the source group has
	// members. A consumer switched at any moment either finds no offset
	// (auto.offset.reset=none fails and it is restarted) or the exact one.
	GroupSyncExact GroupSyncMode = "exact"
	// GroupSyncPeriodic is MM2's rule: every
	// sync.group.offsets.interval.seconds the last checkpoints are
	// committed into idle target groups, also while the source group still
	// consumes. A consumer switched then re-reads what the source group
	// consumed after the last sync (at least once).
	GroupSyncPeriodic GroupSyncMode = "periodic"
)

// ACLSyncMode is which topic ACLs topic-ACL sync copies to the remote topics
// ("mm2go.sync.topic.acls.mode").
type ACLSyncMode string

const (
	// ACLSyncRead is the default: only ACLs that let principals read a
	// topic (ALLOW READ and DESCRIBE, ALLOW ALL as READ) and the DENY READ,
	// DESCRIBE and ALL entries that narrow them, literal and prefixed (the
	// prefix mapped through the replication policy). Whoever may delete,
	// alter or reconfigure a source topic gets no such right on its
	// disaster-recovery copy.
	ACLSyncRead ACLSyncMode = "read"
	// ACLSyncMM2 is MM2's rule: every literal topic ACL but ALLOW WRITE,
	// ALLOW ALL as READ; prefixed ACLs are not copied.
	ACLSyncMM2 ACLSyncMode = "mm2"
)

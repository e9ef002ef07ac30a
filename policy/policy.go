// Package policy owns MirrorMaker 2's pure naming and encoding rules, the parts that must
// match Apache Kafka's MM2 byte for byte so that mm2go can replace it in place:
//
//   - the replication policy (DefaultReplicationPolicy and IdentityReplicationPolicy): remote topic
//     names, the names of MM2's internal topics, and cycle detection in active/active topologies;
//   - topic, group and config-property filters, which take MM2's Java regular expressions and match
//     them with Java's full-match semantics on Go's RE2 engine;
//   - the records of MM2's internal topics (offset syncs, checkpoints, heartbeats) and the Connect
//     source offsets that MM2's dedicated mode keeps in mm2-offsets.<source>.internal, including the
//     partition Java's producer would pick for them.
//
// It does not talk to Kafka, read configuration files, log, or keep metrics: callers in replicator,
// checkpoint and heartbeat do that and hand this package plain strings and bytes. Nothing here keeps
// state between calls; every value is immutable after construction and safe for concurrent use.
package policy

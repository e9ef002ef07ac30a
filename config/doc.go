// Package config turns Apache Kafka MirrorMaker 2's dedicated-mode
// properties file (connect-mirror-maker.properties) into typed clusters and
// replication flows, and builds the franz-go options of every Kafka client a
// flow uses.
//
// It owns the meaning of every MM2 key: the precedence rules of MM2's
// MirrorMakerConfig (cluster properties, connector and worker configs,
// client configs per role), ${provider:path:key} references for Kafka's
// file, directory and environment ConfigProviders, the mapping of Kafka
// client properties to kgo options (including TLS from PEM stores and SASL
// PLAIN/SCRAM credentials from sasl.jaas.config), validation, warnings for
// keys that are ignored or have no effect, and a fingerprint per flow for
// reloads. docs/configuration.md lists every key and what mm2go does with it.
//
// It does not own what the settings do: the replication policy and filters
// live in package policy, and no function here opens a network connection.
// Load reads files (the properties file, TLS stores, provider files) and
// nothing else; the result is immutable and safe for concurrent reads.
//
// Keys keep their MM2 names everywhere: a Flow field is the CamelCase of its
// key and its doc comment quotes the key and the default. Loading follows
// Parse, SetDefaults, Validate: every problem found is returned at once,
// joined with errors.Join, one "key: problem (got X, want Y)" per line, and
// no Config is returned when there is any. Secret values (passwords, JAAS
// configs, inline private keys) never appear in errors, warnings, Dump or
// Props; the Secret type prints as "<secret>".
//
// Where mm2go deliberately differs from MM2 the difference is documented on
// the field or in docs/configuration.md; the main ones are offset.flush.interval.ms
// (default 1000 ms instead of 60000 ms), producers that always use acks=all
// and idempotence, and Java-only features (custom classes other than
// Amazon MSK's IAM ones, Connect transforms) that are rejected or
// ignored with a warning.
package config

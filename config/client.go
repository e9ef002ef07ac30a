package config

import (
	"crypto/tls"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Client is the resolved configuration of one Kafka client of a flow. Its
// kgo options are built at load time, so using them cannot fail later on
// configuration grounds.
type Client struct {
	// Flow is the flow name, "source->target".
	Flow string
	// Role is the client's role in the flow.
	Role Role
	// Cluster is the alias of the cluster the client talks to.
	Cluster string
	// ID is the client.id: "[<user client.id>|]<source>-><target>|mm2go|<role>",
	// where <role> is Role.ClientRole (MM2's "<connector name>" part is
	// "mm2go").
	ID string
	// BootstrapServers is the effective "bootstrap.servers". It is empty only
	// for a cluster without one, which no enabled flow uses; Opts must not
	// be used then.
	BootstrapServers []string
	// SecurityProtocol is the effective "security.protocol" (default
	// PLAINTEXT).
	SecurityProtocol SecurityProtocol
	// SASLMechanism is the effective "sasl.mechanism" when SecurityProtocol
	// uses SASL, else "".
	SASLMechanism SASLMechanism

	props           []clientProp
	opts            []kgo.Opt
	tlsConfig       *tls.Config
	material        []string      // digests of the files read for this client
	oauth           *oauthSource  // the OAUTHBEARER token source, or nil
	certs           []Certificate // read for its TLS configuration
	autoOffsetReset OffsetReset
	isolationLevel  IsolationLevel
}

// clientProp is one effective client property. The value is held as a
// Secret, whatever the key, so that printing a Client with reflection
// (%+v, %#v) cannot show it.
type clientProp struct {
	key    string
	value  Secret
	origin string
}

// Opts returns the kgo options for this client: seed brokers, client ID,
// TLS, SASL and the tuning keys listed in docs/configuration.md. Callers add the options
// that describe what the client does (topics to consume, partitioner, ...).
// The returned slice is a copy.
func (c *Client) Opts() []kgo.Opt { return slices.Clone(c.opts) }

// Props returns the effective Kafka client properties after MM2's
// precedence rules and mm2go's forced values, with every secret replaced by
// "<secret>". It is meant for display (`mm2go validate`).
func (c *Client) Props() map[string]string {
	out := make(map[string]string, len(c.props))
	for _, p := range c.props {
		out[p.key] = displayValue(p.key, p.value.Reveal())
	}
	return out
}

// String summarises the client without any property value, e.g.
// "a->b target-producer on b (SASL_SSL) id=a->b|mm2go|replication-producer".
func (c *Client) String() string {
	return fmt.Sprintf("%s %s on %s (%s) id=%s", c.Flow, c.Role, c.Cluster, c.SecurityProtocol, c.ID)
}

// GoString returns String, so %#v shows no TLS keys or credentials.
func (c *Client) GoString() string { return c.String() }

// Format prints String for every verb, so %+v cannot reach the TLS
// configuration (which holds the private key) or the credentials.
func (c *Client) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, c.String()) }

// TLSConfig returns a copy of the TLS configuration, or nil when the
// security protocol does not use TLS.
func (c *Client) TLSConfig() *tls.Config {
	if c.tlsConfig == nil {
		return nil
	}
	return c.tlsConfig.Clone()
}

// displayValue masks secrets.
func displayValue(key, value string) string {
	if isSecretKey(key) {
		return secretMask
	}
	return value
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// buildClient assembles the properties of one client exactly like MM2's
// MirrorConnectorConfig builds the clients inside its connectors, later
// steps overwriting earlier ones:
//
//  1. "<side>.cluster.*" restricted to CLIENT_CONFIG_DEF;
//  2. "<kind>.*" of the connector config, i.e. "<source>-><target>.<kind>.*";
//  3. "<side>.<kind>.*", i.e. "<alias>.<kind>.*" plus the fanned-out cluster
//     and top-level security keys;
//  4. for the target producer only, "<source>-><target>.producer.override.*",
//     as Connect applies it to the worker producer that writes MM2's data.
//
// Consumers then get enable.auto.commit=false and, if absent,
// auto.offset.reset=earliest, as MM2 forces.
func (p *parser) buildClient(f *Flow, conn entries, role Role) *Client {
	side, kind := role.side(), role.kind()
	props := entries{}
	for _, k := range sortedKeys(conn) {
		if rest, ok := strings.CutPrefix(k, side+".cluster."); ok && isClientConfigKey(rest) {
			props[rest] = conn[k]
		}
	}
	for _, k := range sortedKeys(conn) {
		rest, ok := strings.CutPrefix(k, string(kind)+".")
		if !ok || isConnectorKey(k) || strings.HasPrefix(rest, "override.") {
			// consumer.poll.timeout.ms and admin.timeout.ms are connector
			// keys that Java hands to the clients as unknown junk.
			continue
		}
		props[rest] = conn[k]
	}
	for _, k := range sortedKeys(conn) {
		if rest, ok := strings.CutPrefix(k, side+"."+string(kind)+"."); ok {
			props[rest] = conn[k]
		}
	}
	if role == RoleTargetProducer {
		for _, k := range sortedKeys(conn) {
			if rest, ok := strings.CutPrefix(k, "producer.override."); ok {
				props[rest] = conn[k]
			}
		}
	}
	if kind == kindConsumer {
		props[keyEnableAutoCommit] = entry{value: "false"}
		props.putIfAbsent(keyAutoOffsetReset, entry{value: string(OffsetResetEarliest)})
	}

	c := &Client{Flow: f.Name(), Role: role, Cluster: f.Source, SecurityProtocol: SecurityPlaintext}
	if !role.isSource() {
		c.Cluster = f.Target
	}
	b := &clientBuilder{p: p, c: c, kind: kind, props: props}
	b.build()
	return c
}

// sortProps orders client properties by key.
func sortProps(ps []clientProp) {
	sort.Slice(ps, func(i, j int) bool { return ps[i].key < ps[j].key })
}

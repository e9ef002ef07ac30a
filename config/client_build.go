package config

import (
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"
)

// maxVersions are the request versions the clients use at most: franz-go's
// (its latest Kafka release), with ApiVersions at 4, the highest brokers of
// Kafka 3.9 to 4.3 know. Every new connection starts with an ApiVersions
// request; asked at a version it does not know, a broker answers with an
// error naming its own and the client asks again: one round trip more per
// connection, tens of milliseconds across regions, several of them in turn
// as a flow starts. Version 5 only adds the cluster and node ids a broker
// checks (KIP-1242).
func maxVersions() *kversion.Versions {
	v := kversion.Stable()
	v.SetMaxKeyVersion(18, 4) // ApiVersions
	return v
}

// build maps every property, then the security settings, then the options
// that depend on several keys, and finally lets kgo validate the result.
func (b *clientBuilder) build() {
	c := b.c
	b.effective = map[string]string{}
	b.retryBackoff, b.retryBackoffMax = -1, -1
	b.recvBuf, b.sendBuf = -1, -1
	if b.kind == kindProducer {
		// Always in force, whatever the file says (see producerOpts).
		b.effective["acks"] = "all"
		b.effective["enable.idempotence"] = "true"
	}
	// mm2go reads committed data unless told otherwise: MM2's
	// read_uncommitted default copies records of aborted transactions to
	// the target, where they become visible to every consumer.
	c.autoOffsetReset, c.isolationLevel = OffsetResetEarliest, ReadCommitted
	for _, k := range sortedKeys(b.props) {
		b.apply(k, b.props[k])
	}
	b.security()
	b.dialer()

	c.ID = c.Flow + "|mm2go|" + c.Role.ClientRole()
	if b.userClientID != "" {
		c.ID = b.userClientID + "|" + c.ID
	}
	b.effective[keyClientID] = c.ID

	var opts []kgo.Opt
	if len(c.BootstrapServers) > 0 {
		opts = append(opts, kgo.SeedBrokers(c.BootstrapServers...))
	}
	opts = append(opts, kgo.ClientID(c.ID), kgo.MaxVersions(maxVersions()))
	if b.kind == kindConsumer {
		// The Java client's fetch.max.wait.ms default (500 ms), not kgo's
		// 5s: partitions added to a consumer join only its next fetch
		// request, so the long poll bounds how soon a new topic starts to
		// be copied. A value in the file comes later and wins.
		opts = append(opts, kgo.FetchMaxWait(500*time.Millisecond))
	}
	opts = append(opts, b.opts...)
	if b.requestTimeout > 0 {
		opts = append(opts, kgo.RequestTimeoutOverhead(b.requestTimeout))
	}
	if b.retryBackoff >= 0 || b.retryBackoffMax >= 0 {
		base, maxBackoff := b.retryBackoff, b.retryBackoffMax
		if base < 0 {
			base = defaultRetryBackoff
		}
		if maxBackoff < 0 {
			maxBackoff = defaultRetryBackoffMax
		}
		opts = append(opts, kgo.RetryBackoffFn(retryBackoffFn(base, maxBackoff)))
	}
	switch b.kind {
	case kindConsumer:
		opts = append(opts, b.consumerOpts()...)
	case kindProducer:
		opts = append(opts, b.producerOpts()...)
	}
	c.opts = opts

	for k, e := range b.props {
		v := e.value
		if ev, ok := b.effective[k]; ok {
			v = ev
		}
		c.props = append(c.props, clientProp{key: k, value: Secret(v), origin: e.origin})
	}
	for k, v := range b.effective {
		if _, ok := b.props[k]; !ok {
			c.props = append(c.props, clientProp{key: k, value: Secret(v)})
		}
	}
	sortProps(c.props)

	if len(c.BootstrapServers) > 0 {
		cl, err := kgo.NewClient(c.opts...)
		if err != nil {
			b.p.probs.errorf(b.clientKey(), "franz-go rejects the resulting client options (got %v, want settings within franz-go's limits)", err)
			return
		}
		cl.Close()
	}
}

// Kafka's defaults for retry.backoff.ms and retry.backoff.max.ms, used when
// only one of the two is set.
const (
	defaultRetryBackoff    = 100 * time.Millisecond
	defaultRetryBackoffMax = time.Second
)

// clientKey names the client in errors that no single key caused, e.g.
// "primary.producer.*".
func (b *clientBuilder) clientKey() string {
	return b.c.Cluster + "." + string(b.kind) + ".*"
}

// consumerOpts returns the options every consumer gets: MM2's effective
// offset reset and isolation level are always set explicitly.
func (b *clientBuilder) consumerOpts() []kgo.Opt {
	opts := []kgo.Opt{}
	if b.c.autoOffsetReset == OffsetResetLatest {
		opts = append(opts, kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	} else {
		opts = append(opts, kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	}
	if b.c.isolationLevel == ReadCommitted {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	} else {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
	}
	if b.fetchMaxBytes > 100<<20 {
		// kgo refuses a response limit below the fetch limit.
		opts = append(opts, kgo.BrokerMaxReadBytes(min(1<<30, 2*b.fetchMaxBytes)))
	}
	return opts
}

// producerOpts returns the producer options: acks=all and idempotence are
// always on; compression, batch and request sizes are combined here.
func (b *clientBuilder) producerOpts() []kgo.Opt {
	opts := []kgo.Opt{kgo.RequiredAcks(kgo.AllISRAcks())}
	if b.requestTimeout > 0 {
		opts = append(opts, kgo.ProduceRequestTimeout(b.requestTimeout))
	}
	if b.compression != "" {
		var codec kgo.CompressionCodec
		switch b.compression {
		case "none":
			codec = kgo.NoCompression()
		case "gzip":
			codec = kgo.GzipCompression()
			if b.gzipLevel != 0 {
				codec = codec.WithLevel(b.gzipLevel)
			}
		case "snappy":
			codec = kgo.SnappyCompression()
		case "lz4":
			codec = kgo.Lz4Compression()
		case "zstd":
			codec = kgo.ZstdCompression()
			if b.zstdLevel != 0 {
				codec = codec.WithLevel(b.zstdLevel)
			}
		}
		opts = append(opts, kgo.ProducerBatchCompression(codec))
	}
	batch := b.batchMaxBytes
	if batch > 0 {
		opts = append(opts, kgo.ProducerBatchMaxBytes(batch))
	} else {
		batch = kgoDefaultBatchMaxBytes
	}
	if b.maxRequestSize > 0 {
		if b.maxRequestSize < batch {
			e := b.maxRequestOrigin
			b.p.probs.errorf(e.origin, "smaller than the producer batch size (got %q, want at least %d, the batch.size in effect)", e.value, batch)
		} else {
			opts = append(opts, kgo.BrokerMaxWriteBytes(b.maxRequestSize))
		}
	}
	return opts
}

// kgoDefaultBatchMaxBytes is franz-go's default ProducerBatchMaxBytes.
const kgoDefaultBatchMaxBytes = 1000012

// security reads security.protocol, then builds TLS and SASL.
func (b *clientBuilder) security() {
	c := b.c
	if e, ok := b.props[keySecurityProtocol]; ok {
		proto, ok := parseSecurityProtocol(e.value)
		if !ok {
			b.p.probs.errorf(e.origin, "invalid security protocol (got %q, want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)", e.value)
			return
		}
		c.SecurityProtocol = proto
	}
	if c.SecurityProtocol.usesTLS() {
		if cfg, material, ok := b.tlsConfig(); ok {
			c.tlsConfig = cfg
			c.material = material
		}
	}
	if c.SecurityProtocol.usesSASL() {
		if mech, name, ok := b.saslMechanism(); ok {
			c.SASLMechanism = name
			b.opts = append(b.opts, kgo.SASL(mech))
		}
	}
}

// parseSecurityProtocol matches a protocol case-insensitively.
func parseSecurityProtocol(v string) (SecurityProtocol, bool) {
	switch p := SecurityProtocol(strings.ToUpper(javaTrim(v))); p {
	case SecurityPlaintext, SecuritySSL, SecuritySASLPlaintext, SecuritySASLSSL:
		return p, true
	}
	return "", false
}

// checkSecurityProtocol validates a security.protocol value that no client
// may read (top-level or connector-level), as MM2's ConfigDefs do.
func (p *parser) checkSecurityProtocol(key, v string) {
	if _, ok := parseSecurityProtocol(v); !ok {
		p.probs.errorf(key, "invalid security protocol (got %q, want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)", v)
	}
}

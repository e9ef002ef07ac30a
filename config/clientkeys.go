package config

import (
	"math"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// keySpec says what mm2go does with one Kafka client property.
type keySpec struct {
	// kinds lists the client types the key belongs to: c(onsumer),
	// p(roducer), a(dmin).
	kinds string
	// apply maps the key to kgo options; nil means the key is accepted and
	// ignored with note.
	apply func(b *clientBuilder, e entry)
	// note explains an ignored key.
	note string
	// level is LevelInfo for keys mm2go does not need and LevelWarn for keys
	// whose behaviour mm2go does not reproduce.
	level Level
}

// Notes for ignored keys.
const (
	noteJavaOnly    = "ignored: Java plug-in class with no meaning in mm2go"
	noteNoGroup     = "not needed by mm2go: partitions are assigned directly, without a consumer group"
	noteNoMetrics   = "not needed by mm2go, which exposes Prometheus metrics"
	noteNoSocket    = "not needed by mm2go: franz-go manages sockets and DNS itself"
	noteReconnect   = "not needed by mm2go: franz-go backs off reconnects with the retry backoff (retry.backoff.ms, retry.backoff.max.ms)"
	noteUnsupported = "ignored: mm2go does not read it (OAUTHBEARER settings other than the token endpoint, client credentials and refresh)"
	noteSSLIgnored  = "ignored: Go's TLS stack has no equivalent; mm2go uses its defaults"
	noteProducerOrd = "not needed by mm2go: the idempotent producer keeps per-partition order by itself"
)

// ignored returns the spec of an accepted, ignored key.
func ignored(kinds string, level Level, note string) keySpec {
	return keySpec{kinds: kinds, note: note, level: level}
}

// mapped returns the spec of a key translated to kgo options.
func mapped(kinds string, apply func(b *clientBuilder, e entry)) keySpec {
	return keySpec{kinds: kinds, apply: apply}
}

// clientKeySpec describes every Kafka client property mm2go knows; docs/configuration.md
// documents the same table. Security keys (security.protocol, ssl.*,
// sasl.mechanism, sasl.jaas.config) are read by the security step instead.
func clientKeySpec(k string) (keySpec, bool) {
	switch k {
	// Connection and identity, all clients.
	case keyBootstrapServers:
		return mapped("cpa", (*clientBuilder).bootstrap), true
	case keyClientID:
		return mapped("cpa", func(b *clientBuilder, e entry) { b.userClientID = e.value }), true
	case "request.timeout.ms":
		return mapped("cpa", func(b *clientBuilder, e entry) {
			b.requestTimeout = b.millis(e, 100, 900000, "100..900000 milliseconds (franz-go's limits)")
		}), true
	case "metadata.max.age.ms":
		return mapped("cpa", (*clientBuilder).metadataMaxAge), true
	case "connections.max.idle.ms":
		return mapped("cpa", func(b *clientBuilder, e entry) {
			if d := b.millis(e, 100, 900000, "100..900000 milliseconds (franz-go's limits)"); d > 0 {
				b.opts = append(b.opts, kgo.ConnIdleTimeout(d))
			}
		}), true
	case "retry.backoff.ms":
		return mapped("cpa", func(b *clientBuilder, e entry) {
			b.retryBackoff = b.millis(e, 0, math.MaxInt32, "0..2147483647 milliseconds")
		}), true
	case "retry.backoff.max.ms":
		return mapped("cpa", func(b *clientBuilder, e entry) {
			b.retryBackoffMax = b.millis(e, 0, math.MaxInt32, "0..2147483647 milliseconds")
		}), true
	case "socket.connection.setup.timeout.ms":
		return mapped("cpa", func(b *clientBuilder, e entry) {
			if d := b.millis(e, 1, math.MaxInt32, "1..2147483647 milliseconds"); d > 0 {
				b.dialTimeout = d
				b.opts = append(b.opts, kgo.DialTimeout(d))
			}
		}), true
	case "retries":
		return keySpec{kinds: "cpa", apply: func(b *clientBuilder, e entry) {
			if b.kind == kindProducer {
				b.p.probs.info(e.origin, "not needed by mm2go: records are retried until delivery.timeout.ms (default unlimited)")
				return
			}
			if n, ok := b.integer(e, 0, math.MaxInt32, "0..2147483647"); ok {
				b.opts = append(b.opts, kgo.RequestRetries(int(n)))
			}
		}}, true
	case "default.api.timeout.ms":
		return mapped("ca", func(b *clientBuilder, e entry) {
			if d := b.millis(e, 0, math.MaxInt32, "0..2147483647 milliseconds"); d >= 0 {
				b.opts = append(b.opts, kgo.RetryTimeout(d))
			}
		}), true
	case "client.rack":
		return keySpec{kinds: "cpa", apply: func(b *clientBuilder, e entry) {
			if b.kind == kindConsumer {
				b.opts = append(b.opts, kgo.Rack(e.value))
				return
			}
			b.p.probs.info(e.origin, "not needed by mm2go: only consumers use the rack (to fetch from the closest replica)")
		}}, true
	case "reconnect.backoff.ms", "reconnect.backoff.max.ms":
		return ignored("cpa", LevelInfo, noteReconnect), true
	case "receive.buffer.bytes":
		return mapped("cpa", func(b *clientBuilder, e entry) { b.recvBuf = b.socketBuffer(e) }), true
	case "send.buffer.bytes":
		return mapped("cpa", func(b *clientBuilder, e entry) { b.sendBuf = b.socketBuffer(e) }), true
	case "socket.connection.setup.timeout.max.ms", "client.dns.lookup",
		"metadata.recovery.strategy", "metadata.recovery.rebootstrap.trigger.ms":
		return ignored("cpa", LevelInfo, noteNoSocket), true
	case "metrics.sample.window.ms", "metrics.num.samples", "metrics.recording.level", "metric.reporters",
		"enable.metrics.push", "auto.include.jmx.reporter":
		return ignored("cpa", LevelInfo, noteNoMetrics), true

	// Consumer.
	case "fetch.max.bytes":
		return mapped("c", func(b *clientBuilder, e entry) {
			if n, ok := b.integer(e, 0, 1<<30, "0..1073741824"); ok {
				b.fetchMaxBytes = int32(n)
				b.opts = append(b.opts, kgo.FetchMaxBytes(int32(n)))
			}
		}), true
	case "max.partition.fetch.bytes":
		return mapped("c", func(b *clientBuilder, e entry) {
			if n, ok := b.integer(e, 0, math.MaxInt32, "0..2147483647"); ok {
				b.opts = append(b.opts, kgo.FetchMaxPartitionBytes(int32(n)))
			}
		}), true
	case "fetch.min.bytes":
		return mapped("c", func(b *clientBuilder, e entry) {
			if n, ok := b.integer(e, 0, math.MaxInt32, "0..2147483647"); ok {
				b.opts = append(b.opts, kgo.FetchMinBytes(int32(n)))
			}
		}), true
	case "fetch.max.wait.ms":
		return mapped("c", func(b *clientBuilder, e entry) {
			d := b.millis(e, 0, math.MaxInt32, "0..2147483647 milliseconds")
			if d < 0 {
				return
			}
			if d < 10*time.Millisecond {
				b.p.probs.warn(e.origin, "raised to 10 ms, franz-go's minimum (got %q)", e.value)
				d = 10 * time.Millisecond
				b.effective["fetch.max.wait.ms"] = "10"
			}
			b.opts = append(b.opts, kgo.FetchMaxWait(d))
		}), true
	case keyIsolationLevel:
		return mapped("c", func(b *clientBuilder, e entry) {
			switch v := IsolationLevel(strings.ToLower(javaTrim(e.value))); v {
			case ReadUncommitted, ReadCommitted:
				b.c.isolationLevel = v
			default:
				b.p.probs.errorf(e.origin, "invalid isolation level (got %q, want read_uncommitted or read_committed)", e.value)
			}
		}), true
	case keyAutoOffsetReset:
		return mapped("c", func(b *clientBuilder, e entry) {
			switch v := strings.ToLower(javaTrim(e.value)); v {
			case string(OffsetResetEarliest), string(OffsetResetLatest):
				b.c.autoOffsetReset = OffsetReset(v)
			case "none":
				b.p.probs.errorf(e.origin, "\"none\" is not supported: mm2go must start somewhere when a partition has no stored position, as MM2 (which defaults to earliest) does (got %q, want earliest or latest)", e.value)
			default:
				b.p.probs.errorf(e.origin, "invalid value (got %q, want earliest or latest)", e.value)
			}
		}), true
	case "check.crcs":
		return mapped("c", func(b *clientBuilder, e entry) {
			v, ok := parseBool(e.value)
			if !ok {
				b.p.probs.errorf(e.origin, "not a boolean (got %q, want true or false)", e.value)
			} else if !v {
				b.opts = append(b.opts, kgo.DisableFetchCRCValidation())
			}
		}), true
	case keyEnableAutoCommit:
		return ignored("c", LevelInfo, "not needed by mm2go, which never auto-commits (MM2 forces false too)"), true
	case "max.poll.records":
		return ignored("c", LevelInfo, "not needed by mm2go, which processes whole fetches"), true
	case "auto.commit.interval.ms", "group.id", "group.instance.id", "group.protocol", "group.remote.assignor",
		"partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms", "max.poll.interval.ms",
		"internal.leave.group.on.close", "exclude.internal.topics", "allow.auto.create.topics":
		return ignored("c", LevelInfo, noteNoGroup), true
	case "key.deserializer", "value.deserializer":
		return ignored("c", LevelWarn, noteJavaOnly), true
	case "interceptor.classes":
		return ignored("cp", LevelWarn, noteJavaOnly), true

	// Producer.
	case "acks":
		return mapped("p", func(b *clientBuilder, e entry) {
			switch v := strings.ToLower(javaTrim(e.value)); v {
			case "all", "-1":
			case "0", "1":
				b.p.probs.warn(e.origin, "overridden: mm2go always produces with acks=all so that nothing acknowledged can be lost (got %q)", e.value)
			default:
				b.p.probs.errorf(e.origin, "invalid value (got %q, want all, -1, 0 or 1)", e.value)
			}
		}), true
	case "enable.idempotence":
		return mapped("p", func(b *clientBuilder, e entry) {
			v, ok := parseBool(e.value)
			switch {
			case !ok:
				b.p.probs.errorf(e.origin, "not a boolean (got %q, want true or false)", e.value)
			case !v:
				b.p.probs.warn(e.origin, "overridden: mm2go always uses the idempotent producer so that retries cannot duplicate or reorder records (got %q)", e.value)
			}
		}), true
	case "compression.type":
		return mapped("p", func(b *clientBuilder, e entry) {
			switch v := javaTrim(e.value); v {
			case "none", "gzip", "snappy", "lz4", "zstd":
				b.compression = v
			default:
				b.p.probs.errorf(e.origin, "invalid compression type (got %q, want none, gzip, snappy, lz4 or zstd)", e.value)
			}
		}), true
	case "compression.gzip.level":
		return mapped("p", func(b *clientBuilder, e entry) {
			if n, ok := b.integer(e, -1, 9, "-1 (default) or 1..9"); ok && n != 0 {
				b.gzipLevel = int(n)
			} else if ok {
				b.p.probs.errorf(e.origin, "out of range (got %q, want -1 (default) or 1..9)", e.value)
			}
		}), true
	case "compression.zstd.level":
		return mapped("p", func(b *clientBuilder, e entry) {
			if n, ok := b.integer(e, -131072, 22, "-131072..22"); ok {
				b.zstdLevel = zstdEncoderLevel(int(n))
			}
		}), true
	case "compression.lz4.level":
		return ignored("p", LevelInfo, "not needed by mm2go: franz-go uses its default lz4 level"), true
	case "batch.size":
		return mapped("p", func(b *clientBuilder, e entry) {
			if n, ok := b.integer(e, 512, 1<<30, "512..1073741824 bytes (franz-go's limits; Kafka's 0 is not supported)"); ok {
				b.batchMaxBytes = int32(n)
			}
		}), true
	case "linger.ms":
		return mapped("p", func(b *clientBuilder, e entry) {
			if d := b.millis(e, 0, 60000, "0..60000 milliseconds (franz-go's limits)"); d >= 0 {
				b.opts = append(b.opts, kgo.ProducerLinger(d))
			}
		}), true
	case "buffer.memory":
		return mapped("p", func(b *clientBuilder, e entry) {
			if n, ok := b.integer(e, 1, math.MaxInt64, "1..9223372036854775807 bytes"); ok {
				b.opts = append(b.opts, kgo.MaxBufferedBytes(int(n)))
			}
		}), true
	case "max.request.size":
		return mapped("p", func(b *clientBuilder, e entry) {
			if n, ok := b.integer(e, 1024, 1<<30, "1024..1073741824 bytes (franz-go's limits)"); ok {
				b.maxRequestSize = int32(n)
				b.maxRequestOrigin = e
			}
		}), true
	case "delivery.timeout.ms":
		return mapped("p", func(b *clientBuilder, e entry) {
			d := b.millis(e, 0, math.MaxInt32, "0 (unlimited) or 1000..2147483647 milliseconds")
			if d < 0 {
				return
			}
			if d > 0 && d < time.Second {
				b.p.probs.errorf(e.origin, "out of range (got %q, want 0 (unlimited) or 1000..2147483647 milliseconds)", e.value)
				return
			}
			b.opts = append(b.opts, kgo.RecordDeliveryTimeout(d))
		}), true
	case "max.in.flight.requests.per.connection":
		return ignored("p", LevelInfo, noteProducerOrd), true
	case "max.block.ms":
		return ignored("p", LevelInfo, "not needed by mm2go: a full buffer blocks the replicator until records are acknowledged"), true
	case "metadata.max.idle.ms":
		return ignored("p", LevelInfo, "not needed by mm2go: franz-go keeps metadata for every topic it produces to"), true
	case "transactional.id":
		return ignored("p", LevelWarn, "ignored: an exactly-once flow's transactional id is mm2go's own, one per task (<source>-mm2go-<source>-><target>-<task>)"), true
	case "transaction.timeout.ms":
		return mapped("p", func(b *clientBuilder, e entry) {
			if d := b.millis(e, 1000, math.MaxInt32, "1000..2147483647 milliseconds"); d > 0 {
				b.opts = append(b.opts, kgo.TransactionTimeout(d))
			}
		}), true
	case "partitioner.class", "partitioner.adaptive.partitioning.enable", "partitioner.availability.timeout.ms",
		"partitioner.ignore.keys":
		return ignored("p", LevelInfo, "not needed by mm2go, which writes each record to the partition it came from"), true
	case "key.serializer", "value.serializer":
		return ignored("p", LevelWarn, noteJavaOnly), true

	// Admin.
	case "bootstrap.controllers":
		return ignored("a", LevelWarn, "ignored: mm2go's admin talks to brokers (bootstrap.servers), not controllers"), true

	// Security keys that the security step reads or ignores.
	case "ssl.provider", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm", "ssl.secure.random.implementation":
		return ignored("cpa", LevelInfo, noteSSLIgnored), true
	case "ssl.engine.factory.class", "sasl.login.class":
		return ignored("cpa", LevelWarn, noteJavaOnly), true
	case "sasl.kerberos.kinit.cmd", "sasl.kerberos.ticket.renew.window.factor", "sasl.kerberos.ticket.renew.jitter",
		"sasl.kerberos.min.time.before.relogin":
		return ignored("cpa", LevelInfo, "not needed: mm2go logs in to Kerberos afresh for each connection, with the keytab or ticket cache of sasl.jaas.config"), true
	case "sasl.client.callback.handler.class", "sasl.login.callback.handler.class", "sasl.oauthbearer.token.endpoint.url",
		"sasl.kerberos.service.name",
		"sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
		"sasl.login.refresh.min.period.seconds", "sasl.login.refresh.buffer.seconds",
		"sasl.login.connect.timeout.ms", "sasl.login.read.timeout.ms":
		// Read by the security step (OAUTHBEARER, AWS_MSK_IAM, GSSAPI).
		return keySpec{kinds: "cpa", apply: func(*clientBuilder, entry) {}}, true
	}
	if strings.HasPrefix(k, "sasl.kerberos.") || strings.HasPrefix(k, "sasl.oauthbearer.") ||
		(strings.HasPrefix(k, "sasl.login.") && isClientConfigKey(k)) {
		return ignored("cpa", LevelInfo, noteUnsupported), true
	}
	if isClientConfigKey(k) {
		// security.protocol, sasl.mechanism, sasl.jaas.config and the
		// ssl.* keys mm2go maps: handled by the security step.
		return keySpec{kinds: "cpa", apply: func(*clientBuilder, entry) {}}, true
	}
	return keySpec{}, false
}

// zstdEncoderLevel maps Kafka's zstd level (zstd's native scale) to the
// four levels of franz-go's zstd encoder, the way klauspost/compress's
// EncoderLevelFromZstd does: <3 fastest, <6 default, <10 better, else best.
func zstdEncoderLevel(level int) int {
	switch {
	case level < 3:
		return 1
	case level < 6:
		return 2
	case level < 10:
		return 3
	}
	return 4
}

// clientBuilder turns one client's properties into kgo options.
type clientBuilder struct {
	p     *parser
	c     *Client
	kind  clientKind
	props entries
	opts  []kgo.Opt

	effective        map[string]string // values mm2go enforces, for Props
	userClientID     string
	requestTimeout   time.Duration
	retryBackoff     time.Duration // -1 when unset
	retryBackoffMax  time.Duration // -1 when unset
	fetchMaxBytes    int32
	batchMaxBytes    int32
	maxRequestSize   int32
	maxRequestOrigin entry
	compression      string
	gzipLevel        int
	zstdLevel        int
	dialTimeout      time.Duration // socket.connection.setup.timeout.ms; 0 when unset
	recvBuf, sendBuf int           // receive.buffer.bytes, send.buffer.bytes; -1 when unset or -1
}

// kindLetter is the letter of a client type in keySpec.kinds.
func (k clientKind) letter() string { return string(k)[:1] }

// kindNames spells out the client types in keySpec.kinds.
func kindNames(kinds string) string {
	var out []string
	for _, k := range []clientKind{kindConsumer, kindProducer, kindAdmin} {
		if strings.Contains(kinds, k.letter()) {
			out = append(out, string(k))
		}
	}
	return strings.Join(out, " and ")
}

// article returns "an" for admin and "a" otherwise.
func article(k clientKind) string {
	if k == kindAdmin {
		return "an"
	}
	return "a"
}

// apply handles one property.
func (b *clientBuilder) apply(k string, e entry) {
	spec, ok := clientKeySpec(k)
	switch {
	case e.origin == "":
		// A value mm2go fills in (enable.auto.commit, auto.offset.reset).
		if ok && spec.apply != nil {
			spec.apply(b, e)
		}
	case !ok:
		b.p.probs.warn(e.origin, "unknown %s property, ignored", b.kind)
	case !strings.Contains(spec.kinds, b.kind.letter()):
		b.p.probs.warn(e.origin, "ignored: not %s %s property (it is a %s property)", article(b.kind), b.kind, kindNames(spec.kinds))
	case spec.apply == nil:
		b.p.probs.addWarning(spec.level, e.origin, spec.note)
	default:
		spec.apply(b, e)
	}
}

// integer parses a decimal integer in [lo, hi] and reports errors against
// the key the value came from.
func (b *clientBuilder) integer(e entry, lo, hi int64, want string) (int64, bool) {
	n, err := strconv.ParseInt(javaTrim(e.value), 10, 64)
	if err != nil {
		b.p.probs.errorf(e.origin, "not an integer (got %s, want %s)", got(e.origin, e.value), want)
		return 0, false
	}
	if n < lo || n > hi {
		b.p.probs.errorf(e.origin, "out of range (got %s, want %s)", got(e.origin, e.value), want)
		return 0, false
	}
	return n, true
}

// millis parses milliseconds in [lo, hi]; it returns -1 on error.
func (b *clientBuilder) millis(e entry, lo, hi int64, want string) time.Duration {
	n, ok := b.integer(e, lo, hi, want)
	if !ok {
		return -1
	}
	return time.Duration(n) * time.Millisecond
}

// bootstrap parses "bootstrap.servers".
func (b *clientBuilder) bootstrap(e entry) {
	var seeds []string
	for _, s := range parseList(e.value) {
		host, port, err := net.SplitHostPort(s)
		n, perr := strconv.Atoi(port)
		if err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			b.p.probs.errorf(e.origin, "invalid address %q (got %q, want host:port[,host:port...])", s, e.value)
			continue
		}
		seeds = append(seeds, s)
	}
	if len(seeds) == 0 && len(parseList(e.value)) == 0 {
		b.p.probs.errorf(e.origin, "empty (got %q, want host:port[,host:port...])", e.value)
	}
	b.c.BootstrapServers = seeds
}

// metadataMaxAge maps "metadata.max.age.ms"; values under franz-go's 5s
// minimum refresh age lower that minimum too.
func (b *clientBuilder) metadataMaxAge(e entry) {
	d := b.millis(e, 10, 3600000, "10..3600000 milliseconds (franz-go's limits)")
	if d < 0 {
		return
	}
	b.opts = append(b.opts, kgo.MetadataMaxAge(d))
	if d < 5*time.Second {
		b.opts = append(b.opts, kgo.MetadataMinAge(d))
	}
}

// retryBackoffFn returns Kafka's exponential backoff: base doubling per
// retry up to max, with ±20% jitter.
func retryBackoffFn(base, maxBackoff time.Duration) func(int) time.Duration {
	if maxBackoff < base {
		maxBackoff = base
	}
	return func(tries int) time.Duration {
		d := base
		for i := 1; i < tries && d < maxBackoff; i++ {
			d *= 2
		}
		d = min(d, maxBackoff)
		jitter := 0.8 + 0.4*rand.Float64()
		return time.Duration(float64(d) * jitter)
	}
}

package config

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// newKgo builds a kgo client from the options so tests can read them back
// with OptValue; it does not connect.
func newKgo(t *testing.T, c *Client) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(c.Opts()...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// TestClientPropertyPrecedence ports MirrorMakerConfigTest's client config
// cases and the step order of MM2's connector client configs: cluster
// CLIENT_CONFIG_DEF keys < "<s>-><t>.<kind>.*" < "<alias>.<kind>.*" (and the
// fanned-out cluster and top-level security keys).
func TestClientPropertyPrecedence(t *testing.T) {
	c, _ := mustLoad(t, `
clusters = a, b
a.bootstrap.servers = 127.0.0.1:9092, 127.0.0.2:9092
b.bootstrap.servers = 127.0.0.3:9092
security.protocol = SSL
a.security.protocol = PLAINTEXT
a.producer.security.protocol = SSL
a->b.enabled = true
a->b.producer.linger.ms = 5
b.producer.linger.ms = 7
a->b.consumer.fetch.min.bytes = 10
a.consumer.client.id = my-consumer
a->b.admin.client.id = flow-admin
a->b.producer.override.batch.size = 65536
a->b.consumer.poll.timeout.ms = 250
a->b.admin.timeout.ms = 5000
`)
	f := c.Flow("a", "b")
	props := func(r Role) map[string]string { return f.Client(r).Props() }

	// testClientConfigProperties: admin PLAINTEXT, producer SSL.
	require.Equal(t, "PLAINTEXT", props(RoleSourceAdmin)["security.protocol"])
	require.Equal(t, "PLAINTEXT", props(RoleSourceConsumer)["security.protocol"])
	require.Equal(t, "SSL", props(RoleSourceProducer)["security.protocol"])
	require.Equal(t, SecuritySSL, f.Client(RoleSourceProducer).SecurityProtocol)
	require.Equal(t, SecurityPlaintext, f.Client(RoleSourceAdmin).SecurityProtocol)
	// Cluster b has no own protocol: the top-level SSL fills it.
	for _, r := range []Role{RoleTargetConsumer, RoleTargetProducer, RoleTargetAdmin} {
		require.Equal(t, SecuritySSL, f.Client(r).SecurityProtocol, r.String())
		require.NotNil(t, f.Client(r).TLSConfig(), r.String())
	}
	require.Nil(t, f.Client(RoleSourceAdmin).TLSConfig())
	require.Equal(t, "127.0.0.1:9092, 127.0.0.2:9092", props(RoleSourceAdmin)["bootstrap.servers"])
	require.Equal(t, []string{"127.0.0.1:9092", "127.0.0.2:9092"}, f.Client(RoleSourceAdmin).BootstrapServers)

	// Flow-level producer.* reaches both producers; the cluster's own wins.
	require.Equal(t, "5", props(RoleSourceProducer)["linger.ms"])
	require.Equal(t, "7", props(RoleTargetProducer)["linger.ms"])
	require.Equal(t, "10", props(RoleSourceConsumer)["fetch.min.bytes"])
	require.Equal(t, "10", props(RoleTargetConsumer)["fetch.min.bytes"])
	// producer.override.* reaches only the producer that writes replicated data.
	require.Equal(t, "65536", props(RoleTargetProducer)["batch.size"])
	require.NotContains(t, props(RoleSourceProducer), "batch.size")
	// Connector keys that merely start with consumer./admin. reach no client.
	require.NotContains(t, props(RoleSourceConsumer), "poll.timeout.ms")
	require.NotContains(t, props(RoleSourceAdmin), "timeout.ms")
	require.Equal(t, 250*time.Millisecond, f.ConsumerPollTimeout)
	require.Equal(t, 5*time.Second, f.AdminTimeout)

	// Forced consumer settings.
	require.Equal(t, "false", props(RoleSourceConsumer)["enable.auto.commit"])
	require.Equal(t, "earliest", props(RoleTargetConsumer)["auto.offset.reset"])

	// client.id = [<user client.id>|]<source>-><target>|mm2go|<role>.
	require.Equal(t, "my-consumer|a->b|mm2go|replication-consumer", f.Client(RoleSourceConsumer).ID)
	require.Equal(t, "flow-admin|a->b|mm2go|replication-source-admin", f.Client(RoleSourceAdmin).ID)
	require.Equal(t, "flow-admin|a->b|mm2go|replication-target-admin", f.Client(RoleTargetAdmin).ID)
	require.Equal(t, "a->b|mm2go|offset-syncs-source-producer", f.Client(RoleSourceProducer).ID)
	require.Equal(t, "a->b|mm2go|replication-producer", f.Client(RoleTargetProducer).ID)
	require.Equal(t, "a->b|mm2go|checkpoints-target-consumer", f.Client(RoleTargetConsumer).ID)
	require.Equal(t, f.Client(RoleSourceConsumer).ID, props(RoleSourceConsumer)["client.id"])
	require.Equal(t, "my-consumer|a->b|mm2go|replication-consumer", newKgo(t, f.Client(RoleSourceConsumer)).OptValue(kgo.ClientID))
	require.Equal(t, "a", f.Client(RoleSourceConsumer).Cluster)
	require.Equal(t, "b", f.Client(RoleTargetConsumer).Cluster)
}

// TestClientOptsMapping checks every mapped key by reading the option back
// from a kgo client built with Opts.
func TestClientOptsMapping(t *testing.T) {
	c, ws := mustLoad(t, twoClusters+`
a.consumer.fetch.max.bytes = 209715200
a.consumer.max.partition.fetch.bytes = 2097152
a.consumer.fetch.min.bytes = 1024
a.consumer.fetch.max.wait.ms = 250
a.consumer.isolation.level = read_committed
a.consumer.auto.offset.reset = latest
a.consumer.request.timeout.ms = 45000
a.consumer.metadata.max.age.ms = 1000
a.consumer.connections.max.idle.ms = 60000
a.consumer.socket.connection.setup.timeout.ms = 3000
a.consumer.retries = 7
a.consumer.default.api.timeout.ms = 20000
a.consumer.client.rack = rack-1
a.consumer.check.crcs = false
a.consumer.retry.backoff.ms = 50
a.consumer.retry.backoff.max.ms = 400
b.producer.compression.type = zstd
b.producer.compression.zstd.level = 9
b.producer.batch.size = 65536
b.producer.linger.ms = 20
b.producer.buffer.memory = 33554432
b.producer.max.request.size = 2097152
b.producer.delivery.timeout.ms = 120000
b.producer.request.timeout.ms = 30000
b.producer.acks = 1
b.producer.enable.idempotence = false
b.admin.request.timeout.ms = 15000
b.admin.default.api.timeout.ms = 30000
b.admin.retry.backoff.ms = 0
`)
	require.True(t, hasWarning(ws, "b.producer.acks", "overridden"))
	require.True(t, hasWarning(ws, "b.producer.enable.idempotence", "overridden"))
	f := c.Flow("a", "b")

	cons := newKgo(t, f.Client(RoleSourceConsumer))
	require.Equal(t, []string{"a1:9092"}, cons.OptValue(kgo.SeedBrokers))
	require.Equal(t, int32(209715200), cons.OptValue(kgo.FetchMaxBytes))
	require.Equal(t, int32(419430400), cons.OptValue(kgo.BrokerMaxReadBytes), "raised to 2x the fetch limit")
	require.Equal(t, int32(2097152), cons.OptValue(kgo.FetchMaxPartitionBytes))
	require.Equal(t, int32(1024), cons.OptValue(kgo.FetchMinBytes))
	require.Equal(t, 250*time.Millisecond, cons.OptValue(kgo.FetchMaxWait))
	require.Equal(t, int8(1), cons.OptValue(kgo.FetchIsolationLevel), "read_committed")
	require.Equal(t, kgo.NewOffset().AtEnd(), cons.OptValue(kgo.ConsumeResetOffset))
	require.Equal(t, 45*time.Second, cons.OptValue(kgo.RequestTimeoutOverhead))
	require.Equal(t, time.Second, cons.OptValue(kgo.MetadataMaxAge))
	require.Equal(t, time.Second, cons.OptValue(kgo.MetadataMinAge), "lowered so max >= min")
	require.Equal(t, time.Minute, cons.OptValue(kgo.ConnIdleTimeout))
	require.Equal(t, 3*time.Second, cons.OptValue(kgo.DialTimeout))
	require.Equal(t, int64(7), cons.OptValue(kgo.RequestRetries))
	require.Equal(t, 20*time.Second, cons.OptValue(kgo.RetryTimeout))
	require.Equal(t, "rack-1", cons.OptValue(kgo.Rack))
	require.Equal(t, true, cons.OptValue(kgo.DisableFetchCRCValidation))
	backoff := cons.OptValue(kgo.RetryBackoffFn).(func(int) time.Duration)
	require.InDelta(t, float64(50*time.Millisecond), float64(backoff(1)), float64(10*time.Millisecond))
	require.InDelta(t, float64(400*time.Millisecond), float64(backoff(10)), float64(80*time.Millisecond))

	prod := newKgo(t, f.Client(RoleTargetProducer))
	require.Equal(t, []string{"b1:9092"}, prod.OptValue(kgo.SeedBrokers))
	codecs := prod.OptValue(kgo.ProducerBatchCompression).([]kgo.CompressionCodec)
	require.Equal(t, []kgo.CompressionCodec{kgo.ZstdCompression().WithLevel(3)}, codecs)
	require.Equal(t, int32(65536), prod.OptValue(kgo.ProducerBatchMaxBytes))
	require.Equal(t, 20*time.Millisecond, prod.OptValue(kgo.ProducerLinger))
	require.Equal(t, int64(33554432), prod.OptValue(kgo.MaxBufferedBytes))
	require.Equal(t, int32(2097152), prod.OptValue(kgo.BrokerMaxWriteBytes))
	require.Equal(t, 120*time.Second, prod.OptValue(kgo.RecordDeliveryTimeout))
	require.Equal(t, 30*time.Second, prod.OptValue(kgo.ProduceRequestTimeout))
	require.Equal(t, kgo.AllISRAcks(), prod.OptValue(kgo.RequiredAcks))
	require.Equal(t, false, prod.OptValue(kgo.DisableIdempotentWrite))
	require.Equal(t, "all", f.Client(RoleTargetProducer).Props()["acks"])
	require.Equal(t, "true", f.Client(RoleTargetProducer).Props()["enable.idempotence"])

	adm := newKgo(t, f.Client(RoleTargetAdmin))
	require.Equal(t, 15*time.Second, adm.OptValue(kgo.RequestTimeoutOverhead))
	require.Equal(t, 30*time.Second, adm.OptValue(kgo.RetryTimeout))
	admBackoff := adm.OptValue(kgo.RetryBackoffFn).(func(int) time.Duration)
	require.Equal(t, time.Duration(0), admBackoff(3), "an explicit 0 means no backoff")

	// Consumers of the other side keep the defaults: MM2's offset reset,
	// mm2go's read_committed.
	tc := newKgo(t, f.Client(RoleTargetConsumer))
	require.Equal(t, kgo.NewOffset().AtStart(), tc.OptValue(kgo.ConsumeResetOffset))
	require.Equal(t, int8(1), tc.OptValue(kgo.FetchIsolationLevel))
}

// TestClientKeyWarnings checks that Java-only and misplaced client keys get
// one warning each, naming the key as written.
func TestClientKeyWarnings(t *testing.T) {
	_, ws := mustLoad(t, twoClusters+`
b->a.enabled = true
a.consumer.key.deserializer = org.apache.kafka.common.serialization.ByteArrayDeserializer
a.producer.value.serializer = org.apache.kafka.common.serialization.ByteArraySerializer
a.producer.partitioner.class = com.example.P
a.consumer.interceptor.classes = com.example.I
a.consumer.linger.ms = 5
a.admin.fetch.max.bytes = 5
a.consumer.no.such.thing = 1
a.ssl.engine.factory.class = com.example.F
a.consumer.group.id = g
`)
	tests := []struct{ key, substr string }{
		{"a.consumer.key.deserializer", "Java plug-in"},
		{"a.producer.value.serializer", "Java plug-in"},
		{"a.producer.partitioner.class", "partition it came from"},
		{"a.consumer.interceptor.classes", "Java plug-in"},
		{"a.consumer.linger.ms", "not a consumer property (it is a producer property)"},
		{"a.admin.fetch.max.bytes", "not an admin property (it is a consumer property)"},
		{"a.consumer.no.such.thing", "unknown consumer property"},
		{"a.ssl.engine.factory.class", "Java plug-in"},
		{"a.consumer.group.id", "without a consumer group"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			n := 0
			for _, w := range ws {
				if w.Key == tt.key {
					n++
					require.Contains(t, w.Message, tt.substr)
				}
			}
			require.Equal(t, 1, n, "one warning per key, although the key reaches several clients")
		})
	}
}

// TestClientBuildErrors covers option values franz-go cannot take.
func TestClientBuildErrors(t *testing.T) {
	tests := []struct {
		name, extra, want string
	}{
		{"batch larger than request", "b.producer.batch.size = 2000000\nb.producer.max.request.size = 1048576\n",
			`b.producer.max.request.size: smaller than the producer batch size (got "1048576", want at least 2000000`},
		{"bad address", "a.bootstrap.servers = a1\n", `a.bootstrap.servers: invalid address "a1"`},
		{"bad port", "a.bootstrap.servers = a1:http\n", `a.bootstrap.servers: invalid address "a1:http"`},
		{"offset reset none", "a.consumer.auto.offset.reset = none\n", `a.consumer.auto.offset.reset: "none" is not supported`},
		{"delivery timeout too short", "b.producer.delivery.timeout.ms = 10\n", `b.producer.delivery.timeout.ms: out of range (got "10"`},
		{"not a number", "a.consumer.fetch.min.bytes = lots\n", `a.consumer.fetch.min.bytes: not an integer (got "lots"`},
		{"client id too long", "a.admin.client.id = " + strings.Repeat("x", 300) + "\n",
			"a.admin.*: franz-go rejects the resulting client options"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Contains(t, loadErr(t, twoClusters+tt.extra), tt.want)
		})
	}
}

func TestRoleNames(t *testing.T) {
	tests := []struct {
		role      Role
		name, mm2 string
		source    bool
		kind      clientKind
	}{
		{RoleSourceConsumer, "source-consumer", "replication-consumer", true, kindConsumer},
		{RoleSourceProducer, "source-producer", "offset-syncs-source-producer", true, kindProducer},
		{RoleSourceAdmin, "source-admin", "replication-source-admin", true, kindAdmin},
		{RoleTargetConsumer, "target-consumer", "checkpoints-target-consumer", false, kindConsumer},
		{RoleTargetProducer, "target-producer", "replication-producer", false, kindProducer},
		{RoleTargetAdmin, "target-admin", "replication-target-admin", false, kindAdmin},
		{Role(9), "unknown-role", "unknown-role", false, kindAdmin},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.name, tt.role.String())
			require.Equal(t, tt.mm2, tt.role.ClientRole())
			if tt.role.valid() {
				require.Equal(t, tt.source, tt.role.isSource())
				require.Equal(t, tt.kind, tt.role.kind())
			}
		})
	}
	require.Len(t, Roles(), 6)
}

func TestWarningString(t *testing.T) {
	w := Warning{Key: "a.xxx", Message: "unknown key, ignored", Level: LevelInfo}
	require.Equal(t, "a.xxx: unknown key, ignored", w.String())
	require.Equal(t, "info", w.Level.String())
	require.Equal(t, "warn", LevelWarn.String())
}

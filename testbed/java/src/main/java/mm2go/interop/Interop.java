package mm2go.interop;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.connect.mirror.Checkpoint;
import org.apache.kafka.connect.mirror.Heartbeat;
import org.apache.kafka.connect.mirror.OffsetSync;
import org.apache.kafka.connect.mirror.RemoteClusterUtils;

/**
 * Calls Apache MirrorMaker 2's own client code against a cluster and prints the answers as one
 * JSON document on stdout, for mm2go's interoperability tests. Logs go to stderr.
 *
 * <pre>
 * client BOOTSTRAP REMOTE_ALIAS GROUP TIMEOUT_MS [--hops ALIAS]... [--prop KEY=VALUE]...
 *     RemoteClusterUtils.translateOffsets(props, REMOTE_ALIAS, GROUP, TIMEOUT_MS),
 *     upstreamClusters, checkpointTopics, heartbeatTopics and replicationHops(ALIAS) for each
 *     --hops alias; props are bootstrap.servers=BOOTSTRAP plus every --prop.
 * records offset-syncs|checkpoints|heartbeats BOOTSTRAP TOPIC TIMEOUT_MS
 *     every record of TOPIC from the beginning to its current end, decoded with MM2's
 *     OffsetSync/Checkpoint/Heartbeat.deserializeRecord; a record MM2 cannot decode is listed
 *     with an "error" field.
 * msk-iam HOST
 *     what Amazon MSK's official aws-msk-iam-auth library sends, with the credentials and region
 *     of the AWS SDK's default chains (AWS_ACCESS_KEY_ID, AWS_REGION, ...): "payload", the
 *     AWS_MSK_IAM SASL payload for broker HOST (AWS4SignedPayloadGenerator), and "token", the
 *     OAUTHBEARER token of IAMOAuthBearerLoginCallbackHandler.
 * </pre>
 *
 * Exit status 0 on success, 2 for bad arguments, 1 for any other failure.
 */
public final class Interop {
    private Interop() {
    }

    public static void main(String[] args) {
        try {
            if (args.length == 0) {
                throw new IllegalArgumentException("no command");
            }
            String out = switch (args[0]) {
                case "client" -> client(args);
                case "records" -> records(args);
                case "msk-iam" -> MskIam.run(args);
                default -> throw new IllegalArgumentException("unknown command " + args[0]);
            };
            System.out.println(out);
            System.out.flush();
            System.exit(0);
        } catch (IllegalArgumentException e) {
            System.err.println("interop: " + e.getMessage());
            System.err.println("usage: client BOOTSTRAP REMOTE_ALIAS GROUP TIMEOUT_MS [--hops ALIAS]... [--prop K=V]...");
            System.err.println("       records offset-syncs|checkpoints|heartbeats BOOTSTRAP TOPIC TIMEOUT_MS");
            System.err.println("       msk-iam HOST");
            System.exit(2);
        } catch (Exception e) {
            System.err.println("interop: " + e);
            e.printStackTrace(System.err);
            System.exit(1);
        }
    }

    private static String client(String[] args) throws Exception {
        if (args.length < 5) {
            throw new IllegalArgumentException("client needs BOOTSTRAP REMOTE_ALIAS GROUP TIMEOUT_MS");
        }
        Map<String, Object> props = new HashMap<>();
        props.put("bootstrap.servers", args[1]);
        String remote = args[2];
        String group = args[3];
        Duration timeout = Duration.ofMillis(Long.parseLong(args[4]));
        List<String> hops = new ArrayList<>();
        for (int i = 5; i < args.length; i++) {
            if (i + 1 >= args.length) {
                throw new IllegalArgumentException(args[i] + " needs a value");
            }
            String v = args[++i];
            switch (args[i - 1]) {
                case "--hops" -> hops.add(v);
                case "--prop" -> {
                    int eq = v.indexOf('=');
                    if (eq <= 0) {
                        throw new IllegalArgumentException("--prop wants KEY=VALUE, got " + v);
                    }
                    props.put(v.substring(0, eq), v.substring(eq + 1));
                }
                default -> throw new IllegalArgumentException("unknown option " + args[i - 1]);
            }
        }

        Map<TopicPartition, OffsetAndMetadata> translated =
            RemoteClusterUtils.translateOffsets(props, remote, group, timeout);
        List<Map.Entry<TopicPartition, OffsetAndMetadata>> entries = new ArrayList<>(translated.entrySet());
        entries.sort(Comparator.comparing((Map.Entry<TopicPartition, OffsetAndMetadata> e) -> e.getKey().topic())
            .thenComparingInt(e -> e.getKey().partition()));
        Json j = new Json().open('{');
        j.key("translateOffsets").open('[');
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : entries) {
            j.open('{')
                .key("topic").str(e.getKey().topic())
                .key("partition").num(e.getKey().partition())
                .key("offset").num(e.getValue().offset())
                .key("metadata").str(e.getValue().metadata())
                .close('}');
        }
        j.close(']');
        j.key("upstreamClusters").strs(RemoteClusterUtils.upstreamClusters(props));
        j.key("checkpointTopics").strs(RemoteClusterUtils.checkpointTopics(props));
        j.key("heartbeatTopics").strs(RemoteClusterUtils.heartbeatTopics(props));
        j.key("replicationHops").open('{');
        for (String alias : hops) {
            j.key(alias).num(RemoteClusterUtils.replicationHops(props, alias));
        }
        j.close('}');
        return j.close('}').toString();
    }

    private static String records(String[] args) {
        if (args.length != 5) {
            throw new IllegalArgumentException("records needs KIND BOOTSTRAP TOPIC TIMEOUT_MS");
        }
        String kind = args[1];
        if (!Set.of("offset-syncs", "checkpoints", "heartbeats").contains(kind)) {
            throw new IllegalArgumentException("unknown record kind " + kind);
        }
        String topic = args[3];
        Duration timeout = Duration.ofMillis(Long.parseLong(args[4]));
        Map<String, Object> cfg = new HashMap<>();
        cfg.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args[2]);
        cfg.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        cfg.put(ConsumerConfig.CLIENT_ID_CONFIG, "mm2go-interop-records");
        Json j = new Json().open('[');
        try (KafkaConsumer<byte[], byte[]> c =
                 new KafkaConsumer<>(cfg, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo p : c.partitionsFor(topic, timeout)) {
                tps.add(new TopicPartition(p.topic(), p.partition()));
            }
            tps.sort(Comparator.comparingInt(TopicPartition::partition));
            if (tps.isEmpty()) {
                return j.close(']').toString();
            }
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> ends = new HashMap<>(c.endOffsets(tps, timeout));
            Map<TopicPartition, List<ConsumerRecord<byte[], byte[]>>> got = new TreeMap<>(
                Comparator.comparingInt(TopicPartition::partition));
            long deadline = System.nanoTime() + timeout.toNanos();
            while (!caughtUp(c, ends)) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("timed out reading " + topic + " to " + ends);
                }
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                    TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                    if (r.offset() < ends.get(tp)) {
                        got.computeIfAbsent(tp, k -> new ArrayList<>()).add(r);
                    }
                }
            }
            for (List<ConsumerRecord<byte[], byte[]>> rs : got.values()) {
                for (ConsumerRecord<byte[], byte[]> r : rs) {
                    decode(j, kind, r);
                }
            }
        }
        return j.close(']').toString();
    }

    private static boolean caughtUp(KafkaConsumer<byte[], byte[]> c, Map<TopicPartition, Long> ends) {
        for (Map.Entry<TopicPartition, Long> e : ends.entrySet()) {
            if (c.position(e.getKey()) < e.getValue()) {
                return false;
            }
        }
        return true;
    }

    private static void decode(Json j, String kind, ConsumerRecord<byte[], byte[]> r) {
        j.open('{').key("partition").num(r.partition()).key("offset").num(r.offset());
        try {
            switch (kind) {
                case "offset-syncs" -> {
                    OffsetSync s = OffsetSync.deserializeRecord(r);
                    j.key("topic").str(s.topicPartition().topic())
                        .key("topicPartition").num(s.topicPartition().partition())
                        .key("upstreamOffset").num(s.upstreamOffset())
                        .key("downstreamOffset").num(s.downstreamOffset())
                        .key("string").str(s.toString());
                }
                case "checkpoints" -> {
                    Checkpoint cp = Checkpoint.deserializeRecord(r);
                    j.key("group").str(cp.consumerGroupId())
                        .key("topic").str(cp.topicPartition().topic())
                        .key("topicPartition").num(cp.topicPartition().partition())
                        .key("upstreamOffset").num(cp.upstreamOffset())
                        .key("downstreamOffset").num(cp.downstreamOffset())
                        .key("metadata").str(cp.metadata())
                        .key("string").str(cp.toString());
                }
                default -> {
                    Heartbeat hb = Heartbeat.deserializeRecord(r);
                    j.key("sourceClusterAlias").str(hb.sourceClusterAlias())
                        .key("targetClusterAlias").str(hb.targetClusterAlias())
                        .key("timestamp").num(hb.timestamp())
                        .key("string").str(hb.toString());
                }
            }
        } catch (RuntimeException e) {
            j.key("error").str(e.toString());
        }
        j.close('}');
    }

    /** A minimal JSON writer: commas are inserted between values automatically. */
    static final class Json {
        private final StringBuilder b = new StringBuilder();
        private boolean needComma;

        Json open(char c) {
            sep();
            b.append(c);
            needComma = false;
            return this;
        }

        Json close(char c) {
            b.append(c);
            needComma = true;
            return this;
        }

        Json key(String k) {
            sep();
            quote(k);
            b.append(':');
            needComma = false;
            return this;
        }

        Json str(String s) {
            sep();
            if (s == null) {
                b.append("null");
            } else {
                quote(s);
            }
            needComma = true;
            return this;
        }

        Json num(long n) {
            sep();
            b.append(n);
            needComma = true;
            return this;
        }

        Json strs(Collection<String> ss) {
            open('[');
            for (String s : new TreeSet<>(ss)) {
                str(s);
            }
            return close(']');
        }

        private void sep() {
            if (needComma) {
                b.append(',');
                needComma = false;
            }
        }

        private void quote(String s) {
            b.append('"');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                switch (c) {
                    case '"' -> b.append("\\\"");
                    case '\\' -> b.append("\\\\");
                    case '\n' -> b.append("\\n");
                    case '\r' -> b.append("\\r");
                    case '\t' -> b.append("\\t");
                    default -> {
                        if (c < 0x20) {
                            b.append(String.format("\\u%04x", (int) c));
                        } else {
                            b.append(c);
                        }
                    }
                }
            }
            b.append('"');
        }

        @Override
        public String toString() {
            return b.toString();
        }
    }
}

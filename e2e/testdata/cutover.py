#!/usr/bin/env python3
"""The seed scenario's application around `mm2go cutover`, with clients that
are not franz-go (confluent-kafka, librdkafka).

One producer writes records with unique values to the source topic at a
steady rate. When the source refuses its records (TOPIC_AUTHORIZATION_FAILED:
the cutover fenced it), it moves to the target's local topic and sends the
refused records there again, then goes on writing there. One consumer group
reads the source topic with auto.offset.reset=error (Kafka's "none") and
auto-commit until the file CONTROL/switch-consumer appears; it then closes
(its final commit) and starts on the target, subscribed to the remote and
the local topic, restarted every 2 s while it finds no committed offset, as
Kubernetes restarts a crashing consumer. The producer stops when the file
CONTROL/stop-producer appears; the consumer runs until it received every
record produced, or 90 s after that.

The spec is a JSON document on stdin: {"source", "target", "topic",
"remote", "local", "group", "partitions", "rate", "control"}. The result, one
JSON object on stdout, says what was produced (on each side, and refused by
the fence), received, missing and duplicated. Progress goes to stderr.
"""

import json
import os
import sys
import threading
import time
import traceback

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

RESTART_DELAY = 2.0
DEADLINE = 90.0


def log(*args):
    print(time.strftime("%H:%M:%S"), "cutover.py:", *args, file=sys.stderr, flush=True)


class Producing:
    def __init__(self, spec):
        self.spec = spec
        self.sent = {}  # value -> (cluster, partition, offset)
        self.refused = []  # values the source refused, in order
        self.errors = []
        self.lock = threading.Lock()
        self.fenced = threading.Event()
        self.on_source = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def _producer(self, bootstrap):
        return Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 20, "client.id": "cutover-producer"})

    def _delivered(self, cluster):
        def cb(err, msg):
            with self.lock:
                if err is None:
                    self.sent[msg.value()] = (cluster, msg.partition(), msg.offset())
                elif cluster == "source" and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    self.refused.append(msg.value())
                    self.fenced.set()
                else:
                    self.errors.append("%s: %s" % (cluster, err))
        return cb

    def _write(self, p, topic, value, cb):
        seq = int(value.decode().rsplit(":", 1)[1])
        try:
            p.produce(topic, value=value, key=str(seq).encode(), partition=seq % self.spec["partitions"], on_delivery=cb)
        except KafkaException as e:
            # librdkafka refuses at once what it knows the broker refuses.
            if e.args[0].code() != KafkaError.TOPIC_AUTHORIZATION_FAILED or topic != self.spec["topic"]:
                raise
            with self.lock:
                self.refused.append(value)
                self.fenced.set()

    def run(self):
        try:
            src = self._producer(self.spec["source"])
            cb = self._delivered("source")
            seq, start = 0, time.monotonic()
            while not self.fenced.is_set():
                due = int((time.monotonic() - start) * self.spec["rate"]) - seq
                for _ in range(max(0, due)):
                    self._write(src, self.spec["topic"], b"rec:%d" % seq, cb)
                    seq += 1
                src.poll(0.01)
            src.flush(30)  # the records in flight: written or refused
            self.on_source = sum(1 for c, _, _ in self.sent.values() if c == "source")
            log("fenced on the source after %d records; %d refused, sent again to the target" % (seq, len(self.refused)))
            dst = self._producer(self.spec["target"])
            cb = self._delivered("target")
            with self.lock:
                refused = list(self.refused)
            for v in refused:
                self._write(dst, self.spec["local"], v, cb)
            start, base = time.monotonic(), seq
            while not os.path.exists(os.path.join(self.spec["control"], "stop-producer")):
                due = int((time.monotonic() - start) * self.spec["rate"]) - (seq - base)
                for _ in range(max(0, due)):
                    self._write(dst, self.spec["local"], b"rec:%d" % seq, cb)
                    seq += 1
                dst.poll(0.01)
            if dst.flush(30) != 0:
                self.errors.append("target producer did not flush")
        except Exception:
            self.errors.append(traceback.format_exc())


class Consuming:
    def __init__(self, spec):
        self.spec = spec
        self.received = []  # (value, cluster, topic, partition, offset)
        self.restarts = 0
        self.errors = []

    def _consumer(self, bootstrap):
        return Consumer({"bootstrap.servers": bootstrap, "group.id": self.spec["group"], "auto.offset.reset": "error",
                         "client.id": "cutover-consumer", "session.timeout.ms": 10000, "enable.auto.commit": True})

    def _batch(self, c, cluster):
        ok = True
        for m in c.consume(num_messages=500, timeout=0.2):
            if m.error() is not None:
                if m.error().code() == KafkaError._AUTO_OFFSET_RESET:
                    ok = False
                elif m.error().code() != KafkaError._PARTITION_EOF:
                    self.errors.append("%s: %s" % (cluster, m.error()))
                continue
            self.received.append((m.value(), cluster, m.topic(), m.partition(), m.offset()))
        return ok

    def on_source(self):
        c = self._consumer(self.spec["source"])
        c.subscribe([self.spec["topic"]])
        while not os.path.exists(os.path.join(self.spec["control"], "switch-consumer")):
            if not self._batch(c, "source"):
                self.errors.append("no committed offset on the source")
                break
        c.close()  # the final commit; the consumer leaves the group
        log("consumer left the source after %d records" % len(self.received))

    def on_target(self, done):
        while not done():
            c = self._consumer(self.spec["target"])
            c.subscribe([self.spec["remote"], self.spec["local"]])
            ok = True
            while ok and not done():
                ok = self._batch(c, "target")
            c.close()
            if not ok:
                self.restarts += 1
                time.sleep(RESTART_DELAY)


def main():
    spec = json.load(sys.stdin)
    prod, cons = Producing(spec), Consuming(spec)
    prod.thread.start()
    result = {}
    try:
        cons.on_source()
        stopped = [None]

        def done():
            if stopped[0] is None and not prod.thread.is_alive():
                stopped[0] = time.time()
            if stopped[0] is None:
                return False
            if time.time() - stopped[0] > DEADLINE:
                return True
            with prod.lock:
                want = set(prod.sent)
            return want <= {r[0] for r in cons.received}

        cons.on_target(done)
        prod.thread.join()
        sent = prod.sent
        seen = {}
        for r in cons.received:
            seen.setdefault(r[0], []).append(r)
        missing = sorted(v.decode() for v in sent.keys() - seen.keys())
        dups = sorted((v.decode(), [list(x[1:]) for x in rs]) for v, rs in seen.items() if len(rs) > 1)
        result = {
            "produced": len(sent), "produced_on_source": prod.on_source, "refused_by_fence": len(prod.refused),
            "received": len(cons.received), "missing": len(missing), "duplicated": len(dups),
            "unexpected": len(seen.keys() - sent.keys()),
            "missing_sample": missing[:5], "duplicated_sample": dups[:5], "restarts": cons.restarts,
            "errors": prod.errors + cons.errors,
        }
    except Exception:
        result["errors"] = [traceback.format_exc()]
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

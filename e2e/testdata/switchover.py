#!/usr/bin/env python3
"""Failover trials of the seed scenario with clients that are not franz-go.

Each trial is one topic, one producer and one consumer group, all with
confluent-kafka (librdkafka):

1. The producer writes records with unique values to the source topic at a
   steady rate; the consumer group reads it on the source with
   auto.offset.reset=error (Kafka's "none") and auto-commit (of the offsets
   it stores after each message it delivered) or a synchronous commit after
   every batch.
2. At the switch the producer moves to the target (default policy: the local
   topic at once; identity policy: the same topic once replication has
   copied everything it wrote on the source, as the README's runbook says).
3. `delay` seconds later the consumer closes on the source (its final
   commit) and starts on the target, subscribed to the remote and the local
   topic. Whenever it finds no committed offset it is closed and started
   again `restart_delay` seconds later, as Kubernetes restarts a crashing
   consumer.
4. The producer stops `tail` seconds after the consumer switched; the
   consumer runs until it received every record produced, or `deadline`.

The spec is a JSON document on stdin: {"source": BOOTSTRAP, "target":
BOOTSTRAP, "concurrency": N, "trials": [{"name", "topic", "remote",
"local", "group", "partitions", "rate", "delay", "commit": "auto"|"manual",
"identity": bool}, ...]}. The result, one JSON object per trial on stdout,
says what was produced, received, missing and duplicated, and when the
target group had an offset on every partition after the final commit on the
source. Progress goes to stderr.
"""

import faulthandler
import json
import multiprocessing
import multiprocessing.connection
import sys
import threading
import time
import traceback

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka import ConsumerGroupTopicPartitions

WARM = 4.0           # seconds of traffic on the source before the switch
TAIL = 2.0           # seconds the producer goes on after the consumer switched
RESTART_DELAY = 2.0  # seconds between a failed consumer and its restart
DEADLINE = 90.0      # seconds after the producer stopped for the consumer to finish


def log(*args):
    print(time.strftime("%H:%M:%S") + ".%03d" % (time.time() % 1 * 1000), *args, file=sys.stderr, flush=True)


class Producing:
    """A producer thread that can be moved from one cluster to the other."""

    def __init__(self, spec, trial):
        self.spec, self.t = spec, trial
        self.sent = {}  # value -> (cluster, partition, offset) as acknowledged
        self.cluster = "source"
        self.lock = threading.Lock()
        self.switch = threading.Event()
        self.stop = threading.Event()
        self.errors = []
        self.source_sent = 0
        self.switched_at = None
        self.on_target = threading.Event()
        self.on_target_at = None
        self.thread = threading.Thread(target=self.run, daemon=True)

    def _delivered(self, err, msg):
        if err is not None:
            self.errors.append(str(err))
            return
        with self.lock:
            self.sent[msg.value()] = (self.cluster, msg.partition(), msg.offset())

    def _producer(self, bootstrap):
        return Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 50, "client.id": "switchover-" + self.t["name"]})

    def _write(self, p, topic, seq):
        value = ("%s:%d" % (self.t["name"], seq)).encode()
        p.produce(topic, value=value, key=str(seq).encode(), partition=seq % self.t["partitions"],
                  on_delivery=self._delivered)

    def _paced(self, p, topic, seq, until):
        """Writes at the trial's rate, every 10 ms what is due, until set."""
        start, n = time.monotonic(), 0
        while not until.wait(0.01):
            due = int((time.monotonic() - start) * self.t["rate"]) - n
            for _ in range(max(0, due)):
                self._write(p, topic, seq)
                seq += 1
                n += 1
            p.poll(0)
        return seq

    def run(self):
        try:
            src = self._producer(self.spec["source"])
            seq = self._paced(src, self.t["topic"], 0, self.switch)
            if src.flush(30) != 0:
                self.errors.append("source producer did not flush")
            self.source_sent = seq
            self.switched_at = time.time()
            self.cluster = "target"
            if self.t["identity"]:
                wait_replicated(self.spec, self.t)
            dst = self._producer(self.spec["target"])
            self.on_target_at = time.time()
            self.on_target.set()
            self._paced(dst, self.t["local"], seq, self.stop)
            if dst.flush(30) != 0:
                self.errors.append("target producer did not flush")
        except Exception:
            self.errors.append(traceback.format_exc())
        finally:
            self.on_target.set()


def ends(c, topic, partitions):
    return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1] for p in range(partitions)]


def wait_replicated(spec, t):
    """Identity policy: wait until the target topic holds what the source has.

    Records are counted, not end offsets compared: the target's end offsets
    also count the abort markers of mm2go's fencing (one per partition and
    start of the flow). The source topic is fresh and written by this
    trial's producer alone, so its end offsets are its record counts."""
    src = Consumer({"bootstrap.servers": spec["source"], "group.id": "switchover-watermarks", "enable.auto.commit": False})
    try:
        want = ends(src, t["topic"], t["partitions"])
    finally:
        src.close()
    dst = Consumer({"bootstrap.servers": spec["target"], "group.id": "switchover-watermarks",
                    "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        dst.assign([TopicPartition(t["remote"], p, OFFSET_BEGINNING) for p in range(t["partitions"])])
        got = [0] * t["partitions"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for m in dst.consume(num_messages=10000, timeout=0.1):
                if m.error() is None:
                    got[m.partition()] += 1
            if got == want:
                return
            if any(g > w for g, w in zip(got, want)):
                raise RuntimeError("the target holds more records than the source: %s > %s" % (got, want))
        raise RuntimeError("replication did not catch up with %s within 60 s (copied: %s)" % (want, got))
    finally:
        dst.close()


class Consuming:
    def __init__(self, spec, trial):
        self.spec, self.t = spec, trial
        self.auto = trial["commit"] == "auto"
        self.received = []  # (value, cluster, topic, partition, offset)
        self.restarts = 0
        self.errors = []
        # Commits the broker refused (a session that timed out on the loaded
        # test machine, say): not a failure of the trial, whose count of
        # records shows what they caused.
        self.notes = []

    def _consumer(self, bootstrap):
        conf = {"bootstrap.servers": bootstrap, "group.id": self.t["group"], "auto.offset.reset": "error",
                "client.id": "switchover-" + self.t["name"], "session.timeout.ms": 10000,
                "enable.auto.commit": self.auto}
        if self.auto:
            # Auto-commit commits the offsets the consumer stores after
            # each message it delivered, not librdkafka's default: that
            # one, when the consumer closes, is the offset after the last
            # transaction marker it fetched, past records it fetched and
            # never delivered (confluentinc/librdkafka#3400, seen with
            # 2.4.0 and 2.16.0). The remote partitions hold such markers:
            # an exactly-once flow's after every step, the batches mode's
            # abort marker at every start of the flow.
            conf["enable.auto.offset.store"] = False
        return Consumer(conf)

    def _batch(self, c, cluster):
        """One poll; returns False when the consumer must be restarted."""
        msgs = c.consume(num_messages=500, timeout=0.2)
        got, no_offset = False, False
        # Every message of the batch counts, also those after an error:
        # their offsets are stored, and auto-commit commits them at close.
        for m in msgs:
            if m.error() is not None:
                if m.error().code() == KafkaError._AUTO_OFFSET_RESET:
                    no_offset = True
                elif m.error().code() != KafkaError._PARTITION_EOF:
                    self.errors.append("%s: %s" % (cluster, m.error()))
                continue
            self.received.append((m.value(), cluster, m.topic(), m.partition(), m.offset()))
            if self.auto:
                c.store_offsets(m)
            got = True
        if got and not self.auto:
            try:
                c.commit(asynchronous=False)
            except Exception as e:  # a commit that fails is retried with the next batch
                self.notes.append("commit on %s: %s" % (cluster, e))
        return not no_offset

    def on_source(self, until):
        c = self._consumer(self.spec["source"])
        c.subscribe([self.t["topic"]])
        while not until.is_set():
            if not self._batch(c, "source"):
                self.errors.append("no committed offset on the source")
                break
        if not self.auto:
            try:
                c.commit(asynchronous=False)
            except Exception as e:
                if "NO_OFFSET" not in str(e):
                    self.notes.append("final commit: %s" % e)
        c.close()  # auto-commit commits here; the consumer leaves the group
        return time.time()

    def on_target(self, done):
        topics = [self.t["remote"]] if self.t["identity"] else [self.t["remote"], self.t["local"]]
        while not done():
            c = self._consumer(self.spec["target"])
            c.subscribe(topics)
            ok = True
            while ok and not done():
                ok = self._batch(c, "target")
            c.close()
            if not ok:
                self.restarts += 1
                if self.spec.get("verbose"):
                    log("%s: no committed offset on the target; consumer closed, restarting in %gs" % (self.t["name"], RESTART_DELAY))
                time.sleep(RESTART_DELAY)


def offsets_on_every_partition(admin, t):
    req = [ConsumerGroupTopicPartitions(t["group"], [TopicPartition(t["remote"], p) for p in range(t["partitions"])])]
    res = admin.list_consumer_group_offsets(req)[t["group"]].result(timeout=10)
    return all(tp.offset >= 0 for tp in res.topic_partitions)


def remote_ends(spec, t, isolation):
    """The end offsets of the trial's remote topic on the target as a
    consumer with that isolation level sees them."""
    c = Consumer({"bootstrap.servers": spec["target"], "group.id": "switchover-watermarks", "enable.auto.commit": False,
                  "isolation.level": isolation})
    try:
        return ends(c, t["remote"], t["partitions"])
    finally:
        c.close()


def at_end(spec, t, admin):
    """What the target holds when records are missing: per remote partition
    the group's offset, the last stable offset and the high watermark, so
    that a failure tells a consumer stalled below an open transaction from
    an offset moved past the records."""
    out = []
    try:
        req = [ConsumerGroupTopicPartitions(t["group"], [TopicPartition(t["remote"], p) for p in range(t["partitions"])])]
        group = {tp.partition: tp.offset for tp in admin.list_consumer_group_offsets(req)[t["group"]].result(timeout=10).topic_partitions}
        lso, hwm = (remote_ends(spec, t, isolation) for isolation in ("read_committed", "read_uncommitted"))
        for p in range(t["partitions"]):
            out.append("%s[%d] group %d, last stable %d, high watermark %d" % (t["remote"], p, group.get(p, -1), lso[p], hwm[p]))
    except Exception as e:
        out.append("target state not read: %s" % e)
    return out


def missing_at(sent, missing):
    """Where the missing records were written: per cluster and partition,
    their first and last offset and how many."""
    runs = {}
    for v in missing:
        cluster, p, off = sent[v.encode()]
        lo, hi, n = runs.get((cluster, p), (off, off, 0))
        runs[(cluster, p)] = (min(lo, off), max(hi, off), n + 1)
    return ["%s[%d] %d..%d (%d records)" % (c, p, lo, hi, n) for (c, p), (lo, hi, n) in sorted(runs.items())]


def target_starts(received):
    """The first offset the consumer received of each partition on the
    target: where the translated (or initialized) offsets let it start."""
    first = {}
    for _, cluster, topic, p, off in received:
        if cluster == "target":
            k = "%s[%d]" % (topic, p)
            first[k] = min(first.get(k, off), off)
    return first


def trial(spec, t):
    prod, cons = Producing(spec, t), Consuming(spec, t)
    prod.thread.start()
    on_source_until = threading.Event()
    timer = threading.Timer(WARM, prod.switch.set)
    timer.start()
    result = {"name": t["name"]}
    try:
        # The consumer leaves the source `delay` seconds after the producer.
        def leave_source():
            prod.switch.wait()
            time.sleep(t["delay"])
            on_source_until.set()
        threading.Thread(target=leave_source, daemon=True).start()
        final_commit = cons.on_source(on_source_until)
        if spec.get("verbose"):
            log("%s: consumer closed on the source (final commit)" % t["name"])

        # Time from the final commit until the target group has an offset
        # on every partition of the remote topic.
        admin = AdminClient({"bootstrap.servers": spec["target"]})
        synced = {}

        def watch():
            while time.time() - final_commit < 60:
                try:
                    if offsets_on_every_partition(admin, t):
                        synced["at"] = time.time()
                        return
                except Exception:
                    pass
                time.sleep(0.1)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()

        stop_at = [None]

        def done():
            if stop_at[0] is None and prod.on_target.is_set() and time.time() - max(final_commit, prod.on_target_at or 0) >= TAIL:
                prod.stop.set()
                prod.thread.join()
                stop_at[0] = time.time()
            if stop_at[0] is None:
                return False
            if time.time() - stop_at[0] > DEADLINE:
                return True
            with prod.lock:
                want = len(prod.sent)
            return len({r[0] for r in cons.received}) >= want and watcher_done()

        def watcher_done():
            return not watcher.is_alive()

        cons.on_target(done)
        watcher.join()
        with prod.lock:
            sent = dict(prod.sent)
        seen = {}
        for r in cons.received:
            seen.setdefault(r[0], []).append(r)
        missing = sorted(v.decode() for v in sent.keys() - set(seen))
        dups = sorted((v.decode(), [list(x[1:]) for x in rs]) for v, rs in seen.items() if len(rs) > 1)
        extra = sorted(v.decode() for v in set(seen) - sent.keys())
        result.update({
            "produced": len(sent), "produced_on_source": prod.source_sent, "received": len(cons.received),
            "missing": len(missing), "duplicated": len(dups), "unexpected": len(extra),
            "missing_sample": missing[:5], "duplicated_sample": dups[:5],
            "missing_at": missing_at(sent, missing), "target_starts": target_starts(cons.received),
            "at_end": at_end(spec, t, admin) if missing else [],
            "restarts": cons.restarts,
            "sync_seconds": round(synced["at"] - final_commit, 3) if "at" in synced else None,
            "final_commit_at": final_commit,
            "errors": prod.errors + cons.errors,
            "notes": cons.notes,
        })
    except Exception:
        result["errors"] = [traceback.format_exc()]
    finally:
        timer.cancel()
        prod.switch.set()
        prod.stop.set()
    return result


def run_trial(spec, t, conn):
    """A trial in its own process; its result goes back through conn."""
    try:
        r = trial(spec, t)
    except BaseException:
        r = {"name": t["name"], "errors": [traceback.format_exc()]}
    conn.send(r)
    conn.close()


def run_all(spec, trials, concurrency):
    """Runs the trials, concurrency at a time, one process each (librdkafka
    clients of many trials in one interpreter would share its GIL), and
    yields each result as its trial ends. A process that dies without a
    result (a crash in librdkafka, a signal) ends its own trial with an
    error that says how it died; the other trials go on."""
    ctx = multiprocessing.get_context("fork")
    waiting, running = list(trials), {}
    while waiting or running:
        while waiting and len(running) < concurrency:
            t = waiting.pop(0)
            recv, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=run_trial, args=(spec, t, send), daemon=True)
            proc.start()
            send.close()
            running[recv] = (proc, t)
        for recv in multiprocessing.connection.wait(list(running)):
            proc, t = running.pop(recv)
            try:
                r = recv.recv()
            except EOFError:
                r = None
            recv.close()
            proc.join()
            yield r or {"name": t["name"], "errors": ["the trial's process ended without a result (exit code %s)" % proc.exitcode]}


def main():
    faulthandler.enable()
    spec = json.load(sys.stdin)
    trials = spec["trials"]
    concurrency = spec.get("concurrency", 8)
    log("running %d trials, %d at a time" % (len(trials), concurrency))
    for r in run_all(spec, trials, concurrency):
        log("%s: produced %s, missing %s, duplicated %s, restarts %s, sync %s s%s" % (
            r["name"], r.get("produced"), r.get("missing"), r.get("duplicated"), r.get("restarts"),
            r.get("sync_seconds"), (", errors: %s" % r["errors"][:2]) if r.get("errors") else ""))
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# smoke.sh: end-to-end check of the test bed on the real jars (about 40 s on 2 cores).
#   1. env.sh up: two single-node clusters (primary, secondary), cold start, then a reusing call
#   2. raw produce / consume throughput on primary (Kafka's perf tools)
#   3. Apache MM2 primary->secondary: time until every record is in primary.<topic> on secondary,
#      and MM2's own topics (checkpoints, heartbeats, offset-syncs) exist; then MM2 is stopped,
#      as many records again are produced, and the resumed MM2's backlog catch-up is timed
#   4. resident memory of every JVM under load
#   5. a 3-node cluster: kill one node, acks=all still works, bring it back
#   6. env.sh down; no JVM of ours may be left
# Everything is stopped at the end, also on failure. Lines starting with "SMOKE" are the figures.
# Environment: SMOKE_RECORDS=200000 SMOKE_SIZE=512 SMOKE_SKIP3=1 (skip step 5)
#              SMOKE_PORTS="19092 29092 39092 39093 39094" (primary, secondary, 3-node brokers)
#              KAFKA_ROOT (default /tmp/mm2go-kafka-smoke, so it never touches env.sh's clusters)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export KAFKA_ROOT="${KAFKA_ROOT:-/tmp/mm2go-kafka-smoke}"
# shellcheck source=kafka-env.sh
. "$HERE/kafka-env.sh"
N="${SMOKE_RECORDS:-200000}"; SIZE="${SMOKE_SIZE:-512}"
KC="$HERE/kafka-cluster.sh"; MM="$HERE/mm2.sh"; PERF="$HERE/perf.sh"; ENV="$HERE/env.sh"
read -r PP PS P1 P2 P3 <<<"${SMOKE_PORTS:-19092 29092 39092 39093 39094}"
export MM2GO_PRIMARY_PORT="$PP" MM2GO_SECONDARY_PORT="$PS"
BP="127.0.0.1:$PP"; BS="127.0.0.1:$PS"

cleanup() {
  KAFKA_STOP_SIGNAL=KILL "$MM" stop smoke >/dev/null 2>&1 || true
  KAFKA_STOP_SIGNAL=KILL "$KC" stop tri >/dev/null 2>&1 || true
  "$ENV" down >/dev/null 2>&1 || true
}
trap cleanup EXIT

fig() { echo "SMOKE $*"; }

rss_report() { # RSS of every JVM we started
  local f pid
  for f in "$KAFKA_ROOT"/*/node*/pid "$KAFKA_ROOT"/mm2-*/pid; do
    [[ -f "$f" ]] || continue; pid="$(cat "$f")"; pid_alive "$pid" || continue
    fig "rss $(rss_mib "$pid") MiB ${f#"$KAFKA_ROOT"/}"
  done
}

t=$(now_ms); "$HERE/setup.sh"; fig "setup.sh $(( $(now_ms) - t )) ms (lib already complete unless this is the first run)"
fig "kafka $(kafka_version), $("$JAVA" -version 2>&1 | sed -n 1p), profile $KAFKA_JVM_PROFILE"

say "== 1. env.sh up: two single-node clusters"
"$ENV" down >/dev/null 2>&1 || true
t=$(now_ms); exports="$("$ENV" up)"; fig "env.sh up (cold, both clusters) $(( $(now_ms) - t )) ms"
printf '%s\n' "$exports"
grep -qx "export MM2GO_TEST_SEEDS=$BP" <<<"$exports" || die "unexpected env.sh up output"
t=$(now_ms); again="$("$ENV" up 2>/dev/null)"; fig "env.sh up (warm, reused) $(( $(now_ms) - t )) ms"
[[ "$again" == "$exports" ]] || die "a second env.sh up printed something else"
"$KC" run org.apache.kafka.tools.MetadataQuorumCommand --bootstrap-server "$BP" describe --status | grep -E 'LeaderId|CurrentVoters'
rss_report

say "== 2. raw throughput on primary ($N x $SIZE B, 3 partitions, acks=all)"
"$PERF" topic "$BP" perf 3 1
"$PERF" produce "$BP" perf "$N" "$SIZE" acks=all 2>/dev/null | grep '^RESULT' | sed 's/^/SMOKE /'
"$PERF" consume "$BP" perf "$N" 2>/dev/null | grep '^RESULT' | sed 's/^/SMOKE /'

say "== 3. Apache MirrorMaker 2 primary -> secondary"
"$MM" sample "$BP" "$BS" >"$KAFKA_ROOT/mm2.properties"
t=$(now_ms)
"$MM" start smoke "$KAFKA_ROOT/mm2.properties"
ts=$(now_ms)
got=0
while (( got < N )); do
  (( $(now_ms) - t > 240000 )) && { "$MM" logs smoke | tail -n 40 >&2; die "MM2 copied only $got of $N records in 240 s"; }
  sleep 0.5; got="$("$PERF" count "$BS" primary.perf)"
done
te=$(now_ms)
fig "mm2 started (log line) $(( ts - t )) ms after launch"
fig "mm2 copied $got records: $(( te - t )) ms after launch, $(( te - ts )) ms after 'started'" \
    "(~$(( got * 1000 / (te - ts > 0 ? te - ts : 1) )) records/s incl. connector start-up; polled every ~0.8 s)"
rss_report
topics="$("$KC" run org.apache.kafka.tools.TopicCommand --bootstrap-server "$BS" --list)"
while read -r tp; do echo "secondary topic: $tp"; done <<<"$topics"
for want in primary.perf primary.checkpoints.internal heartbeats mm2-configs.primary.internal \
            mm2-offsets.primary.internal mm2-status.primary.internal; do
  grep -qx "$want" <<<"$topics" || die "topic $want missing on secondary"
done
"$KC" run org.apache.kafka.tools.TopicCommand --bootstrap-server "$BP" --list | grep -qx mm2-offset-syncs.secondary.internal \
  || die "mm2-offset-syncs.secondary.internal missing on primary"
t=$(now_ms); "$MM" stop smoke; fig "mm2 stop (SIGTERM) $(( $(now_ms) - t )) ms"

say "== 3b. backlog catch-up: $N more records while MM2 is stopped, then MM2 resumes"
"$PERF" produce "$BP" perf "$N" "$SIZE" acks=all 2>/dev/null | grep -q '^RESULT'
t=$(now_ms)
"$MM" start smoke "$KAFKA_ROOT/mm2.properties"
ts=$(now_ms)
while (( got < 2 * N )); do
  (( $(now_ms) - t > 240000 )) && { "$MM" logs smoke | tail -n 40 >&2; die "MM2 resumed to only $got of $((2 * N)) records in 240 s"; }
  sleep 0.5; got="$("$PERF" count "$BS" primary.perf)"
done
te=$(now_ms)
fig "mm2 resumed and copied the $N-record backlog: $(( te - t )) ms after launch, $(( te - ts )) ms after 'started'" \
    "(~$(( N * 1000 / (te - ts > 0 ? te - ts : 1) )) records/s); target holds $got for $((2 * N)) produced" \
    "($(( got - 2 * N )) duplicates)"
"$MM" stop smoke >/dev/null 2>&1

if [[ "${SMOKE_SKIP3:-0}" != 1 ]]; then
  say "== 5. three-node cluster, one broker killed"
  t=$(now_ms); "$KC" start3 tri "$P1" "$P2" "$P3" >/dev/null; fig "3-node cluster ready $(( $(now_ms) - t )) ms"
  B="127.0.0.1:$P1,127.0.0.1:$P2,127.0.0.1:$P3"
  "$PERF" topic "$B" ha 3 3
  "$KC" run org.apache.kafka.tools.MetadataQuorumCommand --bootstrap-server "$B" describe --status | grep -E 'LeaderId|CurrentVoters'
  rss_report
  "$KC" kill tri 2
  t=$(now_ms)
  "$PERF" produce "$B" ha 20000 512 acks=all 2>/dev/null | grep '^RESULT'   # min ISR 2 of 3: must succeed
  fig "acks=all produce of 20000 records with node 2 killed $(( $(now_ms) - t )) ms"
  [[ "$("$PERF" count "$B" ha)" -eq 20000 ]] || die "the 3-node cluster lost records"
  t=$(now_ms); "$KC" restart-node tri 2; fig "restart-node after kill $(( $(now_ms) - t )) ms"
  "$KC" status tri
  t=$(now_ms); KAFKA_STOP_SIGNAL=KILL "$KC" stop tri; fig "3-node stop (KILL) $(( $(now_ms) - t )) ms"
fi

say "== 6. env.sh down"
t=$(now_ms); "$ENV" down; fig "env.sh down $(( $(now_ms) - t )) ms"
[[ ! -d "$KAFKA_ROOT" ]] || die "$KAFKA_ROOT still exists after env.sh down"
# every broker and MM2 JVM has a file under $KAFKA_ROOT on its command line
if pgrep -af -- "$KAFKA_ROOT/" >&2; then die "a JVM of ours is still running (above)"; fi
say "smoke test passed"

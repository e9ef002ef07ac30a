#!/usr/bin/env bash
# perf.sh: Kafka's own perf tools (kafka-tools jar) against a running cluster, to get the raw
# produce / consume throughput of the brokers, the "physical limit" for replication throughput.
#
#   perf.sh topic   BOOTSTRAP TOPIC PARTITIONS RF [k=v ...]      create topic (--if-not-exists)
#   perf.sh produce BOOTSTRAP TOPIC NUM_RECORDS RECORD_SIZE [k=v ...]   producer config overrides
#   perf.sh consume BOOTSTRAP TOPIC NUM_RECORDS [k=v ...]               consumer config overrides
#   perf.sh count   BOOTSTRAP TOPIC          sum of the partitions' end offsets (0 if no topic)
#
# Main classes (bin/kafka-producer-perf-test.sh, bin/kafka-consumer-perf-test.sh, bin/kafka-topics.sh):
#   org.apache.kafka.tools.ProducerPerformance, org.apache.kafka.tools.ConsumerPerformance,
#   org.apache.kafka.tools.TopicCommand
# Client properties go through a generated properties file, which avoids the version-dependent
# multi-value flags (--producer-props / --command-property take "k=v k=v" after ONE flag).
# The raw tool output is printed; a last line "RESULT ..." sums it up for scripts.
# Flags: Kafka 4.2+ (4.3.1 here) take --command-config for both tools and --num-records for the
# consumer; 4.0/4.1 need --producer.config / --consumer.config and --messages (picked by version).
# Environment: PERF_HEAP=512m (the bin scripts use -Xmx512M), PERF_THROUGHPUT=-1 (records/s cap),
#              PERF_TIMEOUT_MS=30000 (consumer: max gap between records), KAFKA_JVM_PROFILE.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=kafka-env.sh
. "$HERE/kafka-env.sh"

usage() { awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0" >&2; exit 2; }

props_file() { # BOOTSTRAP [k=v ...] -> path of a temp properties file
  local f; f="$(mktemp "${TMPDIR:-/tmp}/mm2go-perf.XXXXXX.properties")"
  { echo "bootstrap.servers=$1"; shift; printf '%s\n' "$@"; } >"$f"
  echo "$f"
}

cmd="${1:-}"; [[ -n "$cmd" ]] || usage; shift
check_lib
case "$cmd" in
  topic)
    [[ $# -ge 4 ]] || usage
    bs="$1" topic="$2" parts="$3" rf="$4"; shift 4
    args=(--bootstrap-server "$bs" --create --if-not-exists --topic "$topic"
          --partitions "$parts" --replication-factor "$rf")
    for kv in "$@"; do args+=(--config "$kv"); done
    kafka_run tool org.apache.kafka.tools.TopicCommand "${args[@]}" ;;
  produce)
    [[ $# -ge 4 ]] || usage
    bs="$1" topic="$2" n="$3" size="$4"; shift 4
    cfg="$(props_file "$bs" "$@")"; trap 'rm -f "$cfg"' EXIT
    if kafka_at_least 4 2; then cfgflag=--command-config; else cfgflag=--producer.config; fi
    out="$(kafka_run perf org.apache.kafka.tools.ProducerPerformance \
      --topic "$topic" --num-records "$n" --record-size "$size" \
      --throughput "${PERF_THROUGHPUT:--1}" "$cfgflag" "$cfg" | tee /dev/stderr)"
    # Final line: "N records sent, X records/sec (Y MB/sec), A ms avg latency, M ms max latency,
    #              P50 ms 50th, P95 ms 95th, P99 ms 99th, P999 ms 99.9th."   (MB = 2^20 bytes)
    grep -E '^[0-9]+ records sent, .* 99\.9th\.$' <<<"$out" | tail -n1 | sed -E \
      's/^([0-9]+) records sent, ([0-9.]+) records\/sec \(([0-9.]+) MB\/sec\), ([0-9.]+) ms avg latency, ([0-9.]+) ms max latency, ([0-9]+) ms 50th, ([0-9]+) ms 95th, ([0-9]+) ms 99th, ([0-9]+) ms 99\.9th\./RESULT produce records=\1 records_per_sec=\2 mib_per_sec=\3 avg_ms=\4 max_ms=\5 p50_ms=\6 p95_ms=\7 p99_ms=\8 p999_ms=\9/' ;;
  consume)
    [[ $# -ge 3 ]] || usage
    bs="$1" topic="$2" n="$3"; shift 3
    cfg="$(props_file "$bs" "$@")"; trap 'rm -f "$cfg"' EXIT
    if kafka_at_least 4 2; then
      flags=(--num-records "$n" --command-config "$cfg")
    else
      flags=(--messages "$n" --consumer.config "$cfg")
    fi
    out="$(kafka_run perf org.apache.kafka.tools.ConsumerPerformance \
      --bootstrap-server "$bs" --topic "$topic" --timeout "${PERF_TIMEOUT_MS:-30000}" \
      "${flags[@]}" | tee /dev/stderr)"
    # Header: start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
    #         rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
    # fetch.* exclude the group join (rebalance) time, so they are the broker-side read rate.
    tail -n1 <<<"$out" | awk -F', *' 'NF>=10 { printf "RESULT consume records=%s mib=%s mib_per_sec=%s records_per_sec=%s rebalance_ms=%s fetch_ms=%s fetch_mib_per_sec=%s fetch_records_per_sec=%s\n", $5, $3, $4, $6, $7, $8, $9, $10 }' ;;
  count)
    [[ $# -eq 2 ]] || usage
    # GetOffsetShell prints topic:partition:endOffset per partition (nothing for a missing topic)
    # (it exits non-zero for a missing topic; that counts as 0 records)
    { kafka_run tool org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$1" --topic "$2" 2>/dev/null || true; } \
      | awk -F: '{ s += $NF } END { print s + 0 }' ;;
  *) usage ;;
esac

#!/usr/bin/env bash
# env.sh: the two real Kafka clusters the project's tests run against.
#
#   eval "$(testbed/env.sh up)"   setup.sh (idempotent, fast when lib/ is complete), then two
#                                 single-node KRaft clusters, `primary` (the MM2 source) and
#                                 `secondary` (the target), and two three-node clusters,
#                                 `primary3` and `secondary3` (the seed scenario's shape: RF 3,
#                                 min ISR 2), all started in parallel; returns once all answer
#                                 requests and prints on stdout only:
#                                   export MM2GO_TEST_SEEDS=127.0.0.1:19092
#                                   export MM2GO_TEST_TARGET_SEEDS=127.0.0.1:29092
#                                   export MM2GO_TEST_SEEDS3=127.0.0.1:39092,...:39093,...:39094
#                                   export MM2GO_TEST_TARGET_SEEDS3=127.0.0.1:49092,...
#                                   export MM2GO_TESTBED=<absolute path of this directory>
#                                   export MM2GO_KAFKA_ROOT=<KAFKA_ROOT>
#                                 Clusters with those names that already run on those ports and
#                                 answer are reused (same output); broken or stale ones are
#                                 replaced.
#   testbed/env.sh down           stop both clusters (plus any other cluster or MM2 instance
#                                 under KAFKA_ROOT) and delete their data
#   testbed/env.sh status         one line per node and MM2 instance under KAFKA_ROOT
#
# Environment: MM2GO_PRIMARY_PORT (19092), MM2GO_SECONDARY_PORT (29092), MM2GO_PRIMARY3_PORT
# (39092: its nodes take it and the next two), MM2GO_SECONDARY3_PORT (49092); controller ports are
# the broker ports + 1000. MM2GO_THREE_NODE=0 leaves the three-node clusters out; KAFKA_HEAP3 (512m)
# is the heap of their brokers. KAFKA_ROOT (default /tmp/mm2go-kafka) holds their state. Every knob of
# kafka-cluster.sh and kafka-env.sh (KAFKA_JVM_PROFILE, KAFKA_HEAP, KAFKA_EXTRA_PROPS, ...)
# applies. Progress and errors go to stderr.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=kafka-env.sh
. "$HERE/kafka-env.sh"
KC="$HERE/kafka-cluster.sh"
export KAFKA_ROOT

PRIMARY_PORT="${MM2GO_PRIMARY_PORT:-19092}"
SECONDARY_PORT="${MM2GO_SECONDARY_PORT:-29092}"
PRIMARY3_PORT="${MM2GO_PRIMARY3_PORT:-39092}"
SECONDARY3_PORT="${MM2GO_SECONDARY3_PORT:-49092}"
THREE_NODE="${MM2GO_THREE_NODE:-1}"

usage() { awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0" >&2; exit 2; }

# bootstrap3 PORT: the bootstrap string of a three-node cluster whose first broker is on PORT.
bootstrap3() { echo "127.0.0.1:$1,127.0.0.1:$(($1 + 1)),127.0.0.1:$(($1 + 2))"; }

# The seed scenario's self-run primary enforces ACLs (`mm2go cutover --fence` fences its producers
# with DENY WRITE ACLs): StandardAuthorizer, and everyone may do what no ACL names (the test clients
# are all User:ANONYMOUS, on PLAINTEXT). The controllers must be super users, told apart by their
# certificate on an SSL controller listener (User:broker, made by secure.sh).
primary3_props() {
  local d="$KAFKA_ROOT/primary3-certs"
  "$HERE/secure.sh" certs "$d" >&2
  printf '%s\\n' \
    "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer" \
    "allow.everyone.if.no.acl.found=true" \
    "super.users=User:broker" \
    "listener.security.protocol.map=CONTROLLER:SSL,PLAINTEXT:PLAINTEXT" \
    "listener.name.controller.ssl.client.auth=required" \
    "ssl.keystore.type=PEM" "ssl.keystore.location=$d/broker.pem" \
    "ssl.truststore.type=PEM" "ssl.truststore.location=$d/ca.pem" \
    'ssl.principal.mapping.rules=RULE:^CN=([a-zA-Z0-9._-]+).*$/$1/,DEFAULT'
}

# up_one NAME PORT [3]: reuse a healthy cluster on PORT, else (re)start it (three nodes on PORT,
# PORT+1 and PORT+2 with a third argument 3). Prints nothing on stdout.
up_one() {
  local name="$1" port="$2" nodes="${3:-1}" cdir="$KAFKA_ROOT/$1" want="127.0.0.1:$2" extra=""
  (( nodes == 3 )) && want="$(bootstrap3 "$port")"
  [[ "$name" == primary3 ]] && extra="$(primary3_props)"
  if [[ -d "$cdir" ]]; then
    if "$KC" healthy "$name" && [[ "$(cat "$cdir/bootstrap" 2>/dev/null)" == "$want" ]] &&
      { [[ -z "$extra" ]] || grep -qF "$(printf '%b' "$extra" | head -1)" "$cdir/node1/server.properties" 2>/dev/null; }; then
      say "reusing running cluster '$name' on $want"
      return 0
    fi
    say "replacing stale or unhealthy cluster '$name'"
    KAFKA_STOP_SIGNAL=KILL "$KC" stop "$name"
  fi
  if (( nodes == 3 )); then
    # 512 MiB heaps: with the test profile's 256 MiB, GC pauses under the switchover tests' load
    # made the controller quorum lose its leader, and partition leaders moved.
    KAFKA_HEAP="${KAFKA_HEAP3:-512m}" KAFKA_HEAP_MIN="${KAFKA_HEAP3:-512m}" \
      KAFKA_EXTRA_PROPS="$extra${KAFKA_EXTRA_PROPS:+\n$KAFKA_EXTRA_PROPS}" \
      "$KC" start3 "$name" "$port" "$((port + 1))" "$((port + 2))" >/dev/null
  else
    "$KC" start "$name" "$port" "$((port + 1000))" >/dev/null
  fi
}

down_all() {
  local f d pid
  for f in "$KAFKA_ROOT"/mm2-*/pid; do
    [[ -f "$f" ]] || continue
    d="${f%/pid}"; "$HERE/mm2.sh" stop "${d##*/mm2-}" || true
    [[ "${KEEP_DATA:-0}" == 1 ]] || rm -rf "$d"
  done
  local -a pids=()
  for f in "$KAFKA_ROOT"/*/nodes; do
    [[ -f "$f" ]] || continue
    d="${f%/nodes}"
    "$KC" stop "${d##*/}" & pids+=($!)   # honours KEEP_DATA and KAFKA_STOP_SIGNAL
  done
  local rc=0
  for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
  rm -f "$KAFKA_ROOT"/mm2.properties
  rmdir "$KAFKA_ROOT" 2>/dev/null || true
  return "$rc"
}

cmd="${1:-}"
# reserve_ports keeps the clusters' ports out of the kernel's ephemeral range
# (net.ipv4.ip_local_reserved_ports), where they are on most systems: a client
# connection that happened to use one as its local port, still in TIME-WAIT,
# makes a broker fail to bind it. Best effort: needs root.
reserve_ports() {
  local f=/proc/sys/net/ipv4/ip_local_reserved_ports want=() p
  [[ -w "$f" ]] || return 0
  for p in "$PRIMARY_PORT" "$SECONDARY_PORT" "$PRIMARY3_PORT" "$SECONDARY3_PORT"; do
    want+=("$p-$((p + 2))" "$((p + 1000))-$((p + 1002))")
  done
  want+=(19192-19194 20192-20194 29192-29194 30192-30194) # the benchmark's clusters
  local cur
  cur=$(cat "$f")
  (IFS=,; echo "${cur:+$cur,}${want[*]}") > "$f" 2>/dev/null || true
}

case "$cmd" in
  up)
    t0=$(now_ms)
    "$HERE/setup.sh" >&2
    [[ "$PRIMARY_PORT" != "$SECONDARY_PORT" ]] || die "MM2GO_PRIMARY_PORT and MM2GO_SECONDARY_PORT are both $PRIMARY_PORT"
    mkdir -p "$KAFKA_ROOT"
    reserve_ports
    # All clusters start at the same time.
    pids=()
    up_one primary "$PRIMARY_PORT" & pids+=($!)
    up_one secondary "$SECONDARY_PORT" & pids+=($!)
    if [[ "$THREE_NODE" == 1 ]]; then
      up_one primary3 "$PRIMARY3_PORT" 3 & pids+=($!)
      up_one secondary3 "$SECONDARY3_PORT" 3 & pids+=($!)
    fi
    rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    if (( rc != 0 )); then
      # leave no JVM behind; keep the directories so node.log can be read (the next `up` replaces them)
      KEEP_DATA=1 KAFKA_STOP_SIGNAL=KILL down_all >/dev/null 2>&1 || true
      die "could not bring up the clusters (messages above; logs under $KAFKA_ROOT/*/node1/node.log)"
    fi
    say "primary 127.0.0.1:$PRIMARY_PORT and secondary 127.0.0.1:$SECONDARY_PORT$([[ "$THREE_NODE" == 1 ]] && echo ", primary3 $(bootstrap3 "$PRIMARY3_PORT") and secondary3 $(bootstrap3 "$SECONDARY3_PORT")") ready in $(( $(now_ms) - t0 )) ms"
    printf 'export MM2GO_TEST_SEEDS=127.0.0.1:%s\n' "$PRIMARY_PORT"
    printf 'export MM2GO_TEST_TARGET_SEEDS=127.0.0.1:%s\n' "$SECONDARY_PORT"
    if [[ "$THREE_NODE" == 1 ]]; then
      printf 'export MM2GO_TEST_SEEDS3=%s\n' "$(bootstrap3 "$PRIMARY3_PORT")"
      printf 'export MM2GO_TEST_TARGET_SEEDS3=%s\n' "$(bootstrap3 "$SECONDARY3_PORT")"
    fi
    printf 'export MM2GO_TESTBED=%q\n' "$HERE"
    printf 'export MM2GO_KAFKA_ROOT=%q\n' "$KAFKA_ROOT" ;;
  down)
    [[ -d "$KAFKA_ROOT" ]] || { say "nothing under $KAFKA_ROOT"; exit 0; }
    down_all ;;
  status)
    "$KC" status
    for f in "$KAFKA_ROOT"/mm2-*/pid; do
      [[ -f "$f" ]] || continue
      d="${f%/pid}"; echo "mm2 ${d##*/mm2-} $("$HERE/mm2.sh" status "${d##*/mm2-}")"
    done ;;
  *) usage ;;
esac

#!/usr/bin/env bash
# mm2.sh: Apache MirrorMaker 2 in dedicated mode, from the Maven Central jars in ./lib.
#
#   mm2.sh run   CONFIG [--clusters ALIAS...]      foreground (exec), Ctrl-C / SIGTERM stops it
#   mm2.sh start NAME CONFIG [--clusters ALIAS...] background; waits for "Kafka MirrorMaker started"
#   mm2.sh stop  NAME                              SIGTERM, wait (MM2 allows itself 60 s), then KILL
#   mm2.sh kill  NAME                              SIGKILL (crash test; no offset flush)
#   mm2.sh status NAME | logs NAME
#   mm2.sh sample PRIMARY_BOOTSTRAP SECONDARY_BOOTSTRAP   print mm2.properties for those clusters
#
# Same main class and arguments as bin/connect-mirror-maker.sh:
#   org.apache.kafka.connect.mirror.MirrorMaker mm2.properties [--clusters A B ...]
# State: $KAFKA_ROOT/mm2-NAME/{mm2.properties,mm2.log,pid}.
# Environment: MM2_HEAP / MM2_HEAP_MIN, KAFKA_JVM_PROFILE=test|stock (kafka-env.sh),
#              MM2_START_TIMEOUT=120 MM2_STOP_TIMEOUT=70 MM2_WAIT=log|none MM2_JVM_OPTS="..."
# NOTE: "started" only means the herders are running. Connectors and tasks start after the worker
# joins its Connect group (about 3 s later here); tests must wait for data (e.g. a record in
# primary.<topic>), as Kafka's own DedicatedMirrorIntegrationTest does (it allows 120 s for MM2
# start-up, 30 s per topic).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=kafka-env.sh
. "$HERE/kafka-env.sh"

START_TIMEOUT="${MM2_START_TIMEOUT:-120}"
STOP_TIMEOUT="${MM2_STOP_TIMEOUT:-70}"

usage() { awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0" >&2; exit 2; }

mm2_cmd() { # CONFIG [ARGS...] -> fills global array CMD
  local cfg="$1"; shift
  [[ -r "$cfg" ]] || die "cannot read $cfg"
  local -a flags; mapfile -t flags < <(kafka_jvm_flags mm2)
  # shellcheck disable=SC2206
  CMD=("$JAVA" "${flags[@]}" ${MM2_JVM_OPTS:-}
       -cp "$KAFKA_LIB/*" org.apache.kafka.connect.mirror.MirrorMaker "$cfg" "$@")
}

# mm2_pid DIR: the recorded pid if it is alive and really runs this instance.
mm2_pid() {
  local pid; pid="$(cat "$1/pid" 2>/dev/null || true)"
  pid_alive "$pid" || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$1/mm2.properties" || return 1
  echo "$pid"
}

sample() {
  sed -e "s|^primary.bootstrap.servers = .*|primary.bootstrap.servers = $1|" \
      -e "s|^secondary.bootstrap.servers = .*|secondary.bootstrap.servers = $2|" \
      "$HERE/mm2.properties"
}

cmd="${1:-}"; [[ -n "$cmd" ]] || usage; shift
case "$cmd" in
  run)
    [[ $# -ge 1 ]] || usage
    check_lib
    mm2_cmd "$(realpath "$1")" "${@:2}"
    exec "${CMD[@]}" ;;
  start)
    [[ $# -ge 2 ]] || usage
    check_lib
    name="$1"; cfg="$(realpath "$2")"; shift 2
    [[ "$name" =~ ^[A-Za-z0-9._-]+$ ]] || die "bad MM2 instance name '$name'"
    dir="$KAFKA_ROOT/mm2-$name"
    if mm2_pid "$dir" >/dev/null; then die "MM2 '$name' is already running"; fi
    [[ -r "$cfg" ]] || die "cannot read $cfg"
    rm -rf "$dir"; mkdir -p "$dir"
    cp "$cfg" "$dir/mm2.properties"
    mm2_cmd "$dir/mm2.properties" "$@"
    t0=$(now_ms)
    nohup "${CMD[@]}" >"$dir/mm2.log" 2>&1 </dev/null &
    pid=$!; echo "$pid" >"$dir/pid"
    [[ "${MM2_WAIT:-log}" == none ]] && { say "MM2 '$name' launched (pid $pid, log $dir/mm2.log)"; exit 0; }
    until grep -q "Kafka MirrorMaker started" "$dir/mm2.log" 2>/dev/null; do
      if ! pid_alive "$pid"; then tail -n 60 "$dir/mm2.log" >&2; die "MM2 '$name' exited during start-up"; fi
      if grep -q -e "SLF4J: Defaulting to no-operation" -e "No SLF4J providers were found" "$dir/mm2.log"; then
        stop_pid "$pid" 5 KILL
        die "MM2 '$name' runs but logging is not bound (SLF4J NOP), so its start-up line cannot be seen;" \
            "lib must hold slf4j-api 1.7.x + log4j-slf4j-impl (run setup.sh), or use MM2_WAIT=none"
      fi
      if (( $(now_ms) - t0 > START_TIMEOUT * 1000 )); then
        tail -n 60 "$dir/mm2.log" >&2; stop_pid "$pid" 5 KILL
        die "MM2 '$name' did not report start-up within ${START_TIMEOUT}s"
      fi
      sleep 0.1
    done
    say "MM2 '$name' started in $(( $(now_ms) - t0 ))ms (pid $pid, log $dir/mm2.log)" ;;
  stop|kill)
    [[ $# -eq 1 ]] || usage
    dir="$KAFKA_ROOT/mm2-$1"
    if pid="$(mm2_pid "$dir")"; then
      t0=$(now_ms)
      if [[ "$cmd" == kill ]]; then stop_pid "$pid" 5 KILL
      else stop_pid "$pid" "$STOP_TIMEOUT" "${KAFKA_STOP_SIGNAL:-TERM}"; fi
      say "MM2 '$1' stopped ($cmd) in $(( $(now_ms) - t0 )) ms (log kept in $dir/mm2.log)"
    else
      say "MM2 '$1' is not running"
    fi ;;
  status)
    [[ $# -eq 1 ]] || usage
    dir="$KAFKA_ROOT/mm2-$1"
    if pid="$(mm2_pid "$dir")"; then echo "running pid=$pid rss=$(rss_mib "$pid")MiB"; else echo "down"; fi ;;
  logs)
    [[ $# -eq 1 ]] || usage; tail -n 200 "$KAFKA_ROOT/mm2-$1/mm2.log" ;;
  sample)
    [[ $# -eq 2 ]] || usage; sample "$1" "$2" ;;
  *) usage ;;
esac

# shellcheck shell=bash
# kafka-env.sh: shared settings and helpers for setup.sh, kafka-cluster.sh, mm2.sh, perf.sh,
# env.sh and smoke.sh. Sourced, not executed. Everything can be overridden from the environment:
#   KAFKA_LIB          directory with the jars (default: ./lib next to these scripts)
#   KAFKA_LOG4J        Log4j2 config file (default: ./log4j2.xml next to these scripts)
#   KAFKA_ROOT         where clusters and MM2 instances keep config, data, logs, pids
#                      (default: $MM2GO_KAFKA_ROOT, which `env.sh up` exports, else /tmp/mm2go-kafka)
#   JAVA_HOME          JDK to use (Kafka 4.x needs 17+); else `java` on PATH
#   KAFKA_LOG_LEVEL    root log level of every JVM started here (default warn)
#   KAFKA_JVM_PROFILE  test (default) | stock
#                      test:  -XX:+UseSerialGC -XX:TieredStopAtLevel=1, small heaps, and the
#                             class-data-sharing archive setup.sh builds (fast start, low RSS;
#                             measured faster than C2 for runs of up to ~1M records on 2 cores)
#                      stock: the G1 flags and heaps of Kafka's own bin/*.sh scripts, no CDS
#   KAFKA_CDS=0        do not use the class-data-sharing archive even in the test profile

KENV_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KAFKA_LIB="${KAFKA_LIB:-$KENV_DIR/lib}"
KAFKA_LOG4J="${KAFKA_LOG4J:-$KENV_DIR/log4j2.xml}"
KAFKA_ROOT="${KAFKA_ROOT:-${MM2GO_KAFKA_ROOT:-/tmp/mm2go-kafka}}"
KAFKA_LOG_LEVEL="${KAFKA_LOG_LEVEL:-warn}"
KAFKA_JVM_PROFILE="${KAFKA_JVM_PROFILE:-test}"
if [[ -n "${JAVA_HOME:-}" ]]; then JAVA="$JAVA_HOME/bin/java"; else JAVA="${JAVA:-java}"; fi

die() { echo "$(basename "$0"): error: $*" >&2; exit 1; }
say() { echo "$(basename "$0"): $*" >&2; }

now_ms() { date +%s%3N; }

check_java() {
  command -v "$JAVA" >/dev/null 2>&1 || die "java not found ($JAVA); set JAVA_HOME"
  local v
  v=$("$JAVA" -version 2>&1 | sed -E -n '0,/.* version "([0-9]+).*/s//\1/p')
  [[ -n "$v" && "$v" -ge 17 ]] || die "Kafka 4.x brokers, Connect and tools need Java 17+; $JAVA reports '${v:-?}'"
}

check_lib() {
  command -v "$JAVA" >/dev/null 2>&1 || die "java not found ($JAVA); set JAVA_HOME (Kafka 4.x needs Java 17+)"
  compgen -G "$KAFKA_LIB/kafka_2.13-*.jar" >/dev/null \
    || die "no kafka_2.13 jar in $KAFKA_LIB; run $KENV_DIR/setup.sh"
  compgen -G "$KAFKA_LIB/log4j-slf4j-impl-*.jar" >/dev/null \
    || say "warning: no log4j-slf4j-impl jar in $KAFKA_LIB: Kafka's log output will be silently dropped"
}

# Version of the Kafka jars in $KAFKA_LIB, e.g. 4.3.1 (from kafka-clients-X.Y.Z.jar).
kafka_version() {
  local f
  for f in "$KAFKA_LIB"/kafka-clients-[0-9]*.jar; do
    [[ -e "$f" ]] || continue
    f="${f##*/kafka-clients-}"; echo "${f%.jar}"; return 0
  done
  echo "0.0.0"
}

# True when the Kafka jars are at least MAJOR.MINOR.
kafka_at_least() {
  local v maj min
  v="$(kafka_version)"; maj="${v%%.*}"; min="${v#*.}"; min="${min%%.*}"
  (( maj > $1 || (maj == $1 && min >= $2) ))
}

# Path of the class-data-sharing archive for this JDK and this lib/ (it may not exist yet).
# Dynamic CDS archives only work with the JDK build that wrote them, so the name carries a hash
# of the java binary's real path.
kafka_cds_archive() {
  local jbin key
  jbin="$(command -v "$JAVA" 2>/dev/null || echo "$JAVA")"
  jbin="$(readlink -f "$jbin" 2>/dev/null || echo "$jbin")"
  key="$(printf '%s' "$jbin" | sha256sum | cut -c1-12)"
  echo "$KAFKA_LIB/cds/kafka-$key.jsa"
}

# kafka_jvm_flags ROLE: GC/JIT/heap/logging flags, one per line, for ROLE broker|mm2|tool|perf.
# Heap overrides: KAFKA_HEAP (broker -Xmx), KAFKA_HEAP_MIN (broker -Xms), MM2_HEAP, MM2_HEAP_MIN,
# KAFKA_TOOL_HEAP, PERF_HEAP.
kafka_jvm_flags() {
  local role="$1" xms="" xmx cds
  case "$KAFKA_JVM_PROFILE" in
    test)
      case "$role" in
        broker) xms="${KAFKA_HEAP_MIN:-32m}"; xmx="${KAFKA_HEAP:-256m}" ;;
        mm2)    xms="${MM2_HEAP_MIN:-32m}";   xmx="${MM2_HEAP:-256m}" ;;
        tool)   xmx="${KAFKA_TOOL_HEAP:-256m}" ;;
        perf)   xmx="${PERF_HEAP:-512m}" ;;
        *) die "kafka_jvm_flags: unknown role $role" ;;
      esac
      printf '%s\n' -XX:+UseSerialGC -XX:TieredStopAtLevel=1
      cds="$(kafka_cds_archive)"
      if [[ "${KAFKA_CDS:-1}" != 0 && -f "$cds" ]]; then echo "-XX:SharedArchiveFile=$cds"; fi ;;
    stock)
      # bin/kafka-server-start.sh: -Xmx1G -Xms1G; bin/connect-mirror-maker.sh: -Xms256M -Xmx2G;
      # bin/kafka-run-class.sh: -Xmx256M; perf-test scripts: -Xmx512M; GC flags from
      # KAFKA_JVM_PERFORMANCE_OPTS in bin/kafka-run-class.sh.
      case "$role" in
        broker) xms="${KAFKA_HEAP_MIN:-1g}";  xmx="${KAFKA_HEAP:-1g}" ;;
        mm2)    xms="${MM2_HEAP_MIN:-256m}";  xmx="${MM2_HEAP:-2g}" ;;
        tool)   xmx="${KAFKA_TOOL_HEAP:-256m}" ;;
        perf)   xmx="${PERF_HEAP:-512m}" ;;
        *) die "kafka_jvm_flags: unknown role $role" ;;
      esac
      printf '%s\n' -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
        -XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 ;;
    *) die "KAFKA_JVM_PROFILE must be test or stock, not '$KAFKA_JVM_PROFILE'" ;;
  esac
  [[ -n "$xms" ]] && echo "-Xms$xms"
  printf '%s\n' "-Xmx$xmx" -XX:+ExitOnOutOfMemoryError \
    -Xlog:disable -Xlog:all=warning:stderr \
    -Djava.awt.headless=true \
    "-Dlog4j2.configurationFile=$KAFKA_LOG4J" \
    "-Dmm2go.kafka.log.level=$KAFKA_LOG_LEVEL"
}

# kafka_run ROLE MAINCLASS [ARGS...]: run a Kafka main class in the foreground, e.g.
#   kafka_run tool org.apache.kafka.tools.TopicCommand --bootstrap-server 127.0.0.1:19092 --list
# Results go to stdout; logs and JVM warnings to stderr. KAFKA_TOOL_JVM_OPTS adds JVM flags.
kafka_run() {
  local role="$1"; shift
  local -a flags; mapfile -t flags < <(kafka_jvm_flags "$role")
  # shellcheck disable=SC2086
  "$JAVA" "${flags[@]}" ${KAFKA_TOOL_JVM_OPTS:-} -cp "$KAFKA_LIB/*" "$@"
}

# port_open HOST PORT: true if something accepts TCP connections there.
port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# kafka_ping HOST PORT [TIMEOUT_S]: true if a Kafka server there answers a request. Sends an
# ApiVersions v0 request (api key 18, correlation id 42, client id "ping") over bash's /dev/tcp
# and checks the response's correlation id and error code (0 = NONE, 35 = UNSUPPORTED_VERSION;
# either proves the request was processed). Takes milliseconds instead of a JVM start.
kafka_ping() {
  local out
  out="$( { exec 3<>"/dev/tcp/$1/$2" || exit 1
            printf '\x00\x00\x00\x0e\x00\x12\x00\x00\x00\x00\x00\x2a\x00\x04ping' >&3
            timeout "${3:-5}" head -c 10 <&3 | od -An -tx1 | tr -d ' \n'; } 2>/dev/null)"
  [[ "$out" == ????????0000002a0000 || "$out" == ????????0000002a0023 ]]
}

# Random id in org.apache.kafka.common.Uuid string form: 16 random bytes, URL-safe base64 without
# padding (22 chars), never starting with '-' (Uuid.randomUuid() excludes those too; such an id
# would also look like an option on a command line). Same form as `kafka-storage.sh random-uuid`.
new_kafka_uuid() {
  local id
  while :; do
    id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
    [[ ${#id} -eq 22 && "${id:0:1}" != "-" ]] && { echo "$id"; return 0; }
  done
}

# pid_alive PID: running and not a zombie (an unreaped zombie still answers kill -0).
pid_alive() {
  [[ -n "${1:-}" ]] && kill -0 "$1" 2>/dev/null || return 1
  [[ "$(sed -E 's/^.*\) ([A-Za-z]).*$/\1/' "/proc/$1/stat" 2>/dev/null)" != Z ]]
}

# stop_pid PID TIMEOUT_S SIGNAL: send SIGNAL (TERM or KILL), wait, escalate to KILL.
stop_pid() {
  local pid="$1" timeout="$2" sig="${3:-TERM}" t0
  pid_alive "$pid" || return 0
  kill "-$sig" "$pid" 2>/dev/null || true
  t0=$(now_ms)
  while pid_alive "$pid"; do
    if (( $(now_ms) - t0 > timeout * 1000 )); then
      say "pid $pid still alive after ${timeout}s, sending KILL"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.2
      break
    fi
    sleep 0.1
  done
}

# rss_mib PID: resident set size in MiB.
rss_mib() { ps -o rss= -p "$1" 2>/dev/null | awk '{printf "%.0f", $1 / 1024}'; }

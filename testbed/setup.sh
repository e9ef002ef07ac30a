#!/usr/bin/env bash
# setup.sh: fetch the Kafka jars from Maven Central into ./lib (via pom.xml), check them, prove
# that a broker really starts and logs, and build the class-data-sharing (CDS) archive.
#   ./setup.sh                       # Kafka version from pom.xml (4.3.1)
#   KAFKA_VERSION=x.y.z ./setup.sh   # another version (all org.apache.kafka jars move together;
#                                    # connect-mirror 4.4.0, 4.2.2 and 4.2.1 did not resolve here)
#   SETUP_FORCE=1 ./setup.sh         # redo everything even if lib/ is up to date
# Idempotent and fast: when lib/.setup-stamp records the sha256 of pom.xml and the same
# KAFKA_VERSION, mvn is skipped (a few milliseconds; the test command runs this every time).
# Jars land in lib.new first and replace lib only when the checks pass, so a version change never
# leaves two Kafka versions side by side on the `lib/*` classpath. Concurrent runs serialise on
# lib.lock. Needs: Java 17+, Maven, network to Maven Central on the first run (~/.m2 caches).
# Only stderr is used for messages; stdout stays empty.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=kafka-env.sh
. "$HERE/kafka-env.sh"

lib="$KAFKA_LIB"
new="$lib.new"
stamp="$lib/.setup-stamp"
mkdir -p "$(dirname "$lib")"
if command -v flock >/dev/null; then
  exec 9>"$lib.lock"
  flock -w 900 9 || die "another setup.sh holds $lib.lock for more than 900 s"
fi
want="pom-sha256=$(sha256sum "$HERE/pom.xml" | cut -c1-64) kafka.version=${KAFKA_VERSION:-from-pom}"

want_cds() { [[ "$KAFKA_JVM_PROFILE" == test && "${KAFKA_CDS:-1}" != 0 ]]; }

# has_class JAR PATH/IN/JAR.class: zip entry names are stored uncompressed, so grep finds them;
# the look-behind stops kafka/tools/X.class matching inside org/apache/kafka/tools/X.class.
has_class() {
  local re="${2//./\\.}" rc=0
  LC_ALL=C grep -qaP "(?<![A-Za-z0-9_/\$.-])$re" "$1" 2>/dev/null || rc=$?
  if (( rc == 2 )); then LC_ALL=C grep -qaF "$2" "$1"; else return "$rc"; fi
}

one() { # DIR PATTERN: exactly one jar matches; prints it
  local -a m; mapfile -t m < <(compgen -G "$1/$2" || true)
  [[ ${#m[@]} -eq 1 ]] || die "expected exactly one $2 in $1, found ${#m[@]}: ${m[*]:-}"
  echo "${m[0]}"
}

fetch_and_check() {
  command -v mvn >/dev/null || die "mvn not found (apt-get install maven)"
  check_java
  rm -rf "$new"
  local t0; t0=$(now_ms)
  say "resolving Kafka ${KAFKA_VERSION:-from pom.xml} jars with mvn dependency:copy-dependencies ..."
  # (Maven 3.8 prints bare colour resets even in batch mode; sed drops them. pipefail keeps mvn's status.)
  mvn -q -B -Dstyle.color=never -f "$HERE/pom.xml" ${KAFKA_VERSION:+"-Dkafka.version=$KAFKA_VERSION"} \
    "-Dlib.dir=$new" dependency:copy-dependencies 2>&1 | sed -e 's/\x1b\[[0-9;]*m//g' -e '/^$/d' >&2 \
    || die "mvn could not resolve the jars for Kafka ${KAFKA_VERSION:-from pom.xml}" \
           "(on this registry connect-mirror was found for 4.3.1 but not for 4.4.0, 4.2.2 or 4.2.1)"
  [[ -d "$new" ]] || die "maven did not create $new"

  local core tools mirror clients v j b c
  core="$(one "$new" 'kafka_2.13-*.jar')"; tools="$(one "$new" 'kafka-tools-[0-9]*.jar')"
  mirror="$(one "$new" 'connect-mirror-[0-9]*.jar')"; clients="$(one "$new" 'kafka-clients-*.jar')"
  v="${clients##*/kafka-clients-}"; v="${v%.jar}"
  # every org.apache.kafka jar must carry the same version
  for j in "$new"/kafka*.jar "$new"/connect-*.jar; do
    b="${j##*/}"; [[ "$b" == *"-$v.jar" ]] || die "mixed Kafka versions in lib: $b (expected $v)"
  done
  has_class "$core" kafka/Kafka.class || die "kafka.Kafka missing from $core"
  # kafka-cluster.sh tries both names; this only reports which one exists.
  if has_class "$core" kafka/tools/StorageTool.class; then STORAGE=kafka.tools.StorageTool
  elif has_class "$tools" org/apache/kafka/tools/StorageTool.class; then STORAGE=org.apache.kafka.tools.StorageTool
  else die "no StorageTool class in $core or $tools"; fi
  for c in ProducerPerformance ConsumerPerformance TopicCommand BrokerApiVersionsCommand \
           MetadataQuorumCommand GetOffsetShell ConsumerGroupCommand; do
    has_class "$tools" "org/apache/kafka/tools/$c.class" || has_class "$tools" "org/apache/kafka/tools/consumer/group/$c.class" \
      || die "org.apache.kafka.tools.$c missing from $tools"
  done
  has_class "$mirror" org/apache/kafka/connect/mirror/MirrorMaker.class || die "MirrorMaker missing from $mirror"

  # logging: SLF4J 1.7 API + the Log4j2 binding for it, and no competing binding
  one "$new" 'slf4j-api-1.7.*.jar' >/dev/null
  one "$new" 'log4j-slf4j-impl-*.jar' >/dev/null
  one "$new" 'log4j-core-*.jar' >/dev/null
  for b in 'slf4j-api-2.*.jar' 'log4j-slf4j2-impl-*.jar' 'slf4j-reload4j-*.jar' 'slf4j-log4j12-*.jar' \
           'logback-classic-*.jar' 'slf4j-simple-*.jar' 'slf4j-nop-*.jar'; do
    if compgen -G "$new/$b" >/dev/null; then die "unexpected logging jar $b in lib (would break or silence logging)"; fi
  done
  rm -rf "${lib:?}"; mv "$new" "$lib"
  say "lib ready in $(( $(now_ms) - t0 )) ms: Kafka $v, $(find "$lib" -name '*.jar' | wc -l) jars," \
      "$(du -sm "$lib" | cut -f1) MB, storage tool $STORAGE"
}

# verify_broker: format and start one real broker on free loopback ports, require the
# "Kafka Server started" log line (proves the SLF4J -> Log4j2 binding) and an answer to an
# ApiVersions request, then stop it with SIGTERM. In the test profile the broker JVM also dumps
# the dynamic CDS archive at exit (-XX:ArchiveClassesAtExit), which later JVMs map read-only.
verify_broker() {
  check_java
  local d port cport tries=0 pid t0 cds="" tmp="" ok=0
  d="$(mktemp -d "${TMPDIR:-/tmp}/mm2go-kafka-setup.XXXXXX")"
  while :; do
    # Below the kernel's ephemeral ports (32768 up by default), which any client's connection
    # may hold (a bind there failed once), and below the test bed's clusters (19092 up).
    port=$(( 10000 + RANDOM % 8000 )); cport=$(( port + 1 ))
    if ! port_open 127.0.0.1 "$port" && ! port_open 127.0.0.1 "$cport"; then break; fi
    (( ++tries < 50 )) || die "no free port pair found for the verification broker"
  done
  mkdir -p "$d/data"
  cat >"$d/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$d/data
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
log.cleaner.dedupe.buffer.size=8388608
EOF
  local storage
  for storage in kafka.tools.StorageTool org.apache.kafka.tools.StorageTool; do
    if kafka_run tool "$storage" format --cluster-id "$(new_kafka_uuid)" --config "$d/server.properties" \
         >"$d/format.log" 2>&1; then break; fi
    grep -q -e "Could not find or load main class" -e ClassNotFoundException "$d/format.log" \
      || { cat "$d/format.log" >&2; die "formatting the verification broker failed"; }
  done
  local -a flags; mapfile -t flags < <(KAFKA_CDS=0 kafka_jvm_flags broker)
  if want_cds; then
    cds="$(kafka_cds_archive)"; mkdir -p "${cds%/*}"; tmp="$cds.tmp.$$"; rm -f "$tmp"
    flags+=("-XX:ArchiveClassesAtExit=$tmp")
  fi
  t0=$(now_ms)
  "$JAVA" "${flags[@]}" -cp "$KAFKA_LIB/*" kafka.Kafka "$d/server.properties" >"$d/node.log" 2>&1 </dev/null &
  pid=$!
  while (( $(now_ms) - t0 < 120000 )); do
    pid_alive "$pid" || break
    if port_open 127.0.0.1 "$port" && kafka_ping 127.0.0.1 "$port"; then ok=1; break; fi
    sleep 0.1
  done
  local started_ms=$(( $(now_ms) - t0 ))
  stop_pid "$pid" 60 TERM
  wait "$pid" 2>/dev/null || true
  if (( ok == 0 )); then
    tail -n 40 "$d/node.log" >&2; rm -f "$tmp"
    if grep -q "Address already in use" "$d/node.log"; then
      die "the verification broker did not start: port $port or $cport is taken (log above)"
    fi
    die "the verification broker did not start (log above)"
  fi
  if ! grep -q "Kafka Server started" "$d/node.log"; then
    tail -n 40 "$d/node.log" >&2; rm -f "$tmp"
    die "the broker answered but never logged 'Kafka Server started': the SLF4J binding is wrong"
  fi
  if grep -q -e "SLF4J: " "$d/node.log"; then
    grep "SLF4J: " "$d/node.log" >&2; rm -f "$tmp"; die "SLF4J complained (see above)"
  fi
  if [[ -n "$tmp" ]]; then
    if [[ -s "$tmp" ]]; then mv -f "$tmp" "$cds"; say "CDS archive $cds ($(du -sm "$cds" | cut -f1) MB)"
    else rm -f "$tmp"; say "warning: no CDS archive was written; JVMs start without it"; fi
  fi
  rm -rf "$d"
  say "verified: a broker started in ${started_ms} ms and logged 'Kafka Server started'"
}

t_all=$(now_ms)
if [[ "${SETUP_FORCE:-0}" != 1 && -f "$stamp" && "$(cat "$stamp")" == "$want" ]] \
   && compgen -G "$lib/kafka_2.13-*.jar" >/dev/null; then
  # lib is complete; only a missing CDS archive for this JDK needs work
  if want_cds && [[ ! -f "$(kafka_cds_archive)" ]]; then verify_broker; fi
  exit 0
fi
fetch_and_check
verify_broker
echo "$want" >"$stamp"
say "setup done in $(( $(now_ms) - t_all )) ms"

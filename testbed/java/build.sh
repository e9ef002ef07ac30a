#!/usr/bin/env bash
# build.sh: build target/mm2go-interop.jar (mvn -q -B package) against the Kafka version the
# testbed runs (kafka.version of ../pom.xml, or KAFKA_VERSION as for ../setup.sh).
#   ./build.sh               build if the sources changed since the last build, else return
#   BUILD_FORCE=1 ./build.sh rebuild anyway
# Idempotent and fast: target/.build-stamp holds the sha256 of pom.xml, the Java sources and the
# Kafka version; when it matches and the jar exists, mvn is skipped (a few milliseconds).
# Concurrent runs serialise on .build.lock. Needs Java 17+ and Maven; the first build downloads
# Maven's build plugins from Maven Central. Messages go to stderr; stdout stays empty.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../kafka-env.sh
. "$HERE/../kafka-env.sh"

jar="$HERE/target/mm2go-interop.jar"
stamp="$HERE/target/.build-stamp"
if command -v flock >/dev/null; then
  exec 9>"$HERE/.build.lock"
  flock -w 600 9 || die "another build.sh holds $HERE/.build.lock for more than 600 s"
fi

version="${KAFKA_VERSION:-$(sed -n 's|.*<kafka.version>\(.*\)</kafka.version>.*|\1|p' "$HERE/../pom.xml" | sed -n 1p)}"
[[ -n "$version" ]] || die "no <kafka.version> in $HERE/../pom.xml"
want="$( { cat "$HERE/pom.xml"; find "$HERE/src" -type f | LC_ALL=C sort | xargs cat; } | sha256sum | cut -c1-64) kafka.version=$version"

if [[ "${BUILD_FORCE:-0}" != 1 && -f "$jar" && "$(cat "$stamp" 2>/dev/null)" == "$want" ]]; then
  exit 0
fi
command -v mvn >/dev/null || die "mvn not found (apt-get install maven)"
check_java
t0=$(now_ms)
rm -f "$stamp"
# (Maven 3.8 prints bare colour resets even in batch mode; sed drops them. pipefail keeps mvn's status.)
mvn -q -B -Dstyle.color=never -f "$HERE/pom.xml" "-Dkafka.version=$version" package 2>&1 \
  | sed -e 's/\x1b\[[0-9;]*m//g' -e '/^$/d' >&2 \
  || die "mvn package failed for Kafka $version"
[[ -f "$jar" ]] || die "mvn did not produce $jar"
echo "$want" >"$stamp"
say "built $jar for Kafka $version in $(( $(now_ms) - t0 )) ms"

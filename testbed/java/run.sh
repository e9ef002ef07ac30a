#!/usr/bin/env bash
# run.sh: run the interop program (build.sh builds it) with the testbed's Kafka jars and JVM
# settings (kafka-env.sh, role "tool": C1, SerialGC, small heap, WARN logging to stderr).
#   ./run.sh client BOOTSTRAP REMOTE_ALIAS GROUP TIMEOUT_MS [--hops ALIAS]... [--prop K=V]...
#   ./run.sh records offset-syncs|checkpoints|heartbeats BOOTSTRAP TOPIC TIMEOUT_MS
#   ./run.sh msk-iam HOST
# The JSON answer is the only output on stdout. See src/main/java/mm2go/interop/Interop.java.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../kafka-env.sh
. "$HERE/../kafka-env.sh"

jar="$HERE/target/mm2go-interop.jar"
[[ -f "$jar" ]] || die "$jar is missing; run $HERE/build.sh"
check_lib
mapfile -t flags < <(kafka_jvm_flags tool)
# target/deps (aws-msk-iam-auth and the AWS SDK) after lib/: Kafka's own jars win where both have one.
exec "$JAVA" "${flags[@]}" -cp "$KAFKA_LIB/*:$jar:$HERE/target/deps/*" mm2go.interop.Interop "$@"

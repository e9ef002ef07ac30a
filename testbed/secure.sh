#!/usr/bin/env bash
# secure.sh: a single-node Kafka cluster that takes clients only over SASL_SSL (SCRAM-SHA-512)
# and enforces ACLs, for mm2go's security tests. It is kafka-cluster.sh with a listener config.
#
#   secure.sh certs DIR                       a self-made CA and a broker certificate, in PEM:
#                                             DIR/ca.pem (the CA certificate: the clients' trust
#                                             store), DIR/ca.key, DIR/broker.pem (key, certificate
#                                             and CA: the broker's key store; subject CN=broker,
#                                             SAN IP:127.0.0.1 and DNS:localhost). Kept if present.
#   secure.sh start NAME PORT CTRL_PORT DIR   `certs DIR`, then the cluster NAME under KAFKA_ROOT;
#                                             prints the bootstrap string (127.0.0.1:PORT) once the
#                                             listener accepts connections
#   secure.sh stop NAME                       kafka-cluster.sh stop NAME
#
# The broker:
#   SASL_SSL://127.0.0.1:PORT     clients and the inter-broker listener; SCRAM-SHA-512 only
#   CONTROLLER://127.0.0.1:CTRL_PORT  SSL with client certificates required: the broker talks to
#                                 its controller with broker.pem, principal User:broker
#   SSL://127.0.0.1:SECURE_SSL_PORT  with SECURE_SSL_PORT set: clients with a certificate of the
#                                 CA (mutual TLS), their principal User:<CN>
#   SECURE_OAUTH_JWKS_URL=URL     the SASL_SSL listener also takes OAUTHBEARER: JWTs signed with
#                                 a key of that JWKS, audience "kafka", principal User:<sub>
#                                 (Kafka's OAuthBearerValidatorCallbackHandler); sessions are
#                                 re-authenticated when the token expires
#   StandardAuthorizer, super.users=User:admin;User:broker, allow.everyone.if.no.acl.found=false:
#   any other user may do nothing until ACLs allow it.
# SCRAM-SHA-512 users are created when the storage is formatted (kafka-storage.sh format
# --add-scram), so they exist before the broker starts:
#   SECURE_ADMIN_PASSWORD=admin-secret   the password of the super user "admin"
#   SECURE_USERS="alice:pw1 bob:pw2"     more users, without any ACL
# Passwords must be made of letters, digits, '-' and '_' (they are passed on a command line).
# DIR/admin.properties holds client settings for Kafka's CLI tools as admin (--command-config).
# Every kafka-cluster.sh and kafka-env.sh knob applies (KAFKA_ROOT, KAFKA_HEAP, ...);
# KAFKA_EXTRA_PROPS is appended after this script's settings.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=kafka-env.sh
. "$HERE/kafka-env.sh"

usage() { awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0" >&2; exit 2; }

# make_certs DIR: CA and broker certificate (EC P-256, 10 years), unless DIR/broker.pem exists.
make_certs() {
  local dir="$1"
  command -v openssl >/dev/null 2>&1 || die "openssl not found"
  mkdir -p "$dir"
  [[ -s "$dir/broker.pem" && -s "$dir/ca.pem" ]] && return 0
  local tmp; tmp="$(mktemp -d)"
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" RETURN
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
    -subj "/CN=mm2go test CA $(basename "$dir")" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout "$tmp/ca.key" -out "$tmp/ca.pem" 2>"$tmp/log" || { cat "$tmp/log" >&2; die "openssl: CA"; }
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=broker" \
    -keyout "$tmp/broker.key" -out "$tmp/broker.csr" 2>"$tmp/log" || { cat "$tmp/log" >&2; die "openssl: broker key"; }
  printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth,clientAuth" "subjectAltName=IP:127.0.0.1,DNS:localhost" >"$tmp/ext"
  openssl x509 -req -in "$tmp/broker.csr" -CA "$tmp/ca.pem" -CAkey "$tmp/ca.key" \
    -set_serial "0x$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')" -days 3650 \
    -extfile "$tmp/ext" -out "$tmp/broker.crt" 2>"$tmp/log" || { cat "$tmp/log" >&2; die "openssl: sign"; }
  cat "$tmp/broker.key" "$tmp/broker.crt" "$tmp/ca.pem" >"$tmp/broker.pem"
  chmod 600 "$tmp/ca.key" "$tmp/broker.pem"
  mv "$tmp/ca.key" "$tmp/ca.pem" "$tmp/broker.pem" "$dir/"
}

# scram_arg USER PASSWORD: one --add-scram value.
scram_arg() {
  [[ "$1" =~ ^[A-Za-z0-9_-]+$ && "$2" =~ ^[A-Za-z0-9_-]+$ ]] \
    || die "user '$1': names and passwords may hold only letters, digits, '-' and '_'"
  echo "SCRAM-SHA-512=[name=$1,password=$2]"
}

start_secure() {
  local name="$1" port="$2" cport="$3" dir
  mkdir -p "$4"
  dir="$(cd "$4" && pwd)"
  make_certs "$dir"
  local admin_pw="${SECURE_ADMIN_PASSWORD:-admin-secret}"
  local fmt u
  fmt="--add-scram\n$(scram_arg admin "$admin_pw")"
  for u in ${SECURE_USERS:-}; do
    [[ "$u" == *:* ]] || die "SECURE_USERS: '$u' is not USER:PASSWORD"
    fmt+="\n--add-scram\n$(scram_arg "${u%%:*}" "${u#*:}")"
  done
  local jaas="org.apache.kafka.common.security.scram.ScramLoginModule required username=\"admin\" password=\"$admin_pw\";"
  local props listeners="SASL_SSL://127.0.0.1:$port" mtls="" mechs="SCRAM-SHA-512" oauth=""
  if [[ -n "${SECURE_SSL_PORT:-}" ]]; then
    listeners+=",SSL://127.0.0.1:$SECURE_SSL_PORT"
    mtls="listener.name.ssl.ssl.client.auth=required"
  fi
  if [[ -n "${SECURE_OAUTH_JWKS_URL:-}" ]]; then
    mechs+=",OAUTHBEARER"
    oauth="listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ;
listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler
sasl.oauthbearer.jwks.endpoint.url=$SECURE_OAUTH_JWKS_URL
sasl.oauthbearer.expected.audience=kafka
connections.max.reauth.ms=600000"
    export KAFKA_JVM_OPTS="${KAFKA_JVM_OPTS:-} -Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=$SECURE_OAUTH_JWKS_URL"
  fi
  props="$(cat <<EOF
# secure.sh: SASL_SSL clients (and mutual TLS ones with SECURE_SSL_PORT), SSL controller, ACLs enforced
listeners=$listeners,CONTROLLER://127.0.0.1:$cport
advertised.listeners=$listeners
inter.broker.listener.name=SASL_SSL
listener.security.protocol.map=CONTROLLER:SSL,SASL_SSL:SASL_SSL,SSL:SSL
$mtls
$oauth
sasl.enabled.mechanisms=$mechs
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=$jaas
ssl.keystore.type=PEM
ssl.keystore.location=$dir/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=$dir/ca.pem
listener.name.controller.ssl.client.auth=required
ssl.principal.mapping.rules=RULE:^CN=([a-zA-Z0-9._-]+).*$/\$1/,DEFAULT
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin;User:broker
allow.everyone.if.no.acl.found=false
EOF
)"
  cat >"$dir/admin.properties" <<EOF
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=$jaas
ssl.truststore.type=PEM
ssl.truststore.location=$dir/ca.pem
EOF
  chmod 600 "$dir/admin.properties"
  # kafka-cluster.sh expands backslash escapes in both variables (printf %b).
  KAFKA_EXTRA_PROPS="${props//\\/\\\\}${KAFKA_EXTRA_PROPS:+\n$KAFKA_EXTRA_PROPS}" \
    KAFKA_FORMAT_ARGS="$fmt${KAFKA_FORMAT_ARGS:+\n$KAFKA_FORMAT_ARGS}" \
    KAFKA_READY_PROBE=port \
    "$HERE/kafka-cluster.sh" start "$name" "$port" "$cport"
}

cmd="${1:-}"; [[ -n "$cmd" ]] || usage; shift
case "$cmd" in
  certs) [[ $# -eq 1 ]] || usage; make_certs "$1" ;;
  start) [[ $# -eq 4 ]] || usage; start_secure "$@" ;;
  stop) [[ $# -eq 1 ]] || usage; "$HERE/kafka-cluster.sh" stop "$1" ;;
  *) usage ;;
esac

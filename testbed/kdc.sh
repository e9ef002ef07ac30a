#!/usr/bin/env bash
# kdc.sh: a Kerberos realm on loopback (Debian's MIT krb5-kdc), for mm2go's GSSAPI tests.
#
#   kdc.sh start DIR PORT [PRINCIPAL...]   create realm MM2GO.TEST in DIR (database, stash,
#                                          kdc.conf, krb5.conf) and start krb5kdc on
#                                          127.0.0.1:PORT (TCP and UDP). Each PRINCIPAL (e.g.
#                                          kafka/localhost, mm2go) is created with a random key
#                                          and written to DIR/<principal with / as _>.keytab.
#                                          A PRINCIPAL prefixed with "-" (e.g. -gone) gets its
#                                          keytab and is then deleted from the realm: a
#                                          credential the KDC refuses. Prints DIR/krb5.conf.
#   kdc.sh stop DIR                        stop that krb5kdc
#
# krb5.conf names the KDC by address (no DNS), prefers TCP (udp_preference_limit = 1, as
# Kafka's JVM and gokrb5 both honour) and maps localhost to the realm: a broker listening as
# localhost is the service principal kafka/localhost@MM2GO.TEST. Needs krb5-kdc and
# krb5-admin-server (kadmin.local): apt-get install krb5-kdc krb5-admin-server.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=kafka-env.sh
. "$HERE/kafka-env.sh"

REALM=MM2GO.TEST
usage() { awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0" >&2; exit 2; }

start_kdc() {
  local dir="$1" port="$2"; shift 2
  for t in kdb5_util krb5kdc kadmin.local; do
    command -v "$t" >/dev/null 2>&1 || die "$t not found (apt-get install krb5-kdc krb5-admin-server)"
  done
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  cat >"$dir/kdc.conf" <<EOF
[kdcdefaults]
 kdc_listen = 127.0.0.1:$port
 kdc_tcp_listen = 127.0.0.1:$port
[realms]
 $REALM = {
  database_name = $dir/principal
  key_stash_file = $dir/stash
  acl_file = $dir/kadm5.acl
  max_life = 1h
  max_renewable_life = 1d
  supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
 }
[logging]
 kdc = FILE:$dir/kdc.log
EOF
  cat >"$dir/krb5.conf" <<EOF
[libdefaults]
 default_realm = $REALM
 dns_lookup_kdc = false
 dns_lookup_realm = false
 rdns = false
 udp_preference_limit = 1
 default_tkt_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96
 default_tgs_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96
 permitted_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96
[realms]
 $REALM = {
  kdc = 127.0.0.1:$port
 }
[domain_realm]
 localhost = $REALM
EOF
  : >"$dir/kadm5.acl"
  export KRB5_CONFIG="$dir/krb5.conf" KRB5_KDC_PROFILE="$dir/kdc.conf"
  if [[ ! -f "$dir/principal" ]]; then
    kdb5_util create -s -r "$REALM" -P "kdc-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$dir/setup.log" 2>&1 \
      || { cat "$dir/setup.log" >&2; die "kdb5_util create failed"; }
  fi
  local p gone kt
  for p in "$@"; do
    gone=0
    [[ "$p" == -* ]] && { gone=1; p="${p#-}"; }
    kt="$dir/${p//\//_}.keytab"
    rm -f "$kt"
    kadmin.local -r "$REALM" -q "addprinc -randkey $p@$REALM" >>"$dir/setup.log" 2>&1 \
      || { cat "$dir/setup.log" >&2; die "addprinc $p"; }
    kadmin.local -r "$REALM" -q "ktadd -k $kt $p@$REALM" >>"$dir/setup.log" 2>&1 \
      || { cat "$dir/setup.log" >&2; die "ktadd $p"; }
    if (( gone )); then
      kadmin.local -r "$REALM" -q "delprinc -force $p@$REALM" >>"$dir/setup.log" 2>&1 || die "delprinc $p"
    fi
    chmod 600 "$kt"
  done
  stop_kdc "$dir"
  krb5kdc -n -r "$REALM" -P "$dir/kdc.pid" >>"$dir/kdc.out" 2>&1 </dev/null &
  echo $! >"$dir/kdc.pid"
  local i
  for ((i = 0; i < 100; i++)); do
    if (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$dir/krb5.conf"
      return 0
    fi
    sleep 0.1
  done
  cat "$dir/kdc.out" "$dir/kdc.log" >&2 2>/dev/null || true
  die "krb5kdc did not listen on 127.0.0.1:$port"
}

stop_kdc() {
  local pid
  pid="$(cat "$1/kdc.pid" 2>/dev/null || true)"
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -f "$1/kdc.pid"
}

case "${1:-}" in
  start) [[ $# -ge 3 ]] || usage; shift; start_kdc "$@" ;;
  stop) [[ $# -eq 2 ]] || usage; stop_kdc "$2" ;;
  *) usage ;;
esac

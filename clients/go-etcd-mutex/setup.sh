# go-etcd-mutex adapter: Debian's Go (golang-go, 1.19) and etcd's Go client
# sources (golang-etcd-server-dev, 3.4.23, under /usr/share/gocode), built offline
# in GOPATH mode into clients/go-etcd-mutex/bin/. Sourced by ci/bootstrap.sh,
# which provides say, die, apt_install (and CACHE); runs in bootstrap's shell, so
# everything here is prefixed and nothing exits.

gem_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
gem_go=/usr/bin/go
gem_pkg=/usr/share/gocode/src/go.etcd.io/etcd/clientv3/concurrency
gem_ver=/usr/share/gocode/src/go.etcd.io/etcd/version/version.go
gem_bin="$gem_dir/bin/go-etcd-mutex"

# Go 1.19 or later: what the adapter is built and tested with (Debian 12's).
gem_go_ok() {
  [ -x "$gem_go" ] || return 1
  local v
  v="$("$gem_go" env GOVERSION 2>/dev/null)" || return 1
  [[ "$v" =~ ^go1\.([0-9]+) ]] && [ "${BASH_REMATCH[1]}" -ge 19 ]
}
# The Mutex sources themselves, of etcd 3.4 (the clientv3 import path of 3.4;
# 3.5 moved it to go.etcd.io/etcd/client/v3).
gem_src_ok() {
  [ -f "$gem_pkg/mutex.go" ] && [ -f "$gem_pkg/session.go" ] &&
    grep -q 'Version *= *"3\.4\.' "$gem_ver" 2>/dev/null
}

if gem_go_ok; then
  say "go: $("$gem_go" version)"
else
  say "go 1.19+ missing ($gem_go): Debian's golang-go"
  apt_install golang-go
  gem_go_ok || die "golang-go installed but $gem_go is not go 1.19 or later"
  say "go: $("$gem_go" version)"
fi
if gem_src_ok; then
  say "etcd Go client sources: $gem_pkg ($(grep -o '"3\.4\.[0-9]*"' "$gem_ver"))"
else
  say "etcd 3.4 Go client sources missing ($gem_pkg): Debian's golang-etcd-server-dev"
  apt_install golang-etcd-server-dev
  gem_src_ok || die "golang-etcd-server-dev installed but $gem_pkg (etcd 3.4) is still missing"
fi

# Rebuild when the binary is missing or older than any of its sources.
if [ -x "$gem_bin" ] && [ -z "$(find "$gem_dir" -maxdepth 1 -name '*.go' -newer "$gem_bin")" ]; then
  say "go-etcd-mutex adapter: $gem_bin"
else
  say "building the go-etcd-mutex adapter offline (GOPATH mode, /usr/share/gocode)"
  # GOPATH mode resolves imports from /usr/share/gocode/src; the first GOPATH
  # entry and the build cache are fencecheck's own, never the user's ~/go.
  # GOENV=off so a user's go env file (GOFLAGS, GOPROXY) cannot change the
  # build; GOPROXY=off: nothing is fetched. CGO_ENABLED=0 needs no C compiler.
  gem_cache="${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fencecheck}/go-etcd-mutex"
  mkdir -p "$gem_cache/gopath" "$gem_cache/gocache" "$gem_dir/bin"
  if (cd "$gem_dir" && env GOENV=off GO111MODULE=off GOFLAGS= GOPROXY=off \
    GOPATH="$gem_cache/gopath:/usr/share/gocode" GOCACHE="$gem_cache/gocache" \
    CGO_ENABLED=0 "$gem_go" build -o "$gem_bin.tmp" .); then
    mv -f "$gem_bin.tmp" "$gem_bin"
  else
    rm -f "$gem_bin.tmp"
    die "go-etcd-mutex: go build failed (see above)"
  fi
  [ -x "$gem_bin" ] || die "go-etcd-mutex: $gem_bin missing after the build"
  say "go-etcd-mutex adapter: $gem_bin"
fi

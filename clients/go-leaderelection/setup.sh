# go-leaderelection adapter: client-go 1.20.2's tools/leaderelection from the Kubernetes
# source tree ci/kubernetes.sh unpacks (Debian's kubernetes source package, with vendor/),
# built offline with Debian's Go into clients/go-leaderelection/bin/. Sourced by
# ci/bootstrap.sh, which provides say, die (and CACHE); runs in bootstrap's shell, so
# everything here is prefixed and nothing exits. Without the tree it says so in one line
# and builds nothing: the tree comes with the kubernetes system (ci/kubernetes.sh),
# which bootstrap does not run yet.

gle_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
gle_go=/usr/bin/go
gle_cache="${CACHE:-${FENCECHECK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fencecheck}}"
gle_src="$gle_cache/kubernetes/src-1.20.2"
gle_bin="$gle_dir/bin/go-leaderelection"

if [ ! -e "$gle_src/vendor/k8s.io/client-go/tools/leaderelection/leaderelection.go" ]; then
  say "go-leaderelection adapter: skipped, no Kubernetes 1.20.2 tree at $gle_src (ci/kubernetes.sh makes it)"
elif [ ! -x "$gle_go" ]; then
  die "go-leaderelection: $gle_go missing (go-etcd-mutex/setup.sh installs Debian's golang-go)"
elif [ -x "$gle_bin" ] && [ -z "$(find "$gle_dir" -maxdepth 1 -name '*.go' -newer "$gle_bin")" ]; then
  say "go-leaderelection adapter: $gle_bin"
else
  say "building the go-leaderelection adapter offline (GOPATH mode, the Kubernetes tree's vendor/)"
  # GOPATH mode honours a vendor/ beside the package, and the tree's vendor/ has
  # client-go (a link into staging/) and all it imports. So the package is copied into a
  # GOPATH of fencecheck's own, with vendor/ a link to the tree's: nothing is fetched
  # (GOPROXY=off), nothing of the user's is read (GOENV=off, own GOCACHE), no C compiler
  # (CGO_ENABLED=0). A module inside the tree with -mod=vendor would need a vendor/
  # modules.txt agreeing with its own go.mod, which the tree's does not.
  gle_pkg="$gle_cache/go-leaderelection/gopath/src/fencecheck/go-leaderelection"
  rm -rf "$gle_pkg"
  mkdir -p "$gle_pkg" "$gle_cache/go-leaderelection/gocache" "$gle_dir/bin"
  cp "$gle_dir"/*.go "$gle_pkg/"
  ln -s "$gle_src/vendor" "$gle_pkg/vendor"
  if (cd "$gle_pkg" && env GOENV=off GO111MODULE=off GOFLAGS= GOPROXY=off \
    GOPATH="$gle_cache/go-leaderelection/gopath" GOCACHE="$gle_cache/go-leaderelection/gocache" \
    CGO_ENABLED=0 "$gle_go" build -o "$gle_bin.tmp" \
    -ldflags "-X 'main.library=client-go v1.20.2 tools/leaderelection (Debian kubernetes source)'" .); then
    mv -f "$gle_bin.tmp" "$gle_bin"
  else
    rm -f "$gle_bin.tmp"
    die "go-leaderelection: go build failed (see above)"
  fi
  [ -x "$gle_bin" ] || die "go-leaderelection: $gle_bin missing after the build"
  say "go-leaderelection adapter: $gle_bin"
fi

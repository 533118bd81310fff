# python-leaselock adapter: the official Kubernetes Python client (PyPI `kubernetes`
# 37.0.2) and its kubernetes.leaderelection, in a venv of fencecheck's own under the
# cache (Debian has no python3-kubernetes of that release). Sourced by ci/bootstrap.sh,
# which provides say, die, apt_install (and CACHE); runs in bootstrap's shell, so
# everything here is prefixed and nothing exits. The check is the venv's python
# importing kubernetes 37.0.2: then nothing is done; otherwise the venv is (re)made
# with Debian's /usr/bin/python3 and the package installed from PyPI (pinned).

pll_cache="${CACHE:-${FENCECHECK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fencecheck}}"
pll_venv="$pll_cache/python-leaselock/venv"
pll_want=37.0.2
pll_version() {
  "$pll_venv/bin/python" -c 'import kubernetes, kubernetes.leaderelection.leaderelection; print(kubernetes.__version__)' 2>/dev/null
}

if [ "$(pll_version)" = "$pll_want" ]; then
  say "python-leaselock adapter: $pll_venv imports kubernetes $pll_want"
else
  say "python-leaselock adapter: making $pll_venv with kubernetes==$pll_want from PyPI"
  pll_start=$SECONDS
  rm -rf "$pll_venv"
  mkdir -p "$(dirname "$pll_venv")"
  # Debian's python3 makes a venv with pip in it only with python3-venv (ensurepip's
  # wheels): the check is making one.
  if ! /usr/bin/python3 -m venv "$pll_venv" >/dev/null 2>&1; then
    rm -rf "$pll_venv"
    apt_install python3-venv
    /usr/bin/python3 -m venv "$pll_venv" || die "python-leaselock: python3 -m venv $pll_venv failed"
  fi
  "$pll_venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "kubernetes==$pll_want" || die "python-leaselock: pip install kubernetes==$pll_want failed"
  [ "$(pll_version)" = "$pll_want" ] ||
    die "python-leaselock: $pll_venv still does not import kubernetes $pll_want"
  say "python-leaselock adapter: $pll_venv imports kubernetes $pll_want ($((SECONDS - pll_start)) s)"
fi

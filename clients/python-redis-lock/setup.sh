# python-redis-lock adapter: PyPI's python-redis-lock 4.0.1 (and redis-py 5.0.8 under it)
# in a venv of fencecheck's own under the cache (Debian has no package of it). Sourced by
# ci/bootstrap.sh, which provides say, die, apt_install (and CACHE); runs in bootstrap's
# shell, so everything here is prefixed and nothing exits. The check is the venv's
# python importing redis_lock 4.0.1: then nothing is done; otherwise the venv is
# (re)made with Debian's /usr/bin/python3 and the packages installed from PyPI (pinned).

prl_cache="${CACHE:-${FENCECHECK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fencecheck}}"
prl_venv="$prl_cache/python-redis-lock/venv"
prl_want=4.0.1
prl_redis=5.0.8
prl_version() {
  "$prl_venv/bin/python" -c 'import redis_lock; print(redis_lock.__version__)' 2>/dev/null
}

if [ "$(prl_version)" = "$prl_want" ]; then
  say "python-redis-lock adapter: $prl_venv imports redis_lock $prl_want"
else
  say "python-redis-lock adapter: making $prl_venv with python-redis-lock==$prl_want from PyPI"
  prl_start=$SECONDS
  rm -rf "$prl_venv"
  mkdir -p "$(dirname "$prl_venv")"
  # Debian's python3 makes a venv with pip in it only with python3-venv (ensurepip's
  # wheels): the check is making one.
  if ! /usr/bin/python3 -m venv "$prl_venv" >/dev/null 2>&1; then
    rm -rf "$prl_venv"
    apt_install python3-venv
    /usr/bin/python3 -m venv "$prl_venv" || die "python-redis-lock: python3 -m venv $prl_venv failed"
  fi
  "$prl_venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "python-redis-lock==$prl_want" "redis==$prl_redis" ||
    die "python-redis-lock: pip install python-redis-lock==$prl_want redis==$prl_redis failed"
  [ "$(prl_version)" = "$prl_want" ] ||
    die "python-redis-lock: $prl_venv still does not import redis_lock $prl_want"
  say "python-redis-lock adapter: $prl_venv imports redis_lock $prl_want ($((SECONDS - prl_start)) s)"
fi

# python-redis-lock adapter: PyPI's python-redis-lock 4.0.1 (and redis-py 5.0.8 under it)
# in a venv of fencecheck's own under the cache (Debian has no package of it), made by
# bootstrap's pypi_venv. Sourced by ci/bootstrap.sh, in its shell: everything here is
# prefixed and nothing exits. The check is the venv's python importing redis_lock 4.0.1.
prl_venv="$CACHE/python-redis-lock/venv"
prl_version() {
  "$prl_venv/bin/python" -c 'import redis_lock; print(redis_lock.__version__)'
}
pypi_venv "python-redis-lock adapter" "$prl_venv" 4.0.1 prl_version \
  "python-redis-lock==4.0.1" "redis==5.0.8"

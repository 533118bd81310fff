# tooz adapter: PyPI's tooz 9.1.0 (OpenStack; Debian ships another release) with the
# libraries of the three drivers the adapter uses — etcd3gw 2.7.0 (etcd's gRPC gateway
# over HTTP), kazoo 2.11.0 (ZooKeeper), redis 8.2.0 — in a venv of fencecheck's own
# under the cache, made by bootstrap's pypi_venv. tooz 9.1.0 needs Python >= 3.11
# (Debian 12's is 3.11). Sourced by ci/bootstrap.sh, in its shell: everything here is
# prefixed and nothing exits. The check is the venv's python reporting the four versions.
tooz_venv="$CACHE/tooz/venv"
tooz_versions() {
  "$tooz_venv/bin/python" -c 'import importlib.metadata as m; print(*(m.version(p) for p in ("tooz", "etcd3gw", "kazoo", "redis")))'
}
pypi_venv "tooz adapter" "$tooz_venv" "9.1.0 2.7.0 2.11.0 8.2.0" tooz_versions \
  "tooz==9.1.0" "etcd3gw==2.7.0" "kazoo==2.11.0" "redis==8.2.0"

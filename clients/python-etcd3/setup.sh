# Sourced by ci/bootstrap.sh: the python-etcd3 adapter runs under Debian's /usr/bin/python3
# and needs python3-etcd3 there (checked by importing etcd3, installed when that fails).
debian_python_import "python-etcd3 adapter" etcd3 python3-etcd3

# Its `checked` and `with` forms (clients/python-etcd3/pypi) run PyPI's etcd3 0.12.0 the
# way teams install it: pinned tenacity 6.1.0 (the API 0.12.0 was written for; Debian's
# tenacity 8 breaks its contended acquire) and protobuf < 4 (its generated code predates
# protobuf 4), in a venv of fencecheck's own under the cache (bootstrap's pypi_venv). The
# check is the venv's python importing etcd3 0.12.0 and tenacity 6.1.0.
pe3_venv="$CACHE/python-etcd3/venv"
pe3_version() {
  "$pe3_venv/bin/python" -c 'import etcd3, tenacity, importlib.metadata as m; print(etcd3.__version__, m.version("tenacity"))'
}
pypi_venv "python-etcd3 adapter (PyPI)" "$pe3_venv" "0.12.0 6.1.0" pe3_version \
  "etcd3==0.12.0" "tenacity==6.1.0" "protobuf<4"

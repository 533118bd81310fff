# Sourced by ci/bootstrap.sh: the python-etcd3 adapter runs under Debian's /usr/bin/python3
# and needs python3-etcd3 there (checked by importing etcd3, installed when that fails).
debian_python_import "python-etcd3 adapter" etcd3 python3-etcd3

# Its `checked` and `with` forms (clients/python-etcd3/pypi) run PyPI's etcd3 0.12.0 the
# way teams install it: pinned tenacity 6.1.0 (the API 0.12.0 was written for; Debian's
# tenacity 8 breaks its contended acquire) and protobuf < 4 (its generated code predates
# protobuf 4), in a venv of fencecheck's own under the cache. Runs in bootstrap's shell
# (say, die, apt_install), so everything here is prefixed and nothing exits. The check is
# the venv's python importing etcd3 0.12.0 and tenacity 6.1.0: then nothing is done.
pe3_cache="${CACHE:-${FENCECHECK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fencecheck}}"
pe3_venv="$pe3_cache/python-etcd3/venv"
pe3_want="0.12.0 6.1.0"
pe3_version() {
  "$pe3_venv/bin/python" -c 'import etcd3, tenacity, importlib.metadata as m; print(etcd3.__version__, m.version("tenacity"))' 2>/dev/null
}

if [ "$(pe3_version)" = "$pe3_want" ]; then
  say "python-etcd3 adapter (PyPI): $pe3_venv imports etcd3 0.12.0 with tenacity 6.1.0"
else
  say "python-etcd3 adapter (PyPI): making $pe3_venv with etcd3==0.12.0 from PyPI"
  pe3_start=$SECONDS
  rm -rf "$pe3_venv"
  mkdir -p "$(dirname "$pe3_venv")"
  if ! /usr/bin/python3 -m venv "$pe3_venv" >/dev/null 2>&1; then
    rm -rf "$pe3_venv"
    apt_install python3-venv
    /usr/bin/python3 -m venv "$pe3_venv" || die "python-etcd3: python3 -m venv $pe3_venv failed"
  fi
  "$pe3_venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "etcd3==0.12.0" "tenacity==6.1.0" "protobuf<4" ||
    die "python-etcd3: pip install etcd3==0.12.0 tenacity==6.1.0 protobuf<4 failed"
  [ "$(pe3_version)" = "$pe3_want" ] ||
    die "python-etcd3: $pe3_venv still does not import etcd3 0.12.0 with tenacity 6.1.0"
  say "python-etcd3 adapter (PyPI): $pe3_venv ready ($((SECONDS - pe3_start)) s)"
fi

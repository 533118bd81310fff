# Sourced by ci/bootstrap.sh (which defines say, die, apt_install): the python-etcd3 adapter
# runs under Debian's /usr/bin/python3 and needs its python3-etcd3 there. The check is the
# import itself, by that interpreter: a pyenv python3 on PATH does not see Debian's
# python3-* packages, and a package listed by dpkg may still fail to import.
python_etcd3_version() {
  /usr/bin/python3 -c 'import etcd3; print(etcd3.__version__)' 2>/dev/null
}
if v="$(python_etcd3_version)"; then
  say "python-etcd3 adapter: /usr/bin/python3 imports etcd3 $v"
else
  say "python-etcd3 adapter: /usr/bin/python3 cannot import etcd3: Debian's python3-etcd3"
  [ -x /usr/bin/python3 ] || apt_install python3
  apt_install python3-etcd3
  v="$(python_etcd3_version)" || die "/usr/bin/python3 still cannot import etcd3 after apt-get install python3-etcd3"
  say "python-etcd3 adapter: /usr/bin/python3 imports etcd3 $v"
fi

# Sourced by ci/bootstrap.sh (which defines say, die, apt_install): the redis-py adapter
# runs under Debian's /usr/bin/python3 and needs its python3-redis there. The check is the
# import itself, by that interpreter: a pyenv python3 on PATH does not see Debian's
# python3-* packages, and a package listed by dpkg may still fail to import.
redis_py_version() {
  /usr/bin/python3 -c 'import redis; print(redis.__version__)' 2>/dev/null
}
if v="$(redis_py_version)"; then
  say "redis-py adapter: /usr/bin/python3 imports redis $v"
else
  say "redis-py adapter: /usr/bin/python3 cannot import redis: Debian's python3-redis"
  [ -x /usr/bin/python3 ] || apt_install python3
  apt_install python3-redis
  v="$(redis_py_version)" || die "/usr/bin/python3 still cannot import redis after apt-get install python3-redis"
  say "redis-py adapter: /usr/bin/python3 imports redis $v"
fi

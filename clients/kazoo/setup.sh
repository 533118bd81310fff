# Sourced by ci/bootstrap.sh (which defines say, die, apt_install): the kazoo adapter
# runs under Debian's /usr/bin/python3 and needs its python3-kazoo there. The check is the
# import itself, by that interpreter: a pyenv python3 on PATH does not see Debian's
# python3-* packages, and a package listed by dpkg may still fail to import.
kazoo_version() {
  /usr/bin/python3 -c 'import kazoo; print(kazoo.__version__)' 2>/dev/null
}
if v="$(kazoo_version)"; then
  say "kazoo adapter: /usr/bin/python3 imports kazoo $v"
else
  say "kazoo adapter: /usr/bin/python3 cannot import kazoo: Debian's python3-kazoo"
  [ -x /usr/bin/python3 ] || apt_install python3
  apt_install python3-kazoo
  v="$(kazoo_version)" || die "/usr/bin/python3 still cannot import kazoo after apt-get install python3-kazoo"
  say "kazoo adapter: /usr/bin/python3 imports kazoo $v"
fi

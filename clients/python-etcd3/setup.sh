# Sourced by ci/bootstrap.sh: the python-etcd3 adapter runs under Debian's /usr/bin/python3
# and needs python3-etcd3 there (checked by importing etcd3, installed when that fails).
debian_python_import "python-etcd3 adapter" etcd3 python3-etcd3

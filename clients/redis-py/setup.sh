# Sourced by ci/bootstrap.sh: the redis-py adapter runs under Debian's /usr/bin/python3
# and needs python3-redis there (checked by importing redis, installed when that fails).
debian_python_import "redis-py adapter" redis python3-redis

# Sourced by ci/bootstrap.sh: the kazoo adapter runs under Debian's /usr/bin/python3
# and needs python3-kazoo there (checked by importing kazoo, installed when that fails).
debian_python_import "kazoo adapter" kazoo python3-kazoo

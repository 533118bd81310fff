# etcd for fencecheck's docker backend. No registry is needed: fencecheck assembles
# the build context itself (see harness/src/images.rs) and builds this FROM scratch.
#
# rootfs/ holds the etcd binary at its path on the host (the run starts it by the
# path its backend-neutral member spec names) and, for a dynamically linked build
# (Debian's etcd 3.4), the ELF interpreter and every library `ldd` lists, at the
# same paths as on the host. The static etcd 3.5.1 needs nothing else.
FROM scratch
COPY rootfs/ /

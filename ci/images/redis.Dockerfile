# Redis for fencecheck's docker backend (`[lock] service = "redis"` or "redlock"),
# FROM scratch like the others: no registry, no base image. fencecheck assembles the
# build context itself (see harness/src/images/redis.rs): rootfs/ holds Debian's
# redis-server at /usr/bin/redis-server and every library `ldd` lists with the ELF
# interpreter, at their host paths. The run bind-mounts each instance's config
# (the process backend's, listening on every address of the container) and gives
# its path as the command; the instance's data directory is a volume at /data.
FROM scratch
COPY rootfs/ /
ENTRYPOINT ["/usr/bin/redis-server"]

# Redis for fencecheck's docker backend (`[lock] service = "redis"` or "redlock"),
# FROM scratch like the others: no registry, no base image. fencecheck assembles the
# build context itself (see harness/src/systems/redis/image.rs): rootfs/ holds
# Debian's redis-server at /usr/bin/redis-server and every library `ldd` lists with
# the ELF interpreter, at their host paths. The container's command is the
# member spec's (the program by its server name, then the instance's config,
# bind-mounted by the run, listening on every address of the container); its data
# directory is a volume at /data. No ENTRYPOINT: the member spec names the program.
FROM scratch
COPY rootfs/ /

# PostgreSQL 15 for fencecheck's docker backend (`[storage] kind = "postgres"`),
# FROM scratch: no registry, no base image. fencecheck assembles the build context
# itself (see harness/src/images/postgres.rs): rootfs/ holds Debian's postgres and
# initdb, the server modules a bare cluster loads, the share directory, UTC's
# zoneinfo, every library `ldd` lists with the ELF interpreter (all at their host
# paths), a `postgres` user (uid 999: PostgreSQL refuses to run as root) and a
# pg_hba.conf for clients coming in through the engine's bridge.
#
# Stage 1 makes the cluster with the process backend's initdb flags. initdb starts
# postgres through popen, hence /bin/sh (initdb/), in this stage only.
FROM scratch AS init
# Labelled like the images fencecheck builds, so `fencecheck clean --images` finds
# this stage's image too (the build option labels the last stage only).
LABEL fencecheck.image=postgres-initdb
COPY rootfs/ /
COPY initdb/ /
COPY --chown=999:999 home/ /var/lib/postgresql/
USER 999:999
ENV LC_ALL=C TZ=UTC
RUN ["/usr/lib/postgresql/15/bin/initdb", "-D", "/var/lib/postgresql/data", "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"]

# Stage 2, the image that runs: no shell. A run mounts a fresh volume on the data
# directory; the engine fills it from the image, so each run starts from this
# cluster, and a kill + start of the container recovers from what the volume has.
# The harness adds the settings (`-c name=value`) as the command.
FROM scratch
COPY rootfs/ /
COPY --from=init --chown=999:999 /var/lib/postgresql/ /var/lib/postgresql/
USER 999:999
ENV LC_ALL=C TZ=UTC
ENTRYPOINT ["/usr/lib/postgresql/15/bin/postgres", "-D", "/var/lib/postgresql/data", "-c", "hba_file=/etc/fencecheck/pg_hba.conf"]

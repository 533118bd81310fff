# ZooKeeper for fencecheck's docker backend, FROM scratch like the others: no
# registry, no base image. fencecheck assembles the build context itself (see
# harness/src/systems/zookeeper/image.rs): rootfs/ holds the host's JRE (java, its native
# libraries, the `modules` runtime image, conf/ and security files), the libraries
# `ldd` lists for them with the ELF interpreter, and Debian's ZooKeeper jars with
# every jar their manifests' Class-Path names, all at their host paths. The
# container's command is the member spec's java command line (the launcher at
# its real path under the JRE, since it finds its libraries relative to that; JVM
# flags, classpath, main class), with the member's config file last. No ENTRYPOINT:
# where the JRE lives depends on the host.
FROM scratch
COPY rootfs/ /

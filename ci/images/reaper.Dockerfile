# fencecheck's reaper (reaper/), built as a static binary like the storage
# (RUSTFLAGS="-C target-feature=+crt-static", target x86_64-unknown-linux-gnu) and
# run FROM scratch. fencecheck starts it first for every docker run, with the
# Docker socket mounted; it removes the run's containers, networks and volumes once
# the harness's connection to it drops.
FROM scratch
COPY fencecheck-reaper /fencecheck-reaper
ENTRYPOINT ["/fencecheck-reaper"]

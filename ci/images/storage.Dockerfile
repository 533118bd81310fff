# fencecheck's fencing storage service, built as a static binary
# (RUSTFLAGS="-C target-feature=+crt-static", target x86_64-unknown-linux-gnu;
# rustls only, no OpenSSL) and run FROM scratch. Its durable log goes to /out,
# where fencecheck bind-mounts the run directory.
FROM scratch
COPY fencecheck-storage /fencecheck-storage
ENTRYPOINT ["/fencecheck-storage"]

# fencecheck's in-pod fault agent (agent/) as the entry point, running fencecheck's
# storage service: both static binaries (RUSTFLAGS="-C target-feature=+crt-static",
# target x86_64-unknown-linux-gnu), FROM scratch. The pod's `args` are the
# storage's flags. The harness drives the agent through the API server's exec:
# `/fencecheck-agent ctl stop|cont|kill|start|state` (socket /fencecheck-agent.sock).
FROM scratch
COPY fencecheck-agent /fencecheck-agent
COPY fencecheck-storage /fencecheck-storage
ENTRYPOINT ["/fencecheck-agent", "run", "--", "/fencecheck-storage"]

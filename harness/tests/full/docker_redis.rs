//! Redis and Redlock on the docker backend, for real: the `fencecheck` binary
//! builds its Redis image FROM scratch (Debian's redis-server and its libraries),
//! runs each instance as a member container with its config bind-mounted and its
//! data directory on a volume, kills an instance with `docker kill` and starts the
//! same container again; the verdicts are the process backend's, and nothing of
//! the run is left behind.
//!
//! Where no Docker engine answers, each test prints one line and returns; with
//! `FENCECHECK_REQUIRE_DOCKER=1` it fails instead (`common::docker`, as in `docker.rs`).

use crate::common;

use std::path::Path;

use common::docker::{docker_json, docker_or_skip, host_has, leftovers_of, run_docker};
use common::{explain, faults_of, fencing, n, serial};
use serde_json::Value;

/// A Docker engine, and the host's redis-server for the image to package? When not:
/// skip (one line), or fail when `FENCECHECK_REQUIRE_DOCKER=1` and there is no engine.
fn docker_and_redis(test: &str) -> bool {
    docker_or_skip(test) && host_has(test, "/usr/bin/redis-server", "redis-server")
}

/// Runs a shipped scenario with `--backend docker`; checks what every Redis run on
/// docker must show, and that nothing of it is left.
fn run_redis(name: &str, service: &str, members: usize, out: &Path) -> Value {
    let (o, r) = run_docker(name, &[], out, true);
    assert_eq!(o.status.code(), Some(0), "{name}: {}", explain(&o));
    assert_eq!(r["passed"], true, "{name}: {}", explain(&o));
    assert_eq!(r["run"]["backend"], "docker", "{name}");
    assert_eq!(r["run"]["service"], service, "{name}");
    // Every grant a worker was told about was observed at the service.
    assert_eq!(r["problems"], serde_json::json!([]), "{name}");
    let j = docker_json(out);
    let tag = j["images"][service]["tag"].as_str().expect("image tag");
    assert!(tag.starts_with("fencecheck/redis:7.0"), "{j}");
    assert_eq!(j["members"].as_array().map(Vec::len), Some(members), "{j}");
    for i in 0..members {
        let log = std::fs::read_to_string(out.join(format!("redis-{i}.log")))
            .unwrap_or_else(|e| panic!("redis-{i}.log: {e}"));
        assert!(log.contains("Ready to accept connections"), "{log}");
    }
    let left = leftovers_of(j["run_id"].as_str().expect("run_id"));
    assert!(left.is_empty(), "{name} left behind: {left:#?}");
    r
}

#[test]
fn redis_pause_on_docker_is_fenced_by_the_counter() {
    if !docker_and_redis("redis_pause_on_docker") {
        return;
    }
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let r = run_redis("redis-pause", "redis", 1, &dir.path().join("run"));
    let (accepted, rejected, fresh) = fencing(&r);
    assert_eq!(accepted, 0, "{}", r["checks"]["fencing"]);
    assert!(rejected >= 1, "{}", r["checks"]["fencing"]);
    assert_eq!(fresh, 0, "{}", r["checks"]["fencing"]);
    assert_eq!(n(&r["checks"]["counter"]["lost"]), 0);
    assert_eq!(r["run"]["persistence"], "none");
}

/// An instance killed (`docker kill`) and started again as the same container:
/// with `appendfsync always` its AOF on the volume brings the counter back; with
/// no persistence the counter starts over and fresh holders are refused.
#[test]
fn redis_restarts_on_docker_keep_or_lose_the_counter_by_persistence() {
    if !docker_and_redis("redis_restarts_on_docker") {
        return;
    }
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("aof-always");
    let r = run_redis("redis-restart-aof-always", "redis", 1, &out);
    let kills = faults_of(&r, "kill");
    assert!(!kills.is_empty(), "no kill recorded");
    for k in &kills {
        assert_eq!(k["outcome"], "ok", "{k}");
        let killed = &k["detail"]["killed"][0]["done"];
        assert_eq!(killed["action"], "docker kill", "{k}");
        let restarted = &k["detail"]["restarted"][0]["done"];
        assert_eq!(restarted["action"], "docker start", "{k}");
        assert_eq!(restarted["container"], killed["container"], "{k}");
    }
    let log = std::fs::read_to_string(out.join("redis-0.log")).expect("redis-0.log");
    assert!(
        log.matches("on AOF loading").count() >= kills.len(),
        "the restarted instance did not read its AOF:\n{log}"
    );
    assert_eq!(fencing(&r), (0, 0, 0), "{}", r["checks"]["fencing"]);
    assert_eq!(n(&r["checks"]["counter"]["lost"]), 0);

    let r = run_redis(
        "redis-restart-no-aof",
        "redis",
        1,
        &dir.path().join("no-aof"),
    );
    let (_, _, fresh) = fencing(&r);
    assert!(fresh >= 1, "{}", r["checks"]["fencing"]);
    let t = &r["checks"]["token"];
    assert_eq!(t["valid"], false, "{t}");
    assert!(n(&t["regressions"]) >= 1, "{t}");
}

#[test]
fn redlock_pause_without_token_on_docker_accepts_stale_writes() {
    if !docker_and_redis("redlock_pause_on_docker") {
        return;
    }
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let r = run_redis(
        "redlock-pause-no-token",
        "redlock",
        3,
        &dir.path().join("run"),
    );
    let (accepted, _, _) = fencing(&r);
    assert!(accepted >= 1, "{}", r["checks"]["fencing"]);
    assert!(
        n(&r["checks"]["mutex"]["overlaps"]) >= 1,
        "{}",
        r["checks"]["mutex"]
    );
}

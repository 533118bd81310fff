//! fencecheck's own storage killed and restarted on the docker backend: `docker
//! kill` of the storage container and `docker start` of the same container, which
//! rebuilds its state from `storage.jsonl` in the bind-mounted run directory,
//! written with the scenario's durability (`fsync`). Nothing acknowledged is lost,
//! and nothing of the run is left behind.
//!
//! Where no Docker engine answers, the test prints one line and returns; with
//! `FENCECHECK_REQUIRE_DOCKER=1` it fails instead (`common::docker`, as in `docker.rs`).

use crate::common;

use common::docker::{assert_run_left_nothing, docker_or_skip, run_docker};
use common::{explain, faults_of, n, serial};

#[test]
fn storage_crash_on_docker_loses_nothing_acknowledged() {
    if !docker_or_skip("storage_crash_on_docker") {
        return;
    }
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("storage-crash");
    let (o, r) = run_docker("storage-crash", &[], &out, true);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    assert_eq!(r["passed"], true, "{}", explain(&o));
    assert_eq!(r["run"]["backend"], "docker");
    let kills = faults_of(&r, "kill");
    assert_eq!(kills.len(), 2, "{kills:?}");
    for k in &kills {
        assert_eq!(k["outcome"], "ok", "{k}");
        assert_eq!(
            k["detail"]["killed"][0]["done"]["action"], "docker kill",
            "{k}"
        );
        let restarted = &k["detail"]["restarted"][0]["done"];
        assert_eq!(restarted["action"], "docker start", "{k}");
    }
    // Started with the scenario's durability, and rebuilt from its log each time.
    let log = std::fs::read_to_string(out.join("storage.log")).expect("storage.log");
    assert!(log.contains("Fsync"), "{log}");
    assert_eq!(log.matches("state rebuilt from").count(), 2, "{log}");
    let c = &r["checks"]["counter"];
    assert_eq!(c["valid"], true, "{c}");
    assert_eq!(n(&c["lost"]), 0, "{c}");
    let key = &c["keys"][0];
    assert_eq!(n(&key["final_value"]), n(&key["applied"]), "{key}");
    assert!(n(&key["acknowledged"]) > 10, "too little traffic: {key}");
    assert_run_left_nothing(&out, "after the run");
}

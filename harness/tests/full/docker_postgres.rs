//! PostgreSQL as the fenced resource on the docker backend, for real: the
//! `fencecheck` binary builds its PostgreSQL image FROM scratch (Debian's server,
//! a cluster `initdb` made at build time), runs it as the storage container with
//! its data directory on a volume, freezes it with `docker pause`, crashes it with
//! `docker kill` and recovers it with `docker start`; the verdicts are the process
//! backend's, and nothing of the run is left behind.
//!
//! Where no Docker engine answers, each test prints one line and returns; with
//! `FENCECHECK_REQUIRE_DOCKER=1` it fails instead (`common::docker`, as in `docker.rs`).

use crate::common;

use std::path::Path;

use common::docker::{assert_run_left_nothing, docker_json, docker_or_skip, host_has, run_docker};
use common::{explain, faults_of, n, serial};
use serde_json::Value;

/// A Docker engine, and the host's PostgreSQL 15 for the image to package? When not:
/// skip (one line), or fail when `FENCECHECK_REQUIRE_DOCKER=1` and there is no engine.
fn docker_and_postgres(test: &str) -> bool {
    docker_or_skip(test) && host_has(test, "/usr/lib/postgresql/15/bin/postgres", "PostgreSQL 15")
}

/// The run's PostgreSQL container, its data volume and its image, from
/// `docker.json`.
fn postgres_record(run_dir: &Path) -> Value {
    let j = docker_json(run_dir);
    let storage = j["storage"].as_str().expect("storage").to_string();
    assert!(storage.ends_with("-postgres"), "{j}");
    let volume = format!("{storage}-data");
    assert!(
        j["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .any(|v| v == volume.as_str()),
        "no data volume {volume}: {j}"
    );
    let tag = j["images"]["postgres"]["tag"].as_str().expect("image");
    assert!(tag.starts_with("fencecheck/postgres:15."), "{tag}");
    j
}

#[test]
fn pg_pause_on_docker_rejects_every_stale_write() {
    if !docker_and_postgres("pg_pause_on_docker") {
        return;
    }
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("pg-pause");
    let (o, r) = run_docker("pg-pause", &[], &out, true);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    assert_eq!(r["passed"], true, "{}", explain(&o));
    assert_eq!(r["run"]["backend"], "docker");
    postgres_record(&out);
    let f = &r["checks"]["fencing"];
    assert_eq!(n(&f["stale_accepted"]), 0, "{f}");
    assert!(n(&f["stale_rejected"]) >= 1, "{f}");
    assert_eq!(n(&r["checks"]["counter"]["lost"]), 0, "{}", r["checks"]);
    // The log table was exported from the container; the server's output saved.
    let log = std::fs::read_to_string(out.join("storage.jsonl")).expect("storage.jsonl");
    assert!(log.lines().count() > 50, "too little traffic");
    let pglog = std::fs::read_to_string(out.join("postgres.log")).expect("postgres.log");
    assert!(pglog.contains("ready to accept connections"), "{pglog}");
    // The database was frozen as a whole container, and thawed.
    let pauses = faults_of(&r, "pause");
    let db = pauses
        .iter()
        .find(|p| p["target"] == "storage")
        .expect("a pause of the database");
    assert_eq!(db["outcome"], "ok", "{db}");
    assert_eq!(db["detail"]["done"][0]["action"], "docker pause", "{db}");
    assert_run_left_nothing(&out, "after the run");
}

#[test]
fn pg_crash_on_docker_loses_nothing_acknowledged() {
    if !docker_and_postgres("pg_crash_on_docker") {
        return;
    }
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("pg-crash");
    let (o, r) = run_docker("pg-crash", &[], &out, true);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    assert_eq!(r["passed"], true, "{}", explain(&o));
    assert_eq!(r["run"]["backend"], "docker");
    let rec = postgres_record(&out);
    // Two crashes: the container SIGKILLed, then started again as the same
    // container on the same volume.
    let kills = faults_of(&r, "kill");
    assert_eq!(kills.len(), 2, "{kills:?}");
    for k in &kills {
        assert_eq!(k["outcome"], "ok", "{k}");
        let killed = &k["detail"]["killed"][0]["done"];
        assert_eq!(killed["action"], "docker kill", "{k}");
        assert_eq!(killed["signal"], "SIGKILL", "{k}");
        assert_eq!(killed["container"], rec["storage"], "{k}");
        let restarted = &k["detail"]["restarted"][0]["done"];
        assert_eq!(restarted["action"], "docker start", "{k}");
        assert_eq!(restarted["container"], rec["storage"], "{k}");
    }
    // Each start recovered from the WAL on the volume.
    let pglog = std::fs::read_to_string(out.join("postgres.log")).expect("postgres.log");
    assert_eq!(
        pglog.matches("automatic recovery in progress").count(),
        2,
        "{pglog}"
    );
    let c = &r["checks"]["counter"];
    assert_eq!(c["valid"], true, "{c}");
    assert_eq!(n(&c["lost"]), 0, "{c}");
    let key = &c["keys"][0];
    assert_eq!(n(&key["final_value"]), n(&key["applied"]), "{key}");
    assert!(n(&key["final_value"]) >= n(&key["acknowledged"]), "{key}");
    assert!(n(&key["acknowledged"]) > 10, "too little traffic: {key}");
    assert_run_left_nothing(&out, "after the run");
}

//! PostgreSQL as the fenced resource on the docker backend, for real: the
//! `fencecheck` binary builds its PostgreSQL image FROM scratch (Debian's server,
//! a cluster `initdb` made at build time), runs it as the storage container with
//! its data directory on a volume, freezes it with `docker pause`, crashes it with
//! `docker kill` and recovers it with `docker start`; the verdicts are the process
//! backend's, and nothing of the run is left behind.
//!
//! Where no Docker engine answers, each test prints one line and returns; with
//! `FENCECHECK_REQUIRE_DOCKER=1` it fails instead (as in `docker.rs`, whose helpers
//! are not shared: the minimum is copied here).

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::{bin, explain, faults_of, n, serial};
use serde_json::Value;

/// Does a Docker engine answer? When not: skip (one line), or fail when
/// `FENCECHECK_REQUIRE_DOCKER=1`.
fn docker_or_skip(test: &str) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let answer = rt.block_on(fencecheck::backend::docker::engine(Duration::from_secs(5)));
    if let Err(e) = answer {
        if std::env::var("FENCECHECK_REQUIRE_DOCKER").as_deref() == Ok("1") {
            panic!("{test}: FENCECHECK_REQUIRE_DOCKER=1 but no Docker engine answers: {e:#}");
        }
        let _ = writeln!(
            std::io::stderr(),
            "{test}: skipped: no Docker engine answers ({e:#})"
        );
        return false;
    }
    if !Path::new("/usr/lib/postgresql/15/bin/postgres").exists() {
        // The image packages the host's PostgreSQL 15 (ci/bootstrap.sh installs it).
        let _ = writeln!(
            std::io::stderr(),
            "{test}: skipped: no PostgreSQL 15 on this machine"
        );
        return false;
    }
    true
}

fn run_docker(name: &str, out: &Path) -> (Output, Value) {
    let output = bin()
        .args(["scenario", &format!("scenarios/{name}.toml")])
        .args(["--backend", "docker", "--quiet", "--out"])
        .arg(out)
        .output()
        .expect("run fencecheck");
    (output, common::read_report(out))
}

/// Containers, networks and volumes of one run, as the docker CLI lists them (only
/// this run's label: other harnesses may be running on the same engine).
fn leftovers_of(run_dir: &Path) -> Vec<String> {
    let t = std::fs::read_to_string(run_dir.join("docker.json")).expect("docker.json");
    let j: Value = serde_json::from_str(&t).expect("docker.json is JSON");
    let id = j["run_id"].as_str().expect("run_id");
    let mut out = Vec::new();
    for (what, args, format) in [
        ("container", ["ps", "-a"], "{{.Names}}"),
        ("network", ["network", "ls"], "{{.Name}}"),
        ("volume", ["volume", "ls"], "{{.Name}}"),
    ] {
        let o = Command::new("docker")
            .args(args)
            .args(["--filter", &format!("label=fencecheck.run={id}")])
            .args(["--format", format])
            .output()
            .expect("docker CLI");
        assert!(o.status.success(), "docker {args:?}: {o:?}");
        out.extend(
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| format!("{what} {l}")),
        );
    }
    out
}

/// The run's PostgreSQL container, its data volume and its image, from
/// `docker.json`.
fn postgres_record(run_dir: &Path) -> Value {
    let t = std::fs::read_to_string(run_dir.join("docker.json")).expect("docker.json");
    let j: Value = serde_json::from_str(&t).expect("docker.json is JSON");
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
    if !docker_or_skip("pg_pause_on_docker") {
        return;
    }
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("pg-pause");
    let (o, r) = run_docker("pg-pause", &out);
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
    let left = leftovers_of(&out);
    assert!(left.is_empty(), "left behind: {left:#?}");
}

#[test]
fn pg_crash_on_docker_loses_nothing_acknowledged() {
    if !docker_or_skip("pg_crash_on_docker") {
        return;
    }
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("pg-crash");
    let (o, r) = run_docker("pg-crash", &out);
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
    let left = leftovers_of(&out);
    assert!(left.is_empty(), "left behind: {left:#?}");
}

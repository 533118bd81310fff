//! fencecheck's own storage killed and restarted on the docker backend: `docker
//! kill` of the storage container and `docker start` of the same container, which
//! rebuilds its state from `storage.jsonl` in the bind-mounted run directory,
//! written with the scenario's durability (`fsync`). Nothing acknowledged is lost,
//! and nothing of the run is left behind.
//!
//! Where no Docker engine answers, the test prints one line and returns; with
//! `FENCECHECK_REQUIRE_DOCKER=1` it fails instead (as in `docker.rs`).

mod common;

use std::io::Write;
use std::path::Path;
use std::process::Command;
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
    let Err(e) = answer else {
        return true;
    };
    if std::env::var("FENCECHECK_REQUIRE_DOCKER").as_deref() == Ok("1") {
        panic!("{test}: FENCECHECK_REQUIRE_DOCKER=1 but no Docker engine answers: {e:#}");
    }
    let _ = writeln!(
        std::io::stderr(),
        "{test}: skipped: no Docker engine answers ({e:#})"
    );
    false
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

#[test]
fn storage_crash_on_docker_loses_nothing_acknowledged() {
    if !docker_or_skip("storage_crash_on_docker") {
        return;
    }
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("storage-crash");
    let o = bin()
        .args(["scenario", "scenarios/storage-crash.toml"])
        .args(["--backend", "docker", "--quiet", "--out"])
        .arg(&out)
        .output()
        .expect("run fencecheck");
    let r = common::read_report(&out);
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
    let left = leftovers_of(&out);
    assert!(left.is_empty(), "left behind: {left:#?}");
}

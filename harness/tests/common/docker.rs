//! Shared by the docker-backend test files: whether there is an engine (and what an
//! image packages from the host) to test with, running a scenario on the docker
//! backend, and what a run left on the engine.
//!
//! Where no Docker engine answers, a test prints one line and returns; with
//! `FENCECHECK_REQUIRE_DOCKER=1` it fails instead.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

use super::{bin, read_report};

/// Does a Docker engine answer? When not: skip (one line), or fail when
/// `FENCECHECK_REQUIRE_DOCKER=1`.
pub fn docker_or_skip(test: &str) -> bool {
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
    skip(test, &format!("no Docker engine answers ({e:#})"));
    false
}

/// Is `path` on this machine? An image packages the host's server (ci/bootstrap.sh
/// installs it); without it there is nothing to package, and the test skips.
pub fn host_has(test: &str, path: &str, what: &str) -> bool {
    if Path::new(path).exists() {
        return true;
    }
    skip(test, &format!("no {what} on this machine"));
    false
}

fn skip(test: &str, why: &str) {
    // Straight to the file descriptor: shown even when the test harness captures.
    let _ = writeln!(std::io::stderr(), "{test}: skipped: {why}");
}

/// Runs `scenarios/NAME.toml` with `--backend docker` into `out`; returns the
/// process output and `report.json` (null when none was written).
pub fn run_docker(name: &str, extra: &[&str], out: &Path, quiet: bool) -> (Output, Value) {
    let mut c = bin();
    c.args(["scenario", &format!("scenarios/{name}.toml")])
        .args(["--backend", "docker", "--out"])
        .arg(out)
        .args(extra);
    if quiet {
        c.arg("--quiet");
    }
    let output = c.output().expect("run fencecheck");
    (output, read_report(out))
}

/// The run's `docker.json`: its id, containers, volumes and images.
pub fn docker_json(run_dir: &Path) -> Value {
    let t = std::fs::read_to_string(run_dir.join("docker.json")).expect("docker.json");
    serde_json::from_str(&t).expect("docker.json is JSON")
}

/// Containers, networks and volumes matching a label filter (`KEY` or `KEY=VALUE`),
/// as the docker CLI lists them.
pub fn leftovers_labelled(label: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (what, args, format) in [
        ("container", ["ps", "-a"], "{{.Names}}"),
        ("network", ["network", "ls"], "{{.Name}}"),
        ("volume", ["volume", "ls"], "{{.Name}}"),
    ] {
        let o = Command::new("docker")
            .args(args)
            .args(["--filter", &format!("label={label}"), "--format", format])
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

/// Containers, networks and volumes of one run (label `fencecheck.run=<id>`): only
/// this run's, since other harnesses may be running on the same engine.
pub fn leftovers_of(run_id: &str) -> Vec<String> {
    leftovers_labelled(&format!("fencecheck.run={run_id}"))
}

/// Asserts that nothing of the run in `run_dir` (its id from `docker.json`) is left
/// on the engine.
pub fn assert_run_left_nothing(run_dir: &Path, when: &str) {
    let j = docker_json(run_dir);
    let left = leftovers_of(j["run_id"].as_str().expect("run_id in docker.json"));
    assert!(left.is_empty(), "left behind {when}: {left:#?}");
}

//! Confirmed faults, end to end on the process backend: every pause of the
//! shipped pause scenario seen stopped; a pause that cannot take effect (its
//! worker has already exited) reported unconfirmed, and the run INCONCLUSIVE
//! with exit 1. Real etcd, real workers, real signals; the report is read as
//! the typed `Report`.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{bin, explain, processes_mentioning, repo_root, run_scenario, serial};
use fencecheck_reports::{EffectStatus, FaultCount, Report};

fn report(out: &Path) -> Report {
    let path = out.join("report.json");
    Report::read_json(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn pauses(r: &Report) -> FaultCount {
    r.fault_counts
        .iter()
        .find(|c| c.kind == "pause")
        .cloned()
        .unwrap_or_else(|| panic!("no pause tally: {:?}", r.fault_counts))
}

#[test]
fn every_pause_of_the_pause_scenario_is_confirmed() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, _) = run_scenario("pause", &["--duration", "14s"], &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    let r = report(&out);
    let p = pauses(&r);
    assert!(p.injected >= 1, "{p:?}");
    assert_eq!(p.confirmed, p.injected, "{p:?}");
    assert_eq!(p.planned, p.injected + p.skipped, "{p:?}");
    assert_eq!(p.unconfirmed, 0, "{p:?}");
    assert!(r.inconclusive.is_none());
    for w in r.faults.iter().filter(|w| w.outcome == "ok") {
        let e = w.effect.as_ref().expect("every window has its effect");
        assert_eq!(e.status, EffectStatus::Confirmed, "{w:?}");
        assert!(e.how.contains("seen stopped (state T"), "{}", e.how);
    }
    let stdout = String::from_utf8_lossy(&o.stdout);
    let line = format!(
        "faults: pause {} planned, {} injected, {} confirmed, {} skipped",
        p.planned, p.injected, p.confirmed, p.skipped
    );
    assert!(stdout.contains(&line), "{line:?} not in:\n{stdout}");
}

#[test]
fn a_pause_of_a_worker_that_has_exited_is_unconfirmed_and_the_run_inconclusive() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let scenario = repo_root().join("harness/tests/data/pause-exited-worker.toml");
    let child = bin()
        .arg("scenario")
        .arg(&scenario)
        .args(["--quiet", "--backend", "process", "--out"])
        .arg(&out)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run fencecheck");
    // Kill worker 1 as soon as it exists, long before the pause at 4 s.
    let needle = out.join("worker-1.jsonl").display().to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    let pid = loop {
        if let Some((pid, _, _)) = processes_mentioning(&needle).into_iter().next() {
            break pid;
        }
        assert!(
            Instant::now() < deadline,
            "worker 1 never started within 120 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill worker 1");
    let o = child.wait_with_output().expect("fencecheck");
    assert_eq!(o.status.code(), Some(1), "{}", explain(&o));
    let r = report(&out);
    let p = pauses(&r);
    assert_eq!(
        (p.planned, p.injected, p.confirmed, p.unconfirmed, p.skipped),
        (1, 1, 0, 1, 0),
        "{p:?}"
    );
    let why = &p.reasons[0];
    assert_eq!(why.status, EffectStatus::Unconfirmed);
    assert!(
        why.reason.contains(&format!("pid {pid} had exited")),
        "{why:?}"
    );
    assert!(!r.passed);
    assert!(r.incomplete.is_none());
    let inconclusive = r.inconclusive.as_deref().expect("inconclusive");
    assert!(
        inconclusive.starts_with("no fault took effect (1 injected, 0 confirmed"),
        "{inconclusive}"
    );
    assert!(
        inconclusive.contains("stale_rejected >=1"),
        "{inconclusive}"
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    let first = stdout.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    assert!(
        first.starts_with("pause-exited-worker — INCONCLUSIVE: no fault took effect ("),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "faults: pause 1 planned, 1 injected, 0 confirmed (1 unconfirmed), 0 skipped"
        ),
        "{stdout}"
    );
}

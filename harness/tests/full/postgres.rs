//! PostgreSQL as the fenced resource, end to end on the process backend: a real
//! PostgreSQL 15 (initdb in the run directory, run as the `postgres` user), real
//! SIGSTOP/SIGKILL of its process group. The acceptance, scenario by
//! scenario.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// A run directory inside a temporary directory the `postgres` user can pass
/// through (tempdirs are 0700 and root's; fencecheck opens only the run directory
/// itself to it).
fn run_dir(tmp: &tempfile::TempDir) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o711)).expect("chmod");
    tmp.path().join("run")
}

/// No process left with its working directory in the run directory: PostgreSQL's
/// backends rename themselves ("postgres: checkpointer") but work in the data
/// directory, so this finds any the postmaster left behind.
fn assert_no_backend_left(out: &Path) {
    assert_nothing_left(out);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let left: Vec<String> = std::fs::read_dir("/proc")
            .expect("/proc")
            .filter_map(|e| e.ok())
            .filter_map(|e| std::fs::read_link(e.path().join("cwd")).ok())
            .filter(|cwd| cwd.starts_with(out))
            .map(|p| p.display().to_string())
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "PostgreSQL processes left behind: {left:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn run(name: &str) -> (tempfile::TempDir, PathBuf, Value) {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = run_dir(&tmp);
    let (o, r) = run_scenario(name, &[], &out);
    assert_eq!(o.status.code(), Some(0), "{name}: {}", explain(&o));
    assert_eq!(r["passed"], true, "{name}: {}", explain(&o));
    assert_no_backend_left(&out);
    (tmp, out, r)
}

fn fencing(r: &Value) -> (u64, u64) {
    let f = &r["checks"]["fencing"];
    (n(&f["stale_accepted"]), n(&f["stale_rejected"]))
}

#[test]
fn pg_pause_rejects_every_stale_write() {
    let _g = serial();
    let (_t, out, r) = run("pg-pause");
    let (acc, rej) = fencing(&r);
    assert_eq!(acc, 0, "{}", r["checks"]["fencing"]);
    assert!(rej >= 1, "{}", r["checks"]["fencing"]);
    assert_eq!(n(&r["checks"]["counter"]["lost"]), 0);
    // The log table was exported: every checker read it as storage.jsonl.
    let log = std::fs::read_to_string(out.join("storage.jsonl")).expect("storage.jsonl");
    assert!(log.lines().count() > 50, "too little traffic");
    // The database was frozen as a whole (its process group) and continued.
    let pauses = faults_of(&r, "pause");
    let db = pauses
        .iter()
        .find(|p| p["target"] == "storage")
        .expect("a pause of the database");
    assert_eq!(db["outcome"], "ok", "{db}");
}

#[test]
fn pg_no_fencing_accepts_stale_writes() {
    let _g = serial();
    let (_t, _out, r) = run("pg-no-fencing");
    let (acc, _) = fencing(&r);
    assert!(acc >= 1, "{}", r["checks"]["fencing"]);
}

#[test]
fn pg_check_then_write_is_caught_at_read_committed_and_repaired_by_serializable() {
    let _g = serial();
    let (_t, _out, r) = run("pg-check-then-write");
    let (acc, _) = fencing(&r);
    let lost = n(&r["checks"]["counter"]["lost"]);
    assert!(
        acc >= 1 || lost >= 1,
        "the mistake went unseen: {}",
        r["checks"]
    );

    let (_t, out, r) = run("pg-check-then-write-serializable");
    assert_eq!(fencing(&r).0, 0, "{}", r["checks"]["fencing"]);
    assert_eq!(n(&r["checks"]["counter"]["lost"]), 0);
    let retries = n(&r["stats"]["serialization_retries"]);
    assert!(retries >= 1, "no 40001 retry counted: {}", r["stats"]);
    // The same count is in the history, per call.
    let in_history: u64 = history(&out)
        .iter()
        .filter_map(|e| e["detail"]["retries"].as_u64())
        .sum();
    assert_eq!(in_history, retries);
}

/// The same mistake caught by one kind of pause alone: aimed at the holder's
/// read, ended when the harness sees the lock granted to another worker
/// (`until = "next-grant"`), so the woken write's check and update run beside
/// the new holder's first requests.
#[test]
fn pg_check_then_write_is_caught_by_a_pause_that_ends_on_the_next_grant() {
    let _g = serial();
    let (_t, _out, r) = run("pg-check-then-write-next-grant");
    let (acc, _) = fencing(&r);
    assert!(
        acc >= 1,
        "no stale write accepted: {}",
        r["checks"]["fencing"]
    );
    let pauses = faults_of(&r, "pause");
    assert!(!pauses.is_empty(), "no pause recorded");
    for p in &pauses {
        let d = &p["detail"];
        assert_eq!(p["outcome"], "ok", "{p}");
        assert_eq!(d["ended_by"], "next-grant", "{p}");
        let (paused, granted) = (&d["target"]["workers"][0], &d["grant"]);
        assert_eq!(granted["event"], "grant", "{p}");
        assert_eq!(
            granted["key"], paused["key"],
            "the paused holder's lock: {p}"
        );
        assert_ne!(granted["worker"], paused["worker"], "{p}");
        // It ended before its cap: at the grant, which came after the read it
        // was aimed at.
        let (read_ns, grant_ns) = (n(&d["aim"]["seen"]["time_ns"]), n(&granted["time_ns"]));
        assert!(grant_ns > read_ns, "{p}");
        let lasted = n(&p["end_ns"]).saturating_sub(n(&p["start_ns"]));
        assert!(lasted < n(&d["duration_ms"]) * 1_000_000, "{p}");
    }
}

#[test]
fn pg_crash_with_synchronous_commit_loses_nothing_acknowledged() {
    let _g = serial();
    let (_t, _out, r) = run("pg-crash");
    let kills = faults_of(&r, "kill");
    assert_eq!(kills.len(), 2, "{kills:?}");
    for k in &kills {
        assert_eq!(k["outcome"], "ok", "{k}");
        assert_eq!(
            k["detail"]["restarted"][0]["done"]["action"], "restart",
            "{k}"
        );
    }
    let c = &r["checks"]["counter"];
    assert_eq!(c["valid"], true, "{c}");
    assert_eq!(n(&c["lost"]), 0, "{c}");
    let key = &c["keys"][0];
    assert_eq!(n(&key["final_value"]), n(&key["applied"]), "{key}");
    assert!(n(&key["final_value"]) >= n(&key["acknowledged"]), "{key}");
}

#[test]
fn pg_crash_without_synchronous_commit_completes_and_reports_what_was_lost() {
    let _g = serial();
    let (_t, _out, r) = run("pg-crash-async");
    let c = &r["checks"]["counter"];
    let key = &c["keys"][0];
    // Whatever the crashes took: the final read is the log's, and every
    // acknowledged increment missing from it is counted as lost.
    assert_eq!(n(&key["final_value"]), n(&key["applied"]), "{key}");
    let missing = n(&key["acknowledged"]).saturating_sub(n(&key["final_value"]));
    assert_eq!(n(&c["lost"]), missing, "{c}");
    assert_eq!(c["valid"], missing == 0, "{c}");
}

#[test]
fn postgres_refusals_are_exit_2_with_file_and_line() {
    let tmp = tempfile::tempdir().expect("tmp");
    let cases = [
        (
            "name = \"x\"\n[storage]\nfencing = \"check-then-write\"\n",
            ":3:",
        ),
        (
            "name = \"x\"\n[storage]\nisolation = \"serializable\"\n",
            ":3:",
        ),
        (
            "name = \"x\"\n[storage]\nkind = \"postgres\"\ndurability = \"fsync\"\n",
            ":4:",
        ),
    ];
    for (i, (text, line)) in cases.iter().enumerate() {
        let path = tmp.path().join(format!("bad-{i}.toml"));
        std::fs::write(&path, text).expect("write");
        let o = bin()
            .args(["scenario", "--quiet", "--out"])
            .arg(tmp.path().join(format!("run-{i}")))
            .arg(&path)
            .output()
            .expect("run");
        assert_eq!(o.status.code(), Some(2), "case {i}: {}", explain(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&format!("bad-{i}.toml{line}")),
            "case {i}: {err}"
        );
    }
}

/// The `fencecheck-pg-*` directories under /tmp now.
fn outside_data_dirs() -> std::collections::BTreeSet<String> {
    std::fs::read_dir("/tmp")
        .expect("/tmp")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("fencecheck-pg-"))
        .collect()
}

/// `--out` under a fresh `mktemp -d` (0700, root's: the postgres user cannot pass
/// through it): the data directory goes under /tmp behind a `pg.data` link, the
/// run passes as it does in a reachable directory, and neither outlives the run.
#[test]
fn pg_pause_runs_under_a_private_temp_dir() {
    use std::os::unix::fs::PermissionsExt;
    let before = outside_data_dirs();
    let tmp = tempfile::tempdir().expect("tmp");
    // What `mktemp -d` makes (tempfile leaves the umask's 0755).
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let out = tmp.path().join("run");
    let (o, r) = run_scenario("pg-pause", &[], &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    assert_eq!(r["passed"], true, "{}", explain(&o));
    let (accepted, rejected) = fencing(&r);
    assert_eq!(accepted, 0, "{}", explain(&o));
    assert!(
        rejected > 0,
        "the pause made no stale write: {}",
        explain(&o)
    );
    assert!(n(&r["checks"]["fencing"]["writes"]) > 0);
    assert!(
        std::fs::symlink_metadata(out.join("pg.data")).is_err(),
        "the pg.data link outlived the run: {:?} {}",
        std::fs::read_link(out.join("pg.data")),
        explain(&o)
    );
    let left: Vec<String> = outside_data_dirs().difference(&before).cloned().collect();
    assert!(
        left.is_empty(),
        "data directories left under /tmp: {left:?}"
    );
    assert_no_backend_left(&out);
}

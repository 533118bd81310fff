//! End to end, the real thing: the `fencecheck` binary starts a real etcd, the
//! storage and worker processes, injects real faults, and checks the history.
//!
//! The tests run one at a time (a shared lock): on a 2-core machine, concurrent
//! clusters would compete for CPU and stretch every timing the scenarios rely on.

use crate::common;

use common::*;
use serde_json::Value;

#[test]
fn pause_is_fenced_and_check_agrees_offline() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario("pause", &["--duration", "14s"], &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    let f = &r["checks"]["fencing"];
    assert_eq!(f["valid"], true);
    assert_eq!(n(&f["stale_accepted"]), 0);
    assert!(
        n(&f["stale_rejected"]) >= 1,
        "no stale write was even tried: {f}"
    );
    assert!(n(&r["checks"]["mutex"]["overlaps"]) >= 1);
    assert!(n(&r["stats"]["keepalive_lost"]) >= 1);
    assert!(
        n(&r["stats"]["writes_ok"]) > 10,
        "too little traffic: {}",
        r["stats"]
    );
    let faults = r["faults"].as_array().expect("faults");
    assert_eq!(faults.len(), 2, "pauses at 5s and 10s");
    assert!(faults.iter().all(|w| w["outcome"] == "ok"), "{faults:?}");
    assert_eq!(r["run"]["seed"], 7);
    assert!(r["run"]["etcd_version"]
        .as_str()
        .unwrap_or("")
        .starts_with("3.5."));

    // The history is merged, numbered, time-ordered.
    let hist = std::fs::read_to_string(out.join("history.jsonl")).expect("history");
    let times: Vec<u64> = hist
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).expect("event")["time_ns"]
                .as_u64()
                .expect("time")
        })
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(n(&r["stats"]["events"]), times.len() as u64);

    // Offline re-check reaches the same verdict, even with a torn line appended.
    use std::io::Write;
    let mut w = std::fs::OpenOptions::new()
        .append(true)
        .open(out.join("worker-0.jsonl"))
        .expect("open");
    w.write_all(b"{\"index\":0,\"time_ns\":1,\"proc")
        .expect("torn");
    drop(w);
    let c = bin().arg("check").arg(&out).output().expect("check");
    assert_eq!(c.status.code(), Some(0), "{}", explain(&c));
    let again: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).expect("report"))
            .expect("json");
    // Same verdicts and counterexamples (only the checkers' own timings differ).
    for c in ["fencing", "mutex", "counter"] {
        assert_eq!(again["checks"][c], r["checks"][c], "{c}");
    }
    let (a, b) = (
        &again["checks"]["linearizable"],
        &r["checks"]["linearizable"],
    );
    assert_eq!(
        (&a["valid"], &a["operations"]),
        (&b["valid"], &b["operations"])
    );
    assert_eq!(a["detail"]["partitions"], b["detail"]["partitions"]);
    assert!(
        again["problems"].to_string().contains("torn last line"),
        "{}",
        again["problems"]
    );
    assert_nothing_left(&out);
}

#[test]
fn no_fencing_finds_stale_writes_with_their_faults() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario("no-fencing", &["--duration", "14s"], &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    let f = &r["checks"]["fencing"];
    assert_eq!(f["valid"], false);
    assert!(n(&f["stale_accepted"]) >= 1);
    let v = &f["violations"][0];
    assert!(
        v["stale"]["revision"].as_i64() < v["newer"]["revision"].as_i64(),
        "{v}"
    );
    assert_ne!(v["stale"]["worker"], v["newer"]["worker"]);
    assert!(
        !v["faults"].as_array().expect("faults").is_empty(),
        "the pause that caused it is named: {v}"
    );
    // Overwritten increments are visible in the counter too.
    assert!(
        n(&r["checks"]["counter"]["lost"]) >= 1,
        "{}",
        r["checks"]["counter"]
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("PASS"));
    assert_nothing_left(&out);
}

#[test]
fn contrib_lock_shows_both_failures_of_lease_id_equality() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario("contrib-lock", &[], &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    let f = &r["checks"]["fencing"];
    assert!(n(&f["fresh_rejected"]) >= 1, "{f}");
    assert!(n(&f["stale_accepted"]) >= 1, "{f}");
    let kinds: Vec<&str> = r["faults"]
        .as_array()
        .expect("faults")
        .iter()
        .filter_map(|w| w["kind"].as_str())
        .collect();
    assert_eq!(kinds, vec!["pause"]);
    assert_nothing_left(&out);
}

#[test]
fn revoke_lease_on_etcd_3_4() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario("revoke", &["--duration", "10s", "--etcd", "3.4"], &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    assert!(
        r["run"]["etcd_version"]
            .as_str()
            .unwrap_or("")
            .starts_with("3.4."),
        "{}",
        r["run"]
    );
    let revokes = r["faults"].as_array().expect("faults");
    assert!(revokes.iter().any(|w| w["outcome"] == "ok"), "{revokes:?}");
    assert_eq!(r["checks"]["fencing"]["stale_accepted"], 0);
    assert_nothing_left(&out);
}

#[test]
fn bad_scenario_is_exit_2_with_file_and_line() {
    let dir = tempfile::tempdir().expect("tmp");
    let f = dir.path().join("bad.toml");
    std::fs::write(&f, "name = \"x\"\n[workload]\nworkers = 3\nwrokers = 4\n").expect("write");
    let o = bin().arg("scenario").arg(&f).output().expect("run");
    assert_eq!(o.status.code(), Some(2), "{}", explain(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("bad.toml:4") && err.contains("wrokers"),
        "{err}"
    );
    let o = bin().arg("validate").arg(&f).output().expect("validate");
    assert_eq!(o.status.code(), Some(2));
    let o = bin()
        .args(["check", "/nonexistent/run"])
        .output()
        .expect("check");
    assert_eq!(o.status.code(), Some(2), "{}", explain(&o));
}

#[test]
fn shipped_scenarios_validate() {
    // Every shipped folder, named as folders (validate expands them, as suite
    // does): the main one, the adapters', those that need a Kubernetes cluster,
    // the zoo of published bugs.
    let dirs = [
        "scenarios",
        "scenarios/clients",
        "scenarios/kubernetes",
        "scenarios/zoo",
    ];
    let files = dirs
        .iter()
        .flat_map(|d| std::fs::read_dir(repo_root().join(d)).expect("scenarios/"))
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "toml"))
        .count();
    assert!(files >= 5, "{files}");
    let o = bin().arg("validate").args(dirs).output().expect("validate");
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    let ok = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.contains(".toml: ok ("))
        .count();
    assert_eq!(ok, files, "one ok line per file: {}", explain(&o));
}

#[test]
fn ctrl_c_mid_pause_leaves_nothing_running_or_stopped() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let extra = ["--backend", "process", "--duration", "30s"];
    interrupt_mid_fault("pause", &extra, &out, |procs| {
        assert!(
            procs.iter().any(|(_, st, _)| st == "T"),
            "expected a stopped worker mid-pause: {procs:#?}"
        );
    });
    // What was recorded before the interrupt can still be checked.
    let c = bin().arg("check").arg(&out).output().expect("check");
    assert!(
        matches!(c.status.code(), Some(0) | Some(1)),
        "{}",
        explain(&c)
    );
}

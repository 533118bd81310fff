//! The zoo's ZooKeeper entries (`scenarios/zoo/`, docs/track-record.md): real,
//! published lock-library bugs, each run against the library version that has it
//! and against its twin (a usage that avoids it). kazoo 2.8.0 (Debian's
//! `python3-kazoo`): a `Lock` object kept across a session expiry waits for ever
//! on a free lock (python-zk/kazoo#282).

use crate::common;

use common::*;
use serde_json::Value;

/// The unmet expectations' names.
fn unmet(r: &Value) -> Vec<String> {
    r["expectations"]
        .as_array()
        .expect("expectations")
        .iter()
        .filter(|e| e["met"] == false)
        .filter_map(|e| e["name"].as_str().map(str::to_string))
        .collect()
}

/// How many times the workers' adapter logs say `marker`.
fn logged(run_dir: &std::path::Path, workers: u32, marker: &str) -> usize {
    (0..workers)
        .map(|w| {
            std::fs::read_to_string(run_dir.join(format!("worker-{w}.client.log")))
                .unwrap_or_default()
                .matches(marker)
                .count()
        })
        .sum()
}

/// kazoo#282: the expired holder does not release its kept `Lock` (kazoo said
/// LOST); that `Lock`'s next `acquire()` never returns although the lock is free.
/// The liveness check finds the wait, and the run fails on it alone.
#[test]
fn kazoo_282_kept_lock_waits_on_a_free_lock() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario("zoo/kazoo-282", &[], &out);
    assert_eq!(o.status.code(), Some(1), "{}", explain(&o));
    assert!(r["inconclusive"].is_null(), "{}", r["inconclusive"]);
    // The fault happened: an expiry, and kazoo said LOST during the hold.
    assert_eq!(
        fault_count(&r, "expire-session")["injected"],
        1,
        "{}",
        r["faults"]
    );
    assert!(
        logged(&out, 2, "kazoo said LOST during the hold") >= 1,
        "the adapter never skipped a release after LOST"
    );
    let l = &r["findings"]["liveness"];
    assert!(n(&l["stuck_waits"]) >= 1, "no stuck wait: {l}");
    // The stuck worker is the one whose hold kazoo said LOST in.
    let w = n(&l["examples"][0]["worker"]);
    let stuck_log = std::fs::read_to_string(out.join(format!("worker-{w}.client.log")))
        .expect("the stuck worker's client log");
    assert!(
        stuck_log.contains("kazoo said LOST during the hold"),
        "worker {w} waited on a free lock without a kept Lock: {l}"
    );
    assert_eq!(unmet(&r), ["stuck_waits"], "{}", r["expectations"]);
    assert_nothing_left(&out);
}

/// Its twin: a new `Lock` for every acquisition, the same expiry. No worker is
/// left waiting on a free lock; the run passes.
#[test]
fn kazoo_282_twin_with_a_fresh_lock_passes() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario("zoo/kazoo-282-fresh-lock", &[], &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    assert_eq!(
        fault_count(&r, "expire-session")["injected"],
        1,
        "{}",
        r["faults"]
    );
    let l = &r["findings"]["liveness"];
    assert_eq!(n(&l["stuck_waits"]), 0, "{l}");
    // The expired worker went on to hold the lock again.
    let x = &r["checks"]["exclusion"];
    assert!(n(&x["acquisitions"]) >= 4, "{x}");
    assert_eq!(n(&x["matched"]), n(&x["acquisitions"]), "{x}");
    assert_nothing_left(&out);
}

/// A bare name or `zoo/NAME` finds its file in the zoo's folder (the folder
/// itself is validated with the other shipped ones, `e2e::shipped_scenarios_validate`).
#[test]
fn zoo_scenarios_are_found_by_name() {
    for name in ["kazoo-282", "zoo/kazoo-282", "kazoo-282-fresh-lock"] {
        let o = bin().args(["validate", name]).output().expect("validate");
        assert_eq!(o.status.code(), Some(0), "{name}: {}", explain(&o));
        let stem = name.trim_start_matches("zoo/");
        assert!(
            String::from_utf8_lossy(&o.stdout).contains(&format!("{name}: ok ({stem}, ")),
            "{name}: {}",
            explain(&o)
        );
    }
}

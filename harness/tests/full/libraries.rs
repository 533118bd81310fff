//! Third-party lock libraries as their own READMEs use them — their own key
//! names and owner values, no renaming — end to end: the harness must observe
//! every grant the library made at the service, find the holder for every
//! planned fault, and agree with the adapter's own ground-truth log of the
//! critical sections it entered.

use std::collections::HashSet;
use std::path::Path;

use crate::common;

use common::*;
use serde_json::Value;

/// The lock ids the adapter logged entering a critical section with (its
/// `worker-<id>.client.log`): the line's last word after `marker`.
fn logged_entries(run_dir: &Path, marker: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(run_dir).expect("run dir").flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !name.ends_with(".client.log") {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).expect("client log");
        for l in text.lines().filter(|l| l.contains(marker)) {
            out.push(l.rsplit(' ').next().expect("a word").to_string());
        }
    }
    out
}

/// (storage key, id) of every grant the harness observed (`service.jsonl`).
fn observed(run_dir: &Path) -> HashSet<(String, String)> {
    std::fs::read_to_string(run_dir.join("service.jsonl"))
        .expect("service.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("observation"))
        .filter(|o| o["what"] == "created")
        .map(|o| {
            let s = |f: &str| o[f].as_str().expect("text").to_string();
            (s("key"), s("id"))
        })
        .collect()
}

/// Runs `scenarios/clients/<name>.toml` and checks what a run on a library's
/// own keys and values must show; `marker` is the adapter's log line for a
/// critical-section entry, ending in the lock's value.
fn library(name: &str, marker: &str) {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario(&format!("clients/{name}"), &[], &out);
    assert_eq!(o.status.code(), Some(0), "{name}: {}", explain(&o));
    assert_eq!(r["problems"], serde_json::json!([]), "{name}");

    // Every acquisition a client reported matches a grant the harness observed
    // at the service: the same storage key, the same value.
    let seen = observed(&out);
    let acquired: Vec<(String, String)> = history(&out)
        .iter()
        .filter(|e| e["f"] == "acquire" && e["type"] == "ok")
        .map(|e| {
            let value = e["detail"]["client"]["value"].as_str().expect("value");
            (
                e["key"].as_str().expect("key").to_string(),
                value.to_string(),
            )
        })
        .collect();
    assert!(
        acquired.len() >= 5,
        "{name}: only {} grants",
        acquired.len()
    );
    let unmatched: Vec<_> = acquired.iter().filter(|a| !seen.contains(a)).collect();
    assert!(
        unmatched.is_empty(),
        "{name}: never observed: {unmatched:?}"
    );

    // Every planned fault was injected on a holder and confirmed.
    let pauses = fault_count(&r, "pause");
    assert!(n(&pauses["planned"]) >= 2, "{name}: {pauses}");
    assert_eq!(pauses["injected"], pauses["planned"], "{name}: {pauses}");
    assert_eq!(pauses["confirmed"], pauses["injected"], "{name}: {pauses}");
    assert_eq!(n(&pauses["skipped"]), 0, "{name}: {pauses}");

    // The counts agree with the adapter's own log: every grant reported was an
    // entry the library logged, every entry it logged was observed at the
    // service, and only a worker's last acquisition, answered as the run ended,
    // may be logged without being recorded.
    let entries = logged_entries(&out, marker);
    let logged: HashSet<&str> = entries.iter().map(String::as_str).collect();
    assert_eq!(logged.len(), entries.len(), "{name}: an id entered twice");
    for (_, v) in &acquired {
        assert!(
            logged.contains(v.as_str()),
            "{name}: {v} reported, never logged"
        );
    }
    let ids: HashSet<&str> = seen.iter().map(|(_, id)| id.as_str()).collect();
    let unseen: Vec<_> = logged.iter().filter(|v| !ids.contains(*v)).collect();
    assert!(
        unseen.is_empty(),
        "{name}: entered, never observed: {unseen:?}"
    );
    let workers = 5;
    assert!(
        entries.len() >= acquired.len() && entries.len() <= acquired.len() + workers,
        "{name}: {} logged entries, {} recorded grants",
        entries.len(),
        acquired.len()
    );
    assert_nothing_left(&out);
}

/// python-redis-lock 4.0.1: key `lock:<name>`, a random id as the value.
#[test]
fn python_redis_lock_grants_are_observed_and_its_holder_found() {
    library("python-redis-lock-pause", "critical-section enter ");
}

/// redis-py's `Lock` on the owner value the worker hands it.
#[test]
fn redis_py_grants_are_observed_and_its_holder_found() {
    library("redis-py-pause", " with token ");
}

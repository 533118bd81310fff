//! Fenced resources end to end: fencecheck's own storage killed and restarted on
//! its log, and storage reached as the user's own service over HTTP (`kind =
//! "http"`). Real processes, real SIGKILL, real sockets.

mod common;

use std::collections::HashSet;
use std::path::Path;

use common::*;
use serde_json::Value;

fn jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).expect("a whole JSON line"))
        .collect()
}

#[test]
fn storage_killed_and_restarted_on_its_log_loses_no_acknowledged_write() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario("storage-crash", &[], &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));

    // Both kills happened, each with its restart, on different pids.
    let kills = faults_of(&r, "kill");
    assert_eq!(kills.len(), 2, "kills at 5s and 10s: {kills:?}");
    let mut pids = HashSet::new();
    for w in &kills {
        assert_eq!(w["outcome"], "ok", "{w}");
        assert_eq!(w["target"], "storage");
        assert_eq!(w["detail"]["killed"][0]["storage"], true, "{w}");
        assert_eq!(w["detail"]["killed"][0]["done"]["action"], "SIGKILL", "{w}");
        assert_eq!(
            w["detail"]["restarted"][0]["done"]["action"], "restart",
            "{w}"
        );
        pids.insert(w["detail"]["killed"][0]["done"]["pid"].clone());
        pids.insert(w["detail"]["restarted"][0]["done"]["pid"].clone());
    }
    assert_eq!(pids.len(), 3, "three storage processes in turn: {pids:?}");

    // The log runs on across the restarts: one sequence, nothing renumbered, so
    // every restarted storage rebuilt its state from it.
    let log = jsonl(&out.join("storage.jsonl"));
    let seqs: Vec<u64> = log.iter().map(|l| n(&l["seq"])).collect();
    assert_eq!(seqs, (1..=log.len() as u64).collect::<Vec<_>>());
    let last_kill_end = n(&kills[1]["end_ns"]);
    assert!(
        log.iter().any(|l| n(&l["time_ns"]) > last_kill_end),
        "no traffic after the last restart"
    );

    // Every write a worker was told was accepted is in the log as accepted.
    let accepted: HashSet<(String, u64)> = log
        .iter()
        .filter(|l| l["request"]["op"] == "write" && l["verdict"] == "accepted")
        .map(|l| {
            let client = l["request"]["client"].as_str().expect("client").to_string();
            (client, n(&l["request"]["request_id"]))
        })
        .collect();
    let acked: Vec<(String, u64)> = history(&out)
        .iter()
        .filter(|e| e["f"] == "write" && e["type"] == "ok")
        .map(|e| (e["process"].to_string(), n(&e["request_id"])))
        .collect();
    assert!(acked.len() > 20, "too little traffic: {}", acked.len());
    for a in &acked {
        assert!(
            accepted.contains(a),
            "acknowledged write {a:?} is not in the log"
        );
    }

    // And the final read, by a fresh client after the last restart, is every one.
    let c = &r["checks"]["counter"];
    assert_eq!(c["valid"], true, "{c}");
    assert_eq!(n(&c["lost"]), 0);
    let k = &c["keys"][0];
    assert_eq!(n(&k["final_value"]), n(&k["applied"]), "{k}");
    assert!(n(&k["final_value"]) >= n(&k["acknowledged"]), "{k}");
    assert_eq!(r["checks"]["fencing"]["valid"], true);
    assert_nothing_left(&out);
}

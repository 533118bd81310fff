//! Jepsen's 2020 etcd lock test, reproduced on a real etcd 3.4 member, real worker
//! processes and real SIGSTOPs of the member (`scenarios/jepsen-2020.toml`): the
//! naive worker — Jepsen's client, which trusts every grant and ignores session
//! loss — loses acknowledged increments; the careful worker with monotonic fencing
//! on the service's grant order (`jepsen-2020-careful.toml`) loses none.

use crate::common;

use std::collections::HashSet;

use common::*;
use serde_json::Value;

/// Runs a shipped scenario on etcd 3.4; the run directory lives as long as the
/// returned guard.
fn run_kept(name: &str, behaviour: &str) -> (tempfile::TempDir, Value) {
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario(name, &[], &out);
    assert_eq!(o.status.code(), Some(0), "{name}: {}", explain(&o));
    assert_eq!(r["run"]["service"], "etcd", "{name}");
    assert!(
        r["run"]["service_version"]
            .as_str()
            .unwrap_or("")
            .starts_with("3.4"),
        "{}",
        r["run"]
    );
    assert_eq!(r["run"]["behaviour"], behaviour, "{name}");
    // Every grant a worker recorded is one the harness saw etcd make (the naive
    // client's too, though it never checks them).
    assert_eq!(r["problems"], serde_json::json!([]), "{name}");
    assert_eq!(n(&r["checks"]["token"]["unverified"]), 0, "{name}");
    // Three pauses of the member, each ended (SIGCONT) by the nemesis.
    let pauses = faults_of(&r, "pause");
    assert_eq!(pauses.len(), 3, "{}", r["faults"]);
    assert!(
        pauses.iter().all(|p| p["outcome"] == "ok"),
        "{}",
        r["faults"]
    );
    // No orphan and nothing left stopped.
    assert_nothing_left(&out);
    (dir, r)
}

/// Acquisitions a naive worker was granted under a session it had already
/// recorded as lost: what the careful worker never does between holds.
fn grants_under_lost_sessions(run_dir: &std::path::Path) -> usize {
    let mut lost: HashSet<(u64, i64)> = HashSet::new();
    let mut count = 0;
    for e in history(run_dir) {
        let (Some(p), Some(s)) = (e["process"].as_u64(), e["session"].as_i64()) else {
            continue;
        };
        match (e["f"].as_str(), e["type"].as_str()) {
            (Some("keepalive-lost"), _) => {
                lost.insert((p, s));
            }
            (Some("acquire"), Some("ok")) if lost.contains(&(p, s)) => count += 1,
            _ => {}
        }
    }
    count
}

#[test]
fn naive_client_loses_acknowledged_increments() {
    let _g = serial();
    let (dir, r) = run_kept("jepsen-2020", "naive");
    let c = &r["checks"]["counter"];
    assert_eq!(c["valid"], false, "{c}");
    assert!(n(&c["acknowledged"]) >= 5, "{c}");
    assert!(n(&c["lost"]) >= 1, "{c}");
    let f = c["lost_fraction"].as_f64().expect("counter.lost_fraction");
    assert!(f > 0.0 && f <= 1.0, "{c}");
    // The per-key share agrees with the total on a one-key run.
    let k = c["keys"][0]["lost_fraction"]
        .as_f64()
        .expect("per-key share");
    assert!((k - f).abs() < 1e-9, "{c}");
    // Holds overlapped, and no fencing stopped the stale writes.
    assert!(n(&r["checks"]["mutex"]["overlaps"]) >= 1);
    assert!(n(&r["checks"]["fencing"]["stale_accepted"]) >= 1);
    // How: grants the service answered after their session had ended, which
    // the naive client trusted (it catches none).
    let g = &r["findings"]["grant_validity"];
    assert!(n(&g["after_session_end"]) >= 1, "{g}");
    assert_eq!(n(&g["caught_by_client"]), 0, "{g}");
    // And it went on acquiring under sessions it knew were lost.
    assert!(grants_under_lost_sessions(&dir.path().join("run")) >= 1);
    // Every grant it used after its session had ended is an unsafe window of the
    // granted-dead kind: unsafe from its first operation.
    let u = &r["findings"]["unsafe_window"];
    let used_late = n(&g["after_session_end"]) - n(&g["caught_by_client"]);
    assert!(n(&u["granted_dead"]) >= 1, "{u}");
    assert!(n(&u["granted_dead"]) <= used_late, "{u} vs {g}");
    let kinds: Vec<&str> = u["windows"]
        .as_array()
        .expect("windows")
        .iter()
        .filter_map(|w| w["kind"].as_str())
        .collect();
    assert!(kinds.contains(&"granted-dead"), "{u}");
    assert_eq!(
        kinds.iter().filter(|k| **k == "granted-dead").count() as u64,
        n(&u["granted_dead"]),
        "{u}"
    );
}

#[test]
fn careful_client_with_fencing_loses_none() {
    let _g = serial();
    let (_dir, r) = run_kept("jepsen-2020-careful", "careful");
    let c = &r["checks"]["counter"];
    assert_eq!(c["valid"], true, "{c}");
    assert!(n(&c["acknowledged"]) >= 5, "{c}");
    assert_eq!(n(&c["lost"]), 0, "{c}");
    assert_eq!(c["lost_fraction"].as_f64(), Some(0.0), "{c}");
    let (stale_accepted, _, _) = fencing(&r);
    assert_eq!(stale_accepted, 0, "{}", r["checks"]["fencing"]);
    // The member pauses did end sessions: the careful run was not a quiet one.
    assert!(n(&r["stats"]["keepalive_lost"]) >= 1, "{}", r["stats"]);
}

//! The shipped ZooKeeper scenarios end to end on the process backend: a real
//! ensemble (1 or 3 members, peer traffic through the peer proxies), real worker
//! processes on the Curator recipe, real faults, the verdicts the scenarios promise.

use crate::common;

use common::*;
use serde_json::Value;

/// Runs a shipped scenario; the run directory lives as long as the returned guard.
fn run_kept(name: &str) -> (tempfile::TempDir, Value) {
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario(name, &[], &out);
    assert_eq!(o.status.code(), Some(0), "{name}: {}", explain(&o));
    assert_eq!(r["run"]["service"], "zookeeper", "{name}");
    assert!(
        r["run"]["service_version"]
            .as_str()
            .unwrap_or("")
            .starts_with("3.8"),
        "{}",
        r["run"]
    );
    assert_nothing_left(&out);
    (dir, r)
}

fn run(name: &str) -> Value {
    run_kept(name).1
}

#[test]
fn zk_pause_is_fenced_by_czxid() {
    let _g = serial();
    let (_dir, r) = run_kept("zk-pause");
    let (accepted, rejected, _) = fencing(&r);
    assert_eq!(accepted, 0, "{}", r["checks"]["fencing"]);
    assert!(rejected >= 1, "{}", r["checks"]["fencing"]);
    assert!(n(&r["checks"]["mutex"]["overlaps"]) >= 1);
    assert_eq!(n(&r["checks"]["counter"]["lost"]), 0);
    // The grant is the lock znode's czxid: it grows with every grant.
    let mut grants: Vec<i64> = history_of(&r)
        .iter()
        .filter(|e| e["f"] == "acquire" && e["type"] == "ok")
        .filter_map(|e| e["grant"].as_i64())
        .collect();
    let all = grants.len();
    grants.sort_unstable();
    grants.dedup();
    assert_eq!(grants.len(), all, "two grants with one czxid");
    assert!(all >= 5, "too few grants: {all}");
    // The paused holders' sessions ended at the service; their late writes were refused.
    let u = &r["findings"]["unsafe_window"];
    assert!(n(&u["holds"]) >= 1, "{u}");
    assert_eq!(n(&u["writes_accepted"]), 0, "{u}");
}

fn history_of(r: &Value) -> Vec<Value> {
    history(std::path::Path::new(
        r["run"]["run_dir"].as_str().expect("run_dir"),
    ))
}

#[test]
fn zk_no_fencing_accepts_stale_writes() {
    let _g = serial();
    let r = run("zk-no-fencing");
    let (accepted, _, _) = fencing(&r);
    assert!(accepted >= 1, "{}", r["checks"]["fencing"]);
}

#[test]
fn zk_expire_session_and_partition_are_fenced() {
    let _g = serial();
    for name in ["zk-expire-session", "zk-partition"] {
        let r = run(name);
        let (accepted, rejected, _) = fencing(&r);
        assert_eq!(accepted, 0, "{name}: {}", r["checks"]["fencing"]);
        assert!(rejected >= 1, "{name}: {}", r["checks"]["fencing"]);
        let kinds: Vec<&str> = r["faults"]
            .as_array()
            .expect("faults")
            .iter()
            .filter(|w| w["outcome"] == "ok")
            .filter_map(|w| w["kind"].as_str())
            .collect();
        assert!(!kinds.is_empty(), "{name}: no fault was applied");
    }
}

#[test]
fn zk_leader_kill_on_three_members_loses_nothing() {
    let _g = serial();
    let r = run("zk-leader-kill");
    let (accepted, _, _) = fencing(&r);
    assert_eq!(accepted, 0);
    let c = &r["checks"]["counter"];
    assert_eq!(c["valid"], true, "final read = counter: {c}");
    assert_eq!(n(&c["lost"]), 0, "{c}");
    assert_eq!(r["run"]["etcd_members"], 3);
    let kills = faults_of(&r, "kill");
    assert!(
        leaders_killed(&kills) >= 1,
        "no leader was killed: {kills:?}"
    );
}

#[test]
fn zk_session_id_token_is_no_fencing_token() {
    let _g = serial();
    let r = run("zk-session-id-token");
    let (accepted, _, fresh) = fencing(&r);
    assert!(
        fresh >= 1 || accepted >= 1,
        "session ids fenced correctly?! {}",
        r["checks"]["fencing"]
    );
}

//! End to end with network faults and etcd clusters: real etcd members, real
//! proxies, real SIGKILLs. One test at a time (see e2e.rs for why).

use crate::common;

use common::*;
use serde_json::Value;

#[test]
fn partition_cuts_the_holder_off_and_fencing_rejects_its_late_writes() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario("partition", &[], &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    let parts = faults_of(&r, "partition");
    assert!(parts.len() >= 3, "{parts:?}");
    // The nemesis says whose links it cut; that worker then lost its keepalive.
    let cut: Vec<u64> = parts
        .iter()
        .filter_map(|w| w["detail"]["target"]["links"]["holder"]["worker"].as_u64())
        .collect();
    assert!(!cut.is_empty(), "{parts:?}");
    let lost_by: Vec<u64> = history(&out)
        .iter()
        .filter(|e| e["f"] == "keepalive-lost")
        .filter_map(|e| e["process"].as_u64())
        .collect();
    assert!(
        cut.iter().any(|w| lost_by.contains(w)),
        "cut off {cut:?}, keepalives lost by {lost_by:?}"
    );
    assert!(n(&r["checks"]["mutex"]["overlaps"]) >= 1);
    let f = &r["checks"]["fencing"];
    assert_eq!(f["valid"], true, "{f}");
    assert!(n(&f["stale_rejected"]) >= 1, "{f}");
    assert_eq!(n(&r["checks"]["counter"]["lost"]), 0);
}

#[test]
fn partition_without_fencing_accepts_the_cut_off_holders_writes() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario("partition-no-fencing", &[], &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    assert!(n(&r["checks"]["fencing"]["stale_accepted"]) >= 1);
}

#[test]
fn kill_the_leader_of_three_members_repeatedly() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario("kill", &["--duration", "20s"], &out);
    assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
    assert_eq!(r["run"]["etcd_members"], 3);
    let kills = faults_of(&r, "kill");
    assert!(leaders_killed(&kills) >= 2, "{kills:#?}");
    for w in &kills {
        assert!(
            w["detail"]["restarted"][0]["done"]["pid"]
                .as_u64()
                .is_some(),
            "every killed member is restarted: {w}"
        );
    }
    assert_eq!(r["checks"]["fencing"]["valid"], true);
    assert_eq!(n(&r["checks"]["counter"]["lost"]), 0);
    // The heal phase's final read is recorded and agrees with the counter.
    let finals: Vec<Value> = history(&out)
        .into_iter()
        .filter(|e| e["f"] == "final-read" && e["type"] == "ok")
        .collect();
    assert_eq!(finals.len(), 1);
    assert!(n(&finals[0]["value"]) > 0);
    assert_eq!(
        finals[0]["value"],
        r["checks"]["counter"]["keys"][0]["final_value"]
    );
}

#[test]
fn mixed_schedule_is_the_same_for_the_same_seed() {
    let sched = |seed: &str| {
        let o = bin()
            .args([
                "validate",
                "--schedule",
                "--seed",
                seed,
                "scenarios/mixed.toml",
            ])
            .output()
            .expect("validate");
        assert_eq!(o.status.code(), Some(0), "{}", explain(&o));
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    let a = sched("29");
    assert_eq!(a, sched("29"));
    assert_ne!(a, sched("30"));
    // Every fault kind appears in the mix.
    for kind in ["pause", "revoke-lease", "partition", "delay", "kill"] {
        assert!(a.contains(kind), "{kind} missing from\n{a}");
    }
}

#[test]
fn ctrl_c_during_a_three_member_run_leaves_nothing_behind() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    // Interrupted while the leader is frozen.
    interrupt_mid_fault("leader-pause", &["--backend", "process"], &out, |procs| {
        let etcd = procs.iter().filter(|(_, _, c)| c.contains("etcd")).count();
        assert!(etcd >= 3, "{procs:#?}");
        assert!(
            procs.iter().any(|(_, st, _)| st == "T"),
            "expected the paused leader: {procs:#?}"
        );
    });
}

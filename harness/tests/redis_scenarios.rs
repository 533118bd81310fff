//! The shipped Redis and Redlock scenarios end to end on the process backend: real
//! `redis-server` instances (one, or three independent masters), real worker
//! processes, real faults, the verdicts the scenarios promise — judged by the
//! order of grants the harness observed, not by the counter under test.

mod common;

use common::*;
use serde_json::Value;

/// Runs a shipped scenario; the run directory lives as long as the returned guard.
fn run_kept(name: &str, service: &str) -> (tempfile::TempDir, Value) {
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario(name, &[], &out);
    assert_eq!(o.status.code(), Some(0), "{name}: {}", explain(&o));
    assert_eq!(r["run"]["service"], service, "{name}");
    assert!(
        r["run"]["service_version"]
            .as_str()
            .unwrap_or("")
            .starts_with("7.0"),
        "{}",
        r["run"]
    );
    // Every grant a worker was told about was observed at the service.
    assert_eq!(r["problems"], serde_json::json!([]), "{name}");
    assert_nothing_left(&out);
    (dir, r)
}

#[test]
fn redis_pause_is_fenced_by_the_counter() {
    let _g = serial();
    let (_dir, r) = run_kept("redis-pause", "redis");
    let (accepted, rejected, fresh) = fencing(&r);
    assert_eq!(accepted, 0, "{}", r["checks"]["fencing"]);
    assert!(rejected >= 1, "{}", r["checks"]["fencing"]);
    assert_eq!(fresh, 0, "{}", r["checks"]["fencing"]);
    assert_eq!(n(&r["checks"]["counter"]["lost"]), 0);
    assert_eq!(r["run"]["persistence"], "none");
    // Without a restart the counter is a fencing token in the observed order.
    assert_eq!(
        r["checks"]["token"]["valid"], true,
        "{}",
        r["checks"]["token"]
    );
    let u = &r["findings"]["unsafe_window"];
    assert!(n(&u["holds"]) >= 1, "{u}");
    assert_eq!(n(&u["writes_accepted"]), 0, "{u}");
}

#[test]
fn redis_no_fencing_accepts_stale_writes() {
    let _g = serial();
    let (_dir, r) = run_kept("redis-no-fencing", "redis");
    let (accepted, _, _) = fencing(&r);
    assert!(accepted >= 1, "{}", r["checks"]["fencing"]);
}

#[test]
fn redis_restart_without_aof_hands_tokens_out_again() {
    let _g = serial();
    let (_dir, r) = run_kept("redis-restart-no-aof", "redis");
    let (_, _, fresh) = fencing(&r);
    assert!(fresh >= 1, "{}", r["checks"]["fencing"]);
    // The token went backwards along the observed grants...
    let t = &r["checks"]["token"];
    assert_eq!(t["valid"], false, "{t}");
    assert!(n(&t["regressions"]) >= 1, "{t}");
    // ...after a restart: the first refused fresh write follows the first kill.
    let kills = faults_of(&r, "kill");
    assert!(!kills.is_empty(), "no kill recorded");
    let first_kill = kills
        .iter()
        .filter_map(|k| k["start_ns"].as_u64())
        .min()
        .expect("kill start");
    let first_fresh = r["checks"]["fencing"]["fresh_rejected_examples"]
        .as_array()
        .and_then(|a| a.iter().filter_map(|w| w["time_ns"].as_u64()).min())
        .expect("a fresh-rejected example");
    assert!(
        first_fresh > first_kill,
        "fresh rejection before any restart"
    );
}

#[test]
fn redis_restart_with_aof_always_keeps_the_counter() {
    let _g = serial();
    let (_dir, r) = run_kept("redis-restart-aof-always", "redis");
    assert_eq!(fencing(&r), (0, 0, 0), "{}", r["checks"]["fencing"]);
    assert_eq!(r["run"]["persistence"], "aof-always");
    assert!(faults_of(&r, "kill").len() >= 2, "{}", r["faults"]);
}

#[test]
fn redlock_without_a_token_accepts_stale_writes() {
    let _g = serial();
    let (_dir, r) = run_kept("redlock-pause-no-token", "redlock");
    let (accepted, _, _) = fencing(&r);
    assert!(accepted >= 1, "{}", r["checks"]["fencing"]);
    assert_eq!(r["run"]["etcd_members"], 3);
    // The report says there was no token to check.
    assert_eq!(
        r["checks"]["token"]["valid"], "unknown",
        "{}",
        r["checks"]["token"]
    );
}

/// Bad input is refused before anything starts, with exit 2 and file:line.
#[test]
fn bad_redis_scenarios_are_refused_with_file_and_line() {
    use fencecheck::scenario::Scenario;
    let cases = [
        // Redlock with one instance, and with an even number.
        (
            "name = \"x\"\n[cluster]\nmembers = 1\n[lock]\nservice = \"redlock\"\n",
            3,
            "odd number",
        ),
        (
            "name = \"x\"\n[cluster]\nmembers = 4\n[lock]\nservice = \"redlock\"\n",
            3,
            "expected 1, 3 or 5",
        ),
        // A persistence mode Redis does not have.
        (
            "name = \"x\"\n[lock]\nservice = \"redis\"\npersistence = \"rdb\"\n",
            4,
            "aof-always",
        ),
        // A token Redis has no way to give.
        (
            "name = \"x\"\n[lock]\nservice = \"redis\"\n[storage]\ntoken = \"grant\"\n",
            5,
            "counter",
        ),
        // Persistence on a service that is not Redis.
        (
            "name = \"x\"\n[lock]\nservice = \"etcd\"\npersistence = \"none\"\n",
            4,
            "Redis's",
        ),
    ];
    for (text, line, says) in cases {
        let e = Scenario::parse(text, "bad.toml").expect_err(text);
        assert_eq!(e.line, Some(line), "{text}: {e}");
        assert!(e.to_string().contains(says), "{text}: {e}");
        assert!(
            e.to_string().starts_with(&format!("bad.toml:{line}:")),
            "{e}"
        );
    }
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("even.toml");
    std::fs::write(&path, cases[1].0).expect("write");
    let o = bin().arg("scenario").arg(&path).output().expect("run");
    assert_eq!(o.status.code(), Some(2), "{}", explain(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("even.toml:3"), "{err}");
}

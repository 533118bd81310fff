//! The shipped lock-client adapters (`clients/`) end to end: each adapter's two
//! scenarios under `scenarios/clients/` run against a real service through the
//! real library (built or installed by `ci/bootstrap.sh`), and must give what their
//! `[expect]` blocks promise. The verdicts come from the grants the harness
//! observed at the service, so every acquisition must resolve to one of them.

use crate::common;

use common::*;
use serde_json::Value;

/// Runs `scenarios/clients/<name>.toml` and checks what every adapter run must
/// show: its `[expect]` met, every grant the library was told about observed at
/// the service and resolved to its place in the service's order, no client
/// breaking the protocol, grants made and writes accepted, nothing left.
fn run_client_scenario(name: &str) -> Value {
    let (r, h) = run_met(&format!("clients/{name}"), 5);
    let writes = h
        .iter()
        .filter(|e| e["f"] == "write" && e["type"] == "ok")
        .count();
    // One is enough: with an unordered token (redis-py) a first grant with the
    // highest random value has every later write refused.
    assert!(writes >= 1, "{name}: no accepted write");
    r
}

/// Runs an adapter's two scenarios side by side (each on its own service,
/// storage and ports; CI's time), one adapter at a time; returns the pause
/// scenario's report.
fn adapter(pause: &str, no_fencing: &'static str) -> Value {
    let _g = pair();
    let unfenced = std::thread::spawn(move || run_client_scenario(no_fencing));
    let paused = run_client_scenario(pause);
    let unfenced = match unfenced.join() {
        Ok(r) => r,
        Err(e) => std::panic::resume_unwind(e),
    };
    let r = &paused;
    assert!(
        n(&r["checks"]["fencing"]["stale_rejected"]) + n(&r["checks"]["fencing"]["stale_accepted"])
            >= 1,
        "{pause}: the pause made no stale holder: {}",
        r["checks"]["fencing"]
    );
    let r = unfenced;
    let (accepted, _, _) = fencing(&r);
    assert!(accepted >= 1, "{no_fencing}: {}", r["checks"]["fencing"]);
    paused
}

#[test]
fn go_etcd_mutex() {
    adapter("go-etcd-mutex-pause", "go-etcd-mutex-no-fencing");
}

#[test]
fn python_etcd3() {
    adapter("python-etcd3-pause", "python-etcd3-no-fencing");
}

#[test]
fn kazoo() {
    let r = adapter("kazoo-pause", "kazoo-no-fencing");
    // As for Curator: the frozen holder's session end is seen at the service.
    assert!(
        n(&r["findings"]["unsafe_window"]["holds"]) >= 1,
        "kazoo-pause: no hold outlived its session: {}",
        r["findings"]
    );
}

#[test]
fn curator() {
    let r = adapter("curator-pause", "curator-no-fencing");
    // The frozen holder's session expired at the service, seen there (the
    // leader's session tracker), not told by Curator: its hold outlived it.
    assert!(
        n(&r["findings"]["unsafe_window"]["holds"]) >= 1,
        "curator-pause: no hold outlived its session: {}",
        r["findings"]
    );
}

#[test]
fn redis_py() {
    adapter("redis-py-pause", "redis-py-no-fencing");
}

/// client-go's LeaderElector on a Lease (kube-apiserver 1.20.2): fenced on
/// leaseTransitions, every woken leader refused; unfenced, its late writes land.
#[test]
fn client_go() {
    let r = adapter("client-go-pause", "client-go-no-fencing");
    // Each grant counts one more transition: the token is in grant order.
    assert_eq!(
        n(&r["checks"]["token"]["regressions"]),
        0,
        "client-go-pause: {}",
        r["checks"]["token"]
    );
}

/// The Python client's LeaderElection on a LeaseLock (kubernetes 37.0.2): fenced on
/// the acquiring write's resourceVersion, every woken leader refused; unfenced, its
/// late writes land.
#[test]
fn python_leaselock() {
    adapter("python-leaselock-pause", "python-leaselock-no-fencing");
}

/// The same deposed leader, its wall clock stepped back 10 s while its renewals
/// fail: how long after the Lease moved on it says it lost the lock (the post-loss
/// window's `believed`), in milliseconds.
fn believed_after_a_step_back(name: &str) -> (f64, serde_json::Value) {
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let (o, r) = run_scenario(&format!("clients/{name}"), &[], &out);
    assert_eq!(o.status.code(), Some(0), "{name}: {}", explain(&o));
    assert_eq!(r["problems"], serde_json::json!([]), "{name}");
    // Two leaders, one hold each: the deposed one and the one that took over.
    assert!(
        n(&r["checks"]["token"]["grants"]) >= 2,
        "{name}: {}",
        r["checks"]["token"]
    );
    assert_nothing_left(&out);
    // The deposed leader said so (once in 1 of 3 runs here a second unsafe
    // holder said so too, under load; the deposed one's belief is the maximum).
    let p = &r["findings"]["unsafe_window"]["post_loss"];
    assert!(n(&p["told"]) >= 1, "{name}: {p}");
    let jumps = faults_of(&r, "clock-jump");
    assert!(!jumps.is_empty(), "{name}: {}", r["faults"]);
    let counts = fault_count(&r, "clock-jump");
    (
        p["believed_max_ms"].as_f64().expect("believed_max_ms"),
        counts,
    )
}

/// The Python elector measures its renew deadline with `time.time()`: a step
/// back keeps a deposed leader leading about that much longer, the step
/// confirmed (clockshim mapped into the worker and its Python adapter). The step
/// cannot reach client-go's adapter, a static Go binary that never loads
/// clockshim: its jump is reported unconfirmed, with that reason, and its
/// deposed leader stops at its renew deadline.
#[test]
fn a_wall_clock_step_back_keeps_the_python_elector_leading_and_cannot_reach_client_go() {
    let _g = pair();
    // Side by side: each on a service of its own.
    let go = std::thread::spawn(|| believed_after_a_step_back("client-go-clock-jump"));
    let (python, py_jumps) = believed_after_a_step_back("python-leaselock-clock-jump");
    let (go, go_jumps) = match go.join() {
        Ok(r) => r,
        Err(e) => std::panic::resume_unwind(e),
    };
    assert!(python > 9_000.0, "python believed {python} ms");
    assert!(go < 6_000.0, "client-go believed {go} ms");
    assert!(n(&py_jumps["injected"]) > 0, "{py_jumps}");
    assert_eq!(py_jumps["confirmed"], py_jumps["injected"], "{py_jumps}");
    assert!(n(&go_jumps["injected"]) > 0, "{go_jumps}");
    assert_eq!(n(&go_jumps["confirmed"]), 0, "{go_jumps}");
    assert!(
        go_jumps
            .to_string()
            .contains("clockshim is mapped into 1 of the 2 processes"),
        "{go_jumps}"
    );
}

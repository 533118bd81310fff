//! Zoo entries (`scenarios/zoo/`), each a published bug run in the version that
//! has it and beside its twin that does not:
//!
//! - etcd 3.4.23's Lock answers a waiter whose lease ended while it waited
//!   (etcd-io/etcd#11456); 3.5.1 reads the waiter's key again and refuses;
//! - client-go's `ReleaseOnCancel` releases the Lease while the leader's work
//!   still runs (kubernetes/kubernetes#139504, #139991): two leaders at once;
//!   without `ReleaseOnCancel`, one at a time.
//!
//! Every run is the real thing: etcd 3.4.23 and 3.5.1, kube-apiserver 1.20.2 and
//! client-go 1.20.2's elector through `clients/go-leaderelection`.

use crate::common;

use common::*;
use serde_json::Value;

/// Runs `scenarios/zoo/<name>.toml` with its own seed; it must meet its
/// `[expect]` (exit 0), on a history that is not empty and left nothing behind.
fn zoo(name: &str) -> (Value, Vec<Value>) {
    run_met(&format!("zoo/{name}"), 4)
}

/// Late grants as the grant-validity check counts them: told after the
/// session ended at the service, neither caught by the client nor told right
/// after a fault of its own.
fn late_grants(r: &Value) -> u64 {
    let g = &r["findings"]["grant_validity"];
    n(&g["after_session_end"])
        .saturating_sub(n(&g["caught_by_client"]))
        .saturating_sub(n(&g["during_client_fault"]))
}

#[test]
fn etcd_3_4_grants_a_waiter_whose_lease_was_revoked_and_3_5_does_not() {
    let _g = pair();
    let fixed = std::thread::spawn(|| zoo("etcd-3.5-late-grant"));
    let (buggy, _) = zoo("etcd-3.4-late-grant");
    let (fixed, fixed_history) = match fixed.join() {
        Ok(r) => r,
        Err(e) => std::panic::resume_unwind(e),
    };
    // The service the harness ran is the version each scenario names.
    assert_eq!(buggy["run"]["etcd_version"], "3.4.23", "{}", buggy["run"]);
    assert_eq!(fixed["run"]["etcd_version"], "3.5.1", "{}", fixed["run"]);
    // Both runs revoked leases the same way.
    for r in [&buggy, &fixed] {
        assert!(
            n(&fault_count(r, "revoke-lease")["injected"]) >= 3,
            "{}",
            r["faults"]
        );
    }
    // 3.4: grants told after the lease had ended, with no fault of the client's
    // own to explain them: the service answered a waiter it had already let go.
    assert!(
        late_grants(&buggy) >= 1,
        "{}",
        buggy["findings"]["grant_validity"]
    );
    // 3.5: none, and the revoked waiters were refused instead (Mutex.Lock's
    // ErrSessionExpired), so the revocations did hit waiters there too.
    assert_eq!(
        late_grants(&fixed),
        0,
        "{}",
        fixed["findings"]["grant_validity"]
    );
    let refused = fixed_history
        .iter()
        .filter(|e| e["f"] == "acquire" && e["type"] == "fail")
        .filter(|e| {
            e["error"]
                .as_str()
                .is_some_and(|s| s.contains("mutex: session is expired"))
        })
        .count();
    assert!(refused >= 1, "etcd 3.5 refused no revoked waiter");
}

#[test]
fn release_on_cancel_hands_the_lease_over_while_the_old_leader_still_works() {
    // Kubernetes tests run alone: the apiserver and its etcd beside the workers.
    let _g = alone();
    let (buggy, _) = zoo("client-go-release-on-cancel");
    let x = &buggy["checks"]["exclusion"];
    // Two leaders at once, neither term ended at the apiserver: the Lease was
    // released (not taken over) while the old leader still wrote.
    assert!(n(&x["unexplained_overlaps"]) >= 1, "{x}");
    assert_eq!(n(&x["phantom"]), 0, "{x}");
    let (twin, _) = zoo("client-go-step-down");
    // The same step-downs without ReleaseOnCancel: one leader at a time.
    let x = &twin["checks"]["exclusion"];
    assert_eq!(n(&x["unexplained_overlaps"]), 0, "{x}");
    assert!(n(&x["matched"]) >= 4, "{x}");
    assert_eq!(
        n(&twin["checks"]["mutex"]["overlaps"]),
        0,
        "{}",
        twin["checks"]["mutex"]
    );
}

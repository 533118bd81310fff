//! `revoke-lease`: revoke the victim's lease through the etcd API, as
//! `etcdctl lease revoke` does. Its lock key goes with it; the next waiter is
//! granted the lock while the victim still believes it holds it.

use std::time::Duration;

use super::{victims_json, Nemesis, Planned, Victim};
use crate::history::{EventType, F};

pub async fn revoke(n: &Nemesis, p: &Planned, victims: &[Victim]) {
    let mut start = n.event(p, EventType::Invoke, F::RevokeLease);
    start.detail =
        Some(serde_json::json!({ "action": "LeaseRevoke", "victims": victims_json(victims) }));
    n.record(&start);
    let mut errors = Vec::new();
    let mut revoked = 0;
    for v in victims {
        let Some(lease) = v.lease else {
            errors.push(format!("worker {} has no lease", v.worker));
            continue;
        };
        let mut etcd = n.etcd.clone();
        match tokio::time::timeout(Duration::from_secs(3), etcd.lease_revoke(lease)).await {
            Ok(Ok(_)) => revoked += 1,
            Ok(Err(e)) => errors.push(format!("revoke {lease:x}: {e}")),
            Err(_) => errors.push(format!("revoke {lease:x}: timed out")),
        }
    }
    let mut end = n.event(
        p,
        if revoked > 0 {
            EventType::Ok
        } else {
            EventType::Fail
        },
        F::RevokeLease,
    );
    if !errors.is_empty() {
        end.error = Some(errors.join("; "));
    }
    n.record(&end);
}

//! `revoke-lease`: revoke the victim's lease through the etcd API, as
//! `etcdctl lease revoke` does. Its lock key goes with it; the next waiter is
//! granted the lock while the victim still believes it holds it.

use std::time::Duration;

use super::{Nemesis, Planned, Resolved};
use crate::history::{EventType, F};

pub async fn revoke(n: &Nemesis, p: &Planned, target: &Resolved) {
    let mut start = n.event(p, EventType::Invoke, F::RevokeLease);
    start.detail =
        Some(serde_json::json!({ "action": "LeaseRevoke", "target": target.describe() }));
    n.record(&start);
    let victims = match target {
        Resolved::Workers(v) => v.as_slice(),
        _ => &[],
    };
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
    let kind = if revoked > 0 {
        EventType::Ok
    } else {
        EventType::Fail
    };
    let mut end = n.event(p, kind, F::RevokeLease);
    if !errors.is_empty() {
        end.error = Some(errors.join("; "));
    }
    n.record(&end);
}

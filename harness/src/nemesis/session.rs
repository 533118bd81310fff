//! `expire-session` (and etcd's `revoke-lease`): end the victim's session at the
//! service — etcd revokes the lease, ZooKeeper expires the session — so its lock
//! entry goes with it; the next waiter is granted the lock while the victim still
//! believes it holds it.

use super::{Ask, Nemesis, Planned, Resolved};
use crate::record::history::{EventType, F};
use crate::scenario::FaultKind;

/// What the system declares: etcd has leases to revoke; a session to expire,
/// every system that has sessions.
pub fn available(a: &Ask) -> Result<(), String> {
    if a.kind == FaultKind::RevokeLease && !a.system.revoke_lease {
        return Err(format!(
            "{} has no leases to revoke; use kind = \"expire-session\"",
            a.service
        ));
    }
    if a.kind == FaultKind::ExpireSession && !a.system.expire_session {
        return Err(format!("{} cannot expire a session", a.service));
    }
    Ok(())
}

pub async fn inject(n: &Nemesis, p: &Planned, target: &Resolved) {
    let f = F::Fault(p.kind);
    let mut start = n.event(p, EventType::Invoke, f);
    let action = match p.kind {
        FaultKind::RevokeLease => "LeaseRevoke",
        _ => "expire session",
    };
    start.detail = Some(serde_json::json!({ "action": action, "target": target.describe() }));
    n.record(&start);
    let victims = match target {
        Resolved::Workers(v) => v.as_slice(),
        _ => &[],
    };
    let mut errors = Vec::new();
    let mut done = Vec::new();
    for v in victims {
        let Some(session) = v.lease else {
            errors.push(format!("worker {} has no session", v.worker));
            continue;
        };
        match n.world.service.expire_session(session).await {
            Ok(what) => done.push(what),
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    let kind = if done.is_empty() {
        EventType::Fail
    } else {
        EventType::Ok
    };
    // A worker held stopped in its pod for this fault goes on now that its
    // session is gone (`in_pod.rs`).
    let held = n.release(p).await;
    let mut end = n.event(p, kind, f);
    end.detail = Some(serde_json::json!({ "done": done }));
    if let (Some(h), Some(d)) = (held, end.detail.as_mut()) {
        d["held"] = h;
    }
    if !errors.is_empty() {
        end.error = Some(errors.join("; "));
    }
    n.record(&end);
}

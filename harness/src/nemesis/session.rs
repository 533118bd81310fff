//! `expire-session` (and etcd's `revoke-lease`): end the victim's session at the
//! service — etcd revokes the lease, ZooKeeper expires the session — so its lock
//! entry goes with it; the next waiter is granted the lock while the victim still
//! believes it holds it.

use super::{Nemesis, Planned, Resolved};
use crate::record::history::{EventType, F};

pub async fn expire(n: &Nemesis, p: &Planned, target: &Resolved, f: F) {
    let mut start = n.event(p, EventType::Invoke, f);
    let action = match f {
        F::RevokeLease => "LeaseRevoke",
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
    let mut end = n.event(p, kind, f);
    end.detail = Some(serde_json::json!({ "done": done }));
    if !errors.is_empty() {
        end.error = Some(errors.join("; "));
    }
    n.record(&end);
}

//! `kill`: SIGKILL an etcd member, then start it again on the same data dir after
//! `restart_after`. The member rejoins and catches up from its peers.

use super::{Nemesis, Planned, Resolved};
use crate::history::{EventType, F};

pub async fn run(n: &Nemesis, p: &Planned, target: &Resolved) {
    let members = match target {
        Resolved::Members(m) => m.clone(),
        _ => Vec::new(),
    };
    let mut killed = Vec::new();
    let mut errors = Vec::new();
    for m in &members {
        match n.world.backend.lock().await.kill_member(m.member).await {
            Ok(what) => killed.push(serde_json::json!({
                "member": m.member, "was_leader": m.was_leader, "done": what
            })),
            Err(e) => errors.push(format!("kill member {}: {e:#}", m.member)),
        }
    }
    let mut start = n.event(p, EventType::Invoke, F::Kill);
    start.detail = Some(serde_json::json!({
        "action": "SIGKILL",
        "killed": killed,
        "restart_after_ms": p.duration.as_millis() as u64,
    }));
    if !errors.is_empty() {
        start.error = Some(errors.join("; "));
    }
    n.record(&start);
    tokio::time::sleep(p.duration).await;
    let mut restarted = Vec::new();
    for m in &members {
        match n.world.backend.lock().await.restart_member(m.member).await {
            Ok(what) => restarted.push(serde_json::json!({ "member": m.member, "done": what })),
            Err(e) => errors.push(format!("restart member {}: {e:#}", m.member)),
        }
    }
    let kind = if killed.is_empty() {
        EventType::Fail
    } else {
        EventType::Ok
    };
    let mut end = n.event(p, kind, F::Kill);
    end.detail = Some(serde_json::json!({ "action": "restart", "restarted": restarted }));
    if !errors.is_empty() {
        end.error = Some(errors.join("; "));
    }
    n.record(&end);
}

//! `kill`: SIGKILL service members (or the storage), then start them again on the
//! same data after `restart_after`. A member rejoins and catches up from its peers;
//! the storage rebuilds its state from its own log before it answers.

use super::{Ask, Nemesis, Planned, Resolved};
use crate::record::history::{EventType, F};
use crate::scenario::FaultKind;

/// A kill is undone by a restart on the same data: the backend must do both.
pub fn available(a: &Ask) -> Result<(), String> {
    if !(a.backend.kill && a.backend.restart) {
        return Err(format!("the backend cannot kill and restart {}", a.target));
    }
    Ok(())
}

/// One thing to kill: a member by index, or the storage.
#[derive(Clone, Copy)]
enum Victim {
    Member(usize, bool),
    Storage,
}

pub async fn inject(n: &Nemesis, p: &Planned, target: &Resolved) {
    let victims: Vec<Victim> = match target {
        Resolved::Members(m) => m
            .iter()
            .map(|m| Victim::Member(m.member, m.was_leader))
            .collect(),
        Resolved::Storage => vec![Victim::Storage],
        _ => Vec::new(),
    };
    let mut killed = Vec::new();
    let mut errors = Vec::new();
    for &v in &victims {
        let mut b = n.world.backend.lock().await;
        match v {
            Victim::Member(m, was_leader) => match b.kill_member(m).await {
                Ok(what) => killed.push(serde_json::json!({
                    "member": m, "was_leader": was_leader, "done": what
                })),
                Err(e) => errors.push(format!("kill member {m}: {e:#}")),
            },
            Victim::Storage => match b.kill_storage().await {
                Ok(what) => killed.push(serde_json::json!({ "storage": true, "done": what })),
                Err(e) => errors.push(format!("kill storage: {e:#}")),
            },
        }
    }
    let mut start = n.event(p, EventType::Invoke, F::Fault(FaultKind::Kill));
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
    for &v in &victims {
        let mut b = n.world.backend.lock().await;
        match v {
            Victim::Member(m, _) => match b.restart_member(m).await {
                Ok(what) => restarted.push(serde_json::json!({ "member": m, "done": what })),
                Err(e) => errors.push(format!("restart member {m}: {e:#}")),
            },
            Victim::Storage => match b.restart_storage().await {
                Ok(what) => restarted.push(serde_json::json!({ "storage": true, "done": what })),
                Err(e) => errors.push(format!("restart storage: {e:#}")),
            },
        }
    }
    let kind = if killed.is_empty() {
        EventType::Fail
    } else {
        EventType::Ok
    };
    let mut end = n.event(p, kind, F::Fault(FaultKind::Kill));
    end.detail = Some(serde_json::json!({ "action": "restart", "restarted": restarted }));
    if !errors.is_empty() {
        end.error = Some(errors.join("; "));
    }
    n.record(&end);
}

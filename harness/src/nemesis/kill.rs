//! `kill`: SIGKILL service members (or the storage), then start them again on the
//! same data after `restart_after`. A member rejoins and catches up from its peers;
//! the storage rebuilds its state from its own log before it answers.

use fencecheck_reports::FaultEffect;

use super::{effect, Ask, Nemesis, Planned, Resolved};
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
    // Each victim's old pid, and whether it was seen gone.
    let mut old = Vec::new();
    for k in &killed {
        let pid = pid_in(k.get("done"));
        // A pid in a pod's own PID namespace is not this machine's: there the
        // in-pod agent has read its /proc back already (`seen_gone`).
        let agent_saw = k
            .get("done")
            .and_then(|d| d.get("seen_gone"))
            .and_then(serde_json::Value::as_bool);
        let seen_gone = match (agent_saw, pid) {
            (Some(seen), _) => Some(seen),
            (None, Some(pid)) => Some(effect::gone(pid, effect::WITHIN).await),
            (None, None) => None,
        };
        old.push((who(k), pid, seen_gone));
    }
    let mut start = n.event(p, EventType::Invoke, F::Fault(FaultKind::Kill));
    start.detail = Some(serde_json::json!({
        "action": "SIGKILL",
        "killed": killed,
        "restart_after_ms": p.duration.as_millis() as u64,
    }));
    if !killed.is_empty() {
        effect::record(&mut start.detail, &confirm(&old, &[]));
    }
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
    let new: Vec<(String, Option<u32>)> = restarted
        .iter()
        .map(|r| (who(r), pid_in(r.get("done"))))
        .collect();
    end.detail = Some(serde_json::json!({ "action": "restart", "restarted": restarted }));
    if !killed.is_empty() {
        effect::record(&mut end.detail, &confirm(&old, &new));
    }
    if !errors.is_empty() {
        end.error = Some(errors.join("; "));
    }
    n.record(&end);
}

/// The pid a backend's answer names: `pid` (a process, a container's main
/// process), `process_group` (PostgreSQL's postmaster and its backends) or
/// `pod_pid` (a process in a pod, as its agent sees it: not a pid of this machine).
fn pid_in(what: Option<&serde_json::Value>) -> Option<u32> {
    let what = what?;
    ["pid", "process_group", "pod_pid"]
        .iter()
        .find_map(|k| what.get(*k).and_then(serde_json::Value::as_u64))
        .and_then(|p| u32::try_from(p).ok())
}

/// "member 1" or "the storage", from a killed or restarted entry.
fn who(entry: &serde_json::Value) -> String {
    match entry.get("member").and_then(serde_json::Value::as_u64) {
        Some(m) => format!("member {m}"),
        None => "the storage".into(),
    }
}

/// A kill is confirmed per victim by its process seen gone after SIGKILL, or
/// by its restart under a new pid; `new` is empty until the restart.
fn confirm(
    old: &[(String, Option<u32>, Option<bool>)],
    new: &[(String, Option<u32>)],
) -> FaultEffect {
    let effects = old
        .iter()
        .map(|(who, pid, seen_gone)| {
            let again = new.iter().find(|(w, _)| w == who).and_then(|(_, p)| *p);
            let restarted = match (pid, again) {
                (Some(a), Some(b)) if *a != b => Some(format!("restarted as pid {b}")),
                (None, Some(b)) => Some(format!("restarted as pid {b}")),
                _ => None,
            };
            match (seen_gone, pid, restarted) {
                (Some(true), Some(pid), r) => FaultEffect::confirmed(format!(
                    "{who}'s pid {pid} seen gone after SIGKILL{}",
                    r.map(|r| format!(", {r}")).unwrap_or_default()
                )),
                (_, _, Some(r)) => FaultEffect::confirmed(format!("{who} {r}")),
                (Some(false), Some(pid), None) => FaultEffect::unconfirmed(format!(
                    "{who}'s pid {pid} still alive {} ms after SIGKILL",
                    effect::WITHIN.as_millis()
                )),
                _ => FaultEffect::unchecked(format!("{who}: the backend named no pid to look for")),
            }
        })
        .collect();
    effect::all(effects)
}

//! What `delay` (`delay.rs`) and `partition` (`partition.rs`) share: a fault on
//! links, through fencecheck's own TCP proxies (the kernel here has no netem).
//! Both directions of every chosen link: a delay adds latency ± jitter to every
//! chunk; a partition blackholes bytes while connections stay open, as a dead
//! network path does.

use faultproxy::{Direction, Fault};

use super::target::member_links;
use super::{Ask, Nemesis, Planned, Resolved};
use crate::record::history::{EventType, F};

/// Member links exist only where the system's members talk to each other.
pub fn member_links_available(a: &Ask) -> Result<(), String> {
    if a.target.is_members() && !a.system.peer_links {
        return Err(format!(
            "{} of {}: {} instances have no peer links; use holder->service or \
             workers->service",
            a.kind, a.target, a.service
        ));
    }
    Ok(())
}

pub async fn run(n: &Nemesis, p: &Planned, target: &Resolved, fault: Fault) {
    let f = F::Fault(p.kind);
    let proxies = match target {
        Resolved::Links { proxies, .. } => proxies.clone(),
        Resolved::Members(m) => member_links(n, m),
        _ => Vec::new(),
    };
    // A backend without peer proxies (containers on a docker network) isolates
    // members itself; it can cut but not slow them (the plan refused the delay).
    let peer_proxies = n.world.backend.lock().await.caps().peer_proxies;
    let isolated: Vec<usize> = match target {
        Resolved::Members(m) if !peer_proxies && fault == Fault::Blackhole => {
            let ids: Vec<usize> = m.iter().map(|m| m.member).collect();
            match n.world.backend.lock().await.isolate(&ids, true).await {
                Ok(()) => ids,
                Err(e) => {
                    tracing::warn!("isolate members: {e:#}");
                    Vec::new()
                }
            }
        }
        _ => Vec::new(),
    };
    for px in &proxies {
        px.set(Direction::Both, fault);
    }
    let mut start = n.event(p, EventType::Invoke, f);
    start.detail = Some(serde_json::json!({
        "action": if !isolated.is_empty() {
            "disconnect from the member network"
        } else if matches!(fault, Fault::Blackhole) {
            "blackhole"
        } else {
            "latency"
        },
        "isolated_members": isolated,
        "target": target.describe(),
        "latency_ms": p.latency.as_millis() as u64,
        "jitter_ms": p.latency_jitter.as_millis() as u64,
        "links": proxies.len(),
        "duration_ms": p.duration.as_millis() as u64,
    }));
    n.record(&start);
    tokio::time::sleep(p.duration).await;
    for px in &proxies {
        px.clear(Direction::Both);
    }
    if !isolated.is_empty() {
        if let Err(e) = n.world.backend.lock().await.isolate(&isolated, false).await {
            tracing::warn!("rejoin members: {e:#}");
        }
    }
    let kind = if proxies.is_empty() && isolated.is_empty() {
        EventType::Fail
    } else {
        EventType::Ok
    };
    let mut end = n.event(p, kind, f);
    end.detail = Some(serde_json::json!({ "action": "heal" }));
    if proxies.is_empty() && isolated.is_empty() {
        end.error = Some("no link to break".into());
    }
    n.record(&end);
}

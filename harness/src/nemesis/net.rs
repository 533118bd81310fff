//! What `delay` (`delay.rs`) and `partition` (`partition.rs`) share: a fault on
//! links, through fencecheck's own TCP proxies (the kernel here has no netem).
//! Both directions of every chosen link: a delay adds latency ± jitter to every
//! chunk; a partition blackholes bytes while connections stay open, as a dead
//! network path does.

use faultproxy::{Fault, Stats};
use fencecheck_reports::FaultEffect;

use super::target::member_links;
use super::{effect, Ask, Nemesis, Planned, Resolved};
use crate::links::Link;
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
    // A link away from the harness (in a pod) that cannot be counted or set is
    // said in the record: the fault did not land there.
    let mut errors: Vec<String> = Vec::new();
    let before = counters(&proxies, &mut errors).await;
    for px in &proxies {
        if let Err(e) = px.set(fault).await {
            errors.push(format!("{e:#}"));
        }
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
        "proxies_in": places(&proxies),
        "duration_ms": p.duration.as_millis() as u64,
    }));
    if !errors.is_empty() {
        start.error = Some(errors.join("; "));
    }
    n.record(&start);
    tokio::time::sleep(p.duration).await;
    // Counted before the fault is lifted: what the window itself did.
    let after = counters(&proxies, &mut errors).await;
    for px in &proxies {
        if let Err(e) = px.clear().await {
            errors.push(format!("{e:#}"));
        }
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
    if !proxies.is_empty() && !errors.is_empty() {
        // Counters missing for some link would make the count a guess.
        effect::record(
            &mut end.detail,
            &FaultEffect::unchecked(format!(
                "a link's proxy did not answer: {}",
                errors.join("; ")
            )),
        );
    } else if !proxies.is_empty() {
        effect::record(&mut end.detail, &counted(fault, &before, &after));
    } else if !isolated.is_empty() {
        effect::record(
            &mut end.detail,
            &FaultEffect::unchecked(
                "members cut off on the docker network: no proxy of fencecheck's \
                 stands on those links to count what was dropped",
            ),
        );
    }
    if proxies.is_empty() && isolated.is_empty() {
        end.error = Some("no link to break".into());
    }
    n.record(&end);
}

/// Each link's counters; one that cannot be read counts as zero and is said in
/// `errors`.
async fn counters(links: &[Link], errors: &mut Vec<String>) -> Vec<Stats> {
    let mut out = Vec::new();
    for l in links {
        out.push(l.stats().await.unwrap_or_else(|e| {
            errors.push(format!("{e:#}"));
            Stats::default()
        }));
    }
    out
}

/// Where the links' proxies run: "harness", or the pod that hosts them.
fn places(links: &[Link]) -> Vec<String> {
    let mut p: Vec<String> = links.iter().map(|l| l.place().to_string()).collect();
    p.sort();
    p.dedup();
    p
}

/// Bytes a link fault acted on, from the proxies' counters before and after the
/// window: dropped (a blackhole) or held back (a latency). None at all means no
/// traffic crossed the links while the fault was on: it had nothing to act on.
pub fn counted(fault: Fault, before: &[Stats], after: &[Stats]) -> FaultEffect {
    let blackhole = matches!(fault, Fault::Blackhole);
    let (mut up, mut down, mut links) = (0u64, 0u64, 0usize);
    for (b, a) in before.iter().zip(after) {
        let (u, d) = if blackhole {
            (
                a.bytes_dropped_upstream
                    .saturating_sub(b.bytes_dropped_upstream),
                a.bytes_dropped_downstream
                    .saturating_sub(b.bytes_dropped_downstream),
            )
        } else {
            (
                a.bytes_delayed_upstream
                    .saturating_sub(b.bytes_delayed_upstream),
                a.bytes_delayed_downstream
                    .saturating_sub(b.bytes_delayed_downstream),
            )
        };
        up += u;
        down += d;
        links += usize::from(u + d > 0);
    }
    let verb = if blackhole { "dropped" } else { "delayed" };
    if up + down == 0 {
        return FaultEffect::unconfirmed(format!(
            "no traffic crossed the link during the window (0 bytes {verb} on {} link{})",
            before.len(),
            if before.len() == 1 { "" } else { "s" }
        ));
    }
    FaultEffect::confirmed(format!(
        "{} bytes {verb} by the proxies ({up} toward the server, {down} back) on {links} of {} link{}",
        up + down,
        before.len(),
        if before.len() == 1 { "" } else { "s" }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_only_what_the_window_did() {
        let b = Stats {
            bytes_dropped_upstream: 10,
            bytes_delayed_downstream: 7,
            ..Stats::default()
        };
        let a = Stats {
            bytes_dropped_upstream: 30,
            bytes_delayed_downstream: 7,
            ..Stats::default()
        };
        let e = counted(Fault::Blackhole, &[b, b], &[a, b]);
        assert_eq!(e.status, fencecheck_reports::EffectStatus::Confirmed);
        assert!(e.how.starts_with("20 bytes dropped"), "{}", e.how);
        assert!(e.how.contains("on 1 of 2 links"), "{}", e.how);
        let lat = Fault::Latency {
            latency: std::time::Duration::from_millis(5),
            jitter: std::time::Duration::ZERO,
        };
        let e = counted(lat, &[b], &[a]);
        assert_eq!(e.status, fencecheck_reports::EffectStatus::Unconfirmed);
        assert!(
            e.how.starts_with("no traffic crossed the link"),
            "{}",
            e.how
        );
    }
}

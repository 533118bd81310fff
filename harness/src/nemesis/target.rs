//! Resolving a scenario target to what it means right now, from the lock
//! service's own state (`crate::systems::service::LockService`): the holder is whoever the
//! service says holds a lock at injection time, the leader whoever leads now.
//! Member sets follow Jepsen's node specs (all, majority, minority, random).

use std::time::Duration;

use crate::links::Link;
use anyhow::{anyhow, bail, Context, Result};
use rand::seq::{IteratorRandom, SliceRandom};
use rand::Rng;
use serde::Serialize;

use super::{Ask, Nemesis};
use crate::scenario::Target;

/// Whether the system has what the target names, whatever the fault.
pub fn available(a: &Ask) -> Result<(), String> {
    let t = a.target;
    if matches!(t, Target::Leader | Target::EtcdMajorityMinority) && !a.system.leader {
        return Err(format!("{} has no leader to find", a.service));
    }
    if t == Target::EtcdMajorityMinority && !a.system.majority_minority {
        return Err(format!(
            "etcd-majority-minority is etcd's; on {} use majority or minority",
            a.service
        ));
    }
    Ok(())
}

#[derive(Debug, Clone, Serialize)]
pub struct Victim {
    pub worker: u32,
    /// The worker's pid on this machine; 0, and left out of the record, for a
    /// worker pod on a node that is not this machine (its agent pauses it).
    #[serde(skip_serializing_if = "is_zero")]
    pub pid: u32,
    /// The worker's session (etcd lease, ZooKeeper session), when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<i64>,
    /// The lock grant the worker holds, when it is a holder.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

fn is_zero(pid: &u32) -> bool {
    *pid == 0
}

#[derive(Debug, Clone, Serialize)]
pub struct MemberRef {
    pub member: usize,
    pub was_leader: bool,
}

/// A target, resolved at injection time.
pub enum Resolved {
    Workers(Vec<Victim>),
    Members(Vec<MemberRef>),
    Storage,
    /// Links to break, and what they are (for the record).
    Links {
        what: serde_json::Value,
        proxies: Vec<Link>,
    },
}

impl Resolved {
    pub fn describe(&self) -> serde_json::Value {
        match self {
            Resolved::Workers(v) => serde_json::json!({ "workers": v }),
            Resolved::Members(m) => serde_json::json!({ "members": m }),
            Resolved::Storage => serde_json::json!("storage"),
            Resolved::Links { what, proxies } => {
                serde_json::json!({ "links": what, "proxies": proxies.len() })
            }
        }
    }
}

const HOLDER_SEARCH: Duration = Duration::from_secs(2);

pub async fn resolve(n: &Nemesis, target: Target) -> Result<Resolved> {
    let links = &n.world.links;
    let members = n.world.members;
    Ok(match target {
        Target::Holder => Resolved::Workers(vec![holder(n).await?]),
        Target::RandomWorker => {
            let mut ids: Vec<u32> = n.world.workers.keys().copied().collect();
            ids.sort_unstable();
            let id = {
                let mut rng = n.rng.lock().map_err(|_| anyhow!("rng poisoned"))?;
                ids.choose(&mut *rng).copied()
            }
            .context("no workers")?;
            Resolved::Workers(vec![worker(n, id).await?])
        }
        Target::Worker(id) => Resolved::Workers(vec![worker(n, id).await?]),
        Target::AllWorkers => {
            let mut ids: Vec<u32> = n.world.workers.keys().copied().collect();
            ids.sort_unstable();
            let mut out = Vec::new();
            for id in ids {
                out.push(worker(n, id).await?);
            }
            Resolved::Workers(out)
        }
        Target::WorkersToService => Resolved::Links {
            what: serde_json::json!("every worker → every member"),
            proxies: links.worker_service.iter().flatten().cloned().collect(),
        },
        Target::HolderToService => {
            let h = holder(n).await?;
            Resolved::Links {
                what: serde_json::json!({ "holder": h, "link": "holder → every member" }),
                proxies: links
                    .worker_service
                    .get(h.worker as usize)
                    .cloned()
                    .unwrap_or_default(),
            }
        }
        Target::WorkersToStorage => Resolved::Links {
            what: serde_json::json!("every worker → storage"),
            proxies: links.worker_storage.clone(),
        },
        Target::Storage => Resolved::Storage,
        Target::Member(m) => {
            let leader = n.world.service.leader().await.ok();
            member_target(vec![m as usize], leader)
        }
        Target::Leader => {
            let l = leader(n).await?;
            member_target(vec![l], Some(l))
        }
        Target::EtcdMajorityMinority => {
            let l = leader(n).await?;
            // The leader plus enough others to make a minority: 1 of 3, 2 of 5.
            let mut minority = vec![l];
            minority.extend((0..members).filter(|&i| i != l).take((members - 1) / 2 - 1));
            member_target(minority, Some(l))
        }
        Target::AllMembers | Target::Majority | Target::Minority | Target::RandomMembers => {
            let leader = n.world.service.leader().await.ok();
            let size = {
                let mut rng = n.rng.lock().map_err(|_| anyhow!("rng poisoned"))?;
                match target {
                    Target::AllMembers => members,
                    Target::Majority => members / 2 + 1,
                    Target::Minority => members.saturating_sub(1) / 2,
                    _ => rng.gen_range(1..=members),
                }
            };
            if size == 0 {
                bail!("{target} of {members} member(s) is empty");
            }
            let chosen = {
                let mut rng = n.rng.lock().map_err(|_| anyhow!("rng poisoned"))?;
                let mut c = (0..members).choose_multiple(&mut *rng, size);
                c.sort_unstable();
                c
            };
            member_target(chosen, leader)
        }
    })
}

/// The target of an aimed fault whose event names its victim
/// ([`super::aim::names_victim`]): the worker whose event it was, with the
/// grant and session the event carried.
pub fn aimed(n: &Nemesis, target: Target, seen: &super::aim::Seen) -> Result<Resolved> {
    let pid = *n
        .world
        .workers
        .get(&seen.worker)
        .with_context(|| format!("no worker {}", seen.worker))?;
    let v = Victim {
        worker: seen.worker,
        pid,
        lease: seen.session,
        revision: seen.grant,
        key: seen.key.clone(),
    };
    Ok(match target {
        Target::HolderToService => Resolved::Links {
            what: serde_json::json!({ "holder": v, "link": "holder → every member" }),
            proxies: n
                .world
                .links
                .worker_service
                .get(v.worker as usize)
                .cloned()
                .unwrap_or_default(),
        },
        _ => Resolved::Workers(vec![v]),
    })
}

/// Members as a target: their processes (pause, kill) or the links into them
/// (delay, partition); the fault module takes what it needs.
fn member_target(members: Vec<usize>, leader: Option<usize>) -> Resolved {
    Resolved::Members(
        members
            .into_iter()
            .map(|m| MemberRef {
                member: m,
                was_leader: leader == Some(m),
            })
            .collect(),
    )
}

/// The peer proxies of the given members (every link into each of them).
pub fn member_links(n: &Nemesis, members: &[MemberRef]) -> Vec<Link> {
    members
        .iter()
        .filter_map(|m| n.world.links.peers.get(m.member))
        .flatten()
        .cloned()
        .collect()
}

/// The leader now; asked again for a moment while an election is under way.
async fn leader(n: &Nemesis) -> Result<usize> {
    let end = tokio::time::Instant::now() + HOLDER_SEARCH;
    loop {
        match n.world.service.leader().await {
            Ok(l) => return Ok(l),
            Err(e) if tokio::time::Instant::now() >= end => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// The holder of a lock now: one the service's own owner records name (etcd's
/// owner keys, fencecheck's Redis owner values, ZooKeeper's owner nodes, the
/// Lease's holder), else one a worker reported holding (its `acquire` answer's
/// `entry` and `value`, [`super::reported`]) that the service confirms holding
/// right now — a library with its own key names and random owner values has no
/// owner record, and a client's word alone is never trusted.
async fn holder(n: &Nemesis) -> Result<Victim> {
    // Between holds nobody holds the lock for a moment: poll briefly. A look-up
    // that fails (a leader election, a member being killed) is tried again within
    // the same window rather than dropping the planned fault: the soak saw most of
    // its uninjected faults fail that way.
    let end = tokio::time::Instant::now() + HOLDER_SEARCH;
    let mut why = Why::default();
    loop {
        match n.world.service.holders().await {
            Ok(holders) if !holders.is_empty() => {
                let mut rng = n.rng.lock().map_err(|_| anyhow!("rng poisoned"))?;
                let h = holders.choose(&mut *rng).context("no holder")?;
                return Ok(Victim {
                    worker: h.worker,
                    // The pid the harness started (or found) for that worker: the
                    // one the worker registered with the service is its own view,
                    // which in a pod is its PID namespace's, not this machine's.
                    pid: n.world.workers.get(&h.worker).copied().unwrap_or(h.pid),
                    lease: Some(h.session),
                    revision: Some(h.grant),
                    key: Some(h.key.clone()),
                });
            }
            Ok(_) => why.service_answered = true,
            Err(e) => why.service_error = Some(format!("{e:#}")),
        }
        if let Some(v) = confirmed_report(n, &mut why).await? {
            return Ok(v);
        }
        if tokio::time::Instant::now() >= end {
            bail!("{}", why.reason());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A hold a worker reported that the service holds now, if any (chosen at
/// random among several); what was found otherwise goes into `why`.
async fn confirmed_report(n: &Nemesis, why: &mut Why) -> Result<Option<Victim>> {
    let mut ids: Vec<u32> = n.world.workers.keys().copied().collect();
    ids.sort_unstable();
    let mut confirmed = Vec::new();
    let reports = n
        .reported
        .lock()
        .map_err(|_| anyhow!("reported holds poisoned"))?
        .current(&n.run_dir, &ids);
    for r in reports {
        match n.world.service.holds(&r.entry, r.value.as_deref()).await {
            Ok(Some(true)) => confirmed.push(r),
            Ok(Some(false)) => why.not_held = Some(r),
            Ok(None) => why.unconfirmable = Some(r),
            Err(e) => why.service_error = Some(format!("{e:#}")),
        }
    }
    let mut rng = n.rng.lock().map_err(|_| anyhow!("rng poisoned"))?;
    let Some(r) = confirmed.choose(&mut *rng) else {
        return Ok(None);
    };
    let Some(&pid) = n.world.workers.get(&r.worker) else {
        return Ok(None);
    };
    Ok(Some(Victim {
        worker: r.worker,
        pid,
        lease: r.session,
        revision: r.grant,
        key: Some(r.key.clone()),
    }))
}

/// What the holder search found instead of a holder: its skip reason must say
/// which it was.
#[derive(Default)]
struct Why {
    /// The service answered at least once (naming no holder).
    service_answered: bool,
    service_error: Option<String>,
    /// The last reported hold the service said it does not hold.
    not_held: Option<super::reported::Reported>,
    /// The last reported hold the service cannot confirm either way.
    unconfirmable: Option<super::reported::Reported>,
}

impl Why {
    fn reason(&self) -> String {
        let within = format!("within {HOLDER_SEARCH:?}");
        if !self.service_answered {
            if let Some(e) = &self.service_error {
                return format!("the service did not answer the holder look-up {within}: {e}");
            }
        }
        let value = |r: &super::reported::Reported| {
            r.value
                .as_ref()
                .map(|v| format!(" with value `{v}`"))
                .unwrap_or_default()
        };
        if let Some(r) = &self.not_held {
            return format!(
                "the holder's key `{}`{} (reported by worker {}) was not held at the service at any look {within}",
                r.entry,
                value(r),
                r.worker
            );
        }
        if let Some(r) = &self.unconfirmable {
            return format!(
                "worker {} reported holding `{}`, which the service cannot confirm, and its owner records name no holder {within}",
                r.worker, r.entry
            );
        }
        format!("no acquisition was reported and the service named no holder {within}")
    }
}

/// A worker with its current session (if it has one registered).
async fn worker(n: &Nemesis, id: u32) -> Result<Victim> {
    let pid = *n
        .world
        .workers
        .get(&id)
        .with_context(|| format!("no worker {id}"))?;
    let session = n
        .world
        .service
        .sessions()
        .await?
        .iter()
        .filter(|s| s.worker == id)
        .map(|s| s.session)
        .max();
    Ok(Victim {
        worker: id,
        pid,
        lease: session,
        revision: None,
        key: None,
    })
}

#[cfg(test)]
mod tests {
    use super::super::reported::Reported;
    use super::Why;

    /// Each way a holder search can come up empty says which it was.
    #[test]
    fn a_failed_holder_search_says_what_it_found() {
        let none = Why {
            service_answered: true,
            ..Why::default()
        };
        assert_eq!(
            none.reason(),
            "no acquisition was reported and the service named no holder within 2s"
        );
        let down = Why {
            service_error: Some("connection refused".into()),
            ..Why::default()
        };
        assert!(
            down.reason().contains("did not answer"),
            "{}",
            down.reason()
        );
        let r = Reported {
            worker: 2,
            key: "k0".into(),
            entry: "lock:k0".into(),
            value: Some("Zm9v".into()),
            session: None,
            grant: None,
        };
        let unseen = Why {
            service_answered: true,
            not_held: Some(r.clone()),
            ..Why::default()
        };
        assert_eq!(
            unseen.reason(),
            "the holder's key `lock:k0` with value `Zm9v` (reported by worker 2) \
             was not held at the service at any look within 2s"
        );
        let unsure = Why {
            service_answered: true,
            unconfirmable: Some(r),
            ..Why::default()
        };
        assert!(
            unsure.reason().contains("cannot confirm"),
            "{}",
            unsure.reason()
        );
    }
}

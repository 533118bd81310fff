//! Resolving a scenario target to what it means right now. The holder is whoever
//! etcd says holds a lock at injection time: the oldest key under a lock's prefix,
//! whose lease the worker registered under `fencecheck/owner/<lease>`. The etcd
//! leader is found through the status API of each member.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use etcd_client::{Client, ConnectOptions, GetOptions};
use faultproxy::Proxy;
use rand::seq::SliceRandom;
use serde::Serialize;

use super::Nemesis;
use crate::scenario::Target;

#[derive(Debug, Clone, Serialize)]
pub struct Victim {
    pub worker: u32,
    pub pid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<i64>,
    /// The lock grant (CreateRevision) the worker holds, when it is a holder.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
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
        proxies: Vec<Proxy>,
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
        Target::WorkersToEtcd => Resolved::Links {
            what: serde_json::json!("every worker → every etcd member"),
            proxies: links.worker_etcd.iter().flatten().cloned().collect(),
        },
        Target::HolderToEtcd => {
            let h = holder(n).await?;
            Resolved::Links {
                what: serde_json::json!({ "holder": h, "link": "holder → every etcd member" }),
                proxies: links
                    .worker_etcd
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
        Target::EtcdMember(m) => {
            let leader = leader(n).await.ok();
            member_target(vec![m as usize], leader)
        }
        Target::EtcdLeader => {
            let l = leader(n).await?;
            member_target(vec![l], Some(l))
        }
        Target::EtcdMajorityMinority => {
            let l = leader(n).await?;
            let total = n.world.etcd_endpoints.len();
            // The leader plus enough others to make a minority: 1 of 3, 2 of 5.
            let mut minority = vec![l];
            minority.extend((0..total).filter(|&i| i != l).take((total - 1) / 2 - 1));
            member_target(minority, Some(l))
        }
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
pub fn member_links(n: &Nemesis, members: &[MemberRef]) -> Vec<Proxy> {
    members
        .iter()
        .filter_map(|m| n.world.links.peers.get(m.member).cloned())
        .collect()
}

async fn holder(n: &Nemesis) -> Result<Victim> {
    // Between holds nobody holds the lock for a moment: poll briefly.
    let end = tokio::time::Instant::now() + HOLDER_SEARCH;
    loop {
        let holders = holders(n).await?;
        if !holders.is_empty() {
            let mut rng = n.rng.lock().map_err(|_| anyhow!("rng poisoned"))?;
            return holders.choose(&mut *rng).cloned().context("no holder");
        }
        if tokio::time::Instant::now() >= end {
            bail!("no worker held a lock within {HOLDER_SEARCH:?}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The index of the member that is leader now, asking each member in turn.
pub async fn leader(n: &Nemesis) -> Result<usize> {
    for (i, ep) in n.world.etcd_endpoints.iter().enumerate() {
        let opts = ConnectOptions::new()
            .with_connect_timeout(Duration::from_millis(500))
            .with_timeout(Duration::from_secs(1));
        let status = async {
            let mut c = Client::connect([ep.as_str()], Some(opts)).await?;
            c.status().await
        };
        if let Ok(Ok(s)) = tokio::time::timeout(Duration::from_secs(2), status).await {
            let me = s.header().map(|h| h.member_id()).unwrap_or(0);
            if s.leader() != 0 && s.leader() == me {
                return Ok(i);
            }
        }
    }
    bail!("no etcd member reports itself leader")
}

/// A worker with its current session lease (if it has one registered).
async fn worker(n: &Nemesis, id: u32) -> Result<Victim> {
    let pid = *n
        .world
        .workers
        .get(&id)
        .with_context(|| format!("no worker {id}"))?;
    let owners = owners(n).await?;
    let lease = owners
        .iter()
        .filter(|(_, (w, _))| *w == id)
        .map(|(l, _)| *l)
        .max();
    Ok(Victim {
        worker: id,
        pid,
        lease,
        revision: None,
        key: None,
    })
}

/// lease → (worker, pid), from the owner keys.
async fn owners(n: &Nemesis) -> Result<BTreeMap<i64, (u32, u32)>> {
    let mut etcd = n.etcd.clone();
    let resp = tokio::time::timeout(
        Duration::from_secs(3),
        etcd.get("fencecheck/owner/", Some(GetOptions::new().with_prefix())),
    )
    .await
    .context("etcd did not answer the owner look-up")??;
    let mut out = BTreeMap::new();
    for kv in resp.kvs() {
        let v = kv.value_str().unwrap_or_default();
        let mut it = v.split_whitespace();
        if let (Some(w), Some(p)) = (it.next(), it.next()) {
            if let (Ok(w), Ok(p)) = (w.parse(), p.parse()) {
                out.insert(kv.lease(), (w, p));
            }
        }
    }
    Ok(out)
}

/// Current holders of every lock, as etcd sees them.
async fn holders(n: &Nemesis) -> Result<Vec<Victim>> {
    let mut etcd = n.etcd.clone();
    let resp = tokio::time::timeout(
        Duration::from_secs(3),
        etcd.get("fencecheck/lock/", Some(GetOptions::new().with_prefix())),
    )
    .await
    .context("etcd did not answer the holder look-up")??;
    // Lock name → (CreateRevision, lease) of its oldest key: the holder.
    let mut first: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for kv in resp.kvs() {
        let key = kv.key_str().unwrap_or_default();
        let Some((name, _)) = key.rsplit_once('/') else {
            continue;
        };
        let e = first.entry(name.to_string()).or_insert((i64::MAX, 0));
        if kv.create_revision() < e.0 {
            *e = (kv.create_revision(), kv.lease());
        }
    }
    let owners = owners(n).await?;
    let mut out = Vec::new();
    for (name, (rev, lease)) in first {
        if let Some((w, pid)) = owners.get(&lease) {
            out.push(Victim {
                worker: *w,
                pid: *pid,
                lease: Some(lease),
                revision: Some(rev),
                key: name.rsplit('/').next().map(str::to_string),
            });
        }
    }
    Ok(out)
}

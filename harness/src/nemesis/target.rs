//! Resolving a scenario target to the processes it means right now. The holder is
//! whoever etcd says holds a lock at injection time: the oldest key under a lock's
//! prefix, whose lease the worker registered under `fencecheck/owner/<lease>`.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use etcd_client::GetOptions;
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

const HOLDER_SEARCH: Duration = Duration::from_secs(2);

pub async fn resolve(n: &Nemesis, target: Target) -> Result<Vec<Victim>> {
    match target {
        Target::Holder => {
            // Between holds nobody holds the lock for a moment: poll briefly.
            let end = tokio::time::Instant::now() + HOLDER_SEARCH;
            loop {
                let holders = holders(n).await?;
                if !holders.is_empty() {
                    let pick = {
                        let mut rng = n.rng.lock().map_err(|_| anyhow!("rng poisoned"))?;
                        holders.choose(&mut *rng).cloned()
                    };
                    return pick.map(|v| vec![v]).context("no holder");
                }
                if tokio::time::Instant::now() >= end {
                    bail!("no worker held a lock within {HOLDER_SEARCH:?}");
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
        Target::RandomWorker => {
            let mut ids: Vec<u32> = n.workers.keys().copied().collect();
            ids.sort_unstable();
            let id = {
                let mut rng = n.rng.lock().map_err(|_| anyhow!("rng poisoned"))?;
                ids.choose(&mut *rng).copied()
            }
            .context("no workers")?;
            Ok(vec![worker(n, id).await?])
        }
        Target::Worker(id) => Ok(vec![worker(n, id).await?]),
        Target::AllWorkers => {
            let mut ids: Vec<u32> = n.workers.keys().copied().collect();
            ids.sort_unstable();
            let mut out = Vec::new();
            for id in ids {
                out.push(worker(n, id).await?);
            }
            Ok(out)
        }
    }
}

/// A worker with its current session lease (if it has one registered).
async fn worker(n: &Nemesis, id: u32) -> Result<Victim> {
    let pid = *n
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

//! The observer: a persistent recursive watch on `/fencecheck` (ZooKeeper ≥ 3.6),
//! turned into observations. A created lock child is read for its czxid and
//! ephemeralOwner (a node event carries neither); a deleted one is reported from
//! what was read when it appeared. A deleted owner node is a session's end: the
//! ensemble deletes a session's ephemerals when it expires or is closed.
//!
//! A persistent watch is not replayed across a reconnect (ZOOKEEPER-4698): what
//! happens while the harness's session is disconnected (a member killed, an
//! election) is unseen. So a disconnect is recorded as a `Gap`, and on reconnect
//! the observer reads the tree again and reports the differences (creations and
//! deletions it missed, stamped when it noticed them). A session that ends (the
//! harness's own) is replaced by a new one.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use tokio::sync::watch;
use zookeeper_client as zk;

use super::{split_lock_path, LockNode, ZkService, CALL};
use crate::history::monotonic_ns;
use crate::lock::zookeeper::{owner_session, parse_owner, LOCKS, OWNERS};
use crate::service::observe::{Observation, ObservationWriter};

const ROOT: &str = "/fencecheck";

/// What the observer knows of the tree.
#[derive(Default)]
struct Known {
    locks: BTreeMap<String, LockNode>,
    /// session → its worker, from the owner node's data.
    owners: BTreeMap<i64, Option<u32>>,
}

fn gap(out: &ObservationWriter, error: String) {
    out.write(&Observation::Gap {
        time_ns: monotonic_ns(),
        error,
    });
}

fn created(out: &ObservationWriter, path: &str, n: &LockNode) {
    out.write(&Observation::Created {
        time_ns: monotonic_ns(),
        key: n.key.clone(),
        grant: n.czxid,
        session: n.session,
        id: path.to_string(),
        value: None,
    });
}

fn deleted(out: &ObservationWriter, path: &str, n: &LockNode) {
    out.write(&Observation::Deleted {
        time_ns: monotonic_ns(),
        key: n.key.clone(),
        grant: n.czxid,
        session: n.session,
        id: path.to_string(),
    });
}

fn session_ended(out: &ObservationWriter, session: i64, worker: Option<u32>) {
    out.write(&Observation::SessionEnded {
        time_ns: monotonic_ns(),
        session,
        worker,
    });
}

/// Waits a little before trying again, or until `stop`.
async fn pause(stop: &mut watch::Receiver<bool>) {
    tokio::select! {
        _ = tokio::time::sleep(std::time::Duration::from_millis(200)) => {}
        _ = stop.changed() => {}
    }
}

pub(super) async fn observe(
    svc: &ZkService,
    out: ObservationWriter,
    mut stop: watch::Receiver<bool>,
) -> Result<()> {
    let mut known = Known::default();
    while !*stop.borrow() {
        let start = async {
            let c = svc.client().await?;
            let dirs = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
            c.mkdir(LOCKS, &dirs).await?;
            c.mkdir(OWNERS, &dirs).await?;
            let w = c
                .watch(ROOT, zk::AddWatchMode::PersistentRecursive)
                .await
                .context("adding the persistent watch")?;
            Ok::<_, anyhow::Error>((c, w))
        };
        let started = tokio::select! {
            r = tokio::time::timeout(CALL * 3, start) => r,
            _ = stop.changed() => return Ok(()),
        };
        let (c, mut w) = match started {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => {
                gap(&out, format!("watch: {e:#}"));
                pause(&mut stop).await;
                continue;
            }
            Err(_) => {
                gap(&out, "watch: no answer".into());
                pause(&mut stop).await;
                continue;
            }
        };
        // Events from here on are seen; reconcile what happened before. Until
        // that succeeds what was missed is unknown: start over.
        if let Err(e) = reconcile(svc, &c, &mut known, &out).await {
            gap(&out, format!("reading the tree: {e:#}"));
            pause(&mut stop).await;
            continue;
        }
        // After a disconnect, a reconnect is not always announced on the watcher
        // (seen after leader kills): poll the session state too, and on reconnect
        // start over — a fresh watch, then a reconcile.
        let mut disconnected = false;
        loop {
            let tick = tokio::time::sleep(std::time::Duration::from_millis(250));
            let ev = tokio::select! {
                e = w.changed() => e,
                _ = tick, if disconnected => {
                    let st = c.state();
                    if st == zk::SessionState::SyncConnected || st.is_terminated() {
                        break;
                    }
                    continue;
                }
                _ = stop.changed() => return Ok(()),
            };
            match ev.event_type {
                zk::EventType::Session => match ev.session_state {
                    zk::SessionState::SyncConnected => break,
                    s if s.is_terminated() => {
                        // No more events on this watcher (the crate would panic).
                        gap(&out, format!("observer session {s}"));
                        break;
                    }
                    s => {
                        if !disconnected {
                            gap(
                                &out,
                                format!("observer {s}: events until reconnect are unseen"),
                            );
                        }
                        disconnected = true;
                    }
                },
                zk::EventType::NodeCreated => on_created(&c, &ev.path, &mut known, &out).await,
                zk::EventType::NodeDeleted => on_deleted(&ev.path, &mut known, &out),
                _ => {}
            }
        }
    }
    Ok(())
}

fn owner_of(path: &str) -> Option<i64> {
    owner_session(path.strip_prefix(OWNERS)?.strip_prefix('/')?)
}

async fn on_created(c: &zk::Client, path: &str, known: &mut Known, out: &ObservationWriter) {
    if let Some((key, child)) = split_lock_path(path) {
        // Gone again already (a cancelled waiter): nothing to report either way.
        if let Ok(Ok(Some(stat))) = tokio::time::timeout(CALL, c.check_stat(path)).await {
            let n = LockNode::new(key, child, &stat);
            created(out, path, &n);
            known.locks.insert(path.to_string(), n);
        }
    } else if let Some(session) = owner_of(path) {
        let worker = match tokio::time::timeout(CALL, c.get_data(path)).await {
            Ok(Ok((data, _))) => parse_owner(&data).map(|(w, _)| w),
            _ => None,
        };
        known.owners.insert(session, worker);
    }
}

fn on_deleted(path: &str, known: &mut Known, out: &ObservationWriter) {
    if let Some(n) = known.locks.remove(path) {
        deleted(out, path, &n);
    } else if let Some(session) = owner_of(path) {
        let worker = known.owners.remove(&session).flatten();
        session_ended(out, session, worker);
    }
}

/// Reads the whole tree and reports what changed since `known`.
async fn reconcile(
    svc: &ZkService,
    c: &zk::Client,
    known: &mut Known,
    out: &ObservationWriter,
) -> Result<()> {
    let read = async {
        let locks = svc.lock_nodes(c).await?;
        let owners = svc.owners(c).await?;
        Ok::<_, anyhow::Error>((locks, owners))
    };
    let (locks, owners) = tokio::time::timeout(CALL, read)
        .await
        .context("no answer")??;
    for (path, n) in &known.locks {
        if !locks.contains_key(path) {
            deleted(out, path, n);
        }
    }
    for (path, n) in &locks {
        if !known.locks.contains_key(path) {
            created(out, path, n);
        }
    }
    for (session, worker) in &known.owners {
        if !owners.contains_key(session) {
            session_ended(out, *session, *worker);
        }
    }
    known.locks = locks;
    known.owners = owners.into_iter().map(|(s, (w, _))| (s, Some(w))).collect();
    Ok(())
}

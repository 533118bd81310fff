//! The observer: a persistent recursive watch on `/fencecheck` (ZooKeeper ≥ 3.6),
//! turned into observations. A created lock child is read for its czxid and
//! ephemeralOwner (a node event carries neither); a deleted one is reported from
//! what was read when it appeared. A deleted owner node is a session's end: the
//! ensemble deletes a session's ephemerals when it expires or is closed.
//!
//! An external client's session has no such node: its owner node is persistent,
//! written by the worker (`lock::external::owner`), and says nothing of the
//! session. Its end is read from the ensemble instead: when one of its lock
//! nodes (or its owner node) is deleted, the leader's session tracker (`dump`)
//! is asked whether the session is still there; if not, it ended, stamped when
//! the deletion was seen (the ensemble deletes a session's ephemerals as it
//! closes it). A deletion by a live session (a release) leaves it listed.
//!
//! A persistent watch is not replayed across a reconnect (ZOOKEEPER-4698): what
//! happens while the harness's session is disconnected (a member killed, an
//! election) is unseen. So a disconnect is recorded as a `Gap`, and on reconnect
//! the observer reads the tree again and reports the differences (creations and
//! deletions it missed, stamped when it noticed them). A session that ends (the
//! harness's own) is replaced by a new one.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use anyhow::{Context, Result};
use tokio::sync::{mpsc, watch};
use zookeeper_client as zk;

use super::{session_alive, split_lock_path, LockNode, OwnerNode, ZkService, CALL};
use crate::record::history::monotonic_ns;
use crate::record::observe::{Observation, ObservationWriter};
use crate::systems::zookeeper::keys::{owner_session, parse_owner, LOCKS, OWNERS};

/// The whole tree: a library's lock path may be anywhere ([`split_lock_path`]).
const ROOT: &str = "/";

/// What the observer knows of the tree.
#[derive(Default)]
struct Known {
    locks: BTreeMap<String, LockNode>,
    /// session → its worker, from the owner node's data.
    owners: BTreeMap<i64, Owner>,
    /// session → its worker, kept after the owner node goes: a worker deletes
    /// its persistent ones when it closes, maybe before the session ends.
    workers: BTreeMap<i64, u32>,
    /// Sessions whose ephemeral owner node went: their end is recorded (their
    /// lock nodes' deletions may come after it).
    ended: BTreeSet<i64>,
}

impl Known {
    fn set_owners(&mut self, owners: impl IntoIterator<Item = (i64, Owner)>) {
        self.owners = owners.into_iter().collect();
        for (s, o) in &self.owners {
            if let Some(w) = o.worker {
                self.workers.insert(*s, w);
            }
        }
    }
}

#[derive(Clone, Copy)]
struct Owner {
    worker: Option<u32>,
    /// The node is on the session it names: its deletion is the session's end.
    ephemeral: bool,
}

impl From<OwnerNode> for Owner {
    fn from(o: OwnerNode) -> Owner {
        Owner {
            worker: Some(o.worker),
            ephemeral: o.ephemeral,
        }
    }
}

/// How many `dump`s in a row must leave a session out for it to have ended,
/// and how far apart (see `ask_leader`).
const ABSENT_READINGS: u32 = 3;
const ABSENT_APART: std::time::Duration = std::time::Duration::from_millis(150);

/// A deletion that may mean its session ended: asked of the leader.
struct Ask {
    session: i64,
    worker: Option<u32>,
    seen_ns: u64,
}

/// Where the observer sends the deletions of sessions without an ephemeral owner
/// node (see the module's comment).
#[derive(Clone)]
struct Asks(mpsc::UnboundedSender<Ask>);

impl Asks {
    fn after_deletion(&self, known: &Known, session: i64, seen_ns: u64) {
        if session == 0 {
            return;
        }
        let owner = known.owners.get(&session);
        if owner.is_some_and(|o| o.ephemeral) || known.ended.contains(&session) {
            return;
        }
        let _ = self.0.send(Ask {
            session,
            worker: known.workers.get(&session).copied(),
            seen_ns,
        });
    }
}

/// Asks the leader, one deletion after the other (in order, off the watch loop
/// so the feed's stamps are not held up), and records each session's end once.
async fn ask_leader(
    clients: Vec<SocketAddr>,
    out: ObservationWriter,
    mut rx: mpsc::UnboundedReceiver<Ask>,
) {
    let mut ended = BTreeSet::new();
    while let Some(a) = rx.recv().await {
        if ended.contains(&a.session) {
            continue;
        }
        // An election may be under way: try for a few seconds. The watch
        // notification of a closing session's deletions goes out just before the
        // leader drops the session from its tracker, several round trips before
        // this question arrives.
        //
        // One `dump` that leaves a session out is not enough: the leader does
        // not lock its tracker for a dump, and a session touched while the dump
        // runs moves to a newer expiry bucket the dump may not list (ZooKeeper's
        // `ExpiryQueue.dump` copies the bucket times first). A live kazoo session
        // was once taken for ended that way. So the session must be missing from
        // `ABSENT_READINGS` dumps in a row, a moment apart; any dump listing it
        // says it lives.
        let mut absent = 0;
        let alive = loop {
            let deadline = tokio::time::Instant::now() + CALL;
            let reading = loop {
                match session_alive(&clients, a.session).await {
                    Ok(alive) => break Some(alive),
                    Err(e) if tokio::time::Instant::now() >= deadline => {
                        tracing::warn!(
                            "cannot tell whether session {:#x} ended: {e:#}",
                            a.session as u64
                        );
                        break None;
                    }
                    Err(_) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
                }
            };
            match reading {
                Some(false) => {
                    absent += 1;
                    if absent >= ABSENT_READINGS {
                        break Some(false);
                    }
                    tokio::time::sleep(ABSENT_APART).await;
                }
                other => break other,
            }
        };
        if alive == Some(false) {
            ended.insert(a.session);
            out.write(&Observation::SessionEnded {
                time_ns: a.seen_ns,
                session: a.session,
                worker: a.worker,
            });
        }
    }
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
    stop: watch::Receiver<bool>,
) -> Result<()> {
    let (tx, rx) = mpsc::unbounded_channel();
    let asker = tokio::spawn(ask_leader(svc.clients.clone(), out.clone(), rx));
    let res = watch_tree(svc, &out, stop, Asks(tx)).await;
    // The sender is gone: the asker answers what is queued, then ends.
    if tokio::time::timeout(CALL * 2, asker).await.is_err() {
        tracing::warn!("the last session-end questions to the leader went unanswered");
    }
    res
}

async fn watch_tree(
    svc: &ZkService,
    out: &ObservationWriter,
    mut stop: watch::Receiver<bool>,
    asks: Asks,
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
                gap(out, format!("watch: {e:#}"));
                pause(&mut stop).await;
                continue;
            }
            Err(_) => {
                gap(out, "watch: no answer".into());
                pause(&mut stop).await;
                continue;
            }
        };
        // Events from here on are seen; reconcile what happened before. Until
        // that succeeds what was missed is unknown: start over.
        if let Err(e) = reconcile(svc, &c, &mut known, out, &asks).await {
            gap(out, format!("reading the tree: {e:#}"));
            pause(&mut stop).await;
            continue;
        }
        // Watching, then read what was there: nothing falls between.
        out.ready();
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
                        gap(out, format!("observer session {s}"));
                        break;
                    }
                    s => {
                        if !disconnected {
                            gap(
                                out,
                                format!("observer {s}: events until reconnect are unseen"),
                            );
                        }
                        disconnected = true;
                    }
                },
                zk::EventType::NodeCreated => on_created(&c, &ev.path, &mut known, out).await,
                zk::EventType::NodeDeleted => on_deleted(&ev.path, &mut known, out, &asks),
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
        // Gone again already: as before this distinction was drawn, its
        // deletion will be taken for the session's end.
        let owner = match tokio::time::timeout(CALL, c.get_data(path)).await {
            Ok(Ok((data, stat))) => Owner {
                worker: parse_owner(&data).map(|(w, _)| w),
                ephemeral: stat.ephemeral_owner != 0,
            },
            _ => Owner {
                worker: None,
                ephemeral: true,
            },
        };
        if let Some(w) = owner.worker {
            known.workers.insert(session, w);
        }
        known.owners.insert(session, owner);
    }
}

fn on_deleted(path: &str, known: &mut Known, out: &ObservationWriter, asks: &Asks) {
    if let Some(n) = known.locks.remove(path) {
        deleted(out, path, &n);
        asks.after_deletion(known, n.session, monotonic_ns());
    } else if let Some(session) = owner_of(path) {
        owner_deleted(known, session, out, asks);
    }
}

/// An ephemeral owner node goes with its session; a persistent one is the
/// worker's doing, and the leader is asked.
fn owner_deleted(known: &mut Known, session: i64, out: &ObservationWriter, asks: &Asks) {
    match known.owners.get(&session).copied() {
        Some(o) if !o.ephemeral => {
            asks.after_deletion(known, session, monotonic_ns());
        }
        o => {
            session_ended(out, session, o.and_then(|o| o.worker));
            known.ended.insert(session);
        }
    }
    known.owners.remove(&session);
}

/// Reads the whole tree and reports what changed since `known`.
async fn reconcile(
    svc: &ZkService,
    c: &zk::Client,
    known: &mut Known,
    out: &ObservationWriter,
    asks: &Asks,
) -> Result<()> {
    let read = async {
        let locks = svc.lock_nodes(c).await?;
        let owners = svc.owner_nodes(c).await?;
        Ok::<_, anyhow::Error>((locks, owners))
    };
    let (locks, owners) = tokio::time::timeout(CALL, read)
        .await
        .context("no answer")??;
    for (path, n) in &known.locks {
        if !locks.contains_key(path) {
            deleted(out, path, n);
            asks.after_deletion(known, n.session, monotonic_ns());
        }
    }
    for (path, n) in &locks {
        if !known.locks.contains_key(path) {
            created(out, path, n);
        }
    }
    let gone: Vec<i64> = known
        .owners
        .keys()
        .filter(|s| !owners.contains_key(s))
        .copied()
        .collect();
    for session in gone {
        owner_deleted(known, session, out, asks);
    }
    known.locks = locks;
    known.set_owners(owners.into_iter().map(|(s, o)| (s, o.into())));
    Ok(())
}

//! ZooKeeper behind the lock-service seam.
//!
//! The service: holders from the lock children (the lowest sequence of each lock path
//! holds; its ephemeralOwner names the session, whose owner node names the
//! worker), the leader from each member's `srvr`, `expire-session` by resuming the
//! session from another connection and closing it (ZooKeeper's own tests' way),
//! and the observer as a persistent recursive watch on the whole tree: a lock child
//! is a sequential node under any path that names a storage key (a library's own
//! lock path, [`split_lock_path`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use zookeeper_client as zk;

mod feed;
mod wire;

use crate::record::observe::ObservationWriter;
use crate::scenario::ServiceKind;
use crate::systems::service::{Holder, LockService, SessionOwner};
use crate::systems::zookeeper::keys::{owner_session, parse_owner, LOCKS, OWNERS};

/// Bounds every call the harness makes to the ensemble.
const CALL: Duration = Duration::from_secs(3);
/// Sends a four-letter word to `addr` and returns the answer (the member closes the
/// connection after it). Bounded by one second.
pub async fn four_letter(addr: SocketAddr, word: &str) -> Result<String> {
    let ask = async {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(word.as_bytes()).await?;
        let mut out = String::new();
        s.read_to_string(&mut out).await?;
        Ok::<_, std::io::Error>(out)
    };
    tokio::time::timeout(Duration::from_secs(1), ask)
        .await
        .with_context(|| format!("{word} to {addr}: no answer"))?
        .with_context(|| format!("{word} to {addr}"))
}

/// The `Mode:` of a `srvr` answer: leader, follower, standalone; none while the
/// member is not serving ("This ZooKeeper instance is not currently serving").
pub fn mode(srvr: &str) -> Option<&str> {
    srvr.lines()
        .find_map(|l| l.strip_prefix("Mode: "))
        .map(str::trim)
}

/// Polls `srvr` until the member serves (has a mode: it joined a quorum). `ruok`
/// would not do: a member answers `imok` before it has a quorum.
pub async fn wait_ready(what: &str, client: SocketAddr, deadline: Duration) -> Result<()> {
    crate::proc::poll_until(what, deadline, || async move {
        four_letter(client, "srvr")
            .await
            .is_ok_and(|a| mode(&a).is_some())
    })
    .await
}

/// The harness's handle: a session to every member, directly (never through the
/// workers' proxies), opened again if it ends.
pub struct ZkService {
    clients: Vec<SocketAddr>,
    cluster: String,
    zk: Mutex<Option<zk::Client>>,
}

/// The harness's own session timeout: long, so a member restart or a leader
/// election does not end it.
const HARNESS_SESSION: Duration = Duration::from_secs(6);

impl ZkService {
    pub async fn connect(clients: &[SocketAddr]) -> Result<ZkService> {
        let svc = ZkService {
            clients: clients.to_vec(),
            cluster: clients
                .iter()
                .map(SocketAddr::to_string)
                .collect::<Vec<_>>()
                .join(","),
            zk: Mutex::new(None),
        };
        svc.client().await?;
        Ok(svc)
    }

    /// The current session, or a new one if there is none or it ended.
    async fn client(&self) -> Result<zk::Client> {
        let mut cur = self.zk.lock().await;
        if let Some(c) = cur.as_ref() {
            if !c.state().is_terminated() {
                return Ok(c.clone());
            }
        }
        let connect = zk::Client::connector()
            .with_session_timeout(HARNESS_SESSION)
            .connect(&self.cluster);
        let c = tokio::time::timeout(CALL * 2, connect)
            .await
            .context("no ZooKeeper member answered")?
            .context("cannot connect to ZooKeeper")?;
        *cur = Some(c.clone());
        Ok(c)
    }

    /// session → (worker, pid), from the owner nodes.
    async fn owners(&self, c: &zk::Client) -> Result<BTreeMap<i64, (u32, u32)>> {
        Ok(self
            .owner_nodes(c)
            .await?
            .into_iter()
            .map(|(s, o)| (s, (o.worker, o.pid)))
            .collect())
    }

    /// session → its owner node.
    async fn owner_nodes(&self, c: &zk::Client) -> Result<BTreeMap<i64, OwnerNode>> {
        let mut out = BTreeMap::new();
        let names = match c.list_children(OWNERS).await {
            Err(zk::Error::NoNode) => return Ok(out),
            r => r.context("listing the owner nodes")?,
        };
        for name in names {
            let Some(session) = owner_session(&name) else {
                continue;
            };
            match c.get_data(&format!("{OWNERS}/{name}")).await {
                Ok((data, stat)) => {
                    if let Some((worker, pid)) = parse_owner(&data) {
                        let ephemeral = stat.ephemeral_owner != 0;
                        out.insert(
                            session,
                            OwnerNode {
                                worker,
                                pid,
                                ephemeral,
                            },
                        );
                    }
                }
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(e).context("reading an owner node"),
            }
        }
        Ok(out)
    }

    /// Every lock node now: path → (key, czxid, session), wherever a library
    /// put its lock path: the whole tree is walked (it is a few nodes: the run
    /// owns its ensemble), except ZooKeeper's own `/zookeeper` and the owners.
    async fn lock_nodes(&self, c: &zk::Client) -> Result<BTreeMap<String, LockNode>> {
        let mut out = BTreeMap::new();
        let mut dirs = vec!["/".to_string()];
        while let Some(dir) = dirs.pop() {
            let children = match c.list_children(&dir).await {
                Err(zk::Error::NoNode) => continue,
                r => r.context("listing the tree")?,
            };
            for child in children {
                let path = if dir == "/" {
                    format!("/{child}")
                } else {
                    format!("{dir}/{child}")
                };
                if path == "/zookeeper" || path == OWNERS {
                    continue;
                }
                if let Some((key, child)) = split_lock_path(&path) {
                    if let Some(stat) = c.check_stat(&path).await.context("reading a lock node")? {
                        out.insert(path.clone(), LockNode::new(key, child, &stat));
                    }
                    // A lock node has no children of its own.
                    continue;
                }
                dirs.push(path);
            }
        }
        Ok(out)
    }
}

/// An owner node: its worker, and whether it is ephemeral (a built-in client's,
/// on the session it names: its deletion is that session's end) or persistent
/// (an external client's, written by the worker: it says nothing of the session).
#[derive(Debug, Clone, Copy)]
struct OwnerNode {
    worker: u32,
    pid: u32,
    ephemeral: bool,
}

/// Whether the ensemble still has `session`, from the leader's own session
/// tracker: `dump` on the leader (or a standalone member) lists every session it
/// tracks, expiring or not (local sessions are off). Errors when no member
/// answers as leader.
async fn session_alive(clients: &[SocketAddr], session: i64) -> Result<bool> {
    for a in clients {
        let Ok(ans) = four_letter(*a, "srvr").await else {
            continue;
        };
        if !matches!(mode(&ans), Some("leader" | "standalone")) {
            continue;
        }
        let dump = four_letter(*a, "dump").await?;
        return tracked_sessions(&dump)
            .map(|ids| ids.contains(&session))
            .with_context(|| format!("{a}: not a `dump` answer: {dump:?}"));
    }
    bail!("no ZooKeeper member answers as leader")
}

/// The session ids of a `dump` answer's tracker part:
///
/// ```text
/// SessionTracker dump:
/// Session Sets (1)/(1):
/// 1 expire at Tue Dec 01 05:14:06 UTC 2026:
///     0x100004094fe0000
/// ephemeral nodes dump:
/// ```
fn tracked_sessions(dump: &str) -> Option<Vec<i64>> {
    let (_, rest) = dump.split_once("SessionTracker dump:")?;
    let (tracker, _) = rest.split_once("ephemeral nodes dump:")?;
    Some(
        tracker
            .split_whitespace()
            .filter_map(|t| t.strip_prefix("0x"))
            .filter_map(|h| u64::from_str_radix(h, 16).ok())
            .map(|s| s as i64)
            .collect(),
    )
}

/// A lock node as the harness saw it.
#[derive(Debug, Clone)]
struct LockNode {
    key: String,
    seq: i64,
    czxid: i64,
    session: i64,
}

impl LockNode {
    fn new(key: &str, child: &str, stat: &zk::Stat) -> LockNode {
        LockNode {
            key: key.to_string(),
            seq: sequence(child).unwrap_or(i64::MAX),
            czxid: stat.czxid,
            session: stat.ephemeral_owner,
        }
    }
}

/// The sequence number of `_c_<uuid>-lock-0000000042` or
/// `3f2a…__lock__0000000042`: what orders waiters.
/// Any recipe's child: ZooKeeper appends the sequence as 10 digits (`%010d`) to
/// whatever prefix the library chose — Curator `_c_<uuid>-lock-`, kazoo
/// `<uuid hex>__lock__`, fencecheck's own (Curator's).
fn sequence(child: &str) -> Option<i64> {
    let digits = child.len().checked_sub(10).and_then(|i| child.get(i..))?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A lock node's path → (storage key, child): a child of
/// `/fencecheck/locks/<key>` (the lock path the adapter is given, as a library
/// uses it), or a sequential child (ZooKeeper's 10-digit suffix) of any other
/// path that names a storage key ([`crate::systems::entry`]: a library's own
/// lock path, `/tooz/locks/k0`). Never the owner nodes nor ZooKeeper's own.
fn split_lock_path(path: &str) -> Option<(&str, &str)> {
    if let Some(rest) = path.strip_prefix(LOCKS).and_then(|r| r.strip_prefix('/')) {
        return rest.split_once('/').filter(|(_, c)| !c.contains('/'));
    }
    if path.starts_with(OWNERS) || path.starts_with("/zookeeper") {
        return None;
    }
    let (parent, child) = path.rsplit_once('/')?;
    sequence(child)?;
    let key = crate::systems::entry::storage_key(parent, &format!("{LOCKS}/"))?;
    Some((key, child))
}

#[async_trait::async_trait]
impl LockService for ZkService {
    fn kind(&self) -> ServiceKind {
        ServiceKind::Zookeeper
    }

    async fn holders(&self) -> Result<Vec<Holder>> {
        let c = self.client().await?;
        let look = async {
            let nodes = self.lock_nodes(&c).await?;
            let owners = self.owners(&c).await?;
            Ok::<_, anyhow::Error>((nodes, owners))
        };
        let (nodes, owners) = tokio::time::timeout(CALL, look)
            .await
            .context("ZooKeeper did not answer the holder look-up")??;
        // The lowest sequence under each lock path holds.
        let mut first: BTreeMap<&str, &LockNode> = BTreeMap::new();
        for n in nodes.values() {
            let e = first.entry(&n.key).or_insert(n);
            if n.seq < e.seq {
                *e = n;
            }
        }
        Ok(first
            .into_iter()
            .filter_map(|(key, n)| {
                let (worker, pid) = *owners.get(&n.session)?;
                Some(Holder {
                    worker,
                    pid,
                    session: n.session,
                    grant: n.czxid,
                    key: key.to_string(),
                })
            })
            .collect())
    }

    async fn sessions(&self) -> Result<Vec<SessionOwner>> {
        let c = self.client().await?;
        let owners = tokio::time::timeout(CALL, self.owners(&c))
            .await
            .context("ZooKeeper did not answer the session look-up")??;
        Ok(SessionOwner::from_map(owners))
    }

    async fn leader(&self) -> Result<usize> {
        for (i, a) in self.clients.iter().enumerate() {
            if let Ok(ans) = four_letter(*a, "srvr").await {
                if matches!(mode(&ans), Some("leader" | "standalone")) {
                    return Ok(i);
                }
            }
        }
        bail!("no ZooKeeper member reports itself leader")
    }

    async fn expire_session(&self, session: i64) -> Result<serde_json::Value> {
        let hex = format!("{:#x}", session as u64);
        let mut errors = Vec::new();
        let mut sent = false;
        // A few rounds over the members: one may be down or not serving, and a
        // live owner may win the race for its session once.
        let mut attempts = 0;
        for _round in 0..3 {
            for a in &self.clients {
                attempts += 1;
                let res = tokio::time::timeout(CALL, wire::close_session(*a, session)).await;
                let what = match res {
                    Ok(Ok(wire::Closed::Yes)) => "closed",
                    // Refused after an attempt whose close may have landed: done.
                    Ok(Ok(wire::Closed::Refused)) if sent => "closed (the answer was lost)",
                    Ok(Ok(wire::Closed::Refused)) => {
                        bail!("ZooKeeper does not know session {hex}: already ended")
                    }
                    Ok(Err(e)) => {
                        sent = true;
                        errors.push(format!("{a}: {e:#}"));
                        continue;
                    }
                    Err(_) => {
                        sent = true;
                        errors.push(format!("{a}: timed out"));
                        continue;
                    }
                };
                return Ok(serde_json::json!({
                    "action": "resumed the session from a second connection (password \
                               derived from its id, as the server does) and closed it",
                    "result": what,
                    "session": hex,
                    "member": a.to_string(),
                    "attempts": attempts,
                    "errors": errors,
                }));
            }
        }
        bail!("cannot expire session {hex}: {}", errors.join("; "))
    }

    async fn observe(
        &self,
        out: ObservationWriter,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Result<()> {
        feed::observe(self, out, stop).await
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn tracked_sessions_reads_only_the_tracker_part() {
        let dump = "SessionTracker dump:\nSession Sets (2)/(2):\n\
                    1 expire at Tue Dec 01 05:14:06 UTC 2026:\n\t0x100004094fe0000\n\
                    1 expire at Tue Dec 01 05:14:08 UTC 2026:\n\t0xfe\n\
                    ephemeral nodes dump:\nSessions with Ephemerals (1):\n\
                    0x7:\n\t/e\nConnections dump:\n\tip: /127.0.0.1:1 sessionId: 0x9\n";
        assert_eq!(
            super::tracked_sessions(dump),
            Some(vec![0x100004094fe0000, 0xfe])
        );
        assert_eq!(
            super::tracked_sessions("This ZooKeeper instance is not currently serving"),
            None
        );
    }

    #[test]
    fn lock_children_are_recognised_under_any_lock_path_naming_a_key() {
        use super::split_lock_path as split;
        let kazoo = "3f2a9b__lock__0000000007";
        assert_eq!(
            split(&format!("/fencecheck/locks/k3/{kazoo}")),
            Some(("k3", kazoo))
        );
        assert_eq!(
            split(&format!("/tooz/locks/fencecheck/locks/k3/{kazoo}")),
            Some(("k3", kazoo))
        );
        assert_eq!(split(&format!("/tooz/k3/{kazoo}")), Some(("k3", kazoo)));
        assert_eq!(split("/tooz/k3/not-sequential"), None);
        assert_eq!(split(&format!("/tooz/other/{kazoo}")), None);
        assert_eq!(split("/fencecheck/owners/1a2b"), None);
        assert_eq!(split("/fencecheck/locks/k3"), None);
    }

    #[test]
    fn sequence_reads_every_recipe() {
        assert_eq!(super::sequence("_c_0f3e-9a-lock-0000000042"), Some(42));
        assert_eq!(super::sequence("3f2a9b__lock__0000000007"), Some(7));
        assert_eq!(super::sequence("owner"), None);
        assert_eq!(super::sequence("x-lock-00000000zz"), None);
    }
}

//! ZooKeeper behind the lock-client seam, on the `zookeeper-client` crate.
//!
//! - A session is a ZooKeeper session with timeout = the scenario's TTL, kept alive
//!   by the crate's pings, against every member (`cfg.endpoints`, through this
//!   worker's proxies). Its owner node `/fencecheck/owners/<session hex>`
//!   (ephemeral, data "<worker> <pid>") lets the harness map a session to a worker;
//!   it disappears with the session, which is what the observer watches for.
//! - The lock is the recipe Curator's `InterProcessMutex` and kazoo's `Lock` use, as
//!   the crate implements it (`Client::lock` with `LockPrefix::new_curator`): an
//!   ephemeral sequential child `_c_<uuid>-lock-<seq>` of `/fencecheck/locks/<key>`;
//!   the lowest sequence holds; each waiter watches only its predecessor (no herd);
//!   a create whose answer was lost is found again by its uuid (Curator's
//!   "protected" mode), so a lost answer leaves no orphan waiter behind.
//! - The grant is the lock node's czxid, read right after the lock is granted: a
//!   total order of creations in the ensemble, so a later grant always has a larger
//!   one. A missing node means the lock was already lost (the session ended while
//!   the answer was on its way), as etcd's client reads CreateRevision after `Lock`.
//!
//! Session loss: `Session.lost` says why once the client *knows* the session is
//! gone — the server refused to resume it (expired), the crate gave up
//! reconnecting for a whole session timeout (it then calls the session expired
//! itself, which the server will have done too), or it was closed. A disconnect
//! alone is not a loss: the session may well survive it (the crate reconnects to
//! another member within the timeout and the server keeps the ephemerals), which
//! Curator and kazoo call SUSPENDED, not LOST. Reporting it as lost would make the
//! worker give up locks it still holds; an unaware client keeps going, which is
//! the behaviour fencing tokens exist for.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::sync::watch;
use zookeeper_client as zk;

use super::keys::{lock_dir, owner_data, owner_path, LOCK_NAME, OWNERS};
use crate::systems::client::{Acquire, ClientConfig, Granted, LockClient, Session, RPC_TIMEOUT};

fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

pub struct ZkClient {
    /// "host:port,host:port": every member, through this worker's proxies.
    cluster: String,
    ttl: Duration,
    worker: u32,
    zk: Option<zk::Client>,
    /// The held lock nodes, by path. Dropping one deletes its node in the
    /// background, which is what the crate does for an abandoned lock.
    held: HashMap<String, zk::OwnedLockClient>,
    /// Watches the session state for `Session.lost`.
    state_task: Option<tokio::task::JoinHandle<()>>,
}

impl ZkClient {
    /// Only checks the configuration: the session (and its connection) is opened
    /// by `open_session`, since a ZooKeeper connection *is* a session.
    pub async fn connect(cfg: &ClientConfig) -> Result<ZkClient> {
        if cfg.endpoints.is_empty() {
            bail!("no ZooKeeper endpoints");
        }
        // ZooKeeper negotiates the timeout into [2, 20] × tickTime and silently
        // clamps what is outside; fencecheck's members run tickTime = 1 s.
        if cfg.ttl < Duration::from_secs(2) || cfg.ttl > Duration::from_secs(20) {
            bail!(
                "ZooKeeper session timeout {:?} outside [2s, 20s] (tickTime = 1s)",
                cfg.ttl
            );
        }
        Ok(ZkClient {
            cluster: cfg.endpoints.join(","),
            ttl: cfg.ttl,
            worker: cfg.worker,
            zk: None,
            held: HashMap::new(),
            state_task: None,
        })
    }

    /// Drops the current session's handles: once the last `Client` clone is gone
    /// the crate closes the session; returns a watcher to wait for that.
    fn drop_session(&mut self) -> Option<zk::StateWatcher> {
        if let Some(t) = self.state_task.take() {
            t.abort();
        }
        self.held.clear();
        self.zk.take().map(|c| c.state_watcher())
    }
}

/// Says on `lost` why the session ended, once it has. A `Disconnected` state is
/// not an end (see the module comment).
async fn watch_state(mut states: zk::StateWatcher, lost: watch::Sender<Option<String>>) {
    let mut state = states.peek_state();
    while !state.is_terminated() {
        state = states.changed().await;
    }
    let reason = match state {
        zk::SessionState::Expired => "session expired".to_string(),
        zk::SessionState::Closed => "session closed".to_string(),
        other => format!("session ended: {other}"),
    };
    let _ = lost.send(Some(reason));
}

#[async_trait::async_trait]
impl LockClient for ZkClient {
    async fn open_session(&mut self) -> Result<Session> {
        self.drop_session();
        // The crate cycles through the members until one accepts, and gives up
        // after about a session timeout; RPC_TIMEOUT bounds it all the same.
        let connect = zk::Client::connector()
            .with_session_timeout(self.ttl)
            .connect(&self.cluster);
        let client = tokio::time::timeout(RPC_TIMEOUT, connect)
            .await
            .context("ZooKeeper session: no member answered in time")?
            .context("ZooKeeper session")?;
        let id = client.session_id().0;
        let owner = owner_data(self.worker, std::process::id());
        let made = async {
            client.mkdir(OWNERS, &persistent()).await?;
            client
                .create(
                    &owner_path(id),
                    owner.as_bytes(),
                    &zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all()),
                )
                .await
        };
        tokio::time::timeout(RPC_TIMEOUT, made)
            .await
            .context("creating the owner node timed out")?
            .context("creating the owner node")?;
        let (tx, rx) = watch::channel(None);
        self.state_task = Some(tokio::spawn(watch_state(client.state_watcher(), tx)));
        self.zk = Some(client);
        Ok(Session { id, lost: rx })
    }

    async fn acquire(&mut self, name: &str) -> Acquire {
        let Some(client) = self.zk.clone() else {
            return Acquire::Failed {
                error: "no session".into(),
                session_gone: true,
                told: None,
            };
        };
        let session = client.session_id().0;
        let dir = lock_dir(name);
        let prefix = match zk::LockPrefix::new_curator(&dir, LOCK_NAME) {
            Ok(p) => p,
            Err(e) => {
                return Acquire::Failed {
                    error: format!("lock path {dir}: {e}"),
                    session_gone: false,
                    told: None,
                }
            }
        };
        let options = match zk::LockOptions::new(zk::Acls::anyone_all())
            .with_ancestor_options(persistent())
        {
            Ok(o) => o,
            Err(e) => {
                return Acquire::Failed {
                    error: format!("lock options: {e}"),
                    session_gone: false,
                    told: None,
                }
            }
        };
        // Waits as long as the caller lets it; dropping this future deletes the
        // waiter node (the crate's guard), so a cancelled wait leaves nothing.
        let lock = match client.lock(prefix, b"", options).await {
            Ok(l) => l.into_owned(),
            Err(e) => {
                return Acquire::Failed {
                    error: format!("lock: {e}"),
                    session_gone: client.state().is_terminated()
                        || matches!(e, zk::Error::SessionExpired | zk::Error::ClientClosed),
                    told: None,
                }
            }
        };
        let id = lock.lock_path().to_string();
        self.held.insert(id.clone(), lock);
        match tokio::time::timeout(RPC_TIMEOUT, client.check_stat(&id)).await {
            Ok(Ok(Some(stat))) => Acquire::Granted(Granted {
                grant: stat.czxid,
                session,
                id,
                counter: None,
                external: None,
            }),
            Ok(Ok(None)) => {
                self.held.remove(&id);
                Acquire::Failed {
                    error: "lock node gone right after the grant: the session had ended".into(),
                    session_gone: true,
                    told: Some(id),
                }
            }
            Ok(Err(e)) => Acquire::Unknown {
                error: format!("reading the lock node: {e}"),
                id: Some(id),
            },
            Err(_) => Acquire::Unknown {
                error: "reading the lock node timed out".into(),
                id: Some(id),
            },
        }
    }

    async fn release(&mut self, g: &Granted) -> Result<()> {
        let client = self.zk.clone().context("no session")?;
        let res = tokio::time::timeout(RPC_TIMEOUT, client.delete(&g.id, None)).await;
        // Dropping the handle after a failed delete retries it in the background
        // (Curator's "guaranteed delete"); the session's end removes it anyway.
        self.held.remove(&g.id);
        match res {
            Err(_) => bail!("deleting {} timed out", g.id),
            // Already gone: the session ended and took it (etcd's Unlock of a
            // vanished key answers OK too).
            Ok(Ok(())) | Ok(Err(zk::Error::NoNode)) => Ok(()),
            Ok(Err(e)) => Err(e).with_context(|| format!("deleting {}", g.id)),
        }
    }

    async fn close_session(&mut self) {
        // The crate sends CloseSession once the last handle is dropped; wait
        // (bounded) for it so the process does not exit before it is sent.
        let Some(mut states) = self.drop_session() else {
            return;
        };
        let _ = tokio::time::timeout(RPC_TIMEOUT, async {
            while !states.peek_state().is_terminated() {
                states.changed().await;
            }
        })
        .await;
    }
}

//! Telling the harness which worker an external client's session belongs to, so
//! faults aimed at the holder find its worker (and with it the client, in the
//! worker's process group). The adapter knows nothing of fencecheck's owner
//! entries; the worker writes them itself, next to what the library wrote, with
//! its own connection through its own proxies:
//!
//! - etcd: `fencecheck/owner/<lease hex>` = "<worker> <pid>" **on the client's
//!   lease** (leases are cluster-wide), so it lives exactly as long as the lease.
//!   Libraries that take a lease per lock (python-etcd3) are covered by reading
//!   the granted entry's lease after each grant.
//! - ZooKeeper: a persistent `/fencecheck/owners/<session hex>` (an ephemeral node
//!   can only belong to the worker's own session, not the client's); the worker
//!   deletes it when it closes. A session id is never reused, so a stale one
//!   names nobody's lock. After each grant the worker reads the granted node's
//!   ephemeralOwner and names that session's owner too: Curator opens a session
//!   of its own after a loss and may be granted under it, unannounced.
//! - Redis and Redlock: the owner value the worker hands the client in `acquire`
//!   (`<worker>:<pid>:<session>:<nonce>`), which the library stores as the lock's
//!   value — nothing to write.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::{Context, Result};
use etcd_client::{ConnectOptions, PutOptions};
use zookeeper_client as zk;

use crate::scenario::ServiceKind;
use crate::systems::client::ClientConfig;
use crate::systems::etcd::client::owner_key;
use crate::systems::zookeeper::client as zkl;

const CALL: Duration = Duration::from_secs(3);

pub enum Owners {
    Etcd {
        client: Option<Box<etcd_client::Client>>,
        endpoints: Vec<String>,
        done: HashSet<i64>,
    },
    Zookeeper {
        client: Option<zk::Client>,
        cluster: String,
        /// The owner nodes written (one per session).
        nodes: Vec<String>,
    },
    /// Redis, Redlock: carried in the lock's value.
    InValue,
}

fn owner_text(worker: u32) -> String {
    format!("{worker} {}", std::process::id())
}

impl Owners {
    pub fn new(cfg: &ClientConfig) -> Owners {
        match cfg.service {
            ServiceKind::Etcd => Owners::Etcd {
                client: None,
                endpoints: cfg
                    .endpoints
                    .iter()
                    .map(|e| format!("http://{e}"))
                    .collect(),
                done: HashSet::new(),
            },
            ServiceKind::Zookeeper => Owners::Zookeeper {
                client: None,
                cluster: cfg.endpoints.join(","),
                nodes: Vec::new(),
            },
            ServiceKind::Redis | ServiceKind::Redlock => Owners::InValue,
        }
    }

    /// After `open`: the session the client reported (etcd lease, ZooKeeper
    /// session id; 0 when the library has none).
    pub async fn session(&mut self, worker: u32, session: i64) -> Result<()> {
        if session == 0 {
            return Ok(());
        }
        match self {
            Owners::Etcd { .. } => self.etcd_lease(worker, session).await,
            Owners::Zookeeper { .. } => self.zk_session(worker, session).await,
            Owners::InValue => Ok(()),
        }
    }

    /// After a grant: reads the entry's lease or session from the service (etcd:
    /// a library may take a lease per lock; ZooKeeper: Curator may be on a
    /// session it opened itself) and names its owner if not done yet; returns
    /// it.
    pub async fn granted(&mut self, worker: u32, entry: &str) -> Result<Option<i64>> {
        match self {
            Owners::Etcd { .. } => self.etcd_granted(worker, entry).await,
            Owners::Zookeeper { .. } => {
                let c = self.zk().await?;
                let stat = tokio::time::timeout(CALL, c.check_stat(entry))
                    .await
                    .context("reading the granted node timed out")?
                    .context("reading the granted node")?;
                // Gone already (its session ended): nobody's to name.
                let Some(session) = stat.map(|s| s.ephemeral_owner).filter(|&s| s != 0) else {
                    return Ok(None);
                };
                self.zk_session(worker, session).await?;
                Ok(Some(session))
            }
            Owners::InValue => Ok(None),
        }
    }

    async fn zk(&mut self) -> Result<zk::Client> {
        let Owners::Zookeeper {
            client, cluster, ..
        } = self
        else {
            anyhow::bail!("not ZooKeeper");
        };
        if let Some(c) = client.as_ref().filter(|c| !c.state().is_terminated()) {
            return Ok(c.clone());
        }
        let connect = zk::Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .connect(cluster);
        let c = tokio::time::timeout(CALL, connect)
            .await
            .context("ZooKeeper (owner node): no member answered")??;
        *client = Some(c.clone());
        Ok(c)
    }

    /// The persistent owner node of `session`, once.
    async fn zk_session(&mut self, worker: u32, session: i64) -> Result<()> {
        let path = zkl::owner_path(session);
        if let Owners::Zookeeper { nodes, .. } = self {
            if nodes.contains(&path) {
                return Ok(());
            }
        }
        let c = self.zk().await?;
        let text = owner_text(worker);
        let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let made = async {
            c.mkdir(zkl::OWNERS, &opts).await?;
            match c.create(&path, text.as_bytes(), &opts).await {
                Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
                Err(e) => Err(e),
            }
        };
        tokio::time::timeout(CALL, made)
            .await
            .context("creating the owner node timed out")?
            .context("creating the owner node")?;
        if let Owners::Zookeeper { nodes, .. } = self {
            nodes.push(path);
        }
        Ok(())
    }

    async fn etcd_granted(&mut self, worker: u32, entry: &str) -> Result<Option<i64>> {
        let mut c = self.etcd().await?;
        let resp = tokio::time::timeout(CALL, c.get(entry, None))
            .await
            .context("reading the granted entry timed out")??;
        let Some(lease) = resp.kvs().first().map(|kv| kv.lease()) else {
            return Ok(None);
        };
        if lease == 0 {
            return Ok(None);
        }
        self.etcd_lease(worker, lease).await?;
        Ok(Some(lease))
    }

    async fn etcd(&mut self) -> Result<etcd_client::Client> {
        let Owners::Etcd {
            client, endpoints, ..
        } = self
        else {
            anyhow::bail!("not etcd");
        };
        if let Some(c) = client {
            return Ok((**c).clone());
        }
        let opts = ConnectOptions::new().with_connect_timeout(Duration::from_secs(2));
        let c = etcd_client::Client::connect(endpoints.as_slice(), Some(opts))
            .await
            .context("cannot connect to etcd (owner key)")?;
        *client = Some(Box::new(c.clone()));
        Ok(c)
    }

    async fn etcd_lease(&mut self, worker: u32, lease: i64) -> Result<()> {
        if let Owners::Etcd { done, .. } = self {
            if done.contains(&lease) {
                return Ok(());
            }
        }
        let mut c = self.etcd().await?;
        let put = c.put(
            owner_key(lease),
            owner_text(worker),
            Some(PutOptions::new().with_lease(lease)),
        );
        tokio::time::timeout(CALL, put)
            .await
            .context("owner put timed out")?
            .with_context(|| format!("owner put on lease {lease:x}"))?;
        if let Owners::Etcd { done, .. } = self {
            done.insert(lease);
        }
        Ok(())
    }

    /// At the end: ZooKeeper's persistent owner nodes go.
    pub async fn close(&mut self) {
        if let Owners::Zookeeper { client, nodes, .. } = self {
            let Some(c) = client.take() else { return };
            for n in nodes.drain(..) {
                let _ = tokio::time::timeout(CALL, c.delete(&n, None)).await;
            }
        }
    }
}

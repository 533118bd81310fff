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
//!   names nobody's lock.
//! - Redis and Redlock: the owner value the worker hands the client in `acquire`
//!   (`<worker>:<pid>:<session>:<nonce>`), which the library stores as the lock's
//!   value — nothing to write.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::{Context, Result};
use etcd_client::{ConnectOptions, PutOptions};
use zookeeper_client as zk;

use crate::lock::{etcd::owner_key, zookeeper as zkl, ClientConfig};
use crate::scenario::ServiceKind;

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
            Owners::Zookeeper {
                client,
                cluster,
                nodes,
            } => {
                let c = match client {
                    Some(c) => c.clone(),
                    None => {
                        let connect = zk::Client::connector()
                            .with_session_timeout(Duration::from_secs(10))
                            .connect(cluster);
                        let c = tokio::time::timeout(CALL, connect)
                            .await
                            .context("ZooKeeper (owner node): no member answered")??;
                        *client = Some(c.clone());
                        c
                    }
                };
                let path = zkl::owner_path(session);
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
                nodes.push(path);
                Ok(())
            }
            Owners::InValue => Ok(()),
        }
    }

    /// After a grant: etcd reads the entry's lease (a library may take a lease
    /// per lock) and names its owner if not done yet; returns the lease.
    pub async fn granted(&mut self, worker: u32, entry: &str) -> Result<Option<i64>> {
        let Owners::Etcd { .. } = self else {
            return Ok(None);
        };
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

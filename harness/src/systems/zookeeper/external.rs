//! An external client's owners on ZooKeeper: a persistent
//! `/fencecheck/owners/<session hex>` (an ephemeral node can only belong to the
//! worker's own session, not the client's); the worker deletes it when it
//! closes. A session id is never reused, so a stale one names nobody's lock.
//! After each grant the worker reads the granted node's ephemeralOwner and names
//! that session's owner too: Curator opens a session of its own after a loss and
//! may be granted under it, unannounced.

use std::time::Duration;

use anyhow::{Context, Result};
use zookeeper_client as zk;

use super::keys::{lock_dir, owner_path, OWNERS};
use crate::systems::client::ClientConfig;
use crate::systems::external::owner::{owner_text, Owners};

const CALL: Duration = Duration::from_secs(3);

pub struct ZkOwners {
    client: Option<zk::Client>,
    cluster: String,
    /// The owner nodes written (one per session).
    nodes: Vec<String>,
}

impl ZkOwners {
    pub fn new(cfg: &ClientConfig) -> ZkOwners {
        ZkOwners {
            client: None,
            cluster: cfg.endpoints.join(","),
            nodes: Vec::new(),
        }
    }

    async fn zk(&mut self) -> Result<zk::Client> {
        if let Some(c) = self.client.as_ref().filter(|c| !c.state().is_terminated()) {
            return Ok(c.clone());
        }
        let connect = zk::Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .connect(&self.cluster);
        let c = tokio::time::timeout(CALL, connect)
            .await
            .context("ZooKeeper (owner node): no member answered")??;
        self.client = Some(c.clone());
        Ok(c)
    }
}

#[async_trait::async_trait]
impl Owners for ZkOwners {
    fn lock(&self, name: &str) -> String {
        lock_dir(name)
    }

    /// The persistent owner node of `session`, once.
    async fn session(&mut self, worker: u32, session: i64) -> Result<()> {
        let path = owner_path(session);
        if self.nodes.contains(&path) {
            return Ok(());
        }
        let c = self.zk().await?;
        let text = owner_text(worker);
        let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let made = async {
            c.mkdir(OWNERS, &opts).await?;
            match c.create(&path, text.as_bytes(), &opts).await {
                Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
                Err(e) => Err(e),
            }
        };
        tokio::time::timeout(CALL, made)
            .await
            .context("creating the owner node timed out")?
            .context("creating the owner node")?;
        self.nodes.push(path);
        Ok(())
    }

    async fn granted(&mut self, worker: u32, entry: &str) -> Result<Option<i64>> {
        let c = self.zk().await?;
        let stat = tokio::time::timeout(CALL, c.check_stat(entry))
            .await
            .context("reading the granted node timed out")?
            .context("reading the granted node")?;
        // Gone already (its session ended): nobody's to name.
        let Some(session) = stat.map(|s| s.ephemeral_owner).filter(|&s| s != 0) else {
            return Ok(None);
        };
        self.session(worker, session).await?;
        Ok(Some(session))
    }

    /// The persistent owner nodes go (they would outlive the sessions).
    async fn close(&mut self) {
        let Some(c) = self.client.take() else { return };
        for n in self.nodes.drain(..) {
            let _ = tokio::time::timeout(CALL, c.delete(&n, None)).await;
        }
    }
}

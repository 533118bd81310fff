//! An external client's owners on etcd: `fencecheck/owner/<lease hex>` =
//! "<worker> <pid>" **on the client's lease** (leases are cluster-wide), so it
//! lives exactly as long as the lease. Libraries that take a lease per lock
//! (python-etcd3) are covered by reading the granted entry's lease after each
//! grant.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::{Context, Result};
use etcd_client::{ConnectOptions, PutOptions};

use super::keys::{lock_name, owner_key};
use crate::systems::client::ClientConfig;
use crate::systems::external::owner::{owner_text, Owners};

const CALL: Duration = Duration::from_secs(3);

pub struct EtcdOwners {
    client: Option<Box<etcd_client::Client>>,
    endpoints: Vec<String>,
    /// The leases whose owner key is written.
    done: HashSet<i64>,
}

impl EtcdOwners {
    pub fn new(cfg: &ClientConfig) -> EtcdOwners {
        EtcdOwners {
            client: None,
            endpoints: cfg
                .endpoints
                .iter()
                .map(|e| format!("http://{e}"))
                .collect(),
            done: HashSet::new(),
        }
    }

    async fn etcd(&mut self) -> Result<etcd_client::Client> {
        if let Some(c) = &self.client {
            return Ok((**c).clone());
        }
        let opts = ConnectOptions::new().with_connect_timeout(Duration::from_secs(2));
        let c = etcd_client::Client::connect(self.endpoints.as_slice(), Some(opts))
            .await
            .context("cannot connect to etcd (owner key)")?;
        self.client = Some(Box::new(c.clone()));
        Ok(c)
    }
}

#[async_trait::async_trait]
impl Owners for EtcdOwners {
    fn lock(&self, name: &str) -> String {
        lock_name(name)
    }

    async fn session(&mut self, worker: u32, lease: i64) -> Result<()> {
        if self.done.contains(&lease) {
            return Ok(());
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
        self.done.insert(lease);
        Ok(())
    }

    async fn granted(&mut self, worker: u32, entry: &str) -> Result<Option<i64>> {
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
        self.session(worker, lease).await?;
        Ok(Some(lease))
    }
}

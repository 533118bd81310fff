//! ZooKeeper: a lock is an ephemeral sequential znode under `/locks/<name>`, the
//! grant order its czxid. [`client`] (worker side and the keyspace contract),
//! [`service`] (process deployment, the harness's handle, its feed of creations
//! and session ends), [`docker`] (member specs), [`image`] (the docker image's
//! build context: ZooKeeper's jars and a JRE).

pub mod client;
pub mod docker;
pub mod image;
pub mod service;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

use crate::scenario::{Scenario, ServiceKind};
use crate::systems::client::{ClientConfig, LockClient};
use crate::systems::service::{Capabilities, LockService, ServiceDeploy};

pub struct Zookeeper;

#[async_trait::async_trait]
impl crate::systems::System for Zookeeper {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            expire_session: true,
            revoke_lease: false,
            leader: true,
            peer_links: true,
            majority_minority: false,
            clock_jump: false,
        }
    }
    fn runs_on_docker(&self) -> bool {
        true
    }
    fn member_name(&self) -> &'static str {
        "zk"
    }
    fn deploy(&self, _s: &Scenario, say: &dyn Fn(&str)) -> Result<Box<dyn ServiceDeploy>> {
        Ok(Box::new(service::ZkDeploy::find(say)?))
    }
    async fn connect(
        &self,
        _kind: ServiceKind,
        clients: &[SocketAddr],
    ) -> Result<Arc<dyn LockService>> {
        Ok(Arc::new(service::ZkService::connect(clients).await?))
    }
    async fn wait_ready(&self, what: &str, client: SocketAddr, deadline: Duration) -> Result<()> {
        service::wait_ready(what, client, deadline).await
    }
    async fn client(&self, cfg: &ClientConfig) -> Result<Box<dyn LockClient>> {
        Ok(Box::new(client::ZkClient::connect(cfg).await?))
    }
}

//! ZooKeeper: a lock is an ephemeral sequential znode under `/locks/<name>`, the
//! grant order its czxid. [`client`] (worker side and the keyspace contract),
//! [`service`] (the harness's handle, its feed of creations and session ends),
//! [`members`] (the members' backend-neutral spec), [`image`] (the docker
//! image's build context: ZooKeeper's jars and a JRE).

pub mod client;
pub mod external;
pub mod image;
pub mod keys;
pub mod members;
pub mod rules;
pub mod service;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

use crate::scenario::{EtcdVersion, Scenario, ServiceKind};
use crate::systems::client::{ClientConfig, LockClient};
use crate::systems::members::{Deploy, Ports};
use crate::systems::service::{Capabilities, LockService};
use crate::systems::ImageDeploy;

pub struct Zookeeper;

#[async_trait::async_trait]
impl crate::systems::System for Zookeeper {
    fn rules(&self) -> &'static crate::systems::Rules {
        &rules::RULES
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            expire_session: true,
            revoke_lease: false,
            leader: true,
            peer_links: true,
            majority_minority: false,
            clock_jump: false,
            client_clock: false,
        }
    }
    fn runs_on_docker(&self) -> bool {
        true
    }
    fn member_name(&self) -> &'static str {
        "zk"
    }
    fn ports(&self) -> Ports {
        members::PORTS
    }
    fn deploy(&self, _s: &Scenario, say: &dyn Fn(&str)) -> Result<Box<dyn Deploy>> {
        Ok(Box::new(members::ZkDeploy::find(say)?))
    }
    fn image_deploys(&self, _etcd: &[EtcdVersion], say: &dyn Fn(&str)) -> Result<Vec<ImageDeploy>> {
        let d = members::ZkDeploy::find(say).map(|d| Box::new(d) as Box<dyn Deploy>);
        Ok(vec![("zookeeper", d)])
    }
    fn quiet_logs(&self) -> &'static str {
        // The client warns on every reconnect attempt, which faults make routine.
        ",zookeeper_client=error"
    }
    async fn connect(
        &self,
        _kind: ServiceKind,
        clients: &[SocketAddr],
        _access: Option<&crate::systems::service::ServiceAccess>,
    ) -> Result<Arc<dyn LockService>> {
        Ok(Arc::new(service::ZkService::connect(clients).await?))
    }
    async fn wait_ready(&self, what: &str, client: SocketAddr, deadline: Duration) -> Result<()> {
        service::wait_ready(what, client, deadline).await
    }
    async fn client(&self, cfg: &ClientConfig) -> Result<Box<dyn LockClient>> {
        Ok(Box::new(client::ZkClient::connect(cfg).await?))
    }
    fn external_owners(
        &self,
        cfg: &ClientConfig,
    ) -> Box<dyn crate::systems::external::owner::Owners> {
        Box::new(external::ZkOwners::new(cfg))
    }
}

#[cfg(test)]
mod tests {
    use crate::plan::assert_available;
    use crate::scenario::BackendKind::Process;
    use crate::scenario::FaultKind::*;
    use crate::scenario::ServiceKind;

    /// Each fault kind is available where ZooKeeper and the backend declare it.
    #[test]
    fn its_faults_are_available_where_it_and_the_backend_declare_them() {
        assert_available(
            ServiceKind::Zookeeper,
            &[
                (Process, RevokeLease, "holder", Some("expire-session")),
                (Process, ExpireSession, "holder", None),
                (Process, Partition, "etcd-majority-minority", Some("etcd's")),
                (Process, Pause, "leader", None),
            ],
        );
    }
}

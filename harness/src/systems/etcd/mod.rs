//! etcd: a lock is `/locks/<name>/<lease>` created under the session's lease, the
//! grant order is its CreateRevision. Everything etcd is in this folder:
//! [`client`] (the worker side, and the keyspace contract), [`service`] (the
//! harness's handle and its watch), [`members`] (the members' backend-neutral
//! spec and image), [`provision`] (finding or fetching the etcd binary).

pub mod client;
pub mod external;
pub mod keys;
pub mod members;
pub mod provision;
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

pub struct Etcd;

#[async_trait::async_trait]
impl crate::systems::System for Etcd {
    fn rules(&self) -> &'static crate::systems::Rules {
        &rules::RULES
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            expire_session: true,
            revoke_lease: true,
            leader: true,
            peer_links: true,
            majority_minority: true,
            clock_jump: false,
            client_clock: false,
        }
    }
    fn runs_on_docker(&self) -> bool {
        true
    }
    fn member_name(&self) -> &'static str {
        "etcd"
    }
    fn etcd_versioned(&self) -> bool {
        true
    }
    fn ports(&self) -> Ports {
        members::PORTS
    }
    fn deploy(&self, s: &Scenario, say: &dyn Fn(&str)) -> Result<Box<dyn Deploy>> {
        Ok(Box::new(members::EtcdDeploy::find(s.etcd_version(), say)?))
    }
    fn image_deploys(&self, etcd: &[EtcdVersion], say: &dyn Fn(&str)) -> Result<Vec<ImageDeploy>> {
        etcd.iter()
            .map(|&v| {
                let d: Box<dyn Deploy> = Box::new(members::EtcdDeploy::find(v, say)?);
                Ok(("etcd", Ok(d)))
            })
            .collect()
    }
    async fn connect(
        &self,
        _kind: ServiceKind,
        clients: &[SocketAddr],
        _access: Option<&crate::systems::service::ServiceAccess>,
    ) -> Result<Arc<dyn LockService>> {
        Ok(Arc::new(service::EtcdService::connect(clients).await?))
    }
    async fn wait_ready(&self, what: &str, client: SocketAddr, deadline: Duration) -> Result<()> {
        service::wait_ready(what, client, deadline).await
    }
    async fn client(&self, cfg: &ClientConfig) -> Result<Box<dyn LockClient>> {
        Ok(Box::new(client::EtcdClient::connect(cfg).await?))
    }
    fn external_owners(
        &self,
        cfg: &ClientConfig,
    ) -> Box<dyn crate::systems::external::owner::Owners> {
        Box::new(external::EtcdOwners::new(cfg))
    }
}

#[cfg(test)]
mod tests {
    use crate::plan::assert_available;
    use crate::scenario::BackendKind::{Auto, Docker, Process};
    use crate::scenario::FaultKind::*;
    use crate::scenario::ServiceKind;

    /// Each fault kind is available where etcd and the backend declare it.
    #[test]
    fn its_faults_are_available_where_it_and_the_backend_declare_them() {
        assert_available(
            ServiceKind::Etcd,
            &[
                (Docker, Pause, "leader", None),
                (Docker, Kill, "storage", None),
                (Process, RevokeLease, "holder", None),
                (Process, Delay, "leader", None),
                (Auto, Delay, "leader", None),
                (Docker, Delay, "leader", Some("peer proxies")),
                (Docker, Delay, "workers->service", None),
                (Docker, Partition, "etcd-majority-minority", None),
                (Process, ClockJump, "member:0", Some("clockshim")),
            ],
        );
    }
}

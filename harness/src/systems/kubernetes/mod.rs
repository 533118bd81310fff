//! Kubernetes Lease leader election as a lock service: kube-apiserver 1.20.2
//! (built from Debian's source by `ci/kubernetes.sh`) over fencecheck's etcd, one
//! `coordination.k8s.io/v1` Lease per key. [`lease`] (the keyspace contract and
//! the API client), [`client`] (fencecheck's own elector, client-go's algorithm),
//! [`service`] (the harness's handle and its watch of the Leases), [`members`]
//! (etcd members plus the apiserver, and the run's TLS material), [`external`]
//! (the adapters' owners).

pub mod client;
pub mod external;
pub mod lease;
pub mod members;
pub mod rules;
pub mod service;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::scenario::{EtcdVersion, Scenario, ServiceKind};
use crate::systems::client::{ClientConfig, LockClient};
use crate::systems::members::{Deploy, Ports};
use crate::systems::service::{Capabilities, LockService, ServiceAccess};
use crate::systems::ImageDeploy;

pub struct Kubernetes;

#[async_trait::async_trait]
impl crate::systems::System for Kubernetes {
    fn rules(&self) -> &'static crate::systems::Rules {
        &rules::RULES
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            // The harness writes a holder of its own into the Lease.
            expire_session: true,
            revoke_lease: false,
            leader: false,
            peer_links: false,
            majority_minority: false,
            clock_jump: false,
            client_clock: true,
        }
    }
    fn runs_on_docker(&self) -> bool {
        false
    }
    fn member_name(&self) -> &'static str {
        "k8s"
    }
    fn ports(&self) -> Ports {
        members::PORTS
    }
    fn client_members(&self, n: usize) -> std::ops::Range<usize> {
        n.saturating_sub(1)..n
    }
    fn deploy(&self, _s: &Scenario, say: &dyn Fn(&str)) -> Result<Box<dyn Deploy>> {
        Ok(Box::new(members::KubeDeploy::find(say)?))
    }
    fn image_deploys(
        &self,
        _etcd: &[EtcdVersion],
        _say: &dyn Fn(&str),
    ) -> Result<Vec<ImageDeploy>> {
        Ok(Vec::new())
    }
    fn quiet_logs(&self) -> &'static str {
        ",kube_client=warn"
    }
    async fn connect(
        &self,
        _kind: ServiceKind,
        clients: &[SocketAddr],
        access: Option<&ServiceAccess>,
    ) -> Result<Arc<dyn LockService>> {
        let access = access.context("kubernetes: no token and CA for the apiserver")?;
        Ok(Arc::new(
            service::KubeService::connect(clients, access).await?,
        ))
    }
    async fn wait_ready(&self, what: &str, client: SocketAddr, deadline: Duration) -> Result<()> {
        service::wait_ready(what, client, deadline).await
    }
    async fn client(&self, cfg: &ClientConfig) -> Result<Box<dyn LockClient>> {
        Ok(Box::new(client::KubeClient::connect(cfg).await?))
    }
    fn external_owners(
        &self,
        cfg: &ClientConfig,
    ) -> Box<dyn crate::systems::external::owner::Owners> {
        Box::new(external::KubeOwners {
            namespace: cfg
                .access
                .as_ref()
                .map_or(lease::NAMESPACE, |a| a.namespace.as_str())
                .to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::plan::assert_available;
    use crate::scenario::BackendKind::{Docker, Kubernetes, Process};
    use crate::scenario::FaultKind::*;
    use crate::scenario::ServiceKind;

    /// Each fault kind is available where Kubernetes and the backend declare it.
    #[test]
    fn its_faults_are_available_where_it_and_the_backend_declare_them() {
        assert_available(
            ServiceKind::Kubernetes,
            &[
                (Process, ExpireSession, "holder", None),
                (Process, RevokeLease, "holder", Some("expire-session")),
                (Process, Pause, "leader", Some("leader")),
                (Process, Pause, "member:0", None),
                (Process, ClockJump, "holder", None),
                (Docker, ClockJump, "holder", Some("not on docker")),
                (Kubernetes, ClockJump, "holder", None),
                (Process, ClockJump, "member:0", Some("not available")),
            ],
        );
        // A worker's clock is an elector's: etcd's clients do not judge expiry.
        assert_available(
            ServiceKind::Etcd,
            &[(Process, ClockJump, "holder", Some("kubernetes"))],
        );
    }
}

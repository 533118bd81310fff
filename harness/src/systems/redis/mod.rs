//! Redis and Redlock: a lock is a key set with `NX PX` to an owner value; Redlock
//! takes it on a majority of independent instances. There is no order a client can
//! read, so the harness numbers grants from its own keyspace feed. [`client`]
//! (worker side, the keyspace contract and the Lua scripts), [`service`] (the
//! harness's handle, the feed), [`members`] (one member per instance, with
//! clockshim for clock jumps), [`image`] (redis-server FROM scratch).

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

/// One Redis instance (`redlock: false`) or Redlock's independent masters.
pub struct Redis {
    pub redlock: bool,
}

#[async_trait::async_trait]
impl crate::systems::System for Redis {
    fn rules(&self) -> &'static crate::systems::Rules {
        &rules::RULES
    }
    fn capabilities(&self) -> Capabilities {
        // expire-session deletes the holder's key(s). One Redis instance is its own
        // "leader"; Redlock's masters have none. Instances have no peers; their key
        // expiry reads the wall clock, which clockshim can step.
        Capabilities {
            expire_session: true,
            revoke_lease: false,
            leader: !self.redlock,
            peer_links: false,
            majority_minority: false,
            clock_jump: true,
            client_clock: false,
        }
    }
    fn runs_on_docker(&self) -> bool {
        // One member per instance, Redlock's masters included (members.rs).
        true
    }
    fn member_name(&self) -> &'static str {
        "redis"
    }
    fn numbers_grants_itself(&self) -> bool {
        // A key set with NX carries no order a client can read.
        false
    }
    fn ports(&self) -> Ports {
        members::PORTS
    }
    fn deploy(&self, s: &Scenario, say: &dyn Fn(&str)) -> Result<Box<dyn Deploy>> {
        Ok(Box::new(
            members::RedisDeploy::find(say)?.with_clock_jumps(s, say)?,
        ))
    }
    fn image_deploys(&self, _etcd: &[EtcdVersion], say: &dyn Fn(&str)) -> Result<Vec<ImageDeploy>> {
        let d = members::RedisDeploy::find(say).map(|d| Box::new(d) as Box<dyn Deploy>);
        Ok(vec![("redis", d)])
    }
    fn persistence(&self, s: &Scenario) -> Option<&'static str> {
        Some(s.lock.persistence.unwrap_or_default().as_str())
    }
    async fn connect(
        &self,
        kind: ServiceKind,
        clients: &[SocketAddr],
        _access: Option<&crate::systems::service::ServiceAccess>,
    ) -> Result<Arc<dyn LockService>> {
        Ok(Arc::new(
            service::RedisService::connect(kind, self.redlock, clients).await?,
        ))
    }
    async fn wait_ready(&self, what: &str, client: SocketAddr, deadline: Duration) -> Result<()> {
        service::wait_ready(what, client, deadline).await
    }
    async fn client(&self, cfg: &ClientConfig) -> Result<Box<dyn LockClient>> {
        Ok(Box::new(
            client::RedisClient::connect(cfg, self.redlock).await?,
        ))
    }
    fn external_owners(
        &self,
        _cfg: &ClientConfig,
    ) -> Box<dyn crate::systems::external::owner::Owners> {
        Box::new(external::RedisOwners)
    }
}

#[cfg(test)]
mod tests {
    use crate::plan::assert_available;
    use crate::scenario::BackendKind::{Auto, Docker, Kubernetes, Process};
    use crate::scenario::FaultKind::*;
    use crate::scenario::ServiceKind;

    /// Each fault kind is available where Redis (or Redlock) and the backend
    /// declare it.
    #[test]
    fn its_faults_are_available_where_it_and_the_backend_declare_them() {
        assert_available(
            ServiceKind::Redlock,
            &[
                (Process, Pause, "leader", Some("no leader")),
                (Process, Partition, "member:0", Some("no peer links")),
            ],
        );
        assert_available(
            ServiceKind::Redis,
            &[
                (Docker, Delay, "member:0", Some("no peer links")),
                (Process, Delay, "holder->service", None),
                (Process, ClockJump, "member:0", None),
                (Auto, ClockJump, "member:0", None),
                (Docker, ClockJump, "member:0", Some("not on docker")),
                (Kubernetes, ClockJump, "member:0", None),
            ],
        );
    }
}

//! ZooKeeper behind the lock-service seam (being integrated).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Result};

use super::observe::ObservationWriter;
use super::{Holder, LockService, MemberAddrs, ProcessPlan, ServiceDeploy, SessionOwner};
use crate::scenario::{Scenario, ServiceKind};

pub struct ZkDeploy;

impl ZkDeploy {
    pub fn find(_say: &dyn Fn(&str)) -> Result<ZkDeploy> {
        bail!("ZooKeeper is not integrated yet")
    }
}

impl ServiceDeploy for ZkDeploy {
    fn peer_ports(&self) -> usize {
        2
    }
    fn process_plan(&self, _s: &Scenario, _d: &Path, _a: &[MemberAddrs]) -> Result<ProcessPlan> {
        bail!("ZooKeeper is not integrated yet")
    }
}

pub async fn wait_ready(_what: &str, _client: SocketAddr, _deadline: Duration) -> Result<()> {
    bail!("ZooKeeper is not integrated yet")
}

pub struct ZkService;

impl ZkService {
    pub async fn connect(_clients: &[SocketAddr]) -> Result<ZkService> {
        bail!("ZooKeeper is not integrated yet")
    }
}

#[async_trait::async_trait]
impl LockService for ZkService {
    fn kind(&self) -> ServiceKind {
        ServiceKind::Zookeeper
    }
    async fn holders(&self) -> Result<Vec<Holder>> {
        bail!("not integrated")
    }
    async fn sessions(&self) -> Result<Vec<SessionOwner>> {
        bail!("not integrated")
    }
    async fn leader(&self) -> Result<usize> {
        bail!("not integrated")
    }
    async fn expire_session(&self, _session: i64) -> Result<serde_json::Value> {
        bail!("not integrated")
    }
    async fn observe(
        &self,
        _out: ObservationWriter,
        _stop: tokio::sync::watch::Receiver<bool>,
    ) -> Result<()> {
        bail!("not integrated")
    }
}

//! Where etcd and the storage run. Both backends hand the rest of the run the same
//! plain [`Deployment`]: addresses to connect to (or to put proxies in front of),
//! and facts for the report. The nemesis reaches processes through [`Backend`].

pub mod process;

use std::net::SocketAddr;
use std::path::Path;

use anyhow::{bail, Result};
use faultproxy::Proxy;

use crate::scenario::{BackendKind, Scenario};

/// What the run needs to know about the started services.
#[derive(Clone)]
pub struct Deployment {
    /// Client address of each etcd member, reached directly (harness, nemesis).
    pub etcd_clients: Vec<SocketAddr>,
    /// The storage service, reached directly.
    pub storage: SocketAddr,
    /// The proxy in front of each member's peer port.
    pub peer_proxies: Vec<Proxy>,
    /// The etcd version actually running, e.g. "3.5.1".
    pub etcd_version: String,
    /// Which backend ran, and why (for `auto`).
    pub backend: String,
    pub backend_reason: String,
}

impl Deployment {
    pub fn etcd_endpoints(&self) -> Vec<String> {
        self.etcd_clients
            .iter()
            .map(|a| format!("http://{a}"))
            .collect()
    }
}

/// The running services of one run. Stopping is explicit (`stop`) and also happens
/// on drop, so errors and panics do not leave services behind.
pub enum Backend {
    Process(process::ProcessBackend),
}

impl Backend {
    pub async fn start(
        kind: BackendKind,
        scenario: &Scenario,
        run_dir: &Path,
        say: &dyn Fn(&str),
    ) -> Result<(Backend, Deployment)> {
        let reason = match kind {
            BackendKind::Process => "requested".to_string(),
            BackendKind::Auto => {
                "auto: the docker backend is not available in this build, so local processes"
                    .to_string()
            }
            BackendKind::Docker => bail!(
                "backend \"docker\" is not available in this build yet; use --backend process"
            ),
        };
        let (b, mut d) = process::ProcessBackend::start(scenario, run_dir, say).await?;
        d.backend_reason = reason;
        Ok((Backend::Process(b), d))
    }

    pub fn member_pid(&self, i: usize) -> Option<u32> {
        match self {
            Backend::Process(b) => b.member_pid(i),
        }
    }

    pub fn storage_pid(&self) -> Option<u32> {
        match self {
            Backend::Process(b) => b.storage_pid(),
        }
    }

    pub async fn kill_member(&mut self, i: usize) -> Result<u32> {
        match self {
            Backend::Process(b) => b.kill_member(i).await,
        }
    }

    pub async fn restart_member(&mut self, i: usize) -> Result<u32> {
        match self {
            Backend::Process(b) => b.restart_member(i).await,
        }
    }

    /// Restarts every member that is down (heal phase).
    pub async fn restart_all(&mut self) -> Vec<usize> {
        let mut restarted = Vec::new();
        match self {
            Backend::Process(b) => {
                for i in 0..b.members.len() {
                    if !b.member_running(i) && b.restart_member(i).await.is_ok() {
                        restarted.push(i);
                    }
                }
            }
        }
        restarted
    }

    pub async fn stop(&mut self) {
        match self {
            Backend::Process(b) => b.stop().await,
        }
    }
}

//! A cluster member's lifecycle, whatever the service (etcd and ZooKeeper today): a labelled data volume, a container created on the run's peer
//! network (its container name is its peer host name), waited for until it prints
//! its ready line, joined to the client network for its published port, then
//! waited for until it answers healthy; paused, killed with SIGKILL and started
//! again as the same container (same volume, same fixed host port, same networks).
//! The service itself only supplies a [`MemberSpec`] (see `etcd.rs`,
//! `zookeeper.rs`).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use testcontainers::bollard::Docker;

use super::cleanup::{tracked, InFlight};
use super::container::{self, ContainerSpec, Running, StartFailure};
use super::network;
use crate::scenario::ServiceKind;

/// How to tell that a started member serves (once enough members are up to form
/// the cluster).
#[derive(Debug, Clone)]
pub(crate) enum Health {
    /// `GET path` on the client address answers 2xx (and, if the body mentions
    /// "health", says "true").
    Http(&'static str),
    /// The service's own readiness probe on the client address
    /// (`System::wait_ready`; ZooKeeper: `srvr` reports a mode).
    Service(ServiceKind),
}

/// What a service makes of member `i`.
#[derive(Debug, Clone)]
pub(crate) struct MemberSpec {
    /// Image, command, env, fixed host port, data volume mount, ready line. Its
    /// name is the host name its peers reach it by; its network is the run's peer
    /// network, set by [`Member::start`].
    pub container: ContainerSpec,
    /// The named volume holding its data (mounted by `container`).
    pub volume: String,
    /// Its client address on the host.
    pub client: SocketAddr,
    pub health: Health,
}

pub(super) struct Member {
    pub spec: MemberSpec,
    container: Option<Running>,
    running: bool,
}

impl Member {
    pub(super) fn new(spec: MemberSpec) -> Member {
        Member {
            spec,
            container: None,
            running: false,
        }
    }

    pub(super) fn name(&self) -> &str {
        &self.spec.container.name
    }

    pub(super) fn running(&self) -> bool {
        self.running
    }

    pub(super) fn container(&self) -> Result<&Running> {
        self.container
            .as_ref()
            .with_context(|| format!("member container {} was never started", self.name()))
    }

    /// The container, for its removal (None once taken or never started).
    pub(super) fn take_container(&mut self) -> Option<Running> {
        self.running = false;
        self.container.take()
    }

    /// Its data volume, before the first start.
    pub(super) async fn create_volume(
        &self,
        d: &Docker,
        inflight: &InFlight,
        run_id: &str,
    ) -> Result<()> {
        let role = format!("{}-data", self.spec.container.role);
        network::create_volume(d, inflight, run_id, &self.spec.volume, &role).await
    }

    /// Creates and starts the container on the peer network, waits for its ready
    /// line, then joins it to the client network, where its port is published.
    /// In this order because the service resolves its own peer name as it starts
    /// (etcd checks its advertised peer URL), Docker API 1.41 attaches a single
    /// network at creation, and testcontainers creates and starts in one call.
    pub(super) async fn start(
        &mut self,
        d: &Docker,
        inflight: &InFlight,
        run_id: &str,
        peer_network: &str,
    ) -> Result<(), StartFailure> {
        let mut spec = self.spec.container.clone();
        spec.network = Some(peer_network.to_string());
        let c = spec.start(run_id, inflight).await?;
        self.container = Some(c);
        self.running = true;
        network::connect(d, inflight, network::CLIENT_NETWORK, self.name())
            .await
            .map_err(|error| StartFailure {
                error,
                output: None,
            })
    }

    /// Waits until the member answers healthy (the cluster has formed).
    pub(super) async fn wait_healthy(&self, d: &Docker) -> Result<()> {
        let c = self.container()?;
        match self.spec.health {
            Health::Http(path) => {
                container::wait_healthy(d, self.name(), c, self.spec.client, path).await
            }
            Health::Service(kind) => {
                // Probed in short rounds so a member that exited fails the start at
                // once instead of at the deadline.
                let what = format!("{kind} member {} at {}", self.name(), self.spec.client);
                let end = tokio::time::Instant::now() + container::READY_DEADLINE;
                loop {
                    let round = Duration::from_secs(1);
                    let probe = crate::systems::system(kind)
                        .wait_ready(&what, self.spec.client, round)
                        .await;
                    if probe.is_ok() {
                        return Ok(());
                    }
                    container::fail_if_exited(d, self.name(), c).await?;
                    if tokio::time::Instant::now() >= end {
                        return probe.context(format!(
                            "not ready after {}",
                            humantime::format_duration(container::READY_DEADLINE)
                        ));
                    }
                }
            }
        }
    }

    pub(super) async fn pause(&self, inflight: &InFlight) -> Result<()> {
        if !self.running {
            bail!("{} is not running", self.name());
        }
        let c = self.container()?.clone();
        tracked(inflight, async move { c.pause().await })
            .await?
            .with_context(|| format!("docker pause {}", self.name()))
    }

    pub(super) async fn unpause(&self, inflight: &InFlight) -> Result<()> {
        let c = self.container()?.clone();
        tracked(inflight, async move { c.unpause().await })
            .await?
            .with_context(|| format!("docker unpause {}", self.name()))
    }

    /// SIGKILL of its main process (testcontainers has no kill with a signal);
    /// the container, its volume and its host port stay. Returns the pid killed.
    pub(super) async fn kill(&mut self, d: &Docker) -> Result<Option<i64>> {
        if !self.running {
            bail!("{} is not running", self.name());
        }
        let c = self.container()?.clone();
        let pid = container::pid(d, &c).await;
        container::kill(d, &c, "SIGKILL").await?;
        self.running = false;
        Ok(pid)
    }

    /// Starts the same container again (`docker start`): its data volume, host
    /// port and peer-network connection are those it had. Returns its new pid.
    pub(super) async fn restart(&mut self, d: &Docker, inflight: &InFlight) -> Result<Option<i64>> {
        let c = self.container()?.clone();
        if !self.running {
            let c2 = c.clone();
            tracked(inflight, async move { c2.start().await })
                .await?
                .with_context(|| format!("docker start {}", self.name()))?;
            self.running = true;
        }
        Ok(container::pid(d, &c).await)
    }
}

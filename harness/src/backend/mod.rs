//! Where the lock service and the storage run. Both backends hand the rest of the
//! run the same plain [`Deployment`]: addresses to connect to (or to put proxies in
//! front of), and facts for the report. The nemesis reaches processes through
//! [`Backend`].

pub mod caps;
pub mod docker;
pub mod kubernetes;
pub mod process;

use std::net::SocketAddr;
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::scenario::{BackendKind, Scenario, ServiceKind};

/// What the run needs to know about the started services.
#[derive(Clone)]
pub struct Deployment {
    pub service: ServiceKind,
    /// Client address of each member, reached directly (harness, nemesis).
    pub clients: Vec<SocketAddr>,
    /// The storage service, reached directly.
    pub storage: SocketAddr,
    /// Where the workers' links lead instead, `(clients, storage)`, when the
    /// harness's own addresses above are not the service's (the kubernetes
    /// backend's port-forwards to a node this machine cannot reach).
    pub workers_reach: Option<(Vec<SocketAddr>, SocketAddr)>,
    /// `peer_proxies[m]`: the proxies in front of member `m`'s peer ports (every
    /// link into it); empty where the backend has none (docker).
    pub peer_proxies: Vec<Vec<crate::links::Link>>,
    /// The service version actually running, e.g. "3.5.1".
    pub version: String,
    /// Which backend ran, and why (for `auto`).
    pub backend: String,
    pub backend_reason: String,
    /// The token and CA the service's clients need (Kubernetes), made per run.
    pub access: Option<crate::systems::service::ServiceAccess>,
}

impl Deployment {
    /// The members' and the storage's addresses as the workers' links reach
    /// them.
    pub fn for_workers(&self) -> (&[SocketAddr], SocketAddr) {
        match &self.workers_reach {
            Some((c, s)) => (c, *s),
            None => (&self.clients, self.storage),
        }
    }
}

/// A service the nemesis can freeze.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    Member(usize),
    Storage,
    /// A worker whose faults go through the backend (a worker pod on a node
    /// that is not this machine: its agent). Elsewhere the nemesis signals a
    /// worker's process itself.
    Worker(u32),
}

/// The backend a run uses, and why (for the report).
pub struct Chosen {
    pub kind: BackendKind,
    pub reason: String,
    /// The engine that answered, when the choice is docker.
    engine: Option<docker::Engine>,
    /// The cluster that answered and allows what a run does, when the choice is
    /// kubernetes.
    cluster: Option<Box<kubernetes::connect::Cluster>>,
}

/// What `backend` means for this scenario: `auto` is docker when an engine
/// answers and the service and the storage run there, else local processes.
/// Decided once per run, before anything starts (the faults are checked against
/// it), and handed to [`Backend::start`].
pub async fn choose(scenario: &Scenario) -> Result<Chosen> {
    let process = |reason: String| Chosen {
        kind: BackendKind::Process,
        reason,
        engine: None,
        cluster: None,
    };
    let docker = |engine: docker::Engine, reason: String| Chosen {
        kind: BackendKind::Docker,
        reason,
        engine: Some(engine),
        cluster: None,
    };
    Ok(match scenario.cluster.backend {
        BackendKind::Kubernetes => {
            if let Some(p) = scenario
                .cluster
                .kubeconfig
                .as_deref()
                .filter(|p| !p.exists())
            {
                return Err(scenario
                    .source
                    .error_at_key(
                        "kubeconfig",
                        format!("cluster.kubeconfig: no such file {}", p.display()),
                    )
                    .into());
            }
            let c = kubernetes::connect::connect(
                scenario.cluster.kubeconfig.as_deref(),
                scenario.cluster.node.as_deref(),
                scenario.cluster.registry.is_some(),
                scenario.cluster.reach == crate::scenario::Reach::Direct,
                !scenario.lock.apiserver.is_own(),
            )
            .await
            .map_err(
                |e| match e.downcast_ref::<kubernetes::connect::NodeError>() {
                    // Said at the scenario's line when it named the node.
                    Some(n) if scenario.cluster.node.is_some() => {
                        anyhow::Error::from(scenario.source.error_at_key("node", n.0.clone()))
                    }
                    _ => e,
                },
            )?;
            Chosen {
                kind: BackendKind::Kubernetes,
                reason: format!(
                    "requested; API server {} ({}), kubeconfig from {}, node {}{}",
                    c.server,
                    c.version,
                    c.source,
                    c.node,
                    match &c.remote {
                        Some(r) => format!(" (not this machine: members at {})", r.node_ip),
                        None => String::new(),
                    }
                ),
                engine: None,
                cluster: Some(Box::new(c)),
            }
        }
        BackendKind::Process => process("requested".into()),
        BackendKind::Docker => {
            let engine = docker::engine(docker::ENGINE_TIMEOUT).await.map_err(|e| {
                anyhow::anyhow!(
                    "backend \"docker\": no Docker engine answers ({e:#}); use --backend process"
                )
            })?;
            let reason = format!("requested; Docker engine {}", engine.version);
            docker(engine, reason)
        }
        BackendKind::Auto if !crate::systems::system(scenario.lock.service).runs_on_docker() => {
            process(format!(
                "auto: {} does not run on the docker backend yet, so local processes",
                scenario.lock.service
            ))
        }
        BackendKind::Auto => match docker_refuses(scenario) {
            Some(why) => process(format!("auto: {why} on docker, so local processes")),
            None => match docker::engine(docker::PING_TIMEOUT).await {
                Ok(engine) => {
                    let reason = format!("auto: a Docker engine answered ({})", engine.version);
                    docker(engine, reason)
                }
                Err(e) => process(format!(
                    "auto: no Docker engine answered ({e:#}), so local processes"
                )),
            },
        },
    })
}

/// The first fault of `scenario` the docker backend cannot do (e.g. a delay of
/// member links): `auto` then runs processes, which can, rather than refuse.
fn docker_refuses(scenario: &Scenario) -> Option<String> {
    scenario.faults.iter().enumerate().find_map(|(i, f)| {
        let svc = scenario.lock.service;
        match crate::plan::available(svc, BackendKind::Docker, f.kind, f.target) {
            crate::plan::Availability::Yes => None,
            crate::plan::Availability::No(_) => Some(format!(
                "fault #{} ({} of {}) is not available",
                i + 1,
                f.kind,
                f.target
            )),
        }
    })
}

/// The running services of one run. Stopping is explicit (`stop`) and also happens
/// on drop, so errors and panics do not leave services behind.
pub enum Backend {
    Process(process::ProcessBackend),
    Docker(docker::DockerBackend),
    Kubernetes(Box<kubernetes::KubernetesBackend>),
}

impl Backend {
    /// Starts the lock service and, unless `external` names a storage of the
    /// user's own (`[storage] kind = "http"`), fencecheck's storage.
    pub async fn start(
        chosen: Chosen,
        scenario: &Scenario,
        external: Option<SocketAddr>,
        run_dir: &Path,
        say: &dyn Fn(&str),
    ) -> Result<(Backend, Deployment)> {
        if let Some(cluster) = chosen.cluster {
            let (b, mut d) =
                kubernetes::KubernetesBackend::start(*cluster, scenario, external, run_dir, say)
                    .await?;
            d.backend_reason = chosen.reason;
            return Ok((Backend::Kubernetes(Box::new(b)), d));
        }
        if let Some(engine) = chosen.engine {
            return Backend::start_docker(engine, chosen.reason, scenario, external, run_dir, say)
                .await;
        }
        let (b, mut d) = process::ProcessBackend::start(scenario, external, run_dir, say).await?;
        d.backend_reason = chosen.reason;
        Ok((Backend::Process(b), d))
    }

    async fn start_docker(
        engine: docker::Engine,
        reason: String,
        scenario: &Scenario,
        external: Option<SocketAddr>,
        run_dir: &Path,
        say: &dyn Fn(&str),
    ) -> Result<(Backend, Deployment)> {
        let (b, mut d) = docker::DockerBackend::start(engine, scenario, run_dir, say).await?;
        d.backend_reason = reason;
        // The docker backend always starts its storage container; with a storage of
        // the user's own the workers' links lead there instead, and it idles.
        if let Some(addr) = external {
            d.storage = addr;
        }
        Ok((Backend::Docker(b), d))
    }

    /// Freezes a service (SIGSTOP of the process; `docker pause` of a container).
    /// Returns what was done, for the nemesis record.
    pub async fn pause(&mut self, who: Service) -> Result<serde_json::Value> {
        match self {
            Backend::Process(b) => b.pause(who),
            Backend::Docker(b) => b.pause(who).await,
            Backend::Kubernetes(b) => b.pause(who).await,
        }
    }

    /// Is the service paused, as the backend's engine tells it? `None` where the
    /// backend has no such state to ask (the process backend: the nemesis looks
    /// at the stopped process in `/proc` instead).
    /// Worker pods of a node that is not this machine among `workers`, armed
    /// for an aimed pause by their agents (`kubernetes::aim`); `None` when
    /// the workers are this machine's to signal.
    pub fn arm_workers(&mut self, workers: &[u32]) -> Option<kubernetes::aim::Armed> {
        match self {
            Backend::Kubernetes(b) => b.arm(workers),
            _ => None,
        }
    }

    /// Those workers armed no longer; `fired` stays paused.
    pub fn disarmed(&mut self, workers: &[u32], fired: Option<u32>) {
        if let Backend::Kubernetes(b) = self {
            b.disarmed(workers, fired);
        }
    }

    /// Who [`Backend::is_paused`] asks, for the pause's confirmation.
    pub fn pause_witness(&self) -> &'static str {
        match self {
            Backend::Process(_) => "nothing",
            Backend::Docker(_) => "the engine",
            Backend::Kubernetes(_) => {
                "its pod's agent (the program and every process of its group stopped, \
                 in the pod's /proc)"
            }
        }
    }

    pub async fn is_paused(&mut self, who: Service) -> Result<Option<bool>> {
        match self {
            Backend::Process(_) => Ok(None),
            Backend::Docker(b) => b.is_paused(who).await.map(Some),
            Backend::Kubernetes(b) => b.is_paused(who).await.map(Some),
        }
    }

    pub async fn resume(&mut self, who: Service) -> Result<()> {
        match self {
            Backend::Process(b) => b.resume(who),
            Backend::Docker(b) => b.resume(who).await,
            Backend::Kubernetes(b) => b.resume(who).await,
        }
    }

    /// Kills member `i` outright (SIGKILL; its data stays). Returns what was done.
    pub async fn kill_member(&mut self, i: usize) -> Result<serde_json::Value> {
        match self {
            Backend::Process(b) => b.kill_member(i).await,
            Backend::Docker(b) => b.kill_member(i).await,
            Backend::Kubernetes(b) => b.kill_member(i).await,
        }
    }

    /// Starts member `i` again on its data. Returns what was done.
    pub async fn restart_member(&mut self, i: usize) -> Result<serde_json::Value> {
        match self {
            Backend::Process(b) => b.restart_member(i).await,
            Backend::Docker(b) => b.restart_member(i).await,
            Backend::Kubernetes(b) => b.restart_member(i).await,
        }
    }

    /// Kills the storage outright (SIGKILL; its log, or PostgreSQL's data
    /// directory, stays).
    pub async fn kill_storage(&mut self) -> Result<serde_json::Value> {
        match self {
            Backend::Process(b) => b.kill_storage().await,
            Backend::Docker(b) => b.kill_storage().await,
            Backend::Kubernetes(b) => b.kill_storage().await,
        }
    }

    /// Starts the storage again on its log (PostgreSQL: crash recovery) and waits
    /// until it answers.
    pub async fn restart_storage(&mut self) -> Result<serde_json::Value> {
        match self {
            Backend::Process(b) => b.restart_storage().await,
            Backend::Docker(b) => b.restart_storage().await,
            Backend::Kubernetes(b) => b.restart_storage().await,
        }
    }

    /// The workers' link proxies, one per `upstreams` entry (`links.rs`): in
    /// this process on this machine's loopback; for worker pods on a node that
    /// is not this machine, in a pod on that node (`KubernetesBackend::start_links`).
    pub async fn start_links(
        &mut self,
        ups: &[std::net::SocketAddr],
        say: &dyn Fn(&str),
    ) -> Result<Vec<crate::links::Link>> {
        match self {
            Backend::Kubernetes(k) if k.workers_remote().is_some() => k.start_links(ups, say).await,
            _ => crate::links::start_here(ups, None).await,
        }
    }

    /// Steps member `i`'s wall clock forward by `by` (clock-jump) through the
    /// clockshim offset file it was started with (`CLOCKSHIM_OFFSET_FILE`: the
    /// process backend's, or the kubernetes backend's: in the run directory its
    /// pod mounts, or on a node that is not this machine the pod's own copy,
    /// written through its agent); returns its offset before and after, in ns.
    pub async fn step_clock(&mut self, i: usize, by: std::time::Duration) -> Result<(i64, i64)> {
        let ns = i64::try_from(by.as_nanos()).unwrap_or(i64::MAX);
        match self {
            Backend::Process(b) => crate::clockshim::step_ns(
                b.clock_file(i)?
                    .context("this member runs without clockshim: its clock cannot be stepped")?,
                ns,
            ),
            Backend::Docker(_) => bail!("the docker backend cannot step a member's clock"),
            Backend::Kubernetes(b) => b.step_clock(i, ns).await,
        }
    }

    /// Cuts members off from the others (`on`) or lets them back. The process
    /// backend does this through its peer proxies instead (see `links`), so only
    /// backends without peer proxies implement it.
    pub async fn isolate(&mut self, members: &[usize], on: bool) -> Result<()> {
        match self {
            Backend::Process(_) | Backend::Kubernetes(_) => {
                let _ = (members, on);
                bail!("this backend isolates members through its peer proxies")
            }
            Backend::Docker(b) => b.isolate(members, on).await,
        }
    }

    /// Heal phase: resumes every paused service and restarts every dead member.
    /// Returns what had to be undone.
    pub async fn heal(&mut self) -> Vec<String> {
        match self {
            Backend::Process(b) => b.heal().await,
            Backend::Docker(b) => b.heal().await,
            Backend::Kubernetes(b) => b.heal().await,
        }
    }

    pub async fn stop(&mut self) {
        match self {
            Backend::Process(b) => b.stop().await,
            Backend::Docker(b) => b.stop().await,
            Backend::Kubernetes(b) => b.stop().await,
        }
    }
}

//! The run's storage container: fencecheck's storage service, or the server a
//! fenced resource runs itself (`crate::resources::container`: PostgreSQL). It
//! runs on the engine's default bridge with its port published on 127.0.0.1
//! (fixed when the run starts, so a restart keeps the address the workers'
//! proxies lead to).
//!
//! Faults: pause = `docker pause` (the cgroup freezer: a server's every process
//! at once, as the process backend's SIGSTOP of its group); kill = SIGKILL of
//! the container's first process (for a server with worker processes, its
//! parent: the kernel then kills every process of its pid namespace, a crash of
//! the whole server); restart = `docker start` of the same container, which
//! keeps its filesystem and mounts. fencecheck's storage rebuilds its state from
//! its log (`storage.jsonl`, in the bind-mounted run directory); a resource's
//! server recovers from its data volume (PostgreSQL replays its WAL, and takes
//! its own stale `postmaster.pid` for what it is, since the pid in it is its own
//! again).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use testcontainers::bollard::Docker;

use super::cleanup::{tracked, InFlight};
use super::container::{self, ContainerSpec, MountSpec, Running, StartFailure, READY_DEADLINE};
use super::network;
use crate::resources::container::ContainerStorage;
use crate::scenario::Scenario;

const STORAGE_PORT: u16 = 7000;

pub(super) enum Kind {
    /// fencecheck's storage service.
    Fencecheck,
    /// A fenced resource's own server.
    Own(Box<dyn ContainerStorage>),
}

pub(super) struct Storage {
    pub spec: ContainerSpec,
    pub kind: Kind,
    /// Its data volume (PostgreSQL's data directory), made before the first start.
    pub volume: Option<String>,
    /// Its published address on the host.
    pub addr: SocketAddr,
    /// Where its output is saved when the run ends.
    pub log: PathBuf,
    container: Option<Running>,
    running: bool,
}

impl Storage {
    /// fencecheck's storage, writing its log into the bind-mounted run directory.
    pub(super) fn fencecheck(
        name: String,
        image: &str,
        scenario: &Scenario,
        run_dir: &Path,
        port: u16,
    ) -> Storage {
        let st = &scenario.storage;
        let spec = ContainerSpec {
            name,
            image: image.to_string(),
            role: "storage",
            cmd: vec![
                "--listen".into(),
                format!("0.0.0.0:{STORAGE_PORT}"),
                "--log".into(),
                "/out/storage.jsonl".into(),
                "--fencing".into(),
                st.fencing.as_str().into(),
                "--durability".into(),
                st.durability.as_str().into(),
            ],
            env: Vec::new(),
            network: None,
            ports: vec![(STORAGE_PORT, port)],
            mounts: vec![MountSpec::Bind {
                host: run_dir.display().to_string(),
                target: "/out".into(),
            }],
            // The log file belongs to whoever runs fencecheck.
            user: Some(format!(
                "{}:{}",
                nix::unistd::getuid(),
                nix::unistd::getgid()
            )),
            ready_line: "storage listening",
            auto_remove: false,
        };
        Storage::new(
            spec,
            Kind::Fencecheck,
            None,
            port,
            run_dir.join(crate::record::rundir::STORAGE_PROCESS_LOG),
        )
    }

    /// A resource's own server, `<prefix>-<name>` from `image`, on a data volume
    /// of its own.
    pub(super) fn own(
        prefix: &str,
        image: &str,
        own: Box<dyn ContainerStorage>,
        run_dir: &Path,
        port: u16,
    ) -> Storage {
        let s = own.spec();
        let name = format!("{prefix}-{}", own.name());
        let volume = format!("{name}-data");
        let spec = ContainerSpec {
            name,
            image: image.to_string(),
            role: own.name(),
            cmd: s.args,
            env: Vec::new(),
            network: None,
            ports: vec![(s.port, port)],
            mounts: vec![MountSpec::Volume {
                name: volume.clone(),
                target: s.data_dir.into(),
            }],
            // The image's own user.
            user: None,
            ready_line: s.ready_line,
            auto_remove: false,
        };
        let log = run_dir.join(s.log);
        Storage::new(spec, Kind::Own(own), Some(volume), port, log)
    }

    fn new(
        spec: ContainerSpec,
        kind: Kind,
        volume: Option<String>,
        port: u16,
        log: PathBuf,
    ) -> Storage {
        Storage {
            spec,
            kind,
            volume,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            log,
            container: None,
            running: false,
        }
    }

    pub(super) fn name(&self) -> &str {
        &self.spec.name
    }

    /// "the storage" or the resource's server ("PostgreSQL"), for messages.
    pub(super) fn what(&self) -> &'static str {
        match &self.kind {
            Kind::Fencecheck => "the storage",
            Kind::Own(o) => o.what(),
        }
    }

    pub(super) fn running(&self) -> bool {
        self.running
    }

    pub(super) fn container(&self) -> Result<&Running> {
        self.container.as_ref().context("no storage container")
    }

    /// The container, for its removal (None once taken or never started).
    pub(super) fn take_container(&mut self) -> Option<Running> {
        self.running = false;
        self.container.take()
    }

    /// Its volume (if any), then the container, up to its ready line.
    pub(super) async fn start(
        &mut self,
        d: &Docker,
        inflight: &InFlight,
        run_id: &str,
    ) -> Result<(), StartFailure> {
        if let Some(v) = &self.volume {
            let role = format!("{}-data", self.spec.role);
            network::create_volume(d, inflight, run_id, v, &role)
                .await
                .map_err(|error| StartFailure {
                    error,
                    output: None,
                })?;
        }
        self.container = Some(self.spec.start(run_id, inflight).await?);
        self.running = true;
        Ok(())
    }

    /// Waits until it answers (fencecheck's storage: `/health`; a resource's
    /// server: its own probe, PostgreSQL's `SELECT 1`), failing at once if the
    /// container exits.
    pub(super) async fn wait_ready(&self, d: &Docker) -> Result<()> {
        let c = self.container()?;
        let own = match &self.kind {
            Kind::Fencecheck => {
                return container::wait_healthy(d, self.name(), c, self.addr, "/health").await
            }
            Kind::Own(o) => o,
        };
        let end = tokio::time::Instant::now() + READY_DEADLINE;
        loop {
            let round = tokio::time::Instant::now() + Duration::from_secs(2);
            if own.answers(self.addr, round.min(end)).await {
                return Ok(());
            }
            container::fail_if_exited(d, self.name(), c).await?;
            if tokio::time::Instant::now() >= end {
                bail!(
                    "{} in {} does not answer at {} after {}",
                    own.what(),
                    self.name(),
                    self.addr,
                    humantime::format_duration(READY_DEADLINE)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Once it first answers: what a resource's server needs (its tables).
    pub(super) async fn prepare(&self) -> Result<()> {
        match &self.kind {
            Kind::Fencecheck => Ok(()),
            Kind::Own(o) => o.prepare(self.addr).await,
        }
    }

    /// SIGKILL of the container's first process (see the module comment); the
    /// container, its mounts and its host port stay.
    pub(super) async fn kill(&mut self, d: &Docker) -> Result<serde_json::Value> {
        if !self.running {
            bail!("{} is not running", self.what());
        }
        let c = self.container()?.clone();
        let pid = container::pid(d, &c).await;
        container::kill(d, &c, "SIGKILL").await?;
        self.running = false;
        Ok(serde_json::json!({
            "action": "docker kill", "signal": "SIGKILL", "container": self.name(), "pid": pid
        }))
    }

    /// `docker start` of the same container, then the wait until it answers.
    pub(super) async fn restart(
        &mut self,
        d: &Docker,
        inflight: &InFlight,
    ) -> Result<serde_json::Value> {
        let c = self.container()?.clone();
        let t0 = Instant::now();
        if !self.running {
            let c2 = c.clone();
            tracked(inflight, async move { c2.start().await })
                .await?
                .with_context(|| format!("docker start {}", self.name()))?;
            self.running = true;
        }
        self.wait_ready(d).await.with_context(|| {
            format!("the restarted {}; see {}", self.what(), self.log.display())
        })?;
        Ok(serde_json::json!({
            "action": "docker start",
            "container": self.name(),
            "pid": container::pid(d, &c).await,
            "ready_ms": t0.elapsed().as_millis() as u64,
        }))
    }
}

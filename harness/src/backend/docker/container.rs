//! One container's lifecycle through testcontainers: created on the run's network
//! with its labels, mounts and fixed loopback ports, started, and waited for until
//! it prints its ready line. What testcontainers lacks (a kill with a chosen signal)
//! goes through its re-export of bollard.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use testcontainers::bollard::models::PortBinding;
use testcontainers::bollard::query_parameters::KillContainerOptionsBuilder;
use testcontainers::bollard::Docker;
use testcontainers::core::error::WaitContainerError;
use testcontainers::core::logs::WaitLogError;
use testcontainers::core::{AccessMode, ContainerPort, Mount, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt, TestcontainersError};

use super::cleanup::{container_logs, tracked, InFlight};
use super::labels;

/// A started container. Shared so an engine call on it can run as a task of its
/// own (see `cleanup::tracked`).
pub(super) type Running = Arc<ContainerAsync<GenericImage>>;

/// The host address every published port is bound on: nothing of a run is
/// reachable from outside the machine.
pub(super) const HOST: &str = "127.0.0.1";
/// How long a container may take to print its ready line, and then to answer
/// healthy.
pub(super) const READY_DEADLINE: Duration = Duration::from_secs(60);

/// Where a container's storage comes from.
#[derive(Debug, Clone)]
pub(crate) enum MountSpec {
    /// A named volume (created beforehand, with the run's label): survives a kill
    /// and a start of the same container.
    Volume { name: String, target: String },
    /// A host directory or file.
    Bind { host: String, target: String },
    /// A host file the container only reads (a ZooKeeper member's config and myid).
    BindReadOnly { host: String, target: String },
}

/// Everything needed to create and start one container.
#[derive(Debug, Clone)]
pub(crate) struct ContainerSpec {
    pub name: String,
    /// `repository:tag` of a locally built image.
    pub image: String,
    /// `fencecheck.role` label: etcd, storage, reaper, …
    pub role: &'static str,
    pub cmd: Vec<String>,
    pub env: Vec<(String, String)>,
    /// The network it is created on (`None`: the engine's default bridge).
    pub network: Option<String>,
    /// Container port → host port, bound on 127.0.0.1 (0: the engine picks one).
    pub ports: Vec<(u16, u16)>,
    pub mounts: Vec<MountSpec>,
    pub user: Option<String>,
    /// A line the service prints once it is up (on stdout or stderr).
    pub ready_line: &'static str,
    /// Removed by the engine when it exits (the reaper).
    pub auto_remove: bool,
}

/// Why a container did not come up, with its output when it exited early.
pub(super) struct StartFailure {
    pub error: anyhow::Error,
    /// What it printed before it exited (its container is gone: testcontainers
    /// removes a container that never became ready).
    pub output: Option<Vec<u8>>,
}

impl ContainerSpec {
    fn request(&self, run_id: &str) -> testcontainers::ContainerRequest<GenericImage> {
        let (repo, tag) = self
            .image
            .rsplit_once(':')
            .unwrap_or((&self.image, "latest"));
        let mut image = GenericImage::new(repo, tag)
            .with_wait_for(WaitFor::message_on_either_std(self.ready_line));
        for &(port, _) in &self.ports {
            image = image.with_exposed_port(ContainerPort::Tcp(port));
        }
        let mut req = image
            .with_container_name(&self.name)
            .with_labels(labels(run_id, self.role))
            .with_cmd(self.cmd.clone())
            .with_startup_timeout(READY_DEADLINE);
        for (k, v) in &self.env {
            req = req.with_env_var(k, v);
        }
        if let Some(n) = &self.network {
            // Exists already (created with the run's label), so testcontainers
            // joins it at creation and leaves its removal to us.
            req = req.with_network(n);
        }
        for &(port, host_port) in &self.ports {
            req = req.with_mapped_port(host_port, ContainerPort::Tcp(port));
        }
        for m in &self.mounts {
            req = req.with_mount(match m {
                MountSpec::Volume { name, target } => Mount::volume_mount(name, target),
                MountSpec::Bind { host, target } => Mount::bind_mount(host, target),
                MountSpec::BindReadOnly { host, target } => {
                    Mount::bind_mount(host, target).with_access_mode(AccessMode::ReadOnly)
                }
            });
        }
        if let Some(u) = &self.user {
            req = req.with_user(u);
        }
        let auto_remove = self.auto_remove;
        let peer = self.network.is_some();
        // testcontainers binds mapped ports on every interface; a run's services are
        // for this machine only.
        req.with_host_config_modifier(move |hc| {
            if peer {
                // Members look their peers up by container name, and a peer that is
                // not started yet (or killed) is unknown to the engine's DNS, which
                // then asks the host's servers: where those do not answer, each
                // look-up would hang for glibc's 2 × 5 s (a 3-member ZooKeeper
                // resolves every server line before it even binds its port).
                hc.dns_options = Some(vec!["timeout:1".into(), "attempts:1".into()]);
            }
            if let Some(bindings) = hc.port_bindings.as_mut() {
                for b in bindings.values_mut().flatten().flatten() {
                    *b = PortBinding {
                        host_ip: Some(HOST.into()),
                        host_port: b.host_port.take(),
                    };
                }
            }
            if auto_remove {
                hc.auto_remove = Some(true);
            }
        })
    }

    /// Creates and starts the container, and waits for its ready line.
    pub(super) async fn start(
        &self,
        run_id: &str,
        inflight: &InFlight,
    ) -> Result<Running, StartFailure> {
        let req = self.request(run_id);
        let started = tracked(inflight, async move { req.start().await })
            .await
            .map_err(|error| StartFailure {
                error,
                output: None,
            })?;
        match started {
            Ok(c) => Ok(Arc::new(c)),
            Err(e) => {
                let output = early_output(&e);
                let error = match &output {
                    Some(out) => anyhow::anyhow!(
                        "container {} exited before it was ready: {}",
                        self.name,
                        telling_line(&String::from_utf8_lossy(out))
                    ),
                    None => anyhow::Error::new(e).context(format!("docker run {}", self.name)),
                };
                Err(StartFailure { error, output })
            }
        }
    }
}

/// The output a container printed before its log stream ended without the ready
/// line, i.e. before it exited.
fn early_output(e: &TestcontainersError) -> Option<Vec<u8>> {
    match e {
        TestcontainersError::WaitContainer(WaitContainerError::WaitLog(
            WaitLogError::EndOfStream(lines),
        )) => Some(lines.iter().flat_map(|l| l.iter().copied()).collect()),
        _ => None,
    }
}

/// Sends `signal` to the container's main process (`docker kill -s`).
pub(super) async fn kill(d: &Docker, c: &Running, signal: &str) -> Result<()> {
    let opts = KillContainerOptionsBuilder::default()
        .signal(signal)
        .build();
    d.kill_container(c.id(), Some(opts))
        .await
        .with_context(|| format!("docker kill -s {signal} {}", c.id()))
}

/// Is the container paused (`docker inspect`'s `State.Paused`)?
pub(super) async fn paused(d: &Docker, c: &Running) -> Result<bool> {
    let info = d
        .inspect_container(c.id(), None)
        .await
        .with_context(|| format!("docker inspect {}", c.id()))?;
    Ok(info.state.and_then(|s| s.paused).unwrap_or(false))
}

/// The host pid of the container's main process, for the nemesis record.
pub(super) async fn pid(d: &Docker, c: &Running) -> Option<i64> {
    d.inspect_container(c.id(), None)
        .await
        .ok()
        .and_then(|i| i.state)
        .and_then(|s| s.pid)
}

/// Polls `http://addr{path}` until it answers healthy, failing at once when the
/// container has exited.
pub(super) async fn wait_healthy(
    d: &Docker,
    name: &str,
    c: &Running,
    addr: SocketAddr,
    path: &str,
) -> Result<()> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()?;
    let url = format!("http://{addr}{path}");
    let end = tokio::time::Instant::now() + READY_DEADLINE;
    let mut wait = Duration::from_millis(20);
    loop {
        if let Ok(r) = http.get(&url).send().await {
            let ok = r.status().is_success();
            let body = r.text().await.unwrap_or_default();
            // etcd: {"health":"true"}; the storage: any 2xx.
            if ok && (!body.contains("health") || body.contains("true")) {
                return Ok(());
            }
        }
        fail_if_exited(d, name, c).await?;
        if tokio::time::Instant::now() >= end {
            bail!(
                "container {name} not ready at {url} after {}",
                humantime::format_duration(READY_DEADLINE)
            );
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_millis(250));
    }
}

/// An error with the telling line of its output if the container has exited.
pub(super) async fn fail_if_exited(d: &Docker, name: &str, c: &Running) -> Result<()> {
    if let Ok(false) = c.is_running().await {
        let code = c.exit_code().await.ok().flatten().unwrap_or(-1);
        let out = container_logs(d, c.id()).await;
        bail!(
            "container {name} exited with code {code}: {}",
            telling_line(&String::from_utf8_lossy(&out))
        );
    }
    Ok(())
}

/// The line of a failed container's output that says why: the last one that looks
/// like an error (etcd prints its whole usage after a bad flag), else the last one.
pub(super) fn telling_line(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let looks_bad = |l: &&&str| {
        let l = l.to_lowercase();
        [
            "error",
            "fatal",
            "panic",
            "not defined",
            "invalid",
            "failed",
        ]
        .iter()
        .any(|w| l.contains(w))
    };
    lines
        .iter()
        .rev()
        .find(looks_bad)
        .or(lines.last())
        .map(|l| l.trim().chars().take(400).collect())
        .unwrap_or_else(|| "(no output)".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_telling_line_of_a_failed_start() {
        let out = "flag provided but not defined: -no-such-flag\nUsage:\n\n  etcd [flags]\n  Run the proxy.\n";
        assert_eq!(
            telling_line(out),
            "flag provided but not defined: -no-such-flag"
        );
        assert_eq!(telling_line("a\nb\n"), "b");
        assert_eq!(telling_line(""), "(no output)");
    }

    #[test]
    fn published_ports_are_bound_on_loopback() {
        let spec = ContainerSpec {
            name: "n".into(),
            image: "fencecheck/x:1".into(),
            role: "etcd",
            cmd: vec![],
            env: vec![],
            network: None,
            ports: vec![(2379, 40000)],
            mounts: vec![],
            user: None,
            ready_line: "up",
            auto_remove: false,
        };
        let req = spec.request("fc1");
        let mut hc = testcontainers::bollard::models::HostConfig {
            port_bindings: Some(std::collections::HashMap::from([(
                "2379/tcp".to_string(),
                Some(vec![PortBinding {
                    host_ip: None,
                    host_port: Some("40000".into()),
                }]),
            )])),
            ..Default::default()
        };
        (req.host_config_modifier().expect("a modifier"))(&mut hc);
        let b = &hc.port_bindings.expect("bindings")["2379/tcp"];
        assert_eq!(
            b.as_ref().expect("binding")[0].host_ip.as_deref(),
            Some(HOST)
        );
    }
}

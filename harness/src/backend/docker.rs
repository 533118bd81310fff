//! The `docker` backend: etcd members and the storage as containers, through the
//! Docker engine API (bollard). Workers stay host processes; they reach every
//! container through a host port bound on 127.0.0.1 (fixed when the run starts, so a
//! member restarted after a kill keeps its address), with the harness's own fault
//! proxies in front as in the process backend.
//!
//! Per run (id `fc<hex>`), everything labelled `fencecheck.run=<id>`:
//! - a bridge network `fencecheck-<id>`: the containers' published ports;
//! - an internal network `fencecheck-<id>-peers`: raft traffic only, members reach
//!   each other as `m0`, `m1`, … (aliases that exist on this network alone), so
//!   `docker network disconnect` of a member from it cuts its peer links and nothing
//!   else (clients still reach it, as with the process backend's peer proxies);
//! - a volume per member for its data dir (a kill + start keeps it);
//! - the run directory bind-mounted into the storage at /out, so `storage.jsonl` is
//!   written straight into it (readable even if the harness is killed).
//!
//! Faults: pause = `docker pause` (cgroup freezer), kill = `docker kill` (SIGKILL),
//! restart = `docker start` on the same volume, isolate = disconnect from the peer
//! network. Clean-up: `stop` removes containers, networks and volumes; a guard
//! removes them by label on drop (errors, panics, Ctrl-C); `fencecheck clean`
//! removes what a run killed outright left behind.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bollard::models::{
    ContainerCreateBody, EndpointSettings, HostConfig, Mount, MountType, NetworkConnectRequest,
    NetworkCreateRequest, NetworkDisconnectRequest, NetworkingConfig, PortBinding,
    VolumeCreateRequest,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, KillContainerOptionsBuilder, ListContainersOptionsBuilder,
    ListImagesOptionsBuilder, ListNetworksOptionsBuilder, ListVolumesOptionsBuilder,
    LogsOptionsBuilder, RemoveContainerOptionsBuilder, RemoveImageOptionsBuilder,
    RemoveVolumeOptionsBuilder, StopContainerOptionsBuilder,
};
use bollard::{ClientVersion, Docker};
use futures_util::StreamExt;

use super::{Deployment, Service};
use crate::images::{self, Image};
use crate::proc::free_port;
use crate::scenario::Scenario;

/// The label every container, network and volume of a run carries.
pub const RUN_LABEL: &str = "fencecheck.run";

/// How long `auto` waits for an engine to answer before choosing processes.
pub const PING_TIMEOUT: Duration = Duration::from_secs(2);
/// How long an explicit `--backend docker` waits for the engine.
pub const ENGINE_TIMEOUT: Duration = Duration::from_secs(10);
const READY_DEADLINE: Duration = Duration::from_secs(60);
const HOST: &str = "127.0.0.1";
const CLIENT_PORT: u16 = 2379;
const PEER_PORT: u16 = 2380;
const STORAGE_PORT: u16 = 7000;
/// Test hook (not a user option): extra arguments for every etcd member, e.g. a bad
/// flag, to exercise a failed start.
const ETCD_EXTRA_ARGS_ENV: &str = "FENCECHECK_TEST_ETCD_EXTRA_ARGS";

/// A Docker engine that answered, with the API version both sides speak.
pub struct Engine {
    pub docker: Docker,
    /// e.g. "20.10.24+dfsg1 (API 1.41)".
    pub version: String,
}

/// Connects to the engine (`DOCKER_HOST`, else the local socket) and asks its
/// version, within `timeout`. An engine older than this client's API version
/// answers with its maximum; the client then speaks that version.
pub async fn engine(timeout: Duration) -> Result<Engine> {
    let host =
        std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".into());
    let connect = |v: &ClientVersion| -> Result<Docker> {
        let secs = 120;
        Ok(
            if host.starts_with("tcp://") || host.starts_with("http://") {
                Docker::connect_with_http(&host, secs, v)?
            } else {
                Docker::connect_with_unix(&host, secs, v)?
            },
        )
    };
    let ask = |d: Docker| async move {
        match tokio::time::timeout(timeout, d.version()).await {
            Ok(r) => r.map(|v| (d, v)).map_err(anyhow::Error::from),
            Err(_) => Err(anyhow::anyhow!(
                "no answer within {}",
                humantime::format_duration(timeout)
            )),
        }
    };
    let first = connect(bollard::API_DEFAULT_VERSION)
        .with_context(|| format!("cannot connect to the Docker engine at {host}"))?;
    let (docker, v) = match ask(first).await {
        Ok(x) => x,
        Err(e) => {
            let msg = format!("{e:#}");
            let Some(max) = max_api_version(&msg) else {
                return Err(e.context(format!("the Docker engine at {host} did not answer")));
            };
            ask(connect(&max)?).await.with_context(|| {
                format!("the Docker engine at {host} did not answer at API {msg}")
            })?
        }
    };
    let version = format!(
        "{} (API {})",
        v.version.unwrap_or_default(),
        v.api_version.unwrap_or_default()
    );
    Ok(Engine { docker, version })
}

/// "client version 1.53 is too new. Maximum supported API version is 1.41" → 1.41.
fn max_api_version(msg: &str) -> Option<ClientVersion> {
    let rest = msg.split("Maximum supported API version is ").nth(1)?;
    let v: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let (maj, min) = v.split_once('.')?;
    Some(ClientVersion {
        major_version: maj.parse().ok()?,
        minor_version: min.trim_end_matches('.').parse().ok()?,
    })
}

struct Member {
    /// Container name, `fencecheck-<id>-m<i>`.
    name: String,
    /// The name peers use, on the peer network only.
    alias: String,
    volume: String,
    running: bool,
}

pub struct DockerBackend {
    docker: Docker,
    run_id: String,
    network: String,
    peer_network: String,
    members: Vec<Member>,
    storage: String,
    run_dir: PathBuf,
    /// Containers frozen by `pause` and not yet resumed.
    paused: HashSet<String>,
    /// Members cut off from the peer network.
    isolated: HashSet<usize>,
    guard: CleanupGuard,
}

/// What a run created, for `docker.json` in the run directory.
#[derive(serde::Serialize)]
struct Record<'a> {
    run_id: &'a str,
    engine: &'a str,
    label: String,
    network: &'a str,
    peer_network: &'a str,
    images: std::collections::BTreeMap<&'a str, &'a Image>,
    members: Vec<&'a str>,
    volumes: Vec<&'a str>,
    storage: &'a str,
}

fn labels(run_id: &str, role: &str) -> HashMap<String, String> {
    HashMap::from([
        (RUN_LABEL.to_string(), run_id.to_string()),
        ("fencecheck.role".to_string(), role.to_string()),
    ])
}

fn new_run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let x = (nanos as u64) ^ (u64::from(std::process::id()) << 40);
    format!("fc{:010x}", x & 0xff_ffff_ffff)
}

impl DockerBackend {
    pub async fn start(
        engine: Engine,
        scenario: &Scenario,
        run_dir: &Path,
        say: &dyn Fn(&str),
    ) -> Result<(DockerBackend, Deployment)> {
        let docker = engine.docker;
        let run_dir = std::fs::canonicalize(run_dir)
            .with_context(|| format!("cannot resolve {}", run_dir.display()))?;
        say(&format!("docker engine {} answered", engine.version));
        let etcd_image = images::etcd_image(&docker, scenario.etcd_version(), say).await?;
        let storage_image = images::storage_image(&docker, say).await?;
        let etcd_version = etcd_image
            .tag
            .rsplit_once(':')
            .and_then(|(_, t)| t.rsplit_once('-'))
            .map(|(v, _)| v.to_string())
            .unwrap_or_default();

        let run_id = new_run_id();
        let n = scenario.cluster.members.0 as usize;
        let prefix = format!("fencecheck-{run_id}");
        let mut backend = DockerBackend {
            docker: docker.clone(),
            run_id: run_id.clone(),
            network: prefix.clone(),
            peer_network: format!("{prefix}-peers"),
            members: (0..n)
                .map(|i| Member {
                    name: format!("{prefix}-m{i}"),
                    alias: format!("m{i}"),
                    volume: format!("{prefix}-m{i}-data"),
                    running: false,
                })
                .collect(),
            storage: format!("{prefix}-storage"),
            run_dir: run_dir.clone(),
            paused: HashSet::new(),
            isolated: HashSet::new(),
            guard: CleanupGuard::new(&run_id),
        };
        // Where each container's output goes when the run ends, however it ends.
        backend.guard.logs = backend
            .members
            .iter()
            .enumerate()
            .map(|(i, m)| (m.name.clone(), run_dir.join(format!("etcd-{i}.log"))))
            .chain([(backend.storage.clone(), run_dir.join("storage.log"))])
            .collect();
        say(&format!(
            "starting {n} etcd {etcd_version} container(s) and the storage container \
             (run {run_id}, network {prefix})"
        ));
        let clients = match backend
            .create_all(scenario, &etcd_image, &storage_image)
            .await
        {
            Ok(c) => c,
            Err(e) => {
                backend.stop().await;
                return Err(e);
            }
        };
        let (clients, storage) = clients;
        let record = Record {
            run_id: &run_id,
            engine: &engine.version,
            label: format!("{RUN_LABEL}={run_id}"),
            network: &backend.network,
            peer_network: &backend.peer_network,
            images: [("etcd", &etcd_image), ("storage", &storage_image)].into(),
            members: backend.members.iter().map(|m| m.name.as_str()).collect(),
            volumes: backend.members.iter().map(|m| m.volume.as_str()).collect(),
            storage: &backend.storage,
        };
        if let Ok(j) = serde_json::to_string_pretty(&record) {
            let _ = std::fs::write(run_dir.join("docker.json"), j + "\n");
        }
        for (i, &client) in clients.iter().enumerate() {
            let name = backend.members[i].name.clone();
            if let Err(e) = backend.wait_ready(&name, client, "/health").await {
                backend.stop().await;
                return Err(e.context(format!(
                    "etcd member {i} did not start; see {}",
                    run_dir.join(format!("etcd-{i}.log")).display()
                )));
            }
        }
        let name = backend.storage.clone();
        if let Err(e) = backend.wait_ready(&name, storage, "/health").await {
            backend.stop().await;
            return Err(e.context(format!(
                "the storage did not start; see {}",
                run_dir.join("storage.log").display()
            )));
        }
        let deployment = Deployment {
            service: scenario.lock.service,
            clients,
            storage,
            peer_proxies: Vec::new(),
            version: etcd_version,
            backend: "docker".into(),
            backend_reason: String::new(),
        };
        Ok((backend, deployment))
    }

    /// Networks, volumes and containers; returns the host addresses of the members'
    /// client ports and of the storage.
    async fn create_all(
        &mut self,
        scenario: &Scenario,
        etcd_image: &Image,
        storage_image: &Image,
    ) -> Result<(Vec<SocketAddr>, SocketAddr)> {
        for (name, internal) in [(&self.network, false), (&self.peer_network, true)] {
            let req = NetworkCreateRequest {
                name: name.clone(),
                driver: Some("bridge".into()),
                internal: Some(internal),
                labels: Some(labels(&self.run_id, "network")),
                ..Default::default()
            };
            self.call(|d| async move { d.create_network(req).await })
                .await
                .with_context(|| format!("docker network create {name}"))?;
        }
        let initial_cluster = self
            .members
            .iter()
            .map(|m| format!("{}=http://{}:{PEER_PORT}", m.alias, m.alias))
            .collect::<Vec<_>>()
            .join(",");
        let extra: Vec<String> = std::env::var(ETCD_EXTRA_ARGS_ENV)
            .map(|s| s.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default();
        let mut clients = Vec::new();
        for m in &self.members {
            let req = VolumeCreateRequest {
                name: Some(m.volume.clone()),
                labels: Some(labels(&self.run_id, "etcd-data")),
                ..Default::default()
            };
            self.call(|d| async move { d.create_volume(req).await })
                .await
                .with_context(|| format!("docker volume create {}", m.volume))?;
            let port = free_port(HOST)?;
            let client: SocketAddr = format!("{HOST}:{port}").parse()?;
            let mut cmd: Vec<String> = [
                "--name",
                &m.alias,
                "--data-dir",
                "/data",
                "--listen-client-urls",
                &format!("http://0.0.0.0:{CLIENT_PORT}"),
                "--advertise-client-urls",
                &format!("http://{client}"),
                "--listen-peer-urls",
                &format!("http://0.0.0.0:{PEER_PORT}"),
                "--initial-advertise-peer-urls",
                &format!("http://{}:{PEER_PORT}", m.alias),
                "--initial-cluster",
                &initial_cluster,
                "--initial-cluster-state",
                "new",
                "--initial-cluster-token",
                &format!("fencecheck-{}", self.run_id),
                "--logger",
                "zap",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            cmd.extend(extra.iter().cloned());
            let body = ContainerCreateBody {
                image: Some(etcd_image.tag.clone()),
                cmd: Some(cmd),
                labels: Some(labels(&self.run_id, "etcd")),
                exposed_ports: Some(vec![format!("{CLIENT_PORT}/tcp")]),
                host_config: Some(HostConfig {
                    port_bindings: Some(port_map(CLIENT_PORT, port)),
                    mounts: Some(vec![Mount {
                        target: Some("/data".into()),
                        source: Some(m.volume.clone()),
                        typ: Some(MountType::VOLUME),
                        ..Default::default()
                    }]),
                    network_mode: Some(self.network.clone()),
                    ..Default::default()
                }),
                networking_config: Some(endpoint(&self.network, &m.name)),
                ..Default::default()
            };
            self.create(&m.name, body).await?;
            self.connect(&m.name, &m.alias).await?;
            clients.push(client);
        }
        let port = free_port(HOST)?;
        let storage: SocketAddr = format!("{HOST}:{port}").parse()?;
        let uid = nix::unistd::getuid();
        let gid = nix::unistd::getgid();
        let body = ContainerCreateBody {
            image: Some(storage_image.tag.clone()),
            cmd: Some(vec![
                "--listen".into(),
                format!("0.0.0.0:{STORAGE_PORT}"),
                "--log".into(),
                "/out/storage.jsonl".into(),
                "--fencing".into(),
                scenario.storage.fencing.as_str().into(),
            ]),
            // The log file belongs to whoever runs fencecheck.
            user: Some(format!("{uid}:{gid}")),
            labels: Some(labels(&self.run_id, "storage")),
            exposed_ports: Some(vec![format!("{STORAGE_PORT}/tcp")]),
            // The service ends cleanly on SIGINT (PID 1 ignores an unhandled SIGTERM).
            stop_signal: Some("SIGINT".into()),
            host_config: Some(HostConfig {
                port_bindings: Some(port_map(STORAGE_PORT, port)),
                binds: Some(vec![format!("{}:/out", self.run_dir.display())]),
                network_mode: Some(self.network.clone()),
                ..Default::default()
            }),
            networking_config: Some(endpoint(&self.network, &self.storage)),
            ..Default::default()
        };
        self.create(&self.storage, body).await?;

        for i in 0..self.members.len() {
            let name = self.members[i].name.clone();
            self.start_container(&name).await?;
            self.members[i].running = true;
        }
        self.start_container(&self.storage).await?;
        Ok((clients, storage))
    }

    /// Polls `http://addr{path}` until it answers healthy, failing at once when the
    /// container has exited.
    async fn wait_ready(&self, container: &str, addr: SocketAddr, path: &str) -> Result<()> {
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
            let state = self
                .docker
                .inspect_container(container, None)
                .await
                .ok()
                .and_then(|i| i.state);
            if let Some(s) = state {
                if s.running == Some(false) {
                    let tail = self.log_tail(container).await;
                    bail!(
                        "container {container} exited with code {}: {tail}",
                        s.exit_code.unwrap_or(-1)
                    );
                }
            }
            if tokio::time::Instant::now() >= end {
                bail!(
                    "container {container} not ready at {url} after {}",
                    humantime::format_duration(READY_DEADLINE)
                );
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_millis(250));
        }
    }

    async fn logs(&self, container: &str) -> Vec<u8> {
        container_logs(&self.docker, container).await
    }

    async fn log_tail(&self, container: &str) -> String {
        let all = self.logs(container).await;
        let text = String::from_utf8_lossy(&all);
        telling_line(&text)
    }

    fn container_of(&self, who: Service) -> Result<&str> {
        match who {
            Service::Member(i) => self
                .members
                .get(i)
                .map(|m| m.name.as_str())
                .context("no such member"),
            Service::Storage => Ok(&self.storage),
        }
    }

    pub async fn pause(&mut self, who: Service) -> Result<serde_json::Value> {
        let name = self.container_of(who)?.to_string();
        if let Service::Member(i) = who {
            if !self.members[i].running {
                bail!("member {i} is not running");
            }
        }
        // Recorded before the call, so a heal never misses it.
        self.paused.insert(name.clone());
        let n = name.clone();
        self.call(|d| async move { d.pause_container(&n).await })
            .await
            .with_context(|| format!("docker pause {name}"))?;
        Ok(serde_json::json!({ "action": "docker pause", "container": name }))
    }

    pub async fn resume(&mut self, who: Service) -> Result<()> {
        let name = self.container_of(who)?.to_string();
        self.paused.remove(&name);
        let n = name.clone();
        self.call(|d| async move { d.unpause_container(&n).await })
            .await
            .with_context(|| format!("docker unpause {name}"))
    }

    /// `docker kill` (SIGKILL) of member `i`; its volume stays.
    pub async fn kill_member(&mut self, i: usize) -> Result<serde_json::Value> {
        let m = self.members.get(i).context("no such member")?;
        if !m.running {
            bail!("member {i} is not running");
        }
        let name = m.name.clone();
        // A paused container cannot be killed: thaw it first.
        if self.paused.remove(&name) {
            let _ = self.docker.unpause_container(&name).await;
        }
        let pid = self.pid(&name).await;
        let n = name.clone();
        let opts = KillContainerOptionsBuilder::default()
            .signal("SIGKILL")
            .build();
        self.call(|d| async move { d.kill_container(&n, Some(opts)).await })
            .await
            .with_context(|| format!("docker kill {name}"))?;
        self.members[i].running = false;
        Ok(serde_json::json!({
            "action": "docker kill", "signal": "SIGKILL", "container": name, "pid": pid
        }))
    }

    /// `docker start` of member `i` on its volume, with the same host port.
    pub async fn restart_member(&mut self, i: usize) -> Result<serde_json::Value> {
        let m = self.members.get(i).context("no such member")?;
        let name = m.name.clone();
        if !m.running {
            self.start_container(&name).await?;
            self.members[i].running = true;
        }
        let pid = self.pid(&name).await;
        Ok(serde_json::json!({ "action": "docker start", "container": name, "pid": pid }))
    }

    async fn pid(&self, container: &str) -> Option<i64> {
        self.docker
            .inspect_container(container, None)
            .await
            .ok()
            .and_then(|i| i.state)
            .and_then(|s| s.pid)
    }

    /// Disconnects members from the peer network (`on`), or connects them back with
    /// their peer alias.
    pub async fn isolate(&mut self, members: &[usize], on: bool) -> Result<()> {
        for &i in members {
            let m = self.members.get(i).context("no such member")?;
            let (name, alias) = (m.name.clone(), m.alias.clone());
            if on {
                self.isolated.insert(i);
                self.disconnect(&name).await?;
            } else {
                self.connect(&name, &alias).await?;
                self.isolated.remove(&i);
            }
        }
        Ok(())
    }

    async fn disconnect(&self, name: &str) -> Result<()> {
        let net = self.peer_network.clone();
        let req = NetworkDisconnectRequest {
            container: name.to_string(),
            force: Some(true),
        };
        self.call(|d| async move { d.disconnect_network(&net, req).await })
            .await
            .with_context(|| format!("docker network disconnect {} {name}", self.peer_network))
    }

    /// Connects a member to the peer network under its peer alias.
    async fn connect(&self, name: &str, alias: &str) -> Result<()> {
        let net = self.peer_network.clone();
        let req = NetworkConnectRequest {
            container: name.to_string(),
            endpoint_config: Some(EndpointSettings {
                aliases: Some(vec![alias.to_string()]),
                ..Default::default()
            }),
        };
        self.call(|d| async move { d.connect_network(&net, req).await })
            .await
            .with_context(|| format!("docker network connect {} {name}", self.peer_network))
    }

    async fn create(&self, name: &str, body: ContainerCreateBody) -> Result<()> {
        let opts = CreateContainerOptionsBuilder::default().name(name).build();
        self.call(|d| async move { d.create_container(Some(opts), body).await })
            .await
            .with_context(|| format!("docker create {name}"))?;
        Ok(())
    }

    async fn start_container(&self, name: &str) -> Result<()> {
        let n = name.to_string();
        self.call(|d| async move { d.start_container(&n, None).await })
            .await
            .with_context(|| format!("docker start {name}"))
    }

    /// One engine call that changes something, as a task of its own: if the run is
    /// dropped mid-call (Ctrl-C), the call still completes on our side as it does on
    /// the engine's, and the clean-up guard waits for it before removing by label,
    /// so nothing is created after the clean-up has looked.
    async fn call<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: FnOnce(Docker) -> Fut,
        Fut: std::future::Future<Output = Result<T, bollard::errors::Error>> + Send + 'static,
        T: Send + 'static,
    {
        let token = self.guard.inflight.enter();
        let fut = f(self.docker.clone());
        let r = tokio::spawn(async move {
            let _token = token;
            fut.await
        })
        .await
        .context("docker engine call")?;
        Ok(r?)
    }

    /// Heal phase: unpauses every paused container, reconnects every isolated member,
    /// starts every dead one.
    pub async fn heal(&mut self) -> Vec<String> {
        let mut done = Vec::new();
        for name in std::mem::take(&mut self.paused) {
            if self.docker.unpause_container(&name).await.is_ok() {
                done.push(format!("unpaused container {name}"));
            }
        }
        let mut isolated: Vec<usize> = self.isolated.iter().copied().collect();
        isolated.sort_unstable();
        for i in isolated {
            if self.isolate(&[i], false).await.is_ok() {
                done.push(format!("reconnected member {i}"));
            }
        }
        for i in 0..self.members.len() {
            if !self.members[i].running && self.restart_member(i).await.is_ok() {
                done.push(format!("restarted member {i}"));
            }
        }
        done
    }

    /// Saves every container's output into the run directory (`etcd-N.log`,
    /// `storage.log`), then removes the containers, the volumes and the networks.
    pub async fn stop(&mut self) {
        for name in std::mem::take(&mut self.paused) {
            let _ = self.docker.unpause_container(&name).await;
        }
        let _ = self
            .docker
            .stop_container(
                &self.storage,
                Some(StopContainerOptionsBuilder::default().t(2).build()),
            )
            .await;
        save_logs(&self.docker, &self.guard.logs).await;
        if let Err(e) = remove_run(&self.docker, Some(&self.run_id)).await {
            tracing::warn!("docker clean-up of run {}: {e:#}", self.run_id);
        } else {
            self.guard.disarm();
        }
    }
}

/// The line of a failed container's output that says why: the last one that looks
/// like an error (etcd prints its whole usage after a bad flag), else the last one.
fn telling_line(text: &str) -> String {
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

fn port_map(container_port: u16, host_port: u16) -> HashMap<String, Option<Vec<PortBinding>>> {
    HashMap::from([(
        format!("{container_port}/tcp"),
        Some(vec![PortBinding {
            host_ip: Some(HOST.into()),
            host_port: Some(host_port.to_string()),
        }]),
    )])
}

fn endpoint(network: &str, name: &str) -> NetworkingConfig {
    NetworkingConfig {
        endpoints_config: Some(HashMap::from([(
            network.to_string(),
            EndpointSettings {
                aliases: Some(vec![name.to_string()]),
                ..Default::default()
            },
        )])),
    }
}

/// A container's output so far (stdout and stderr, interleaved as written).
async fn container_logs(d: &Docker, container: &str) -> Vec<u8> {
    let opts = LogsOptionsBuilder::default()
        .stdout(true)
        .stderr(true)
        .build();
    let mut out = Vec::new();
    let mut s = d.logs(container, Some(opts));
    while let Some(Ok(chunk)) = s.next().await {
        out.extend_from_slice(&chunk.into_bytes());
    }
    out
}

/// Saves each container's output to its file (a container that never existed or
/// printed nothing leaves no file).
async fn save_logs(d: &Docker, logs: &[(String, PathBuf)]) {
    for (name, file) in logs {
        let bytes = container_logs(d, name).await;
        if !bytes.is_empty() {
            if let Err(e) = std::fs::write(file, bytes) {
                tracing::warn!(
                    "cannot save the output of {name} to {}: {e}",
                    file.display()
                );
            }
        }
    }
}

/// What a removal did.
#[derive(Debug, Default)]
pub struct Removed {
    pub containers: Vec<String>,
    pub networks: Vec<String>,
    pub volumes: Vec<String>,
    pub images: Vec<String>,
}

/// Removes the containers (forced), volumes and networks labelled
/// `fencecheck.run=<run_id>`, or of every run when `run_id` is None.
pub async fn remove_run(d: &Docker, run_id: Option<&str>) -> Result<Removed> {
    let label = match run_id {
        Some(id) => format!("{RUN_LABEL}={id}"),
        None => RUN_LABEL.to_string(),
    };
    let filters = HashMap::from([("label".to_string(), vec![label])]);
    let mut removed = Removed::default();
    let mut errors = Vec::new();
    let containers = d
        .list_containers(Some(
            ListContainersOptionsBuilder::default()
                .all(true)
                .filters(&filters)
                .build(),
        ))
        .await
        .context("docker ps")?;
    for c in containers {
        let Some(id) = c.id else { continue };
        let name = c
            .names
            .and_then(|n| n.first().cloned())
            .map(|n| n.trim_start_matches('/').to_string())
            .unwrap_or_else(|| id.clone());
        // A paused container is thawed first, so nothing is ever left frozen.
        let _ = d.unpause_container(&id).await;
        match d
            .remove_container(
                &id,
                Some(
                    RemoveContainerOptionsBuilder::default()
                        .force(true)
                        .v(true)
                        .build(),
                ),
            )
            .await
        {
            Ok(()) => removed.containers.push(name),
            Err(e) => errors.push(format!("docker rm {name}: {e}")),
        }
    }
    let volumes = d
        .list_volumes(Some(
            ListVolumesOptionsBuilder::default()
                .filters(&filters)
                .build(),
        ))
        .await
        .context("docker volume ls")?;
    for v in volumes.volumes.unwrap_or_default() {
        match d
            .remove_volume(
                &v.name,
                Some(RemoveVolumeOptionsBuilder::default().force(true).build()),
            )
            .await
        {
            Ok(()) => removed.volumes.push(v.name),
            Err(e) => errors.push(format!("docker volume rm {}: {e}", v.name)),
        }
    }
    let networks = d
        .list_networks(Some(
            ListNetworksOptionsBuilder::default()
                .filters(&filters)
                .build(),
        ))
        .await
        .context("docker network ls")?;
    for n in networks {
        let Some(name) = n.name else { continue };
        match d.remove_network(&name).await {
            Ok(()) => removed.networks.push(name),
            Err(e) => errors.push(format!("docker network rm {name}: {e}")),
        }
    }
    if !errors.is_empty() {
        bail!("{}", errors.join("; "));
    }
    Ok(removed)
}

/// Removes the images fencecheck built (label `fencecheck.image`).
pub async fn remove_images(d: &Docker) -> Result<Vec<String>> {
    let filters = HashMap::from([("label".to_string(), vec![images::IMAGE_LABEL.to_string()])]);
    let list = d
        .list_images(Some(
            ListImagesOptionsBuilder::default()
                .all(false)
                .filters(&filters)
                .build(),
        ))
        .await
        .context("docker images")?;
    let mut out = Vec::new();
    for i in list {
        let name = i.repo_tags.first().cloned().unwrap_or_else(|| i.id.clone());
        d.remove_image(
            &i.id,
            Some(RemoveImageOptionsBuilder::default().force(true).build()),
            None,
        )
        .await
        .with_context(|| format!("docker rmi {name}"))?;
        out.push(name);
    }
    Ok(out)
}

/// `fencecheck images`: builds (or reuses) the storage image and an etcd image per
/// version; one line per image.
pub async fn build_images(versions: &[crate::scenario::EtcdVersion]) -> Result<Vec<String>> {
    let e = engine(ENGINE_TIMEOUT)
        .await
        .context("no Docker engine answers; the images need one")?;
    let say = |m: &str| eprintln!("· {m}");
    let mut lines = Vec::new();
    let mut show = |what: &str, i: &Image| {
        lines.push(format!(
            "{what:<8} {} {} ({})",
            i.tag,
            i.id,
            if i.reused { "reused" } else { "built" }
        ))
    };
    for &v in versions {
        let i = images::etcd_image(&e.docker, v, &say).await?;
        show("etcd", &i);
    }
    let i = images::storage_image(&e.docker, &say).await?;
    show("storage", &i);
    Ok(lines)
}

/// `fencecheck clean`: removes what earlier runs left (label `fencecheck.run`), and
/// with `images` the images fencecheck built.
pub async fn clean(images: bool) -> Result<Vec<String>> {
    let e = engine(ENGINE_TIMEOUT)
        .await
        .context("no Docker engine answers: nothing to clean")?;
    let r = remove_run(&e.docker, None).await?;
    let mut lines = vec![format!(
        "removed {} container(s), {} network(s), {} volume(s) labelled {RUN_LABEL}",
        r.containers.len(),
        r.networks.len(),
        r.volumes.len()
    )];
    for (kind, names) in [
        ("container", &r.containers),
        ("network", &r.networks),
        ("volume", &r.volumes),
    ] {
        lines.extend(names.iter().map(|n| format!("  {kind} {n}")));
    }
    if images {
        let imgs = remove_images(&e.docker).await?;
        lines.push(format!("removed {} image(s)", imgs.len()));
        lines.extend(imgs.iter().map(|n| format!("  image {n}")));
    }
    Ok(lines)
}

/// Removes a run's containers, networks and volumes by label when dropped armed:
/// on an error, a panic, or a Ctrl-C that drops the run. Blocking, on a thread of
/// its own with a fresh runtime (a drop may happen inside an async context).
struct CleanupGuard {
    run_id: String,
    armed: bool,
    inflight: InFlight,
    /// Container → the file its output is saved to before it is removed.
    logs: Vec<(String, PathBuf)>,
}

/// Engine calls under way (see `DockerBackend::call`).
#[derive(Clone, Default)]
struct InFlight(Arc<(Mutex<usize>, Condvar)>);

struct InFlightToken(InFlight);

impl InFlight {
    fn enter(&self) -> InFlightToken {
        if let Ok(mut n) = self.0 .0.lock() {
            *n += 1;
        }
        InFlightToken(self.clone())
    }

    /// Waits until no call is under way, up to `deadline`.
    fn wait_idle(&self, deadline: Duration) {
        let (lock, cv) = &*self.0;
        if let Ok(n) = lock.lock() {
            let _ = cv.wait_timeout_while(n, deadline, |n| *n > 0);
        }
    }
}

impl Drop for InFlightToken {
    fn drop(&mut self) {
        let (lock, cv) = &*self.0 .0;
        if let Ok(mut n) = lock.lock() {
            *n = n.saturating_sub(1);
        }
        cv.notify_all();
    }
}

impl CleanupGuard {
    fn new(run_id: &str) -> CleanupGuard {
        CleanupGuard {
            run_id: run_id.to_string(),
            armed: true,
            inflight: InFlight::default(),
            logs: Vec::new(),
        }
    }

    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for CleanupGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // A call the engine is still completing would create something after the
        // removal below has listed what exists.
        self.inflight.wait_idle(Duration::from_secs(30));
        let run_id = self.run_id.clone();
        let logs = std::mem::take(&mut self.logs);
        let t = std::thread::spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("fencecheck: cannot clean up docker run {run_id}: {e}");
                    return;
                }
            };
            let r = rt.block_on(async {
                let e = engine(Duration::from_secs(10)).await?;
                save_logs(&e.docker, &logs).await;
                remove_run(&e.docker, Some(&run_id)).await
            });
            if let Err(e) = r {
                eprintln!(
                    "fencecheck: docker clean-up of run {run_id} failed ({e:#}); \
                     `fencecheck clean` removes what is left"
                );
            }
        });
        let _ = t.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_engine_maximum() {
        let v = max_api_version(
            "Docker responded with status code 400: client version 1.53 is too new. \
             Maximum supported API version is 1.41",
        )
        .expect("a version");
        assert_eq!((v.major_version, v.minor_version), (1, 41));
        assert!(max_api_version("connection refused").is_none());
    }

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
    fn run_ids_are_short_and_labelled() {
        let id = new_run_id();
        assert!(id.starts_with("fc") && id.len() == 12, "{id}");
    }
}

//! The `docker` backend: the lock service's members (etcd, ZooKeeper, Redis) and
//! the storage (fencecheck's, or a fenced resource's own server) as containers, through
//! testcontainers (creation with labels, mounts and the network, the wait for a
//! ready line, pause/unpause, start, removal) and, for what it lacks, its
//! re-export of bollard (kill with a signal, network connect/disconnect, labelled
//! networks and volumes, image builds). Workers stay host processes; they reach
//! every container through a host port bound on 127.0.0.1 (fixed when the run
//! starts, so a container restarted after a kill keeps its address), with the
//! harness's own fault proxies in front as in the process backend.
//!
//! Per run (id `fc<hex>`), everything labelled `fencecheck.run=<id>`: the peer
//! network (`network.rs`; published ports go through the engine's default bridge),
//! a volume per member for its data dir (a kill + start keeps it),
//! the members (`member.rs`: each system's backend-neutral member spec placed and
//! realized as a container of its image), and the storage (`storage.rs`): fencecheck's
//! with the run directory bind-mounted at /out, so `storage.jsonl` is written
//! straight into it (readable even if the harness is killed), or the server a
//! resource runs itself (`resources::container`, PostgreSQL) with its data
//! directory on a volume of its own.
//!
//! Faults: pause = `docker pause` (cgroup freezer), kill = `docker kill` (SIGKILL),
//! restart = `docker start` of the same container (members and the storage alike),
//! isolate = disconnect from the peer network. Clean-up (`cleanup.rs`): `stop`
//! removes containers, networks and volumes; a guard removes them by label on
//! drop (errors, panics, Ctrl-C); the run's reaper (`reaper.rs`), started before
//! anything else, removes them when the harness dies outright (SIGKILL);
//! `fencecheck clean` removes what older harnesses, which had no reaper, left
//! behind.

mod cleanup;
pub(crate) mod container;
mod engine;
pub(crate) mod member;
mod network;
mod reaper;
mod storage;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;

use anyhow::{Context, Result};

pub use cleanup::{clean, remove_images, remove_run, Removed};
pub use engine::{engine, Engine, ENGINE_TIMEOUT, PING_TIMEOUT};

use super::{Deployment, Service};
use crate::images::{self, Image};
use crate::proc::free_port;
use crate::scenario::{Scenario, ServiceKind};
use cleanup::CleanupGuard;
use container::{Running, StartFailure, HOST};
use member::Member;
use storage::Storage;
use testcontainers::bollard::Docker;

/// The label every container, network and volume of a run carries.
pub const RUN_LABEL: &str = "fencecheck.run";
/// What a thing is within its run: etcd, etcd-data, zookeeper, zookeeper-data,
/// redis, redis-data, storage, postgres, postgres-data, network, reaper.
pub const ROLE_LABEL: &str = "fencecheck.role";

fn labels(run_id: &str, role: &str) -> HashMap<String, String> {
    HashMap::from([
        (RUN_LABEL.to_string(), run_id.to_string()),
        (ROLE_LABEL.to_string(), role.to_string()),
    ])
}

pub(crate) fn new_run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let x = (nanos as u64) ^ (u64::from(std::process::id()) << 40);
    format!("fc{:010x}", x & 0xff_ffff_ffff)
}

pub struct DockerBackend {
    docker: Docker,
    run_id: String,
    network: String,
    peer_network: String,
    members: Vec<Member>,
    /// Boxed: its container spec is large, and `Backend` holds either backend.
    storage: Box<Storage>,
    /// Services frozen by `pause` and not yet resumed.
    paused: HashSet<Service>,
    /// Members cut off from the peer network.
    isolated: HashSet<usize>,
    guard: CleanupGuard,
    /// Dropped after the guard has run (fields drop after `Drop::drop`), so the
    /// reaper only ever finds what the harness could not remove.
    reaper: Option<reaper::Reaper>,
}

/// What a run created, for `docker.json` in the run directory.
#[derive(serde::Serialize)]
struct Record<'a> {
    run_id: &'a str,
    engine: &'a str,
    label: String,
    network: &'a str,
    peer_network: &'a str,
    images: BTreeMap<&'a str, &'a Image>,
    members: Vec<&'a str>,
    volumes: Vec<&'a str>,
    storage: &'a str,
    reaper: Option<&'a str>,
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
        let service = scenario.lock.service;
        let run_id = new_run_id();
        let n = scenario.cluster.members.0 as usize;
        let prefix = format!("fencecheck-{run_id}");
        let ports = (0..n)
            .map(|_| free_port(HOST))
            .collect::<Result<Vec<u16>>>()?;
        // The system's image and its members, placed in containers.
        let system = crate::systems::system(service);
        let deploy = tokio::task::block_in_place(|| system.deploy(scenario, say))?;
        let service_image = images::system_image(&docker, deploy.as_ref(), say).await?;
        let version = deploy.version().to_string();
        let at: Vec<_> = (0..n)
            .map(|i| member::placement(i, &prefix, ports[i], system.ports()))
            .collect();
        let realize = member::Realize {
            kind: service,
            image: &service_image.tag,
            role: deploy.image_name(),
            ports: system.ports(),
            run_dir: &run_dir,
            short: system.member_name(),
        };
        let members = deploy
            .members(scenario, &at)?
            .into_iter()
            .zip(&at)
            .map(|(spec, p)| member::realize(spec, p, &prefix, &realize))
            .collect::<Result<Vec<_>>>()?;
        // The storage: fencecheck's, or the server the resource runs itself.
        let own = crate::resources::resource(scenario).docker_storage(scenario);
        let storage_image = match &own {
            Some(o) => images::resource_image(&docker, o.as_ref(), say).await?,
            None => images::storage_image(&docker, say).await?,
        };
        let reaper_image = images::reaper_image(&docker, say).await?;
        let storage_port = free_port(HOST)?;
        let storage = match own {
            Some(o) => Storage::own(&prefix, &storage_image.tag, o, &run_dir, storage_port),
            None => {
                let name = format!("{prefix}-storage");
                Storage::fencecheck(name, &storage_image.tag, scenario, &run_dir, storage_port)
            }
        };
        let mut backend = DockerBackend {
            docker: docker.clone(),
            run_id: run_id.clone(),
            network: network::CLIENT_NETWORK.to_string(),
            peer_network: format!("{prefix}-peers"),
            members: members.into_iter().map(Member::new).collect(),
            storage: Box::new(storage),
            paused: HashSet::new(),
            isolated: HashSet::new(),
            guard: CleanupGuard::new(&run_id),
            reaper: None,
        };
        // The reaper first: from here on, whatever this run creates is removed even
        // if the harness is killed outright.
        match reaper::start(&run_id, &reaper_image, &backend.guard.inflight, say).await {
            Ok(r) => backend.reaper = r,
            Err(e) => {
                backend.stop().await;
                return Err(e);
            }
        }
        // Where each container's output goes when the run ends, however it ends.
        backend.guard.logs = backend
            .members
            .iter()
            .enumerate()
            .map(|(i, m)| (m.name().to_string(), member_log(&run_dir, service, i)))
            .chain([(
                backend.storage.name().to_string(),
                backend.storage.log.clone(),
            )])
            .collect();
        let record = Record {
            run_id: &run_id,
            engine: &engine.version,
            label: format!("{RUN_LABEL}={run_id}"),
            network: &backend.network,
            peer_network: &backend.peer_network,
            images: [
                (service.as_str(), &service_image),
                (backend.storage.spec.role, &storage_image),
                ("reaper", &reaper_image),
            ]
            .into(),
            members: backend.members.iter().map(|m| m.name()).collect(),
            volumes: backend
                .members
                .iter()
                .map(|m| m.spec.volume.as_str())
                .chain(backend.storage.volume.as_deref())
                .collect(),
            storage: backend.storage.name(),
            reaper: backend.reaper.as_ref().map(|r| r.name.as_str()),
        };
        if let Ok(j) = serde_json::to_string_pretty(&record) {
            let _ = std::fs::write(run_dir.join(crate::record::rundir::DOCKER_JSON), j + "\n");
        }
        say(&format!(
            "starting {n} {service} {version} container(s) and {} container \
             (run {run_id}, network {prefix}-peers)",
            match &backend.storage.kind {
                storage::Kind::Fencecheck => "the storage".to_string(),
                storage::Kind::Own(o) => format!("a {}", o.what()),
            }
        ));
        match backend.start_all(scenario, &run_dir).await {
            Ok(storage) => {
                let deployment = Deployment {
                    service: scenario.lock.service,
                    clients: backend.members.iter().map(|m| m.spec.client).collect(),
                    storage,
                    workers_reach: None,
                    peer_proxies: Vec::new(),
                    version,
                    backend: "docker".into(),
                    backend_reason: String::new(),
                    access: None,
                };
                Ok((backend, deployment))
            }
            Err(e) => {
                backend.stop().await;
                Err(e)
            }
        }
    }

    /// Networks, volumes, members (each up to its ready line), the storage, then
    /// the wait until every member and the storage answer healthy (and
    /// PostgreSQL's tables). Returns the storage's host address.
    async fn start_all(&mut self, scenario: &Scenario, run_dir: &Path) -> Result<SocketAddr> {
        let service = scenario.lock.service;
        let (d, inflight) = (&self.docker, &self.guard.inflight);
        network::create_peer_network(d, inflight, &self.run_id, &self.peer_network).await?;
        for m in &self.members {
            m.create_volume(d, inflight, &self.run_id).await?;
        }
        for i in 0..self.members.len() {
            let m = &mut self.members[i];
            if let Err(f) = m.start(d, inflight, &self.run_id, &self.peer_network).await {
                let log = member_log(run_dir, service, i);
                return Err(failed_start(f, &log, &format!("{service} member {i}")));
            }
        }
        let st = &mut self.storage;
        if let Err(f) = st.start(d, inflight, &self.run_id).await {
            return Err(failed_start(f, &st.log, st.what()));
        }
        for (i, m) in self.members.iter().enumerate() {
            m.wait_healthy(d).await.with_context(|| {
                format!(
                    "{service} member {i} did not start; see {}",
                    member_log(run_dir, service, i).display()
                )
            })?;
        }
        let st = &self.storage;
        let why = || format!("{} did not start; see {}", st.what(), st.log.display());
        st.wait_ready(d).await.with_context(why)?;
        st.prepare().await.with_context(why)?;
        Ok(st.addr)
    }

    fn member(&self, i: usize) -> Result<&Member> {
        self.members.get(i).context("no such member")
    }

    pub async fn pause(&mut self, who: Service) -> Result<serde_json::Value> {
        if let Service::Member(i) = who {
            if !self.member(i)?.running() {
                anyhow::bail!("member {i} is not running");
            }
        }
        // Recorded before the call, so a heal never misses it.
        self.paused.insert(who);
        let inflight = &self.guard.inflight;
        let name = match who {
            Service::Member(i) => {
                let m = self.member(i)?;
                m.pause(inflight).await?;
                m.name().to_string()
            }
            Service::Storage => {
                if !self.storage.running() {
                    anyhow::bail!("{} is not running", self.storage.what());
                }
                let c = self.storage.container()?.clone();
                cleanup::tracked(inflight, async move { c.pause().await })
                    .await?
                    .with_context(|| format!("docker pause {}", self.storage.name()))?;
                self.storage.name().to_string()
            }
            Service::Worker(_) => anyhow::bail!(
                "a worker is paused by the nemesis on this backend, not by the backend"
            ),
        };
        Ok(serde_json::json!({ "action": "docker pause", "container": name }))
    }

    /// The container's paused state, as the engine reports it.
    pub async fn is_paused(&mut self, who: Service) -> Result<bool> {
        let c = match who {
            Service::Member(i) => self.member(i)?.container()?.clone(),
            Service::Storage => self.storage.container()?.clone(),
            Service::Worker(_) => anyhow::bail!(
                "a worker is paused by the nemesis on this backend, not by the backend"
            ),
        };
        container::paused(&self.docker, &c).await
    }

    pub async fn resume(&mut self, who: Service) -> Result<()> {
        self.paused.remove(&who);
        let inflight = &self.guard.inflight;
        match who {
            Service::Member(i) => self.member(i)?.unpause(inflight).await,
            Service::Storage => {
                let c = self.storage.container()?.clone();
                cleanup::tracked(inflight, async move { c.unpause().await })
                    .await?
                    .with_context(|| format!("docker unpause {}", self.storage.name()))
            }
            Service::Worker(_) => anyhow::bail!(
                "a worker is paused by the nemesis on this backend, not by the backend"
            ),
        }
    }

    /// `docker kill` (SIGKILL) of member `i`; its container and volume stay.
    pub async fn kill_member(&mut self, i: usize) -> Result<serde_json::Value> {
        let m = self.members.get_mut(i).context("no such member")?;
        // A paused container cannot be killed: thaw it first.
        if self.paused.remove(&Service::Member(i)) {
            let _ = m.unpause(&self.guard.inflight).await;
        }
        let pid = m.kill(&self.docker).await?;
        Ok(serde_json::json!({
            "action": "docker kill", "signal": "SIGKILL", "container": m.name(), "pid": pid
        }))
    }

    /// `docker start` of member `i`: the same container, volume and host port.
    pub async fn restart_member(&mut self, i: usize) -> Result<serde_json::Value> {
        let m = self.members.get_mut(i).context("no such member")?;
        let pid = m.restart(&self.docker, &self.guard.inflight).await?;
        Ok(serde_json::json!({ "action": "docker start", "container": m.name(), "pid": pid }))
    }

    /// `docker kill` (SIGKILL) of the storage container; its container, mounts and
    /// host port stay.
    pub async fn kill_storage(&mut self) -> Result<serde_json::Value> {
        // A paused container cannot be killed: thaw it first.
        if self.paused.remove(&Service::Storage) {
            let _ = self.resume(Service::Storage).await;
        }
        self.storage.kill(&self.docker).await
    }

    /// `docker start` of the storage container, and the wait until it answers
    /// (after PostgreSQL's crash recovery; fencecheck's storage reads its log).
    pub async fn restart_storage(&mut self) -> Result<serde_json::Value> {
        self.storage
            .restart(&self.docker, &self.guard.inflight)
            .await
    }

    /// Disconnects members from the peer network (`on`), or connects them back.
    pub async fn isolate(&mut self, members: &[usize], on: bool) -> Result<()> {
        for &i in members {
            let m = self.members.get(i).context("no such member")?;
            let (d, inflight) = (&self.docker, &self.guard.inflight);
            if on {
                self.isolated.insert(i);
                network::disconnect(d, inflight, &self.peer_network, m.name()).await?;
            } else {
                network::connect(d, inflight, &self.peer_network, m.name()).await?;
                self.isolated.remove(&i);
            }
        }
        Ok(())
    }

    /// Heal phase: unpauses every paused container, reconnects every isolated member,
    /// starts every dead one.
    pub async fn heal(&mut self) -> Vec<String> {
        let mut done = Vec::new();
        let mut paused: Vec<Service> = std::mem::take(&mut self.paused).into_iter().collect();
        paused.sort_by_key(|s| match s {
            Service::Member(i) => *i,
            Service::Storage | Service::Worker(_) => usize::MAX,
        });
        for who in paused {
            let name = match who {
                Service::Member(i) => self.members.get(i).map(|m| m.name().to_string()),
                Service::Storage => Some(self.storage.name().to_string()),
                Service::Worker(_) => None,
            };
            if self.resume(who).await.is_ok() {
                done.push(format!("unpaused container {}", name.unwrap_or_default()));
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
            if !self.members[i].running() && self.restart_member(i).await.is_ok() {
                done.push(format!("restarted member {i}"));
            }
        }
        if !self.storage.running() && self.restart_storage().await.is_ok() {
            done.push(format!("restarted {}", self.storage.what()));
        }
        done
    }

    /// Saves every container's output into the run directory (`etcd-N.log`,
    /// `storage.log`), then removes the containers (through testcontainers), the
    /// volumes and the networks (by label).
    pub async fn stop(&mut self) {
        for who in std::mem::take(&mut self.paused) {
            let _ = self.resume(who).await;
        }
        if let (true, Ok(s)) = (self.storage.running(), self.storage.container()) {
            // The storage ends cleanly on SIGINT (as PID 1 it ignores an unhandled
            // SIGTERM, the engine's default stop signal); PostgreSQL takes it for a
            // fast shutdown. The stop then only waits.
            let _ = container::kill(&self.docker, s, "SIGINT").await;
            let _ = s.stop_with_timeout(Some(2)).await;
        }
        cleanup::save_logs(&self.docker, &self.guard.logs).await;
        let containers: Vec<Running> = self
            .members
            .iter_mut()
            .filter_map(Member::take_container)
            .chain(self.storage.take_container())
            .collect();
        for c in containers {
            // The only holder by now; otherwise the removal by label below does it.
            if let Ok(c) = std::sync::Arc::try_unwrap(c) {
                let _ = c.rm().await;
            }
        }
        // By label, which also takes the networks, the volumes and (last) the
        // reaper container.
        if let Err(e) = remove_run(&self.docker, Some(&self.run_id)).await {
            tracing::warn!("docker clean-up of run {}: {e:#}", self.run_id);
        } else {
            self.guard.disarm();
        }
        self.reaper = None;
    }
}

impl Drop for DockerBackend {
    fn drop(&mut self) {
        if !self.guard.armed() {
            return;
        }
        // Dropped without `stop` (an error, a panic, Ctrl-C): the guard saves the
        // output and removes everything by label, on a connection of its own.
        self.guard.clean_up_now();
        // testcontainers' own drop would remove each container a second time, and
        // needs a runtime to do it, which a drop at shutdown does not have: the
        // handles are left unreclaimed instead (a few bytes, once per dropped run).
        for c in self
            .members
            .iter_mut()
            .filter_map(Member::take_container)
            .chain(self.storage.take_container())
        {
            std::mem::forget(c);
        }
    }
}

/// Member `i`'s log in the run directory: `etcd-N.log`, `zk-N.log`, as on the
/// process backend.
fn member_log(run_dir: &Path, service: ServiceKind, i: usize) -> std::path::PathBuf {
    let short = crate::systems::system(service).member_name();
    crate::record::rundir::member_log(run_dir, short, i)
}

/// The error of a container that did not come up; what it printed is saved to
/// `log` first (its container is already gone).
fn failed_start(f: StartFailure, log: &Path, what: &str) -> anyhow::Error {
    if let Some(out) = &f.output {
        if let Err(e) = std::fs::write(log, out) {
            tracing::warn!("cannot save the output to {}: {e}", log.display());
        }
    }
    f.error
        .context(format!("{what} did not start; see {}", log.display()))
}

/// `fencecheck images`: builds (or reuses) each lock system's images (etcd's
/// per version; the others only where installed, `ci/bootstrap.sh`: each image
/// packages what this machine has), the storage image, the reaper image and the
/// PostgreSQL image where that is installed; one line per image.
pub async fn build_images(versions: &[crate::scenario::EtcdVersion]) -> Result<Vec<String>> {
    let e = engine(ENGINE_TIMEOUT)
        .await
        .context("no Docker engine answers; the images need one")?;
    let say = |m: &str| eprintln!("· {m}");
    let show = |what: &str, i: &Image| {
        format!(
            "{what:<9} {} {} ({})",
            i.tag,
            i.id,
            if i.reused { "reused" } else { "built" }
        )
    };
    let mut lines = Vec::new();
    for system in crate::systems::every() {
        for (what, d) in tokio::task::block_in_place(|| system.image_deploys(versions, &say))? {
            match d {
                Ok(d) => {
                    let i = images::system_image(&e.docker, d.as_ref(), &say).await?;
                    lines.push(show(what, &i));
                }
                Err(e) => lines.push(format!("{what} (skipped: {e:#})")),
            }
        }
    }
    let i = images::storage_image(&e.docker, &say).await?;
    lines.push(show("storage", &i));
    let i = images::reaper_image(&e.docker, &say).await?;
    lines.push(show("reaper", &i));
    for own in crate::resources::every_container() {
        // Not installed here: skipped, as a lock system's image is.
        if let Err(e) = tokio::task::block_in_place(|| own.image()) {
            lines.push(format!("{} (skipped: {e:#})", own.name()));
            continue;
        }
        let i = images::resource_image(&e.docker, own.as_ref(), &say).await?;
        lines.push(show(own.name(), &i));
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_short_and_labelled() {
        let id = new_run_id();
        assert!(id.starts_with("fc") && id.len() == 12, "{id}");
        assert_eq!(labels(&id, "etcd")[RUN_LABEL], id);
    }
}

//! The `kubernetes` backend: the lock service's members and fencecheck's storage
//! as pods of a namespace of the run's own (`fencecheck-<run id>`, everything
//! labelled `fencecheck.run=<run id>`), talked to through the API server with
//! kube-rs only (no `kubectl`).
//!
//! What runs where, today (docs/kubernetes.md says the same, with what is not built):
//! - Each member is a pod on the harness's own node, on the host's network, placed
//!   exactly as the process backend places a member (its own loopback address, a
//!   fault proxy of the harness's in front of every peer port, data and config
//!   files in the run directory, which every pod mounts at its own path): the
//!   system's member spec runs unchanged, under the in-pod agent (`agent/`), from
//!   the system's image with the agent added (`images::pod_image`, built locally;
//!   `imagePullPolicy: Never`).
//! - fencecheck's storage is a pod too (`images::agent_storage_image`), writing
//!   `storage.jsonl` straight into the run directory.
//! - Each worker is a pod too (`workers.rs`), started at a gate once every pod
//!   runs, writing its events straight into the run directory as they happen;
//!   a scenario's own lock-client adapter (`[client]`) keeps its workers
//!   processes of this machine (its runtime is not in the worker image).
//! - Faults: a worker's are signals from the node to its pid on this machine
//!   (`workers.rs` says why); pause, kill and restart of a member or the storage are the agent's
//!   `stop`, `kill`, `start` (exec through the API server), each read back from the
//!   pod's `/proc`; delay and partition of member links go through the harness's
//!   peer proxies (the pods share the host's network); a member's clock steps
//!   through its clockshim offset file in the run directory, as on the process
//!   backend (clockshim is in the member image at its path on this machine).
//! - Each pod's output is streamed into the run directory as it comes.
//! - On a node that is not this machine (`connect::Remote`, a registry needed):
//!   the members and the storage listen on the node's address, the peer proxies
//!   on this machine's address on the route to it; a pod's run directory is an
//!   empty one of its own, the members' files come in a ConfigMap the agent puts
//!   in place, the storage's journal is followed back through exec (put in
//!   this machine's monotonic clock: `node_clock`); the workers are pods there
//!   too unless `workers::on_remote` says why not; a member's clock steps
//!   through the pod's own copy of its offset file, replaced by the agent's
//!   `put`.
//! - Clean-up: `stop` deletes the namespace with its pods; a guard does it on drop
//!   (an error, a panic, Ctrl-C); after a SIGKILL, the reaper (`reaper.rs`).

pub mod aim;
pub mod connect;
pub mod elect;
pub mod forward;
pub mod links;
pub mod namespace;
pub mod pods;
pub mod reaper;
pub mod registry;
pub mod retry;
mod start;
pub mod workers;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use faultproxy::Proxy;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, PostParams};

use super::{Deployment, Service};
use crate::proc::{free_port, wait_http_healthy};
use crate::resources::container::ContainerStorage;
use crate::scenario::Scenario;
use crate::systems::members::MemberSpec;

pub use super::docker::{ROLE_LABEL, RUN_LABEL};

const READY_DEADLINE: Duration = Duration::from_secs(60);
const STORAGE_HOST: &str = "127.0.0.1";
/// How long `stop` waits for the log streams to end once the pods are gone.
const LOG_DRAIN: Duration = Duration::from_secs(2);

/// One pod running one process under the agent.
struct PodProc {
    pod: String,
    /// "etcd member 0", "the storage".
    what: String,
    log: PathBuf,
    /// Killed by a fault and not started again.
    dead: bool,
}

pub struct KubernetesBackend {
    client: kube::Client,
    config: kube::Config,
    pods: Api<Pod>,
    ns: String,
    members: Vec<PodProc>,
    storage: Option<PodProc>,
    /// The resource's own server (PostgreSQL) when it is the storage's pod.
    own: Option<Box<dyn ContainerStorage>>,
    /// The node every pod goes to, the client for log streams, the run directory
    /// (mounted in every pod at its own path).
    node: String,
    streams: kube::Client,
    run_dir: PathBuf,
    storage_addr: Option<SocketAddr>,
    peer_proxies: Vec<Proxy>,
    /// Each member's client address.
    clients: Vec<SocketAddr>,
    /// Each member's clockshim offset file, when its system's member spec runs
    /// it under clockshim (a Redis instance of a scenario that steps a clock):
    /// in the run directory, which its pod mounts at the same path, so the
    /// harness steps it exactly as the process backend does.
    clocks: Vec<Option<PathBuf>>,
    paused: HashSet<Service>,
    logs: Vec<tokio::task::JoinHandle<()>>,
    /// Still to be deleted (the namespace exists).
    armed: bool,
    /// The dead-man switch: reaps the run if this process stops renewing its
    /// Lease (a SIGKILL). Dropped after the guard has run.
    reaper: Option<reaper::Reaper>,
    /// The node's Docker engine (the local cluster's kubelet runs its pods there):
    /// the run's stopped containers are removed from it at the end instead of
    /// waiting for kubelet's garbage collection.
    docker: testcontainers::bollard::Docker,
    run_id: String,
    /// The workers' image as the pods ask for it, when they are pods
    /// (`workers::in_pods`).
    worker_image: Option<String>,
    /// The pods' pull Secret in the run's namespace, with a registry login.
    pull_secret: Option<String>,
    /// The node when it is not this machine: the pods' run directory is their
    /// own there, and what the harness needs back is followed out of them.
    remote: Option<connect::Remote>,
    /// Files followed out of pods into the run directory (the storage's
    /// journal on a remote node), finished before the pods go.
    follows: Vec<pods::Follow>,
    /// The `links` pod's command line, once it runs (`links.rs`).
    links: Option<std::sync::Arc<crate::links::Ctl>>,
    /// How long it took to run and answer, ms; how many peer links it holds.
    links_running_ms: Option<u64>,
    peer_links_count: usize,
    /// Ports of the node's already chosen for the run's pods and links there.
    node_ports_used: HashSet<u16>,
    /// The worker pods on a node that is not this machine, whose faults go
    /// through their agents (`Service::Worker`); empty elsewhere.
    remote_workers: Vec<PodProc>,
    /// Their events files, at the same path in each pod (`aim.rs` reads them
    /// there).
    remote_events: Vec<PathBuf>,
    /// On such a node: the offset of this machine's monotonic clock to the
    /// node's and its uncertainty, ns (`pods::clock_offset`), measured in the
    /// first pod that needs it (the storage's, else a worker's).
    node_clock: Option<(i64, u64)>,
    /// The worker pods' start gate there (absolute), written by their agents.
    worker_gate: Option<PathBuf>,
    /// `[cluster] reach` as the run asks it, and as decided (`forward.rs`):
    /// the harness's own address for a member's or the storage's address on
    /// the node, where it is not that address (a port-forward's); what was
    /// decided and why, for `kubernetes.json`.
    reach_asked: crate::scenario::Reach,
    seen: std::collections::HashMap<SocketAddr, SocketAddr>,
    forwards: forward::Forwards,
    reach: Option<serde_json::Value>,
}

/// What a run created, for `kubernetes.json` in the run directory.
#[derive(serde::Serialize)]
struct Record<'a> {
    run_id: &'a str,
    server: &'a str,
    kubeconfig: String,
    kubeconfig_from: &'a str,
    version: &'a str,
    node: &'a str,
    namespace: &'a str,
    label: String,
    /// Whose API server the electors elect on (Kubernetes Lease): "the run's
    /// own" or "the cluster's" (`[lock] apiserver`).
    #[serde(skip_serializing_if = "str::is_empty")]
    apiserver: &'a str,
    /// `[cluster] registry`, when the node pulls the images from there.
    #[serde(skip_serializing_if = "Option::is_none")]
    registry: Option<&'a str>,
    /// When the node is not this machine: its address (where the members
    /// listen), this machine's (where the proxies listen), and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    remote: Option<RemoteRecord<'a>>,
    /// The images' names as the pods ask for them.
    images: Vec<&'a str>,
    pods: Vec<&'a str>,
    /// Per pod: ms from its creation until its container ran, and until the
    /// program in it served (the member's probe; the storage's /health).
    ready: Vec<Ready>,
    /// ms from the first pod's creation until every member and the storage served.
    ready_ms: u64,
    /// On a node that is not this machine: how the harness reaches the
    /// members and the storage there (`forward.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    reach: Option<serde_json::Value>,
    /// On a node that is not this machine, once measured: the offset of this
    /// machine's monotonic clock to the node's (`pods::clock_offset`).
    #[serde(skip_serializing_if = "Option::is_none")]
    node_clock: Option<NodeClock>,
    /// Where the reaper runs, how it reaches the API server (`server`: the
    /// kubeconfig's address, or "in-cluster": the `kubernetes` Service's), and
    /// ms until its pod ran and until it had read the run's Lease.
    reaper: serde_json::Value,
}

#[derive(serde::Serialize)]
struct RemoteRecord<'a> {
    node_address: String,
    harness_address: String,
    why: &'a str,
}

#[derive(serde::Serialize)]
struct NodeClock {
    offset_ns: i64,
    uncertainty_ns: u64,
}

#[derive(serde::Serialize)]
struct Ready {
    pod: String,
    running_ms: u64,
    serving_ms: u64,
}

pub const RECORD: &str = "kubernetes.json";

impl KubernetesBackend {
    pub async fn start(
        cluster: connect::Cluster,
        scenario: &Scenario,
        external: Option<SocketAddr>,
        run_dir: &Path,
        say: &dyn Fn(&str),
    ) -> Result<(KubernetesBackend, Deployment)> {
        let run_dir = std::fs::canonicalize(run_dir)
            .with_context(|| format!("cannot resolve {}", run_dir.display()))?;
        // A resource's own server (PostgreSQL) runs as the storage's pod instead
        // of fencecheck's storage.
        let own = match external {
            Some(_) => None,
            None => crate::resources::resource(scenario).docker_storage(scenario),
        };
        let shape = start::shape(&cluster, scenario).await?;
        let engine = super::docker::engine(super::docker::ENGINE_TIMEOUT)
            .await
            .context("backend \"kubernetes\" builds its images on this machine's Docker engine, which does not answer")?;
        // Electing on the cluster's own API server: no members of the run's own
        // (`elect.rs`); where the workers reach it is found before anything starts.
        let on_cluster = if scenario.lock.apiserver.is_own() {
            None
        } else {
            Some(elect::target(&cluster).await?)
        };
        let own_members = on_cluster.is_none();
        let images = start::images(
            &engine.docker,
            &cluster,
            scenario,
            external,
            own.as_deref(),
            &shape.in_pods,
            own_members,
            say,
        )
        .await?;
        let run_id = super::docker::new_run_id();
        let ns = namespace::name(&run_id);
        let mut placed = start::placements(
            &cluster,
            scenario,
            &run_dir,
            shape.links_in_pod,
            own_members,
        )
        .await?;
        let specs = match &images.deploy {
            Some(d) => d.members(scenario, &placed.at)?,
            None => Vec::new(),
        };
        let clients: Vec<SocketAddr> = match &on_cluster {
            Some(t) => vec![t.addr],
            None => placed.at.iter().map(|a| a.client).collect(),
        };
        for (spec, p) in specs.iter().zip(&placed.at) {
            super::process::write_files(spec, p)?;
        }
        namespace::create(&cluster.client, &ns, &run_id).await?;
        let mut backend = KubernetesBackend::new(
            &cluster,
            scenario,
            (&run_id, &ns),
            own,
            &run_dir,
            external,
            &placed,
            &specs,
            clients.clone(),
            engine.docker.clone(),
            images.worker.clone(),
        );
        backend
            .start_reaper(&cluster, shape.reaper, scenario, &images, say)
            .await?;
        let deploy = images.deploy.as_deref();
        let access = backend
            .electors_access(&cluster, scenario, deploy, on_cluster.as_ref())
            .await?;
        let version = match deploy {
            Some(d) => d.version().to_string(),
            None => cluster.version.clone(),
        };
        start::announce(
            &cluster,
            scenario,
            &ns,
            deploy,
            on_cluster.is_some(),
            shape.links_in_pod,
            external,
            say,
        );
        let record = start::record(
            &cluster,
            scenario,
            &images,
            (&run_id, &ns),
            backend.reaper.as_ref(),
            on_cluster.is_some(),
        );
        let peer_links = backend
            .peer_links_of(&mut placed, shape.links_in_pod, say)
            .await?;
        let started = backend
            .start_all(
                &cluster,
                &run_id,
                &run_dir,
                scenario,
                specs,
                &placed.at,
                images.member.as_deref(),
                images.storage.as_deref(),
                record,
                say,
            )
            .await;
        let storage = match started {
            Ok(a) => a,
            Err(e) => {
                backend.stop().await;
                return Err(e);
            }
        };
        // The harness's own addresses (a port-forward's where it cannot reach
        // the node); the workers' links keep the node's.
        let seen: Vec<SocketAddr> = clients.iter().map(|a| backend.seen(*a)).collect();
        let workers_reach = (seen != clients || backend.seen(storage) != storage)
            .then(|| (clients.clone(), storage));
        let deployment = Deployment {
            service: scenario.lock.service,
            clients: seen,
            storage: backend.seen(storage),
            workers_reach,
            peer_proxies: peer_links,
            version,
            backend: "kubernetes".into(),
            backend_reason: String::new(),
            access,
        };
        Ok((backend, deployment))
    }

    /// The backend of a run whose namespace was just created: nothing in it yet.
    #[allow(clippy::too_many_arguments)]
    fn new(
        cluster: &connect::Cluster,
        scenario: &Scenario,
        (run_id, ns): (&str, &str),
        own: Option<Box<dyn ContainerStorage>>,
        run_dir: &Path,
        external: Option<SocketAddr>,
        placed: &start::Placed,
        specs: &[MemberSpec],
        clients: Vec<SocketAddr>,
        docker: testcontainers::bollard::Docker,
        worker_image: Option<String>,
    ) -> KubernetesBackend {
        KubernetesBackend {
            client: cluster.client.clone(),
            config: cluster.config.clone(),
            pods: Api::namespaced(cluster.client.clone(), ns),
            ns: ns.to_string(),
            members: Vec::new(),
            storage: None,
            own,
            node: cluster.node.clone(),
            streams: cluster.streams.clone(),
            run_dir: run_dir.to_path_buf(),
            storage_addr: external,
            peer_proxies: placed.proxies.iter().flatten().cloned().collect(),
            clients,
            clocks: specs
                .iter()
                .zip(&placed.at)
                .map(|(spec, p)| {
                    spec.clock_file
                        .as_ref()
                        .map(|f| PathBuf::from(p.config_file(f)))
                })
                .collect(),
            paused: HashSet::new(),
            logs: Vec::new(),
            armed: true,
            reaper: None,
            docker,
            run_id: run_id.to_string(),
            worker_image,
            pull_secret: None,
            remote: cluster.remote.clone(),
            links: None,
            links_running_ms: None,
            peer_links_count: placed.peer_pairs.iter().map(Vec::len).sum(),
            node_ports_used: placed.node_ports_used.clone(),
            follows: Vec::new(),
            remote_workers: Vec::new(),
            remote_events: Vec::new(),
            node_clock: None,
            worker_gate: None,
            reach_asked: scenario.cluster.reach,
            seen: Default::default(),
            forwards: Default::default(),
            reach: None,
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn start_all(
        &mut self,
        cluster: &connect::Cluster,
        run_id: &str,
        run_dir: &Path,
        scenario: &Scenario,
        specs: Vec<MemberSpec>,
        placed: &[crate::systems::members::Placement],
        member_image: Option<&str>,
        storage_image: Option<&str>,
        mut record: Record<'_>,
        say: &dyn Fn(&str),
    ) -> Result<SocketAddr> {
        let svc = scenario.lock.service;
        let system = crate::systems::system(svc);
        let t0 = std::time::Instant::now();
        let ms = |t: std::time::Instant| t.duration_since(t0).as_millis() as u64;
        let mut pod_names = Vec::new();
        let mut created = Vec::new();
        self.create_member_pods(
            cluster,
            run_id,
            run_dir,
            scenario,
            &specs,
            placed,
            member_image,
            (&mut pod_names, &mut created),
        )
        .await?;
        let storage_addr = self
            .create_storage_pod(
                cluster,
                run_id,
                run_dir,
                scenario,
                storage_image,
                (&mut pod_names, &mut created),
            )
            .await?;
        record.pods = pod_names.iter().map(String::as_str).collect();
        // Written now, and again with the timings once everything serves: a run
        // that fails to start still says what it created.
        if let Ok(j) = serde_json::to_string_pretty(&record) {
            let _ = std::fs::write(run_dir.join(RECORD), j + "\n");
        }
        // Every pod was created without waiting: kubelet starts them together.
        let mut running = Vec::new();
        for (name, log) in self
            .members
            .iter()
            .map(|m| (m.pod.clone(), m.log.clone()))
            .chain(self.storage.iter().map(|s| (s.pod.clone(), s.log.clone())))
            .collect::<Vec<_>>()
        {
            pods::running(&self.pods, &name)
                .await
                .with_context(|| format!("see {}", log.display()))?;
            running.push(std::time::Instant::now());
            // From its start: a stream opened before the container runs is refused.
            self.logs.push(pods::stream_log(
                cluster.streams.clone(),
                self.ns.clone(),
                name,
                log,
            ));
        }
        // fencecheck's storage writes its journal into its own run directory on
        // a node that is not this machine: followed into this one as written.
        // Its records are stamped with the node's monotonic clock: put in this
        // machine's as they come, so they compare with the workers' events.
        if let (Some(_), Some(st), None) = (&self.remote, &self.storage, &self.own) {
            let pod = st.pod.clone();
            let (offset, _) = self.node_clock(&pod).await?;
            let journal = run_dir.join(crate::record::rundir::STORAGE_LOG);
            self.follows.push(pods::follow_file(
                cluster.streams.clone(),
                self.ns.clone(),
                pod,
                journal.display().to_string(),
                journal,
                Some(offset),
            ));
        }
        // How the harness reaches them there: the node's address, or a
        // port-forward each (`forward.rs`).
        let own_addrs: Vec<SocketAddr> = self
            .clients
            .iter()
            .take(specs.len())
            .copied()
            .chain(self.storage.as_ref().map(|_| storage_addr))
            .collect();
        self.reach_them(&own_addrs, say).await?;
        record.reach = self.reach.clone();
        let mut serving = Vec::new();
        // Each member until it serves; one whose pod ends is said at once.
        for i in 0..specs.len() {
            let client = self.seen(*self.clients.get(i).context("no such member")?);
            let what = format!("{svc} member {i} at {client}");
            let ready = system.wait_ready(&what, client, READY_DEADLINE);
            tokio::pin!(ready);
            let res = loop {
                tokio::select! {
                    r = &mut ready => break r,
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {
                        if let Some(how) = pods::ended(&self.pods, &self.members[i].pod).await {
                            break Err(anyhow::anyhow!("{what}: its pod's program ended ({how}) before it was ready"));
                        }
                    }
                }
            };
            res.with_context(|| format!("see {}", self.members[i].log.display()))?;
            serving.push(std::time::Instant::now());
        }
        if let Some(st) = &self.storage {
            let storage_addr = self.seen(storage_addr);
            self.wait_storage(storage_addr)
                .await
                .with_context(|| format!("see {}", st.log.display()))?;
            if let Some(own) = &self.own {
                own.prepare(storage_addr)
                    .await
                    .with_context(|| format!("{} in its pod", own.what()))?;
            }
            serving.push(std::time::Instant::now());
        }
        record.ready = pod_names
            .iter()
            .zip(created.iter().zip(running.iter().zip(&serving)))
            .map(|(pod, (c, (r, s)))| Ready {
                pod: pod.clone(),
                running_ms: r.duration_since(*c).as_millis() as u64,
                serving_ms: s.duration_since(*c).as_millis() as u64,
            })
            .collect();
        record.ready_ms = serving.iter().map(|s| ms(*s)).max().unwrap_or(0);
        record.node_clock = self
            .node_clock
            .map(|(offset_ns, uncertainty_ns)| NodeClock {
                offset_ns,
                uncertainty_ns,
            });
        if let Ok(j) = serde_json::to_string_pretty(&record) {
            let _ = std::fs::write(run_dir.join(RECORD), j + "\n");
        }
        Ok(storage_addr)
    }

    /// Creates each member's pod, without waiting: kubelet starts them together.
    #[allow(clippy::too_many_arguments)]
    async fn create_member_pods(
        &mut self,
        cluster: &connect::Cluster,
        run_id: &str,
        run_dir: &Path,
        scenario: &Scenario,
        specs: &[MemberSpec],
        placed: &[crate::systems::members::Placement],
        member_image: Option<&str>,
        (pod_names, created): (&mut Vec<String>, &mut Vec<std::time::Instant>),
    ) -> Result<()> {
        let svc = scenario.lock.service;
        let short = crate::systems::system(svc).member_name();
        for (i, spec) in specs.iter().enumerate() {
            let name = format!("{short}-{i}");
            let mut program = vec![spec.program.display().to_string()];
            program.extend(spec.args.iter().cloned());
            // On a node without the run directory: the member's files in a
            // ConfigMap, put in place by the agent before the start.
            let files = match (&self.remote, placed.get(i)) {
                (Some(_), Some(p)) => {
                    let (dirs, files) = member_files(spec, p);
                    let cm = format!("{name}-files");
                    let cms: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.ns);
                    cms.create(
                        &PostParams::default(),
                        &pods::files_config_map(&cm, run_id, &dirs, &files),
                    )
                    .await
                    .with_context(|| format!("create configmap {cm}"))?;
                    Some(cm)
                }
                _ => None,
            };
            let pod = pods::pod(&pods::PodSpecIn {
                name: name.clone(),
                run_id,
                role: short,
                node: &cluster.node,
                image: member_image.context("no member image")?,
                program,
                env: spec.env.clone(),
                run_dir,
                remote: self.remote.is_some(),
                files,
                user: None,
                host_files: Vec::new(),
                pull_secret: self.pull_secret.as_deref(),
                secret_env: Vec::new(),
            });
            let log = crate::record::rundir::member_log(run_dir, short, i);
            self.members.push(PodProc {
                pod: name.clone(),
                what: format!("{svc} member {i}"),
                log: log.clone(),
                dead: false,
            });
            pod_names.push(name.clone());
            created.push(std::time::Instant::now());
            pods::create(&self.pods, &pod).await.with_context(|| {
                format!("{svc} member {i} did not start; see {}", log.display())
            })?;
        }
        Ok(())
    }

    /// Creates the storage's pod (fencecheck's, or a resource's own server), if
    /// the run has one of its own; returns where it listens.
    async fn create_storage_pod(
        &mut self,
        cluster: &connect::Cluster,
        run_id: &str,
        run_dir: &Path,
        scenario: &Scenario,
        storage_image: Option<&str>,
        (pod_names, created): (&mut Vec<String>, &mut Vec<std::time::Instant>),
    ) -> Result<SocketAddr> {
        Ok(match storage_image {
            None => self.storage_addr.context("no storage")?,
            Some(image) => {
                let addr = match &self.remote {
                    None => SocketAddr::new(STORAGE_HOST.parse()?, free_port(STORAGE_HOST)?),
                    Some(r) => SocketAddr::new(r.node_ip, node_ports(1)[0]),
                };
                let port = addr.port();
                let (program, user, log, what, name) = match &self.own {
                    None => {
                        let mut program = vec!["/fencecheck-storage".to_string()];
                        program.extend(super::process::storage_flags(scenario, addr, run_dir));
                        let log = run_dir.join(crate::record::rundir::STORAGE_PROCESS_LOG);
                        (program, None, log, "the storage", "storage".to_string())
                    }
                    Some(own) => {
                        // Its image's entry point, on the host's network: its own
                        // port on loopback, not the container's fixed one.
                        let s = own.spec();
                        let mut program: Vec<String> =
                            s.program.iter().map(|a| a.to_string()).collect();
                        program.extend(own_args(&s.args, addr.ip(), port));
                        // The image's user (PostgreSQL refuses root).
                        (
                            program,
                            Some((OWN_UID, OWN_UID)),
                            run_dir.join(s.log),
                            own.what(),
                            own.name().to_string(),
                        )
                    }
                };
                let pod = pods::pod(&pods::PodSpecIn {
                    name: name.clone(),
                    run_id,
                    role: "storage",
                    node: &cluster.node,
                    image,
                    program,
                    env: Vec::new(),
                    run_dir,
                    remote: self.remote.is_some(),
                    files: None,
                    user,
                    host_files: Vec::new(),
                    pull_secret: self.pull_secret.as_deref(),
                    secret_env: Vec::new(),
                });
                self.storage = Some(PodProc {
                    pod: name.clone(),
                    what: what.into(),
                    log: log.clone(),
                    dead: false,
                });
                pod_names.push(name.clone());
                created.push(std::time::Instant::now());
                pods::create(&self.pods, &pod)
                    .await
                    .with_context(|| format!("the storage did not start; see {}", log.display()))?;
                self.storage_addr = Some(addr);
                addr
            }
        })
    }

    /// Until the storage answers: fencecheck's on `/health`, a resource's own
    /// server on its own probe (PostgreSQL's `SELECT 1`); a pod whose program
    /// ended is said at once.
    async fn wait_storage(&self, addr: SocketAddr) -> Result<()> {
        let Some(own) = &self.own else {
            return wait_http_healthy("storage", addr, READY_DEADLINE).await;
        };
        let end = tokio::time::Instant::now() + READY_DEADLINE;
        loop {
            let round = tokio::time::Instant::now() + Duration::from_secs(2);
            if own.answers(addr, round.min(end)).await {
                return Ok(());
            }
            if let Some(st) = &self.storage {
                if let Some(how) = pods::ended(&self.pods, &st.pod).await {
                    bail!("{}: its pod's program ended ({how})", own.what());
                }
            }
            if tokio::time::Instant::now() >= end {
                bail!(
                    "{} does not answer at {addr} after {READY_DEADLINE:?}",
                    own.what()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn proc_of(&mut self, who: Service) -> Result<&mut PodProc> {
        match who {
            Service::Member(i) => self.members.get_mut(i).context("no such member"),
            Service::Storage => self
                .storage
                .as_mut()
                .context("the storage is not fencecheck's (yours): it is not in the cluster"),
            Service::Worker(w) => self
                .remote_workers
                .get_mut(w as usize)
                .context("that worker's faults are the nemesis's signals, not its pod's agent"),
        }
    }

    /// The agent's command in `who`'s pod; the answer as read back from its /proc.
    async fn agent(&mut self, who: Service, cmd: &str) -> Result<(String, serde_json::Value)> {
        let pod = self.proc_of(who)?.pod.clone();
        let answer = pods::agent(&self.pods, &pod, cmd).await?;
        Ok((pod, answer))
    }

    /// The agent's `stop`: SIGSTOP of the program's process group in the pod.
    pub async fn pause(&mut self, who: Service) -> Result<serde_json::Value> {
        let p = self.proc_of(who)?;
        if p.dead {
            bail!("{} is not running", p.what);
        }
        // Recorded before the command, so a heal never misses it.
        self.paused.insert(who);
        let (pod, a) = self.agent(who, "stop").await?;
        // `pod_pid`, not `pid`: it is a pid of the pod's PID namespace, not of this
        // machine's /proc; the nemesis asks `is_paused` instead.
        Ok(serde_json::json!({
            "action": "agent stop (SIGSTOP)", "pod": pod, "namespace": self.ns,
            "pod_pid": a.get("pid"), "state": a.get("state"),
            "group_processes": a.get("processes"), "group_stopped": a.get("stopped"),
        }))
    }

    /// Stopped as the agent reads the pod's /proc: the program (`T`) and every
    /// process of its group (a worker's adapter too).
    pub async fn is_paused(&mut self, who: Service) -> Result<bool> {
        let (_, a) = self.agent(who, "state").await?;
        Ok(stopped_whole(&a))
    }

    pub async fn resume(&mut self, who: Service) -> Result<()> {
        self.paused.remove(&who);
        self.agent(who, "cont").await.map(|_| ())
    }

    async fn kill(&mut self, who: Service) -> Result<serde_json::Value> {
        // SIGKILL ends a stopped process too; the pause is over with it.
        self.paused.remove(&who);
        let before = self.agent(who, "state").await.ok().map(|(_, a)| a);
        let (pod, a) = self.agent(who, "kill").await?;
        self.proc_of(who)?.dead = true;
        let gone = a.get("running").and_then(|r| r.as_bool()) == Some(false);
        Ok(serde_json::json!({
            "action": "agent kill (SIGKILL)", "pod": pod, "namespace": self.ns,
            "pod_pid": before.as_ref().and_then(|b| b.get("pid")).cloned(),
            "seen_gone": gone,
        }))
    }

    async fn start_again(&mut self, who: Service) -> Result<serde_json::Value> {
        let (pod, a) = self.agent(who, "start").await?;
        self.proc_of(who)?.dead = false;
        Ok(serde_json::json!({
            "action": "agent start", "pod": pod, "namespace": self.ns,
            "pod_pid": a.get("pid"), "state": a.get("state"),
        }))
    }

    /// The node, when it is not this machine.
    pub fn remote(&self) -> Option<&connect::Remote> {
        self.remote.as_ref()
    }

    /// The offset of this machine's monotonic clock to the node's, and its
    /// uncertainty (ns), measured in `pod` the first time it is asked for.
    async fn node_clock(&mut self, pod: &str) -> Result<(i64, u64)> {
        if let Some(c) = self.node_clock {
            return Ok(c);
        }
        let c = pods::clock_offset(&self.pods, pod)
            .await
            .context("the node's monotonic clock")?;
        self.node_clock = Some(c);
        self.edit_record(|r| {
            r["node_clock"] = serde_json::json!({ "offset_ns": c.0, "uncertainty_ns": c.1 });
        });
        Ok(c)
    }

    /// Changes `kubernetes.json` in place (what is learnt after `start_all`
    /// wrote it); a record that cannot be read is left as it is.
    fn edit_record(&self, edit: impl FnOnce(&mut serde_json::Value)) {
        let file = self.run_dir.join(RECORD);
        let Some(mut r) = std::fs::read_to_string(&file)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        else {
            return;
        };
        edit(&mut r);
        if let Ok(j) = serde_json::to_string_pretty(&r) {
            let _ = std::fs::write(&file, j + "\n");
        }
    }

    /// The node, when it is not this machine and the workers are pods there
    /// (`workers::on_remote`).
    pub fn workers_remote(&self) -> Option<&connect::Remote> {
        self.remote.as_ref().filter(|_| self.worker_image.is_some())
    }

    /// Steps member `i`'s clock by `ns` through its clockshim offset file, when
    /// its spec runs it under clockshim (the pod's image has clockshim at its
    /// path on this machine). The run directory's file is the one the pod reads
    /// on this machine's node; on a node that is not this machine, the pod has
    /// its own copy (the ConfigMap's, put in place by the agent), which the
    /// agent's `put` replaces with the new offset, and the run directory's stays
    /// the record of it.
    pub async fn step_clock(&mut self, i: usize, ns: i64) -> Result<(i64, i64)> {
        let file = self
            .clocks
            .get(i)
            .context("no such member")?
            .clone()
            .context("this member runs without clockshim: its clock cannot be stepped")?;
        let (old, new) = crate::clockshim::step_ns(&file, ns)?;
        if self.remote.is_some() {
            let pod = self.proc_of(Service::Member(i))?.pod.clone();
            if let Err(e) = pods::put(&self.pods, &pod, &file, &new.to_string()).await {
                // The record goes back to what the pod still reads.
                let _ = crate::clockshim::write_offset(&file, old);
                return Err(e);
            }
        }
        Ok((old, new))
    }

    /// SIGKILL of member `i`'s program; its pod, data and address stay.
    pub async fn kill_member(&mut self, i: usize) -> Result<serde_json::Value> {
        self.kill(Service::Member(i)).await
    }

    /// Member `i`'s program again, in the same pod, on its data.
    pub async fn restart_member(&mut self, i: usize) -> Result<serde_json::Value> {
        self.start_again(Service::Member(i)).await
    }

    pub async fn kill_storage(&mut self) -> Result<serde_json::Value> {
        self.kill(Service::Storage).await
    }

    /// The storage again on its log, and the wait until it answers.
    pub async fn restart_storage(&mut self) -> Result<serde_json::Value> {
        let t0 = std::time::Instant::now();
        let mut done = self.start_again(Service::Storage).await?;
        let addr = self.seen(self.storage_addr.context("no storage")?);
        let log = self.proc_of(Service::Storage)?.log.clone();
        self.wait_storage(addr)
            .await
            .with_context(|| format!("the restarted storage; see {}", log.display()))?;
        done["ready_ms"] = serde_json::json!(t0.elapsed().as_millis() as u64);
        Ok(done)
    }

    /// Heal phase: continues every paused program, starts every killed one.
    pub async fn heal(&mut self) -> Vec<String> {
        let mut done = Vec::new();
        let mut paused: Vec<Service> = self.paused.iter().copied().collect();
        paused.sort_by_key(|s| match s {
            Service::Member(i) => *i,
            Service::Worker(w) => usize::MAX / 2 + *w as usize,
            Service::Storage => usize::MAX,
        });
        for who in paused {
            if self.resume(who).await.is_ok() {
                done.push(format!("continued {}", self.what(who)));
            }
        }
        for i in 0..self.members.len() {
            if self.members[i].dead && self.restart_member(i).await.is_ok() {
                done.push(format!("restarted member {i}"));
            }
        }
        if self.storage.as_ref().is_some_and(|s| s.dead) && self.restart_storage().await.is_ok() {
            done.push("restarted the storage".into());
        }
        done
    }

    fn what(&self, who: Service) -> String {
        match who {
            Service::Member(i) => self.members.get(i).map(|m| m.what.clone()),
            Service::Storage => self.storage.as_ref().map(|s| s.what.clone()),
            Service::Worker(w) => self.remote_workers.get(w as usize).map(|s| s.what.clone()),
        }
        .unwrap_or_default()
    }

    /// Continues what is paused, deletes the namespace with its pods (their
    /// output is in the run directory already), stops the peer proxies.
    pub async fn stop(&mut self) {
        self.record_forwards();
        for who in std::mem::take(&mut self.paused) {
            let _ = self.agent(who, "cont").await;
        }
        // Every byte of the followed files before their pods go.
        for f in std::mem::take(&mut self.follows) {
            f.finish(FOLLOW_FINISH).await;
        }
        if let Some(c) = self.links.take() {
            let n = c.reopened();
            self.edit_record(|r| r["links"]["reopened"] = n.into());
        }
        if self.armed {
            match namespace::delete(&self.client, &self.ns).await {
                Ok(_) => self.armed = false,
                Err(e) => tracing::warn!("kubernetes clean-up of {}: {e:#}", self.ns),
            }
        }
        // Only once the namespace is gone: were this process killed before, the
        // reaper would still delete it.
        if let Some(r) = self.reaper.take() {
            if self.armed {
                r.abandon();
            } else {
                r.stop(&self.client).await;
                // Its pod is deleted (grace 0): its containers go now, not after
                // kubelet's few seconds to stop them.
                let needle = vec![reaper_needle(&self.run_id)];
                let _ =
                    crate::cluster::containers::remove_matching(&self.docker, &needle, true).await;
            }
        }
        self.remove_stopped_containers().await;
        // The pods are gone, so their streams have their last bytes; one that
        // the API server keeps open anyway is cut after LOG_DRAIN (all at once).
        let logs = std::mem::take(&mut self.logs);
        let aborts: Vec<_> = logs.iter().map(|h| h.abort_handle()).collect();
        if tokio::time::timeout(LOG_DRAIN, futures_util::future::join_all(logs))
            .await
            .is_err()
        {
            for a in aborts {
                a.abort();
            }
        }
        for p in &self.peer_proxies {
            p.shutdown().await;
        }
    }
}

impl KubernetesBackend {
    async fn remove_stopped_containers(&self) {
        remove_stopped_containers(&self.docker, &self.ns, &self.run_id).await;
    }
}

/// The uid and gid of a resource's own server's image (PostgreSQL's `postgres`
/// user, `resources/postgres/image.rs`).
const OWN_UID: i64 = 999;

/// A resource's own server's arguments on the host's network: listening on
/// `host` only (loopback, or a remote node's address), on `port`.
fn own_args(args: &[String], host: std::net::IpAddr, port: u16) -> Vec<String> {
    let mut out: Vec<String> = args
        .iter()
        .map(|a| match a.strip_prefix("listen_addresses=") {
            Some(_) => format!("listen_addresses={host}"),
            None => a.clone(),
        })
        .collect();
    out.extend(["-c".to_string(), format!("port={port}")]);
    out
}

/// How long `stop` waits for the last bytes of a followed file.
const FOLLOW_FINISH: Duration = Duration::from_secs(10);

/// `n` distinct ports for a node that is not this machine, whose free ports
/// the harness cannot ask: drawn from 20000–31999, below Linux's ephemeral
/// range (32768–60999), so that no outgoing connection of the node holds one;
/// a port taken all the same fails its pod's start with the program's own
/// error in its log.
fn node_ports(n: usize) -> Vec<u16> {
    use rand::seq::SliceRandom;
    let all: Vec<u16> = (20000..32000).collect();
    all.choose_multiple(&mut rand::thread_rng(), n)
        .copied()
        .collect()
}

/// Where each member goes on a node that is not this machine: the node's
/// address (client and peer ports on it, from `node_ports`), a proxy of the
/// harness's in front of each peer port, listening on this machine's address
/// on the route to the node (what the member advertises: member-to-member
/// traffic crosses the harness, so delay and partition work as on the process
/// backend), data and config files at their run-directory paths (the pod's
/// own directory there).
async fn remote_placements(
    n: usize,
    peer_ports: usize,
    run_dir: &Path,
    short: &str,
    r: &connect::Remote,
) -> Result<(Vec<crate::systems::members::Placement>, Vec<Vec<Proxy>>)> {
    let mut ports = node_ports(n * (1 + peer_ports)).into_iter();
    let mut at = Vec::new();
    let mut proxies = Vec::new();
    for i in 0..n {
        let client = SocketAddr::new(r.node_ip, ports.next().context("ports")?);
        let listens = (0..peer_ports)
            .map(|_| Ok(SocketAddr::new(r.node_ip, ports.next().context("ports")?)))
            .collect::<Result<Vec<_>>>()?;
        let (p, mine) =
            super::process::place(i, client, listens, r.harness_ip, run_dir, short).await?;
        at.push(p);
        proxies.push(mine);
    }
    Ok((at, proxies))
}

/// [`remote_placements`] with each peer port's proxy in the `links` pod on the
/// node instead (`links.rs`): the member advertises that proxy's port on the
/// node's address. The pairs (the proxy's listen address, the peer port it
/// leads to) are started once the run's namespace exists.
#[allow(clippy::type_complexity)]
fn remote_placements_in_pod(
    n: usize,
    peer_ports: usize,
    run_dir: &Path,
    short: &str,
    r: &connect::Remote,
) -> Result<(
    Vec<crate::systems::members::Placement>,
    Vec<Vec<(SocketAddr, SocketAddr)>>,
)> {
    let mut ports = node_ports(n * (1 + 2 * peer_ports)).into_iter();
    let mut next =
        || -> Result<SocketAddr> { Ok(SocketAddr::new(r.node_ip, ports.next().context("ports")?)) };
    let mut at = Vec::new();
    let mut pairs = Vec::new();
    for i in 0..n {
        let client = next()?;
        let mut peers = Vec::new();
        let mut mine = Vec::new();
        for _ in 0..peer_ports {
            let (bind, front) = (next()?, next()?);
            peers.push(crate::systems::members::PeerPlace {
                bind,
                advertise: front.into(),
            });
            mine.push((front, bind));
        }
        at.push(super::process::placement(i, client, peers, run_dir, short));
        pairs.push(mine);
    }
    Ok((at, pairs))
}

/// A member's data directory and its files, as `process::write_files` places
/// them, for a pod's ConfigMap (`pods::files_config_map`).
fn member_files(
    spec: &MemberSpec,
    p: &crate::systems::members::Placement,
) -> (Vec<String>, Vec<(String, String)>) {
    use crate::systems::members::FilePlace;
    let files = spec
        .files
        .iter()
        .map(|f| {
            let path = match f.place {
                FilePlace::Data => format!("{}/{}", p.data_dir, f.name),
                FilePlace::Config => p.config_file(&f.name),
            };
            (path, f.contents.clone())
        })
        .collect();
    (vec![p.data_dir.clone()], files)
}

/// What dockershim's names of the run's reaper's containers have.
fn reaper_needle(run_id: &str) -> String {
    format!("_{}_{}_", reaper::name(run_id), reaper::HOME)
}

/// The run's pods' stopped containers (and the reaper's), which kubelet removes
/// only in its once-a-minute garbage collection; on a node whose engine is not
/// this machine's, none are found and kubelet's collection does it.
async fn remove_stopped_containers(
    docker: &testcontainers::bollard::Docker,
    ns: &str,
    run_id: &str,
) {
    {
        let needles = [format!("_{ns}_"), reaper_needle(run_id)];
        let t0 = std::time::Instant::now();
        // Kubelet may still be stopping the reaper's container: a few passes.
        while t0.elapsed() < Duration::from_secs(10) {
            let _ = crate::cluster::containers::remove_stopped(docker, &needles).await;
            let left = crate::cluster::containers::list(docker)
                .await
                .map(|l| l.iter().any(|c| needles.iter().any(|n| c.name.contains(n))))
                .unwrap_or(false);
            if !left {
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

impl Drop for KubernetesBackend {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Dropped without `stop` (an error, a panic, Ctrl-C): the namespace is
        // deleted on a runtime and a client of its own, the run's may be gone.
        let (config, ns, run_id) = (self.config.clone(), self.ns.clone(), self.run_id.clone());
        let done = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let client = connect::client_of(&config)?;
                let done = namespace::delete(&client, &ns).await?;
                if let Ok(e) = super::docker::engine(super::docker::ENGINE_TIMEOUT).await {
                    remove_stopped_containers(&e.docker, &ns, &run_id).await;
                }
                Ok::<_, anyhow::Error>(done)
            })
        })
        .join();
        match done {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => eprintln!("fencecheck: kubernetes clean-up of {}: {e:#}", self.ns),
            Err(_) => eprintln!("fencecheck: kubernetes clean-up of {} panicked", self.ns),
        }
    }
}

/// The agent's answer says the program is stopped, and so is every process
/// of its group.
fn stopped_whole(a: &serde_json::Value) -> bool {
    let n = |k: &str| a.get(k).and_then(serde_json::Value::as_u64);
    a.get("state").and_then(|s| s.as_str()) == Some("T")
        && matches!((n("processes"), n("stopped")), (Some(all), Some(s)) if all > 0 && s == all)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn a_pause_holds_only_when_the_whole_group_is_stopped() {
        let seen = |v| super::stopped_whole(&v);
        assert!(seen(
            json!({"pid": 7, "state": "T", "processes": 2, "stopped": 2})
        ));
        // The worker stopped, its adapter not: the lock is still kept alive.
        assert!(!seen(
            json!({"pid": 7, "state": "T", "processes": 2, "stopped": 1})
        ));
        assert!(!seen(
            json!({"pid": 7, "state": "S", "processes": 1, "stopped": 0})
        ));
        assert!(!seen(json!({"running": false})));
    }

    /// Each member advertises, for each peer port, a proxy port of the node's
    /// own, and the links pod's pair leads from that port to the peer port;
    /// every port is drawn once.
    #[test]
    fn in_a_pod_each_member_advertises_its_proxy_on_the_node() {
        let r = super::connect::Remote {
            node_ip: "10.251.0.2".parse().unwrap(),
            harness_ip: "10.251.0.1".parse().unwrap(),
            why: String::new(),
            unreached: None,
        };
        let dir = std::path::Path::new("/tmp/run");
        let (at, pairs) = super::remote_placements_in_pod(3, 2, dir, "etcd", &r).unwrap();
        assert_eq!((at.len(), pairs.len()), (3, 3));
        let mut ports = std::collections::HashSet::new();
        for (p, mine) in at.iter().zip(&pairs) {
            assert_eq!(p.client.ip(), r.node_ip);
            assert!(ports.insert(p.client.port()));
            assert_eq!(p.peers.len(), 2);
            for (peer, (front, bind)) in p.peers.iter().zip(mine) {
                assert_eq!(peer.bind, *bind);
                assert_eq!(peer.advertise.to_string(), front.to_string());
                assert_eq!(front.ip(), r.node_ip, "not this machine's address");
                assert!(ports.insert(bind.port()) && ports.insert(front.port()));
            }
        }
    }
}

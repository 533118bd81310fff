//! The stages of [`KubernetesBackend::start`], in the order it runs them: what
//! is decided or refused before any image is built, the images, the members'
//! placements, the run's reaper, what the run says it starts, and its record.
//! Each stage is a function of what the earlier ones decided, so `start` reads
//! as the list of them.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use faultproxy::Proxy;
use testcontainers::bollard::Docker;

use super::{
    connect, elect, registry, remote_placements, remote_placements_in_pod, workers,
    KubernetesBackend, Record, RemoteRecord, RUN_LABEL,
};
use crate::resources::container::ContainerStorage;
use crate::scenario::{Reach, ReaperPlace, Scenario, ServiceKind};
use crate::systems::members::{Deploy, Placement};
use crate::systems::service::ServiceAccess;

/// What is decided, or refused, before any image is built.
pub(super) struct Shape {
    /// The workers as pods, with a `[client]` adapter's runtime in them
    /// (`workers::in_pods`); on a node that is not this machine only where its
    /// agents can do what this machine's signals do (`workers::on_remote`).
    pub in_pods: Option<Option<(PathBuf, Vec<PathBuf>)>>,
    /// The link proxies in a pod on a node that is not this machine: with the
    /// workers there, so the harness can go through port-forwards.
    pub links_in_pod: bool,
    /// Where the reaper runs and how it reaches the API server.
    pub reaper: Result<super::reaper::ReaperAccess>,
}

/// Where the workers and the links run, and where the reaper does: each refused
/// here, before any image is built, where the cluster cannot give it.
pub(super) async fn shape(cluster: &connect::Cluster, scenario: &Scenario) -> Result<Shape> {
    let in_pods = workers::in_pods(scenario)
        .filter(|_| cluster.remote.is_none() || workers::on_remote(scenario).is_ok());
    let links_in_pod = cluster.remote.is_some() && in_pods.is_some();
    if let Some(why) = cluster.remote.as_ref().and_then(|r| r.unreached.as_ref()) {
        if !links_in_pod {
            bail!(
                "{why}; this scenario's workers stay processes here, and their links \
                 with them (see the backends chapter, a node that is not this machine)"
            );
        }
    }
    if scenario.cluster.reach == Reach::PortForward && !links_in_pod {
        return Err(scenario
            .source
            .error_at_key(
                "reach",
                format!(
                    "cluster.reach = \"port-forward\" needs [cluster] node to be a node \
                     that is not this machine, with the workers as pods there (the \
                     port-forwards lead to proxies in their links pod); node {} {}",
                    cluster.node,
                    if cluster.remote.is_none() {
                        "is this machine"
                    } else {
                        "runs no worker pods for this scenario: its workers stay processes here"
                    }
                ),
            )
            .into());
    }
    // A reaper in the pod network reaches the API server through the
    // `kubernetes` Service, which every conformant cluster has; a cluster
    // without it is refused here, not 20 s into the reaper's start.
    let reaper = connect::reaper_access(cluster, scenario.cluster.reaper);
    if reaper.as_ref().is_ok_and(|a| !a.host_network) {
        if let Err(why) = connect::api_service(&cluster.client).await {
            let asked = scenario.cluster.reaper == ReaperPlace::InCluster;
            let why = format!(
                "the reaper (the dead-man switch after a SIGKILL) would run in the \
                 cluster's pod network{}, and reach the API server through the \
                 `kubernetes` Service: {why}",
                if asked {
                    " (cluster.reaper = \"in-cluster\")"
                } else {
                    ": no node of the cluster is this machine"
                }
            );
            return Err(if asked {
                scenario.source.error_at_key("reaper", why).into()
            } else {
                anyhow!(why)
            });
        }
    }
    Ok(Shape {
        in_pods,
        links_in_pod,
        reaper,
    })
}

/// The run's images, where its pods find them, and what they pull with.
pub(super) struct Images {
    /// The members' specs (none when electing on the cluster's own API server).
    pub deploy: Option<Box<dyn Deploy>>,
    pub member: Option<String>,
    pub storage: Option<String>,
    pub worker: Option<String>,
    pub login: Option<registry::Login>,
    /// The pull secret's `.dockerconfigjson`, with a registry login.
    pub pull: Option<String>,
}

/// Builds the images on this machine's Docker engine: a node on that engine
/// (the local cluster's) finds them there; any other pulls them from
/// `[cluster] registry` (`registry.rs`).
#[allow(clippy::too_many_arguments)]
pub(super) async fn images(
    docker: &Docker,
    cluster: &connect::Cluster,
    scenario: &Scenario,
    external: Option<SocketAddr>,
    own: Option<&dyn ContainerStorage>,
    in_pods: &Option<Option<(PathBuf, Vec<PathBuf>)>>,
    own_members: bool,
    say: &dyn Fn(&str),
) -> Result<Images> {
    let system = crate::systems::system(scenario.lock.service);
    let deploy = match own_members {
        false => None,
        true => Some(tokio::task::block_in_place(|| {
            system.deploy(scenario, say)
        })?),
    };
    let member = match &deploy {
        Some(d) => Some(crate::images::pod_image(docker, d.as_ref(), say).await?),
        None => None,
    };
    let storage = match (external, own) {
        (Some(_), _) => None,
        (None, Some(o)) => Some(crate::images::own_storage_pod_image(docker, o, say).await?),
        (None, None) => Some(crate::images::agent_storage_image(docker, say).await?),
    };
    // Without a registry the pods use the engine's images as they are.
    let reg = scenario.cluster.registry.as_deref();
    let login = match reg {
        Some(r) => registry::login(r)?,
        None => None,
    };
    let pull = login.as_ref().map(registry::docker_config_json);
    let member = match member {
        Some(i) => Some(registry::place(docker, reg, login.as_ref(), &i.tag, say).await?),
        None => None,
    };
    let storage = match storage {
        Some(i) => Some(registry::place(docker, reg, login.as_ref(), &i.tag, say).await?),
        None => None,
    };
    // The workers' too, with a `[client]` adapter's runtime in it: an adapter
    // whose files cannot be packaged stops the run before anything starts. On a
    // node that is not this machine, with this fencecheck binary in it (the node
    // does not have it), unless the workers stay processes here
    // (`workers::on_remote`).
    let worker = match in_pods {
        None => None,
        Some(adapter) => {
            let adapter = adapter.as_ref().map(|(c, f)| (c.as_path(), f.as_slice()));
            let binary = cluster.remote.is_some();
            let i = crate::images::worker_image(docker, adapter, binary, say)
                .await
                .context("the workers' image")?;
            Some(registry::place(docker, reg, login.as_ref(), &i.tag, say).await?)
        }
    };
    Ok(Images {
        deploy,
        member,
        storage,
        worker,
        login,
        pull,
    })
}

/// Where the members listen and the proxies in front of their peer ports.
pub(super) struct Placed {
    pub at: Vec<Placement>,
    /// The harness's own peer proxies (none where the links are in a pod).
    pub proxies: Vec<Vec<Proxy>>,
    /// Each member's peer links for the links pod: (listen, lead to).
    pub peer_pairs: Vec<Vec<(SocketAddr, SocketAddr)>>,
    /// The node ports those take, for the next draw to avoid.
    pub node_ports_used: HashSet<u16>,
}

/// The members' placements: as the process backend places them on this
/// machine's node; on a node that is not this machine, on its address, with
/// every peer link's proxy in a pod there where the workers are pods there
/// (`links.rs`), so nothing of the run's traffic crosses this machine.
pub(super) async fn placements(
    cluster: &connect::Cluster,
    scenario: &Scenario,
    run_dir: &Path,
    links_in_pod: bool,
    own_members: bool,
) -> Result<Placed> {
    let system = crate::systems::system(scenario.lock.service);
    let n = scenario.member_count();
    let short = system.member_name();
    let peer_ports = system.ports().peers.len();
    let mut peer_pairs = Vec::new();
    let (at, proxies) = match (own_members, &cluster.remote) {
        (false, _) => (Vec::new(), Vec::new()),
        (true, None) => super::super::process::placements(n, peer_ports, run_dir, short).await?,
        (true, Some(r)) if links_in_pod => {
            let (at, pairs) = remote_placements_in_pod(n, peer_ports, run_dir, short, r)?;
            peer_pairs = pairs;
            (at, Vec::new())
        }
        (true, Some(r)) => remote_placements(n, peer_ports, run_dir, short, r).await?,
    };
    let node_ports_used = at
        .iter()
        .flat_map(|p| {
            [p.client.port()].into_iter().chain(
                p.peers
                    .iter()
                    .flat_map(|q| [q.bind.port(), q.advertise.port]),
            )
        })
        .collect();
    Ok(Placed {
        at,
        proxies,
        peer_pairs,
        node_ports_used,
    })
}

impl KubernetesBackend {
    /// The members' peer links: in the links pod on a node that is not this
    /// machine (with the workers as pods there), else the harness's proxies.
    pub(super) async fn peer_links_of(
        &mut self,
        placed: &mut Placed,
        links_in_pod: bool,
        say: &dyn Fn(&str),
    ) -> Result<Vec<Vec<crate::links::Link>>> {
        if !links_in_pod {
            return Ok(crate::links::here(std::mem::take(&mut placed.proxies)));
        }
        match self.peer_links(&placed.peer_pairs, say).await {
            Ok(l) => Ok(l),
            Err(e) => {
                self.stop().await;
                Err(e.context("the members' peer links in a pod"))
            }
        }
    }

    /// The reaper first: from here on the run's pods go even if this process is
    /// killed outright. Then the registry's pull secret. On failure, what was
    /// created is deleted.
    pub(super) async fn start_reaper(
        &mut self,
        cluster: &connect::Cluster,
        access: Result<super::reaper::ReaperAccess>,
        scenario: &Scenario,
        images: &Images,
        say: &dyn Fn(&str),
    ) -> Result<()> {
        let reg = scenario.cluster.registry.as_deref();
        let image = match crate::images::reaper_image(&self.docker, say).await {
            Ok(i) => registry::place(&self.docker, reg, images.login.as_ref(), &i.tag, say).await,
            Err(e) => Err(e),
        };
        let started = match (access, image) {
            (Ok(mut a), Ok(i)) => {
                a.pull = images.pull.clone();
                super::reaper::start(&cluster.client, &self.ns, &self.run_id, &a, &i, say).await
            }
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        match started {
            Ok(r) => self.reaper = Some(r),
            Err(e) => {
                self.stop().await;
                return Err(e.context("the run's reaper did not start"));
            }
        }
        if let Some(json) = &images.pull {
            let made =
                super::namespace::pull_secret(&cluster.client, &self.ns, &self.run_id, json).await;
            if let Err(e) = made {
                self.stop().await;
                return Err(e);
            }
            self.pull_secret = Some(registry::PULL_SECRET.to_string());
        }
        Ok(())
    }

    /// What the workers present to the lock service: the system's own access
    /// (the run's API server's token), or, electing on the cluster's own API
    /// server, a service account granted there for the run.
    pub(super) async fn electors_access(
        &mut self,
        cluster: &connect::Cluster,
        scenario: &Scenario,
        deploy: Option<&dyn Deploy>,
        on_cluster: Option<&elect::Target>,
    ) -> Result<Option<ServiceAccess>> {
        let Some(t) = on_cluster else {
            return Ok(deploy.and_then(|d| d.access()));
        };
        // Valid past the run's end, its heal phase and the final reads.
        let valid = scenario.duration + Duration::from_secs(600);
        match elect::grant(&cluster.client, &self.ns, &self.run_id, t, valid).await {
            Ok(a) => Ok(Some(a)),
            Err(e) => {
                self.stop().await;
                Err(e.context("the electors' service account on the cluster's API server"))
            }
        }
    }
}

/// What the run says it starts, and where.
#[allow(clippy::too_many_arguments)]
pub(super) fn announce(
    cluster: &connect::Cluster,
    scenario: &Scenario,
    ns: &str,
    deploy: Option<&dyn Deploy>,
    electing_on_cluster: bool,
    links_in_pod: bool,
    external: Option<SocketAddr>,
    say: &dyn Fn(&str),
) {
    if electing_on_cluster {
        say(&format!(
            "electing on the cluster's own API server {} ({}), Leases in namespace {ns}, \
             as serviceaccount {ns}/{}",
            cluster.server,
            cluster.version,
            elect::ELECTOR
        ));
    }
    if let Some(r) = &cluster.remote {
        say(&format!(
            "node {} {}: its pods listen on {}, {}",
            cluster.node,
            r.why,
            r.node_ip,
            if links_in_pod {
                "the link proxies too (a pod there)".to_string()
            } else {
                format!("the harness's proxies on {}", r.harness_ip)
            }
        ));
    }
    say(&format!(
        "starting {} pod(s){} in namespace {ns} on node {} ({})",
        match deploy {
            Some(d) => format!(
                "{} {} {}",
                scenario.member_count(),
                scenario.lock.service,
                d.version()
            ),
            None => "no member".into(),
        },
        match external {
            None => " and the storage's",
            Some(_) => "",
        },
        cluster.node,
        cluster.server
    ));
}

/// The run's record as it stands before any pod is created (`kubernetes.json`;
/// `start_all` adds the pods and their timings).
pub(super) fn record<'a>(
    cluster: &'a connect::Cluster,
    scenario: &'a Scenario,
    images: &'a Images,
    (run_id, ns): (&'a str, &'a str),
    reaper: Option<&super::reaper::Reaper>,
    electing_on_cluster: bool,
) -> Record<'a> {
    Record {
        run_id,
        server: &cluster.server,
        kubeconfig: cluster.kubeconfig.display().to_string(),
        kubeconfig_from: &cluster.source,
        version: &cluster.version,
        node: &cluster.node,
        namespace: ns,
        label: format!("{RUN_LABEL}={run_id}"),
        registry: scenario.cluster.registry.as_deref(),
        remote: cluster.remote.as_ref().map(|r| RemoteRecord {
            node_address: r.node_ip.to_string(),
            harness_address: r.harness_ip.to_string(),
            why: &r.why,
        }),
        apiserver: match (electing_on_cluster, scenario.lock.service) {
            (true, _) => "the cluster's",
            (false, ServiceKind::Kubernetes) => "the run's own",
            (false, _) => "",
        },
        images: [images.member.as_deref(), images.storage.as_deref()]
            .into_iter()
            .flatten()
            .collect(),
        pods: Vec::new(),
        ready: Vec::new(),
        ready_ms: 0,
        reach: None,
        node_clock: None,
        reaper: reaper
            .map(|r| {
                let mut v = r.record.clone();
                v["asked"] = scenario.cluster.reaper.as_str().into();
                v
            })
            .unwrap_or_default(),
    }
}

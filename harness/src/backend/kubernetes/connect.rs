//! Finding the cluster and checking, before anything starts, that a run can use
//! it: the kubeconfig (`[cluster] kubeconfig`, else `KUBECONFIG`, else
//! `~/.kube/config`, else the local cluster's when `fencecheck cluster up` runs),
//! an API server that answers, the node the pods go to, and every verb the run
//! needs (asked of the API server itself: SelfSubjectAccessReview).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, PostParams};

/// A call's own limit: an API server that stopped answering must not hang the run.
const CALL: Duration = Duration::from_secs(10);

/// The cluster a run uses.
pub struct Cluster {
    /// For API calls (each with a read timeout).
    pub client: kube::Client,
    /// The same cluster, without a read timeout: log streams stay quiet for long.
    pub streams: kube::Client,
    /// To make clients again where the run's runtime is gone (the drop guard).
    pub config: kube::Config,
    pub kubeconfig: PathBuf,
    /// Why that kubeconfig (for the report).
    pub source: String,
    pub server: String,
    pub version: String,
    /// The node every pod of the run is placed on (`nodeName`).
    pub node: String,
    /// That node when it is not this machine (in its network): where its pods
    /// listen and reach the harness.
    pub remote: Option<Remote>,
    /// Where the reaper's pod goes when `node` is not this machine: a node of
    /// the cluster that is (the reaper reaches the API server at the
    /// kubeconfig's address, on that host's network), else `None`: on `node`
    /// in the cluster's pod network, through the `kubernetes` Service
    /// ([`reaper_access`]).
    pub reaper_node: Option<String>,
}

/// A node that is not the harness's machine (another machine, or this one in
/// a network of its own): its pods use its host's network, so its members
/// listen on its address and the harness reaches them there; the harness's
/// proxies listen on this machine's address on the route to it, where the
/// node's pods reach them.
#[derive(Debug, Clone)]
pub struct Remote {
    /// The node's InternalIP (else ExternalIP).
    pub node_ip: std::net::IpAddr,
    /// This machine's address on its route to `node_ip`.
    pub harness_ip: std::net::IpAddr,
    /// Why it is not this machine.
    pub why: String,
    /// Why this machine is not to reach the node's address, when its kubelet
    /// port did not answer here (said in full): the harness then reaches the
    /// run's pods only through the API server (`[cluster] reach`), which a run
    /// whose workers stay processes here cannot do.
    pub unreached: Option<String>,
}

/// Which kubeconfig, and why.
pub fn kubeconfig(given: Option<&Path>) -> Result<(PathBuf, String)> {
    if let Some(p) = given {
        return Ok((p.to_path_buf(), "[cluster] kubeconfig".into()));
    }
    if let Some(p) = std::env::var_os("KUBECONFIG").filter(|p| !p.is_empty()) {
        // Several files joined by ':' are kubectl's; the first is the one read here.
        let first = std::env::split_paths(&p).next().unwrap_or_default();
        return Ok((first, "KUBECONFIG".into()));
    }
    if let Some(home) = std::env::var_os("HOME") {
        let p = Path::new(&home).join(".kube/config");
        if p.exists() {
            return Ok((p, "~/.kube/config".into()));
        }
    }
    let local = crate::cluster::state::default_dir().join("kubeconfig");
    if local.exists() {
        return Ok((local, "the local cluster (fencecheck cluster up)".into()));
    }
    bail!(
        "backend \"kubernetes\": no kubeconfig: set [cluster] kubeconfig or KUBECONFIG, \
         have ~/.kube/config, or start the local cluster with `fencecheck cluster up`"
    )
}

/// What the reaper's pod needs to reach the API server, and where it runs.
///
/// `auto` puts it on a node that is this machine (the run's, or another's when
/// the run's node is not this machine), on its host network: the kubeconfig's
/// address is this machine's view of the API server, and so is that host's.
/// Without such a node, or asked `in-cluster`, it goes on the run's node (by
/// `nodeName`, as every pod of the run: no scheduler needed) in the cluster's
/// pod network, and reaches the API server as any pod does, at the `kubernetes`
/// Service's address kubelet gives each container (`reaper/src/kube.rs`),
/// checking the certificate with the kubeconfig's CA.
pub fn reaper_access(
    c: &Cluster,
    place: crate::scenario::ReaperPlace,
) -> Result<super::reaper::ReaperAccess> {
    use secrecy::ExposeSecret;
    let token = c
        .config
        .auth_info
        .token
        .as_ref()
        .map(|t| t.expose_secret().to_string())
        .context(
            "the kubeconfig's user has no token: the reaper (the dead-man switch after a \
             SIGKILL) needs one to act for the run",
        )?;
    let ca_pem = ca_pem(&c.config);
    let here = match (place, &c.remote) {
        (crate::scenario::ReaperPlace::InCluster, _) => None,
        (_, None) => Some(c.node.clone()),
        (_, Some(_)) => c.reaper_node.clone(),
    };
    Ok(match here {
        Some(node) => super::reaper::ReaperAccess {
            server: c.server.trim_end_matches('/').to_string(),
            token,
            ca_pem,
            node: Some(node),
            host_network: true,
            docker_socket: Some("/var/run/docker.sock".to_string())
                .filter(|s| std::path::Path::new(s).exists()),
            pull: None,
        },
        None => super::reaper::ReaperAccess {
            server: IN_CLUSTER.to_string(),
            token,
            ca_pem,
            node: Some(c.node.clone()),
            host_network: false,
            docker_socket: None,
            pull: None,
        },
    })
}

/// The `kubernetes` Service in namespace `default` as a pod sees it: its
/// address (what kubelet gives each container as `KUBERNETES_SERVICE_HOST`) and
/// the API server's addresses behind it (its Endpoints, which the API server
/// keeps). Err: why a pod cannot reach the API server through it.
pub async fn api_service(client: &kube::Client) -> Result<String, String> {
    use k8s_openapi::api::core::v1::{Endpoints, Service};
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let svc = match tokio::time::timeout(CALL, services.get_opt("kubernetes")).await {
        Ok(Ok(Some(s))) => s,
        Ok(Ok(None)) => return Err("the cluster has no Service default/kubernetes".into()),
        Ok(Err(e)) => return Err(format!("get service default/kubernetes: {e}")),
        Err(_) => {
            return Err(format!(
                "get service default/kubernetes: no answer in {CALL:?}"
            ))
        }
    };
    let ip = svc
        .spec
        .and_then(|s| s.cluster_ip)
        .filter(|ip| !ip.is_empty() && ip != "None")
        .ok_or("Service default/kubernetes has no cluster IP")?;
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let behind: Vec<String> =
        match tokio::time::timeout(CALL, endpoints.get_opt("kubernetes")).await {
            Ok(Ok(e)) => e
                .and_then(|e| e.subsets)
                .unwrap_or_default()
                .iter()
                .flat_map(|s| {
                    let ports: Vec<i32> = s.ports.iter().flatten().map(|p| p.port).collect();
                    s.addresses
                        .iter()
                        .flatten()
                        .flat_map(move |a| {
                            let ip = a.ip.clone();
                            ports.clone().into_iter().map(move |p| format!("{ip}:{p}"))
                        })
                        .collect::<Vec<_>>()
                })
                .collect(),
            Ok(Err(e)) => return Err(format!("get endpoints default/kubernetes: {e}")),
            Err(_) => {
                return Err(format!(
                    "get endpoints default/kubernetes: no answer in {CALL:?}"
                ))
            }
        };
    if behind.is_empty() {
        return Err(format!(
            "Service default/kubernetes ({ip}) has no endpoints: the API server publishes \
             no address a pod can reach (one that advertises a loopback address cannot)"
        ));
    }
    Ok(format!("{ip} -> {}", behind.join(", ")))
}

/// The reaper's word for "the `kubernetes` Service's address, as kubelet gives
/// it to the container" (`reaper/src/kube.rs`'s `IN_CLUSTER`).
const IN_CLUSTER: &str = "in-cluster";

/// The kubeconfig's CA certificates for its server, as PEM ("" when it names
/// none).
pub fn ca_pem(config: &kube::Config) -> String {
    use base64::Engine;
    config
        .root_cert
        .iter()
        .flatten()
        .map(|der| {
            let b64 = base64::engine::general_purpose::STANDARD.encode(der);
            let lines: Vec<&str> = b64
                .as_bytes()
                .chunks(64)
                .map(|l| std::str::from_utf8(l).unwrap_or_default())
                .collect();
            format!(
                "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
                lines.join("\n")
            )
        })
        .collect()
}

/// A client for `config` in the current runtime.
pub fn client_of(config: &kube::Config) -> Result<kube::Client> {
    kube::Client::try_from(config.clone()).context("Kubernetes client")
}

/// Every verb on every resource a run uses: (verb, group, resource, subresource,
/// in the run's namespace or cluster-wide).
pub const NEEDED: &[(&str, &str, &str, &str, bool)] = &[
    ("create", "", "namespaces", "", false),
    ("create", "", "serviceaccounts", "", true),
    ("delete", "", "namespaces", "", false),
    ("update", "", "namespaces", "finalize", false),
    ("get", "", "nodes", "", false),
    ("list", "", "nodes", "", false),
    ("create", "", "pods", "", true),
    ("get", "", "pods", "", true),
    ("list", "", "pods", "", true),
    ("delete", "", "pods", "", true),
    ("get", "", "pods", "log", true),
    ("create", "", "pods", "exec", true),
    // The reaper's Secret (in `default`), and with a registry login the pods'
    // pull Secret (in the run's namespace).
    ("create", "", "secrets", "", true),
    ("delete", "", "secrets", "", true),
    // Where no namespace controller empties a deleted namespace (the local
    // cluster), the harness and the reaper delete what the run made in it
    // before they finalize it (`namespace::empty`).
    (
        "deletecollection",
        "coordination.k8s.io",
        "leases",
        "",
        true,
    ),
    ("deletecollection", "", "serviceaccounts", "", true),
    ("deletecollection", "", "secrets", "", true),
    // The members' files on a node that is not this machine (`pods.rs`).
    ("create", "", "configmaps", "", true),
    ("deletecollection", "", "configmaps", "", true),
];

/// Something wrong with the node the run's pods would go to, said at
/// `[cluster] node` when the scenario names it.
#[derive(Debug)]
pub struct NodeError(pub String);

impl std::fmt::Display for NodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NodeError {}

/// Finds the cluster and checks it can run this run's pods; `node` is the
/// scenario's `[cluster] node`; `registry`: `[cluster] registry` is set (the
/// node pulls the images from there); `direct`: `[cluster] reach = "direct"`
/// (a node that is not this machine must then answer at its address here);
/// `elect`: `[lock] apiserver = "cluster"`.
pub async fn connect(
    given: Option<&Path>,
    node: Option<&str>,
    registry: bool,
    direct: bool,
    elect: bool,
) -> Result<Cluster> {
    let (path, source) = kubeconfig(given)?;
    if !path.exists() {
        bail!(
            "backend \"kubernetes\": the kubeconfig {} (from {source}) does not exist",
            path.display()
        );
    }
    let (client, config) = crate::cluster::api::client_with(&path, Some(CALL)).await?;
    let (streams, _) = crate::cluster::api::client_with(&path, None).await?;
    let server = config.cluster_url.to_string();
    let version = match tokio::time::timeout(CALL, client.apiserver_version()).await {
        Ok(Ok(v)) => v.git_version,
        Ok(Err(e)) => bail!(
            "backend \"kubernetes\": the API server {server} (kubeconfig {}) does not answer: {e}",
            path.display()
        ),
        Err(_) => bail!(
            "backend \"kubernetes\": the API server {server} (kubeconfig {}) did not answer within {CALL:?}",
            path.display()
        ),
    };
    // Electing on the cluster's API server (`elect`) needs the elector's account
    // and its Role too (`elect.rs`).
    let extra = if elect {
        super::elect::needed()
    } else {
        Vec::new()
    };
    for &(verb, group, resource, sub, namespaced) in NEEDED.iter().chain(&extra) {
        if !allowed(&client, verb, group, resource, sub, namespaced).await? {
            let what = if sub.is_empty() {
                resource.to_string()
            } else {
                format!("{resource}/{sub}")
            };
            bail!(
                "backend \"kubernetes\": the kubeconfig {}'s user may not {verb} {what}{} \
                 (SelfSubjectAccessReview said no); the RBAC a run needs is in docs/kubernetes.md",
                path.display(),
                if namespaced {
                    " in a namespace of its own"
                } else {
                    ""
                }
            );
        }
    }
    let (node, remote, reaper_node) = this_node(&client, node, registry, direct).await?;
    Ok(Cluster {
        client,
        streams,
        config,
        kubeconfig: path,
        source,
        server,
        version,
        node,
        remote,
        reaper_node,
    })
}

async fn allowed(
    client: &kube::Client,
    verb: &str,
    group: &str,
    resource: &str,
    sub: &str,
    namespaced: bool,
) -> Result<bool> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                subresource: (!sub.is_empty()).then(|| sub.to_string()),
                // Not created yet: any namespace ("" would mean all of them).
                namespace: namespaced.then(|| "fencecheck-preflight".to_string()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let r = api
        .create(&PostParams::default(), &review)
        .await
        .with_context(|| format!("SelfSubjectAccessReview of {verb} {resource}"))?;
    Ok(r.status.map(|s| s.allowed).unwrap_or(false))
}

/// The node the run's pods go to: `wanted` (`[cluster] node`), else the local
/// cluster's (`fencecheck cluster up`), a node named as this machine, or the
/// only node. It must be Ready and find the images (`judge`). A node that is
/// not this machine (in its network) is `Remote`: the run's pods use its
/// host's network there, the harness reaches the members at its address or
/// through port-forwards (a TCP connection to its kubelet is tried first:
/// `Remote::unreached`; refused here with `direct`) and its proxies, if any,
/// listen on this machine's address on the route to it. Returns the node, how it is remote,
/// and for the reaper, a node that is this machine (`Cluster::reaper_node`).
async fn this_node(
    client: &kube::Client,
    wanted: Option<&str>,
    registry: bool,
    direct: bool,
) -> Result<(String, Option<Remote>, Option<String>)> {
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes
        .list(&ListParams::default())
        .await
        .context("list nodes")?;
    let names: Vec<String> = list
        .items
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    let listed = if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    };
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let pick = match wanted {
        Some(w) => names.iter().find(|n| n.as_str() == w).cloned(),
        None => names
            .iter()
            .find(|n| n.as_str() == crate::cluster::NODE || **n == host)
            .cloned()
            .or_else(|| (names.len() == 1).then(|| names[0].clone())),
    };
    let node = match (pick, wanted) {
        (Some(n), _) => n,
        (None, Some(w)) => {
            return Err(NodeError(format!(
                "cluster.node: the cluster has no node {w:?} (nodes: {listed})"
            ))
            .into())
        }
        (None, None) => bail!(
            "backend \"kubernetes\": no node of the cluster is this machine (nodes: {listed}; \
             this machine: {host}): name the node the run's pods go to with [cluster] node"
        ),
    };
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|b| b.trim().to_string())
        .unwrap_or_default();
    let facts = |n: &Node| -> (bool, Vec<String>, String, String, Option<i32>) {
        let status = n.status.as_ref();
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status == "True")
            .unwrap_or(false);
        let info = status.and_then(|s| s.node_info.as_ref());
        let mut addresses: Vec<(u8, String)> = status
            .and_then(|s| s.addresses.as_ref())
            .map(|a| {
                a.iter()
                    .filter_map(|a| match a.type_.as_str() {
                        "InternalIP" => Some((0, a.address.clone())),
                        "ExternalIP" => Some((1, a.address.clone())),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        addresses.sort();
        let port = status
            .and_then(|s| s.daemon_endpoints.as_ref())
            .and_then(|d| d.kubelet_endpoint.as_ref())
            .map(|k| k.port)
            // 0: not reported (a Node registered without a kubelet's endpoint).
            .filter(|p| *p > 0);
        (
            ready,
            addresses.into_iter().map(|(_, a)| a).collect(),
            info.map(|i| i.boot_id.clone()).unwrap_or_default(),
            info.map(|i| i.container_runtime_version.clone())
                .unwrap_or_default(),
            port,
        )
    };
    let Some(n) = list
        .items
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node.as_str()))
    else {
        bail!("backend \"kubernetes\": node {node} vanished from the list");
    };
    let (ready, addresses, node_boot, runtime, kubelet_port) = facts(n);
    if !ready {
        return Err(NodeError(format!("backend \"kubernetes\": node {node} is not Ready")).into());
    }
    let here = Here {
        boot: &boot,
        node_boot: &node_boot,
        runtime: &runtime,
        pulls: registry,
        addresses: &addresses,
    };
    let why = match judge(&here, is_local_address) {
        Verdict::Here => return Ok((node, None, None)),
        Verdict::Refused(why) => {
            return Err(NodeError(format!("backend \"kubernetes\": node {node} {why}")).into())
        }
        Verdict::Elsewhere(why) => why,
    };
    let remote = reach(&node, &why, &addresses, kubelet_port.unwrap_or(10250)).await?;
    // Asked to reach it at its address: refused now, at `[cluster] node`.
    if let (true, Some(u)) = (direct, &remote.unreached) {
        return Err(NodeError(format!("{u} ([cluster] reach = \"direct\")")).into());
    }
    // The reaper's node: one that is this machine, in its network, Ready.
    let reaper_node = list.items.iter().find_map(|n| {
        let (ready, addresses, node_boot, runtime, _) = facts(n);
        let h = Here {
            boot: &boot,
            node_boot: &node_boot,
            runtime: &runtime,
            pulls: registry,
            addresses: &addresses,
        };
        (ready && matches!(judge(&h, is_local_address), Verdict::Here))
            .then(|| n.metadata.name.clone())
            .flatten()
    });
    Ok((node, Some(remote), reaper_node))
}

/// How long the harness tries to reach a node that is not this machine.
const REACH: Duration = Duration::from_secs(3);

/// A node that is not this machine, tried from here: a TCP connection to its
/// kubelet at its first address (what the harness's connections to its members
/// would cross), and this machine's address on the route there. Not reached is
/// not refused here: the run may reach the pods through port-forwards
/// (`KubernetesBackend::start` decides).
async fn reach(node: &str, why: &str, addresses: &[String], port: i32) -> Result<Remote> {
    let refuse = |what: String| -> anyhow::Error {
        NodeError(format!(
            "backend \"kubernetes\": node {node} {why}, and {what}: the harness reaches \
             the members of a node that is not this machine at the node's address, unless \
             the workers are pods there: then through port-forwards ([cluster] reach)"
        ))
        .into()
    };
    let Some(ip) = addresses
        .iter()
        .find_map(|a| a.parse::<std::net::IpAddr>().ok())
    else {
        return Err(refuse(
            "it reports no InternalIP or ExternalIP address".into(),
        ));
    };
    let port = u16::try_from(port).unwrap_or(10250);
    let at = std::net::SocketAddr::new(ip, port);
    let unreached = match tokio::time::timeout(REACH, tokio::net::TcpStream::connect(at)).await {
        Ok(Ok(_)) => None,
        Ok(Err(e)) => Some(format!(
            "{:#}",
            refuse(format!(
                "this machine cannot reach its kubelet at {at}: {e}"
            ))
        )),
        Err(_) => Some(format!(
            "{:#}",
            refuse(format!(
                "this machine cannot reach its kubelet at {at} (no answer within {REACH:?})"
            ))
        )),
    };
    let harness_ip = std::net::UdpSocket::bind(("0.0.0.0", 0))
        .and_then(|s| s.connect(at).and_then(|_| s.local_addr()))
        .with_context(|| format!("this machine's address on its route to {at}"))?
        .ip();
    Ok(Remote {
        node_ip: ip,
        harness_ip,
        why: why.to_string(),
        unreached,
    })
}

/// What `judge` judges a node by.
struct Here<'a> {
    /// This machine's boot id, and the node's as kubelet reports it.
    boot: &'a str,
    node_boot: &'a str,
    /// The node's container runtime (`docker://20.10.5`, `containerd://1.6.4`).
    runtime: &'a str,
    /// `[cluster] registry` is set: the node pulls the images from there.
    pulls: bool,
    /// The node's InternalIP and ExternalIP addresses.
    addresses: &'a [String],
}

/// Where a node is, for the run's pods.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// This machine, in its network, and it finds the images.
    Here,
    /// Not this machine (in its network), and it finds the images: why not.
    Elsewhere(String),
    /// The run's pods could not run there: why.
    Refused(String),
}

/// Is the node this machine (its boot id: the same kernel) in this machine's
/// network (one of its addresses is one of ours: a node in a container on this
/// machine, like kind's, has the same boot id but a network of its own)? And
/// does it find the images: on this machine's Docker engine, where they are
/// built (kubelet's dockershim on that engine sees them), or in `[cluster]
/// registry`, which a node that is not this machine needs.
fn judge(h: &Here, local: impl Fn(&str) -> bool) -> Verdict {
    let elsewhere = if h.node_boot.is_empty() || h.node_boot != h.boot {
        Some(format!(
            "is not this machine (its boot id {:?}, this machine's {:?})",
            h.node_boot, h.boot
        ))
    } else if !h.addresses.is_empty() && !h.addresses.iter().any(|a| local(a)) {
        Some(format!(
            "is on this machine but not in its network (its addresses {} are not this \
             machine's: a node in a container, like kind's)",
            h.addresses.join(", ")
        ))
    } else {
        None
    };
    match elsewhere {
        Some(why) if !h.pulls => Verdict::Refused(format!(
            "{why}: it cannot see the run's images, which are built on this machine's \
             Docker engine: set [cluster] registry to push them where the node pulls them"
        )),
        Some(why) => Verdict::Elsewhere(why),
        None if !h.pulls && !h.runtime.starts_with("docker://") => Verdict::Refused(format!(
            "runs its pods on {:?}, not on this machine's Docker engine, where the run's \
             images are built: set [cluster] registry to push them where the node pulls them",
            h.runtime
        )),
        None => Verdict::Here,
    }
}

/// Is `addr` an address of this network namespace (one a socket can bind)?
fn is_local_address(addr: &str) -> bool {
    addr.parse::<std::net::IpAddr>()
        .ok()
        .is_some_and(|ip| std::net::UdpSocket::bind((ip, 0)).is_ok())
}

#[cfg(test)]
mod tests {
    use super::{judge, Here, Verdict};

    fn here<'a>(
        node_boot: &'a str,
        runtime: &'a str,
        pulls: bool,
        addresses: &'a [String],
    ) -> Here<'a> {
        Here {
            boot: "b1",
            node_boot,
            runtime,
            pulls,
            addresses,
        }
    }

    fn refused(v: Verdict) -> String {
        match v {
            Verdict::Refused(why) => why,
            v => panic!("not refused: {v:?}"),
        }
    }

    #[test]
    fn a_node_is_here_elsewhere_or_refused_by_machine_network_and_images() {
        let ours = vec!["10.0.0.5".to_string()];
        let local = |a: &str| a == "10.0.0.5";
        assert_eq!(
            judge(&here("b1", "docker://20.10.5", false, &ours), local),
            Verdict::Here
        );
        // Another machine: only with a registry, which its engine pulls from.
        let other = refused(judge(&here("b2", "docker://20.10.5", false, &ours), local));
        assert!(
            other.contains("is not this machine")
                && other.contains("b2")
                && other.contains("set [cluster] registry"),
            "{other}"
        );
        match judge(&here("b2", "containerd://1.6.4", true, &ours), local) {
            Verdict::Elsewhere(why) => assert!(why.contains("is not this machine"), "{why}"),
            v => panic!("{v:?}"),
        }
        assert!(matches!(
            judge(&here("", "docker://20.10.5", true, &ours), local),
            Verdict::Elsewhere(_)
        ));
        // containerd on this machine: its images are not the engine's, unless a
        // registry brings them.
        let cd = refused(judge(
            &here("b1", "containerd://1.6.4", false, &ours),
            local,
        ));
        assert!(
            cd.contains("containerd://1.6.4") && cd.contains("[cluster] registry"),
            "{cd}"
        );
        assert_eq!(
            judge(&here("b1", "containerd://1.6.4", true, &ours), local),
            Verdict::Here
        );
        // kind: this kernel, a network of its own: elsewhere, with a registry.
        let kind = vec!["172.18.0.2".to_string()];
        match judge(&here("b1", "containerd://1.6.4", true, &kind), local) {
            Verdict::Elsewhere(why) => {
                assert!(
                    why.contains("not in its network") && why.contains("172.18.0.2"),
                    "{why}"
                )
            }
            v => panic!("{v:?}"),
        }
        let k = refused(judge(&here("b1", "docker://20.10.5", false, &kind), local));
        assert!(
            k.contains("not in its network") && k.contains("[cluster] registry"),
            "{k}"
        );
    }

    #[test]
    fn loopback_is_local_and_a_documentation_address_is_not() {
        assert!(super::is_local_address("127.0.0.1"));
        assert!(!super::is_local_address("192.0.2.1"));
        assert!(!super::is_local_address("not an address"));
    }

    #[tokio::test]
    async fn a_node_this_machine_cannot_reach_is_said_with_its_address() {
        // A port nothing listens on, on this machine: refused at once, and
        // said for the run to refuse where it needs the node's address.
        let port = crate::proc::free_port("127.0.0.1").expect("port");
        let r = super::reach(
            "n1",
            "is not this machine",
            &["127.0.0.1".into()],
            port.into(),
        )
        .await
        .expect("tried");
        let e = r.unreached.expect("nothing listens");
        assert!(
            e.contains("node n1 is not this machine") && e.contains(&format!("127.0.0.1:{port}")),
            "{e}"
        );
        let e = super::reach("n1", "x", &[], 10250)
            .await
            .expect_err("no address");
        assert!(format!("{e:#}").contains("no InternalIP"), "{e:#}");
        // Something listening: reached, and this machine's address on the route.
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        let r = super::reach("n1", "x", &["127.0.0.1".into()], port.into())
            .await
            .expect("reached");
        assert_eq!(r.node_ip.to_string(), "127.0.0.1");
        assert_eq!(r.harness_ip.to_string(), "127.0.0.1");
        assert!(r.unreached.is_none(), "{:?}", r.unreached);
    }
}

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

/// What the reaper's pod needs to reach the API server as the harness does: the
/// same server URL (its pod is on the host's network of the harness's node), the
/// kubeconfig's token and CA.
pub fn reaper_access(c: &Cluster) -> Result<super::reaper::ReaperAccess> {
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
    Ok(super::reaper::ReaperAccess {
        server: c.server.trim_end_matches('/').to_string(),
        token,
        ca_pem,
        node: Some(c.node.clone()),
        host_network: true,
        docker_socket: Some("/var/run/docker.sock".to_string())
            .filter(|s| std::path::Path::new(s).exists()),
        pull: None,
    })
}

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
/// node pulls the images from there); `elect`: `[lock] apiserver = "cluster"`.
pub async fn connect(
    given: Option<&Path>,
    node: Option<&str>,
    registry: bool,
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
                 (SelfSubjectAccessReview said no); the RBAC a run needs is in docs/backends.md",
                path.display(),
                if namespaced {
                    " in a namespace of its own"
                } else {
                    ""
                }
            );
        }
    }
    let node = this_node(&client, node, registry).await?;
    Ok(Cluster {
        client,
        streams,
        config,
        kubeconfig: path,
        source,
        server,
        version,
        node,
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

/// The node the run's pods go to. They use the host's network and the harness
/// reaches them on loopback addresses, as its own processes, and their images are
/// built on this machine's Docker engine: so it is the node the harness runs on —
/// `wanted` (`[cluster] node`), else the local cluster's (`fencecheck cluster
/// up`), a node named as this machine, or the only node — and it must be Ready,
/// this machine in its network, and run its pods on Docker unless `registry`
/// (`not_here`).
async fn this_node(client: &kube::Client, wanted: Option<&str>, registry: bool) -> Result<String> {
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
             this machine: {host}): the backend's pods use the host's network of the \
             harness's own node; running them on other nodes is not built yet"
        ),
    };
    let n = list
        .items
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node.as_str()));
    let status = n.and_then(|n| n.status.as_ref());
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status == "True")
        .unwrap_or(false);
    if !ready {
        return Err(NodeError(format!("backend \"kubernetes\": node {node} is not Ready")).into());
    }
    let info = status.and_then(|s| s.node_info.as_ref());
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|b| b.trim().to_string())
        .unwrap_or_default();
    let node_boot = info.map(|i| i.boot_id.as_str()).unwrap_or_default();
    let runtime = info
        .map(|i| i.container_runtime_version.as_str())
        .unwrap_or_default();
    let addresses: Vec<String> = status
        .and_then(|s| s.addresses.as_ref())
        .map(|a| {
            a.iter()
                .filter(|a| a.type_ == "InternalIP" || a.type_ == "ExternalIP")
                .map(|a| a.address.clone())
                .collect()
        })
        .unwrap_or_default();
    let here = Here {
        boot: &boot,
        node_boot,
        runtime,
        pulls: registry,
        addresses: &addresses,
    };
    if let Some(why) = not_here(&here, is_local_address) {
        return Err(NodeError(format!("backend \"kubernetes\": node {node} {why}")).into());
    }
    Ok(node)
}

/// What `not_here` judges a node by.
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

/// Why the run's pods could not run on this node, if they could not. They use the
/// host's network and mount the run directory and the fencecheck binary from the
/// node, so the node must be this machine (its boot id: the same kernel), in this
/// machine's network (one of its addresses is one of ours: a node in a container
/// on this machine, like kind's, has the same boot id but a network of its own),
/// and must find the images: on this machine's Docker engine, where they are
/// built (kubelet's dockershim sees them), or in `[cluster] registry`.
fn not_here(h: &Here, local: impl Fn(&str) -> bool) -> Option<String> {
    if h.node_boot.is_empty() || h.node_boot != h.boot {
        return Some(format!(
            "is not this machine (its boot id {:?}, this machine's {:?}): the run's pods \
             use the host's network and mount the run directory from the node, so they \
             could not reach the harness on loopback addresses; running them on other \
             machines' nodes is not built",
            h.node_boot, h.boot
        ));
    }
    if !h.addresses.is_empty() && !h.addresses.iter().any(|a| local(a)) {
        return Some(format!(
            "is on this machine but not in its network (its addresses {} are not this \
             machine's: a node in a container, like kind's): the run's pods on the host's \
             network could not reach the harness on loopback addresses",
            h.addresses.join(", ")
        ));
    }
    if !h.pulls && !h.runtime.starts_with("docker://") {
        return Some(format!(
            "runs its pods on {:?}, not on this machine's Docker engine, where the run's \
             images are built: set [cluster] registry to push them where the node pulls them",
            h.runtime
        ));
    }
    None
}

/// Is `addr` an address of this network namespace (one a socket can bind)?
fn is_local_address(addr: &str) -> bool {
    addr.parse::<std::net::IpAddr>()
        .ok()
        .is_some_and(|ip| std::net::UdpSocket::bind((ip, 0)).is_ok())
}

#[cfg(test)]
mod tests {
    use super::{not_here, Here};

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

    #[test]
    fn only_a_node_of_this_machine_in_its_network_that_finds_the_images_is_here() {
        let ours = vec!["10.0.0.5".to_string()];
        let local = |a: &str| a == "10.0.0.5";
        assert_eq!(
            not_here(&here("b1", "docker://20.10.5", false, &ours), local),
            None
        );
        let other = not_here(&here("b2", "docker://20.10.5", false, &ours), local)
            .expect("another machine");
        assert!(
            other.contains("is not this machine") && other.contains("b2"),
            "{other}"
        );
        assert!(not_here(&here("", "docker://20.10.5", false, &ours), local).is_some());
        // containerd on this machine: its images are not the engine's, unless a
        // registry brings them.
        let cd =
            not_here(&here("b1", "containerd://1.6.4", false, &ours), local).expect("containerd");
        assert!(
            cd.contains("containerd://1.6.4") && cd.contains("[cluster] registry"),
            "{cd}"
        );
        assert_eq!(
            not_here(&here("b1", "containerd://1.6.4", true, &ours), local),
            None
        );
        // kind: this kernel, a network of its own; a registry does not help.
        let kind = vec!["172.18.0.2".to_string()];
        let k = not_here(&here("b1", "containerd://1.6.4", true, &kind), local).expect("kind");
        assert!(
            k.contains("not in its network") && k.contains("172.18.0.2"),
            "{k}"
        );
    }

    #[test]
    fn loopback_is_local_and_a_documentation_address_is_not() {
        assert!(super::is_local_address("127.0.0.1"));
        assert!(!super::is_local_address("192.0.2.1"));
        assert!(!super::is_local_address("not an address"));
    }
}

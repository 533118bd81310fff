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
    use base64::Engine;
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
    let ca_pem = c
        .config
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
        .collect::<String>();
    Ok(super::reaper::ReaperAccess {
        server: c.server.trim_end_matches('/').to_string(),
        token,
        ca_pem,
        node: Some(c.node.clone()),
        host_network: true,
        docker_socket: Some("/var/run/docker.sock".to_string())
            .filter(|s| std::path::Path::new(s).exists()),
    })
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
/// scenario's `[cluster] node`.
pub async fn connect(given: Option<&Path>, node: Option<&str>) -> Result<Cluster> {
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
    for &(verb, group, resource, sub, namespaced) in NEEDED {
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
    let node = this_node(&client, node).await?;
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
/// built on this machine's Docker engine (no registry): so it is the node the
/// harness runs on — `wanted` (`[cluster] node`), else the local cluster's
/// (`fencecheck cluster up`), a node named as this machine, or the only node —
/// and it must be Ready, this machine, and run its pods on Docker.
async fn this_node(client: &kube::Client, wanted: Option<&str>) -> Result<String> {
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
    if let Some(why) = not_here(&boot, node_boot, runtime) {
        return Err(NodeError(format!(
            "backend \"kubernetes\": node {node} {why}: the run's images are built on this \
             machine's Docker engine and would not be on it (pushing them to a registry, \
             [cluster] registry, is not built), and its pods could not reach the harness on \
             loopback addresses"
        ))
        .into());
    }
    Ok(node)
}

/// Why a node with boot id `node_boot` and container runtime `runtime` is not
/// this machine's Docker engine, if it is not. The same boot id means the same
/// kernel (a node in a container on this machine, like kind's, has it too), so the
/// runtime must be Docker as well: kubelet's dockershim sees the engine's images.
fn not_here(boot: &str, node_boot: &str, runtime: &str) -> Option<String> {
    if node_boot.is_empty() || node_boot != boot {
        return Some(format!(
            "is not this machine (its boot id {node_boot:?}, this machine's {boot:?})"
        ));
    }
    if !runtime.starts_with("docker://") {
        return Some(format!(
            "runs its pods on {runtime:?}, not on this machine's Docker engine"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::not_here;

    #[test]
    fn only_a_docker_node_with_this_boot_id_is_here() {
        assert_eq!(not_here("b1", "b1", "docker://20.10.5"), None);
        let other = not_here("b1", "b2", "docker://20.10.5").expect("another machine");
        assert!(
            other.contains("is not this machine") && other.contains("b2"),
            "{other}"
        );
        assert!(not_here("b1", "", "docker://20.10.5").is_some());
        let kind = not_here("b1", "b1", "containerd://1.6.4").expect("containerd");
        assert!(kind.contains("containerd://1.6.4"), "{kind}");
    }
}

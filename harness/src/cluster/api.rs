//! The cluster's API as its users see it: the kubeconfig file `up` writes (the
//! static token and the CA, for the kubelet, the tests and anyone's `kubectl`), a
//! kube-rs client made from that same file, the node's Ready condition, and the
//! `default` service account.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// A call's own limit: a status or a poll must not hang on an apiserver that is
/// stopped (SIGSTOP) or gone.
const CALL: Duration = Duration::from_secs(3);

/// The kubeconfig of the cluster: one cluster, one user (the static token of group
/// `system:masters`), one context, current.
pub fn kubeconfig(server: &str, ca_pem: &str, token: &str) -> String {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: fencecheck-local
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: fencecheck
  user:
    token: {token}
contexts:
- name: fencecheck-local
  context:
    cluster: fencecheck-local
    user: fencecheck
    namespace: default
current-context: fencecheck-local
"
    )
}

/// A client of the cluster, made from its kubeconfig file.
pub async fn client(kubeconfig: &Path) -> Result<kube::Client> {
    client_with(kubeconfig, Some(CALL)).await.map(|(c, _)| c)
}

/// A client made from any kubeconfig file (its current context), with the
/// config it was made from; `read_timeout` None for streams that stay quiet.
pub async fn client_with(
    kubeconfig: &Path,
    read_timeout: Option<Duration>,
) -> Result<(kube::Client, kube::Config)> {
    let kc = Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("cannot read the kubeconfig {}", kubeconfig.display()))?;
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("the kubeconfig {}", kubeconfig.display()))?;
    cfg.connect_timeout = Some(Duration::from_secs(2));
    cfg.read_timeout = read_timeout;
    let client = kube::Client::try_from(cfg.clone()).context("Kubernetes client")?;
    Ok((client, cfg))
}

/// The node's Ready condition: (status, "reason: message"), None when the node
/// is not registered (yet).
pub async fn node_ready(client: &kube::Client, node: &str) -> Result<Option<(String, String)>> {
    let nodes: Api<Node> = Api::all(client.clone());
    let n = tokio::time::timeout(CALL, nodes.get_opt(node))
        .await
        .context("the apiserver did not answer")?
        .with_context(|| format!("get node {node}"))?;
    Ok(n.and_then(|n| {
        n.status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| {
                (
                    c.status,
                    format!(
                        "{}: {}",
                        c.reason.unwrap_or_default(),
                        c.message.unwrap_or_default()
                    ),
                )
            })
    }))
}

/// Creates the `default` service account of namespace `default` (a pod names it
/// unless told otherwise): without a controller-manager nothing else does. There
/// already: fine. Returns whether it was created now.
pub async fn ensure_default_service_account(client: &kube::Client) -> Result<bool> {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some("default".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    match tokio::time::timeout(CALL, sas.create(&PostParams::default(), &sa))
        .await
        .context("the apiserver did not answer")?
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e).context("create serviceaccount default/default"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubeconfig_reads_back_as_one_current_context_with_the_token() {
        let text = kubeconfig(
            "https://127.0.0.1:32443",
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
            "abc",
        );
        let kc = Kubeconfig::from_yaml(&text).expect("parses");
        assert_eq!(kc.current_context.as_deref(), Some("fencecheck-local"));
        let user = kc.auth_infos[0].auth_info.as_ref().expect("user");
        assert!(user.token.is_some());
        let cluster = kc.clusters[0].cluster.as_ref().expect("cluster");
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:32443"));
        assert!(cluster.certificate_authority_data.is_some());
    }
}

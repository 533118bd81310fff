//! `[lock] apiserver = "cluster"`: the electors elect on the cluster's own API
//! server — the one the kubeconfig names, which is what a team's controllers
//! elect on — instead of a kube-apiserver of the run's own.
//!
//! The Leases go in the run's namespace, so they go with it. The workers (and
//! their adapters) act as a service account of the run's own, `fencecheck-elector`,
//! bound to a Role that allows the Lease verbs in that namespace and nothing
//! else, with a token from the TokenRequest API: the kubeconfig's own credentials
//! (possibly an administrator's, possibly an exec plugin's) never reach a worker.
//! The harness watches the Leases with that token too. The workers reach the API
//! server through their fault proxies, as any member, and check its certificate
//! against the kubeconfig's CA and the name the kubeconfig reaches it by.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};

use super::connect::Cluster;
use super::RUN_LABEL;
use crate::systems::service::ServiceAccess;

/// The service account, Role and RoleBinding the electors act as.
pub const ELECTOR: &str = "fencecheck-elector";
/// What an elector does to a Lease (client-go's, the harness's watch, and the
/// takeover the harness writes for `expire-session`).
const LEASE_VERBS: &[&str] = &[
    "get", "list", "watch", "create", "update", "patch", "delete",
];

/// The verbs beyond [`super::connect::NEEDED`] such a run needs, all in its
/// namespace: the elector's account, its token, its Role and binding — and the
/// Lease verbs themselves, because RBAC lets a user grant only what it holds.
pub fn needed() -> Vec<(&'static str, &'static str, &'static str, &'static str, bool)> {
    let mut v = vec![
        ("create", "", "serviceaccounts", "token", true),
        ("create", "rbac.authorization.k8s.io", "roles", "", true),
        // Deleted with the namespace where no controller does (`namespace::empty`).
        (
            "deletecollection",
            "rbac.authorization.k8s.io",
            "roles",
            "",
            true,
        ),
        (
            "deletecollection",
            "rbac.authorization.k8s.io",
            "rolebindings",
            "",
            true,
        ),
        (
            "create",
            "rbac.authorization.k8s.io",
            "rolebindings",
            "",
            true,
        ),
    ];
    v.extend(
        LEASE_VERBS
            .iter()
            .map(|&verb| (verb, "coordination.k8s.io", "leases", "", true)),
    );
    v
}

/// Where the workers reach the cluster's API server and how they check it: its
/// address (resolved now), the kubeconfig's CA, and the name its certificate is
/// for. Found before anything is created.
pub struct Target {
    pub addr: SocketAddr,
    pub ca_pem: String,
    pub server_name: String,
}

pub async fn target(c: &Cluster) -> Result<Target> {
    let url = &c.config.cluster_url;
    let host = url
        .host()
        .context("the kubeconfig's server has no host")?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = url.port_u16().unwrap_or(443);
    if c.config.accept_invalid_certs {
        bail!(
            "lock.apiserver = \"cluster\": the kubeconfig {} skips the API server's certificate \
             check (insecure-skip-tls-verify); the electors check it, so it needs the cluster's \
             certificate-authority",
            c.kubeconfig.display()
        );
    }
    let ca_pem = super::connect::ca_pem(&c.config);
    if ca_pem.is_empty() {
        bail!(
            "lock.apiserver = \"cluster\": the kubeconfig {} names no certificate-authority for \
             its server {}; the electors need the CA that signed the API server's certificate",
            c.kubeconfig.display(),
            c.server
        );
    }
    let addr = tokio::net::lookup_host((host.as_str(), port))
        .await
        .ok()
        .and_then(|mut a| a.next())
        .with_context(|| {
            format!(
                "lock.apiserver = \"cluster\": cannot resolve the API server's host {host} \
                 (kubeconfig {})",
                c.kubeconfig.display()
            )
        })?;
    Ok(Target {
        addr,
        ca_pem,
        server_name: c.config.tls_server_name.clone().unwrap_or(host),
    })
}

/// The electors' account in namespace `ns`, allowed the Lease verbs there and
/// nothing else, and its token (valid for `valid`, at least the API server's
/// ten-minute minimum).
pub async fn grant(
    client: &kube::Client,
    ns: &str,
    run_id: &str,
    t: &Target,
    valid: Duration,
) -> Result<ServiceAccess> {
    let meta = || ObjectMeta {
        name: Some(ELECTOR.into()),
        labels: Some(BTreeMap::from([(
            RUN_LABEL.to_string(),
            run_id.to_string(),
        )])),
        ..Default::default()
    };
    let pp = PostParams::default();
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    sas.create(
        &pp,
        &ServiceAccount {
            metadata: meta(),
            ..Default::default()
        },
    )
    .await
    .with_context(|| format!("create serviceaccount {ns}/{ELECTOR}"))?;
    Api::<Role>::namespaced(client.clone(), ns)
        .create(
            &pp,
            &Role {
                metadata: meta(),
                rules: Some(vec![PolicyRule {
                    api_groups: Some(vec!["coordination.k8s.io".into()]),
                    resources: Some(vec!["leases".into()]),
                    verbs: LEASE_VERBS.iter().map(|v| v.to_string()).collect(),
                    ..Default::default()
                }]),
            },
        )
        .await
        .with_context(|| format!("create role {ns}/{ELECTOR}"))?;
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .create(
            &pp,
            &RoleBinding {
                metadata: meta(),
                role_ref: RoleRef {
                    api_group: "rbac.authorization.k8s.io".into(),
                    kind: "Role".into(),
                    name: ELECTOR.into(),
                },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".into(),
                    name: ELECTOR.into(),
                    namespace: Some(ns.into()),
                    ..Default::default()
                }]),
            },
        )
        .await
        .with_context(|| format!("create rolebinding {ns}/{ELECTOR}"))?;
    let req = TokenRequest {
        spec: TokenRequestSpec {
            // The API server's own audience (empty: its default).
            audiences: Vec::new(),
            expiration_seconds: Some(valid.as_secs().max(600) as i64),
            ..Default::default()
        },
        ..Default::default()
    };
    let token = sas
        .create_token_request(ELECTOR, &pp, &req)
        .await
        .with_context(|| format!("a token for serviceaccount {ns}/{ELECTOR} (TokenRequest)"))?
        .status
        .context("the TokenRequest came back without a token")?
        .token;
    Ok(ServiceAccess {
        token,
        ca_pem: t.ca_pem.clone(),
        server_name: t.server_name.clone(),
        namespace: ns.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The preflight asks for every verb the grant uses.
    #[test]
    fn the_preflight_covers_the_role_it_grants() {
        let n = needed();
        for v in LEASE_VERBS {
            assert!(
                n.contains(&(v, "coordination.k8s.io", "leases", "", true)),
                "{v}"
            );
        }
        assert!(n.contains(&("create", "", "serviceaccounts", "token", true)));
        assert!(n.iter().all(|(_, _, _, _, namespaced)| *namespaced));
    }
}

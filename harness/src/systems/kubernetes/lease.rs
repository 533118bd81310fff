//! Kubernetes' keyspace contract, shared by the worker's elector, the harness's
//! observer and the external adapters' owners: one `coordination.k8s.io/v1` Lease
//! per storage key, named `fencecheck-<key>`, in namespace `default` on the run's
//! own apiserver and in the run's namespace on the cluster's ([`ServiceAccess`]'s
//! `namespace`); a holder's
//! `holderIdentity` is an [`OwnerValue`] (`<worker>:<pid>:<session>:0`), so the
//! harness reads which worker and session hold a Lease off the Lease itself. The
//! API is reached with the run's own token and CA ([`ServiceAccess`]).

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};

use crate::record::observe::OwnerValue;
use crate::systems::service::ServiceAccess;

/// The namespace every Lease is in on the run's own apiserver (its bootstrap
/// controller makes it).
pub const NAMESPACE: &str = ServiceAccess::DEFAULT_NAMESPACE;
const PREFIX: &str = "fencecheck-";
/// The identity the harness writes into a Lease to take it away from its holder
/// (`expire-session`): what an operator with `kubectl` could do.
pub const HARNESS_IDENTITY: &str = "fencecheck-harness";

/// The Lease that guards storage key `key`.
pub fn lease_name(key: &str) -> String {
    format!("{PREFIX}{}", key.to_ascii_lowercase())
}

/// The storage key a Lease guards, if it is one of fencecheck's.
pub fn key_of(lease: &str) -> Option<&str> {
    lease.strip_prefix(PREFIX)
}

/// The identity of worker `worker`'s session `session`.
pub fn identity(worker: u32, session: i64) -> String {
    OwnerValue {
        worker,
        pid: std::process::id(),
        session,
        nonce: 0,
    }
    .to_string()
}

/// A Lease's holder, its resourceVersion, its transitions and its duration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub holder: Option<String>,
    pub resource_version: i64,
    pub transitions: i32,
    pub duration_s: i32,
    pub renew_time: Option<MicroTime>,
    pub acquire_time: Option<MicroTime>,
}

impl Record {
    pub fn of(l: &Lease) -> Record {
        let spec = l.spec.clone().unwrap_or_default();
        Record {
            holder: spec.holder_identity.filter(|h| !h.is_empty()),
            resource_version: resource_version(l),
            transitions: spec.lease_transitions.unwrap_or(0),
            duration_s: spec.lease_duration_seconds.unwrap_or(0),
            renew_time: spec.renew_time,
            acquire_time: spec.acquire_time,
        }
    }

    /// The holder as a worker's session, when it is one.
    pub fn owner(&self) -> Option<OwnerValue> {
        self.holder.as_deref().and_then(OwnerValue::parse)
    }
}

/// The object's resourceVersion as a number (etcd's revision under it; 0 unread).
pub fn resource_version(l: &Lease) -> i64 {
    l.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

pub fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

/// A new Lease named `name` held by `holder`.
pub fn new_lease(name: &str, holder: &str, duration: Duration) -> Lease {
    Lease {
        metadata: ObjectMeta {
            // The namespace is the API's (`api`): the URL names it.
            name: Some(name.to_string()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.to_string()),
            lease_duration_seconds: Some(duration.as_secs() as i32),
            acquire_time: Some(now()),
            renew_time: Some(now()),
            lease_transitions: Some(0),
            ..Default::default()
        }),
    }
}

/// `old` rewritten for `holder` as client-go's `tryAcquireOrRenew` does: the same
/// holder keeps its acquire time and transitions; another one gets a new acquire
/// time and one more transition. The resourceVersion stays what was read, so a
/// concurrent change makes the update fail with 409.
pub fn taken_by(old: &Lease, holder: &str, duration: Duration) -> Lease {
    let mut l = old.clone();
    let spec = l.spec.get_or_insert_with(Default::default);
    let same = spec.holder_identity.as_deref() == Some(holder);
    if !same {
        spec.acquire_time = Some(now());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    spec.holder_identity = Some(holder.to_string());
    spec.lease_duration_seconds = Some(duration.as_secs() as i32);
    spec.renew_time = Some(now());
    l
}

/// `old` let go of, as client-go's `release` does (`ReleaseOnCancel`): no holder,
/// a one-second duration, the transitions kept.
pub fn released(old: &Lease) -> Lease {
    let mut l = old.clone();
    let spec = l.spec.get_or_insert_with(Default::default);
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(now());
    l
}

/// The Lease API of the access's namespace at `endpoint` (`host:port`), with the
/// run's token and CA. The certificate is checked against the name it was made
/// for, not the address: workers reach the apiserver through their own proxies.
pub fn api(endpoint: &str, access: &ServiceAccess) -> Result<Api<Lease>> {
    let url: http::Uri = format!("https://{endpoint}")
        .parse()
        .with_context(|| format!("apiserver address {endpoint}"))?;
    let mut cfg = kube::Config::new(url);
    cfg.root_cert = Some(pem_certs(&access.ca_pem)?);
    cfg.tls_server_name = Some(access.server_name.clone());
    cfg.default_namespace = access.namespace.clone();
    cfg.connect_timeout = Some(Duration::from_secs(2));
    // An elector's calls fail rather than retry: client-go does not retry either,
    // and a retry would move its renew past the deadline it measures.
    cfg.default_retry = false;
    cfg.headers = vec![(
        http::header::AUTHORIZATION,
        format!("Bearer {}", access.token)
            .parse()
            .context("the run's token")?,
    )];
    let client = kube::Client::try_from(cfg).context("Kubernetes client")?;
    Ok(Api::namespaced(client, &access.namespace))
}

fn pem_certs(pem: &str) -> Result<Vec<Vec<u8>>> {
    let certs: Vec<Vec<u8>> = pem
        .split("-----BEGIN CERTIFICATE-----")
        .skip(1)
        .filter_map(|b| b.split("-----END CERTIFICATE-----").next())
        .map(|b64| {
            use base64::Engine;
            let s: String = b64.chars().filter(|c| !c.is_whitespace()).collect();
            base64::engine::general_purpose::STANDARD.decode(s)
        })
        .collect::<Result<_, _>>()
        .context("the run's CA certificate")?;
    anyhow::ensure!(!certs.is_empty(), "the run's CA holds no certificate");
    Ok(certs)
}

/// Whether a call failed because the object changed (409) or exists already.
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Creates `l` (409 when it exists).
pub async fn create(api: &Api<Lease>, l: &Lease) -> kube::Result<Lease> {
    api.create(&PostParams::default(), l).await
}

/// Replaces `l` with the resourceVersion it carries (409 when it changed since).
pub async fn replace(api: &Api<Lease>, l: &Lease) -> kube::Result<Lease> {
    let name = l.metadata.name.clone().unwrap_or_default();
    api.replace(&name, &PostParams::default(), l).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_takeover_counts_a_transition_and_a_renew_does_not() {
        let l = new_lease("fencecheck-k0", "1:2:3:0", Duration::from_secs(3));
        let renewed = taken_by(&l, "1:2:3:0", Duration::from_secs(3));
        assert_eq!(Record::of(&renewed).transitions, 0);
        let taken = taken_by(&renewed, "4:5:6:0", Duration::from_secs(3));
        let r = Record::of(&taken);
        assert_eq!((r.transitions, r.holder.as_deref()), (1, Some("4:5:6:0")));
        assert_eq!(r.owner().map(|o| (o.worker, o.session)), Some((4, 6)));
        let gone = Record::of(&released(&taken));
        assert_eq!(
            (gone.holder, gone.transitions, gone.duration_s),
            (None, 1, 1)
        );
    }

    #[test]
    fn lease_names_map_back_to_their_keys() {
        assert_eq!(lease_name("k0"), "fencecheck-k0");
        assert_eq!(key_of("fencecheck-k0"), Some("k0"));
        assert_eq!(key_of("kube-scheduler"), None);
    }
}
